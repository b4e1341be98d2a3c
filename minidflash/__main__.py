"""``python -m minidflash <command>``: one entry point for the tools.

    demo           speculative-decode a few held-out prompts, show what the drafter got right
    bench          plain vs DFlash over prompt suites, one process (tau, speedup, identity)
    train          train a DFlash drafter (the paper's recipe) for the tiny target or --target
    prompts        a file of training prompts of one kind, none sharing 8 words with a suite
    answers        a target's answers to the training prompts as token ids, for train --answers
    train-target   train the tiny Qwen3 target and its tokenizer
    eval-target    the tiny target's accuracy and loops per domain
    ablations      the paper's ablations at tiny scale
    parity         numerical parity with the authors' reference code (--reference DIR)
    bench-kernel   the Triton kernel against SDPA and FlexAttention (a GPU)
    suites         rewrite data/prompts/<suite>.jsonl from the published wheels
    tau-curve      tau against training steps, decoding with snapshots of a training run
    misses         which tokens a drafter misses: each step by the target's first token
    budget         the verify budget: a pass's cost over 1..16 tokens, the drafter's calibration
    step-profile   where a target pass's time goes: matmul, attention, norms, cache, overhead
    products       a pass's fp32 products over 1..16 rows, each way the CPU offers (packed or not)
    exact-attention  exact mode's attention against SDPA, one layer: chain and tree, per thread
    llama-cpp      a drafter in llama.cpp: converted, run plain and speculative (LLAMA_CPP_DIR)

``python -m minidflash <command> --help`` for each command's options. A value a command refuses
is one line (``python -m minidflash <command>: error: ...``, exit status 2), never a traceback.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {  # command -> (module under minidflash.tools, keyword arguments of its main)
    "demo": ("measure.demo", {}),
    "bench": ("measure.bench", {}),
    "train": ("train.train_drafter", {}),
    "prompts": ("make_data.prompts", {}),
    "answers": ("make_data.answers", {}),
    "train-target": ("train.tiny_target", {}),
    "eval-target": ("train.tiny_target", {"evaluate_only": True}),
    "ablations": ("measure.ablations", {}),
    "parity": ("measure.parity", {}),
    "bench-kernel": ("measure.bench_kernel", {}),
    "suites": ("make_data.suites", {}),
    "tau-curve": ("measure.tau_curve", {}),
    "misses": ("measure.misses", {}),
    "budget": ("measure.budget", {}),
    "step-profile": ("measure.step_profile", {}),
    "products": ("measure.products", {}),
    "exact-attention": ("measure.exact_attention", {}),
    "llama-cpp": ("measure.llama_cpp_bench", {}),
}


def commands() -> str:
    """The commands, one line each (this module's list): what ``python -m minidflash`` and its
    --help print."""
    listed = [line for line in __doc__.splitlines() if line.startswith("    ")]
    return "\n".join(["usage: python -m minidflash <command> [options]", "", *listed, "",
                      "python -m minidflash <command> --help: the command's options"])


def main(argv=None):
    """Run a command. A ValueError or FileNotFoundError that reaches here is a value the command
    refused: one line and exit status 2, as argparse does; any other exception is a bug and
    keeps its traceback."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(commands())
        return None
    if argv[0] not in COMMANDS:
        print(f"python -m minidflash: error: unknown command {argv[0]!r}; the commands are "
              f"{', '.join(COMMANDS)}", file=sys.stderr)
        raise SystemExit(2)
    module, kwargs = COMMANDS[argv[0]]
    command = importlib.import_module(f"minidflash.tools.{module}")
    try:
        return command.main(argv[1:], **kwargs)
    except (ValueError, FileNotFoundError) as e:
        print(f"python -m minidflash {argv[0]}: error: {' '.join(str(e).split())}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    result = main()
    if isinstance(result, int):
        raise SystemExit(result)

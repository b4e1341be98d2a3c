"""``python -m minidflash <command>``: one entry point for the tools.

    demo           speculative-decode a few held-out prompts, show what the drafter got right
    bench          plain vs DFlash over prompt suites, one process (tau, speedup, identity)
    train          train a DFlash drafter for the tiny target (the paper's recipe)
    prompts        a file of training prompts of one kind (Magpie requests the target writes,
                   reasoning-gym's code tasks and math), none sharing 8 words with a suite
    answers        a target's answers to the training prompts, kept as token ids (llama.cpp's
                   server several at a time, or torch), for train --answers
    train-target   train the tiny Qwen3 target and its tokenizer
    eval-target    the shipped tiny target's accuracy and loops per domain
    ablations      the paper's ablations at tiny scale
    parity         numerical parity with the authors' reference code (--reference DIR)
    bench-kernel   the Triton kernel against SDPA and FlexAttention (a GPU)
    suites         rewrite data/prompts/<suite>.jsonl from the published wheels
    tau-curve      tau against training steps, decoding with snapshots of a training run
    misses         which tokens a drafter misses: each step by the target's first token
    budget         the verify budget: a target pass's cost over 1..16 tokens (curve), and how
                   well the drafter's probabilities predict acceptance (calibration)
    step-profile   where a target pass's time goes: matmul, attention, norms, cache, overhead
    llama-cpp      convert a drafter with llama.cpp's converter, run llama.cpp plain and
                   speculative (draft-dflash) on the suites (needs llama.cpp: LLAMA_CPP_DIR)

``python -m minidflash <command> --help`` for each command's options.
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
    "llama-cpp": ("measure.llama_cpp_bench", {}),
}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in COMMANDS:
        print(__doc__)
        if argv and argv[0] not in ("-h", "--help"):
            raise SystemExit(f"unknown command {argv[0]!r}: use one of {', '.join(COMMANDS)}")
        return None
    module, kwargs = COMMANDS[argv[0]]
    return importlib.import_module(f"minidflash.tools.{module}").main(argv[1:], **kwargs)


if __name__ == "__main__":
    result = main()
    if isinstance(result, int):
        raise SystemExit(result)

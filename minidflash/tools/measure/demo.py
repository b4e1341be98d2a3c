"""``python -m minidflash demo``: speculative decoding you can watch, on the shipped tiny models.

Decodes a few held-out prompts twice in one process, with plain decoding (block size 1, the
same code) and with DFlash, checks that the two outputs are identical token for token, marks
the tokens the drafter got right, and prints tau and the speedup. In bf16 (``--dtype``) an
output may part from plain decoding where the two likeliest tokens are a near-tie that the two
passes round differently: the demo then prints where, and the gap in an fp32 pass; a gap of 0.5
or more is a real disagreement, and stops it.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import torch

from ...core.paper import PAPER
from ...paths import PROMPTS_DIR, TINY_DRAFTER_DIR
from ...core.drafter import DFlashDrafter, make_drafter_config
from ...checkpoints import load_drafter
from ...target import chat_ids, load_target, stop_ids
from ...verifier import speculative_generate
from ..common import (add_dtype, add_threads, check_decoding, check_suites, count, or_error,
                      read_jsonl)
from ..flags import add_flags, flag_fields
from .methods import divergence, load_targets
from .render import legend, render

RULE = "=" * 100


def get_drafter(name_or_path, target, tokenizer):
    """The requested drafter; with no shipped one, an untrained drafter (and a warning)."""
    if name_or_path is None and not (TINY_DRAFTER_DIR / "config.json").is_file():
        print(f"note: no trained drafter in {TINY_DRAFTER_DIR} yet; using an UNTRAINED one "
              f"(lossless, but nothing will be accepted). Train one with python -m minidflash train.")
        cfg = make_drafter_config(target.config, num_hidden_layers=1,
                                  mask_token_id=tokenizer.convert_tokens_to_ids(PAPER.mask_token))
        return DFlashDrafter(cfg).eval().requires_grad_(False)
    return load_drafter(name_or_path, target=target)


def check_parting(target, ids, plain: list, other: list, fp32=None) -> None:
    """An output that parts from plain decoding: say where and at what gap in ``fp32`` (the
    target's fp32 copy); stop unless the target is not fp32 and the two tokens are a near-tie
    (fp32 gap below 0.5)."""
    if target.dtype == torch.float32:
        raise SystemExit("output differs from plain decoding in fp32: losslessness is broken")
    d = divergence(target, ids, plain, other, fp32)
    gap = d["gap_fp32"]
    print(f"parts from plain {str(target.dtype).replace('torch.', '')} decoding at new token "
          f"{d['token']}: logit gap {d['gap']:.3f} in the plain pass, {gap:.3f} in an fp32 pass")
    if gap is None or abs(gap) >= 0.5:
        raise SystemExit("not a near-tie: the target did not choose this token; losslessness "
                         "is broken")


def introduction(block_size: int, mode: str, threads: int, dtype: str = "float32",
                 said: str = "", tiny: str = "") -> str:
    return "\n".join([
        RULE,
        *([tiny] if tiny else []),
        *([f"This run: {said}"] if said else []),
        f"DFlash: the drafter proposes {block_size - 1} tokens in ONE pass; the target checks them in",
        "ONE pass and keeps the longest prefix it agrees with, plus one token of its own.",
        "tau = tokens committed per target pass (1 for plain decoding, at most the block size).",
        *(["The answers are the target's own, exactly what plain decoding writes (DFlash is",
           "lossless; each answer is checked token for token against plain decoding)."]
          if dtype == "float32" else
          ["The answers are the target's own choices; each is checked against plain decoding in",
           f"{dtype}, which may part from it at a near-tie (then shown with its fp32 gap)."]),
        f"Marks: {legend(mode)}.",
        f"Target and drafter in {dtype} (--dtype; auto: bf16 where this CPU has bf16 matrix units",
        "and the model is large enough to gain, fp32 elsewhere).",
        f"Timings: {threads} torch thread(s); on a shared machine they vary by up to 2x between runs,",
        "so read the speedup (both decoders alternate in this one process), not the ms.",
        RULE])


def tiny_line(target) -> str:
    """What the shipped tiny target is, in one line: a reader should not take its answers for a
    chat model's."""
    size = sum(q.numel() for q in target.parameters()) / 1e6
    return (f"The target here is tiny: a {size:.1f}M-parameter model trained on arithmetic word "
            f"problems (and some Python), and its answers are often wrong; what to watch is how "
            f"much of each the drafter guessed.")


def shown(tokenizer, ids: list[int], drafted: list[bool]) -> tuple[list[int], list[bool]]:
    """The new tokens without the special ones (the stop, <|im_end|>), with their marks."""
    special = set(tokenizer.all_special_ids)
    drafted = list(drafted) + [False] * (len(ids) - len(drafted))
    keep = [i for i, t in enumerate(ids) if t not in special]
    return [ids[i] for i in keep], [drafted[i] for i in keep]


def demo(args, error) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    target, tokenizer = or_error(error, f"--target {args.target}", load_target, args.target,
                                 dtype=args.dtype)
    drafter = or_error(error, f"--drafter {args.drafter}", get_drafter, args.drafter, target,
                       tokenizer)
    rows = [row for suite in args.suites
            for row in read_jsonl(PROMPTS_DIR / f"{suite}.jsonl")[: args.n]]
    mode = "ansi" if sys.stdout.isatty() and not args.no_color else "plain"
    given = flag_fields(args)   # the drafter's decoding.json with the command line's fields over it
    prompts = [chat_ids(tokenizer, row["messages"]) for row in rows]
    config = check_decoding(error, target, drafter, given, prompts,
                            stop_token_ids=stop_ids(tokenizer))
    said = config.describe(target, drafter)
    B, sampled = config.resolve(drafter).block_size, config.temperature > 0
    print(introduction(B, mode, torch.get_num_threads(), str(target.dtype).replace("torch.", ""),
                       said, tiny_line(target) if args.target is None else ""))
    base_t = spec_t = 0.0
    fp32 = None                                   # the target in fp32, for a bf16 parting's gap
    taus = []
    # warm-up, so the first timed prompt does not pay for one-off allocations
    speculative_generate(target, drafter, chat_ids(tokenizer, rows[0]["messages"]),
                         replace(config, max_new_tokens=8))
    for i, row in enumerate(rows):
        ids = chat_ids(tokenizer, row["messages"])
        seed = lambda: torch.Generator().manual_seed(i)      # sampled: the same draws for both
        plain = speculative_generate(target, drafter, ids, config.override(block_size=1),
                                     generator=seed())
        spec = speculative_generate(target, drafter, ids, config, generator=seed())
        same = torch.equal(plain.output_ids, spec.output_ids)
        base_t += plain.tpot
        spec_t += spec.tpot
        taus.append(spec.tau)
        print("PROMPT:", row["messages"][-1]["content"])
        print("-" * 100)
        print(render(tokenizer, *shown(tokenizer, spec.new_ids.tolist(), spec.drafted), mode))
        print("-" * 100)
        print(f"tokens {spec.num_new_tokens}  tau {spec.tau:.2f}  plain {1e3 * plain.tpot:.1f} ms/token  "
              f"dflash {1e3 * spec.tpot:.1f} ms/token  speedup {plain.tpot / spec.tpot:.2f}x  "
              f"({torch.get_num_threads()} thread)  " + ("sampled: the same distribution as plain "
              "sampling, not the same tokens (notebook 04)" if sampled else
              f"identical to plain decoding: {same}"))
        print(RULE)
        if not same and not sampled:
            fp32 = fp32 or load_targets(target, [])["float32"]      # one copy, when first needed
            check_parting(target, ids, plain.new_ids.tolist(), spec.new_ids.tolist(), fp32)
    print(f"{len(rows)} prompts from {', '.join(args.suites)}: mean tau {sum(taus) / len(taus):.2f}, "
          f"speedup {base_t / spec_t:.2f}x (mean plain TPOT / mean DFlash TPOT, "
          f"{torch.get_num_threads()} torch thread(s))")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m minidflash demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suites", nargs="+", default=["arithmetic"],
                   help="files in data/prompts, without .jsonl (default arithmetic)")
    p.add_argument("--n", type=count, default=3, help="the first n prompts of each suite (default 3)")
    p.add_argument("--target", default=None, help="hub id or directory (default: the tiny target)")
    p.add_argument("--drafter", default=None, help="hub id or directory (default: the tiny drafter)")
    add_threads(p, more=": steadier timings on a shared machine")
    add_dtype(p)
    p.add_argument("--no-color", action="store_true",
                   help="mark the drafted tokens with brackets, not colours, in a terminal too")
    add_flags(p, skip=("record_steps",), why="the demo shows tokens, not steps")
    a = p.parse_args(argv)
    check_suites(p.error, a.suites)
    demo(a, p.error)

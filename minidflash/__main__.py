"""Command line: ``python -m minidflash demo`` (and the subcommands of the other modules).

demo  speculative-decodes a few held-out prompts with the shipped tiny target and drafter,
      prints each answer with the drafted-and-accepted tokens marked, tau, and the speedup over
      plain decoding (block size 1, same code, same process), and checks the two outputs are
      identical token for token.
"""

from __future__ import annotations

import argparse
import sys

import torch

from . import corpus
from .drafter import TINY_DRAFTER_DIR, DFlashDrafter, load_drafter, make_drafter_config
from .target import PROMPTS_DIR, chat_ids, load_target, stop_ids
from .verifier import speculative_generate

GREEN, RESET = "\033[42;30m", "\033[0m"


def get_drafter(name_or_path, target, tokenizer):
    """The requested drafter; with no shipped one, an untrained drafter (and a warning)."""
    if name_or_path is None and not (TINY_DRAFTER_DIR / "config.json").is_file():
        print(f"note: no trained drafter in {TINY_DRAFTER_DIR} yet; using an UNTRAINED one "
              f"(lossless, but nothing will be accepted). Train one with python -m minidflash.trainer.")
        cfg = make_drafter_config(target.config, num_hidden_layers=1, block_size=16,
                                  mask_token_id=tokenizer.convert_tokens_to_ids("<|MASK|>"))
        return DFlashDrafter(cfg).eval().requires_grad_(False)
    return load_drafter(name_or_path, target=target)


def render(tokenizer, ids: list[int], drafted: list[bool], color: bool) -> str:
    """Answer text with each token the drafter got right marked (green, or [brackets])."""
    out, run = [], []
    for tok, good in zip(ids, drafted + [False]):
        if good:
            run.append(tok)
            continue
        if run:
            text = tokenizer.decode(run)
            out.append(f"{GREEN}{text}{RESET}" if color else f"[{text}]")
            run = []
        out.append(tokenizer.decode([tok]))
    if run:
        text = tokenizer.decode(run)
        out.append(f"{GREEN}{text}{RESET}" if color else f"[{text}]")
    return "".join(out)


def demo(args) -> None:
    torch.manual_seed(0)
    target, tokenizer = load_target(args.target)
    drafter = get_drafter(args.drafter, target, tokenizer)
    rows = corpus.read_jsonl(PROMPTS_DIR / f"{args.suite}.jsonl")[: args.n]
    stops = stop_ids(tokenizer)
    color = sys.stdout.isatty() and not args.no_color
    base_t = spec_t = 0.0
    taus = []
    # warm-up, so the first timed prompt does not pay for one-off allocations
    speculative_generate(target, drafter, chat_ids(tokenizer, rows[0]["messages"]), 8)
    for row in rows:
        ids = chat_ids(tokenizer, row["messages"])
        plain = speculative_generate(target, drafter, ids, args.max_new_tokens, block_size=1,
                                     stop_token_ids=stops)
        spec = speculative_generate(target, drafter, ids, args.max_new_tokens,
                                    block_size=args.block_size, stop_token_ids=stops)
        same = torch.equal(plain.output_ids, spec.output_ids)
        base_t += plain.tpot
        spec_t += spec.tpot
        taus.append(spec.tau)
        print("=" * 100)
        print("PROMPT:", row["messages"][-1]["content"])
        print("-" * 100)
        print(render(tokenizer, spec.new_ids.tolist(), spec.drafted, color))
        print("-" * 100)
        print(f"tokens {spec.num_new_tokens}  tau {spec.tau:.2f}  "
              f"plain {1e3 * plain.tpot:.1f} ms/token  dflash {1e3 * spec.tpot:.1f} ms/token  "
              f"speedup {plain.tpot / spec.tpot:.2f}x  identical to plain decoding: {same}")
        if not same:
            raise SystemExit("output differs from plain decoding: losslessness is broken")
    print("=" * 100)
    print(f"{len(rows)} prompts from {args.suite}: mean tau {sum(taus) / len(taus):.2f}, "
          f"speedup {base_t / spec_t:.2f}x (mean plain TPOT / mean DFlash TPOT); "
          f"{'green' if color else '[brackets]'} = drafted and accepted")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m minidflash", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="speculative-decode a few prompts and show what was accepted")
    d.add_argument("--suite", default="arithmetic", help="a file in data/prompts (without .jsonl)")
    d.add_argument("--n", type=int, default=3, help="number of prompts")
    d.add_argument("--max-new-tokens", type=int, default=256)
    d.add_argument("--block-size", type=int, default=None, help="default: the drafter's")
    d.add_argument("--target", default=None, help="hub id or directory (default: the tiny target)")
    d.add_argument("--drafter", default=None, help="hub id or directory (default: the tiny drafter)")
    d.add_argument("--no-color", action="store_true")
    sub.add_parser("bench", add_help=False,
                   help="plain vs DFlash over prompt suites (python -m minidflash bench --help)")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:
        from .bench import main as bench_main
        bench_main(argv[1:])
        return
    demo(p.parse_args(argv))


if __name__ == "__main__":
    main()

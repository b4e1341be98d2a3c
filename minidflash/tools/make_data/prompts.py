"""``python -m minidflash prompts``: a file of training prompts of one kind, checked against the suites.

    python -m minidflash prompts --kind magpie --n 3000 --out data/train_prompts/magpie.jsonl
    python -m minidflash prompts --kind codeio --out data/train_prompts/codeio.jsonl
    python -m minidflash prompts --kind gym-math --n 3000 --out data/train_prompts/gym_math.jsonl

The kinds: ``magpie`` (requests the target writes itself, ``magpie.py``; needs the target),
``codeio`` and ``gym-math`` (reasoning-gym's programming tasks and math generators,
``gym.py``). Any prompt that shares a run of eight words with a prompt of the four suites is
dropped (``overlap.py``) and counted. The file is JSON lines, ``{"messages": [...], "kind": ...}``,
written whole or not at all; beside it, ``<name>.json`` holds the command, the counts and the
seconds. ``python -m minidflash answers --prompts FILE ...`` answers them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from ...files import write_json
from ..common import add_threads, count, out_file, positive, write_jsonl
from .overlap import SuiteOverlap

KINDS = ("magpie", "codeio", "gym-math")


def arguments(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m minidflash prompts", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kind", choices=KINDS, required=True,
                   help="magpie: requests the target writes; codeio: reasoning-gym's code tasks; "
                        "gym-math: its math problems")
    p.add_argument("--out", type=out_file, required=True, help="the JSON-lines file to write")
    p.add_argument("--n", type=count, default=None,
                   help="prompts to make (codeio: default all its tasks; the others: required)")
    p.add_argument("--seed", type=int, default=0, help="the draw (default 0)")
    p.add_argument("--target", default="HuggingFaceTB/SmolLM2-135M-Instruct",
                   help="magpie: the model that writes the requests")
    p.add_argument("--temperature", type=positive, default=1.0,
                   help="magpie: sampling temperature (default 1.0)")
    p.add_argument("--max-new-tokens", type=count, default=128,
                   help="magpie: a request's cap (default 128)")
    p.add_argument("--batch", type=count, default=64,
                   help="magpie: requests sampled together (default 64)")
    add_threads(p)
    a = p.parse_args(argv)
    if a.n is None and a.kind != "codeio":
        what = "requests" if a.kind == "magpie" else "problems"
        p.error(f"--kind {a.kind} needs --n (how many {what})")
    return a


def make(args) -> tuple[list[dict], dict]:
    """(prompts, counts) of the kind asked for."""
    if args.kind == "magpie":
        from ...target import load_target
        from .magpie import magpie_requests

        target, tokenizer = load_target(args.target)
        return magpie_requests(target, tokenizer, args.n, args.seed, args.temperature,
                               args.max_new_tokens, args.batch)
    from .gym import codeio_prompts, gym_math_prompts

    if args.kind == "codeio":
        rows = codeio_prompts(args.n, args.seed)
    else:
        rows = gym_math_prompts(args.n, args.seed)
    suites = SuiteOverlap()
    kept = [r for r in rows if not suites.overlaps(r["messages"][0]["content"])]
    return kept, {"made": len(rows), "kept": len(kept), "dropped": {"suite overlap":
                                                                    len(rows) - len(kept)}}


def main(argv=None) -> dict:
    args = arguments(argv)
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    rows, counts = make(args)
    command = "python -m minidflash prompts " + " ".join(sys.argv[1:] if argv is None else argv)
    out = Path(args.out)
    write_jsonl(rows, out)
    meta = {"command": command, "kind": args.kind, "prompts": len(rows), **counts,
            "seconds": round(time.perf_counter() - t0, 1)}
    write_json(out.with_suffix(".json"), meta, indent=1)
    print(json.dumps(meta, indent=1))
    return meta


if __name__ == "__main__":
    main()

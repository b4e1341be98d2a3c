"""Train a drafter for the tiny target: its training prompts, regenerated, then the recipe.

``python -m minidflash train --num-layers 1 --steps 3000 --lr 1.5e-3`` made the shipped drafter;
``... --drafter ar --ttt-steps 4`` with the same budget made the autoregressive rival
(data/README.md). ``torchrun --nproc_per_node 2 -m minidflash train ...`` trains the same
drafter data-parallel (the batch size stays the global batch). The prompts are the training
split of both domains of ``corpus``: never a held-out prompt (``tests/test_suites.py``).
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import asdict, fields

from ..config import TINY_AR_DRAFTER_DIR, TINY_DRAFTER_DIR
from ..target import load_target
from ..trainer import TrainConfig, cached_regeneration, distributed, train
from . import corpus


def training_prompts(n_arithmetic: int = 4000, n_code: int = 1000, seed: int = 0) -> list[dict]:
    """Training-split prompts of both domains (never the held-out ones)."""
    held = {r["messages"][0]["content"] for r in corpus.held_out_arithmetic()}
    arith = corpus.arithmetic_examples(n_arithmetic, seed=seed + 100, exclude=held)
    code, _ = corpus.code_examples()
    random.Random(seed).shuffle(code)
    return [corpus.as_prompt(e) for e in arith + code[:n_code]]


def tiny_training_data(target, tokenizer, n_arithmetic=4000, n_code=1000, max_new_tokens=256,
                       seed=0, progress=True) -> list[dict]:
    """The tiny target's own answers to its training prompts (cached in cache/)."""
    return cached_regeneration(target, tokenizer, training_prompts(n_arithmetic, n_code, seed),
                               max_new_tokens, progress=progress)


def config_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """An argument per TrainConfig field (--num-layers, --block-size, ...) plus the data's."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    for f in fields(TrainConfig):
        default = getattr(TrainConfig(), f.name)
        flag = f"--{f.name.replace('_', '-')}"
        if isinstance(default, bool):
            p.add_argument(flag, type=lambda s: s.lower() in ("1", "true", "yes"), default=default)
        elif f.name == "target_layer_ids":
            p.add_argument(flag, type=lambda s: [int(x) for x in s.split(",")], default=None)
        elif f.name == "gamma":
            p.add_argument(flag, type=float, default=None)
        elif f.name == "backend":
            p.add_argument(flag, choices=["sdpa", "triton"], default=None)
        elif f.name == "drafter":
            p.add_argument(flag, choices=["dflash", "ar"], default=default,
                           help="dflash: the block drafter; ar: the EAGLE-3-style rival")
        elif f.name == "out":
            p.add_argument(flag, default=None,
                           help=f"default {TINY_DRAFTER_DIR} (dflash) or {TINY_AR_DRAFTER_DIR} (ar)")
        else:
            p.add_argument(flag, type=type(default), default=default)
    p.add_argument("--n-arithmetic", type=int, default=4000, help="arithmetic training prompts")
    p.add_argument("--n-code", type=int, default=1000, help="code training prompts")
    p.add_argument("--max-new-tokens", type=int, default=256, help="answer length when regenerating")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    return p


def main(argv=None) -> dict:
    import torch

    p = config_parser("python -m minidflash train", "Train a DFlash drafter for the tiny target.")
    args = vars(p.parse_args(argv))
    data_args = {k: args.pop(k) for k in ("n_arithmetic", "n_code", "max_new_tokens")}
    threads = args.pop("threads")
    if threads:
        torch.set_num_threads(threads)
    if args["out"] is None:
        args["out"] = str(TINY_AR_DRAFTER_DIR if args["drafter"] == "ar" else TINY_DRAFTER_DIR)
    cfg = TrainConfig(**args)
    target, tokenizer = load_target()
    rank, world = distributed(target)       # (0, 1) unless run by torchrun
    if rank == 0:                           # rank 0 regenerates (or finds the cache) first ...
        data = tiny_training_data(target, tokenizer, seed=cfg.seed, **data_args)
    if world > 1:                           # ... then the other ranks read its cache
        torch.distributed.barrier()
        if rank > 0:
            data = tiny_training_data(target, tokenizer, seed=cfg.seed, progress=False, **data_args)
    info = train(cfg, target, tokenizer, data, info={"data": data_args})["info"]
    if rank == 0:
        print(json.dumps(info, indent=1))
    return info


if __name__ == "__main__":
    main()

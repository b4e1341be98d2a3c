"""The paper's ablations (paper section 5) at tiny scale (a tool).

Each variant is a drafter trained with the same budget (steps, data, seed) as the baseline,
changing one thing; each is then decoded on held-out arithmetic prompts (greedy, tau and
speedup vs plain decoding in the same process, on ``--threads`` torch threads, after a warm-up).
Tau compares the variants; a speedup only compares methods timed in one run, and each variant
is timed alone, right after its training (resumed runs: in another process, at another time). Paper counterparts (Qwen3-8B, MATH-500):
random anchors vs uniform blocks tau 5.64 vs 4.94; 3 / 5 / 8 drafter layers tau 5.64 / 5.99 /
6.33; no target features tau 4.61. Here every variant gets the same small budget, so the
figures compare variants with each other, not with the shipped drafter.

``python -m minidflash ablations --steps 400 --out data/results/ablations.json`` (resumable: finished
variants are kept in the results file and skipped).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from ...paths import CACHE_DIR, PROMPTS_DIR
from ...target import load_target, read_json
from ...trainer import TrainConfig, train
from ..common import add_load, add_threads, count, or_error, out_file, positive, read_jsonl, write
from .bench import run_suite, warm_up
from ..train.train_drafter import tiny_training_data

# name -> (what changes, test block sizes)
VARIANTS = {
    "baseline (1 layer, 3 features, random anchors, decay, B=16)": ({}, [4, 8, 16]),
    "uniform blocks instead of random anchors": ({"random_anchors": False}, [16]),
    "no loss decay (gamma = inf)": ({"gamma": 0.0}, [16]),
    "2 drafter layers": ({"num_layers": 2}, [16]),
    "3 drafter layers": ({"num_layers": 3}, [16]),
    "1 target feature": ({"num_features": 1}, [16]),
    "no target features": ({"use_target_features": False}, [16]),
    "train B=8": ({"block_size": 8}, [4, 8]),
    # the rival at the same budget: tested with k = 4 and 8 drafted tokens (blocks of 5 and 9)
    "AR drafter, 1 layer (EAGLE-3 style, k = 4 / 8)": ({"drafter": "ar"}, [5, 9]),
}


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m minidflash ablations", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=count, default=400, help="training steps a variant (default 400)")
    p.add_argument("--batch-size", type=count, default=4, help="sequences a step (default 4)")
    p.add_argument("--lr", type=positive, default=1.5e-3, help="peak learning rate (default 1.5e-3)")
    p.add_argument("--n", type=count, default=12, help="held-out arithmetic prompts to decode (default 12)")
    p.add_argument("--only", nargs="*", default=None, help="substrings of variant names to run")
    p.add_argument("--out", type=out_file, default="data/results/ablations.json",
                   help="write the figures here as JSON (default data/results/ablations.json)")
    add_threads(p, what="torch threads for training and timing",
                more=": on a shared machine more threads than free cores stall at random and "
                     "distort the speedups")
    add_load(p)
    a = p.parse_args(argv)
    if a.only is not None:
        nothing = [s for s in a.only if not any(s in name for name in VARIANTS)]
        if nothing or not a.only:
            p.error(f"--only {' '.join(nothing) or '(nothing)'}: no variant's name contains "
                    f"{'it' if len(nothing) < 2 else 'them'}; the variants are "
                    f"{'; '.join(VARIANTS)}")
    torch.set_num_threads(a.threads)
    out = Path(a.out)
    results = (or_error(p.error, f"--out {a.out}", read_json, out, "the ablations' results (this "
                        "command's --out), which a run adds to")
               if out.exists() else {"steps": a.steps, "batch_size": a.batch_size, "lr": a.lr,
                                     "n": a.n, "variants": {}})
    if not isinstance(results, dict) or not isinstance(results.get("variants"), dict):
        p.error(f"--out {a.out}: not an ablations file (no \"variants\"), and a run adds to the "
                f"one there: name another file")
    command = "python -m minidflash ablations " + " ".join(sys.argv[1:] if argv is None else argv)
    target, tokenizer = load_target()
    base = TrainConfig(steps=a.steps, eval_every=a.steps, batch_size=a.batch_size, lr=a.lr)
    data = tiny_training_data(target, tokenizer, seed=base.seed)
    rows = read_jsonl(PROMPTS_DIR / "arithmetic.jsonl")[: a.n]
    for name, (change, test_sizes) in VARIANTS.items():
        if name in results["variants"] or (a.only and not any(s in name for s in a.only)):
            continue
        cfg = replace(base, out=str(CACHE_DIR / "ablations" / name.split(" (")[0].replace(" ", "_").replace("/", "-")),
                      **change)
        t0 = time.time()
        run = train(cfg, target=target, tokenizer=tokenizer, data=data, progress=False)
        warm_up(target, tokenizer, run["drafter"], test_sizes)
        bench = run_suite(target, tokenizer, run["drafter"], rows, test_sizes, 256, progress=False)
        results["variants"][name] = {
            "change": change, "train_s": round(time.time() - t0, 1), "command": command,
            "threads": torch.get_num_threads(),
            "tau_train_anchors": run["info"]["final_tau_train_anchors"],
            "final_loss": run["info"]["final_loss"],
            "lossless": bench["lossless"],
            "test": {b: {"tau": r["tau"], "speedup": r["speedup"]} for b, r in bench["block_sizes"].items()}}
        print(name, json.dumps(results["variants"][name]["test"]), flush=True)
        write(results, out, None, dtype=target.dtype, drafters=[], load=a.load)  # trained here
    return results


if __name__ == "__main__":
    main()

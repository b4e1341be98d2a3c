"""Tau against training steps: how acceptance grows as a drafter trains, measured by decoding.

The trainer rewrites ``<out>.ckpt/state.pt`` every ``--eval-every`` steps (the drafter's weights,
the optimiser and the step). Copies of it taken while the training runs are snapshots of the
drafter; this decodes the first ``--n`` prompts of each suite with each snapshot (DFlash only:
tau needs no baseline, and the decode is lossless whatever the weights) and writes tau by suite
against the answers seen (step x batch size, plus what the drafter it continued had seen:
``--init-drafter`` runs record it), beside the tau the trainer logged at its training anchors.
Snapshots of a run and of the run that continued it make one curve; ``--extend`` adds a later
run's snapshots to a curve already written (same suites, prompts, length and threads), so the
earlier snapshots need not be kept.

    while sleep 60; do cp -n OUT.ckpt/state.pt snaps/state-$(stat -c %Y OUT.ckpt/state.pt).pt; done &
    python -m minidflash tau-curve --target HuggingFaceTB/SmolLM2-135M-Instruct \\
        --drafter data/smollm2_drafter snaps/state-*.pt --out data/results/tau_curve_smollm2.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from ...paths import PROMPTS_DIR
from ...checkpoints import load_drafter
from ...files import save_figure
from ...decoding_config import DecodingConfig
from ...target import chat_ids, load_target, read_json, stop_ids
from ...trainer import smooth
from ...verifier import speculative_generate
from ..common import (add_load, add_threads, check_decoding, check_suites, count, or_error,
                      out_file, read_jsonl, telling, write)
from ..flags import add_flags


def snapshot_taus(target, tokenizer, drafter, rows_by_suite: dict, max_new_tokens: int) -> dict:
    """{suite: tau over its rows} with the drafter as it is now (committed tokens / verify steps):
    the whole block verified as a chain every step, whatever its decoding.json asks (a cut, a
    cost model or a tree verify fewer drafts, and would make points measured before and after
    the file changed disagree)."""
    out = {}
    for suite, rows in rows_by_suite.items():
        lengths = []
        for row in rows:
            o = speculative_generate(target, drafter, chat_ids(tokenizer, row["messages"]),
                                     DecodingConfig(max_new_tokens=max_new_tokens,
                                                    stop_token_ids=stop_ids(tokenizer)))
            lengths += o.acceptance_lengths
        out[suite] = sum(lengths) / max(1, len(lengths))
    return out


def plot(result: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 3.8))
    ax = fig.subplots()
    seen = [p["answers_seen"] for p in result["points"]]
    for suite in result["suites"]:
        ax.plot(seen, [p["tau"][suite] for p in result["points"]], marker="o", label=suite)
    h = result.get("training_anchors")
    if h:
        ax.plot(h["answers_seen"], h["tau"], color="grey", lw=1, ls="--", label="training anchors")
    ax.set(xlabel="answers seen", ylabel="tau (tokens per verify step)",
           title="acceptance against training steps")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


def extendable(a, error) -> dict:
    """The curve in a.out, if it was measured the way this call measures (else one line through
    ``error``)."""
    if not a.out or not Path(a.out).is_file():
        error(f"--extend adds to the curve in --out, and {a.out!r} is not a file: name the curve "
              f"to extend, or leave out --extend to start one")
    old = or_error(error, f"--out {a.out}", read_json, Path(a.out), "a tau curve (this command's "
                   "--out)")
    if not isinstance(old, dict) or not all(k in old for k in ("points", "training_anchors",
                                                                 "command")):
        error(f"--out {a.out}: not a tau curve (no points, training_anchors and command) to "
              f"extend; name one this command wrote, or leave out --extend")
    mine = {"suites": a.suites, "n": a.n, "max_new_tokens": a.max_new_tokens, "threads": a.threads}
    differ = [f"{k} {old.get(k)} there, {v} here" for k, v in mine.items() if old.get(k) != v]
    if differ:
        error(f"--out {a.out} was measured otherwise ({'; '.join(differ)}): extend it with the "
              f"same --suites, --n, --max-new-tokens and --threads")
    return old


def read_snapshot(f, error) -> dict:
    """A trainer checkpoint (<out>.ckpt/state.pt) as the curve reads it: its drafter's weights,
    step, config and history; anything else one line through ``error``, naming the file."""
    try:
        state = torch.load(f, map_location="cpu")
    except Exception as e:            # pickle's, zipfile's and torch's own kinds, by file
        said = " ".join(str(e).split()).split(". ")[0][:100]
        error(f"snapshot {f}: torch.load cannot read it ({type(e).__name__}: {said}): truncated, "
              f"or not a checkpoint; pass copies of <out>.ckpt/state.pt")
    need = ("drafter", "step", "config", "history")
    if not isinstance(state, dict) or not all(k in state for k in need):
        error(f"snapshot {f} is not a trainer checkpoint (it needs {', '.join(need)}; got a "
              f"{type(state).__name__}): pass copies of <out>.ckpt/state.pt")
    if not isinstance(state["drafter"], dict) or not isinstance(state["step"], int) or not (
            isinstance(state["config"], dict) and isinstance(state["config"].get("batch_size"), int)):
        error(f"snapshot {f}: its drafter, step or config.batch_size is not what the trainer "
              f"writes; pass copies of <out>.ckpt/state.pt")
    return state


@torch.no_grad()
def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m minidflash tau-curve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("snapshots", nargs="+", help="copies of <out>.ckpt/state.pt")
    p.add_argument("--drafter", required=True,
                   help="the trained drafter's directory (its config; the snapshots' weights)")
    p.add_argument("--target", default=None, help="hub id or directory (default: the tiny target)")
    p.add_argument("--suites", nargs="+", default=["gsm8k", "math500", "humaneval", "mtbench"],
                   help="files in data/prompts, without .jsonl (default gsm8k math500 humaneval "
                        "mtbench)")
    p.add_argument("--n", type=count, default=2, help="the first n prompts of each suite (default 2)")
    add_threads(p)
    p.add_argument("--out", type=out_file, default=None,
                   help="write the curve here as JSON (and a .png beside it)")
    p.add_argument("--extend", action="store_true",
                   help="add these snapshots' points to the curve already in --out")
    add_flags(p, only=("max_new_tokens",), defaults={"max_new_tokens": 128},
              why="every point is the drafter's whole block verified as a chain, greedily")
    add_load(p)
    a = p.parse_args(argv)
    error = telling(p.error)
    check_suites(error, a.suites)
    missing = [f for f in a.snapshots if not Path(f).is_file()]
    if missing:
        p.error(f"snapshots {' '.join(missing)}: no such file; pass copies of <out>.ckpt/state.pt")
    old = extendable(a, error) if a.extend else None
    states = [read_snapshot(f, error) for f in a.snapshots]      # before any model loads
    seen = lambda s: s.get("answers_before", 0) + s["step"] * s["config"]["batch_size"]
    clash = old and {p["answers_seen"] for p in old["points"]} & {seen(s) for s in states}
    if clash:
        error(f"--out {a.out} already has points at answers seen {sorted(clash)}: pass only the "
              f"snapshots of the later run")
    torch.set_num_threads(a.threads)
    target, tokenizer = or_error(p.error, f"--target {a.target}", load_target, a.target,
                                 dtype=torch.float32)   # as its results were made
    drafter = or_error(p.error, f"--drafter {a.drafter}", load_drafter, a.drafter, target=target)
    rows = {s: read_jsonl(PROMPTS_DIR / f"{s}.jsonl")[: a.n] for s in a.suites}
    check_decoding(p.error, target, drafter, {"max_new_tokens": a.max_new_tokens},
                   [chat_ids(tokenizer, r["messages"]) for rs in rows.values() for r in rs],
                   tree=False, cost=False, stop_token_ids=stop_ids(tokenizer))
    want = {k: tuple(v.shape) for k, v in drafter.state_dict().items()}
    for f, state in zip(a.snapshots, states):
        got = {k: tuple(getattr(v, "shape", ())) for k, v in state["drafter"].items()}
        if got != want:
            wrong = sorted(set(got) ^ set(want)) or [k for k in want if got[k] != want[k]]
            error(f"snapshot {f} holds another drafter's weights than --drafter {a.drafter} "
                  f"({wrong[:3]} differ): pass the snapshots of that drafter's training")
    states.sort(key=seen)
    points = []
    for state in states:
        drafter.load_state_dict(state["drafter"])
        points.append({"step": state["step"], "answers_seen": seen(state),
                       "tau": snapshot_taus(target, tokenizer, drafter, rows, a.max_new_tokens)})
        print(f"step {state['step']:>6}: " + "  ".join(f"{s} {t:.2f}" for s, t in points[-1]["tau"].items()),
              flush=True)
    last = states[-1]
    h, before, batch = last["history"], last.get("answers_before", 0), last["config"]["batch_size"]
    result = {"command": "python -m minidflash tau-curve " + " ".join(sys.argv[1:] if argv is None else argv),
              "suites": a.suites, "n": a.n, "max_new_tokens": a.max_new_tokens,
              "threads": torch.get_num_threads(), "points": points,
              "training_anchors": {"step": h["step"][::10],
                                   "answers_seen": [before + (s + 1) * batch for s in h["step"][::10]],
                                   "tau": smooth(h["tau"])[::10]}}
    if old is not None:   # the earlier points first, then these; the commands that made each
        anchors = {k: old["training_anchors"][k] + result["training_anchors"][k]
                   for k in ("step", "answers_seen", "tau")}
        result = {**result, "command": old["command"],
                  "extended_by": old.get("extended_by", []) + [result["command"]],
                  "points": sorted(old["points"] + points, key=lambda p: p["answers_seen"]),
                  "training_anchors": anchors}
    write(result, a.out, plot, dtype=target.dtype, drafters=a.snapshots, load=a.load)
    return result


if __name__ == "__main__":
    main()

"""The verify budget: what a verify pass over k tokens costs, and how far the drafter's own
probabilities can be trusted to decide k (``python -m minidflash budget``).

On a GPU a target pass over 16 tokens costs about one decode step; on a CPU it does not, so
every drafted token the target checks is paid for. Two measurements size the budget:

* ``curve``: in the target's dtype (``--dtype``; bf16 where the CPU has bf16 matrix
  instructions: the curve is nearly flat there, 1.2 decode steps for 16 tokens), t(k), the median time of one target pass over k new tokens after a cached context,
  k = 1..16, at each thread count (the counts taking turns), and one drafter call. A step that
  verifies m drafts yields E[accepted] + 1 tokens for d + t(m + 1); plain decoding yields 1 for
  t(1). llama.cpp's maintainers size drafts the same way (``llama-bench -p 1,2,..,16``).
* ``machine``: the same curve for the target and drafter as loaded, at the thread counts, kept
  as this CPU's prices (prices.py: one file per CPU kind, shapes and dtype in a cache): every
  later decode that prices its steps (``cost=True``, the shipped drafters' default) reads them
  instead of the curves the drafter shipped with, and ``describe()`` names the file. The
  curves in data/results were measured on CPUs with bf16 units; on one without, fp32 passes
  over many tokens cost more, and the cost model should know.
* ``exact --from DEV_BENCH.json --drafter DIR``: exact mode's default drafting. In exact mode
  every pass costs W rows whatever it verifies (exact.py), so the prices that chose the default
  tree do not hold; a bench on the *dev* prompts times /exact candidates (chains, trees, each
  beside plain exact decoding at its W) and this writes the fastest, by the geometric mean of
  its speedups over the fastest plain, into decoding.json as "exact" (``choose_exact``).
* ``calibration``: decode with the drafter, record its probability q_j of every drafted token
  and whether the target accepted it, and compare: among slots reached (all earlier slots
  accepted) with q_j in a bin, the share the target accepted. The confidence cut
  (``speculative_generate(p_min=...)``) is only as good as this agreement.
* ``curve --shape qwen3-8b --device cuda --dtype bfloat16``: the same for Qwen/Qwen3-8B and a
  drafter shaped as z-lab/Qwen3-8B-DFlash-b16 (5 layers, B = 16), built with random weights: a
  pass's time depends on the shapes, not on the weights' values; on a GPU, the paper's regime.
* ``cost --from CURVE.json --drafter DIR``: write a measured curve into the drafter's
  ``decoding.json`` (one curve per thread count, under the curve's dtype beside the curves of
  other dtypes) as its default cost model (verify_cost.py;
  ``--trust W``: with the running correction of q; ``--tree N,K``: a tree of the N best
  nodes over the per-slot top K verified by default, sized by that curve). The curve file is
  checked first (``check_curve``: one line naming the file and the field), and only a
  ``decoding.json`` that ``load_drafter`` reads back is written, only into a DFlash drafter's
  folder (a target's or an AR drafter's is refused, named).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import torch

from ...paths import TINY_DRAFTER_DIR
from ...prepare import lean_of
from ...checkpoints import load_drafter
from ...files import save_figure, write_json
from ...decoding_config import DecodingConfig, check_tree, exact_of_file
from ...target import chat_ids, drafter_config, load_target, read_json, stop_ids
from ...verifier import speculative_generate
from ...verify_cost import VerifyCost, finite_number
from .. import common
from ..common import (add_dtype, add_load, add_threads, at_least, check_decoding, check_suites,
                      count, or_error, out_file, write)
from ..flags import add_flags, flag_fields
from ..make_data.overlap import split_label
from .curve import (QWEN3_8B, SHAPES, curve_by_threads, device_name, machine, plot_curve,  # noqa: F401
                    random_pair, verify_curve)

BINS = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]


CURVE_DTYPES = ("float32", "bfloat16", "float16")     # what a drafter's decoding.json can name


def check_curve(curve, where) -> None:
    """A saved curve (``curve --out``) as ``cost`` reads it, or one ValueError naming ``where``
    (the file) and the field: {"threads": {"1": {"in_decode_steps": [1.0, ...], "verify_ms":
    [...], "draft_ms": x}, ...}, "dtype": one of CURVE_DTYPES or absent}; thread counts whole
    numbers >= 1, times finite and above 0 (a draft >= 0), t(1)/t(1) = 1."""
    fix = f"measure one with `python -m minidflash budget curve --out {where}`"
    if not isinstance(curve, dict) or "threads" not in curve:
        raise ValueError(f"{where}: not a verify curve (no \"threads\", got "
                         f"{type(curve).__name__}); {fix}.")
    threads = curve["threads"]
    if not isinstance(threads, dict) or not threads:
        raise ValueError(f"{where}: \"threads\" is {threads!r}, and a curve maps thread counts "
                         f"to measurements, {{\"1\": {{\"in_decode_steps\": [...], "
                         f"\"verify_ms\": [...], \"draft_ms\": x}}}}; {fix}.")
    dtype = curve.get("dtype")
    if dtype is not None and dtype not in CURVE_DTYPES:
        raise ValueError(f"{where}: \"dtype\" is {dtype!r}; a curve is measured in one of "
                         f"{', '.join(CURVE_DTYPES)} (or names none).")
    for t, c in threads.items():
        at = f"{where}: threads[{t!r}]"
        if not (t.isascii() and t.isdigit() and int(t) >= 1):
            raise ValueError(f"{where}: thread count {t!r} is not a whole number >= 1.")
        if not isinstance(c, dict) or not {"in_decode_steps", "verify_ms", "draft_ms"} <= set(c):
            raise ValueError(f"{at} is {str(c)[:80]}: it needs in_decode_steps, verify_ms and "
                             f"draft_ms; {fix}.")
        for key in ("in_decode_steps", "verify_ms"):
            xs = c[key]
            if not isinstance(xs, list) or len(xs) < 2:
                raise ValueError(f"{at}.{key} is {str(xs)[:80]}: a list of one number per pass "
                                 f"length k = 1, 2, ... (two at least).")
            for i, x in enumerate(xs):
                if not (finite_number(x) and x > 0) or (key == "in_decode_steps"
                                                          and round(x, 3) <= 0):
                    raise ValueError(f"{at}.{key}[{i}] is {x!r}: a pass's time is a finite "
                                     f"number above 0.")
        if len(c["in_decode_steps"]) != len(c["verify_ms"]):
            raise ValueError(f"{at}: in_decode_steps has {len(c['in_decode_steps'])} entries and "
                             f"verify_ms {len(c['verify_ms'])}: one each per pass length.")
        if round(c["in_decode_steps"][0], 3) != 1:
            raise ValueError(f"{at}.in_decode_steps[0] is {c['in_decode_steps'][0]!r}: it is "
                             f"t(1)/t(1), so 1.")
        if not finite_number(c["draft_ms"]) or c["draft_ms"] < 0:
            raise ValueError(f"{at}.draft_ms is {c['draft_ms']!r}: a drafter pass's time is a "
                             f"finite number >= 0.")


def costs_of(curve: dict, max_skip: int = 8, trust_weight: float = 0.0) -> dict[int, VerifyCost]:
    """A ``curve`` result as cost models, one per thread count (t(k) and the draft over t(1))."""
    return {int(t): VerifyCost(tuple(round(x, 3) for x in c["in_decode_steps"]),
                               round(c["draft_ms"] / c["verify_ms"][0], 3), max_skip, trust_weight)
            for t, c in curve["threads"].items()}


def check_drafter_folder(folder) -> Path:
    """``folder`` as a Path when it is a local DFlash drafter's (its config.json one that
    load_drafter reads); else a ValueError that says what it is: missing, a target's, an AR
    drafter's (whose loader reads no decoding.json), or a broken config."""
    path = Path(folder).expanduser()
    file = path / "config.json"
    if not file.is_file():
        raise ValueError(f"{folder} is not a drafter folder (no config.json): give the "
                         f"local folder the cost model should ship in.")
    raw = read_json(file, "a drafter's config")
    arch = raw.get("architectures") if isinstance(raw, dict) else None
    if arch == ["ARDrafter"]:
        raise ValueError(f"{folder} is an AR drafter's folder, and load_ar_drafter reads no "
                         f"decoding.json: a cost model there would never be used; give a DFlash "
                         f"drafter's folder.")
    if isinstance(raw, dict) and "dflash_config" not in raw:
        raise ValueError(f"{folder} is not a drafter folder: its config.json is a "
                         f"{'target' if raw.get('model_type') else 'model'}'s ({arch or 'no architectures'}), with "
                         f"no dflash_config; the cost model ships with the drafter: give its "
                         f"folder.")
    drafter_config(file)                        # a drafter's config, or the loader's own error
    return path


def write_cost(drafter_dir, costs: dict[int, VerifyCost], tree: dict | None = None,
               dtype: str | None = None) -> dict:
    """Put ``costs`` (by thread count, measured in ``dtype``: "float32", "bfloat16", or None for
    any) and a default tree, when given, into drafter_dir/decoding.json, keeping its other
    settings and the curves of other dtypes; atomically. Only what load_drafter reads back is
    written: the folder must be a DFlash drafter's, its decoding.json (if any) one the loader
    takes, and the result goes through ``DecodingConfig.to_file``, which checks it loads."""
    path = check_drafter_folder(drafter_dir) / "decoding.json"
    if path.is_file():
        data = read_json(path, "decoding settings (delete it for the defaults)")
        config, old = DecodingConfig.from_file(data, str(path))     # a broken file: refused
    elif path.exists():
        raise ValueError(f"{path} is not a file: remove it, then write the cost model.")
    else:
        config, old = DecodingConfig(), None
    if dtype is not None and dtype not in CURVE_DTYPES:
        raise ValueError(f"the curve's dtype {dtype!r} is not one of {', '.join(CURVE_DTYPES)}.")
    bad = [t for t in costs if not (isinstance(t, int) and t >= 1)]
    if not costs or bad:
        raise ValueError(f"costs are {{threads >= 1: VerifyCost}}, got {costs!r}.")
    kept = {k: c for k, c in (old or {}).items() if dtype and k[0] not in (dtype, None)}
    if tree:
        tree = check_tree(tree)
        if config.p_min or config.record_steps:
            raise ValueError(f"{path} holds p_min {config.p_min:g}, a chain's cut, which a "
                             f"default tree cannot have (tree {tree}): remove p_min from the "
                             f"file first, or write the curve without --tree.")
        config = replace(config, tree=tree)
    settings = replace(config, cost=True).to_file(
        {**kept, **{(dtype, t): c for t, c in costs.items()}},
        exact_of_file(data, str(path)) if path.is_file() else None)
    write_json(path, settings)
    return settings


def choose_exact(results: dict, where: str) -> tuple[str, dict, dict]:
    """Exact mode's default drafting from a bench run on *dev* prompts (``bench --split dev
    --methods plain plain/exact:W ... dflash:B/exact tree:B/nN/topK/exact``): the /exact method
    with the highest geometric mean, over the suites, of its speedup over the run's fastest
    plain decoding, among those whose every answer equalled plain exact decoding's at its W.
    Returns (its name, its drafting for decoding.json's "exact", {method: that mean})."""
    from .methods import parse
    if results.get("split") != "dev":
        raise ValueError(f"{where} was measured on the {results.get('split')!r} part: exact "
                         f"mode's default is chosen on the dev part (bench --split dev), and "
                         f"reported on the test part.")
    suites = results.get("suites") or {}
    names = {m for s in suites.values() for m in s.get("methods", {})
             if m.split("@")[0].endswith("/exact") or "/exact:" in m or "/exact/" in m}
    scores = {}
    for m in sorted(names):
        config = parse(m).config
        rows = [s["methods"][m] for s in suites.values() if m in s["methods"]]
        if config is None or config.block_size == 1 or len(rows) < len(suites):
            continue
        if all(r.get("identical") for r in rows):
            logs = [math.log(r["speedup_vs_fastest_plain"]) for r in rows]
            scores[m] = math.exp(sum(logs) / len(logs))
    if not scores:
        raise ValueError(f"{where} has no /exact method with a block or tree, measured on every "
                         f"suite with every answer identical to plain exact decoding's.")
    best = max(scores, key=scores.get)
    config = parse(best).config
    drafting = ({"block_size": config.block_size} if config.block_size else {})
    if isinstance(config.tree, dict):
        drafting["tree"] = config.tree
    return best, drafting, scores


def write_exact(drafter_dir, drafting: dict) -> dict:
    """Put exact mode's default drafting into drafter_dir/decoding.json as "exact", keeping its
    other settings and curves; atomically, only what load_drafter reads back."""
    path = check_drafter_folder(drafter_dir) / "decoding.json"
    data = read_json(path, "decoding settings (delete it for the defaults)") if path.is_file() else {}
    config, costs = DecodingConfig.from_file(data, str(path))
    settings = config.to_file(costs, drafting)
    write_json(path, settings)
    return settings


def calibration(target, tokenizer, drafter, rows, max_new_tokens: int, block_size=None,
                **fields) -> dict:
    """Per bin of the drafter's q: slots reached, slots accepted; per slot j: mean q, acceptance
    given slots 1..j-1 accepted, and P(slots 1..j all accepted) against the mean product of q.
    ``fields``: other DecodingConfig fields (temperature, fp32_ties, lean)."""
    B = block_size or drafter.block_size
    stops = stop_ids(tokenizer)
    reached, taken = [0] * (len(BINS) - 1), [0] * (len(BINS) - 1)
    slot = [{"q": 0.0, "reached": 0, "accepted": 0, "all_accepted": 0, "q_product": 0.0, "steps": 0}
            for _ in range(B - 1)]
    # a K-way softmax's largest probability is >= 1/K, so this p_min records q and cuts nothing
    no_cut = 1e-9
    for row in rows:
        out = speculative_generate(target, drafter, chat_ids(tokenizer, row["messages"]),
                                   max_new_tokens=max_new_tokens, block_size=B,
                                   stop_token_ids=stops, record_steps=True, p_min=no_cut,
                                   cost=False, **fields)
        for step in out.steps:
            product = 1.0
            for j, q in enumerate(step["q"]):
                s = slot[j]
                product *= q
                s["steps"] += 1
                s["q_product"] += product
                s["all_accepted"] += step["accepted"] > j
                if step["accepted"] < j:          # an earlier slot was rejected: not reached
                    continue
                ok = step["accepted"] > j
                b = min(int(q * (len(BINS) - 1)), len(BINS) - 2)
                reached[b] += 1
                taken[b] += ok
                s["q"] += q
                s["reached"] += 1
                s["accepted"] += ok
    per_slot = [{"slot": j + 1, "mean_q": s["q"] / max(1, s["reached"]), "reached": s["reached"],
                 "accepted_given_reached": s["accepted"] / max(1, s["reached"]),
                 "all_accepted": s["all_accepted"] / max(1, s["steps"]),
                 "q_product": s["q_product"] / max(1, s["steps"])} for j, s in enumerate(slot)]
    return {"bins": BINS, "reached": reached, "accepted": taken,
            "observed": [t / r if r else None for t, r in zip(taken, reached)], "slots": per_slot}


def plot_calibration(results: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4))
    ax, ax2 = fig.subplots(1, 2)
    ax.plot([0, 1], [0, 1], color="k", lw=0.8, ls=":", label="calibrated")
    for i, (suite, c) in enumerate(results["suites"].items()):
        mids = [(a + b) / 2 for a, b in zip(c["bins"], c["bins"][1:])]
        pts = [(m, o) for m, o, r in zip(mids, c["observed"], c["reached"]) if o is not None and r >= 20]
        ax.plot(*zip(*pts), "o-", color=f"C{i}", label=suite)
        sl = c["slots"]
        ax2.plot([s["slot"] for s in sl], [s["all_accepted"] for s in sl], "o-", color=f"C{i}",
                 label=f"{suite}: observed")
        ax2.plot([s["slot"] for s in sl], [s["q_product"] for s in sl], "s--", color=f"C{i}",
                 alpha=0.6, label=f"{suite}: product of q")
    ax.set(xlabel="drafter's probability q of its token (bin)", ylabel="share the target accepted",
           title="calibration of a reached slot (bins with >= 20 slots)")
    ax.legend(fontsize=8)
    ax2.set(xlabel="slot j", ylabel="P(slots 1..j all accepted)",
            title="acceptance of a whole prefix: observed vs predicted")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m minidflash budget", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["curve", "machine", "calibration", "cost", "exact"],
                   help="curve: time the target's passes; machine: the same, kept as this CPU's "
                        "prices, which every decode with the cost model then uses (prices.py); "
                        "calibration: the drafter's q against acceptance; cost: write a curve "
                        "into a drafter's decoding.json; exact: write exact mode's default "
                        "drafting, the fastest /exact method of a dev bench (--from), into it")
    p.add_argument("--from", dest="curve", default=None, metavar="CURVE.json",
                   help="cost: a saved curve's JSON (`budget curve --out`); exact: a dev bench's")
    p.add_argument("--target", default=None, help="hub id or directory (default: the tiny target)")
    p.add_argument("--drafter", default=None,
                   help="a drafter folder (default: the tiny drafter; cost: the one written)")
    add_threads(p, [1, 2], more=": curve: the thread counts, taking turns; calibration: the "
                "first")
    p.add_argument("--context", type=at_least(1), default=256,
                   help="curve: cached tokens before the pass (default 256)")
    p.add_argument("--max-k", type=at_least(2, "(passes of 1 and 2 tokens at least)"), default=16,
                   help="curve: the longest pass, in tokens (default 16)")
    p.add_argument("--shape", choices=sorted(SHAPES), default=None,
                   help="curve: a published target and drafter shape with random weights "
                        "instead of --target / --drafter")
    p.add_argument("--device", type=device_name, default="cpu",
                   help="curve with --shape: where to build it (cpu, cuda, cuda:N, mps)")
    add_dtype(p, what="curve and calibration: the target's and drafter's dtype (with --shape "
                      "fp32 unless given)")
    p.add_argument("--suites", nargs="+", default=["arithmetic", "code"],
                   help="calibration: files in data/prompts (default arithmetic code)")
    p.add_argument("--split", choices=common.SPLITS, default="test",
                   help="calibration: which part of each suite (default test)")
    p.add_argument("--n", type=count, default=10, help="calibration: prompts per suite (default 10)")
    p.add_argument("--out", type=out_file, default=None,
                   help="curve, calibration: write the figures here as JSON (and a .png beside it)")
    add_flags(p, skip=("p_min", "cost", "record_steps"), defaults={"max_new_tokens": 128},
              why="calibration verifies every draft to record each q; cost writes the curve. "
                  "cost takes --tree and --trust (written as the drafter's defaults), curve "
                  "--lean, calibration the others")
    add_load(p)
    a = p.parse_args(argv)
    given = flag_fields(a, skip=("max_new_tokens",))
    honoured = {"cost": {"tree", "trust"}, "curve": {"lean"}, "machine": set(), "exact": set(),
                "calibration": {"block_size", "temperature", "fp32_ties", "lean"}}[a.what]
    if set(given) - honoured:
        flag = "--" + sorted(set(given) - honoured)[0].replace("_", "-")
        p.error(f"{flag}: budget {a.what} takes {', '.join('--' + h.replace('_', '-') for h in sorted(honoured))} "
                f"of the decoding flags")
    if a.what == "calibration":
        check_suites(p.error, a.suites, a.n, a.split)
    if a.what == "cost":
        if not (a.curve and a.drafter):
            p.error("cost needs --from CURVE.json (from `budget curve --out`) and --drafter DIR")
        curve = or_error(p.error, f"--from {a.curve}", read_json, Path(a.curve).expanduser(),
                         "a verify curve (`python -m minidflash budget curve --out FILE`)")
        try:
            check_curve(curve, a.curve)
            costs = costs_of(curve, trust_weight=a.trust or 0.0)
        except ValueError as e:
            p.error(f"--from {e}")
        try:
            decoding = write_cost(a.drafter, costs, a.tree or None, curve.get("dtype"))
        except ValueError as e:
            p.error(f"--drafter {a.drafter}: {e}")
        print(f"{a.drafter}/decoding.json: {json.dumps(decoding)[:200]}")
        return decoding
    if a.what == "exact":
        if not (a.curve and a.drafter):
            p.error("exact needs --from BENCH.json (`bench --split dev --methods ... /exact`) and "
                    "--drafter DIR")
        results = or_error(p.error, f"--from {a.curve}", read_json, Path(a.curve).expanduser(),
                           "a bench run's results (`python -m minidflash bench --out FILE`)")
        try:
            best, drafting, scores = choose_exact(results, a.curve)
            settings = write_exact(a.drafter, drafting)
        except ValueError as e:
            p.error(str(e))
        for m, x in sorted(scores.items(), key=lambda kv: -kv[1]):
            print(f"{m:32s} {x:.3f}x the fastest plain (geometric mean over the suites)")
        print(f"{a.drafter}/decoding.json: \"exact\": {json.dumps(settings['exact'])} ({best})")
        return settings
    if a.device != "cpu" and not (a.what == "curve" and a.shape):
        p.error(f"--device {a.device}: only `curve --shape` builds its models on a device; "
                f"--target and --drafter load on the CPU")
    if a.what == "machine" and (a.shape or a.context != 256 or a.max_k != 16):
        p.error("machine measures the prices a decode uses: the target and drafter as loaded, "
                "256 cached tokens, passes of 1..16 tokens; drop --shape, --context and --max-k")
    if a.shape and (a.what != "curve" or a.target or a.drafter):
        p.error("--shape builds a random target and drafter for `curve`; drop --target/--drafter")
    torch.manual_seed(0)
    if a.shape:
        dtype = "float32" if a.dtype == "auto" else a.dtype
        target, drafter = random_pair(a.shape, a.device, getattr(torch, dtype))
        tokenizer = None
    else:
        target, tokenizer = or_error(p.error, f"--target {a.target}", load_target, a.target,
                                     dtype=a.dtype)
        drafter = or_error(p.error, f"--drafter {a.drafter}", load_drafter, a.drafter,
                           target=target)
    if a.what == "machine":
        return machine(target, drafter, a.threads, "python -m minidflash budget " + " ".join(
            sys.argv[1:] if argv is None else argv))
    if a.what == "curve":
        try:
            lean_of(target, DecodingConfig(lean=a.lean))
        except ValueError as e:
            p.error(f"--lean: {e}")
    else:
        rows = {s: common.suite_prompts(s, a.split, a.n) for s in a.suites}
        check_decoding(p.error, target, drafter, {**given, "max_new_tokens": a.max_new_tokens},
                       [chat_ids(tokenizer, r["messages"]) for rs in rows.values() for r in rs],
                       stop_token_ids=stop_ids(tokenizer), record_steps=True, p_min=1e-9,
                       cost=False)
    print(f"budget: the target in {str(target.dtype).replace('torch.', '')}", file=sys.stderr)
    command = "python -m minidflash budget " + " ".join(sys.argv[1:] if argv is None else argv)
    results = {"command": command,
               "target": a.target or (f"{a.shape}, random weights" if a.shape else "data/target"),
               "drafter": a.drafter or ("its drafter's shape, random weights" if a.shape
                                        else "data/drafter")}
    if a.what == "curve":
        results.update(device=(torch.cuda.get_device_name() if target.device.type == "cuda"
                               else "cpu"), dtype=str(target.dtype).replace("torch.", ""))
        results.update(context=a.context, threads=curve_by_threads(
            target, drafter, a.threads, context=a.context, max_k=a.max_k, lean=a.lean))
        for t, c in results["threads"].items():
            print(f"{t} thread(s): t(k)/t(1) for k = 1..{a.max_k}: "
                  + " ".join(f"{x:.2f}" for x in c["in_decode_steps"])
                  + f"  (t(1) {c['verify_ms'][0]:.1f} ms, draft {c['draft_ms']:.1f} ms)")
        plot = plot_curve
    else:
        torch.set_num_threads(a.threads[0])
        results.update(dtype=str(target.dtype).replace("torch.", ""), split=a.split, n=a.n, max_new_tokens=a.max_new_tokens, suites={})
        for suite in a.suites:
            c = results["suites"][suite] = calibration(
                target, tokenizer, drafter, rows[suite], a.max_new_tokens, a.block_size,
                **{k: v for k, v in given.items() if k != "block_size"})
            c["prompts_used"] = split_label(suite, a.split, len(rows[suite]))
            print(f"{suite}: q bin -> accepted: " + "  ".join(
                f"{lo:.1f}-{hi:.1f}: {o:.2f} ({r})" for lo, hi, o, r in
                zip(c["bins"], c["bins"][1:], c["observed"], c["reached"]) if o is not None))
        plot = plot_calibration
    write(results, a.out, plot, dtype=target.dtype, load=a.load,
          drafters=[] if a.shape else [a.drafter or TINY_DRAFTER_DIR])   # --shape: random weights
    return results


if __name__ == "__main__":
    main()

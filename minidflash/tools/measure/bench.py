"""Benchmark: plain decoding vs DFlash, the way the paper's experiments measure (paper section 5).

Same code path, same target, same process: block size 1 (plain autoregressive decoding) against
block size B, alternating prompt by prompt after a warm-up, so that both see the same machine
state. Prompts come from the *test* part of each suite unless ``--split`` says otherwise (the
first 10 prompts of every suite are the *dev* part, where drafters and settings are chosen:
common.suite_prompts). Reported per suite:

* tau      mean over responses of (tokens committed / verify steps), accepted + 1 per step
* speedup  mean baseline TPOT / mean DFlash TPOT (TPOT = decode time / new tokens, no prefill)
* the share of decode time in drafter and target passes, tokens/s, the acceptance histogram
* the repeated-4-gram share of the target's answers (loops inflate tau without skill)
* task accuracy where checkable (\\boxed{} answers; HumanEval tests), for BOTH decoders, which
  must agree because the outputs are identical (asserted for greedy).

``python -m minidflash bench --suites arithmetic code --n 10 --out data/results/bench.json``

``--batch-sizes 1 2 4 8 16``: throughput of plain decoding and DFlash serving N requests at once
instead (batch_bench.py), at each of ``--threads``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ...decoding import crop_cache, target_pass
from ...lean_drafter import drafting
from ...prepare import lean_of
from ...paths import TINY_DRAFTER_DIR, TINY_TARGET_DIR, repo_relative
from ...checkpoints import load_drafter
from ...files import save_figure
from ...target import chat_ids, load_target, stop_ids
from ...decoding_config import DecodingConfig
from ...verifier import speculative_generate
from .. import common
from ..common import (add_dtype, add_load, add_threads, at_least, check_decoding, check_suites,
                      correct, count, median_ms, or_error, out_file,
                      repeated_4gram_share, take_turns, write)
from ..flags import add_flags, flag_fields
from ..make_data.overlap import split_label


def run_suite(target, tokenizer, drafter, rows, block_sizes, max_new_tokens, seed=0,
              progress=True, **fields) -> dict:
    """Plain decoding against each block size, prompt by prompt in turn; ``fields``: any other
    DecodingConfig fields (the command line's), over the drafter's decoding.json."""
    temperature = fields.get("temperature", 0.0)
    stops = stop_ids(tokenizer)
    per = {b: {"tpot": [], "tau": [], "tokens": [], "time": [], "draft": [], "verify": [],
               "lengths": [], "correct": []} for b in [1, *block_sizes]}
    rep, lossless = [], True
    for i, row in enumerate(tqdm(rows, desc="prompts", disable=not progress, leave=False)):
        ids = chat_ids(tokenizer, row["messages"])
        outs = {}
        for b in ([1, *block_sizes] if i % 2 == 0 else [*block_sizes, 1]):   # alternate order
            gen = torch.Generator().manual_seed(seed + i)
            o = speculative_generate(target, drafter if b > 1 else None, ids, generator=gen,
                                     **{**fields, "max_new_tokens": max_new_tokens,
                                        "block_size": b, "stop_token_ids": stops})
            outs[b] = o
            p = per[b]
            p["tpot"].append(o.tpot)
            p["tau"].append(o.tau)
            p["tokens"].append(o.num_new_tokens)
            p["time"].append(o.decode_time)
            p["draft"].append(o.draft_time)
            p["verify"].append(o.verify_time)
            p["lengths"] += o.acceptance_lengths
            p["correct"].append(correct(row, tokenizer.decode(o.new_ids, skip_special_tokens=True)))
        if temperature == 0:
            lossless &= all(torch.equal(outs[1].output_ids, outs[b].output_ids) for b in block_sizes)
        rep.append(repeated_4gram_share(outs[1].new_ids.tolist()))
    mean = lambda xs: sum(xs) / max(1, len(xs))
    base = mean(per[1]["tpot"])
    out = {"prompts": len(rows), "lossless": lossless if temperature == 0 else None,
           "repeated_4gram_share": mean(rep), "plain_tokens_per_s": 1 / base if base else None,
           "mean_new_tokens": mean(per[1]["tokens"]), "block_sizes": {}}
    for b in block_sizes:
        p = per[b]
        checks = [c for c in p["correct"] if c is not None]
        total = sum(p["time"])
        hist = [p["lengths"].count(k) for k in range(1, b + 1)]
        out["block_sizes"][str(b)] = {
            "tau": mean(p["tau"]), "speedup": base / mean(p["tpot"]),
            "tokens_per_s": 1 / mean(p["tpot"]),
            "draft_share": sum(p["draft"]) / total, "verify_share": sum(p["verify"]) / total,
            "acceptance_histogram": hist,
            "accuracy": mean(checks) if checks else None}
    base_checks = [c for c in per[1]["correct"] if c is not None]
    out["plain_accuracy"] = mean(base_checks) if base_checks else None
    return out


def warm_up(target, tokenizer, drafter, block_sizes) -> None:
    """One short decode at block size 1 and at each block size, untimed: first calls pay for
    allocations and dispatch that no later call pays."""
    warm = chat_ids(tokenizer, [{"role": "user", "content": "warm up"}])
    for b in [1, *block_sizes]:
        speculative_generate(target, drafter if b > 1 else None, warm, max_new_tokens=32,
                             block_size=b)


def plot(results: dict, path: Path) -> None:
    from matplotlib.figure import Figure   # no pyplot: leaves the caller's backend alone

    suites = list(results["suites"])
    B = str(results["block_sizes"][0])
    fig = Figure(figsize=(14, 3.8))
    axes = fig.subplots(1, 3)
    taus = [results["suites"][s]["block_sizes"][B]["tau"] for s in suites]
    sps = [results["suites"][s]["block_sizes"][B]["speedup"] for s in suites]
    axes[0].bar(suites, taus, color="C2")
    axes[0].set(title=f"tau (block size {B})", ylabel="tokens per verify step")
    axes[1].bar(suites, sps, color="C0")
    axes[1].axhline(1.0, color="k", lw=0.8, ls="--")
    axes[1].set(title="speedup over plain decoding", ylabel="speedup (x)")
    for s in suites:
        h = results["suites"][s]["block_sizes"][B]["acceptance_histogram"]
        tot = max(1, sum(h))
        axes[2].plot(range(1, len(h) + 1), [c / tot for c in h], marker="o", label=s)
    axes[2].set(title="tokens committed per step", xlabel="accepted + 1", ylabel="share of steps")
    axes[2].legend()
    for ax in axes[:2]:
        ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


@torch.no_grad()
def step_times(target, drafter, context: int = 512, repeats: int = 20,
               lean: bool | None = None) -> dict:
    """Median milliseconds of the pieces of a step: a prefill of `context` tokens, a plain
    decode step, a verify pass over B tokens, and one drafter call for a block of B. The target's
    passes are the ones a decode runs (``decoding.target_pass``; lean: through lean.py, None
    where the target supports it, as a decode's default)."""
    from transformers import DynamicCache

    median = lambda fn: median_ms(fn, repeats, ids.device)
    lean = lean_of(target, DecodingConfig(lean=lean))
    ids = torch.randint(0, 200, (1, context))
    cache = DynamicCache()
    out = {"prefill_ms": median(lambda: target_pass(target, ids, DynamicCache(), True, False,
                                                    lean=lean))}
    target_pass(target, ids, cache, False, False, lean=lean)
    hidden = torch.randn(1, context, len(drafter.target_layer_ids) * target.config.hidden_size)
    for B in (1, 4, 8, 16):
        block = ids[:, :B]
        pos = torch.arange(context, context + B)[None]

        def verify():
            target_pass(target, block, cache, True, False, lean=lean, position_ids=pos)
            crop_cache(cache, context)
        out[f"verify_{B}_ms"] = median(verify)
        if B > 1:
            dcache = drafter.new_cache()
            with drafting(drafter, lean):           # as a decode drafts
                drafter.draft(target, ids[:, -1], hidden, context, dcache, B)   # context cached
                out[f"draft_{B}_ms"] = median(
                    lambda: drafter.draft(target, ids[:, -1], hidden[:, :0], context, dcache, B))
    out["decode_ms"] = out.pop("verify_1_ms")
    return {**out, "lean": lean}


def step_times_by_threads(target, drafter, threads, context: int = 512, repeats: int = 20,
                          rounds: int = 3, lean: bool | None = None) -> dict:
    """``step_times`` at each torch thread count, the counts taking turns for ``rounds`` rounds
    (so all see the same machine state); per count the median over rounds of each piece, and
    what a DFlash step costs in plain decode steps (B = 16: one draft + one 16-token verify)."""
    runs = take_turns(lambda: step_times(target, drafter, context, repeats, lean), threads, rounds)
    out = {}
    for t, rs in runs.items():
        ms = {k: sorted(x[k] for x in rs)[len(rs) // 2] for k in rs[0] if k != "lean"}
        ms["verify_16_in_decode_steps"] = ms["verify_16_ms"] / ms["decode_ms"]
        ms["dflash_step_in_decode_steps"] = (ms["draft_16_ms"] + ms["verify_16_ms"]) / ms["decode_ms"]
        out[str(t)] = ms
    return out


def plot_step_times(results: dict, path: Path) -> None:
    """Bars: decode, verify and draft milliseconds (B = 4, 8, 16) per thread count."""
    from matplotlib.figure import Figure

    keys = ["decode_ms"] + [f"{kind}_{B}_ms" for kind in ("verify", "draft") for B in (4, 8, 16)]
    fig = Figure(figsize=(9, 3.6))
    ax = fig.subplots()
    counts = list(results["threads"])
    width = 0.8 / len(counts)
    for j, t in enumerate(counts):
        ax.bar([i + j * width for i in range(len(keys))], [results["threads"][t][k] for k in keys],
               width, label=f"{t} thread{'s' if t != '1' else ''}")
    ax.set_xticks([i + width * (len(counts) - 1) / 2 for i in range(len(keys))],
                  [k[:-3].replace("_", " ") for k in keys])
    ax.set(ylabel="ms (median)", title=f"pieces of a step, context {results['context']} "
                                       f"({results['target']}, {results['drafter_layers']}-layer drafter)")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m minidflash bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suites", nargs="+", default=["arithmetic", "code"],
                   help="files in data/prompts (arithmetic code humaneval mtbench gsm8k math500)")
    p.add_argument("--n", type=count, default=10,
                   help="prompts per suite, the first n of the part (default 10)")
    p.add_argument("--split", choices=common.SPLITS, default="test",
                   help="which part of each suite: test (default: the prompts after the first "
                        f"{common.DEV_PROMPTS}, where results are reported), dev (the first "
                        f"{common.DEV_PROMPTS}, where settings are chosen) or all")
    p.add_argument("--block-sizes", type=at_least(2, "(1 is plain decoding, always run)"),
                   nargs="+", default=None, metavar="B",
                   help="block sizes against plain decoding, each 2 to the drafter's "
                        "(default: the drafter's)")
    p.add_argument("--target", default=None, help="hub id or directory (default: the tiny target)")
    add_dtype(p)
    p.add_argument("--drafter", default=None,
                   help="hub id or directory (default: the tiny drafter)")
    add_threads(p, [1], more=": timings on a shared machine swing less; several counts only "
                "with --step-times or --batch-sizes, e.g. --threads 1 2")
    p.add_argument("--out", type=out_file, default=None,
                   help="write the figures here as JSON (and a .png beside it)")
    p.add_argument("--step-times", action="store_true",
                   help="only time prefill / decode / verify / draft steps (context 512), at "
                        "each of --threads, the counts taking turns; the target's passes are a "
                        "decode's (decoding.target_pass; --no-lean: transformers' forward)")
    p.add_argument("--methods", nargs="+", default=None,
                   help="compare methods instead of block sizes: plain dflash:B ar:k lookup:k "
                        "generate llamacpp-plain/bf16 (see minidflash/tools/measure/methods.py); "
                        "greedy")
    p.add_argument("--ar-drafter", default=None, help="the AR drafter (default data/ar_drafter)")
    p.add_argument("--draft-cost", action="store_true",
                   help="only time a drafter call against drafted tokens 1..16 (figure 3)")
    p.add_argument("--batch-sizes", type=count, nargs="+", default=None,
                   help="throughput against batch size instead: plain and DFlash (the first of "
                        "--block-sizes) over batches of N prompts, e.g. 1 2 4 8 16 (batch_bench.py)")
    p.add_argument("--full-vocab", action="store_true",
                   help="ignore the drafter's draft_vocab.json and draft over the whole vocabulary "
                        "(what an engine that does not read the file does)")
    add_flags(p, skip=("block_size", "record_steps"), defaults={"max_new_tokens": 256},
              why="--block-sizes names the block sizes, and a benchmark records no steps")
    add_load(p)
    a = p.parse_args(argv)
    fields = flag_fields(a, skip=("block_size", "record_steps", "max_new_tokens"))
    own = "lean" if a.step_times else "exact" if a.batch_sizes else None    # what each takes
    timing = {k: v for k, v in fields.items() if k != own}
    if timing and (a.methods or a.draft_cost or a.step_times or a.batch_sizes):
        p.error(f"--{next(iter(timing)).replace('_', '-')}: with --methods each method names its "
                f"decoding in its text (e.g. dflash:8/p0.3/T0.7); --draft-cost, --step-times and "
                f"--batch-sizes time passes, not a decoding (--step-times takes --lean/--no-lean, "
                f"--batch-sizes --exact)")
    if len(a.threads) > 1 and not (a.step_times or a.batch_sizes):
        p.error(f"--threads {' '.join(map(str, a.threads))}: several thread counts only with "
                f"--step-times or --batch-sizes; run a benchmark once per count")
    if not (a.step_times or a.draft_cost):          # the runs that read the suites' prompts
        check_suites(p.error, a.suites, a.n, a.split)
    for spec in a.methods or ():                    # each method's text, before any load
        from . import methods as m
        or_error(p.error, f"--methods {spec}", m.parse, spec)
    torch.set_num_threads(a.threads[0])
    torch.manual_seed(0)
    target, tokenizer = or_error(p.error, f"--target {a.target}", load_target, a.target,
                                 dtype=a.dtype)
    print(f"bench: the target in {str(target.dtype).replace('torch.', '')}", file=sys.stderr)
    command = "python -m minidflash bench " + " ".join(sys.argv[1:] if argv is None else argv)
    if a.draft_cost or a.methods:
        return compare(a, target, tokenizer, command)
    drafter = or_error(p.error, f"--drafter {a.drafter}", load_drafter, a.drafter, target=target,
                       draft_vocab=not a.full_vocab)
    stamp = dict(dtype=target.dtype, drafters=[a.drafter or TINY_DRAFTER_DIR], load=a.load)
    if a.step_times:
        try:
            lean = lean_of(target, DecodingConfig(lean=a.lean))
        except ValueError as e:
            p.error(f"--lean: {e}")
        results = {"command": command, "target": a.target or repo_relative(TINY_TARGET_DIR),
                   "drafter": repo_relative(a.drafter or TINY_DRAFTER_DIR),
                   "drafter_layers": drafter.config.num_hidden_layers, "context": 512,
                   "draft_vocab": None if drafter.draft_vocab is None else drafter.draft_vocab.numel(),
                   "lean": lean,
                   "threads": step_times_by_threads(target, drafter, a.threads, context=512,
                                                    lean=lean)}
        for t, ms in results["threads"].items():
            print(f"{t} thread(s): " + ", ".join(f"{k} {v:.2f}" for k, v in ms.items()))
        write(results, a.out, plot_step_times, **stamp)
        return results
    over = [b for b in (a.block_sizes or []) if b > drafter.block_size]
    if over:
        p.error(f"--block-sizes {' '.join(map(str, over))}: over the drafter's trained block size "
                f"{drafter.block_size}; give block sizes in 2..{drafter.block_size}")
    if a.batch_sizes:
        from . import batch_bench
        try:
            return batch_bench.run(target, tokenizer, drafter, a.suites, a.batch_sizes, a.threads,
                                   a.n, (a.block_sizes or [drafter.block_size])[0],
                                   a.max_new_tokens, command, split=a.split,
                                   after_suite=lambda r: write(r, a.out, batch_bench.plot, **stamp),
                                   exact=bool(a.exact))
        except ValueError as e:
            p.error(str(e))
    a.block_sizes = a.block_sizes or [drafter.block_size]
    check_decoding(p.error, target, drafter, {**fields, "max_new_tokens": a.max_new_tokens},
                   [chat_ids(tokenizer, r["messages"]) for suite in a.suites
                    for r in common.suite_prompts(suite, a.split, a.n)],
                   block_size=max(a.block_sizes), stop_token_ids=stop_ids(tokenizer))
    config = DecodingConfig.of(drafter).override(**fields)
    results = {"block_sizes": a.block_sizes, "decoding": str(config),
               "p_min": config.p_min, "temperature": config.temperature,
               "max_new_tokens": a.max_new_tokens, "n": a.n, "split": a.split,
               "threads": torch.get_num_threads(),
               "drafter_layers": drafter.config.num_hidden_layers,
               "draft_vocab": None if drafter.draft_vocab is None else drafter.draft_vocab.numel(),
               "command": command,
               "suites": {}}
    warm_up(target, tokenizer, drafter, a.block_sizes)
    t0 = time.time()
    for suite in a.suites:
        rows = suite_rows(suite, a)
        results["suites"][suite] = r = run_suite(target, tokenizer, drafter, rows, a.block_sizes,
                                                 a.max_new_tokens, **fields)
        r["prompts_used"] = split_label(suite, a.split, len(rows))
        for b, s in r["block_sizes"].items():
            acc = "" if s["accuracy"] is None else f"  accuracy {s['accuracy']:.2f} (plain {r['plain_accuracy']:.2f})"
            print(f"{suite:>11}  B={b:>2}  tau {s['tau']:.2f}  speedup {s['speedup']:.2f}x  "
                  f"{s['tokens_per_s']:.0f} tok/s (plain {r['plain_tokens_per_s']:.0f})  draft "
                  f"{100 * s['draft_share']:.0f}% verify {100 * s['verify_share']:.0f}%  "
                  f"repeated 4-grams {100 * r['repeated_4gram_share']:.0f}%  lossless {r['lossless']}{acc}")
    B = str(a.block_sizes[0])
    results["tau"] = sum(s["block_sizes"][B]["tau"] for s in results["suites"].values()) / len(a.suites)
    results["speedup"] = sum(s["block_sizes"][B]["speedup"] for s in results["suites"].values()) / len(a.suites)
    results["wall_s"] = round(time.time() - t0, 1)
    write(results, a.out, plot, **stamp)
    return results


def suite_rows(suite: str, a) -> list[dict]:
    """The prompts a run reads, said once on stderr (which part of the suite they are)."""
    try:
        rows = common.suite_prompts(suite, a.split, a.n)
    except ValueError as e:
        raise SystemExit(f"bench: {e}") from None
    print(f"{split_label(suite, a.split, len(rows))}", file=sys.stderr)
    return rows


def template_sources(suite: str, split: str, n: int) -> list[int]:
    """The prompts of the part (0-based in it) that GSM-Symbolic's templates were made from."""
    if suite != "gsm8k":
        return []
    from ..make_data.chat_prompts import GSM_SYMBOLIC_SOURCES

    first = common.part_start(split)
    return [line - first for line in GSM_SYMBOLIC_SOURCES if first <= line < first + n]


def compare(a, target, tokenizer, command: str) -> dict:
    """``--methods`` and ``--draft-cost``: see methods.py."""
    from . import methods as m

    if a.draft_cost:
        from .draft_cost import draft_cost, plot_draft_cost
        result = draft_cost(target)
        for name, ms in result["ms"].items():
            print(f"{name:>18}: " + " ".join(f"{t:.1f}" for t in ms) + "  ms for 1..16 tokens")
        plot = plot_draft_cost
        stamp = dict(dtype=target.dtype, drafters=[], load=a.load)   # random-weight drafters
    else:
        try:
            for spec in a.methods:
                m.parse(spec)
        except ValueError as e:
            raise SystemExit(f"bench --methods: {e}") from None
        targets = m.load_targets(target, a.methods)
        drafters = m.load_method_drafters(a.methods, targets, a.drafter, a.ar_drafter)
        stamp = dict(dtype=target.dtype, load=a.load,
                     drafters=m.method_folders(a.methods, a.drafter, a.ar_drafter))

        def plot(results, path):            # the bars, and the depth figure beside them
            m.plot_methods(results, path)
            if m.families(results["suites"][next(iter(results["suites"]))]["methods"]):
                m.plot_depth(results, path.with_name(path.stem + "_depth.png"))
        result = {"methods": a.methods, "max_new_tokens": a.max_new_tokens, "n": a.n,
                  "split": a.split, "threads": torch.get_num_threads(),
                  "dtype": str(target.dtype).replace("torch.", ""), "suites": {}}
        for spec in a.methods:               # what each method's step does, in words
            if (method := m.parse(spec)).kind not in ("lookup", "generate"):
                try:                         # a W the drafter's block or tree does not fit
                    W = m.exact_rows(method, drafters.get(spec))
                except ValueError as e:
                    raise SystemExit(f"bench --methods {spec}: {e}") from None
                config = m.config_of(method, drafters.get(spec))
                print(f"{spec}: {config.describe(targets[method.dtype], drafters.get(spec))}",
                      file=sys.stderr)
                result.setdefault("decodings", {})[spec] = str(config)
                if W and not m.exact_rows(m.parse(m.reference(spec, a.methods, drafters))):
                    print(f"{spec}: no plain decoding at its W = {W} in this run (plain/exact:{W}, "
                          f"exact mode's identity partner): its answers are held against plain, "
                          f"which they need not equal; add plain/exact:{W} to --methods",
                          file=sys.stderr)
        m.run_methods(targets, tokenizer, [{"messages": [{"role": "user", "content": "warm up"}]}],
                      a.methods, drafters, 16, progress=False)
        t0 = time.time()
        for suite in a.suites:
            rows = suite_rows(suite, a)
            result["suites"][suite] = r = m.run_methods(targets, tokenizer, rows, a.methods,
                                                        drafters, a.max_new_tokens)
            r["prompts_used"] = split_label(suite, a.split, len(rows))
            sources = template_sources(suite, a.split, len(rows))
            if sources:                     # GSM8K also without GSM-Symbolic's source items
                r["without_template_sources"] = m.without(r, sources)
            for spec, s in r["methods"].items():
                tau = "  -  " if s["tau"] is None else f"{s['tau']:.2f}"
                split = ("" if s["draft_ms_per_step"] is None else
                         f"draft {s['draft_ms_per_step']:5.1f} ms verify {s['verify_ms_per_step']:5.1f} ms/step  ")
                print(f"{suite:>11} {spec:>28}  tau {tau}  {split}TPOT {s['tpot_ms']:5.1f} ms "
                      f"{s['tokens_per_s']:6.1f} tok/s  speedup {s['speedup']:.2f}x (fastest plain "
                      f"{s['speedup_vs_fastest_plain']:.2f}x){m.llamacpp_plain.versus(s)}"
                      f"  identical {s['identical_count']}/{r['prompts']}")
                fmt = lambda g: "-" if g is None else format(g, ".1e")
                for d in s["divergences"]:
                    print(f"{'':>12}prompt {d['prompt'] + 1} of the part parts from {s['reference']} "
                          f"at new token {d['token']}: logit gap {fmt(d['gap'])}, fp32 head "
                          f"{fmt(d.get('gap_head32'))}, fp32 pass {fmt(d.get('gap_fp32'))} "
                          f"(plain's minus this one's)")
            if sources:
                w = r["without_template_sources"]
                print(f"{'':>12}without prompts {', '.join(str(i + 1) for i in w['dropped'])} of the "
                      f"part (GSM-Symbolic's templates were made from them): " + "; ".join(
                          f"{spec} tau {'-' if x['tau'] is None else format(x['tau'], '.2f')} "
                          f"{x['speedup_vs_fastest_plain']:.2f}x"
                          for spec, x in w["methods"].items()))
            result["wall_s"] = round(time.time() - t0, 1)
            if suite != a.suites[-1]:       # a long run keeps the suites it has finished
                write({**result, "command": command}, a.out, plot, **stamp)
    result["command"] = command
    result["threads"] = torch.get_num_threads()
    write(result, a.out, plot, **stamp)
    return result


if __name__ == "__main__":
    main()

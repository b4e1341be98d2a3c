"""``python -m minidflash step-profile``: where one target pass's time goes.

Not a paper section: the cost side of section 3 on a CPU. This command times a plain decode step
(1 token) and a verify pass (``--tokens``, 16 by default) after a context of ``--context``
tokens, under ``torch.profiler``, through transformers' forward ("torch") and through lean.py
("lean"), the two taking turns, and splits each pass's wall time into:

    matmul      aten::mm / addmm / bmm / linear / matmul, oneDNN's and MKL's packed linear,
                row_product.py's kernel
                (the projections and the lm_head)
    attention   scaled_dot_product_attention and its kernels; in exact mode (``--passes exact``,
                every pass on ``--rows`` W rows) every op inside ``exact.invariant_attention``
    norms       RMSNorm's pow / mean / rsqrt and the activation (silu)
    cache       the KV cache: cat, index_select, slicing copies, crop
    other ops   every other aten op's own time (rotary embedding, adds, casts, masks)
    overhead    the wall time no aten op accounts for: Python, nn.Module calls, dispatch

The op times are each op's *self* CPU time (its children not counted twice) in a profiled
pass; ``overhead`` is the median wall time of the same pass run unprofiled less their sum (the
profiler slows the ops a little, so the overhead is, if anything, understated). Thread counts
and passes take turns, so all see the same machine state. SmolLM2-135M in bf16 on one core of an
AMD EPYC with AVX512-BF16 (data/results/step_profile_smollm2_bfloat16.json): the one-token pass
is mostly matrix products, and the same products with their weights packed once run 1.3x
faster; lean.py's docstring has the rest.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile
from transformers import DynamicCache

from ...decoding import crop_cache, target_pass
from ...exact import ATTENTION
from ...files import save_figure
from ...target import load_target
from ...decoding_config import EXACT_ROWS
from ..common import add_dtype, add_load, add_threads, at_least, count, or_error, out_file, write

KINDS = {
    "matmul": ("aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::matmul",
               "aten::_mkldnn", "mkldnn", "mkl::_mkl_linear", "minidflash::row_product"),
    "attention": ("scaled_dot_product", "aten::_scaled_dot", "flash_attention", "aten::softmax",
                  "aten::_softmax"),
    "norms": ("aten::pow", "aten::mean", "aten::rsqrt", "aten::silu", "aten::rms_norm"),
    "cache": ("aten::cat", "aten::index_select", "aten::slice", "aten::copy_", "aten::narrow"),
}


def kind_of(name: str) -> str:
    return next((k for k, keys in KINDS.items() if any(key in name for key in keys)), "other ops")


def inside(event, name: str) -> bool:
    """Whether a profiled op ran inside the function the profiler calls ``name``."""
    while event is not None and event.name != name:
        event = event.cpu_parent
    return event is not None


def split_pass(target, tokens: int, context: int, repeats: int, final: bool = True,
               lean: bool = False, exact: int = 0) -> dict:
    """ms of one pass over ``tokens`` new tokens after ``context`` cached ones, split by kind
    (medians of ``repeats`` profiled passes). final: the pass plain greedy decoding of a bf16
    target runs (the last hidden state too); the verify pass also returns every layer's."""
    torch.manual_seed(0)
    ids = torch.randint(0, target.config.vocab_size, (1, context + tokens))
    cache = DynamicCache()
    target_pass(target, ids[:, :context], cache, False, final, lean=lean, exact=exact)
    layers = tokens > 1
    rows = []
    for _ in range(repeats + 1):                  # the first, untimed, pays one-off allocations
        pos = torch.arange(context, context + tokens)[None]
        start = time.perf_counter()               # the wall time, unprofiled
        target_pass(target, ids[:, context:], cache, layers, final, lean=lean, exact=exact,
                    position_ids=pos)
        wall = 1e3 * (time.perf_counter() - start)
        crop_cache(cache, context)
        with profile(activities=[ProfilerActivity.CPU]) as prof:     # the same pass, its ops
            target_pass(target, ids[:, context:], cache, layers, final, lean=lean, exact=exact,
                        position_ids=pos)
        crop_cache(cache, context)
        by = dict.fromkeys([*KINDS, "other ops"], 0.0)
        for event in prof.events():
            if event.name.startswith(("aten::", "mkl::", "minidflash::")) or "mkldnn" in event.name:
                kind = "attention" if inside(event, ATTENTION) else kind_of(event.name)
                by[kind] += event.self_cpu_time_total / 1e3
        by["overhead"] = max(0.0, wall - sum(by.values()))
        by["wall"] = wall
        rows.append(by)
    rows = rows[1:]
    med = lambda xs: sorted(xs)[len(xs) // 2]
    return {k: med([r[k] for r in rows]) for k in rows[0]}


def run(target, thread_counts, tokens: int, context: int, repeats: int,
        passes=("torch", "lean"), rows: int = EXACT_ROWS) -> dict:
    """{pass: {threads: {"1": split, str(tokens): split}}}, the counts and passes taking turns
    (rows: exact mode's W, the exact pass's rows)."""
    out = {p: {str(t): {} for t in thread_counts} for p in passes}
    for n in (1, tokens):
        for t in thread_counts:
            torch.set_num_threads(t)
            for p in passes:
                out[p][str(t)][str(n)] = split_pass(target, n, context, repeats,
                                                    lean=p != "torch",
                                                    exact=rows if p == "exact" else 0)
    return out


def markdown(results: dict) -> str:
    """The split as a markdown table: a row per pass, thread count and token count, ms per kind,
    and the lean pass's speedup over transformers' at the same point."""
    kinds = [*KINDS, "other ops", "overhead"]
    rows = ["| pass | threads | tokens | wall ms | " + " | ".join(kinds) + " | speedup |",
            "|---" * (len(kinds) + 5) + "|"]
    split = results["split"]
    for name, by_t in split.items():
        for t, by in by_t.items():
            for n, s in by.items():
                base = split.get("torch", {}).get(t, {}).get(n)
                gain = f"{base['wall'] / s['wall']:.2f}x" if base and name != "torch" else ""
                rows.append(f"| {name} | {t} | {n} | {s['wall']:.1f} | "
                            + " | ".join(f"{s[k]:.1f}" for k in kinds) + f" | {gain} |")
    return "\n".join(rows)


def figure(results: dict):
    """One bar a pass, thread count and token count, split by kind (a matplotlib Figure)."""
    from matplotlib.figure import Figure

    kinds = [*KINDS, "other ops", "overhead"]
    bars = [(f"{p}: {t} thr, {n} tok", s) for p, by_t in results["split"].items()
            for t, by in by_t.items() for n, s in by.items()]
    fig = Figure(figsize=(9, 1.2 + 0.45 * len(bars)))
    ax = fig.subplots()
    left = [0.0] * len(bars)
    for i, kind in enumerate(kinds):
        widths = [s[kind] for _, s in bars]
        ax.barh([b for b, _ in bars], widths, left=left, color=f"C{i}", label=kind)
        left = [a + w for a, w in zip(left, widths)]
    ax.set(xlabel="ms (median pass)", title=f"where a target pass's time goes "
                                          f"({results['target'].split('/')[-1]}, {results['dtype']})")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def plot(results: dict, path) -> None:
    save_figure(figure(results), path, dpi=100)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m minidflash step-profile", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default=None, help="hub id or directory (default: the tiny target)")
    add_dtype(p)
    add_threads(p, default=[1, 2], more=": the counts take turns")
    p.add_argument("--tokens", type=at_least(2), default=16,
                   help="the verify pass's tokens (default 16)")
    p.add_argument("--context", type=count, default=256, help="cached tokens before (default 256)")
    p.add_argument("--repeats", type=count, default=15, help="profiled passes a point (default 15)")
    p.add_argument("--passes", nargs="+", choices=("torch", "lean", "exact"),
                   default=["torch", "lean"],
                   help="transformers' forward, lean.py's pass (default: both, taking turns), "
                        "exact: lean.py's pass in exact mode (--rows, exact.py's attention)")
    p.add_argument("--rows", type=at_least(1), default=EXACT_ROWS,
                   help=f"exact mode's W: the rows of every exact pass, at least --tokens (default "
                        f"{EXACT_ROWS}; a chain of B is /exact's W = B)")
    p.add_argument("--out", type=out_file, default=None,
                   help="write the split here (and a .png beside it)")
    add_load(p)
    a = p.parse_args(argv)
    if "exact" in a.passes and a.tokens > a.rows:
        p.error(f"--tokens {a.tokens} with --rows {a.rows}: an exact pass holds at most W = --rows "
                f"tokens; give --rows {a.tokens} or more")
    target, _ = or_error(p.error, f"--target {a.target}", load_target, a.target, dtype=a.dtype)
    results = {"command": "python -m minidflash step-profile " + " ".join(
                   sys.argv[1:] if argv is None else argv),
               "target": a.target or "tiny", "dtype": str(target.dtype).replace("torch.", ""),
               "context": a.context, "tokens": a.tokens, "repeats": a.repeats,
               **({"rows": a.rows} if "exact" in a.passes else {}),
               "split": run(target, a.threads, a.tokens, a.context, a.repeats, a.passes, a.rows)}
    for name, by_t in results["split"].items():
        for t, by in by_t.items():
            for n, s in by.items():
                print(f"{name:>5}, {t} thread(s), {n:>2} token(s): wall {s['wall']:.1f} ms = "
                      + ", ".join(f"{k} {s[k]:.1f}" for k in [*KINDS, "other ops", "overhead"]))
    write(results, a.out, plot, dtype=target.dtype, drafters=[], load=a.load)
    return results

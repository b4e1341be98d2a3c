"""``python -m minidflash exact-attention``: exact mode's attention against SDPA, one layer.

Not a paper section: what exact mode's attention (``exact.invariant_attention``) costs on a CPU
next to the attention the lean pass runs without it. For each thread count (``--threads``),
input dtype (``--dtypes``), pass and key count (``--keys``), one layer's attention over random
tensors of SmolLM2-135M's heads (``--heads 9 3``, ``--head-dim 64``) is timed two ways:

    sdpa        torch's ``F.scaled_dot_product_attention`` as lean.py calls it: its packed GQA
                call (``lean.attend``) in bf16, transformers' SDPA function in fp32
    invariant   ``exact.invariant_attention`` with the pass's ``exact.Seen`` made beforehand,
                as the lean pass makes it once for all layers (``seen``: that once-a-pass cost,
                a tree's gathering plan included)

The passes are a chain of ``--rows`` rows (row t sees the keys up to its own) and a tree of as
many (a binary one, row r under row (r - 1) // 2: each sees the cache, its ancestors, itself),
the keys counting the pass's own. The two methods take turns call by call in one process; each
number is the median of ``--repeats`` calls, in ms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from types import SimpleNamespace

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from ...exact import Seen, invariant_attention
from ...lean import attend
from ...tree import tree_attention_mask
from ..common import add_load, add_threads, at_least, count, out_file, write

PASSES = ("chain", "tree")
DTYPES = ("bfloat16", "float32")


def sdpa(q, k, v, mask, scaling: float):
    """The lean pass's attention without exact mode, for a pass with a mask (N, T, H, D)."""
    if q.dtype == torch.bfloat16:
        return attend(q, k, v, mask, scaling)
    module = SimpleNamespace(num_key_value_groups=q.shape[1] // k.shape[1], is_causal=True)
    return sdpa_attention_forward(module, q, k, v, mask, dropout=0.0, scaling=scaling)[0]


def pass_mask(kind: str, rows: int, keys: int) -> torch.Tensor:
    """(1, 1, rows, keys) bool: a chain's rows or a tree's, after keys - rows cached keys."""
    if kind == "chain":
        return torch.ones(rows, keys, dtype=torch.bool).tril(keys - rows)[None, None]
    parents = torch.arange(rows - 1) // 2 - 1          # row r under row (r - 1) // 2
    return tree_attention_mask(parents, keys - rows, torch.bool)


def one_point(kind: str, keys: int, dtype: torch.dtype, rows: int, heads: int, kv_heads: int,
              head_dim: int, repeats: int) -> dict:
    """{"sdpa": ms, "invariant": ms, "seen": ms}: medians, the two methods taking turns."""
    g = torch.Generator().manual_seed(keys)
    q = torch.randn(1, heads, rows, head_dim, generator=g).to(dtype)
    k, v = (torch.randn(1, kv_heads, keys, head_dim, generator=g).to(dtype) for _ in range(2))
    mask, scaling = pass_mask(kind, rows, keys), head_dim ** -0.5

    def make_seen():                                          # what a pass makes once
        seen = Seen(mask, 1, rows, keys, q.device)
        if not seen.chain:
            seen.gathers(heads // kv_heads, kv_heads)             # a tree's: at its first layer
        return seen

    seen = make_seen()
    work = {"sdpa": lambda: sdpa(q, k, v, mask, scaling),
            "invariant": lambda: invariant_attention(q, k, v, mask, scaling, seen=seen),
            "seen": make_seen}
    for fn in work.values():                                  # one-off allocations, untimed
        fn()
    times = {name: [] for name in work}
    for r in range(repeats):
        for name in (list(work) if r % 2 == 0 else list(work)[::-1]):
            start = time.perf_counter()
            work[name]()
            times[name].append(1e3 * (time.perf_counter() - start))
    return {name: statistics.median(ts) for name, ts in times.items()}


def run(threads, dtypes, passes, keys, rows: int, heads: int, kv_heads: int, head_dim: int,
        repeats: int) -> dict:
    """{threads: {dtype: {pass: {keys: one_point}}}}; the caller's thread count restored."""
    before, out = torch.get_num_threads(), {}
    try:
        for t in threads:
            torch.set_num_threads(t)
            out[str(t)] = {d: {p: {str(n): one_point(p, n, getattr(torch, d), rows, heads,
                                                     kv_heads, head_dim, repeats)
                                   for n in keys} for p in passes} for d in dtypes}
    finally:
        torch.set_num_threads(before)
    return out


def markdown(results: dict) -> str:
    """The timings as a markdown table: a row per pass, key count, thread count and dtype."""
    rows = [("| pass | keys | threads | dtype | SDPA ms | invariant ms | invariant / SDPA "
             "| Seen ms (once a pass) |"), "|---|---:|---:|---|---:|---:|---:|---:|"]
    for t, by_dtype in results["ms"].items():
        for d, by_pass in by_dtype.items():
            for p, by_keys in by_pass.items():
                for n, x in by_keys.items():
                    rows.append(f"| {p} | {n} | {t} | {d} | {x['sdpa']:.3f} | "
                                f"{x['invariant']:.3f} | {x['invariant'] / x['sdpa']:.2f} | "
                                f"{x['seen']:.3f} |")
    return "\n".join(rows)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m minidflash exact-attention", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keys", type=count, nargs="+", default=[256, 1024], metavar="L",
                   help="keys a pass attends over, its own rows' among them (default 256 1024)")
    add_threads(p, default=[1, 2], more=": the counts one after the other")
    p.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES),
                   help="the inputs' dtypes (default: both)")
    p.add_argument("--passes", nargs="+", choices=PASSES, default=list(PASSES),
                   help="a chain's mask, a tree's (default: both)")
    p.add_argument("--rows", type=at_least(2), default=16, help="rows a pass (default 16)")
    p.add_argument("--heads", type=count, nargs=2, default=[9, 3], metavar=("H", "HK"),
                   help="query heads and key heads (default 9 3: SmolLM2-135M)")
    p.add_argument("--head-dim", type=count, default=64, help="D (default 64)")
    p.add_argument("--repeats", type=count, default=50, help="calls a method a point (default 50)")
    p.add_argument("--out", type=out_file, default=None, help="write the timings here (JSON)")
    add_load(p)
    a = p.parse_args(argv)
    heads, kv_heads = a.heads
    if heads % kv_heads:
        p.error(f"--heads {heads} {kv_heads}: the query heads are a multiple of the key heads")
    if min(a.keys) < a.rows:
        p.error(f"--keys {min(a.keys)}: a pass's keys count its {a.rows} rows (--rows)")
    results = {"command": "python -m minidflash exact-attention " + " ".join(
                   sys.argv[1:] if argv is None else argv),
               "heads": heads, "kv_heads": kv_heads, "head_dim": a.head_dim, "rows": a.rows,
               "repeats": a.repeats, "threads": a.threads,
               "ms": run(a.threads, a.dtypes, a.passes, a.keys, a.rows, heads, kv_heads,
                         a.head_dim, a.repeats)}
    print(markdown(results))
    write(results, a.out, None, dtype=" and ".join(a.dtypes), drafters=[], load=a.load)
    return results

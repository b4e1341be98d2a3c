"""``python -m minidflash products``: a pass's matrix products in fp32, each way a CPU offers.

Not a paper section: why a verify pass over k tokens costs what it does on a CPU without bf16
units (``step-profile``: there a pass is mostly its products). Every product of one target pass
(each layer's q, k, v / o / gate, up / down projections, then the lm_head) is timed over M rows,
M = 1, 2, 4, 8, 16, with the target's own shapes and fresh weights for each layer, so that the
weights stream from memory as in a real pass, the ways taking turns in one process:

    F.linear    torch's fp32 product over the weights as they lie (transformers' ``nn.Linear``):
                for more than one row it lays the weight out again on every call
    mkl         MKL's packed fp32 product (``torch.ops.mkl``), the weights packed once: the lean
                pass's fp32 product (lean.py)
    onednn      oneDNN's packed fp32 product (``torch.ops.mkldnn``), packed once
    bf16 -> fp32  weights stored in bf16 (half the bytes), each cast to fp32 for an ``F.linear``
                (what a compiled product with bf16 weights and fp32 arithmetic would read)
    row_product row_product.py's kernel over the weights as they lie, 8 rows at a time (the
                lean pass's fp32 product of a decode step; where it is built)

Each cell is the median of ``--repeats`` passes' products, in ms, and the ratio to the same way
at one row; ``same_rows`` says whether each way's rows at M < 16 are the bits of its 16-row
product (exact mode needs one shape where they are not).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from ... import row_product
from ...target import load_target
from ..common import add_load, add_threads, at_least, or_error, out_file, write

ROWS = (1, 2, 4, 8, 16)


def shapes_of(config) -> list[tuple[int, int]]:
    """(out, in) of one layer's products (q, k, v fused; o; gate, up fused; down)."""
    head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    H, I = config.hidden_size, config.intermediate_size
    qkv = head * (config.num_attention_heads + 2 * config.num_key_value_heads)
    return [(qkv, H), (config.num_attention_heads * head, H), (2 * I, H), (H, I)]


def ways(weight: torch.Tensor) -> dict:
    """{way: x -> x @ weight.T} for one fp32 weight (out, in), each laid out as it needs."""
    mkl = torch.ops.mkl._mkl_reorder_linear_weight(weight, 16)
    onednn = torch.ops.mkldnn._reorder_linear_weight(weight, 16)
    half = weight.bfloat16()
    by_rows = lambda x: torch.cat([row_product.product(c, weight)
                                   for c in x.split(row_product.MAX_ROWS)])
    return {"F.linear": lambda x: F.linear(x, weight),
            "mkl": lambda x: torch.ops.mkl._mkl_linear(x, mkl, weight, None, x.shape[0]),
            "onednn": lambda x: torch.ops.mkldnn._linear_pointwise(x, onednn, None, "none", [], ""),
            "bf16 -> fp32": lambda x: F.linear(x, half.float()),
            **({"row_product": by_rows} if row_product.fits(weight) else {})}


def measure(config, layers: int, repeats: int, rows=ROWS) -> dict:
    """{way: {M: median ms of one pass's products}} and {way: rows of M < 16 = 16-row bits}."""
    g = torch.Generator().manual_seed(0)
    weights = [torch.randn(o, i, generator=g) * 0.02 for _ in range(layers)
               for o, i in shapes_of(config)] + [torch.randn(config.vocab_size,
                                                             config.hidden_size, generator=g) * 0.02]
    products = [ways(w) for w in weights]
    names = list(products[0])
    xs = {(M, w.shape[1]): torch.randn(M, w.shape[1], generator=g) for M in rows for w in weights}
    times = {n: {M: [] for M in rows} for n in names}
    for r in range(repeats):
        for M in rows:
            for n in (names if r % 2 == 0 else names[::-1]):
                start = time.perf_counter()
                for w, p in zip(weights, products):
                    p[n](xs[M, w.shape[1]])
                times[n][M].append(1e3 * (time.perf_counter() - start))
    x16 = {i: torch.randn(16, i, generator=g) for i in {w.shape[1] for w in weights}}
    same = {n: all(torch.equal(p[n](x16[w.shape[1]][:M]), p[n](x16[w.shape[1]])[:M])
                   for w, p in zip(weights, products) for M in rows if M < 16) for n in names}
    return {"ms": {n: {str(M): statistics.median(ts) for M, ts in by.items()}
                   for n, by in times.items()}, "same_rows": same}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m minidflash products", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default=None, help="hub id or directory whose shapes are timed "
                                                   "(default: the tiny target)")
    add_threads(p, default=[1, 2], more=": the counts one after the other")
    p.add_argument("--repeats", type=at_least(1), default=7, help="passes a cell (default 7)")
    p.add_argument("--out", type=out_file, default=None, help="write the timings here as JSON")
    add_load(p)
    a = p.parse_args(argv)
    target, _ = or_error(p.error, f"--target {a.target}", load_target, a.target,
                         dtype="float32")
    config = target.config
    del target
    before, results = torch.get_num_threads(), {}
    try:
        for t in a.threads:
            torch.set_num_threads(t)
            results[str(t)] = measure(config, config.num_hidden_layers, a.repeats)
    finally:
        torch.set_num_threads(before)
    for t, r in results.items():
        for n, by in r["ms"].items():
            print(f"{t} thread(s) {n:>13}: " + "  ".join(
                f"M={M} {ms:6.1f} ms ({ms / by['1']:.2f}x)" for M, ms in by.items())
                + f"  rows as in 16: {'yes' if r['same_rows'][n] else 'no'}")
    out = {"command": "python -m minidflash products " + " ".join(argv or []),
           "target": a.target or "data/target", "rows": list(ROWS), "threads": results}
    write(out, a.out, None, dtype="float32", drafters=[], load=a.load)
    return out


if __name__ == "__main__":
    main()

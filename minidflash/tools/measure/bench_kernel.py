"""Benchmark the block-attention kernel against stock attention (paper section 4.2 sizes; a GPU).

    python -m minidflash bench-kernel [--out data/results/kernel_bench.json]

Two cases, the shapes of the published 8B drafter's attention (32 query heads, 8 key-value
heads, head dim 128, bf16):

* training: one sequence of S = 3072 tokens with n = 512 anchors of B = 16 slots, so 8192
  queries over 3072 + 8192 keys, forward and forward + backward;
* inference: one block of 16 queries over 4096 context features (everything visible), forward.

Methods: ``triton`` (minidflash.core.kernel), ``sdpa`` (torch's scaled_dot_product_attention with
the dense boolean mask and enable_gqa, the drafter's stock path), ``sdpa_kv_repeated`` (the
same with K/V repeated to 32 heads, which lets torch pick its memory-efficient kernel),
``flex`` (torch.nn.attention.flex_attention, compiled, with a BlockMask built from the same
mask.visible rule) and, at inference, ``sdpa_no_mask``. Masks are built once, outside the
timings, as a trainer would reuse them across layers. Writes a JSON table and a PNG plot next to
it. Before any timing, ``check_case`` compares the kernel's output and its three gradients, in
the run's dtype, with the fp32 reference on the same inputs, beside SDPA in that dtype (whose
error is what the dtype costs anyway): the training case, anchors near the sequence's end
(blocks longer than the tokens left) and the inference block; the JSON's ``checks``. After the
attention alone, ``train_step_rows`` times the drafter's whole training step at the published 8B
drafter's shape (random weights) on each drafter backend (sdpa, flex, triton); the JSON's
``train_step``. Without a CUDA device it says so and exits 0; ``--cpu-smoke`` runs tiny shapes
through Triton's interpreter instead, to check the script itself (its timings mean nothing).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from ...files import save_figure, write_json
from ..common import out_file

TRAIN = dict(N=1, S=3072, n=512, B=16, Hq=32, Hkv=8, D=128)
INFER = dict(N=1, S=4096, n=1, B=16, Hq=32, Hkv=8, D=128)
SMOKE_TRAIN = dict(N=1, S=40, n=4, B=4, Hq=4, Hkv=2, D=32)
SMOKE_INFER = dict(N=1, S=48, n=1, B=4, Hq=4, Hkv=2, D=32)
# the drafter's whole training step: the published 8B drafter's shape (budget.SHAPES), random
# weights, one sequence of S tokens with n anchors; and a tiny pair for --cpu-smoke
STEP = dict(shape="qwen3-8b", S=3072, n=512)
SMOKE_STEP = dict(shape=(dict(vocab_size=256, hidden_size=64, intermediate_size=128,
                              num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                              head_dim=32, tie_word_embeddings=False),
                         dict(num_hidden_layers=2, target_layer_ids=[1, 2], block_size=4,
                              mask_token_id=255)), S=40, n=4)


def make_case(N, S, n, B, Hq, Hkv, D, dtype, device, inference, seed=0):
    """q (N, Hq, n*B, D), k, v (N, Hkv, S + n*B, D) and anchors (N, n), sorted, in [1, S - B]."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(N, Hq, n * B, D, generator=g)
    k = torch.randn(N, Hkv, S + n * B, D, generator=g)
    v = torch.randn(N, Hkv, S + n * B, D, generator=g)
    if inference:
        anchors = torch.full((N, 1), S)
    else:
        anchors = torch.stack([(torch.randperm(S - B, generator=g)[:n] + 1).sort().values
                               for _ in range(N)])
    to = lambda t: t.to(device, dtype)
    return to(q), to(k), to(v), anchors.to(device)


def near_end(shape):
    """Anchors for the ragged case: every block starts within B of the sequence's end, so most
    run past the S context tokens (sorted; n of them, in [S - B + 1, S])."""
    S, n, B = shape["S"], shape["n"], shape["B"]
    return (S - torch.arange(n) * (B - 1) // max(1, n - 1)).flip(0).expand(shape["N"], n)


def check_case(name, shape, dtype, device, anchors=None):
    """The kernel in ``dtype`` against block_attention_reference in fp32 on the same (rounded)
    inputs: the output and dq, dk, dv. SDPA with the dense mask in ``dtype`` is the yardstick:
    the kernel passes where its largest error is within twice SDPA's, or within 2% of the
    reference's largest value (bf16 keeps 8 bits of mantissa)."""
    from ...core.kernel import block_attention, block_attention_reference
    from ...core.mask import dense_mask

    inference = name == "inference"
    q, k, v, a = make_case(**shape, dtype=dtype, device=device, inference=inference)
    a = a if anchors is None else anchors.to(device)
    S, B, group = shape["S"], shape["B"], shape["Hq"] // shape["Hkv"]
    g = torch.Generator().manual_seed(1)
    grad_out = torch.randn(q.shape, generator=g).to(device, dtype)
    dense = dense_mask(a, S, B)

    def outputs_and_grads(fn, *tensors):
        q, k, v, go = (t.detach() for t in tensors)
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        out = fn(q, k, v)
        return [out.detach().float(), *(t.float() for t in torch.autograd.grad(out, (q, k, v), go))]

    fp32 = [t.float() for t in (q, k, v, grad_out)]
    want = outputs_and_grads(lambda q, k, v: block_attention_reference(q, k, v, a, S, B), *fp32)
    got = outputs_and_grads(lambda q, k, v: block_attention(q, k, v, a, S, B), q, k, v, grad_out)
    sdpa = outputs_and_grads(lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=dense, enable_gqa=group > 1), q, k, v, grad_out)
    rows = []
    for tensor, w, x, y in zip(("out", "dq", "dk", "dv"), want, got, sdpa):
        err, sdpa_err = (x - w).abs().max().item(), (y - w).abs().max().item()
        scale = w.abs().max().item()
        rows.append(dict(case=name, tensor=tensor, max_abs_ref=scale, kernel_max_abs_err=err,
                         sdpa_max_abs_err=sdpa_err,
                         ok=bool(err == err and err <= max(2 * sdpa_err, 0.02 * scale))))
        print(f"check {name:17s} {tensor:3s} kernel {err:.2e}  sdpa {sdpa_err:.2e}  "
              f"(largest |ref| {scale:.2e})  {'ok' if rows[-1]['ok'] else 'FAILED'}", flush=True)
    return rows


def train_step_rows(shape, S, n, dtype, device, backends=None):
    """One drafter training step (forward, the paper's weighted loss over the full vocabulary,
    backward) per attention backend, on random weights, features and tokens: ms a step, sequence
    tokens and drafted slots per second, peak memory. Backends: sdpa, flex and triton on a GPU;
    sdpa and triton on a CPU, where torch has no FlexAttention backward."""
    from ...core.paper import gamma_for
    from ...trainer import block_labels, drafter_loss, drafter_logits, loss_weights
    from .budget import random_pair

    target, drafter = random_pair(shape, device, dtype)
    drafter.train().requires_grad_(True)
    B, H = drafter.block_size, target.config.hidden_size
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, target.config.vocab_size, (1, S), generator=g)
    anchors = (torch.randperm(S - B, generator=g)[:n] + 1).sort().values[None]
    hidden = torch.randn(1, S, len(drafter.target_layer_ids) * H, generator=g).to(device, dtype)
    weights, valid = loss_weights(B, gamma_for(B)).to(device), torch.ones(1, n, device=device)
    labels = block_labels(ids, anchors, B).to(device)
    ids, anchors = ids.to(device), anchors.to(device)

    def step():
        logits = drafter_logits(drafter, target, ids, hidden, anchors)
        loss, _ = drafter_loss(logits, labels, weights, valid)
        loss.backward()
        return loss

    def measure(row):
        row["loss"] = step().item()
        row["ms"] = time_ms(step, device, grads=list(drafter.parameters()))
        row["seq_tokens_per_s"] = S / (row["ms"] * 1e-3)
        row["slots_per_s"] = n * B / (row["ms"] * 1e-3)

    if backends is None:
        backends = ("sdpa", "flex", "triton") if device == "cuda" else ("sdpa", "triton")
    rows = []
    for backend in backends:
        drafter.backend = backend
        row = dict(case="train_step", method=backend, ms=None, seq_tokens_per_s=None,
                   slots_per_s=None, peak_gib=None, loss=None, error=None)
        rows.append(measured(row, device, measure, f"train step {backend:7s}"))
    return rows


def measured(row: dict, device: str, measure, label: str) -> dict:
    """``row`` with what ``measure(row)`` times written in, the GPU's peak memory beside it, or
    the failure (an OOM or an unsupported combination is a result too); printed on one line."""
    try:
        if device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        measure(row)
        if device == "cuda":
            row["peak_gib"] = torch.cuda.max_memory_allocated() / 2 ** 30
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    shown = f"{row['ms']:9.3f} ms" if row["ms"] is not None else row["error"]
    print(f"{label} {shown}", flush=True)
    return row


def time_ms(fn, device, grads=()):
    """Median milliseconds per call: triton.testing.do_bench on a GPU, a wall clock on a CPU."""
    if device == "cuda":
        import triton.testing
        return triton.testing.do_bench(fn, warmup=25, rep=200, grad_to_none=list(grads),
                                       return_mode="median")
    fn()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append(1e3 * (time.perf_counter() - start))
    return statistics.median(times)


def methods_for(q, k, v, anchors, S, B, inference, device):
    """name -> function(q, k, v) -> out, every mask built here, once."""
    from torch.nn.attention.flex_attention import flex_attention

    from ...attention import compiled_flex, flex_block_mask
    from ...core.kernel import block_attention
    from ...core.mask import dense_mask

    group = q.shape[1] // k.shape[1]
    dense = dense_mask(anchors, S, B)                                   # (N, 1, n*B, S+n*B)
    flex_mask = flex_block_mask(anchors, S, B)                          # the same rule, per tile
    flex = compiled_flex() if device == "cuda" else flex_attention
    methods = {  # sdpa first: the others are compared with its output
        "sdpa": lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, attn_mask=dense, enable_gqa=group > 1),
        "sdpa_kv_repeated": lambda q, k, v: F.scaled_dot_product_attention(
            q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), attn_mask=dense),
        "flex": lambda q, k, v: flex(q, k, v, block_mask=flex_mask, enable_gqa=group > 1),
        "triton": lambda q, k, v: block_attention(q, k, v, anchors, S, B),
    }
    if inference:
        methods["sdpa_no_mask"] = lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, enable_gqa=group > 1)
    return methods


def run_case(name, shape, dtype, device, passes):
    from ...core.mask import block_mask

    inference = name == "inference"
    q, k, v, anchors = make_case(**shape, dtype=dtype, device=device, inference=inference)
    S, B = shape["S"], shape["B"]
    visible_pairs = sum(int(block_mask(a, S, B).sum()) for a in anchors)  # scores that count
    forward_flops = 4 * visible_pairs * shape["D"] * shape["Hq"]          # QK^T and PV
    rows = []
    methods = methods_for(q, k, v, anchors, S, B, inference, device)
    reference = None
    for method, fn in methods.items():
        for pass_ in passes:
            def measure(row):
                nonlocal reference
                if pass_ == "forward":
                    with torch.no_grad():
                        out = fn(q, k, v)
                        if method == "sdpa":
                            reference = out.float()
                        elif reference is not None:
                            diff = (out.float() - reference).abs().max()
                            row["max_abs_diff_vs_sdpa"] = diff.item()
                        row["ms"] = time_ms(lambda: fn(q, k, v), device)
                    flops = forward_flops
                else:
                    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
                    grad_out = torch.randn_like(q)
                    row["ms"] = time_ms(lambda: fn(qg, kg, vg).backward(grad_out), device,
                                        grads=(qg, kg, vg))
                    flops = 3.5 * forward_flops                           # backward = 2.5 x forward
                row["visible_tflops"] = flops / (row["ms"] * 1e-3) / 1e12

            row = dict(case=name, method=method, passes=pass_, ms=None, speedup_vs_sdpa=None,
                       visible_tflops=None, peak_gib=None, max_abs_diff_vs_sdpa=None, error=None)
            rows.append(measured(row, device, measure, f"{name:9s} {pass_:16s} {method:17s}"))
    sdpa_ms = {r["passes"]: r["ms"] for r in rows if r["method"] == "sdpa"}
    for r in rows:
        if r["ms"] and sdpa_ms.get(r["passes"]):
            r["speedup_vs_sdpa"] = sdpa_ms[r["passes"]] / r["ms"]
    visible_fraction = visible_pairs / (anchors.shape[0] * q.shape[2] * k.shape[2])
    return rows, visible_fraction


def plot(rows, path):
    """One panel per (case, passes): milliseconds per method, the kernel in colour."""
    try:
        import matplotlib
    except ImportError:
        print("bench_kernel: matplotlib is not installed, no plot")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({(r["case"], r["passes"]) for r in rows}, key=lambda g: (g[0] != "training", g))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 3.8))
    for ax, (case, pass_) in zip(list(axes) if len(groups) > 1 else [axes], groups):
        times = {r["method"]: r["ms"] for r in rows if (r["case"], r["passes"]) == (case, pass_)}
        names = [m for m in methods if m in times]
        values = [times[m] or 0.0 for m in names]
        colours = ["C0" if m == "triton" else "C7" for m in names]
        bars = ax.bar(range(len(names)), values, color=colours)
        for bar, m in zip(bars, names):
            ax.annotate("failed" if times[m] is None else f"{times[m]:.2f}",
                        (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
        ax.set_title(f"{case}: {pass_}", fontsize=10)
        ax.set_ylabel("ms (lower is better)")
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minidflash bench-kernel",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=out_file, default=None,
                        help="default data/results/kernel_bench.json (GPU) or "
                             "/tmp/kernel_bench_smoke.json (--cpu-smoke, never a real result)")
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="tiny shapes through Triton's interpreter, to test this script")
    args = parser.parse_args(argv)

    if args.cpu_smoke:
        os.environ["TRITON_INTERPRET"] = "1"  # before minidflash.core.kernel is imported
        device, dtype, step = "cpu", torch.float32, SMOKE_STEP
        train, infer = SMOKE_TRAIN, SMOKE_INFER
    elif torch.cuda.is_available():
        device, dtype, step = "cuda", torch.bfloat16, STEP
        train, infer = TRAIN, INFER
    else:
        print("bench_kernel: no CUDA device, nothing to time. This benchmark needs a GPU; "
              "on a CPU, `--cpu-smoke` checks that the script runs (timings meaningless).")
        return 0
    from ...core import kernel
    if args.cpu_smoke and not kernel._interpreting():
        print("bench_kernel: minidflash.core.kernel was imported before TRITON_INTERPRET was set")
        return 1

    import triton
    result = dict(device=torch.cuda.get_device_name() if device == "cuda" else platform.processor(),
                  torch=torch.__version__, triton=triton.__version__, dtype=str(dtype),
                  shapes=dict(training=train, inference=infer), cases={}, rows=[])
    result["checks"] = (check_case("training", train, dtype, device)
                        + check_case("anchors_near_end", train, dtype, device, near_end(train))
                        + check_case("inference", infer, dtype, device))
    for name, shape, passes in (("training", train, ("forward", "forward+backward")),
                                ("inference", infer, ("forward",))):
        rows, visible_fraction = run_case(name, shape, dtype, device, passes)
        result["rows"] += rows
        result["cases"][name] = dict(visible_fraction=visible_fraction)
    result["train_step"] = dict(shape=step["shape"] if isinstance(step["shape"], str) else "smoke",
                                S=step["S"], n=step["n"],
                                rows=train_step_rows(step["shape"], step["S"], step["n"], dtype,
                                                     device))

    result["smoke"] = bool(args.cpu_smoke)
    out = Path(args.out or ("/tmp/kernel_bench_smoke.json" if args.cpu_smoke
                            else "data/results/kernel_bench.json"))
    write_json(out, result, indent=2)
    plot(result["rows"], out.with_suffix(".png"))
    print(f"wrote {out} (and its plot, {out.with_suffix('.png').name})")
    failed = [f"{c['case']} {c['tensor']}" for c in result["checks"] if not c["ok"]]
    if failed:
        print(f"bench_kernel: the kernel is off the fp32 reference in {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

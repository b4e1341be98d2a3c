"""The Triton block-attention kernel against its torch reference (minidflash/core/kernel.py).

On a CPU the kernels run through Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET),
so the shapes are small; they are chosen odd so that every tile has a ragged edge.
"""

import math

import pytest
import torch

pytest.importorskip("triton", reason="the kernel needs Triton (Linux wheels only); without it "
                    "the drafter's attention runs on torch SDPA (tests/test_backends.py)")

# imported after the skip: minidflash.core.kernel imports Triton
from minidflash.attention import attend  # noqa: E402
from minidflash.core.kernel import (block_attention, block_attention_reference,  # noqa: E402
                               count_visited_tiles, tile_schedule)
from minidflash.core.mask import block_mask  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 2e-2}


def make_inputs(N, Hq, Hkv, S, n, B, D, dtype, anchors=None, seed=0):
    """Random q (N, Hq, n*B, D), k, v (N, Hkv, S + n*B, D) and sorted anchors (N, n) in [0, S]."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(N, Hq, n * B, D, generator=g)
    k = torch.randn(N, Hkv, S + n * B, D, generator=g)
    v = torch.randn(N, Hkv, S + n * B, D, generator=g)
    if anchors is None:
        anchors = torch.stack([torch.randint(0, S + 1, (n,), generator=g).sort().values
                               for _ in range(N)])
    anchors = torch.as_tensor(anchors).reshape(N, n)
    to = lambda t: t.to(DEVICE, dtype).requires_grad_()
    return to(q), to(k), to(v), anchors.to(DEVICE)


def outputs_and_grads(fn, q, k, v, anchors, S, B, seed=1, **kwargs):
    out = fn(q, k, v, anchors, S, B, **kwargs)
    g = torch.Generator().manual_seed(seed)
    grad_out = torch.randn(out.shape, generator=g).to(out)
    return (out, *torch.autograd.grad(out, (q, k, v), grad_out))


def assert_matches_reference(q, k, v, anchors, S, B, tiles=None):
    tol = TOL[q.dtype]
    got = outputs_and_grads(block_attention, q, k, v, anchors, S, B, tiles=tiles)
    want = outputs_and_grads(block_attention_reference, q, k, v, anchors, S, B)
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, want):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        torch.testing.assert_close(a, b, atol=tol, rtol=tol, msg=lambda m: f"{name}: {m}")


# (N, Hq, Hkv, S, n, B, D, anchors or None for random ones)
SHAPES = {
    "S37_n3_B5_anchors_0_and_S": (2, 4, 2, 37, 3, 5, 64, [[0, 20, 37], [37, 3, 0]]),
    "S100_n7_B16": (1, 2, 2, 100, 7, 16, 64, None),
    "block_size_1": (2, 2, 1, 23, 9, 1, 64, None),
    "head_dim_128_gqa": (1, 4, 2, 50, 3, 8, 128, None),
    "inference_one_block_at_S": (1, 4, 1, 45, 1, 16, 128, [[45]]),
    "head_dim_16": (1, 2, 2, 19, 2, 4, 16, None),
    "head_dim_48_not_pow2": (1, 2, 1, 21, 2, 6, 48, None),
    "no_context": (1, 2, 2, 0, 3, 4, 32, [[0, 0, 0]]),
}


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_fp32_matches_reference(shape):
    *dims, anchors = shape
    q, k, v, anchors = make_inputs(*dims, torch.float32, anchors)
    assert_matches_reference(q, k, v, anchors, dims[3], dims[5])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", ["S37_n3_B5_anchors_0_and_S", "head_dim_128_gqa"])
def test_half_precision_matches_reference(name, dtype):
    *dims, anchors = SHAPES[name]
    q, k, v, anchors = make_inputs(*dims, dtype, anchors)
    assert_matches_reference(q, k, v, anchors, dims[3], dims[5])


@pytest.mark.parametrize("tiles", [(16, 16), (16, 64), (64, 16)])
def test_tile_sizes_do_not_change_the_result(tiles):
    # S = 100 with n*B = 112: tiles straddle blocks, anchors and the context/block boundary
    *dims, anchors = SHAPES["S100_n7_B16"]
    q, k, v, anchors = make_inputs(*dims, torch.float32, anchors, seed=3)
    assert_matches_reference(q, k, v, anchors, dims[3], dims[5], tiles=tiles)


def test_unsorted_anchors_and_strided_inputs():
    # anchors in any order; q and k as transposed views (N, L, H, D) -> (N, H, L, D), the way a
    # model produces them, and a scale other than 1/sqrt(D)
    N, Hq, Hkv, S, n, B, D = 2, 4, 2, 30, 4, 3, 32
    g = torch.Generator().manual_seed(5)
    q = torch.randn(N, n * B, Hq, D, generator=g).to(DEVICE).transpose(1, 2).requires_grad_()
    k = torch.randn(N, S + n * B, Hkv, D, generator=g).to(DEVICE).transpose(1, 2).requires_grad_()
    v = torch.randn(N, Hkv, S + n * B, D, generator=g).to(DEVICE).requires_grad_()
    anchors = torch.tensor([[17, 2, 30, 9], [0, 29, 29, 4]], device=DEVICE)
    got = outputs_and_grads(block_attention, q, k, v, anchors, S, B, scale=0.3)
    want = outputs_and_grads(block_attention_reference, q, k, v, anchors, S, B, scale=0.3)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_sdpa_backend_matches_reference():
    # the other backend of attention.attend: torch SDPA with mask.dense_mask, checked here against
    # the same reference (anchors at 0 and at S: blocks that see no context, and all of it)
    *dims, anchors = SHAPES["S37_n3_B5_anchors_0_and_S"]
    q, k, v, anchors = make_inputs(*dims, torch.float32, anchors)
    got = outputs_and_grads(attend, q, k, v, anchors, dims[3], dims[5], backend="sdpa")
    want = outputs_and_grads(block_attention_reference, q, k, v, anchors, dims[3], dims[5])
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_reference_is_attention_written_out_by_hand():
    # one query row at a time, with the visibility rule read off the mask: obvious by inspection
    N, Hq, Hkv, S, n, B, D = 1, 2, 1, 9, 2, 3, 8
    q, k, v, anchors = make_inputs(N, Hq, Hkv, S, n, B, D, torch.float64, [[4, 9]])
    out = block_attention_reference(q, k, v, anchors, S, B)
    mask = block_mask(anchors[0], S, B)
    for h in range(Hq):
        for i in range(n * B):
            seen = mask[i].nonzero()[:, 0]
            w = torch.softmax(k[0, 0, seen] @ q[0, h, i] / D ** 0.5, dim=0)
            torch.testing.assert_close(out[0, h, i], w @ v[0, 0, seen])


# ---------------------------------------------------------------------------------------------
# Tile skipping
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("tiles", [(16, 16), (32, 16)])
def test_kernels_visit_exactly_the_scheduled_tiles(tiles):
    N, Hq, Hkv, S, n, B, D = 2, 2, 1, 70, 6, 5, 16
    q, k, v, anchors = make_inputs(N, Hq, Hkv, S, n, B, D, torch.float32,
                                   [[0, 3, 40, 41, 69, 70], [12, 0, 70, 33, 5, 5]])
    with torch.no_grad():
        counts = count_visited_tiles(q, k, v, anchors, S, B, tiles=tiles)
    schedules = [tile_schedule(a, S, B, *tiles) for a in anchors.tolist()]
    by_query = Hq * sum(len(s["by_query"]) for s in schedules)
    by_key = Hq * sum(len(s["by_key"]) for s in schedules)
    assert counts == {"forward": by_query, "dq": by_query, "dkdv": by_key}


@pytest.mark.parametrize("order", ["by_query", "by_key"])
def test_schedule_visits_no_empty_tile_and_misses_no_visible_score(order):
    S, B, tile_q, tile_k = 70, 5, 16, 16
    anchors = torch.tensor([12, 0, 70, 33, 5, 5, 64])
    mask = block_mask(anchors, S, B)                                     # (n*B, S + n*B)
    covered = torch.zeros_like(mask)
    for q0, q1, k0, k1 in tile_schedule(anchors, S, B, tile_q, tile_k)[order]:
        assert mask[q0:q1, k0:k1].any(), "a visited tile that no query can see"
        assert not covered[q0:q1, k0:k1].any(), "a score computed twice"
        covered[q0:q1, k0:k1] = True
    assert covered[mask].all()


def test_work_grows_with_the_visible_area_not_the_dense_one():
    # paper scale in pure Python: S = 3072 context, B = 16, tiles 128 x 64 as on the GPU
    S, B, tile_q, tile_k = 3072, 16, 128, 64
    g = torch.Generator().manual_seed(0)

    def visited_visible_dense(anchors):
        nB = len(anchors) * B
        visited = len(tile_schedule(anchors, S, B, tile_q, tile_k)["by_query"])
        visible = int(block_mask(anchors, S, B).sum())                    # scores that count
        dense = -(-nB // tile_q) * -(-(S + nB) // tile_k)                 # tiles of the full mask
        return visited, visible, dense

    spread = torch.randperm(S - B + 1, generator=g)[:512].sort().values  # training: 512 anchors
    early = torch.randperm(256, generator=g)[:128].sort().values         # blocks near the start
    for anchors, at_most in ((spread, 0.2), (early, 0.1)):
        visited, visible, dense = visited_visible_dense(anchors)
        # what is computed beyond the visible scores is the ragged edge of the visible region,
        # a small multiple of it at most, never the dense rectangle
        assert visible <= visited * tile_q * tile_k <= 2.5 * visible
        assert visited < at_most * dense

    # with the blocks near the start, a longer context costs nothing more
    counts = [len(tile_schedule(early, S_, B, tile_q, tile_k)["by_query"])
              for S_ in (1024, 2048, 4096)]
    assert counts[0] == counts[1] == counts[2]


@pytest.mark.parametrize("ragged", [False, True], ids=["random_anchors", "anchors_near_end"])
def test_bench_kernel_check_passes_the_kernel_and_fails_an_off_by_one(monkeypatch, ragged):
    """bench-kernel's check (what a GPU run records before it may become the training default):
    the kernel in bf16 against the fp32 reference, output and gradients, passes; the same kernel
    fed anchors one position late (an off-by-one a caller could make) fails it."""
    import minidflash.core.kernel as kernel
    from minidflash.tools.measure.bench_kernel import SMOKE_TRAIN, check_case, near_end

    anchors = near_end(SMOKE_TRAIN) if ragged else None
    rows = check_case("training", SMOKE_TRAIN, torch.bfloat16, DEVICE, anchors)
    assert [r["tensor"] for r in rows] == ["out", "dq", "dk", "dv"] and all(r["ok"] for r in rows)
    right = kernel.block_attention
    monkeypatch.setattr(kernel, "block_attention",
                        lambda q, k, v, a, S, B: right(q, k, v, (a - 1).clamp(min=0), S, B))
    rows = check_case("training", SMOKE_TRAIN, torch.bfloat16, DEVICE, anchors)
    assert not all(r["ok"] for r in rows)


def test_bench_kernel_train_step_gives_one_loss_on_both_backends():
    """bench-kernel's training step (the drafter's forward, loss and backward on random weights)
    runs on each attention backend and reaches the same loss: the kernel and SDPA compute the
    same attention, so only their speed may differ."""
    from minidflash.tools.measure.bench_kernel import SMOKE_STEP, train_step_rows

    rows = train_step_rows(SMOKE_STEP["shape"], SMOKE_STEP["S"], SMOKE_STEP["n"], torch.float32,
                           DEVICE)
    assert [r["method"] for r in rows] == ["sdpa", "triton"]
    assert all(r["error"] is None and r["ms"] > 0 and r["slots_per_s"] > 0 for r in rows)
    assert math.isfinite(rows[0]["loss"])
    assert rows[1]["loss"] == pytest.approx(rows[0]["loss"], rel=1e-5)

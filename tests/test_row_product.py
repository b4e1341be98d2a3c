"""row_product.py's kernel: F.linear's numbers for 1..8 fp32 rows, each row's bits its own
whatever the other rows and the threads, used by the lean pass for every pass of up to 8 tokens,
and MKL's products kept, with a warning saying why, where it cannot be built."""

import pytest
import torch
import torch.nn.functional as F
from transformers import DynamicCache

import minidflash.lean as lean
from minidflash import row_product
from minidflash.decoding import target_pass
from tests.helpers import tiny_target

WHY = row_product.why_not()
needs_kernel = pytest.mark.skipif(WHY is not None, reason=f"no kernel here: {WHY}")


@needs_kernel
@pytest.mark.parametrize("rows", range(1, row_product.MAX_ROWS + 1))
@pytest.mark.parametrize("n, k", [(97, 64), (960, 576), (5, 1536)])
def test_the_product_is_f_linear_within_rounding(rows, n, k):
    g = torch.Generator().manual_seed(rows)
    x, w, b = torch.randn(rows, k, generator=g), torch.randn(n, k, generator=g), torch.randn(n, generator=g)
    assert row_product.takes(x, w)
    got, ref = row_product.product(x, w, b), F.linear(x, w, b)
    assert got.shape == ref.shape == (rows, n)
    assert torch.allclose(got, ref, rtol=1e-5, atol=1e-4 * k ** 0.5), (got - ref).abs().max()


@needs_kernel
def test_a_row_keeps_its_bits_wherever_it_sits_and_at_any_thread_count():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(8, 576, generator=g), torch.randn(1001, 576, generator=g)
    alone = [row_product.product(x[i:i + 1], w)[0] for i in range(8)]
    threads = torch.get_num_threads()
    try:
        for t in {1, threads}:
            torch.set_num_threads(t)
            for m in range(1, 9):
                for start in range(0, 9 - m):
                    y = row_product.product(x[start:start + m], w)
                    for j in range(m):
                        assert torch.equal(y[j], alone[start + j]), (t, m, start, j)
    finally:
        torch.set_num_threads(threads)


def test_what_the_kernel_does_not_take():
    x, w = torch.randn(2, 64), torch.randn(16, 64)
    assert not row_product.takes(torch.randn(row_product.MAX_ROWS + 1, 64), w)   # MKL's
    assert not row_product.takes(torch.randn(2, 60), torch.randn(16, 60))       # K % 8
    assert not row_product.takes(x.bfloat16(), w.bfloat16())
    assert not row_product.takes(x, torch.randn(64, 16).t())                    # not contiguous


def test_switched_off_it_is_not_built_and_says_nothing(monkeypatch, recwarn):
    monkeypatch.setenv("MINIDFLASH_ROW_PRODUCT", "0")
    row_product.ready.cache_clear()
    try:
        assert row_product.why_not() == "MINIDFLASH_ROW_PRODUCT=0" and not row_product.ready()
        assert not row_product.takes(torch.randn(2, 64), torch.randn(16, 64))
        assert not recwarn.list
    finally:
        row_product.ready.cache_clear()


def test_a_failed_build_warns_with_the_reason_and_falls_back(monkeypatch):
    import torch.utils.cpp_extension as ext

    def broken(*args, **kwargs):
        raise RuntimeError("Error building extension 'minidflash_row_product'")
    monkeypatch.setattr(row_product, "why_not", lambda: None)
    monkeypatch.setattr(ext, "load", broken)
    row_product.ready.cache_clear()
    try:
        with pytest.warns(UserWarning, match="building it failed: .*Error building extension"):
            assert not row_product.ready()
    finally:
        row_product.ready.cache_clear()


@needs_kernel
def test_the_lean_pass_multiplies_a_step_and_a_verify_by_the_kernel_and_a_prefill_by_mkl(monkeypatch):
    model = tiny_target(3)
    rows = []
    real = row_product.product
    monkeypatch.setattr(row_product, "product",
                        lambda x, w, b=None: rows.append(x.shape[0]) or real(x, w, b))
    cache = DynamicCache()
    ids = torch.randint(0, 96, (1, 12), generator=torch.Generator().manual_seed(0))
    target_pass(model, ids, cache, False, False, lean=True)             # 12 rows: MKL's
    assert rows == []
    for k in (1, 5):
        target_pass(model, ids[:, :k], cache, False, False, lean=True)
        assert rows and set(rows) == {k}, rows
        rows.clear()


def test_without_the_kernel_the_lean_pass_is_as_close_to_transformers(monkeypatch):
    monkeypatch.setattr(row_product, "fits", lambda weight: False)
    model = tiny_target(3)
    caches = (DynamicCache(), DynamicCache())
    ids = torch.randint(0, 96, (1, 9), generator=torch.Generator().manual_seed(1))
    for part in (ids[:, :6], ids[:, 6:7], ids[:, 7:]):
        ref = target_pass(model, part, caches[0], True, True)
        got = target_pass(model, part, caches[1], True, True, lean=True)
        assert torch.allclose(ref[0], got[0], rtol=1e-5, atol=1e-5)
    assert lean.of(model).layers[0]["qkv"].packed == "mkl" and not lean.of(model).layers[0]["qkv"].by_rows


@needs_kernel
def test_step_profile_counts_the_kernel_among_the_products():
    from minidflash.tools.measure import step_profile
    split = step_profile.split_pass(tiny_target(3), 4, 16, 1, lean=True)   # every product: ours
    assert split["matmul"] > 0, split


def test_a_product_of_no_rows_is_empty_as_f_linears():
    w = torch.randn(16, 64)
    f = lean.packed_product(w)                 # the drafter's product: no new context, no rows
    assert f(torch.randn(1, 0, 64)).shape == (1, 0, 16)
    p = lean.Projection(torch.nn.Linear(64, 16))
    assert p(torch.randn(1, 0, 64)).shape == (1, 0, 16)

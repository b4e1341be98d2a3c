"""A lean decode runs the drafter's products packed once (lean_drafter.drafting, lean.packed_product):
close to ``F.linear``'s (a draft is a proposal, the target keeps what it verifies), packed again
when a weight changes, every module as before on leaving (an error too), and only when lean is
on; the decode's tokens are plain decoding's either way. With ``int8`` (lean_drafter.int8_product, the
config's draft_int8) every product but ``fc``'s is int8, within about 2% of fp32; the default
turns it on only for a big fp32 drafter on a CPU without bf16 units.
"""

import pytest
import torch

import minidflash.lean as lean
import minidflash.lean_drafter as lean_drafter
from minidflash import row_product
from tests.helpers import decode_on, random_drafter, tiny_target


def draft_logits(target, drafter, seed=0):
    """The drafter's block logits after a random context (its features at random)."""
    g = torch.Generator().manual_seed(seed)
    C = 7
    hidden = torch.randn(1, C, len(drafter.target_layer_ids) * target.config.hidden_size,
                         generator=g)
    last = torch.randint(0, 88, (1,), generator=g)
    with torch.inference_mode():
        return drafter.block_logits(target, last, hidden, C, drafter.new_cache())


def calls_to(monkeypatch, name):
    """A list that grows by one at each call of torch.ops.mkl.<name> (the packed product) and of
    row_product.product (the lean pass's product of 1..8 fp32 rows)."""
    calls, real, rows = [], getattr(torch.ops.mkl, name), row_product.product
    monkeypatch.setattr(torch.ops.mkl, name, lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(row_product, "product", lambda *a: calls.append(1) or rows(*a))
    return calls


def test_packed_drafting_is_close_and_leaves_the_drafter_as_it_was(monkeypatch):
    target = tiny_target(5, vocab=89, layers=3)
    drafter = random_drafter(target, 5, block_size=4)
    before = draft_logits(target, drafter)
    calls = calls_to(monkeypatch, "_mkl_linear")
    with lean_drafter.drafting(drafter, int8=False):
        assert "forward" in vars(drafter.fc) and drafter.head_product is lean_drafter.product
        inside = draft_logits(target, drafter)
    # fc, and per layer q, k, v, o, gate, up, down, then the head: each once, packed (MKL) or
    # through row_product.py (1..8 rows)
    assert len(calls) == 1 + 7 * len(drafter.layers) + 1
    assert torch.allclose(before, inside, rtol=1e-5, atol=1e-5), (before - inside).abs().max()
    assert all("forward" not in vars(m) for m in drafter.modules())
    assert drafter.head_product is torch.nn.functional.linear
    assert torch.equal(draft_logits(target, drafter), before)            # F.linear again
    with pytest.raises(RuntimeError, match="boom"), lean_drafter.drafting(drafter):
        raise RuntimeError("boom")
    assert all("forward" not in vars(m) for m in drafter.modules())


@pytest.mark.parametrize("change", ["an in-place edit", "new data", "a cast"])
def test_a_weight_that_changed_is_packed_again(change):
    target = tiny_target(5, vocab=89, layers=3)
    drafter = random_drafter(target, 5, block_size=4)
    with lean_drafter.drafting(drafter, int8=False):
        first = draft_logits(target, drafter)
    with torch.no_grad():
        if change == "an in-place edit":
            drafter.fc.weight.mul_(-1)
        elif change == "new data":                      # the same tensor, other storage
            drafter.fc.weight.data = -drafter.fc.weight.data
        else:                                           # module.to swaps each weight's data
            target.to(torch.bfloat16), drafter.to(torch.bfloat16)
    fresh = draft_logits(target, drafter)
    with lean_drafter.drafting(drafter, int8=False):
        again = draft_logits(target, drafter)
    assert again.dtype == fresh.dtype
    tol = 1e-5 if fresh.dtype == torch.float32 else 1e-2
    assert not torch.allclose(first, fresh.float(), rtol=tol, atol=tol)
    assert torch.allclose(again, fresh, rtol=tol, atol=tol), (again - fresh).abs().max()


def spied(monkeypatch, name):
    """A tiny target, its drafter, a prompt, and the weights each call of lean.<name> was given."""
    target = tiny_target(5, vocab=89, layers=3)
    drafter = random_drafter(target, 5, block_size=4)
    ids = torch.randint(0, 88, (1, 9), generator=torch.Generator().manual_seed(2))
    real, calls = getattr(lean_drafter, name), []
    monkeypatch.setattr(lean_drafter, name, lambda w: calls.append(w) or real(w))
    return target, drafter, ids, calls


@pytest.mark.parametrize("path", ["chain", "tree", "batch"])
def test_a_lean_decode_packs_the_drafter_and_only_then(path, monkeypatch):
    target, drafter, ids, packed = spied(monkeypatch, "packed_product")
    off = decode_on(path, target, drafter, ids, max_new_tokens=12, lean=False)
    assert not packed
    on = decode_on(path, target, drafter, ids, max_new_tokens=12)
    assert on.config.lean is True
    assert any(w is drafter.fc.weight for w in packed)
    assert torch.equal(on.output_ids, off.output_ids)
    plain = decode_on("plain", target, drafter, ids, max_new_tokens=12)
    assert torch.equal(on.output_ids, plain.output_ids)
    assert all("forward" not in vars(m) for m in drafter.modules())


def relative_error(a, b):
    return ((a - b).norm() / b.norm()).item()


def test_an_int8_product_is_close_to_fp32_and_keeps_the_shape_and_bias():
    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(96, 160, generator=g) / 160 ** 0.5, torch.randn(96, generator=g)
    x = torch.randn(2, 5, 160, generator=g)
    y = lean_drafter.int8_product(w)(x, b)
    ref = torch.nn.functional.linear(x, w, b)
    assert y.shape == ref.shape and y.dtype == torch.float32
    assert 0 < relative_error(y, ref) < 0.03, relative_error(y, ref)
    assert relative_error(lean_drafter.int8_product(w)(x), x @ w.T) < 0.03           # no bias
    with torch.no_grad():
        w.mul_(-1)                                                          # quantized again
    assert relative_error(lean_drafter.int8_product(w)(x), x @ w.T) < 0.03


def test_int8_drafting_is_close_leaves_fc_packed_and_restores(monkeypatch):
    target = tiny_target(5, vocab=89, layers=3)
    drafter = random_drafter(target, 5, block_size=4, layers=2)
    before = draft_logits(target, drafter)
    real, int8 = lean_drafter.int8_product, []
    monkeypatch.setattr(lean_drafter, "int8_product", lambda w: int8.append(w) or real(w))
    with lean_drafter.drafting(drafter, int8=True):
        assert drafter.head_product is lean_drafter.int8_head
        inside = draft_logits(target, drafter)
    linears = [m for m in drafter.modules() if isinstance(m, torch.nn.Linear)]
    assert {id(w) for w in int8} == {id(m.weight) for m in linears if m is not drafter.fc} | {
        id(drafter._head_rows[3] if drafter._head_rows else target.lm_head.weight)}
    assert not any(w is drafter.fc.weight for w in int8)       # its inputs span several layers
    assert 0 < relative_error(inside, before) < 0.05, relative_error(inside, before)
    assert all("forward" not in vars(m) for m in drafter.modules())
    assert drafter.head_product is torch.nn.functional.linear
    assert torch.equal(draft_logits(target, drafter), before)


def test_int8_is_the_default_only_for_a_big_fp32_drafter_without_bf16_units(monkeypatch):
    target = tiny_target(5, vocab=89, layers=3)
    drafter = random_drafter(target, 5, block_size=4)
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    assert not lean_drafter.int8_by_default(drafter)                    # small: its weights stay in cache
    monkeypatch.setattr(lean_drafter, "INT8_MIN_PARAMETERS", 1)
    assert lean_drafter.int8_by_default(drafter)
    assert not lean_drafter.int8_by_default(drafter.to(torch.bfloat16))
    drafter.float()
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    assert not lean_drafter.int8_by_default(drafter)


@pytest.mark.parametrize("path", ["chain", "tree", "batch"])
def test_an_int8_drafted_decode_is_plain_decoding(path, monkeypatch):
    target, drafter, ids, int8 = spied(monkeypatch, "int8_product")
    off = decode_on(path, target, drafter, ids, max_new_tokens=16, draft_int8=False)
    assert not int8 and "int8" not in off.config.describe(target, drafter)
    on = decode_on(path, target, drafter, ids, max_new_tokens=16, draft_int8=True)
    assert on.config.draft_int8 is True and "int8" in on.config.describe(target, drafter)
    assert any(w is drafter.layers[0].mlp.down_proj.weight for w in int8)
    plain = decode_on("plain", target, drafter, ids, max_new_tokens=16)
    assert torch.equal(on.output_ids, plain.output_ids)

"""A lean decode runs the drafter's products packed once (lean.drafting, lean.packed_product):
close to ``F.linear``'s (a draft is a proposal, the target keeps what it verifies), packed again
when a weight changes, every module as before on leaving (an error too), and only when lean is
on; the decode's tokens are plain decoding's either way.
"""

import pytest
import torch

import minidflash.lean as lean
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
    """A list that grows by one at each call of torch.ops.mkl.<name> (the packed product)."""
    calls, real = [], getattr(torch.ops.mkl, name)
    monkeypatch.setattr(torch.ops.mkl, name, lambda *a: calls.append(1) or real(*a))
    return calls


def test_packed_drafting_is_close_and_leaves_the_drafter_as_it_was(monkeypatch):
    target = tiny_target(5, vocab=89, layers=3)
    drafter = random_drafter(target, 5, block_size=4)
    before = draft_logits(target, drafter)
    calls = calls_to(monkeypatch, "_mkl_linear")
    with lean.drafting(drafter):
        assert "forward" in vars(drafter.fc) and drafter.head_product is lean.product
        inside = draft_logits(target, drafter)
    # fc, and per layer q, k, v, o, gate, up, down, then the head: each once, packed
    assert len(calls) == 1 + 7 * len(drafter.layers) + 1
    assert torch.allclose(before, inside, rtol=1e-5, atol=1e-5), (before - inside).abs().max()
    assert all("forward" not in vars(m) for m in drafter.modules())
    assert drafter.head_product is torch.nn.functional.linear
    assert torch.equal(draft_logits(target, drafter), before)            # F.linear again
    with pytest.raises(RuntimeError, match="boom"), lean.drafting(drafter):
        raise RuntimeError("boom")
    assert all("forward" not in vars(m) for m in drafter.modules())


@pytest.mark.parametrize("change", ["an in-place edit", "new data", "a cast"])
def test_a_weight_that_changed_is_packed_again(change):
    target = tiny_target(5, vocab=89, layers=3)
    drafter = random_drafter(target, 5, block_size=4)
    with lean.drafting(drafter):
        first = draft_logits(target, drafter)
    with torch.no_grad():
        if change == "an in-place edit":
            drafter.fc.weight.mul_(-1)
        elif change == "new data":                      # the same tensor, other storage
            drafter.fc.weight.data = -drafter.fc.weight.data
        else:                                           # module.to swaps each weight's data
            target.to(torch.bfloat16), drafter.to(torch.bfloat16)
    fresh = draft_logits(target, drafter)
    with lean.drafting(drafter):
        again = draft_logits(target, drafter)
    assert again.dtype == fresh.dtype
    tol = 1e-5 if fresh.dtype == torch.float32 else 1e-2
    assert not torch.allclose(first, fresh.float(), rtol=tol, atol=tol)
    assert torch.allclose(again, fresh, rtol=tol, atol=tol), (again - fresh).abs().max()


@pytest.mark.parametrize("path", ["chain", "tree", "batch"])
def test_a_lean_decode_packs_the_drafter_and_only_then(path, monkeypatch):
    target = tiny_target(5, vocab=89, layers=3)
    drafter = random_drafter(target, 5, block_size=4)
    ids = torch.randint(0, 88, (1, 9), generator=torch.Generator().manual_seed(2))
    real, packed = lean.packed_product, []
    monkeypatch.setattr(lean, "packed_product", lambda w: packed.append(w) or real(w))
    off = decode_on(path, target, drafter, ids, max_new_tokens=12, lean=False)
    assert not packed
    on = decode_on(path, target, drafter, ids, max_new_tokens=12)
    assert on.config.lean is True
    assert any(w is drafter.fc.weight for w in packed)
    assert torch.equal(on.output_ids, off.output_ids)
    plain = decode_on("plain", target, drafter, ids, max_new_tokens=12)
    assert torch.equal(on.output_ids, plain.output_ids)
    assert all("forward" not in vars(m) for m in drafter.modules())

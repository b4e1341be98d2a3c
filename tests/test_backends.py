"""One switch, two attention backends: the drafter and the trainer agree across them.

On a CPU the "triton" backend runs the kernel through Triton's interpreter (conftest.py)."""

import json

import torch

from minidflash import attention, trainer
from minidflash.attention import default_backend
from minidflash.drafter import target_features
from tests.helpers import random_drafter, tiny_target


def test_default_backend_per_device(monkeypatch):
    """SDPA on a CPU and for inference anywhere; the kernel only for training on CUDA, and only
    once a GPU run of the kernel is recorded. (default_backend only reads the device type.)"""
    for verified in (False, True):
        monkeypatch.setattr(attention, "kernel_verified", lambda: verified)
        assert default_backend("cpu") == default_backend("cpu", training=True) == "sdpa"
        assert default_backend("cuda") == default_backend(torch.device("cuda:0")) == "sdpa"
        assert default_backend("cuda", training=True) == ("triton" if verified else "sdpa")


def test_kernel_counts_as_verified_only_after_a_gpu_run(tmp_path):
    """A recorded bench-kernel GPU result, error-free and close to SDPA; not a CPU smoke run."""
    row = lambda **kw: {"method": "triton", "passes": "forward", "error": None,
                        "max_abs_diff_vs_sdpa": 4e-3, **kw}
    backward = row(passes="forward+backward", max_abs_diff_vs_sdpa=None)
    cases = {"gpu": ({"smoke": False, "rows": [row(), backward]}, True),
             "smoke": ({"smoke": True, "rows": [row()]}, False),
             "failed": ({"smoke": False, "rows": [row(), row(error="OutOfMemoryError: ...")]}, False),
             "wrong": ({"smoke": False, "rows": [row(max_abs_diff_vs_sdpa=0.9)]}, False),
             "no_kernel_rows": ({"smoke": False, "rows": [row(method="sdpa")]}, False)}
    for name, (result, verified) in cases.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(result))
        assert attention.kernel_verified(tmp_path / f"{name}.json") is verified, name
    assert attention.kernel_verified(tmp_path / "absent.json") is False


def _setup():
    target = tiny_target(4, vocab=61, layers=4, hidden=64, heads=4, kv_heads=2)
    drafter = random_drafter(target, 4, layers=2, block_size=5)
    ids = torch.randint(0, 60, (2, 23), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        hidden = target_features(target(ids, output_hidden_states=True).hidden_states,
                                 drafter.target_layer_ids)
    return target, drafter, ids, hidden


def test_inference_draft_agrees_across_backends():
    target, drafter, ids, hidden = _setup()
    out = {}
    for backend in ("sdpa", "triton"):
        drafter.backend = backend
        cache = drafter.new_cache()
        block = torch.full((1, 5), drafter.mask_token_id)
        block[0, 0] = ids[0, 10]
        with torch.no_grad():   # context in two chunks through the cache, then the block
            drafter(target.get_input_embeddings()(block), hidden[:1, :6], torch.arange(0, 11)[None], cache=cache)
            h = drafter(target.get_input_embeddings()(block), hidden[:1, 6:10], torch.arange(6, 15)[None], cache=cache)
        out[backend] = target.get_output_embeddings()(h)
    torch.testing.assert_close(out["triton"], out["sdpa"], atol=1e-5, rtol=1e-5)


def test_training_loss_and_gradients_agree_across_backends():
    target, drafter, ids, hidden = _setup()
    drafter.train().requires_grad_(True)
    anchors = torch.tensor([[3, 9, 17], [0, 4, 18]])
    valid = torch.ones(2, 3)
    weights = trainer.loss_weights(5, 4.0)
    labels = trainer.block_labels(ids, anchors, 5)
    losses, grads = {}, {}
    for backend in ("sdpa", "triton"):
        drafter.backend = backend
        drafter.zero_grad()
        logits = trainer.drafter_logits(drafter, target, ids, hidden, anchors)
        loss, _ = trainer.drafter_loss(logits, labels, weights, valid)
        loss.backward()
        losses[backend] = loss.detach()
        grads[backend] = {k: p.grad.clone() for k, p in drafter.named_parameters()}
    torch.testing.assert_close(losses["triton"], losses["sdpa"], atol=1e-5, rtol=1e-5)
    for k in grads["sdpa"]:
        torch.testing.assert_close(grads["triton"][k], grads["sdpa"][k], atol=1e-5, rtol=1e-4, msg=k)

"""One switch, two attention backends: the drafter and the trainer agree across them.

On a CPU the "triton" backend runs the kernel through Triton's interpreter (conftest.py).
Triton has Linux wheels only: without it the package still imports, "triton" falls back to SDPA
with a warning, and the kernel's tests skip (checked in a subprocess with Triton hidden)."""

import json
import subprocess
import sys
import warnings

import pytest
import torch

from minidflash import attention, trainer
from minidflash.attention import default_backend
from minidflash.core.drafter import target_features
from minidflash.paths import ROOT
from tests.helpers import random_drafter, tiny_target

needs_triton = pytest.mark.skipif(not attention.triton_available(),
                                  reason="Triton is not installed (Linux wheels only)")


def test_default_backend_per_device(monkeypatch):
    """SDPA on a CPU and for inference anywhere; the kernel only for training on CUDA, and only
    once a GPU run of the kernel is recorded, and where Triton is installed. (default_backend
    only reads the device type.)"""
    for verified in (False, True):
        for has_triton in (False, True):
            monkeypatch.setattr(attention, "kernel_verified", lambda: verified)
            monkeypatch.setattr(attention, "triton_available", lambda: has_triton)
            assert default_backend("cpu") == default_backend("cpu", training=True) == "sdpa"
            assert default_backend("cuda") == default_backend(torch.device("cuda:0")) == "sdpa"
            assert default_backend("cuda", training=True) == ("triton" if verified and has_triton
                                                              else "sdpa")


def test_kernel_counts_as_verified_only_after_a_gpu_run(tmp_path):
    """A recorded bench-kernel GPU result, error-free and close to SDPA; not a CPU smoke run."""
    row = lambda **kw: {"method": "triton", "passes": "forward", "error": None,
                        "max_abs_diff_vs_sdpa": 4e-3, **kw}
    backward = row(passes="forward+backward", max_abs_diff_vs_sdpa=None)
    ok = [{"case": "training", "tensor": t, "ok": True} for t in ("out", "dq", "dk", "dv")]
    bad_grad = ok[:3] + [{"case": "training", "tensor": "dv", "ok": False}]
    cases = {"gpu": ({"smoke": False, "rows": [row(), backward], "checks": ok}, True),
             "smoke": ({"smoke": True, "rows": [row()], "checks": ok}, False),
             "failed": ({"smoke": False, "rows": [row(), row(error="OutOfMemoryError: ...")],
                         "checks": ok}, False),
             "wrong": ({"smoke": False, "rows": [row(max_abs_diff_vs_sdpa=0.9)], "checks": ok}, False),
             "wrong_gradient": ({"smoke": False, "rows": [row(), backward], "checks": bad_grad}, False),
             "unchecked": ({"smoke": False, "rows": [row(), backward]}, False),
             "no_kernel_rows": ({"smoke": False, "rows": [row(method="sdpa")], "checks": ok}, False)}
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


@needs_triton
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


@needs_triton
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


def test_flex_backend_drafts_the_training_blocks_as_sdpa_does():
    """FlexAttention's BlockMask, made from the same visibility rule, gives the drafter's training
    logits that the dense mask gives (forward: torch has no FlexAttention backward on a CPU, and
    the backend says so instead of failing inside torch)."""
    target, drafter, ids, hidden = _setup()
    anchors = torch.tensor([[3, 9, 17], [0, 4, 18]])     # 18 + 5 > 23: a block past the end
    logits = {}
    for backend in ("sdpa", "flex"):
        drafter.backend = backend
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")     # uncompiled on a CPU: torch warns that it is slow
            logits[backend] = trainer.drafter_logits(drafter, target, ids, hidden, anchors)
    torch.testing.assert_close(logits["flex"], logits["sdpa"], atol=1e-5, rtol=1e-5)
    drafter.train().requires_grad_(True)
    with pytest.raises(ValueError, match="trains on a GPU only.*backend='sdpa'"):
        trainer.drafter_logits(drafter, target, ids, hidden, anchors)


def test_triton_backend_without_triton_warns_and_runs_sdpa(monkeypatch):
    """Asked for "triton" where Triton is missing, the switch says so and computes with SDPA."""
    monkeypatch.setattr(attention, "triton_available", lambda: False)
    with pytest.warns(RuntimeWarning, match="needs Triton.*Linux wheels only.*SDPA"):
        assert attention.check_backend("triton") == "sdpa"
    with warnings.catch_warnings():
        warnings.simplefilter("error")              # the installed backends: no warning
        assert attention.check_backend("sdpa") == "sdpa"
    with pytest.raises(ValueError, match="not one of"):
        attention.check_backend("flash")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, 8, 16, generator=g), torch.randn(1, 2, 20, 16, generator=g),
               torch.randn(1, 2, 20, 16, generator=g))
    anchors = torch.tensor([[5, 9]])
    with pytest.warns(RuntimeWarning):
        got = attention.attend(q, k, v, anchors, 12, 4, backend="triton")
    torch.testing.assert_close(got, attention.attend(q, k, v, anchors, 12, 4, backend="sdpa"))


HIDE_TRITON = "import sys; sys.modules['triton'] = None  # as on macOS / Windows: no wheel\n"


def run_without_triton(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", HIDE_TRITON + code], cwd=ROOT, text=True,
                          capture_output=True, timeout=600)


def test_package_imports_and_decodes_without_triton():
    """Without Triton the package imports, a drafter set to "triton" drafts through SDPA with a
    warning, and only minidflash.core.kernel refuses, saying why."""
    run = run_without_triton("""
import warnings, torch
from minidflash import attention, checkpoints, trainer, verifier, ar_drafter   # noqa: F401
from minidflash.tools.measure import bench, methods                                # noqa: F401
from tests.helpers import random_drafter, tiny_target
assert not attention.triton_available() and attention.default_backend("cuda", training=True) == "sdpa"
try:
    import minidflash.core.kernel
except ImportError as e:
    assert "Linux wheels only" in str(e), e
else:
    raise AssertionError("minidflash.core.kernel imported without Triton")
target = tiny_target(4, vocab=61, layers=4, hidden=64, heads=4, kv_heads=2)
d = random_drafter(target, 4, layers=2, block_size=5)
ids = torch.randint(0, 60, (1, 9), generator=torch.Generator().manual_seed(0))
plain = verifier.speculative_generate(target, None, ids, max_new_tokens=12, block_size=1)
d.backend = "triton"
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    out = verifier.speculative_generate(target, d, ids, max_new_tokens=12, block_size=5)
assert torch.equal(out.output_ids, plain.output_ids)
assert any("needs Triton" in str(w.message) for w in caught), [str(w.message) for w in caught]
print("ok")
""")
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-3000:]


def test_kernel_tests_skip_without_triton():
    """The kernel's tests, the backend comparisons and notebook 07 skip with a reason where
    Triton is missing (notebooks/conftest.py); nothing fails."""
    run = run_without_triton(
        "import pytest; raise SystemExit(pytest.main(['-q', '-rs', '-p', 'no:cacheprovider', "
        "'tests/test_kernel.py', 'tests/test_backends.py', '-k', 'not without_triton', "
        "'notebooks/07_the_kernel.ipynb', '--nbval', "
        "'--nbval-sanitize-with', 'notebooks/nbval_sanitize.cfg']))")
    out = run.stdout
    assert run.returncode == 0, out[-3000:] + run.stderr[-2000:]
    assert "failed" not in out and "error" not in out.lower(), out[-3000:]
    assert "Linux wheels only" in out, out[-3000:]
    skipped = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert any("tests/test_kernel.py" in line for line in skipped), out[-3000:]
    assert any("07_the_kernel.ipynb" in line for line in skipped), out[-3000:]
    assert " passed" in out                 # the SDPA side of tests/test_backends.py still runs

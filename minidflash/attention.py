"""The drafter's attention under the visibility rule: the one backend switch (paper section 4.2).

Queries are block slots; keys are ``[context ; blocks]``; who sees whom is ``mask.visible``.
Three backends compute the same thing:

* ``"sdpa"``: torch's ``scaled_dot_product_attention`` with the dense mask of ``mask.dense_mask``
  (no mask at all at inference, where one block follows all the context and sees everything);
* ``"triton"``: the kernel of ``kernel.py``, which skips the tiles no query sees;
* ``"flex"``: torch's FlexAttention with a ``BlockMask`` made from the same ``mask.visible`` rule
  (per 128 x 128 tile: skipped, full, or partial and asked per score; no dense mask), compiled
  on a GPU.
  It is for training on a GPU: on a CPU torch runs it uncompiled and has no backward for it.

Triton has Linux wheels only: without it ``"triton"`` falls back to SDPA with a warning
(``check_backend``), and only ``kernel.py`` cannot be imported.

``default_backend`` picks SDPA everywhere except for *training on CUDA once the kernel has a
recorded GPU result* (``data/results/kernel_bench.json``, written by ``python -m minidflash
bench-kernel`` on a GPU, not ``--cpu-smoke``): a kernel nobody has run on a GPU is not a default.
Inference stays on SDPA (one block after all the context needs no mask at all).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import warnings
from pathlib import Path

import torch

from .paths import RESULTS_DIR
from .core.attention import ATTENTION
from .core.mask import visible

BACKENDS = ("sdpa", "triton", "flex")
KERNEL_RESULT = RESULTS_DIR / "kernel_bench.json"   # python -m minidflash bench-kernel (a GPU)


def kernel_verified(path=KERNEL_RESULT) -> bool:
    """True when a GPU run of bench-kernel is recorded: not a CPU smoke run, its checks against
    the fp32 reference (output and gradients) all passed, the kernel's rows error-free and its
    forward output close to SDPA's (0.1: bf16 rounding passes, a wrong kernel does not)."""
    try:
        result = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return False
    rows = [r for r in result.get("rows", []) if r.get("method") == "triton"]
    diffs = [r.get("max_abs_diff_vs_sdpa") for r in rows if r.get("passes") == "forward"]
    checks = result.get("checks", [])
    return (result.get("smoke") is False and bool(diffs) and all(r.get("error") is None for r in rows)
            and all(d is not None and d < 0.1 for d in diffs)
            and bool(checks) and all(c.get("ok") is True for c in checks))


@functools.cache
def triton_available() -> bool:
    """True when Triton can be imported (Linux wheels only)."""
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):       # e.g. sys.modules["triton"] = None
        return False


def default_backend(device="cpu", training: bool = False) -> str:
    """The switch's default: torch SDPA, except the Triton kernel for training on a CUDA device
    once ``kernel_verified()`` (on a CPU Triton only runs in its slow interpreter, for tests)."""
    if training and torch.device(device).type == "cuda" and kernel_verified() and triton_available():
        return "triton"
    return "sdpa"


def check_backend(backend: str) -> str:
    """The backend to run: ``backend`` itself, or "sdpa" (with a warning) for "triton" where Triton
    is not installed; the two compute the same attention."""
    if backend not in BACKENDS:
        raise ValueError(f"attention backend {backend!r} is not one of {BACKENDS}")
    if backend == "triton" and not triton_available():
        warnings.warn("the 'triton' attention backend needs Triton, which is not installed (it "
                      "has Linux wheels only: pip install triton==3.9.0); using torch SDPA, "
                      "which computes the same attention.", RuntimeWarning, stacklevel=2)
        return "sdpa"
    return backend


def attend(q, k, v, anchors, num_context, block_size, backend="sdpa", key_mask=None):
    """Attention of block queries over [context ; blocks] under the visibility rule (mask.py),
    through the named backend (``core.attention.ATTENTION``; "triton" falls back to SDPA without
    Triton). q (N, Hq, n*B, D); k, v (N, Hkv, S + n*B, D); anchors (N, n), or None for one block
    after all the context; key_mask (N, S + n*B) bool, or None: a ragged batch's holes, at
    inference only. Returns (N, Hq, n*B, D)."""
    if key_mask is not None and anchors is not None:
        raise ValueError("key_mask is for inference (one block per row, anchors=None); "
                         "training blocks take their visibility from anchors.")
    return ATTENTION[check_backend(backend)](q, k, v, anchors, num_context, block_size,
                                             key_mask=key_mask)


def flex_or_sdpa(q, k, v, anchors, num_context, block_size, key_mask=None):
    """The "flex" backend: FlexAttention for training blocks, SDPA for inference (one block after
    all the context needs no mask; a ragged batch's holes are a key mask)."""
    if anchors is None or key_mask is not None:
        return ATTENTION["sdpa"](q, k, v, anchors, num_context, block_size, key_mask)
    return flex_attend(q, k, v, anchors, num_context, block_size)


def flex_attend(q, k, v, anchors, num_context, block_size):
    """The training layout through FlexAttention: the BlockMask is ``mask.visible`` asked per
    (query, key) pair, built for these anchors (as the SDPA path builds its dense mask per call).
    """
    from torch.nn.attention.flex_attention import flex_attention

    if q.requires_grad and q.device.type != "cuda":
        raise ValueError("the 'flex' attention backend trains on a GPU only: torch has no "
                         "FlexAttention backward on a CPU. Train with backend='sdpa' here.")
    mask = flex_block_mask(anchors, num_context, block_size)
    attend_fn = compiled_flex() if q.device.type == "cuda" else flex_attention
    return attend_fn(q, k, v, block_mask=mask, enable_gqa=q.shape[1] != k.shape[1])


def flex_block_mask(anchors, num_context, block_size):
    """FlexAttention's BlockMask for n blocks at ``anchors`` (N, n) over ``num_context`` context
    keys: ``mask.visible`` asked per (query, key) pair, on the anchors' device."""
    from torch.nn.attention.flex_attention import create_block_mask

    anchors = anchors.to(torch.long)
    N, nB = anchors.shape[0], anchors.shape[1] * block_size

    def mask_mod(b, h, q_idx, kv_idx):
        q_block = q_idx // block_size
        return visible(q_block, kv_idx, anchors[b, q_block], num_context, block_size)

    return create_block_mask(mask_mod, N, None, nB, num_context + nB, device=anchors.device)


@functools.cache
def compiled_flex():
    """FlexAttention compiled once per process: uncompiled it materialises every score. Shapes
    left to torch.compile's default: after a second sequence length it compiles for any length
    (training batches differ in length), not once per length up to the recompile limit."""
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention)


ATTENTION["flex"] = flex_or_sdpa     # the core knows SDPA and the kernel; this adds FlexAttention

"""The drafter's attention under the visibility rule: the one backend switch (paper section 4.2).

Queries are block slots; keys are ``[context ; blocks]``; who sees whom is ``mask.visible``.
Two backends compute the same thing:

* ``"sdpa"``: torch's ``scaled_dot_product_attention`` with the dense mask of ``mask.dense_mask``
  (no mask at all at inference, where one block follows all the context and sees everything);
* ``"triton"``: the kernel of ``kernel.py``, which skips the tiles no query sees.

``default_backend`` picks the kernel on CUDA and SDPA on a CPU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .mask import dense_mask

BACKENDS = ("sdpa", "triton")


def default_backend(device="cpu") -> str:
    """The switch's default: the Triton kernel on a CUDA device, torch SDPA on a CPU (where
    Triton only runs in its slow interpreter, for tests)."""
    if torch.device(device).type == "cuda":
        try:
            import triton  # noqa: F401
            return "triton"
        except ImportError:
            pass
    return "sdpa"


def check_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"attention backend {backend!r} is not one of {BACKENDS}")
    return backend


def attend(q, k, v, anchors, num_context, block_size, backend="sdpa"):
    """Attention of block queries over [context ; blocks] under the visibility rule (mask.py).

    q (N, Hq, n*B, D); k, v (N, Hkv, S + n*B, D); anchors (N, n), or None for one block that
    follows all the context (inference: everything visible). Returns (N, Hq, n*B, D).
    """
    if check_backend(backend) == "triton":
        from .kernel import block_attention
        if anchors is None:
            anchors = torch.full((q.shape[0], 1), num_context, dtype=torch.long, device=q.device)
        return block_attention(q, k, v, anchors, num_context, block_size)
    mask = None if anchors is None else dense_mask(anchors, num_context, block_size)  # (N,1,nB,S+nB)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                          enable_gqa=q.shape[1] != k.shape[1])

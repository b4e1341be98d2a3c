"""The drafter's attention under the visibility rule (mask.py), by name (paper section 4.2).

``sdpa_attention`` applies the rule with torch SDPA and a dense mask (none at inference, where
one block follows all the context and sees every key); ``kernel_attention`` with the Triton
kernel (kernel.py), which skips the tiles no query sees. ``ATTENTION`` names them for
``DFlashDrafter.backend``; the lab adds FlexAttention (minidflash/attention.py).
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F

from .mask import dense_mask


def sdpa_attention(q, k, v, anchors, num_context, block_size, key_mask=None):
    """Block queries over [context ; blocks] under the visibility rule (mask.py), on torch SDPA.

    q (N, Hq, n*B, D); k, v (N, Hkv, S + n*B, D); anchors (N, n), or None for one block after all
    the context (inference: every key visible, no mask). key_mask (N, S + n*B) bool: a ragged
    batch's holes, which no query sees. Returns (N, Hq, n*B, D)."""
    if key_mask is not None:
        mask = key_mask[:, None, None, :]
    else:
        mask = None if anchors is None else dense_mask(anchors, num_context, block_size)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                          enable_gqa=q.shape[1] != k.shape[1])


def kernel_attention(q, k, v, anchors, num_context, block_size, key_mask=None):
    """The same attention through the Triton kernel (kernel.py), which skips the tiles no query
    sees; a ragged batch's holes go to SDPA (the kernel knows no holes)."""
    if key_mask is not None:
        return sdpa_attention(q, k, v, anchors, num_context, block_size, key_mask)
    try:
        from .kernel import block_attention
    except ImportError as e:            # Triton has Linux wheels only
        warnings.warn(f"{e} Using torch SDPA instead: the same attention.", RuntimeWarning)
        return sdpa_attention(q, k, v, anchors, num_context, block_size)
    if anchors is None:
        anchors = torch.full((q.shape[0], 1), num_context, dtype=torch.long, device=q.device)
    return block_attention(q, k, v, anchors, num_context, block_size)


# The drafter's attention by name (``DFlashDrafter.backend``); the lab adds FlexAttention.
ATTENTION = {"sdpa": sdpa_attention, "triton": kernel_attention}

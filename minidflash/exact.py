"""Exact mode's attention: every row's output the same bits whatever the pass's shape.

Not a paper section: what makes speculative decoding bit-identical to plain decoding in floating
point. The paper's losslessness (every committed token is the target's own choice) holds in
exact arithmetic; in floating point a 16-token verify pass and a 1-token pass sum the same
products in another order, so a near-tie may go the other way. Two things decide the order:

1. **The matrix products.** A kernel picks its blocking by the number of rows M, so row j of an
   M-row product need not equal the same row alone. Exact mode gives every target pass after the
   prefill one shape (``decoding.target_pass``: W rows, the real tokens first and padding after
   them), so every product has the same M.
2. **The attention's reduction over keys.** SDPA's CPU kernel runs an online softmax over blocks
   of keys whose boundaries follow the pass's shape. ``invariant_attention`` instead cuts the keys
   into blocks of ``KEY_BLOCK`` at fixed positions (0, C, 2C, ...), computes each block's scores,
   exponentials and partial products with one shape, and adds the blocks in index order; a key
   the row may not see (a later position, padding) contributes an exact zero. A key therefore
   enters every sum at the same place with the same value, whether the pass holds 1 row or 16,
   and whether the cache ends at the row or 15 positions later.

With both, row j of a W-row verify pass and row 0 of the W-row pass plain decoding makes for the
same token after the same cache are the same bits (tests/test_exact.py): greedy speculative
decoding then equals plain decoding in exact mode token for token, in bf16 as in fp32.

Shapes: N sequences, H query heads, G of them per key head, T rows, L keys, D head size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange

KEY_BLOCK = 64            # C: keys a block; the blocks start at key 0, C, 2C, ...


def invariant_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask, scaling: float,
                        block: int = KEY_BLOCK) -> torch.Tensor:
    """softmax(q k^T * scaling + mask) v, reduced over keys in fixed blocks in index order.

    q (N, H, T, D); k, v (N, H/G, L, D); mask: transformers' (N, 1, T, L) bool (True: may see) or
    additive float, or None (causal: row t sees keys up to L - T + t). Scores, softmax and sums in
    fp32; the output (N, T, H, D) in q's dtype, as transformers' attention functions return it.
    """
    N, H, T, D = q.shape
    Hk, L = k.shape[1], k.shape[2]
    G, C = H // Hk, block
    nb = -(-L // C)                                                      # key blocks
    if mask is None:
        mask = torch.ones(T, L, dtype=torch.bool, device=q.device).tril(L - T)[None, None]
    elif mask.dtype != torch.bool:
        mask = mask == 0
    see = F.pad(mask.expand(N, 1, T, L), (0, nb * C - L))                # padding keys: unseen
    see = rearrange(see, "N one T (b c) -> N one b T c", c=C).repeat(1, 1, 1, G, 1)
    qf = q.float().reshape(N, Hk, G * T, D)                              # heads of a key head as rows
    kb = rearrange(F.pad(k.float(), (0, 0, 0, nb * C - L)), "N h (b c) D -> N h b c D", c=C)
    vb = rearrange(F.pad(v.float(), (0, 0, 0, nb * C - L)), "N h (b c) D -> N h b c D", c=C)
    s = (qf[:, :, None] @ kb.transpose(-1, -2)) * scaling                # (N, Hk, nb, G*T, C)
    s = s.masked_fill(~see, float("-inf"))
    m = s.amax(dim=(2, 4), keepdim=True)                                 # a max: exact in any order
    p = torch.exp(s - m)                                                 # unseen keys: exactly 0
    l = p.sum(-1).cumsum(2)[:, :, -1]                                    # (N, Hk, G*T) blocks in order
    o = (p @ vb).cumsum(2)[:, :, -1]                                     # (N, Hk, G*T, D)
    o = (o / l[..., None]).reshape(N, H, T, D)
    return o.transpose(1, 2).to(q.dtype)


def transformers_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                           **kwargs):
    """``invariant_attention`` as a transformers attention function (``AttentionInterface``), so
    transformers' own forward can run it: ``model.set_attn_implementation(NAME)``."""
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    return invariant_attention(query, key, value, attention_mask, scaling).contiguous(), None


NAME = "invariant"          # not "...flash...": transformers reads that as a flash kernel


def register() -> str:
    """Make ``NAME`` an attention implementation transformers knows; returns it."""
    from transformers import AttentionInterface
    AttentionInterface.register(NAME, transformers_attention)
    return NAME

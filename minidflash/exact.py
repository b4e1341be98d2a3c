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
    """softmax(q k^T * scaling + mask) v, reduced over each row's keys in fixed blocks, in order.

    q (N, H, T, D); k, v (N, H/G, L, D); mask: transformers' (N, 1, T, L) bool (True: may see) or
    additive float, or None (causal: row t sees keys up to L - T + t). Scores, softmax and sums in
    fp32; the output (N, T, H, D) in q's dtype, as transformers' attention functions return it.

    A row's keys, the columns it sees in column order, are numbered 0, 1, ... (its *dense*
    positions; the last is the row's own key). Block b holds dense positions bC .. bC + C - 1, and
    the row's sums are its blocks' partial sums added in order. A chain's rows see a prefix of the
    columns, so dense position = column. A tree's node sees the cache, then its ancestors and
    itself scattered over the pass's columns: those are its last keys, within its last two
    blocks, which are gathered row by row; the blocks before them are columns, as in a chain.
    Every row reduces its last two blocks alone (a (1, C) x (C, D) product) and the blocks before
    them with all rows ((G*T, C) x (C, D)), so a row's bits follow its keys, not the pass.
    """
    N, H, T, D = q.shape
    Hk, L = k.shape[1], k.shape[2]
    G, C = H // Hk, block
    nb = -(-L // C) + 1                                                  # key blocks, one spare
    if mask is None:
        mask = torch.ones(T, L, dtype=torch.bool, device=q.device).tril(L - T)[None, None]
    elif mask.dtype != torch.bool:
        mask = mask == 0
    see = F.pad(mask[:, 0].expand(N, T, L), (0, nb * C - L))            # (N, T, nb*C)
    own = see.sum(-1) - 1                                                # (N, T) dense position of the row's key
    last = own // C                                                      # (N, T) its block
    # scores and exponentials of every (row, column), in blocks of columns: one shape per block
    qf = q.float().reshape(N, Hk, G * T, D)                              # heads of a key head as rows
    kb = rearrange(F.pad(k.float(), (0, 0, 0, nb * C - L)), "N h (b c) D -> N h b c D", c=C)
    vb = rearrange(F.pad(v.float(), (0, 0, 0, nb * C - L)), "N h (b c) D -> N h b c D", c=C)
    s = (qf[:, :, None] @ kb.transpose(-1, -2)) * scaling                # (N, Hk, nb, G*T, C)
    rows_see = rearrange(see, "N T (b c) -> N 1 b 1 T c", c=C)
    s = s.view(N, Hk, nb, G, T, C).masked_fill(~rows_see, float("-inf"))
    p = torch.exp(s - s.amax(dim=(2, 5), keepdim=True)).view(N, Hk, nb, G * T, C)   # unseen: 0
    # the blocks before a row's last two, as columns, all rows at once
    l_blocks = rearrange(p.sum(-1), "N h b r -> N h r b")                 # (N, Hk, G*T, nb)
    o_blocks = rearrange(p @ vb, "N h b r D -> N h r b D")               # (N, Hk, G*T, nb, D)
    # the last two blocks of each row, gathered by dense position, each row alone
    order = torch.sort((~see).to(torch.int8), dim=-1, stable=True).indices   # (N, T, nb*C) seen first
    dense = (last[..., None] - 1) * C + torch.arange(2 * C, device=q.device)  # (N, T, 2C)
    valid = (dense >= 0) & (dense <= own[..., None])
    cols = order.gather(-1, dense.clamp(0, nb * C - 1))                  # (N, T, 2C)
    p_rows = rearrange(p, "N h b (g t) c -> N h g t (b c)", g=G)
    p_tail = p_rows.gather(-1, cols[:, None, None].expand(N, Hk, G, T, 2 * C))
    p_tail = p_tail.masked_fill(~valid[:, None, None], 0.0)              # (N, Hk, G, T, 2C)
    v_tail = vb.reshape(N, Hk, nb * C, D).gather(                        # (N, Hk, T, 2C, D)
        2, cols.reshape(N, 1, T * 2 * C, 1).expand(N, Hk, T * 2 * C, D)).view(N, Hk, T, 2 * C, D)
    p_tail = p_tail.view(N, Hk, G, T, 2, 1, C)
    l_tail = p_tail.sum(-1)[..., 0]                                      # (N, Hk, G, T, 2)
    o_tail = (p_tail @ v_tail.view(N, Hk, 1, T, 2, C, D))[..., 0, :]     # (N, Hk, G, T, 2, D)
    # each row: blocks before its last two from the columns, those two its own, then in order
    b = torch.arange(nb, device=q.device)
    early = (b < last[..., None] - 1)                                    # (N, T, nb)
    early = early[:, None, None].expand(N, Hk, G, T, nb).reshape(N, Hk, G * T, nb)
    at = (last[..., None] - 1 + torch.arange(2, device=q.device)).clamp(min=0)   # (N, T, 2)
    at = at[:, None, None].expand(N, Hk, G, T, 2).reshape(N, Hk, G * T, 2)
    first = (last > 0)[:, None, None].expand(N, Hk, G, T).reshape(N, Hk, G * T, 1)
    keep = torch.cat([first, torch.ones_like(first)], -1)                # block -1 does not exist
    l_tail = l_tail.reshape(N, Hk, G * T, 2).masked_fill(~keep, 0.0)
    o_tail = o_tail.reshape(N, Hk, G * T, 2, D).masked_fill(~keep[..., None], 0.0)
    l_all = l_blocks.masked_fill(~early, 0.0).scatter_add(-1, at, l_tail)
    o_all = o_blocks.masked_fill(~early[..., None], 0.0).scatter_add(
        -2, at[..., None].expand(N, Hk, G * T, 2, D), o_tail)
    l = l_all.cumsum(-1)[..., -1]                                        # (N, Hk, G*T) in order
    o = o_all.cumsum(-2)[..., -1, :]                                     # (N, Hk, G*T, D)
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

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

import contextlib

import torch
import torch.nn.functional as F
from einops import rearrange
from transformers import DynamicCache

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
    blocks. So every row takes its last two blocks by its own dense positions (gathered, and
    multiplied by their values row by row) and the blocks before them from the columns (all rows
    in one product a block): a row's bits follow its keys, not the pass.
    """
    N, H, T, D = q.shape
    Hk, L = k.shape[1], k.shape[2]
    G, C = H // Hk, block
    R, nb = G * T, -(-L // C)                                           # rows a key head; blocks
    if mask is None:
        mask = torch.ones(T, L, dtype=torch.bool, device=q.device).tril(L - T)[None, None]
    elif mask.dtype != torch.bool:
        mask = mask == 0
    see = mask[:, 0].expand(N, T, L)                                     # (N, T, L)
    count = see.sum(-1)                                                  # (N, T) keys a row sees
    last = (count - 1) // C                                              # (N, T) its own key's block
    # every (row, column): scores, the max (exact in any order), exponentials; unseen: exactly 0
    s = (q.float().reshape(N, Hk, R, D) @ k.float().transpose(-1, -2)) * scaling   # (N, Hk, R, L)
    s = s.view(N, Hk, G, T, L).masked_fill(~see[:, None, None], float("-inf")).view(N, Hk, R, L)
    p = F.pad(torch.exp(s - s.amax(-1, keepdim=True)), (0, nb * C - L))   # (N, Hk, R, nb*C)
    vb = F.pad(v.float(), (0, 0, 0, nb * C - L))                        # (N, Hk, nb*C, D)
    # the blocks as columns: one (R, C) x (C, D) product a block
    l_all = p.view(N, Hk, R, nb, C).sum(-1)                              # (N, Hk, R, nb)
    o_all = p.view(N, Hk, R, nb, C).transpose(2, 3) @ vb.view(N, Hk, nb, C, D)  # (N, Hk, nb, R, D)
    # each row's last two blocks by its dense positions: the column holding each
    dense = (last[..., None] - 1) * C + torch.arange(2 * C, device=q.device)     # (N, T, 2C)
    valid = (dense >= 0) & (dense < count[..., None])
    prefix = bool((see == (torch.arange(L, device=q.device) < count[..., None])).all())
    cols = dense.clamp(min=0) if prefix else torch.searchsorted(
        see.cumsum(-1, dtype=torch.int32), (dense + 1).to(torch.int32).clamp(min=1))
    cols = cols.clamp(max=nb * C - 1)
    p_tail = p.view(N, Hk, G, T, nb * C).gather(-1, cols[:, None, None].expand(N, Hk, G, T, 2 * C))
    p_tail = p_tail.masked_fill(~valid[:, None, None], 0.0).view(N, Hk, G, T, 2, C)
    v_tail = vb.gather(2, cols.reshape(N, 1, T * 2 * C, 1).expand(N, Hk, T * 2 * C, D))
    l_tail = p_tail.sum(-1)                                              # (N, Hk, G, T, 2)
    o_tail = p_tail.permute(0, 1, 3, 4, 2, 5) @ v_tail.view(N, Hk, T, 2, C, D)  # (N, Hk, T, 2, G, D)
    # a row's sums: the blocks before its last two from the columns, those two its own, in order
    before = torch.arange(nb, device=q.device) < last[..., None] - 1   # (N, T, nb)
    before = before[:, None, None].expand(N, 1, G, T, nb).reshape(N, 1, R, nb)
    at = (last[..., None] - 1 + torch.arange(2, device=q.device)).clamp(min=0)  # (N, T, 2)
    at = at[:, None, None].expand(N, Hk, G, T, 2).reshape(N, Hk, R, 2)
    l_tail = l_tail.reshape(N, Hk, R, 2)
    o_tail = o_tail.permute(0, 1, 4, 2, 3, 5).reshape(N, Hk, R, 2, D)
    l_all = l_all.masked_fill(~before, 0.0).scatter_add(-1, at, l_tail)
    o_all = o_all.transpose(2, 3).masked_fill(~before[..., None], 0.0).scatter_add(
        -2, at[..., None].expand(N, Hk, R, 2, D), o_tail)                # (N, Hk, R, nb, D)
    l = l_all.cumsum(-1)[..., -1]                                        # (N, Hk, R): in order
    o = o_all.cumsum(-2)[..., -1, :] / l[..., None]                      # (N, Hk, R, D)
    return o.reshape(N, H, T, D).transpose(1, 2).to(q.dtype)


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
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
    AttentionInterface.register(NAME, transformers_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)     # the mask SDPA takes: bool
    return NAME


def padded(ids, past: int, pad: int, pos, mask):
    """ids (1, T), their positions and mask with ``pad`` padding rows after them: padding tokens
    0 at the next positions, each seeing only itself (a 4-D mask) or everything before it."""
    if pos is None:
        pos = torch.arange(past, past + ids.shape[1], device=ids.device)[None]
    if not pad:
        return ids, pos, mask
    T, more = ids.shape[1], torch.arange(1, pad + 1, device=ids.device)
    ids = torch.cat([ids, ids.new_zeros(1, pad)], 1)
    pos = torch.cat([pos, pos[:, -1:] + more], 1)
    if mask is not None and mask.dim() == 2:                       # (1, past + T): 1 where seen
        mask = torch.cat([mask, mask.new_ones(1, pad)], 1)
    elif mask is not None:                                         # (1, 1, T, past + T) a tree's
        seen = mask if mask.dtype == torch.bool else mask == 0
        full = seen.new_zeros(1, 1, T + pad, past + T + pad)
        full[..., :T, :past + T] = seen
        full[..., T:, past + T:] = torch.eye(pad, dtype=torch.bool, device=ids.device)
        mask = full if mask.dtype == torch.bool else torch.zeros(
            full.shape, dtype=mask.dtype, device=ids.device).masked_fill(
            ~full, torch.finfo(mask.dtype).min)
    return ids, pos, mask


@contextlib.contextmanager
def invariant(model):
    """transformers' forward of ``model`` with exact mode's attention, for the duration."""
    before = model.config._attn_implementation
    model.set_attn_implementation(register())
    try:
        yield
    finally:
        model.set_attn_implementation(before)


def one_row_at_a_time(run, input_ids, cache, mask, pos, logits_to_keep: int = 0):
    """A batch's exact pass: each row alone, ``run(ids (1, T_n), its cache, positions)`` ->
    (logits, states, last) as the pass a batch of one makes (its cache without the batch's
    holes, its own tokens without padding); the outputs and new keys put in the batch's places
    (zeros in its padding's), the keys appended to ``cache``."""
    N, T = input_ids.shape
    past = cache.get_seq_length()
    mask = torch.ones(N, past + T, dtype=torch.long, device=input_ids.device) if mask is None else mask
    pos = (torch.arange(past, past + T, device=input_ids.device)[None].expand(N, T)
           if pos is None else pos)
    outs, kept = [], []
    for n in range(N):
        old, new = mask[n, :past].bool(), mask[n, past:].bool()
        row = DynamicCache()
        for i, layer in enumerate(cache.layers):
            row.update(layer.keys[n:n + 1, :, old], layer.values[n:n + 1, :, old], i)
        outs.append(run(input_ids[n:n + 1, new], row, pos[n:n + 1, new]))
        kept.append((new, [(layer.keys[0, :, -int(new.sum()):], layer.values[0, :, -int(new.sum()):])
                           for layer in row.layers]))

    def place(parts, width):                                      # (1, T_n, ...) -> (N, width, ...)
        out = parts[0].new_zeros(N, width, *parts[0].shape[2:])
        for n, x in enumerate(parts):
            where = kept[n][0] if width == T else torch.arange(width) >= width - x.shape[1]
            out[n, where] = x[0]
        return out

    logits = place([o[0] for o in outs], outs[0][0].shape[1] if logits_to_keep else T)
    states = None if outs[0][1] is None else tuple(
        place([o[1][i] for o in outs], T) for i in range(len(outs[0][1])))
    last = None if outs[0][2] is None else place([o[2] for o in outs], logits.shape[1])
    for i in range(len(kept[0][1])):
        k = kept[0][1][i][0].new_zeros(N, kept[0][1][i][0].shape[0], T, kept[0][1][i][0].shape[2])
        v = torch.zeros_like(k)
        for n, (new, kv) in enumerate(kept):
            k[n][:, new], v[n][:, new] = kv[i]
        cache.update(k, v, i)
    return logits, states, last

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
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from einops import rearrange
from transformers import DynamicCache

KEY_BLOCK = 64            # C: keys a block; the blocks start at key 0, C, 2C, ...
ATTENTION = "exact.invariant_attention"     # its name in torch.profiler's records


class Seen:
    """Which keys each row of a pass sees, cut into blocks of ``block``: what the mask decides,
    the same for every layer, so the lean pass works it out once a pass (transformers' forward
    once a layer). mask as ``invariant_attention`` takes it; N sequences, T rows, L keys.

    see (N, T, nb*C): row t may see column c (False past L); count (N, T): keys a row sees;
    chain: every row sees a prefix of the columns (dense position = column); first: the first
    block holding a key some row may not see (the blocks before it need no mask); hide
    (N, 1, nb - first, 1, T, C): the keys to hide in those blocks, laid out as the scores are.
    """

    def __init__(self, mask, N: int, T: int, L: int, device, block: int = KEY_BLOCK):
        C, nb = block, -(-L // block)
        if mask is None:
            mask = torch.ones(T, L, dtype=torch.bool, device=device).tril(L - T)[None, None]
        elif mask.dtype != torch.bool:
            mask = mask == 0
        self.see = F.pad(mask[:, 0].expand(N, T, L), (0, nb * C - L))
        self.count = self.see.sum(-1)
        self.chain = bool((self.see == (torch.arange(nb * C, device=device)
                                        < self.count[..., None])).all())
        hidden = ~self.see.view(N, T, nb, C)
        blocks = hidden.any(-1).any(1).any(0).nonzero()                 # blocks with a hidden key
        self.first = int(blocks[0]) if len(blocks) else nb
        self.hide = hidden[:, :, self.first:].transpose(1, 2)[:, None, :, None].contiguous()
        self.shape = (N, T, L, C)
        self._tails = {}

    def tail(self, G: int) -> SimpleNamespace:
        """Where each row's last two blocks are, for a pass whose rows are not a chain's (G query
        heads a key head): cols (N, T, 2C) the column of each of those blocks' dense positions,
        hide (N, T, 2C) the positions past the row's own key (or before key 0), at (N, 1, 2, G*T)
        the blocks they are, none (N, 1, 2, G*T) a first one that does not exist (block -1),
        after (N, 1, nb, G*T) the blocks from those two on, whose chain sums are replaced."""
        if G not in self._tails:
            see, count, (N, T, L, C) = self.see, self.count, self.shape
            nb, dev = see.shape[-1] // C, see.device
            last = (count - 1) // C                                      # (N, T) own key's block
            dense = (last[..., None] - 1) * C + torch.arange(2 * C, device=dev)   # (N, T, 2C)
            cols = torch.searchsorted(see.cumsum(-1, dtype=torch.int32),  # the column of each
                                      (dense + 1).clamp(min=1).to(torch.int32)).clamp(max=nb * C - 1)
            rows = lambda x: x.expand(N, 1, x.shape[2], G, T).reshape(N, 1, x.shape[2], G * T)
            before = torch.arange(nb, device=dev) < last[..., None] - 1  # (N, T, nb)
            at = (last[:, None] - 1 + torch.arange(2, device=dev)[:, None]).clamp(min=0)
            self._tails[G] = SimpleNamespace(
                cols=cols, hide=(dense < 0) | (dense >= count[..., None]),
                at=rows(at[:, None, :, None]),
                none=rows(torch.stack([last == 0, torch.zeros_like(last, dtype=torch.bool)],
                                      1)[:, None, :, None]),
                after=rows(~before.transpose(1, 2)[:, None, :, None]))
        return self._tails[G]


@torch.profiler.record_function(ATTENTION)
def invariant_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask, scaling: float,
                        block: int = KEY_BLOCK, seen: Seen | None = None) -> torch.Tensor:
    """softmax(q k^T * scaling + mask) v, reduced over each row's keys in fixed blocks, in order.

    q (N, H, T, D); k, v (N, H/G, L, D); mask: transformers' (N, 1, T, L) bool (True: may see) or
    additive float, or None (causal: row t sees keys up to L - T + t); seen: the mask worked out
    already (``Seen``), for every layer of a pass. Scores, softmax and sums in fp32; the output
    (N, T, H, D) in q's dtype, as transformers' attention functions return it.

    A row's keys, the columns it sees in column order, are numbered 0, 1, ... (its *dense*
    positions; the last is its own). Block b holds dense positions bC .. bC + C - 1; a block's
    partial sums are one (G*T, C) x (C, D) product for all rows, and a row adds its blocks in
    order. A chain's rows see a prefix of the columns, so dense position = column: the blocks are
    the columns'. A tree's node sees the cache, then its ancestors and itself scattered over the
    pass's columns, all within its last two blocks: those two are gathered by dense position and
    taken through the same product, one for each row, so its bits are those of a chain's row
    with the same keys.
    """
    N, H, T, D = q.shape
    Hk, L = k.shape[1], k.shape[2]
    G, C = H // Hk, block
    R, nb = G * T, -(-L // C)                                           # rows a key head; blocks
    seen = Seen(mask, N, T, L, q.device, block) if seen is None else seen
    if seen.shape != (N, T, L, C):
        raise ValueError(f"seen was worked out for (N, T, L, block) {seen.shape}, and this call "
                         f"has {(N, T, L, C)}: make one Seen a pass, from that pass's mask.")
    kb, vb = (padded_keys(x, nb, C) for x in (k, v))                   # (N, Hk, nb, C, D) fp32
    s = (q.float().reshape(N, Hk, 1, R, D) @ kb.transpose(-1, -2)).mul_(scaling)  # (.., nb, R, C)
    s = s.view(N, Hk, nb, G, T, C)
    s[:, :, seen.first:].masked_fill_(seen.hide, float("-inf"))
    p = s.sub_(s.amax(-1, keepdim=True).amax(2, keepdim=True)).exp_()  # unseen: 0 (max is exact)
    p = p.view(N, Hk, nb, R, C)
    l_b, o_b = p.sum(-1), p @ vb                                         # (N, Hk, nb, R), (.., D)
    if not seen.chain:
        l_b, o_b = last_two_blocks(p, vb, seen, l_b, o_b, G)             # a tree's pass
    l, o = in_order(l_b), in_order(o_b)                                  # (N, Hk, R), (.., D)
    return (o / l[..., None]).reshape(N, H, T, D).transpose(1, 2).to(q.dtype)


def padded_keys(x: torch.Tensor, nb: int, C: int) -> torch.Tensor:
    """x (N, Hk, L, D) in fp32 with zeros after it, as nb blocks of C keys: (N, Hk, nb, C, D)."""
    N, Hk, L, D = x.shape
    out = torch.empty(N, Hk, nb * C, D, dtype=torch.float32, device=x.device)
    out[:, :, :L] = x
    out[:, :, L:] = 0.0
    return out.view(N, Hk, nb, C, D)


def in_order(x: torch.Tensor) -> torch.Tensor:
    """x (N, Hk, nb, ...) summed over its blocks one after the other: ((x0 + x1) + x2) + ...
    (a block of zeros after a row's last leaves its sum as it was)."""
    out = x[:, :, 0].clone()
    for b in range(1, x.shape[2]):
        out += x[:, :, b]
    return out


def last_two_blocks(p, vb, seen: Seen, l_b, o_b, G: int):
    """The block sums of a pass whose rows do not see a prefix of the columns: each row's last
    two blocks by its dense positions (its keys gathered in order), through the (G*T, C) x (C, D)
    product of every other block, one product a row; the blocks after them zero."""
    N, Hk, nb, R, C = p.shape
    T, D = R // G, vb.shape[-1]
    tail = seen.tail(G)
    rows = rearrange(p, "N h b (g t) c -> N h g t (b c)", g=G)
    p_tail = rows.gather(-1, tail.cols[:, None, None].expand(N, Hk, G, T, 2 * C))
    p_tail = p_tail.masked_fill_(tail.hide[:, None, None], 0.0).view(N, Hk, G, T, 2, C)
    keys = vb.view(N, Hk, nb * C, D)                                     # row t's keys, in order:
    v_tail = (keys[:, :, tail.cols[0].reshape(-1)] if N == 1 else       # (N, Hk, T, 2, C, D)
              torch.stack([keys[n][:, tail.cols[n].reshape(-1)] for n in range(N)]))
    a = p_tail.new_zeros(N, Hk, T, 2, G, T, C)                           # row t's product: its rows
    a.diagonal(dim1=2, dim2=5).copy_(rearrange(p_tail, "N h g t k c -> N h k g c t"))
    out = a.view(N, Hk, T, 2, R, C) @ v_tail.view(N, Hk, T, 2, C, D)     # (N, Hk, T, 2, R, D)
    out = out.view(N, Hk, T, 2, G, T, D).diagonal(dim1=2, dim2=5)        # (N, Hk, 2, G, D, T)
    o_tail = rearrange(out, "N h k g D t -> N h k (g t) D")
    l_tail = rearrange(p_tail.sum(-1), "N h g t k -> N h k (g t)")
    at = tail.at.expand(N, Hk, 2, R)
    l_b = l_b.masked_fill(tail.after, 0.0).scatter_add(2, at, l_tail.masked_fill(tail.none, 0.0))
    o_b = o_b.masked_fill(tail.after[..., None], 0.0).scatter_add(
        2, at[..., None].expand(N, Hk, 2, R, D), o_tail.masked_fill(tail.none[..., None], 0.0))
    return l_b, o_b


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

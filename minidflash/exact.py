"""Exact mode's attention: every row's output the same bits whatever the pass's shape.

Not a paper section: what makes speculative decoding bit-identical to plain decoding in floating
point. The paper's losslessness (every committed token is the target's own choice) holds in
exact arithmetic; in floating point a 16-token verify pass and a 1-token pass sum the same
products in another order, so a near-tie may go the other way. Two things decide the order:

1. **The matrix products.** A kernel picks its blocking by the number of rows M, so row j of an
   M-row product need not equal the same row alone. Exact mode gives every target pass after the
   prefill one shape (``decoding.target_pass``: W rows, the real tokens first and padding after
   them), so every product has the same M. The same M is not always enough: a kernel may take
   the rows left over after its last whole tile another way (MKL's fp32 product on a CPU with
   AVX2 only does, for 8 rows), and then a row's bits still depend on its place. Each product
   is asked once a shape whether its rows stand alone (``rows_stand_alone``,
   ``projection_rows_stand_alone``); where they do not, it runs a row of the pass at a time
   (``row_product``, ``each_row``).
2. **The attention's reduction over keys.** SDPA's CPU kernel runs an online softmax over blocks
   of keys whose boundaries follow the pass's shape. ``invariant_attention`` instead cuts the keys
   into blocks of ``KEY_BLOCK`` at fixed positions (0, C, 2C, ...) of each row's own keys,
   computes each block's scores, exponentials and partial products with one shape, and adds the
   blocks in index order; a key the row may not see (a later position, padding) contributes an
   exact zero. A key therefore enters every sum at the same place with the same value, whether
   the pass holds 1 row or 16, and whether the cache ends at the row or 15 positions later. A
   tree's node, whose keys are scattered over the pass, has its last blocks gathered in its own
   order (``Seen.gathers``), through a product of the same shape.

With both, row j of a W-row verify pass and row 0 of the W-row pass plain decoding makes for the
same token after the same cache are the same bits (tests/test_exact.py): greedy speculative
decoding then equals plain decoding in exact mode token for token, in bf16 as in fp32.

Shapes: N sequences, H query heads, G of them per key head, T rows, L keys, D head size.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from transformers import DynamicCache

KEY_BLOCK = 64            # C: keys a block; the blocks start at key 0, C, 2C, ...
ATTENTION = "exact.invariant_attention"     # its name in torch.profiler's records


class Seen:
    """Which keys each row of a pass sees, cut into blocks of ``block``: what the mask decides,
    the same for every layer, so the lean pass works it out once a pass (transformers' forward
    once a layer). mask as ``invariant_attention`` takes it; N sequences, T rows, L keys.

    see (N, T, nb*C): row t may see column c (False past L); count (N, T): keys a row sees;
    keys (N, T, nb*C): the keys it sees up to column c; lead (N, T): the columns it sees before
    the first it may not (up to there a key's dense position is its column); chain: every row
    sees a prefix of the columns (lead = count); first: the first block holding a key some row
    may not see (the blocks before it need no mask); hide (N, 1, nb - first, 1, T, C): the keys
    to hide in those blocks, laid out as the scores are.
    """

    def __init__(self, mask, N: int, T: int, L: int, device, block: int = KEY_BLOCK):
        C, nb = block, -(-L // block)
        if mask is None:
            mask = torch.ones(T, L, dtype=torch.bool, device=device).tril(L - T)[None, None]
        elif mask.dtype != torch.bool:
            mask = mask == 0
        self.see = F.pad(mask[:, 0].expand(N, T, L), (0, nb * C - L))
        self.count = self.see.sum(-1)
        self.keys = self.see.cumsum(-1)
        self.lead = (self.keys == torch.arange(1, nb * C + 1, device=device)).sum(-1)
        self.chain = bool((self.lead == self.count).all())
        hidden = ~self.see.view(N, T, nb, C)
        blocks = hidden.any(-1).any(1).any(0).nonzero()                 # blocks with a hidden key
        self.first = int(blocks[0]) if len(blocks) else nb
        self.hide = hidden[:, :, self.first:].transpose(1, 2)[:, None, :, None].contiguous()
        self.shape = (N, T, L, C)
        self._plans = {}

    def gathers(self, G: int, Hk: int) -> SimpleNamespace:
        """The products a pass needs besides its own, for the rows that do not see a prefix of the
        columns (a tree's nodes; G query heads a key head, Hk key heads). From the block of its
        first gap (``lead``) on, such a row's keys sit at dense positions other than their
        columns, so there its block sums come from products over its keys gathered in dense
        order. A row whose keys are the first keys of another's (in a tree: an ancestor's, of a
        descendant's) takes that row's products, its keys past its own hidden: one product a
        *leader* (of the rows whose keys begin with the row's, the one seeing most) and block.

        P products, serving S rows, G query rows a row (g*T + t), Hk heads a query row:
        rows (S*G*Hk,): where each sits among the products' rows (P*Hk*G*T, flat); at (S*G*Hk,):
        where its block sums go among the pass's (N*Hk*nb*G*T); p_at (S*G*Hk, C): where its
        probabilities of the block lie in the pass's (N, Hk, nb, G*T, C), flat (past its own
        key: its first gap, a zero); v_at (P*Hk*C,): the value rows (of N*Hk*nb*C) each product
        takes; replaced (N, 1, nb - first, 1, T, 1): the blocks whose sums the products replace.
        """
        if (G, Hk) in self._plans:
            return self._plans[G, Hk]
        see, count, lead, (N, T, _, C) = self.see, self.count, self.lead, self.shape
        nb, dev = see.shape[-1] // C, see.device
        # Which rows' keys begin another's: row a's are the first keys of row t's when a sees
        # what t sees up to a's own key. Rows with a gap all see the columns before c0.
        gap = lead < count                                                        # (N, T)
        c0 = int(lead[gap].min())
        part = see[..., c0:]                                                      # the rest
        last = torch.searchsorted(self.keys, count[..., None].clamp(min=1)) - c0    # own key
        upto = torch.arange(part.shape[-1], device=dev) <= last                   # (N, T, .)
        begins = (part[:, :, None] == (part[:, None] & upto[:, :, None])).all(-1)  # (N, a, t)
        begins &= (lead >= c0)[:, None]
        rank = count[:, None, :] * T + torch.arange(T - 1, -1, -1, device=dev)    # most keys
        leader = torch.where(begins, rank, -1).argmax(-1).tolist()                # (N, T)
        lead_, count_ = lead.tolist(), count.tolist()
        led, products, served = {}, [], []    # (n, leader): rows; (n, leader, b); (product, row)
        for n, t in gap.nonzero().tolist():
            led.setdefault((n, leader[n][t]), []).append(t)
        replaced = [[[False] * T for _ in range(nb)] for _ in range(N)]          # (N, nb, T)
        for (n, l), rows in led.items():
            start = min(lead_[n][t] for t in rows) // C                  # >= first: a gap there
            for b in range(start, nb):
                for t in rows:
                    replaced[n][b][t] = True
            for b in range(start, (count_[n][l] - 1) // C + 1):
                served += [(len(products), t) for t in rows]
                products.append((n, l, b))
        # Where each product reads and writes, as flat indices (one take, index_select or
        # index_copy_ a layer): its leader's dense positions in the block, their columns.
        n, l, b = torch.tensor(products, device=dev).unbind(1)                   # (P,)
        dense = b[:, None] * C + torch.arange(C, device=dev)                      # (P, C)
        cols = torch.searchsorted(self.keys[n, l], dense + 1).clamp(max=nb * C - 1)
        i, t = torch.tensor(served, device=dev).unbind(1)                         # (S,)
        r = (torch.arange(G, device=dev)[:, None] * T + t).reshape(-1)            # (S*G,) g*T + t
        i, t = i.repeat(G), t.repeat(G)
        col = torch.where(dense[i] < count[n[i], t][:, None], cols[i],            # past its key:
                          lead[n[i], t][:, None])                                 # its first gap
        i, r, h = i[:, None], r[:, None], torch.arange(Hk, device=dev)           # (S*G, Hk)
        block = ((n[i] * Hk + h) * nb)[..., None] + col[:, None] // C            # (S*G, Hk, C)
        self._plans[G, Hk] = SimpleNamespace(
            P=len(products), rows=((i * Hk + h) * (G * T) + r).reshape(-1),
            at=(((n[i] * Hk + h) * nb + b[i]) * (G * T) + r).reshape(-1),
            p_at=((block * (G * T) + r[..., None]) * C + col[:, None] % C).reshape(-1, C),
            v_at=((n[:, None, None] * Hk + h[:, None]) * (nb * C) + cols[:, None]).reshape(-1),
            replaced=torch.tensor(replaced, device=dev)[:, None, self.first:, None, :, None])
        return self._plans[G, Hk]


@torch.profiler.record_function(ATTENTION)
def invariant_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask, scaling: float,
                        block: int = KEY_BLOCK, seen: Seen | None = None) -> torch.Tensor:
    """softmax(q k^T * scaling + mask) v, reduced over each row's keys in fixed blocks, in order.

    q (N, H, T, D); k, v (N, H/G, L, D); mask: transformers' (N, 1, T, L) bool (True: may see) or
    additive float, or None (causal: row t sees keys up to L - T + t); seen: the mask worked out
    already (``Seen``), for every layer of a pass. Scores, softmax and sums in fp32; the output
    (N, T, H, D) in q's dtype, as transformers' attention functions return it.

    A row's keys, the columns it sees in column order, are numbered 0, 1, ... (its *dense*
    positions; the last is its own). Block b holds dense positions bC .. bC + C - 1; each block's
    partial sums are one (G*T, C) x (C, D) product, and a row adds its blocks in order. Where a
    row sees a prefix of the columns (a chain's rows, the cache), dense position = column, and
    one batched product over the pass's column blocks serves every row. A tree's node sees the
    cache, then its ancestors and itself scattered over the pass's columns: from its first gap
    on (its last one or two blocks) its keys are gathered in dense order and taken through a
    product of the same shape (``gathered_blocks``), so its bits are those of a chain's row with
    the same keys.
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
    qb = q.float().reshape(N, Hk, 1, R, D).expand(N, Hk, nb, R, D)      # the same rows a block
    s = row_product(qb, kb.transpose(-1, -2), T).mul_(scaling)          # (N, Hk, nb, R, C)
    s = s.view(N, Hk, nb, G, T, C)
    s[:, :, seen.first:].masked_fill_(seen.hide, float("-inf"))
    p = s.sub_(s.amax((2, -1), keepdim=True)).exp_()                    # unseen: 0 (max is exact)
    plan = None if seen.chain else seen.gathers(G, Hk)
    if plan is not None:                      # a tree's pass: its nodes' last blocks gathered,
        o_g, l_g = gathered_blocks(p.view(N, Hk, nb, R, C), vb, plan, T)
        p[:, :, seen.first:].masked_fill_(plan.replaced, 0.0)          # then left out here
    p = p.view(N, Hk, nb, R, C)
    l_b, o_b = p.sum(-1), row_product(p, vb, T)                          # (N, Hk, nb, R), (.., D)
    if plan is not None:                                                # the gathered in their place
        l_b.view(-1).index_copy_(0, plan.at, l_g.view(-1).index_select(0, plan.rows))
        o_b.view(-1, D).index_copy_(0, plan.at, o_g.view(-1, D).index_select(0, plan.rows))
    l, o = in_order(l_b), in_order(o_b)                                  # (N, Hk, R), (.., D)
    return (o / l[..., None]).reshape(N, H, T, D).transpose(1, 2).to(q.dtype)


def padded_keys(x: torch.Tensor, nb: int, C: int) -> torch.Tensor:
    """x (N, Hk, L, D) in fp32 with zeros after it, as nb blocks of C keys: (N, Hk, nb, C, D) (x
    itself where it is all that already)."""
    N, Hk, L, D = x.shape
    if x.dtype == torch.float32 and L == nb * C and x.is_contiguous():
        return x.view(N, Hk, nb, C, D)
    out = torch.empty(N, Hk, nb * C, D, dtype=torch.float32, device=x.device)
    out[:, :, :L] = x
    out[:, :, L:] = 0.0
    return out.view(N, Hk, nb, C, D)


def in_order(x: torch.Tensor) -> torch.Tensor:
    """x (N, Hk, nb, ...) summed over its blocks one after the other: ((x0 + x1) + x2) + ...
    (a block of zeros after a row's last leaves its sum as it was)."""
    first, *rest = x.unbind(2)
    out = first.clone()
    for b in rest:
        out += b
    return out


def gathered_blocks(p, vb, plan, T: int):
    """The block sums of ``Seen.gathers``' products: each one its leader's keys of a block in
    dense order, through the (G*T, C) x (C, D) product of every other block, with the rows it
    serves filled and the rest zero. Most of its rows are zeros; its shape is what makes a
    node's bits those of a chain's row over the same keys, whose block takes the same product.
    p (N, Hk, nb, G*T, C) and vb (N, Hk, nb, C, D) as in ``invariant_attention``; returns
    o (P, Hk, G*T, D) and l (P, Hk, G*T); T the pass's rows."""
    Hk, R, C, D = p.shape[1], p.shape[3], p.shape[4], vb.shape[-1]
    a = p.new_zeros(plan.P, Hk, R, C)
    a.view(-1, C).index_copy_(0, plan.rows, p.reshape(-1).take(plan.p_at))
    values = vb.reshape(-1, D).index_select(0, plan.v_at).view(plan.P, Hk, C, D)
    return row_product(a, values, T), a.sum(-1)


def row_product(a: torch.Tensor, b: torch.Tensor, T: int) -> torch.Tensor:
    """a @ b, a (..., G*T, K) the rows g*T + t of the pass's T rows, b (..., K, M), with every
    row's bits independent of t, its place in the pass. A CPU's product need not give them:
    its kernel takes the rows in tiles, and rows left over after the last whole tile may go
    through another kernel that sums in another order (MKL's fp32 product on a CPU with AVX2
    only: the last 2 of 8 rows, or of 32). Where ``rows_stand_alone`` finds this product's
    rows independent of their place, one product; elsewhere T products, one per row t of the
    pass, each of its G query rows (g*T + t) at place g whatever t is."""
    if rows_stand_alone(a, b):
        return a @ b
    shape = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    out = torch.empty(shape, dtype=torch.result_type(a, b), device=a.device)
    for t in range(T):
        out[..., t::T, :] = a[..., t::T, :] @ b
    return out


_STAND_ALONE: dict = {}    # (product, rows, K, M, b transposed, dtype, device, threads) -> bool


def rows_stand_alone(a: torch.Tensor, b: torch.Tensor, product=torch.matmul) -> bool:
    """Are the rows of ``product(a, b)`` (a @ b) at these shapes the same bits wherever they sit
    among a's rows, on this CPU at this thread count? Asked once a shape: two batched products
    of a's row count of copies of one random row, every output row compared with the first. A
    kernel chooses its tiles from the shapes alone, so a row taken another way shows there."""
    R, K, M = a.shape[-2], a.shape[-1], b.shape[-1]
    flipped = b.stride(-2) == 1 and b.stride(-1) != 1                  # a transposed view
    key = (product, R, K, M, flipped, a.dtype, a.device.type, torch.get_num_threads())
    if key not in _STAND_ALONE:
        g = torch.Generator().manual_seed(R)

        def other():                       # b's shape, laid out as b is
            o = torch.randn(2, *((M, K) if flipped else (K, M)), generator=g).to(a.device, b.dtype)
            return o.transpose(-1, -2) if flipped else o
        _STAND_ALONE[key] = all(rows_alike(product(copies_of_a_row((2, R, K), a, g), other()))
                                for _ in range(2))
    return _STAND_ALONE[key]


def copies_of_a_row(shape: tuple, like: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """A tensor of ``shape`` (..., R, K) in ``like``'s dtype and device whose R rows are copies
    of one random row: what the probes of a product's rows multiply."""
    row = torch.randn(shape[-1], generator=g).to(like.device, like.dtype)
    return row.expand(shape).contiguous()


def rows_alike(out) -> bool:
    """Is every row of ``out`` (..., R, M), or of each tensor of a tuple of them, the same bits
    as its first?"""
    return all(bool((y == y[..., :1, :]).all())
               for y in (out if isinstance(out, (tuple, list)) else (out,)))


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
    0 at the next positions, each seeing everything before it (after a tree's 4-D mask too: a
    row that sees a prefix of the columns needs no gathered products, ``Seen.gathers``)."""
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
        full[..., T:, :] = torch.ones(pad, past + T + pad, dtype=torch.bool,
                                      device=ids.device).tril(past + T)
        mask = full if mask.dtype == torch.bool else torch.zeros(
            full.shape, dtype=mask.dtype, device=ids.device).masked_fill(
            ~full, torch.finfo(mask.dtype).min)
    return ids, pos, mask


@contextlib.contextmanager
def invariant(model):
    """transformers' forward of ``model`` with exact mode's attention, and each of its
    ``nn.Linear`` through ``each_row``, for the duration."""
    before = model.config._attn_implementation
    model.set_attn_implementation(register())
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    for m in linears:
        m.forward = functools.partial(each_row, type(m).forward.__get__(m), key=m)
    try:
        yield
    finally:
        model.set_attn_implementation(before)
        for m in linears:
            vars(m).pop("forward", None)


_ALONE = weakref.WeakKeyDictionary()    # a product -> {(rows, threads): its rows stand alone}


def each_row(product, x: torch.Tensor, key=None):
    """``product(x)`` (a projection: x (1, T, K) -> (1, T, M), or a tuple of such) with every
    row's bits independent of its place among the pass's T rows, as exact mode needs of the
    products that give every pass W rows (point 1 of the module's docstring): the product's own
    call where ``projection_rows_stand_alone``, else one call a row. key: what ``product`` is
    kept under (default: itself)."""
    if projection_rows_stand_alone(product, x, product if key is None else key):
        return product(x)
    T = x.shape[1]
    parts = [product(x[:, t:t + 1]) for t in range(T)]
    if isinstance(parts[0], (tuple, list)):
        return tuple(torch.cat(p, 1) for p in zip(*parts))
    return torch.cat(parts, 1)


def projection_rows_stand_alone(product, x: torch.Tensor, key) -> bool:
    """Are ``product``'s rows the same bits wherever they sit among x's T rows, on this CPU at
    this thread count? Found once a row count (a call on T copies of one random row, every
    output row compared with the first: a kernel tiles its rows by the shapes alone) and kept
    under ``key`` (weakly: a module, a projection)."""
    found = _ALONE.setdefault(key, {})
    T, at = x.shape[1], (x.shape[1], torch.get_num_threads())
    if at not in found:
        found[at] = rows_alike(product(copies_of_a_row(x.shape, x, torch.Generator().manual_seed(T))))
    return found[at]


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

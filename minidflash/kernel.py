r"""Block attention for the drafter, a Triton kernel that skips what no query sees (paper 4.2).

In training, all n blocks of a sequence are drafted in one pass (section 4.2). The queries are
the n*B slots of the blocks; the keys are ``[S context features ; the n*B block slots]``, and who
sees whom is the rule of :func:`minidflash.mask.visible`: block b sees the context keys before
its anchor and its own B slots, nothing else. At the paper's sizes (S = 3072, n = 512 anchors,
B = 16) a dense mask has n*B x (S + n*B) = 8192 x 11264 entries and only about one in seven is
True (each block sees S/2 context keys on average, plus its B own slots): a dense attention
spends most of its work on scores it then throws away.

Glossary (as everywhere in minidflash): N sequences, n blocks per sequence, B block size, S context
tokens, Hq / Hkv query / key-value heads (grouped-query attention), D head dim.

For one query :math:`q_i` and the keys it may see, :math:`\mathcal V(i)`,

.. math::
    s_{ij} = \sigma\, q_i k_j^\top, \qquad
    o_i = \sum_{j \in \mathcal V(i)} \frac{e^{s_{ij}}}{\ell_i} v_j, \qquad
    \ell_i = \sum_{j \in \mathcal V(i)} e^{s_{ij}}

with :math:`\sigma = 1/\sqrt D`. The kernel walks over tiles of keys and keeps the softmax
*online* (FlashAttention): a running maximum :math:`m_i`, a running sum :math:`\ell_i` and an
unnormalised output :math:`\tilde o_i`; a new tile of scores :math:`s_{ij}` updates them as

.. math::
    m_i' = \max(m_i, \max_j s_{ij}), \quad
    \ell_i' = e^{m_i - m_i'} \ell_i + \sum_j e^{s_{ij} - m_i'}, \quad
    \tilde o_i' = e^{m_i - m_i'} \tilde o_i + \sum_j e^{s_{ij} - m_i'} v_j

and at the end :math:`o_i = \tilde o_i / \ell_i`. The log-sum-exp :math:`L_i = m_i + \log \ell_i`
is saved: in the backward pass it gives back every probability :math:`p_{ij} = e^{s_{ij} - L_i}`
without a second softmax. The kernels work in base 2 (``exp2`` is the GPU's native exponential):
scores are multiplied by :math:`\sigma \log_2 e` and :math:`L_i` is stored in log2 units.

Backward (FlashAttention-2), with :math:`\Delta_i = \sum_d dO_{id} O_{id}`:

.. math::
    dV = P^\top dO, \quad dP = dO\, V^\top, \quad dS = P \circ (dP - \Delta), \quad
    dQ = \sigma\, dS\, K, \quad dK = \sigma\, dS^\top Q

One kernel walks over query tiles (forward, dQ), another over key tiles (dK, dV, summed over
the query heads that share a key-value head), so no two programs write the same output.

The tiling, and what is skipped
-------------------------------
The picture is :func:`tile_schedule` drawn for S = 10 context keys, n = 3 blocks of B = 4 slots
at anchors (6, 3, 10), query tiles of 8 slots and key tiles of 4 keys (gaps between key tiles).
``#`` a visible score, ``.`` a score computed and then masked (inside a visited tile), blank: a
tile that is never visited::

                                 context keys      block keys
                                 0    4    8    S    S+4  S+8
        q tile 0  b0 (anchor 6)  #### ##        #### ....
                                 #### ##        #### ....
                                 #### ##        #### ....
                                 #### ##        #### ....
                  b1 (anchor 3)  ###. ..        .... ####
                                 ###. ..        .... ####
                                 ###. ..        .... ####
                                 ###. ..        .... ####
        q tile 1  b2 (anchor 10) #### #### ##             ####
                                 #### #### ##             ####
                                 #### #### ##             ####
                                 #### #### ##             ####

For the query tile at slots [q0, q1) (blocks b_lo..b_hi) the keys walked are

* context ``[0, min(S, max anchor in the tile))``: beyond the largest anchor no row sees a
  context key;
* block keys ``[S + b_lo*B, S + (b_hi + 1)*B)``: the tile's own blocks; every other block's
  keys are skipped.

Inside those ranges :func:`visible` (compiled with ``triton.jit``) masks the scores. The work
therefore grows with the visible area, not with n*B x (S + n*B). For dK/dV a tile of block keys
is seen only by the query slots of its own blocks (a contiguous range), and a tile of context
keys starting at k0 only by query tiles whose largest anchor is above k0: those query tiles are
visited, the rest cost one scalar check each.

Tests: ``tests/test_kernel.py`` (kernel vs :func:`block_attention_reference`, outputs and
gradients, and the visited-tile counts). Timings on a GPU: ``python -m minidflash.bench_kernel``.
"""

from __future__ import annotations

import math
import types

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from .mask import block_mask, visible

# The visibility rule, compiled for use inside the kernels: the very code of mask.visible. Triton's
# interpreter wants triton.language among a jitted function's globals and mask.py does not import
# Triton (it must work without it), so the code object is given this module's globals.
_visible = triton.jit(types.FunctionType(visible.__code__, globals(), "visible"))


# ---------------------------------------------------------------------------------------------
# The readable reference
# ---------------------------------------------------------------------------------------------

def _dense_mask(anchors: torch.Tensor, num_context: int, block_size: int) -> torch.Tensor:
    """(N, 1, n*B, S + n*B) boolean mask, one :func:`block_mask` per sequence."""
    return torch.stack([block_mask(a, num_context, block_size) for a in anchors])[:, None]


def block_attention_reference(q, k, v, anchors, num_context, block_size, scale=None):
    """Masked attention in plain torch, computed in fp32 (or fp64): the ground truth for the kernel.

    q (N, Hq, n*B, D); k, v (N, Hkv, S + n*B, D); anchors (N, n). Returns (N, Hq, n*B, D) in
    q's dtype. Memory traffic per head: q, k, v and the output are read or written once
    ((2 n*B + 2 (S + n*B)) D numbers), but the scores are a full n*B x (S + n*B) matrix that is
    written and read back four times below, however little of it is visible. The kernel keeps
    each tile of scores on chip and never writes one.
    """
    N, Hq, nB, D = q.shape
    group = Hq // k.shape[1]
    scale = D ** -0.5 if scale is None else scale
    mask = _dense_mask(anchors, num_context, block_size)                # (N, 1, n*B, S+n*B)
    fp = torch.promote_types(q.dtype, torch.float32)                    # fp32, or fp64 if given
    k = k.to(fp).repeat_interleave(group, dim=1)                        # (N, Hq, S+n*B, D)
    v = v.to(fp).repeat_interleave(group, dim=1)                        # (N, Hq, S+n*B, D)
    scores = q.to(fp) @ k.mT * scale                                    # (N, Hq, n*B, S+n*B)
    scores = scores.masked_fill(~mask, float("-inf"))                   # read, written again
    p = torch.softmax(scores, dim=-1)                                   # read, written again
    p = torch.where(mask.any(-1, keepdim=True), p, 0.0)                 # a row that sees nothing: 0
    return (p @ v).to(q.dtype)                                          # read: (N, Hq, n*B, D)


def _sdpa(q, k, v, anchors, num_context, block_size, scale):
    """The stock baseline: torch's scaled_dot_product_attention with the dense boolean mask."""
    mask = _dense_mask(anchors, num_context, block_size)                # (N, 1, n*B, S+n*B)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale,
                                         enable_gqa=q.shape[1] != k.shape[1])
    return torch.where(mask.any(-1, keepdim=True), out, 0.0)            # rows that see nothing: 0


# ---------------------------------------------------------------------------------------------
# The kernels
# ---------------------------------------------------------------------------------------------

@triton.jit
def _load_rows(t_x, rows, n_rows, stride_row, D, TILE_D: tl.constexpr, UPCAST: tl.constexpr):
    """Rows ``rows`` of the (n_rows, D) matrix at ``t_x``: a (len(rows), TILE_D) tile, 0 outside."""
    dims = tl.arange(0, TILE_D)
    x = tl.load(t_x + rows[:, None] * stride_row + dims[None, :],
                mask=(rows[:, None] < n_rows) & (dims[None, :] < D), other=0.0)
    if UPCAST:  # the interpreter's fp16/bf16 tl.dot is not exact: do the products in fp32
        x = x.to(tl.float32)
    return x


@triton.jit
def _visible_key_ranges(anchor, q0, nB, S, B, TILE_Q: tl.constexpr):
    """The keys the query tile at slots [q0, q0 + TILE_Q) must walk: two half-open ranges.

    Context ``[0, ctx_hi)``, up to the largest anchor in the tile, and the tile's own blocks
    ``[blk_lo, blk_hi)``. ``anchor`` (TILE_Q,) holds the anchor of each row (0 for padding).
    """
    ctx_hi = tl.minimum(tl.max(anchor, 0), S)
    first_block = q0 // B
    last_block = (tl.minimum(q0 + TILE_Q, nB) - 1) // B
    return ctx_hi, S + first_block * B, S + (last_block + 1) * B


@triton.jit
def _forward_tile(acc, m_i, l_i, q, q_block, anchor, t_k, t_v, stride_km, stride_vm,
                  k0, k_hi, S, B, D, scale_log2e,
                  TILE_K: tl.constexpr, TILE_D: tl.constexpr, UPCAST: tl.constexpr,
                  PRECISION: tl.constexpr):
    """One online-softmax step: fold the keys [k0, min(k0 + TILE_K, k_hi)) into (acc, m_i, l_i)."""
    keys = k0 + tl.arange(0, TILE_K)                                      # (TILE_K,)
    k = _load_rows(t_k, keys, k_hi, stride_km, D, TILE_D, UPCAST)         # (TILE_K, TILE_D)
    v = _load_rows(t_v, keys, k_hi, stride_vm, D, TILE_D, UPCAST)         # (TILE_K, TILE_D)
    # s_ij = sigma q_i k_j^T, in log2 units
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale_log2e   # (TILE_Q, TILE_K)
    see = _visible(q_block[:, None], keys[None, :], anchor[:, None], S, B) & (keys[None, :] < k_hi)
    s = tl.where(see, s, float("-inf"))
    # m_i' = max(m_i, max_j s_ij); a row that has seen nothing yet keeps m = -inf, so use 0
    # as its reference point to get exp2(-inf) = 0 instead of exp2(-inf - -inf) = NaN
    m_new = tl.maximum(m_i, tl.max(s, 1))                                 # (TILE_Q,)
    m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.exp2(s - m_ref[:, None])                                       # (TILE_Q, TILE_K)
    alpha = tl.exp2(m_i - m_ref)                                          # rescales the old sums
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
    return acc, m_new, l_i


@triton.jit
def _forward_kernel(t_q, t_k, t_v, t_o, t_lse, t_anchors, t_tiles_visited,
                    stride_qn, stride_qh, stride_qm, stride_kn, stride_kh, stride_km,
                    stride_vn, stride_vh, stride_vm, stride_on, stride_oh, stride_om,
                    S, B, n, D, Hq, group, scale_log2e,
                    TILE_Q: tl.constexpr, TILE_K: tl.constexpr, TILE_D: tl.constexpr,
                    UPCAST: tl.constexpr, PRECISION: tl.constexpr, COUNT_TILES: tl.constexpr):
    """Program (query tile, sequence x query head): O and L for TILE_Q query slots.

    t_q (N, Hq, n*B, D), t_k / t_v (N, Hkv, S + n*B, D), t_o like t_q, t_lse (N, Hq, n*B) fp32,
    t_anchors (N, n) int32; ``group`` = Hq / Hkv query heads per key-value head.
    """
    q0 = tl.program_id(0) * TILE_Q
    seq = (tl.program_id(1) // Hq).to(tl.int64)
    h = tl.program_id(1) % Hq
    h_kv = h // group                                                     # GQA: the shared K/V head
    nB = n * B
    t_q += seq * stride_qn + h * stride_qh
    t_o += seq * stride_on + h * stride_oh
    t_k += seq * stride_kn + h_kv * stride_kh
    t_v += seq * stride_vn + h_kv * stride_vh
    t_lse += (seq * Hq + h) * nB

    rows = q0 + tl.arange(0, TILE_Q)                                      # query slots (TILE_Q,)
    q_block = rows // B                                                   # block of each slot
    anchor = tl.load(t_anchors + seq * n + q_block, mask=rows < nB, other=0)
    q = _load_rows(t_q, rows, nB, stride_qm, D, TILE_D, UPCAST)           # (TILE_Q, TILE_D)

    m_i = tl.full([TILE_Q], float("-inf"), tl.float32)                    # running max (log2)
    l_i = tl.zeros([TILE_Q], tl.float32)                                  # running sum
    acc = tl.zeros([TILE_Q, TILE_D], tl.float32)                          # unnormalised output
    ctx_hi, blk_lo, blk_hi = _visible_key_ranges(anchor, q0, nB, S, B, TILE_Q)
    for k0 in range(0, ctx_hi, TILE_K):                                   # context before anchors
        acc, m_i, l_i = _forward_tile(acc, m_i, l_i, q, q_block, anchor, t_k, t_v,
                                      stride_km, stride_vm, k0, ctx_hi, S, B, D, scale_log2e,
                                      TILE_K, TILE_D, UPCAST, PRECISION)
        if COUNT_TILES:
            tl.atomic_add(t_tiles_visited, 1)
    for k0 in range(blk_lo, blk_hi, TILE_K):                              # the tile's own blocks
        acc, m_i, l_i = _forward_tile(acc, m_i, l_i, q, q_block, anchor, t_k, t_v,
                                      stride_km, stride_vm, k0, blk_hi, S, B, D, scale_log2e,
                                      TILE_K, TILE_D, UPCAST, PRECISION)
        if COUNT_TILES:
            tl.atomic_add(t_tiles_visited, 1)

    # o_i = acc_i / l_i and L_i = m_i + log2 l_i; a row that saw nothing gets o = 0 and L = +inf
    # (so that every p_ij = 2^(s_ij - L_i) of the backward pass is 0 for it)
    seen = l_i > 0
    l_safe = tl.where(seen, l_i, 1.0)
    o = acc / l_safe[:, None]
    dims = tl.arange(0, TILE_D)
    tl.store(t_o + rows[:, None] * stride_om + dims[None, :], o.to(t_o.dtype.element_ty),
             mask=(rows[:, None] < nB) & (dims[None, :] < D))
    tl.store(t_lse + rows, tl.where(seen, m_i + tl.log2(l_safe), float("inf")), mask=rows < nB)


@triton.jit
def _dq_tile(dq, q, do, lse, delta, q_block, anchor, t_k, t_v, stride_km, stride_vm,
             k0, k_hi, S, B, D, scale_log2e,
             TILE_K: tl.constexpr, TILE_D: tl.constexpr, UPCAST: tl.constexpr,
             PRECISION: tl.constexpr):
    """dQ += dS K over the keys [k0, min(k0 + TILE_K, k_hi)) (sigma is applied by the caller)."""
    keys = k0 + tl.arange(0, TILE_K)
    k = _load_rows(t_k, keys, k_hi, stride_km, D, TILE_D, UPCAST)         # (TILE_K, TILE_D)
    v = _load_rows(t_v, keys, k_hi, stride_vm, D, TILE_D, UPCAST)
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale_log2e   # (TILE_Q, TILE_K)
    see = _visible(q_block[:, None], keys[None, :], anchor[:, None], S, B) & (keys[None, :] < k_hi)
    p = tl.where(see, tl.exp2(s - lse[:, None]), 0.0)                     # P, as in the forward
    dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)               # dP = dO V^T
    ds = p * (dp - delta[:, None])                                        # dS = P o (dP - Delta)
    return dq + tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)


@triton.jit
def _dq_kernel(t_q, t_k, t_v, t_do, t_lse, t_delta, t_dq, t_anchors, t_tiles_visited,
               stride_qn, stride_qh, stride_qm, stride_kn, stride_kh, stride_km,
               stride_vn, stride_vh, stride_vm, stride_don, stride_doh, stride_dom,
               stride_dqn, stride_dqh, stride_dqm,
               S, B, n, D, Hq, group, scale, scale_log2e,
               TILE_Q: tl.constexpr, TILE_K: tl.constexpr, TILE_D: tl.constexpr,
               UPCAST: tl.constexpr, PRECISION: tl.constexpr, COUNT_TILES: tl.constexpr):
    """Program (query tile, sequence x query head): dQ for TILE_Q query slots.

    Walks exactly the key tiles the forward walked. t_do like t_q; t_lse, t_delta (N, Hq, n*B).
    """
    q0 = tl.program_id(0) * TILE_Q
    seq = (tl.program_id(1) // Hq).to(tl.int64)
    h = tl.program_id(1) % Hq
    h_kv = h // group
    nB = n * B
    t_q += seq * stride_qn + h * stride_qh
    t_do += seq * stride_don + h * stride_doh
    t_dq += seq * stride_dqn + h * stride_dqh
    t_k += seq * stride_kn + h_kv * stride_kh
    t_v += seq * stride_vn + h_kv * stride_vh
    t_lse += (seq * Hq + h) * nB
    t_delta += (seq * Hq + h) * nB

    rows = q0 + tl.arange(0, TILE_Q)
    q_block = rows // B
    anchor = tl.load(t_anchors + seq * n + q_block, mask=rows < nB, other=0)
    q = _load_rows(t_q, rows, nB, stride_qm, D, TILE_D, UPCAST)           # (TILE_Q, TILE_D)
    do = _load_rows(t_do, rows, nB, stride_dom, D, TILE_D, UPCAST)        # (TILE_Q, TILE_D)
    lse = tl.load(t_lse + rows, mask=rows < nB, other=float("inf"))       # (TILE_Q,)
    delta = tl.load(t_delta + rows, mask=rows < nB, other=0.0)            # (TILE_Q,)

    dq = tl.zeros([TILE_Q, TILE_D], tl.float32)
    ctx_hi, blk_lo, blk_hi = _visible_key_ranges(anchor, q0, nB, S, B, TILE_Q)
    for k0 in range(0, ctx_hi, TILE_K):
        dq = _dq_tile(dq, q, do, lse, delta, q_block, anchor, t_k, t_v, stride_km, stride_vm,
                      k0, ctx_hi, S, B, D, scale_log2e, TILE_K, TILE_D, UPCAST, PRECISION)
        if COUNT_TILES:
            tl.atomic_add(t_tiles_visited, 1)
    for k0 in range(blk_lo, blk_hi, TILE_K):
        dq = _dq_tile(dq, q, do, lse, delta, q_block, anchor, t_k, t_v, stride_km, stride_vm,
                      k0, blk_hi, S, B, D, scale_log2e, TILE_K, TILE_D, UPCAST, PRECISION)
        if COUNT_TILES:
            tl.atomic_add(t_tiles_visited, 1)

    dims = tl.arange(0, TILE_D)
    dq = (dq * scale).to(t_dq.dtype.element_ty)                           # dQ = sigma dS K
    tl.store(t_dq + rows[:, None] * stride_dqm + dims[None, :], dq,
             mask=(rows[:, None] < nB) & (dims[None, :] < D))


@triton.jit
def _dkdv_tile(dk, dv, k, v, keys, k_hi, t_q, t_do, t_lse, t_delta, rows, anchor,
               stride_qm, stride_dom, nB, S, B, D, scale_log2e,
               TILE_D: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """dV += P^T dO and dK += dS^T Q for the query slots ``rows`` (sigma: applied by the caller)."""
    q = _load_rows(t_q, rows, nB, stride_qm, D, TILE_D, UPCAST)           # (TILE_Q, TILE_D)
    do = _load_rows(t_do, rows, nB, stride_dom, D, TILE_D, UPCAST)        # (TILE_Q, TILE_D)
    lse = tl.load(t_lse + rows, mask=rows < nB, other=float("inf"))       # (TILE_Q,)
    delta = tl.load(t_delta + rows, mask=rows < nB, other=0.0)            # (TILE_Q,)
    # rows are keys here, columns queries: S^T = K Q^T, so that P^T and dS^T come out as they
    # are needed for dV = P^T dO and dK = dS^T Q, without transposing a tile held in registers
    s_t = tl.dot(k, tl.trans(q), input_precision=PRECISION) * scale_log2e  # (TILE_K, TILE_Q)
    see_t = (_visible((rows // B)[None, :], keys[:, None], anchor[None, :], S, B)
             & (rows[None, :] < nB) & (keys[:, None] < k_hi))
    p_t = tl.where(see_t, tl.exp2(s_t - lse[None, :]), 0.0)               # P^T
    dv += tl.dot(p_t.to(do.dtype), do, input_precision=PRECISION)         # dV = P^T dO
    dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)             # dP^T = V dO^T
    # dS^T = P^T o (dP^T - Delta)
    ds_t = p_t * (dp_t - delta[None, :])                                  # (TILE_K, TILE_Q)
    dk += tl.dot(ds_t.to(q.dtype), q, input_precision=PRECISION)          # dK = dS^T Q
    return dk, dv


@triton.jit
def _dkdv_kernel(t_q, t_k, t_v, t_do, t_lse, t_delta, t_dk, t_dv, t_anchors, t_tiles_visited,
                 stride_qn, stride_qh, stride_qm, stride_kn, stride_kh, stride_km,
                 stride_vn, stride_vh, stride_vm, stride_don, stride_doh, stride_dom,
                 stride_dkn, stride_dkh, stride_dkm, stride_dvn, stride_dvh, stride_dvm,
                 S, B, n, D, Hq, Hkv, group, scale, scale_log2e,
                 TILE_Q: tl.constexpr, TILE_K: tl.constexpr, TILE_D: tl.constexpr,
                 UPCAST: tl.constexpr, PRECISION: tl.constexpr, COUNT_TILES: tl.constexpr):
    """Program (key tile, sequence x key-value head): dK and dV for TILE_K keys.

    Key tiles are numbered over the context first (cdiv(S, TILE_K) tiles), then over the block
    slots (cdiv(n*B, TILE_K) tiles), so that no tile mixes the two kinds of keys.
    """
    seq = (tl.program_id(1) // Hkv).to(tl.int64)
    h_kv = tl.program_id(1) % Hkv
    nB = n * B
    n_context_tiles = tl.cdiv(S, TILE_K)
    if tl.program_id(0) < n_context_tiles:  # context keys: any query slot may see them
        k0 = tl.program_id(0) * TILE_K
        k_hi = tl.minimum(k0 + TILE_K, S)
        q_lo = 0
        q_hi = nB
    else:  # block keys: seen by the slots of their own blocks only, a contiguous range
        k0 = S + (tl.program_id(0) - n_context_tiles) * TILE_K
        k_hi = tl.minimum(k0 + TILE_K, S + nB)
        q_lo = ((k0 - S) // B) * B
        q_hi = ((k_hi - 1 - S) // B + 1) * B
    t_k += seq * stride_kn + h_kv * stride_kh
    t_v += seq * stride_vn + h_kv * stride_vh
    t_dk += seq * stride_dkn + h_kv * stride_dkh
    t_dv += seq * stride_dvn + h_kv * stride_dvh
    t_anchors += seq * n

    keys = k0 + tl.arange(0, TILE_K)                                      # (TILE_K,)
    k = _load_rows(t_k, keys, k_hi, stride_km, D, TILE_D, UPCAST)         # (TILE_K, TILE_D)
    v = _load_rows(t_v, keys, k_hi, stride_vm, D, TILE_D, UPCAST)
    dk = tl.zeros([TILE_K, TILE_D], tl.float32)
    dv = tl.zeros([TILE_K, TILE_D], tl.float32)
    for g in range(group):                                                # query heads of this K/V
        h = h_kv * group + g
        t_q_h = t_q + seq * stride_qn + h * stride_qh
        t_do_h = t_do + seq * stride_don + h * stride_doh
        t_lse_h = t_lse + (seq * Hq + h) * nB
        t_delta_h = t_delta + (seq * Hq + h) * nB
        for q0 in range(q_lo, q_hi, TILE_Q):
            rows = q0 + tl.arange(0, TILE_Q)                              # query slots (TILE_Q,)
            anchor = tl.load(t_anchors + rows // B, mask=rows < nB, other=0)
            # the tile is skipped unless it sees a key here: a block key (the range above holds
            # only the keys' own blocks) or a context key below one of its anchors
            if (k0 >= S) | (tl.max(anchor, 0) > k0):
                dk, dv = _dkdv_tile(dk, dv, k, v, keys, k_hi, t_q_h, t_do_h, t_lse_h, t_delta_h,
                                    rows, anchor, stride_qm, stride_dom, nB, S, B, D, scale_log2e,
                                    TILE_D, UPCAST, PRECISION)
                if COUNT_TILES:
                    tl.atomic_add(t_tiles_visited, 1)

    dims = tl.arange(0, TILE_D)
    store_mask = (keys[:, None] < k_hi) & (dims[None, :] < D)
    tl.store(t_dk + keys[:, None] * stride_dkm + dims[None, :],
             (dk * scale).to(t_dk.dtype.element_ty), mask=store_mask)
    tl.store(t_dv + keys[:, None] * stride_dvm + dims[None, :],
             dv.to(t_dv.dtype.element_ty), mask=store_mask)


# ---------------------------------------------------------------------------------------------
# Launching
# ---------------------------------------------------------------------------------------------

def _interpreting() -> bool:
    """True when Triton runs the kernels in its CPU interpreter (TRITON_INTERPRET=1 at import)."""
    return type(_forward_kernel).__name__ == "InterpretedFunction"


def _config(kernel: str, q: torch.Tensor, tiles=None) -> dict:
    """TILE_Q, TILE_K and launch options of "forward", "dq" or "dkdv"; ``tiles`` overrides sizes.

    Fixed, not autotuned: for bf16/fp16 with D = 64 and 128 these compile for sm_90 (H100, H200)
    with no or only a few bytes of register spills. fp32 is for checking, not for speed.
    """
    D = q.shape[-1]
    if _interpreting():  # few, large tiles: the interpreter pays per operation, not per element
        sizes = (32, 32, 4, 1)
    elif q.dtype == torch.float32:
        sizes = (32, 32, 8, 1)
    elif D <= 64:
        sizes = {"forward": (128, 64, 4, 3), "dq": (64, 64, 4, 3), "dkdv": (32, 64, 4, 2)}[kernel]
    elif D <= 128:
        sizes = {"forward": (128, 64, 8, 3), "dq": (64, 64, 8, 3), "dkdv": (64, 64, 8, 2)}[kernel]
    else:
        sizes = (32, 32, 8, 1)
    TILE_Q, TILE_K, num_warps, num_stages = sizes
    TILE_Q = min(TILE_Q, max(16, triton.next_power_of_2(q.shape[2])))  # inference: 16 queries
    if tiles is not None:
        TILE_Q, TILE_K = tiles
    return dict(TILE_Q=TILE_Q, TILE_K=TILE_K,
                TILE_D=max(16, triton.next_power_of_2(D)),            # tl.dot needs >= 16
                UPCAST=_interpreting(),
                PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
                num_warps=num_warps, num_stages=num_stages)


def _row_major(x: torch.Tensor) -> torch.Tensor:
    """The kernels index (N, H, L, D) tensors by strides but need the last dim contiguous."""
    return x if x.stride(-1) == 1 else x.contiguous()


def _forward(q, k, v, anchors, S, B, scale, tiles=None, tiles_visited=None):
    """o (N, Hq, n*B, D) in q's dtype and lse (N, Hq, n*B) fp32 in log2 units."""
    N, Hq, nB, D = q.shape
    Hkv, n = k.shape[1], anchors.shape[1]
    o = torch.empty_like(q)
    lse = torch.empty((N, Hq, nB), device=q.device, dtype=torch.float32)
    options = _config("forward", q, tiles)
    counting = tiles_visited is not None
    grid = (triton.cdiv(nB, options["TILE_Q"]), N * Hq)
    _forward_kernel[grid](
        q, k, v, o, lse, anchors, tiles_visited if counting else lse,
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3],
        S, B, n, D, Hq, Hq // Hkv, scale * math.log2(math.e),
        COUNT_TILES=counting, **options)
    return o, lse


def _backward(do, q, k, v, o, lse, anchors, S, B, scale, tiles=None, tiles_visited=None):
    """dq, dk, dv for the loss gradient ``do`` (N, Hq, n*B, D); tiles_visited: two counters."""
    N, Hq, nB, D = q.shape
    Hkv, n = k.shape[1], anchors.shape[1]
    do = _row_major(do)
    delta = (do.float() * o.float()).sum(-1)                              # (N, Hq, n*B): Delta_i
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    counting = tiles_visited is not None
    counters = (tiles_visited[0:1], tiles_visited[1:2]) if counting else (lse, lse)
    scale_log2e = scale * math.log2(math.e)

    options = _config("dq", q, tiles)
    grid = (triton.cdiv(nB, options["TILE_Q"]), N * Hq)
    _dq_kernel[grid](
        q, k, v, do, lse, delta, dq, anchors, counters[0],
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3], *dq.stride()[:3],
        S, B, n, D, Hq, Hq // Hkv, scale, scale_log2e,
        COUNT_TILES=counting, **options)

    options = _config("dkdv", q, tiles)
    grid = (triton.cdiv(S, options["TILE_K"]) + triton.cdiv(nB, options["TILE_K"]), N * Hkv)
    _dkdv_kernel[grid](
        q, k, v, do, lse, delta, dk, dv, anchors, counters[1],
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3],
        *dk.stride()[:3], *dv.stride()[:3],
        S, B, n, D, Hq, Hkv, Hq // Hkv, scale, scale_log2e,
        COUNT_TILES=counting, **options)
    return dq, dk, dv


class _BlockAttention(torch.autograd.Function):
    """Forward and backward through the Triton kernels; saves q, k, v, o and L (not P)."""

    @staticmethod
    def forward(ctx, q, k, v, anchors, num_context, block_size, scale, tiles):
        o, lse = _forward(q, k, v, anchors, num_context, block_size, scale, tiles)
        ctx.save_for_backward(q, k, v, o, lse, anchors)
        ctx.args = (num_context, block_size, scale, tiles)
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse, anchors = ctx.saved_tensors
        dq, dk, dv = _backward(do, q, k, v, o, lse, anchors, *ctx.args)
        return dq, dk, dv, None, None, None, None, None


def _check(q, k, v, anchors, num_context, block_size):
    N, Hq, nB, D = q.shape
    if k.shape != v.shape or k.shape[0] != N or k.shape[-1] != D:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must be (N, Hkv, S + n*B, D) "
                         f"for q {tuple(q.shape)}")
    if Hq % k.shape[1]:
        raise ValueError(f"{Hq} query heads are not a multiple of {k.shape[1]} key-value heads")
    if anchors.shape != (N, nB // block_size) or nB % block_size:
        raise ValueError(f"anchors {tuple(anchors.shape)} must be (N, n), n*B = {nB} query slots")
    if k.shape[2] != num_context + nB:
        raise ValueError(f"{k.shape[2]} keys, expected S + n*B = {num_context} + {nB}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}")


def block_attention(q, k, v, anchors, num_context, block_size, scale=None, backend="triton", *,
                    tiles=None):
    """Attention of n blocks of queries over [S context keys ; the n blocks], rule of mask.visible.

    q (N, Hq, n*B, D): the slots of the n blocks; k, v (N, Hkv, S + n*B, D); anchors (N, n) the
    anchor position of each block (inference: n = 1, anchor = S). Hq must be a multiple of Hkv.
    Returns (N, Hq, n*B, D) in q's dtype; differentiable in q, k, v. q, k, v share one dtype
    and device and may be strided views (e.g. (N, L, H, D) transposed to (N, H, L, D)); only a
    tensor whose last dim is not contiguous is copied. Anchors are expected in [0, S].

    backend "triton": the kernels above (on a CPU only under TRITON_INTERPRET=1, set before
    this module is imported); "sdpa": torch's scaled_dot_product_attention with a dense mask.
    ``tiles`` = (TILE_Q, TILE_K), powers of two >= 16, overrides the kernels' tile sizes.
    """
    _check(q, k, v, anchors, num_context, block_size)
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    if backend == "sdpa":
        return _sdpa(q, k, v, anchors, num_context, block_size, scale)
    if backend != "triton":
        raise ValueError(f"backend {backend!r} is not 'triton' or 'sdpa'")
    if q.device.type == "cpu" and not _interpreting():
        raise RuntimeError("the Triton kernels need a GPU, or TRITON_INTERPRET=1 set before "
                           "minidflash.kernel is imported; or use backend='sdpa'")
    anchors = anchors.to(device=q.device, dtype=torch.int32).contiguous()
    return _BlockAttention.apply(_row_major(q), _row_major(k), _row_major(v), anchors,
                                 num_context, block_size, scale, tiles)


# ---------------------------------------------------------------------------------------------
# Which tiles are visited
# ---------------------------------------------------------------------------------------------

def tile_schedule(anchors, num_context: int, block_size: int, tile_q: int, tile_k: int) -> dict:
    """The (query range, key range) tiles the kernels compute for ONE sequence and ONE head.

    anchors: the n anchors of the sequence (list or 1-d tensor). Returns ``{"by_query": [...],
    "by_key": [...]}``, lists of ``(q0, q1, k0, k1)`` half-open slot and key ranges: "by_query"
    is what the forward and the dQ kernel walk, "by_key" what the dK/dV kernel walks. Plain
    Python, the same arithmetic as the kernels, for tests and pictures.
    """
    anchors = [int(a) for a in anchors]
    S, B, nB = num_context, block_size, len(anchors) * block_size
    by_query, by_key = [], []
    for q0 in range(0, nB, tile_q):                                      # forward / dQ
        q1 = min(q0 + tile_q, nB)
        ctx_hi = min(max(anchors[q0 // B:(q1 - 1) // B + 1]), S)
        blk_lo, blk_hi = S + (q0 // B) * B, S + ((q1 - 1) // B + 1) * B
        by_query += [(q0, q1, k0, min(k0 + tile_k, ctx_hi)) for k0 in range(0, ctx_hi, tile_k)]
        by_query += [(q0, q1, k0, min(k0 + tile_k, blk_hi)) for k0 in range(blk_lo, blk_hi, tile_k)]
    for k0 in range(0, S, tile_k):                                        # dK/dV, context keys
        k1 = min(k0 + tile_k, S)
        for q0 in range(0, nB, tile_q):
            q1 = min(q0 + tile_q, nB)
            if max(anchors[q0 // B:(q1 - 1) // B + 1]) > k0:
                by_key.append((q0, q1, k0, k1))
    for k0 in range(S, S + nB, tile_k):                                   # dK/dV, block keys
        k1 = min(k0 + tile_k, S + nB)
        q_lo, q_hi = ((k0 - S) // B) * B, ((k1 - 1 - S) // B + 1) * B
        by_key += [(q0, min(q0 + tile_q, nB), k0, k1) for q0 in range(q_lo, q_hi, tile_q)]
    return {"by_query": by_query, "by_key": by_key}


def count_visited_tiles(q, k, v, anchors, num_context, block_size, tiles=None) -> dict:
    """Run the three kernels with their tile counters on; how many tiles each one computed.

    Returns {"forward": ..., "dq": ..., "dkdv": ...}, summed over sequences and query heads.
    """
    _check(q, k, v, anchors, num_context, block_size)
    scale = q.shape[-1] ** -0.5
    q, k, v = _row_major(q), _row_major(k), _row_major(v)
    anchors = anchors.to(device=q.device, dtype=torch.int32).contiguous()
    counters = torch.zeros(3, dtype=torch.int32, device=q.device)
    o, lse = _forward(q, k, v, anchors, num_context, block_size, scale, tiles, counters[0:1])
    _backward(torch.ones_like(o), q, k, v, o, lse, anchors, num_context, block_size, scale,
              tiles, counters[1:3])
    forward, dq, dkdv = counters.tolist()
    return {"forward": forward, "dq": dq, "dkdv": dkdv}

r"""Paper section 4.2: the drafter's block attention, a Triton kernel that skips what no query sees.

In training all n blocks of a sequence are drafted in one pass: the queries are the n*B block
slots, the keys ``[S context features ; the n*B block slots]``, and who sees whom is the rule of
:func:`minidflash.core.mask.visible`: block b sees the context keys before its anchor and its own B
slots, nothing else. At the paper's sizes (S = 3072, n = 512, B = 16) only about one in seven of
the n*B x (S + n*B) = 8192 x 11264 scores is visible: a dense attention spends most of its work
on scores it then throws away. (The switch between this kernel and torch SDPA: attention.py.)

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
is saved: in the backward pass it gives back every :math:`p_{ij} = e^{s_{ij} - L_i}` without a
second softmax. The kernels work in base 2 (``exp2`` is the GPU's native exponential): scores
are multiplied by :math:`\sigma \log_2 e` and :math:`L_i` is stored in log2 units.

Backward (FlashAttention-2), with :math:`\Delta_i = \sum_d dO_{id} O_{id}`:

.. math::
    dV = P^\top dO, \quad dP = dO\, V^\top, \quad dS = P \circ (dP - \Delta), \quad
    dQ = \sigma\, dS\, K, \quad dK = \sigma\, dS^\top Q

One kernel walks over query tiles (forward, dQ), another over key tiles (dK, dV, summed over
the query heads that share a key-value head), so no two programs write the same output.

The tiling, and what is skipped
-------------------------------
:func:`tile_schedule` drawn for S = 10 context keys, n = 3 blocks of B = 4 slots at anchors
(6, 3, 10), query tiles of 8 slots and key tiles of 4 keys (gaps between key tiles). ``#`` a
visible score, ``.`` a score computed then masked (in a visited tile), blank: never visited::

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

A query tile at slots [q0, q1) (blocks b_lo..b_hi) walks the context ``[0, min(S, max anchor
in the tile))`` (no row sees a context key beyond it), then its own blocks' keys
``[S + b_lo*B, S + (b_hi + 1)*B)``; inside those ranges :func:`visible` masks the scores, so
the work grows with the visible area, not with n*B x (S + n*B). For dK/dV a tile of block keys
is seen only by the slots of its own blocks (a contiguous range), and a tile of context keys
starting at k0 only by the query tiles whose largest anchor is above k0: the others cost one
scalar check each.

Tests: ``tests/test_kernel.py``. Timings on a GPU: ``python -m minidflash bench-kernel``.
"""

from __future__ import annotations

import math
import types

import torch
from einops import einsum, rearrange

try:
    import triton
    import triton.language as tl
except ImportError as e:   # no Triton wheel for macOS or Windows: only this module needs it
    raise ImportError("minidflash.core.kernel needs Triton, which has Linux wheels only "
                      "(pip install triton==3.9.0). Everything else runs without it: the "
                      "drafter's attention then uses torch SDPA (minidflash.attention).") from e

from .mask import dense_mask, visible

# The visibility rule, compiled for use inside the kernels: the very code of mask.visible. Triton's
# interpreter wants triton.language among a jitted function's globals and mask.py does not import
# Triton (it must work without it), so the code object is given this module's globals.
_visible = triton.jit(types.FunctionType(visible.__code__, globals(), "visible"))


def block_attention_reference(q, k, v, anchors, num_context, block_size, scale=None):
    """Masked attention in plain torch, computed in fp32 (or fp64): the ground truth for the kernel.

    q (N, Hq, n*B, D); k, v (N, Hkv, S + n*B, D); anchors (N, n). Returns (N, Hq, n*B, D) in
    q's dtype. Unlike the kernel, which keeps each tile of scores on chip, it writes the full
    n*B x (S + n*B) score matrix and reads it back four times, however little of it is visible.
    """
    group = q.shape[1] // k.shape[1]                                    # query heads per kv head
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    mask = dense_mask(anchors, num_context, block_size)[:, :, None]     # (N, 1, 1, n*B, S+n*B)
    fp = torch.promote_types(q.dtype, torch.float32)                    # fp32, or fp64 if given
    qg = rearrange(q.to(fp), "N (Hkv g) L D -> N Hkv g L D", g=group)   # heads by the kv head read
    scores = einsum(qg, k.to(fp), "N Hkv g L D, N Hkv S D -> N Hkv g L S") * scale
    scores = scores.masked_fill(~mask, float("-inf"))                   # read, written again
    p = torch.softmax(scores, dim=-1)                                   # read, written again
    p = torch.where(mask.any(-1, keepdim=True), p, 0.0)                 # a row that sees nothing: 0
    out = einsum(p, v.to(fp), "N Hkv g L S, N Hkv S D -> N Hkv g L D")  # read: (n*B, S+n*B) each
    return rearrange(out, "N Hkv g L D -> N (Hkv g) L D").to(q.dtype)   # (N, Hq, n*B, D)


# --- The kernels: pointers t_x, with stride_x the strides of x's first three dims -----------

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
def _store_rows(t_x, x, rows, n_rows, stride_row, D, TILE_D: tl.constexpr):
    """Writes the tile ``x``, in t_x's dtype, to rows ``rows`` of the (n_rows, D) matrix at t_x."""
    dims = tl.arange(0, TILE_D)
    tl.store(t_x + rows[:, None] * stride_row + dims[None, :], x.to(t_x.dtype.element_ty),
             mask=(rows[:, None] < n_rows) & (dims[None, :] < D))


@triton.jit
def _head(t_x, stride_x, seq, head):
    """The (L, D) matrix of sequence ``seq`` and head ``head`` in the (N, H, L, D) tensor at t_x."""
    return t_x + seq * stride_x[0] + head * stride_x[1]


@triton.jit
def _query_program(t_q, t_k, t_v, t_anchors, stride_q, stride_k, stride_v, S, B, n, Hq, group,
                   TILE_Q: tl.constexpr, TILE_K: tl.constexpr):
    """Set-up of a program (query tile, sequence x query head) of the forward or dQ kernel:
    sequence ``seq``, head ``h``, t_q / t_k / t_v moved to its (GQA: shared) heads, query slots
    ``rows``, their ``q_block`` and ``anchor`` (0 for padding), and the keys to walk: context
    ``[0, ctx_hi)`` up to the tile's largest anchor, then its blocks ``[blk_lo, blk_hi)``."""
    q0 = tl.program_id(0) * TILE_Q
    seq = (tl.program_id(1) // Hq).to(tl.int64)
    h = tl.program_id(1) % Hq
    nB = n * B
    rows = q0 + tl.arange(0, TILE_Q)                                      # query slots (TILE_Q,)
    q_block = rows // B                                                   # block of each slot
    anchor = tl.load(t_anchors + seq * n + q_block, mask=rows < nB, other=0)
    ctx_hi = tl.minimum(tl.max(anchor, 0), S)
    blk_lo = S + (q0 // B) * B
    blk_hi = S + ((tl.minimum(q0 + TILE_Q, nB) - 1) // B + 1) * B
    n_tiles = tl.cdiv(ctx_hi, TILE_K) + tl.cdiv(blk_hi - blk_lo, TILE_K)
    return (seq, h, _head(t_q, stride_q, seq, h), _head(t_k, stride_k, seq, h // group),
            _head(t_v, stride_v, seq, h // group), rows, q_block, anchor, ctx_hi, blk_lo, blk_hi,
            n_tiles)


@triton.jit
def _key_tile(i, ctx_hi, blk_lo, blk_hi, TILE_K: tl.constexpr):
    """Key tile ``i`` of a query tile's walk, context tiles first: its keys and their end."""
    n_context_tiles = tl.cdiv(ctx_hi, TILE_K)
    in_context = i < n_context_tiles
    k0 = tl.where(in_context, i * TILE_K, blk_lo + (i - n_context_tiles) * TILE_K)
    return k0 + tl.arange(0, TILE_K), tl.where(in_context, ctx_hi, blk_hi)


@triton.jit
def _forward_kernel(t_q, t_k, t_v, t_o, t_lse, t_anchors, t_tiles_visited,
                    stride_q, stride_k, stride_v, stride_o, S, B, n, D, Hq, group, scale_log2e,
                    TILE_Q: tl.constexpr, TILE_K: tl.constexpr, TILE_D: tl.constexpr,
                    UPCAST: tl.constexpr, PRECISION: tl.constexpr, COUNT_TILES: tl.constexpr):
    """Program (query tile, sequence x query head): O and L for TILE_Q query slots. t_q, t_o
    (N, Hq, n*B, D); t_k, t_v (N, Hkv, S + n*B, D); t_lse (N, Hq, n*B) fp32; t_anchors (N, n)
    int32; ``group`` = Hq / Hkv query heads per key-value head."""
    seq, h, t_q, t_k, t_v, rows, q_block, anchor, ctx_hi, blk_lo, blk_hi, n_tiles = \
        _query_program(t_q, t_k, t_v, t_anchors, stride_q, stride_k, stride_v, S, B, n, Hq,
                       group, TILE_Q, TILE_K)
    nB = n * B
    q = _load_rows(t_q, rows, nB, stride_q[2], D, TILE_D, UPCAST)         # (TILE_Q, TILE_D)
    m_i = tl.full([TILE_Q], float("-inf"), tl.float32)                    # running max (log2)
    l_i = tl.zeros([TILE_Q], tl.float32)                                  # running sum
    acc = tl.zeros([TILE_Q, TILE_D], tl.float32)                          # unnormalised output
    for i in range(0, n_tiles):                                           # online softmax steps
        keys, k_hi = _key_tile(i, ctx_hi, blk_lo, blk_hi, TILE_K)         # (TILE_K,)
        k = _load_rows(t_k, keys, k_hi, stride_k[2], D, TILE_D, UPCAST)   # (TILE_K, TILE_D)
        v = _load_rows(t_v, keys, k_hi, stride_v[2], D, TILE_D, UPCAST)   # (TILE_K, TILE_D)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale_log2e  # s_ij, log2 units
        see = _visible(q_block[:, None], keys[None, :], anchor[:, None], S, B) & (keys < k_hi)
        s = tl.where(see, s, float("-inf"))                               # (TILE_Q, TILE_K)
        # m_i' = max(m_i, max_j s_ij); a row that has seen nothing yet keeps m = -inf, so use 0
        # as its reference point to get exp2(-inf) = 0 instead of exp2(-inf - -inf) = NaN
        m_new = tl.maximum(m_i, tl.max(s, 1))                             # (TILE_Q,)
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_ref[:, None])                                   # (TILE_Q, TILE_K)
        alpha = tl.exp2(m_i - m_ref)                                      # rescales the old sums
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new
        if COUNT_TILES:
            tl.atomic_add(t_tiles_visited, 1)
    # o_i = acc_i / l_i and L_i = m_i + log2 l_i; a row that saw nothing gets o = 0 and L = +inf
    # (so that every p_ij = 2^(s_ij - L_i) of the backward pass is 0 for it)
    seen = l_i > 0
    l_safe = tl.where(seen, l_i, 1.0)
    _store_rows(_head(t_o, stride_o, seq, h), acc / l_safe[:, None], rows, nB, stride_o[2], D,
                TILE_D)
    tl.store(t_lse + (seq * Hq + h) * nB + rows,
             tl.where(seen, m_i + tl.log2(l_safe), float("inf")), mask=rows < nB)


@triton.jit
def _dq_kernel(t_q, t_k, t_v, t_do, t_lse, t_delta, t_dq, t_anchors, t_tiles_visited,
               stride_q, stride_k, stride_v, stride_do, stride_dq,
               S, B, n, D, Hq, group, scale, scale_log2e,
               TILE_Q: tl.constexpr, TILE_K: tl.constexpr, TILE_D: tl.constexpr,
               UPCAST: tl.constexpr, PRECISION: tl.constexpr, COUNT_TILES: tl.constexpr):
    """Program (query tile, sequence x query head): dQ for TILE_Q query slots, walking exactly
    the key tiles the forward walked. t_do, t_dq like t_q; t_lse, t_delta (N, Hq, n*B)."""
    seq, h, t_q, t_k, t_v, rows, q_block, anchor, ctx_hi, blk_lo, blk_hi, n_tiles = \
        _query_program(t_q, t_k, t_v, t_anchors, stride_q, stride_k, stride_v, S, B, n, Hq,
                       group, TILE_Q, TILE_K)
    nB = n * B
    q = _load_rows(t_q, rows, nB, stride_q[2], D, TILE_D, UPCAST)         # (TILE_Q, TILE_D)
    do = _load_rows(_head(t_do, stride_do, seq, h), rows, nB, stride_do[2], D, TILE_D, UPCAST)
    lse = tl.load(t_lse + (seq * Hq + h) * nB + rows, mask=rows < nB, other=float("inf"))
    delta = tl.load(t_delta + (seq * Hq + h) * nB + rows, mask=rows < nB, other=0.0)
    dq = tl.zeros([TILE_Q, TILE_D], tl.float32)
    for i in range(0, n_tiles):
        keys, k_hi = _key_tile(i, ctx_hi, blk_lo, blk_hi, TILE_K)
        k = _load_rows(t_k, keys, k_hi, stride_k[2], D, TILE_D, UPCAST)   # (TILE_K, TILE_D)
        v = _load_rows(t_v, keys, k_hi, stride_v[2], D, TILE_D, UPCAST)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale_log2e  # (TILE_Q, TILE_K)
        see = _visible(q_block[:, None], keys[None, :], anchor[:, None], S, B) & (keys < k_hi)
        p = tl.where(see, tl.exp2(s - lse[:, None]), 0.0)                 # P, as in the forward
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)           # dP = dO V^T
        ds = p * (dp - delta[:, None])                                    # dS = P o (dP - Delta)
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)        # dQ = sigma dS K
        if COUNT_TILES:
            tl.atomic_add(t_tiles_visited, 1)
    _store_rows(_head(t_dq, stride_dq, seq, h), dq * scale, rows, nB, stride_dq[2], D, TILE_D)


@triton.jit
def _dkdv_kernel(t_q, t_k, t_v, t_do, t_lse, t_delta, t_dk, t_dv, t_anchors, t_tiles_visited,
                 stride_q, stride_k, stride_v, stride_do, stride_dk, stride_dv,
                 S, B, n, D, Hq, Hkv, group, scale, scale_log2e,
                 TILE_Q: tl.constexpr, TILE_K: tl.constexpr, TILE_D: tl.constexpr,
                 UPCAST: tl.constexpr, PRECISION: tl.constexpr, COUNT_TILES: tl.constexpr):
    """Program (key tile, sequence x key-value head): dK and dV for TILE_K keys. Key tiles are
    numbered over the context first (cdiv(S, TILE_K) tiles), then over the block slots
    (cdiv(n*B, TILE_K) tiles), so that no tile mixes the two kinds of keys."""
    seq = (tl.program_id(1) // Hkv).to(tl.int64)
    h_kv = tl.program_id(1) % Hkv
    nB = n * B
    n_context_tiles = tl.cdiv(S, TILE_K)
    if tl.program_id(0) < n_context_tiles:  # context keys: any query slot may see them
        k0 = tl.program_id(0) * TILE_K
        k_hi, q_lo, q_hi = tl.minimum(k0 + TILE_K, S), 0, nB
    else:  # block keys: seen by the slots of their own blocks only, a contiguous range
        k0 = S + (tl.program_id(0) - n_context_tiles) * TILE_K
        k_hi = tl.minimum(k0 + TILE_K, S + nB)
        q_lo, q_hi = ((k0 - S) // B) * B, ((k_hi - 1 - S) // B + 1) * B
    keys = k0 + tl.arange(0, TILE_K)                                      # (TILE_K,)
    k = _load_rows(_head(t_k, stride_k, seq, h_kv), keys, k_hi, stride_k[2], D, TILE_D, UPCAST)
    v = _load_rows(_head(t_v, stride_v, seq, h_kv), keys, k_hi, stride_v[2], D, TILE_D, UPCAST)
    dk, dv = tl.zeros([TILE_K, TILE_D], tl.float32), tl.zeros([TILE_K, TILE_D], tl.float32)
    for g in range(group):                                                # query heads of this K/V
        h = h_kv * group + g
        t_q_h, t_do_h = _head(t_q, stride_q, seq, h), _head(t_do, stride_do, seq, h)
        t_lse_h, t_delta_h = t_lse + (seq * Hq + h) * nB, t_delta + (seq * Hq + h) * nB
        for q0 in range(q_lo, q_hi, TILE_Q):
            rows = q0 + tl.arange(0, TILE_Q)                              # query slots (TILE_Q,)
            anchor = tl.load(t_anchors + seq * n + rows // B, mask=rows < nB, other=0)
            # the tile is skipped unless it sees a key here: a block key (the range above holds
            # only the keys' own blocks) or a context key below one of its anchors
            if (k0 >= S) | (tl.max(anchor, 0) > k0):
                q = _load_rows(t_q_h, rows, nB, stride_q[2], D, TILE_D, UPCAST)   # (TILE_Q, TILE_D)
                do = _load_rows(t_do_h, rows, nB, stride_do[2], D, TILE_D, UPCAST)
                lse = tl.load(t_lse_h + rows, mask=rows < nB, other=float("inf"))   # (TILE_Q,)
                delta = tl.load(t_delta_h + rows, mask=rows < nB, other=0.0)        # (TILE_Q,)
                # rows are keys here, columns queries: S^T = K Q^T, so that P^T and dS^T come
                # out as needed for dV = P^T dO and dK = dS^T Q, with no transpose in registers
                s_t = tl.dot(k, tl.trans(q), input_precision=PRECISION) * scale_log2e
                see_t = (_visible((rows // B)[None, :], keys[:, None], anchor[None, :], S, B)
                         & (rows[None, :] < nB) & (keys[:, None] < k_hi))
                p_t = tl.where(see_t, tl.exp2(s_t - lse[None, :]), 0.0)   # P^T (TILE_K, TILE_Q)
                dv += tl.dot(p_t.to(do.dtype), do, input_precision=PRECISION)  # dV = P^T dO
                dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)      # dP^T = V dO^T
                ds_t = p_t * (dp_t - delta[None, :])                      # P^T o (dP^T - Delta)
                dk += tl.dot(ds_t.to(q.dtype), q, input_precision=PRECISION)   # dK = dS^T Q
                if COUNT_TILES:
                    tl.atomic_add(t_tiles_visited, 1)
    _store_rows(_head(t_dk, stride_dk, seq, h_kv), dk * scale, keys, k_hi, stride_dk[2], D, TILE_D)
    _store_rows(_head(t_dv, stride_dv, seq, h_kv), dv, keys, k_hi, stride_dv[2], D, TILE_D)


# --- Launching --------------------------------------------------------------------------------

def _interpreting() -> bool:
    """True when Triton runs the kernels in its CPU interpreter (TRITON_INTERPRET=1 at import)."""
    return type(_forward_kernel).__name__ == "InterpretedFunction"


def _config(kernel: str, q: torch.Tensor, tiles=None) -> dict:
    """TILE_Q, TILE_K and launch options of "forward", "dq" or "dkdv"; ``tiles`` overrides sizes.
    Fixed, not autotuned, for bf16/fp16 with D = 64 and 128 on sm_90 (H100, H200); fp32 is for
    checking, not for speed."""
    D = q.shape[-1]
    if _interpreting():  # few, large tiles: the interpreter pays per operation, not per element
        sizes = (32, 32, 4, 1)
    elif q.dtype == torch.float32 or D > 128:
        sizes = (32, 32, 8, 1)
    elif D <= 64:
        sizes = {"forward": (128, 64, 4, 3), "dq": (64, 64, 4, 3), "dkdv": (32, 64, 4, 2)}[kernel]
    else:
        sizes = {"forward": (128, 64, 8, 3), "dq": (64, 64, 8, 3), "dkdv": (64, 64, 8, 2)}[kernel]
    TILE_Q, TILE_K, num_warps, num_stages = sizes
    TILE_Q = min(TILE_Q, max(16, triton.next_power_of_2(q.shape[2])))  # inference: 16 queries
    if tiles is not None:
        TILE_Q, TILE_K = tiles
    return dict(TILE_Q=TILE_Q, TILE_K=TILE_K, TILE_D=max(16, triton.next_power_of_2(D)),  # >= 16
                UPCAST=_interpreting(), PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
                num_warps=num_warps, num_stages=num_stages)


def _row_major(x: torch.Tensor) -> torch.Tensor:
    """The kernels index (N, H, L, D) tensors by strides but need the last dim contiguous."""
    return x if x.stride(-1) == 1 else x.contiguous()


def _strides(*tensors) -> list:
    """The kernels' ``stride_x`` of each (N, H, L, D) tensor x: the strides of its first 3 dims."""
    return [x.stride()[:3] for x in tensors]


def _forward(q, k, v, anchors, S, B, scale, tiles=None, tiles_visited=None):
    """o (N, Hq, n*B, D) in q's dtype and lse (N, Hq, n*B) fp32 in log2 units."""
    N, Hq, nB, D = q.shape
    o = torch.empty_like(q)
    lse = torch.empty((N, Hq, nB), device=q.device, dtype=torch.float32)
    options = _config("forward", q, tiles)
    _forward_kernel[(triton.cdiv(nB, options["TILE_Q"]), N * Hq)](
        q, k, v, o, lse, anchors, lse if tiles_visited is None else tiles_visited,
        *_strides(q, k, v, o), S, B, anchors.shape[1], D, Hq, Hq // k.shape[1],
        scale * math.log2(math.e), COUNT_TILES=tiles_visited is not None, **options)
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
    _dq_kernel[(triton.cdiv(nB, options["TILE_Q"]), N * Hq)](
        q, k, v, do, lse, delta, dq, anchors, counters[0], *_strides(q, k, v, do, dq),
        S, B, n, D, Hq, Hq // Hkv, scale, scale_log2e, COUNT_TILES=counting, **options)
    options = _config("dkdv", q, tiles)
    grid = (triton.cdiv(S, options["TILE_K"]) + triton.cdiv(nB, options["TILE_K"]), N * Hkv)
    _dkdv_kernel[grid](
        q, k, v, do, lse, delta, dk, dv, anchors, counters[1], *_strides(q, k, v, do, dk, dv),
        S, B, n, D, Hq, Hkv, Hq // Hkv, scale, scale_log2e, COUNT_TILES=counting, **options)
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
    def backward(ctx, do):  # saved: q, k, v, o, lse, anchors, in _backward's order
        return *_backward(do, *ctx.saved_tensors, *ctx.args), None, None, None, None, None


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


def block_attention(q, k, v, anchors, num_context, block_size, scale=None, *, tiles=None):
    """Attention of n blocks of queries over [S context keys ; the n blocks], rule of mask.visible.

    q (N, Hq, n*B, D): the slots of the n blocks; k, v (N, Hkv, S + n*B, D); anchors (N, n) the
    anchor position of each block (inference: n = 1, anchor = S). Hq must be a multiple of Hkv.
    Returns (N, Hq, n*B, D) in q's dtype; differentiable in q, k, v. q, k, v share one dtype
    and device and may be strided views (e.g. (N, L, H, D) transposed to (N, H, L, D)); only a
    tensor whose last dim is not contiguous is copied. Anchors are expected in [0, S]. On a CPU
    the kernels run only under TRITON_INTERPRET=1, set before this module is imported.
    ``tiles`` = (TILE_Q, TILE_K), powers of two >= 16, overrides the kernels' tile sizes.
    """
    _check(q, k, v, anchors, num_context, block_size)
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    if q.device.type == "cpu" and not _interpreting():
        raise RuntimeError("the Triton kernels need a GPU, or TRITON_INTERPRET=1 set before "
                           "minidflash.core.kernel is imported; on a CPU use the 'sdpa' backend of "
                           "minidflash.attention.attend (the drafter's backend setting)")
    anchors = anchors.to(device=q.device, dtype=torch.int32).contiguous()
    return _BlockAttention.apply(_row_major(q), _row_major(k), _row_major(v), anchors,
                                 num_context, block_size, scale, tiles)


# --- Which tiles are visited ------------------------------------------------------------------

def tile_schedule(anchors, num_context: int, block_size: int, tile_q: int, tile_k: int) -> dict:
    """The (query range, key range) tiles the kernels compute for ONE sequence (its n anchors,
    a list or 1-d tensor) and ONE head: ``{"by_query": [...], "by_key": [...]}``, lists of
    ``(q0, q1, k0, k1)`` half-open slot and key ranges, walked by the forward and dQ kernels
    ("by_query") and by the dK/dV kernel ("by_key"). Plain Python, the kernels' arithmetic."""
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
    """Run the three kernels with their tile counters on: {"forward": ..., "dq": ..., "dkdv": ...},
    how many tiles each one computed, summed over sequences and query heads."""
    _check(q, k, v, anchors, num_context, block_size)
    scale = q.shape[-1] ** -0.5
    q, k, v = _row_major(q), _row_major(k), _row_major(v)
    anchors = anchors.to(device=q.device, dtype=torch.int32).contiguous()
    counters = torch.zeros(3, dtype=torch.int32, device=q.device)
    o, lse = _forward(q, k, v, anchors, num_context, block_size, scale, tiles, counters[0:1])
    _backward(torch.ones_like(o), q, k, v, o, lse, anchors, num_context, block_size, scale,
              tiles, counters[1:3])
    return dict(zip(("forward", "dq", "dkdv"), counters.tolist()))

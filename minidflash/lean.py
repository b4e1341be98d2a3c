"""The lean step: one target pass with the arithmetic of transformers' forward and less around it.

Not a paper section: what a decode step costs on a CPU. A one-token pass of SmolLM2-135M in bf16
on one core (``python -m minidflash step-profile``, data/results/step_profile_smollm2_*.json)
spends most of its time in matrix products that run slower than the same products with their
weights laid out once for oneDNN, and a good part in everything that is not arithmetic: module
calls, hooks, argument handling, a rotary embedding recomputed every layer. A verify pass pays
the same, so a leaner pass speeds plain and speculative decoding alike.

``LeanTarget(model)`` is that pass for a Llama, Qwen2 or Qwen3 causal LM (full attention):

1. Each group of projections that read the same input (q, k, v; gate, up) is one matrix, packed
   once, and the lm_head too. In bf16 on a CPU with native bf16, for oneDNN
   (``torch.ops.mkldnn``): bit-identical to transformers' separate ``nn.Linear`` calls, and
   faster (the split in data/results/step_profile_smollm2_bfloat16.json). In fp32, for MKL
   (``torch.ops.mkl``): ``F.linear`` lays the weights out again on every product of more than
   one row, which on a CPU without bf16 units makes a 2-token pass cost nearly two 1-token
   passes; packed once, the weights are read as they lie (``budget curve`` before and after:
   data/results/verify_curve_smollm2_fp32_avx2*.json). Passes of 1..8 tokens (every decode
   step) go through row_product.py's kernel instead, which reads each weight once for all the
   rows and sums a row the same way wherever it sits: a verify pass then costs little more than
   a plain step, and a token's logits are the same bits in both. These products round
   differently from ``F.linear`` (within 1e-5: tests/test_lean.py), so a decode may part from
   transformers' forward at an fp32 near-tie (``MINIDFLASH_PACK_FP32=0``: ``F.linear``
   everywhere, transformers' bits). The packed copy doubles the weights' memory: pass
   lean=False where it is short.
2. One loop over the layers calls what transformers' layers call, in the same order: the RMSNorm
   arithmetic, the rotary embedding (read from a table of cos and sin, computed once by the
   model's own rotary module), ``cache.update`` of the same ``DynamicCache``, transformers' mask
   builder and its SDPA attention function. Cropping, tree and batch bookkeeping of the cache work
   unchanged.
3. In bf16 the query heads that share a key head are stacked into one query (``attend``), where
   transformers' call takes torch's grouped kernel (cheaper for a one-token pass,
   ``step-profile``). This is the one change
   that is not always bit-identical: for a one-token pass at some context lengths the kernel
   sums in another order and the last bit of an attention output differs. A decode then parts
   from transformers' only where two tokens tie in bf16 (each parting at a logit gap of 0 or
   one bf16 step: ``plain/nolean`` in data/results/smollm2_lean_1thread.json). In fp32 the
   attention is transformers' arithmetic; under a mask (a verify pass) the key heads are shared
   in the kernel (``shared_heads``) where transformers copies them, the same bits.

tests/test_lean.py compares the logits and every layer's hidden states with transformers' on
every kind of pass a decode makes. Both passes split by ``step-profile`` are in
data/results/step_profile_smollm2_bfloat16.json; what is left is mostly the matrix products,
which llama.cpp runs faster over the same bf16 weights (``bench --methods llamacpp-plain/bf16``).

``decoding.target_pass`` runs it when the config's ``lean`` is on (the default where
``supports`` says the target can: a CPU model of those families). The drafter's products get the
same packing for the length of such a decode, or int8 (lean_drafter.py).
"""

from __future__ import annotations

import os
import weakref

import torch
import torch.nn.functional as F
from torch.utils.weak import WeakIdKeyDictionary
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import create_causal_mask

from . import row_product

from .exact import Seen, each_row, invariant_attention

FAMILIES = ("llama", "qwen2", "qwen3")


def supports(model) -> str | None:
    """Why ``model`` cannot take the lean pass (a sentence), or None when it can."""
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if kind not in FAMILIES:
        return f"the lean pass knows {', '.join(FAMILIES)} models, not {kind!r}"
    if model.device.type != "cpu":
        return f"the lean pass is for a CPU, and the model is on {model.device.type}"
    if any(t != "full_attention" for t in getattr(config, "layer_types", None) or ()):
        return "the model has sliding-window layers, which the lean pass does not build masks for"
    if getattr(config, "_attn_implementation", "sdpa") != "sdpa":
        return f"the lean pass calls SDPA, and the model asks for {config._attn_implementation!r}"
    return None


PACK_ROWS = 16        # the rows MKL's fp32 packing is laid out for; it serves passes of any size


def native_packing(weight: torch.Tensor) -> bool:
    """Is a bf16 weight on a CPU with native bf16 (oneDNN packs it, with the same results)?"""
    return (weight.device.type == "cpu" and weight.dtype == torch.bfloat16
            and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()))


def mkl_packing(weight: torch.Tensor) -> bool:
    """Is an fp32 weight on a CPU whose torch has MKL (which packs it once for every pass)?"""
    return (weight.device.type == "cpu" and weight.dtype == torch.float32
            and torch.backends.mkl.is_available() and PACK_FP32)


# fp32 through MKL's packed products; MINIDFLASH_PACK_FP32=0 (or False here): F.linear,
# transformers' own bits, e.g. to measure what the packing buys (step-profile, budget curve)
PACK_FP32 = os.environ.get("MINIDFLASH_PACK_FP32", "1") != "0"


class Projection:
    """Several ``nn.Linear`` that read the same input: ``self(x)`` is their outputs, in order (a
    tuple when there are several), from one matrix of their weights, packed once: a second copy
    of the weights. bf16 on a CPU with bf16 units: packed by oneDNN, bit-identical to
    transformers' calls. fp32: a pass of 1..8 rows (a plain step, a verify) through
    row_product.py's kernel, which reads the weight once for all of them; more rows (a prefill)
    through MKL's packed product (``packed == "mkl"``): ``F.linear`` re-lays its weight out on
    every such call, the packed product does not. Both round differently from ``F.linear``
    (within 1e-5 of it: tests/test_lean.py). Where the kernel is not built, a one-row pass keeps
    ``F.linear`` (faster there than the packed product, and transformers' own bits) and the
    packed product takes every pass of more rows. Elsewhere (bf16
    without bf16 units, float16) each product reads its module's own weight through
    ``F.linear``, with no copy."""

    def __init__(self, *linears: torch.nn.Linear):
        self.sizes = [lin.out_features for lin in linears]
        w0 = linears[0].weight
        self.packed = "onednn" if native_packing(w0) else "mkl" if mkl_packing(w0) else None
        if self.packed:
            weight = (torch.cat([lin.weight.detach() for lin in linears]) if len(linears) > 1
                      else linears[0].weight.detach())                  # (sum out, in)
            biases = [lin.bias for lin in linears]
            self.bias = None if biases[0] is None else torch.cat([b.detach() for b in biases])
            self.plain = weight                           # MKL's call reads the unpacked too
            self.weight = pack(weight, self.packed)
        self.by_rows = self.packed == "mkl" and row_product.fits(self.plain)   # 1..8 rows
        self.parts = [(lin.weight, lin.bias) for lin in linears]

    def __call__(self, x: torch.Tensor):
        rows = x.reshape(-1, x.shape[-1])
        way = route(rows, self.packed, self.by_rows)
        if way == "rows":
            y = row_product.product(rows, self.plain, self.bias)     # a few rows: read once
        elif way == "linear":
            ys = [F.linear(x, w, b) for w, b in self.parts]
            return ys[0] if len(ys) == 1 else ys
        else:
            y = packed_rows(rows, self.packed, self.weight, self.plain, self.bias)
        y = y.view(*x.shape[:-1], y.shape[-1])
        return y.split(self.sizes, -1) if len(self.sizes) > 1 else y


def route(rows: torch.Tensor, kind: str | None, by_rows: bool) -> str:
    """Which product takes these rows (M, in) of a weight packed for ``kind`` (None: not
    packed): "rows", row_product.py's kernel (1..8 rows, where ``by_rows``: the weight fits
    it); "linear", ``F.linear`` (no packing, or one fp32 row without the kernel: faster there
    than MKL's packed product, and transformers' own bits); else "packed"."""
    if by_rows and 0 < rows.shape[0] <= row_product.MAX_ROWS:
        return "rows"
    return "linear" if kind is None or (kind == "mkl" and rows.shape[0] == 1) else "packed"


def packed_rows(rows, kind: str, packed, plain, bias):
    """rows (M, in) times a weight packed by ``pack`` for ``kind``: (M, out). MKL's call reads
    the unpacked weight ``plain`` too."""
    if kind == "mkl":
        return torch.ops.mkl._mkl_linear(rows, packed, plain, bias, rows.shape[0])
    return torch.ops.mkldnn._linear_pointwise(rows, packed, bias, "none", [], "")


def packing_threads() -> int:
    """The threads a weight is packed for: every core, or more where torch was asked for more."""
    return max(torch.get_num_threads(), os.cpu_count() or 1)


def pack(weight: torch.Tensor, kind: str) -> torch.Tensor:
    """weight laid out once for ``kind``'s products ("onednn" or "mkl"), for every core: MKL lays
    a packed weight out for the threads at hand (packed at one thread, a product stays on one
    thread after set_num_threads(2), the same bits either way)."""
    before = torch.get_num_threads()
    torch.set_num_threads(packing_threads())
    try:
        return (torch.ops.mkldnn._reorder_linear_weight(weight, 1) if kind == "onednn" else
                torch.ops.mkl._mkl_reorder_linear_weight(weight, PACK_ROWS))
    finally:
        torch.set_num_threads(before)


_PACKED = WeakIdKeyDictionary()   # weight -> (what it was when packed, the packed copy)


def packed_product(weight: torch.Tensor):
    """``f(x, bias)``: ``F.linear(x, weight, bias)`` as ``Projection`` runs it, the packing
    decided and done once (kept beside the weight, packed again when it changes): where the CPU
    packs the weight's dtype, the packed product, but in fp32 row_product.py's kernel for 1..8
    rows (``F.linear`` for one row where it is not built); elsewhere, and for a weight that
    trains, ``F.linear``."""
    kind = "onednn" if native_packing(weight) else "mkl" if mkl_packing(weight) else None
    if kind is None or weight.requires_grad and torch.is_grad_enabled():
        return lambda x, bias=None: F.linear(x, weight, bias)
    packed = kept_beside(_PACKED, weight, (packing_threads(),),
                         lambda: pack(weight.detach(), kind))
    by_rows = kind == "mkl" and row_product.fits(weight)

    def f(x: torch.Tensor, bias: torch.Tensor | None = None):
        rows = x.reshape(-1, x.shape[-1])
        way = route(rows, kind, by_rows)
        if way == "rows":
            y = row_product.product(rows, weight, bias)
        elif way == "linear":
            return F.linear(x, weight, bias)
        else:
            y = packed_rows(rows, kind, packed, weight, bias)
        return y.view(*x.shape[:-1], y.shape[-1])
    return f


def kept_beside(cache: WeakIdKeyDictionary, weight: torch.Tensor, extra: tuple, make):
    """What ``make()`` made from ``weight``, kept in ``cache`` beside it and made again when the
    weight changed (an in-place edit, or a cast: module.to swaps the data under the same tensor)
    or ``extra`` did."""
    now = (version(weight), weight.dtype, weight.data_ptr(), *extra)
    kept = cache.get(weight)
    if kept is None or kept[0] != now:
        kept = cache[weight] = (now, make())
    return kept[1]


def version(t: torch.Tensor) -> int:
    """t's count of in-place edits; an inference tensor (a drafter's slice of the head made in a
    decode) keeps none, and a decode never edits one."""
    return -1 if t.is_inference() else t._version


def runs_lean(target, asked: bool | None) -> bool:
    """Whether a call's target passes run here: as ``lean`` asks, or (None) where ``supports``
    says the target can (``prepare.lean_of`` refuses a True that cannot)."""
    return supports(target) is None if asked is None else asked


def rms_norm(x: torch.Tensor, norm) -> torch.Tensor:
    """transformers' RMSNorm of Llama and Qwen, its arithmetic step for step (the variance in fp32,
    the weight applied in the input's dtype)."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * h.to(x.dtype)


def attend(q, k, v, mask, scaling: float):
    """SDPA of q (N, heads, T, D) over k, v (N, kv heads, L, D) with the mask transformers built
    (None: a one-token pass sees everything), in bf16 with the query heads that share a key
    head stacked as rows of one query ("packed GQA"): (N, T, heads, D). On a CPU the other ways
    to share key heads cost more on a CPU: torch's ``enable_gqa`` kernel, which transformers calls
    for one token, and copying the keys per head, which it does with a mask. In bf16
    the three give the same bits but for one token at a few context lengths (the module's
    docstring)."""
    N, H, T, D = q.shape
    G = H // k.shape[1]                                     # query heads per key head
    if mask is not None:
        mask = mask.repeat(1, 1, G, 1)                      # row g*T + t sees what t sees
    out = F.scaled_dot_product_attention(q.reshape(N, H // G, G * T, D), k, v, attn_mask=mask,
                                         scale=scaling)     # (N, kv heads, G*T, D)
    return out.view(N, H, T, D).transpose(1, 2)


def shared_heads(q, k, v, mask, scaling: float):
    """fp32 SDPA of q (N, heads, T, D) over k, v (N, kv heads, L, D) under a mask, each key head
    read by its query heads in the kernel (``enable_gqa``): (N, T, heads, D). transformers' call
    copies every key head for each query head first (``repeat_kv``); the kernel's rows are the
    same bits (tests/test_lean.py), without the copies (``step-profile``)."""
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scaling,
                                         enable_gqa=k.shape[1] != q.shape[1])
    return out.transpose(1, 2)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The rotary embedding of x (N, heads, T, D) at cos, sin (N, 1, T, D)."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin


class LeanTarget:
    """The lean pass of a causal LM (``supports``): ``self(ids, cache, ...)`` as
    ``decoding.target_pass`` wants it. Built once per model (``of``)."""

    def __init__(self, model):
        if (why := supports(model)) is not None:
            raise ValueError(f"{why}; decode with lean=False (--no-lean).")
        self.model, self.body = model, model.base_model
        self.layers = []
        self.threads = packing_threads()     # packed again if a decode asks for more (``of``)
        self.build()
        self.cos = self.sin = None
        self.params = list(self.model.parameters())
        self.source = self.weights()

    def build(self) -> None:
        """Each layer's projections packed, and the modules the pass calls, in a list."""
        model = self.model
        for layer in self.body.layers:
            a, m = layer.self_attn, layer.mlp
            self.layers.append(dict(
                attn=a, qkv=Projection(a.q_proj, a.k_proj, a.v_proj), o=Projection(a.o_proj),
                q_norm=getattr(a, "q_norm", None), k_norm=getattr(a, "k_norm", None),
                norm_in=layer.input_layernorm, norm_mid=layer.post_attention_layernorm,
                gate_up=Projection(m.gate_proj, m.up_proj), down=Projection(m.down_proj),
                act=m.act_fn, head_dim=a.head_dim))
        self.head = Projection(model.get_output_embeddings())

    def weights(self) -> list:
        """What the pass copied from: each parameter's storage, dtype and in-place version."""
        return [(p.data_ptr(), p.dtype, p._version) for p in self.params]

    def rope(self, position_ids: torch.Tensor, like: torch.Tensor):
        """cos, sin (N, 1, T, D) at position_ids (N, T): rows of a table the model's own rotary
        module computed once (the same numbers it computes every pass), grown when outrun."""
        need = int(position_ids.max()) + 1
        if self.cos is None or self.cos.shape[0] < need:
            size = max(need, 2 * (0 if self.cos is None else self.cos.shape[0]), 512)
            positions = torch.arange(size, device=like.device)[None]
            cos, sin = self.body.rotary_emb(like, position_ids=positions)      # (1, size, D)
            self.cos, self.sin = cos[0], sin[0]
        return self.cos[position_ids][:, None], self.sin[position_ids][:, None]

    @torch.no_grad()
    def __call__(self, input_ids, cache, layers: bool, final: bool, logits_to_keep: int = 0,
                 attention_mask=None, position_ids=None, exact: bool = False):
        """(logits, hidden_states, final) as ``decoding.target_pass``: the logits at the last
        ``logits_to_keep`` positions (0: all), every layer's states (transformers' tuple: the
        embeddings, each layer's output, the last one normed) when ``layers``, and the normed
        final state at the kept positions when ``final``. exact: attention reduced over keys in
        fixed blocks in index order (``exact.invariant_attention``), for exact mode."""
        h = self.body.embed_tokens(input_ids)                                 # (N, T, H)
        N, T = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(T, device=h.device)[None] + cache.get_seq_length()
        mask = create_causal_mask(config=self.body.config, inputs_embeds=h, attention_mask=attention_mask,
                            cache=cache, position_ids=position_ids)
        cos, sin = self.rope(position_ids, h)
        seen = Seen(mask, N, T, cache.get_seq_length() + T, h.device) if exact else None
        packed_gqa = h.dtype == torch.bfloat16                # fp32: transformers' own call
        by = each_row if exact else (lambda product, x: product(x))   # exact: rows stand alone
        states = [h] if layers else None
        for i, p in enumerate(self.layers):
            x = rms_norm(h, p["norm_in"])
            q, k, v = by(p["qkv"], x)
            q, k, v = (t.view(N, T, -1, p["head_dim"]) for t in (q, k, v))
            if p["q_norm"] is not None:                                       # Qwen3
                q, k = rms_norm(q, p["q_norm"]), rms_norm(k, p["k_norm"])
            q, k = rotate(q.transpose(1, 2), cos, sin), rotate(k.transpose(1, 2), cos, sin)
            k, v = cache.update(k, v.transpose(1, 2), i)
            if exact:
                out = invariant_attention(q, k, v, mask, p["attn"].scaling, seen=seen)
            elif packed_gqa and (mask is not None or T == 1):
                out = attend(q, k, v, mask, p["attn"].scaling)
            elif mask is not None and T > 1:                # fp32 under a mask: shared key heads
                out = shared_heads(q, k, v, mask, p["attn"].scaling)
            else:                                           # transformers' own choice
                out, _ = sdpa_attention_forward(p["attn"], q, k, v, mask, dropout=0.0,
                                     scaling=p["attn"].scaling)
            h = h + by(p["o"], out.reshape(N, T, -1))
            x = rms_norm(h, p["norm_mid"])
            gate, up = by(p["gate_up"], x)
            h = h + by(p["down"], p["act"](gate) * up)
            if layers and i < len(self.layers) - 1:
                states.append(h)
        h = rms_norm(h, self.body.norm)
        if layers:
            states.append(h)
        last = h[:, -logits_to_keep:] if logits_to_keep else h
        return by(self.head, last), (tuple(states) if layers else None), (last if final else None)


_KEPT: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()    # model -> its LeanTarget


def of(model) -> LeanTarget:
    """The model's lean pass, built at its first use and kept beside the model (a copy of the
    model is a new model); built again when the weights it copied from changed since: a cast, a
    load or any in-place edit (torch counts those in each tensor's version); and when torch runs
    on more threads than the packed weights were laid out for."""
    lean = _KEPT.get(model)
    if lean is None or lean.source != lean.weights() or torch.get_num_threads() > lean.threads:
        lean = _KEPT[model] = LeanTarget(model)
    return lean

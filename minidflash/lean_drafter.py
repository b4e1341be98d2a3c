"""The drafter's products in a lean decode: packed once, or int8 (``drafting``).

Not a paper section: what a draft costs on a CPU. For the length of a lean decode (lean.py, the
target's side) the drafter's ``nn.Linear`` modules and the target's head as the drafter applies
it multiply through the lean pass's packed products (``lean.packed_product``). Where a
drafter would multiply fp32 weights on a CPU without bf16 units, its products are int8 instead
(``int8_product``, the config's ``draft_int8``): a draft is only a proposal, so it may round
coarsely, and a quarter of the bytes is what pays where a product's time is reading its weight.
Everything is restored on leaving (tests/test_lean_drafting.py); the decode's tokens are the
target's either way.
"""

from __future__ import annotations

import contextlib
import functools
import warnings

import torch
from torch.utils.weak import WeakIdKeyDictionary

from .lean import kept_beside, packed_product


def product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None):
    """``F.linear(x, weight, bias)`` through ``packed_product(weight)``: the drafter's product
    with the target's head in a lean decode (``drafting``)."""
    return packed_product(weight)(x, bias)


def int8_head(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None):
    """The drafter's product with the target's head in int8 (``int8_product``)."""
    return int8_product(weight)(x, bias)


_INT8 = WeakIdKeyDictionary()     # weight -> (what it was when quantized, fbgemm's packed int8)


def int8_ready() -> bool:
    """Does this torch multiply int8 weights by fp32 rows (fbgemm's dynamic quantization)?"""
    return "fbgemm" in torch.backends.quantized.supported_engines and hasattr(
        torch.ops.quantized, "linear_dynamic")


def int8_product(weight: torch.Tensor):
    """``f(x, bias)``: about ``F.linear(x, weight, bias)`` with the weight in int8, one scale a
    row (symmetric, the row's largest magnitude at 127), quantized once and kept beside the
    weight; x is quantized on every call (one scale for the call's rows, 7 bits: fbgemm's AVX2
    kernels sum pairs of products in 16 bits, which 8 bits could overflow) and the product comes
    back in fp32 (``torch.ops.quantized.linear_dynamic``). Within about 2% of fp32 (relative
    error of a product, tests/test_lean_drafting.py): for drafts, never for the target."""
    packed = kept_beside(_INT8, weight, (), lambda: quantize(weight))

    def f(x: torch.Tensor, bias: torch.Tensor | None = None):
        rows = x.reshape(-1, x.shape[-1]).float().contiguous()
        y = torch.ops.quantized.linear_dynamic(rows, packed, True)        # True: 7-bit rows
        y = y if bias is None else y + bias
        return y.to(x.dtype).view(*x.shape[:-1], y.shape[-1])
    return f


# int8 drafts pay from about this size on: SmolLM2's drafter (11.6M parameters) drafts faster and
# decodes faster on a CPU held to AVX2 (data/results/int8_drafts_dev_avx2.json); the tiny drafter
# (about 1M), its weights in cache, drafts about as fast either way (int8_drafts_tiny_avx2.json),
# so below this size a draft keeps the drafter's own arithmetic
INT8_MIN_PARAMETERS = 4_000_000


def quantize(weight: torch.Tensor):
    """weight as ``int8_product`` multiplies it: int8, one scale a row, packed by fbgemm."""
    w = weight.detach().float()
    scale = (w.abs().amax(1) / 127).clamp_min(1e-12).double()
    with warnings.catch_warnings():   # torch calls its quantized tensors deprecated; the
        warnings.simplefilter("ignore")     # pinned torch has them, int8_ready checks
        q = torch.quantize_per_channel(w, scale, torch.zeros_like(scale, dtype=torch.long),
                                       0, torch.qint8)
    engine = torch.backends.quantized.engine
    torch.backends.quantized.engine = "fbgemm"
    try:
        return torch.ops.quantized.linear_prepack(q, None)
    finally:
        torch.backends.quantized.engine = engine


def drafts_in_int8(drafter, asked: bool | None) -> bool:
    """Whether a lean decode's drafts are int8: as ``draft_int8`` asks, or (None) by default."""
    return int8_by_default(drafter) if asked is None else asked


def int8_by_default(drafter) -> bool:
    """``draft_int8=None``: int8 drafts where the drafter would multiply fp32 weights on a CPU
    without bf16 units (where ``load_target`` picks fp32 and a product's time is reading fp32
    weights), the drafter has at least ``INT8_MIN_PARAMETERS``, and torch can (``int8_ready``)."""
    w = getattr(getattr(drafter, "fc", None), "weight", None)
    return (w is not None and w.device.type == "cpu" and w.dtype == torch.float32 and int8_ready()
            and not torch.ops.mkldnn._is_mkldnn_bf16_supported()
            and sum(p.numel() for p in drafter.parameters()) >= INT8_MIN_PARAMETERS)


@contextlib.contextmanager
def drafting(drafter, on: bool = True, int8: bool | None = None):
    """While a lean decode runs (``on``; nothing changes when off or there is no drafter):
    every ``nn.Linear`` of the drafter, and the target's head as the drafter applies it
    (``head_product``), multiplies through ``packed_product``, its weight packed once; with
    ``int8`` (None: ``int8_by_default``) through ``int8_product``, all but ``fc``, which reads
    the target's states of several layers side by side, whose scales one int8 scale cannot hold
    (with it in int8 too, the drafts were taken markedly less often). A draft is a
    proposal: its products may round differently from ``F.linear`` without touching what the
    target keeps. Everything is as before on leaving."""
    if drafter is None or not on:
        yield drafter
        return
    int8 = drafts_in_int8(drafter, int8)
    if int8 and not int8_ready():
        raise ValueError("draft_int8=True, but this torch has no fbgemm int8 products "
                         "(torch.backends.quantized.supported_engines): pass draft_int8=False.")
    fc = getattr(drafter, "fc", None)
    way = lambda m: int8_product if int8 and m is not fc else packed_product
    linears = [m for m in drafter.modules() if isinstance(m, torch.nn.Linear)]
    for m in linears:
        m.forward = functools.partial(way(m)(m.weight), bias=m.bias)
    head = vars(drafter).get("head_product")
    if head is not None:
        drafter.head_product = int8_head if int8 else product
    try:
        yield drafter
    finally:
        for m in linears:
            vars(m).pop("forward", None)
        if head is not None:
            drafter.head_product = head


"""What every decoding loop here shares: the result it returns, the target's greedy choice, the
target's KV cache passed under the name this transformers version uses and cropped the same way on
every version, and a clock that waits for the device (verifier.py, tree.py and the tools read
these).

The greedy choice in bf16. A bf16 lm_head rounds each logit to 8 significant bits: near a logit
of 20 the step is 0.125, so the two likeliest tokens often print the same number, and argmax
then takes the lower id whichever the exact sum favours. ``greedy_choice`` looks again at the
tokens within two rounding steps of the top, with their logits recomputed in fp32 from the same
final hidden state (the lm_head rows upcast, a dot product each): exact ties become as rare as in
fp32. What stays is the hidden state's own rounding, which differs between a pass over 16 new
tokens and a pass over one (different kernel blockings: no batch invariance), so a verify pass
and a plain decode step may still decide a near-tie differently; each decides it as the target,
in its own pass. ``fp32_ties=False`` (speculative_generate, tree_generate) reads the bf16
argmax as it is.
"""

from __future__ import annotations

import functools
import inspect
import time
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache


@dataclass
class GenerationResult:
    output_ids: torch.Tensor            # (1, prompt + new) prompt followed by the new tokens
    prompt_length: int
    acceptance_lengths: list[int]       # tokens committed per verify step (accepted + 1)
    drafted: list[bool]                 # per new token: True if drafted and accepted
    prefill_time: float = 0.0           # seconds: the target's pass over the prompt
    draft_time: float = 0.0             # seconds in drafter passes
    verify_time: float = 0.0            # seconds in target passes after the prefill
    decode_time: float = 0.0            # seconds from the end of the prefill to the end
    block_size: int = 1
    steps: list[dict] = field(default_factory=list)  # per step: drafted and target ids
    verified: list[int] = field(default_factory=list)  # per step: drafted tokens verified (m)

    @property
    def new_ids(self) -> torch.Tensor:
        return self.output_ids[0, self.prompt_length:]

    @property
    def num_new_tokens(self) -> int:
        return self.output_ids.shape[1] - self.prompt_length

    @property
    def tau(self) -> float:
        """Mean tokens committed per target verify pass (paper: acceptance length)."""
        return sum(self.acceptance_lengths) / max(1, len(self.acceptance_lengths))

    @property
    def tpot(self) -> float:
        """Decode time per output token (prefill excluded), seconds."""
        return self.decode_time / max(1, self.num_new_tokens)


def greedy_choice(logits: torch.Tensor, hidden: torch.Tensor | None = None,
                  head: torch.nn.Linear | None = None) -> torch.Tensor:
    """The target's greedy token at every position: logits (N, T, V) -> (N, T).

    With the final hidden states (N, T, H) (after the last norm: ``hidden_states[-1]``) and the
    lm_head, a bf16 or fp16 row's near-ties are decided in fp32: every token whose logit is
    within two rounding steps of the largest gets its logit recomputed in fp32, and the largest
    of those wins (the lowest id on an exact tie, as argmax). fp32 logits, or no hidden states:
    the argmax as it is.
    """
    best = logits.argmax(-1)                                                  # (N, T)
    if hidden is None or head is None or logits.dtype == torch.float32:
        return best
    z = logits.float()
    top = z.gather(-1, best[..., None])                                       # (N, T, 1)
    step = torch.finfo(logits.dtype).eps * torch.exp2(torch.floor(torch.log2(
        top.abs().clamp_min(torch.finfo(torch.float32).tiny))))              # one rounding step
    near = z >= top - 2 * step                                                # (N, T, V)
    if not (near.sum(-1) > 1).any():
        return best
    n, t, v = near.nonzero(as_tuple=True)                                     # candidates, row-major
    exact = (hidden[n, t].float() * head.weight[v].float()).sum(-1)           # (c,) fp32 logits
    if head.bias is not None:
        exact = exact + head.bias[v].float()
    key = n * best.shape[1] + t                                               # (c,) position
    flat = best.new_full((best.numel(),), v.max() + 1)
    peak = exact.new_full((best.numel(),), float("-inf")).scatter_reduce(0, key, exact, "amax")
    win = exact == peak[key]
    return flat.scatter_reduce(0, key[win], v[win], "amin").view_as(best)


def tie_head(target, temperature: float, fp32_ties: bool):
    """The lm_head whose near-ties ``greedy_choice`` decides in fp32: only when greedy, asked
    for, and the head is not fp32 already (else None: nothing to decide)."""
    head = target.get_output_embeddings()
    return head if fp32_ties and temperature == 0 and head.weight.dtype != torch.float32 else None


def crop_cache(cache: DynamicCache, length: int) -> None:
    """Drop cached positions >= length (a negative crop behaves the same on every version)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


@functools.lru_cache(maxsize=None)
def _cache_name(model_class) -> str:
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def cache_kwargs(model, cache) -> dict:
    """Pass the KV cache under the name this transformers version uses (``cache`` in newer
    releases, ``past_key_values`` before)."""
    return {_cache_name(type(model)): cache, "use_cache": True}


def clock(device=None) -> float:
    """Seconds (``time.perf_counter``), read after the device's queued work has finished.

    CUDA runs kernels asynchronously: without the synchronise a timestamp measures launches,
    and a pass's GPU time lands in whatever is timed next. Every timestamp of
    ``speculative_generate`` (and of the bench) is read here. device: a torch device or name;
    None or a CPU reads the clock at once.
    """
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()

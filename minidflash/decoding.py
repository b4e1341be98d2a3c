"""What every decoding loop here shares: the result it returns, the target's KV cache passed
under the name this transformers version uses and cropped the same way on every version, and a
clock that waits for the device (verifier.py, tree.py and the tools read these)."""

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

"""What the front door's seams are made of: the target's pass (``target_pass``: transformers'
forward, the lean pass or exact mode; ``TargetPass`` binds it to a call's settings), the target's
choice (``Pick``: greedy with bf16 near-ties decided in fp32, or an exact sample), a stopwatch that
times the seams from outside the loop, the KV cache passed under the name this transformers
version uses and cropped the same way on every version, and the result. The settings of a call
are resolved before any of it, by ``prepare.prepare``.

The greedy choice in bf16. A bf16 lm_head rounds each logit to 8 significant bits: near a logit
of 20 the step is 0.125, so the two likeliest tokens often print the same number, and argmax
then takes the lower id whichever the exact sum favours. ``greedy_choice`` looks again at the
tokens within two rounding steps of the top, with their logits recomputed in fp32 from the same
final hidden state (the lm_head rows upcast, a dot product each): exact ties become as rare as in
fp32. What stays is the hidden state's own rounding, which differs between a pass over 16 new
tokens and a pass over one (different kernel blockings: no batch invariance), so a verify pass
and a plain decode step may still decide a near-tie differently; each decides it as the target,
in its own pass. ``fp32_ties=False`` reads the bf16 argmax as it is.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from . import exact
from .core.verifier import Sample, cache_kwargs  # noqa: F401  (cache_kwargs: the core's)
from .decoding_config import DecodingConfig
from .lean import of as lean_pass


@dataclass
class GenerationResult:
    output_ids: torch.Tensor            # (1, prompt + new) prompt followed by the new tokens
    prompt_length: int
    acceptance_lengths: list[int]       # tokens committed per verify step (accepted + 1; the
    #                                     last step's after the cut at max_new_tokens or a stop)
    drafted: list[bool]                 # per new token: True if drafted and accepted
    prefill_time: float = 0.0           # seconds: the target's pass over the prompt
    draft_time: float = 0.0             # seconds in drafter passes
    verify_time: float = 0.0            # seconds in target passes after the prefill
    decode_time: float = 0.0            # seconds from the end of the prefill to the end
    block_size: int = 1
    steps: list[dict] = field(default_factory=list)  # per step: drafted and target ids
    verified: list[int] = field(default_factory=list)  # per step: drafted tokens verified (m)
    config: DecodingConfig | None = None  # the settings this decode ran, resolved

    @property
    def new_ids(self) -> torch.Tensor:
        return self.output_ids[0, self.prompt_length:]

    @property
    def num_new_tokens(self) -> int:
        return self.output_ids.shape[1] - self.prompt_length

    @property
    def tau(self) -> float:
        """Mean tokens committed per target verify pass (paper: acceptance length): the new
        tokens after the prefill's one, over the verify passes. A step cut by max_new_tokens or
        a stop counts the tokens it kept. With no verify pass (max_new_tokens=1, or the
        prefill's token a stop) tau is 1.0: one token from one target pass, as plain decoding."""
        if not self.acceptance_lengths:
            return 1.0
        return sum(self.acceptance_lengths) / len(self.acceptance_lengths)

    @property
    def tpot(self) -> float:
        """Decode time per output token (prefill excluded), seconds."""
        return self.decode_time / max(1, self.num_new_tokens)


# -- the target's choice ------------------------------------------------------------------------
def greedy_choice(logits: torch.Tensor, hidden: torch.Tensor | None = None,
                  head: torch.nn.Linear | None = None) -> torch.Tensor:
    """The target's greedy token at every position: logits (N, T, V) -> (N, T).

    With the final hidden states (N, T, H) (after the last norm) and a bf16 or fp16 lm_head, a
    row's near-ties are decided in fp32: every token whose logit is within two of the head's
    rounding steps of the largest gets its logit recomputed in fp32, and the largest of those
    wins (the lowest id on an exact tie, as argmax). The head's dtype decides, not the logits'
    (logits upcast to fp32 still carry the head's rounding). An fp32 head, or no hidden states:
    the argmax as it is.
    """
    best = logits.argmax(-1)                                                  # (N, T)
    if hidden is None or head is None or head.weight.dtype == torch.float32:
        return best
    z = logits.float()
    top = z.gather(-1, best[..., None])                                       # (N, T, 1)
    step = torch.finfo(head.weight.dtype).eps * torch.exp2(torch.floor(torch.log2(
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


def tie_head(target, cfg: DecodingConfig):
    """The lm_head whose near-ties ``greedy_choice`` decides in fp32: only when greedy, asked
    for, and the head is not fp32 (else None: nothing to decide)."""
    head = target.get_output_embeddings()
    wanted = cfg.fp32_ties and cfg.temperature == 0 and head.weight.dtype != torch.float32
    return head if wanted else None


class Pick:
    """The pick seam of the core's loop (core/verifier.py): greedy with a bf16 head's near-ties
    decided in fp32 (``greedy_choice``; ``final`` the final hidden states (N, T, H)), or an
    exact sample at temperature T > 0 (``core.verifier.Sample``)."""

    def __init__(self, temperature: float = 0.0, generator=None, head=None):
        self.samples, self.head = temperature > 0, head
        self.sample = Sample(temperature, generator) if temperature > 0 else None

    def __call__(self, logits: torch.Tensor, final=None) -> torch.Tensor:
        if self.sample is not None:
            return self.sample(logits)
        return greedy_choice(logits, final, self.head)


def choose(logits: torch.Tensor, temperature: float, generator=None, hidden=None,
           head=None) -> torch.Tensor:
    """The target's token at every position: logits (N, T, V) -> (N, T) (``Pick`` at once)."""
    return Pick(temperature, generator, head)(logits, hidden)


# -- the target's pass, its cache, the clock -----------------------------------------------------
def target_pass(target, input_ids, cache, layers: bool, final: bool, logits_to_keep: int = 0,
                lean: bool = False, exact: int = 0, **kwargs):
    """One target pass over input_ids (N, T) with the KV cache: (logits, hidden_states, final).

    layers: every layer's hidden states (the drafter's features), else None. final: the last
    norm's output at the kept positions (N, T', H), for ``greedy_choice``, else None. Plain
    decoding asks for the final state only: the base model runs and the lm_head is applied
    here, as the causal-LM class applies it, without keeping every layer's states. lean: the
    same numbers through lean.py (kwargs: attention_mask, position_ids). exact: exact mode's W
    (``exact_pass``); 0 off.
    """
    if exact:
        return exact_pass(target, input_ids, cache, layers, final, logits_to_keep, lean, exact,
                          **kwargs)
    if lean:
        return lean_pass(target)(input_ids, cache, layers, final, logits_to_keep, **kwargs)
    if layers or not final:
        out = target(input_ids=input_ids, **cache_kwargs(target, cache), **kwargs,
                     output_hidden_states=layers, logits_to_keep=logits_to_keep)
        states = out.hidden_states if layers else None
        last = states[-1][:, -out.logits.shape[1]:] if final else None
        return out.logits, states, last
    body = target.base_model
    h = body(input_ids=input_ids, **cache_kwargs(body, cache), **kwargs).last_hidden_state
    h = h[:, -logits_to_keep:] if logits_to_keep else h                      # (N, T', H)
    return target.get_output_embeddings()(h), None, h


class TargetPass:
    """The forward seam of the core's loop: ``target_pass`` with this call's settings (features
    for a drafter, the final states for the tie rule, the lean pass, exact mode's W)."""

    def __init__(self, target, layers: bool, final: bool, lean: bool = False, exact: int = 0):
        if exact is None:                       # DecodingConfig.rows before resolve
            raise ValueError("exact mode's W waits on the drafter: resolve the config first.")
        self.target, self.layers, self.final, self.lean, self.exact = target, layers, final, lean, exact

    def __call__(self, ids, cache, logits_to_keep: int = 0, **inputs):
        return target_pass(self.target, ids, cache, self.layers, self.final, logits_to_keep,
                           lean=self.lean, exact=self.exact, **inputs)


class Stopwatch:
    """Times the seams from outside the loop: the first target pass is the prefill, every
    other one a verify; a proposal is the draft. ``step`` holds the last step's two times."""

    def __init__(self, device):
        self.device, self.times, self.step = device, {"prefill": 0.0, "draft": 0.0, "verify": 0.0}, {}
        self.prefilled = None                         # when the prefill ended

    def timed(self, fn, what: str):
        def run(*args, **kwargs):
            t = clock(self.device)
            out = fn(*args, **kwargs)
            end = clock(self.device)
            key = what if what != "verify" or self.prefilled is not None else "prefill"
            self.times[key] += end - t
            self.step[key] = end - t
            if key == "prefill":
                self.prefilled = end
            return out
        return run

    def now(self) -> float:
        return clock(self.device)

    def total(self) -> dict:
        return dict(self.times, decode=clock(self.device) - self.prefilled)


def exact_pass(target, input_ids, cache, layers: bool, final: bool, logits_to_keep: int,
               lean: bool, rows: int, attention_mask=None, position_ids=None):
    """``target_pass`` in exact mode (exact.py): a token's logits the same bits whichever pass
    computes it. After the prefill every pass has ``rows`` rows (W, one for the whole decode:
    ``DecodingConfig.rows``), the real ones first and padding after them (their keys cropped
    from the cache afterwards); attention is ``exact.invariant_attention``; a batch runs one row
    at a time, each row's pass the one a batch of one makes (its cache without the batch's
    holes), its new keys put back in the batch's cache."""
    N, T = input_ids.shape
    past = cache.get_seq_length()
    if N > 1:
        def run(ids, row_cache, pos):
            return exact_pass(target, ids, row_cache, layers, final, logits_to_keep, lean, rows,
                              position_ids=pos)
        return exact.one_row_at_a_time(run, input_ids, cache, attention_mask, position_ids,
                                       logits_to_keep)
    if past and T > rows:
        raise ValueError(f"exact mode runs every pass after the prefill on W = {rows} rows, and "
                         f"this one has {T}: use W >= {T} (exact={T}, /exact:{T}), or exact=True "
                         f"for the W of the block or tree.")
    pad = rows - T if past else 0
    ids, pos, mask = exact.padded(input_ids, past, pad, position_ids, attention_mask)
    keep = logits_to_keep if not pad else 0
    if lean:
        out = lean_pass(target)(ids, cache, layers, final, keep, attention_mask=mask,
                                position_ids=pos, exact=True)
    else:
        with exact.invariant(target):
            out = target_pass(target, ids, cache, layers, final, keep, attention_mask=mask,
                              position_ids=pos)
    if not pad:
        return out
    crop_cache(cache, past + T)
    logits, last = out[0][:, :T], None if out[2] is None else out[2][:, :T]
    states = None if out[1] is None else tuple(h[:, :T] for h in out[1])
    if logits_to_keep:
        logits = logits[:, -logits_to_keep:]
        last = None if last is None else last[:, -logits_to_keep:]
    return logits, states, last


def crop_cache(cache: DynamicCache, length: int) -> None:
    """Drop cached positions >= length (a negative crop behaves the same on every version)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


def clock(device=None) -> float:
    """Seconds (``time.perf_counter``), read after the device's queued work has finished.

    CUDA runs kernels asynchronously: without the synchronise a timestamp measures launches,
    and a pass's GPU time lands in whatever is timed next. Every timestamp of a decode (and of
    the bench) is read here. device: a torch device or name; None or a CPU reads the clock at
    once.
    """
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


# -- the end of a decode ----------------------------------------------------------------------
def cut(new: list[int], cfg: DecodingConfig) -> list[int]:
    """The new tokens cut at max_new_tokens and after the first stop token (kept)."""
    new = new[:cfg.max_new_tokens]
    hits = [i for i, t in enumerate(new) if t in cfg.stop_token_ids]
    return new[:hits[0] + 1] if hits else new


def result(prompt: torch.Tensor, new: list[int], cfg: DecodingConfig, lengths, drafted,
           times: dict, **extra) -> GenerationResult:
    """A GenerationResult of prompt (1, S) and the new tokens, cut (``cut``). times: prefill,
    draft, verify, decode seconds."""
    new = cut(new, cfg)
    lengths, left = list(lengths), len(new) - 1           # the verify passes' tokens, after the cut
    for i, n in enumerate(lengths):
        lengths[i], left = max(0, min(n, left)), left - n
    output_ids = torch.cat([prompt, torch.tensor([new], dtype=torch.long, device=prompt.device)], 1)
    return GenerationResult(output_ids=output_ids, prompt_length=prompt.shape[1],
                            acceptance_lengths=lengths, drafted=drafted[:len(new)],
                            prefill_time=times["prefill"], draft_time=times["draft"],
                            verify_time=times["verify"], decode_time=times["decode"],
                            block_size=cfg.block_size, config=cfg, **extra)

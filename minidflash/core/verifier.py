"""Speculative decoding with a DFlash drafter: draft a block, verify it, keep what agrees.

Paper section 3 (inference). One step, with B the block size and t the last committed token:

1. Propose  d_1..d_{B-1} = argmax drafter([t, MASK, ..., MASK] | context features)   (1 pass)
2. Verify   y_0..y_{B-1} = the target's own choice after [t, d_1, ..., d_{B-1}]     (1 pass)
            (argmax when greedy; a sample of softmax(logits / T) at temperature T > 0)
3. Accept   a = max{ k : d_j = y_{j-1} for all j <= k }: d_1..d_a, and the bonus y_a.
4. Commit   the target's KV cache keeps t, d_1..d_a; the hidden states the verify pass computed
            for them are the drafter's next context, so nothing is ever recomputed.

Every committed token is the target's own choice given a prefix of committed tokens, so the
output is *identical* to plain greedy decoding, and at T > 0 *identically distributed* to plain
sampling: each emitted token is a target sample; the drafter only decides how many of them one
target pass can certify. Tokens per step a + 1 is at most B; tau is its mean.

``generate`` is the one loop, and it never changes. Everything else plugs into it at a seam:

* ``propose(state) -> Draft``: what the target verifies next. ``BlockProposer`` is the paper's
  chain of one block; with no drafter it proposes nothing (plain decoding: a step verifies t
  alone and commits one token). A tree of drafts, the confidence cut, the cost model and the
  autoregressive rival are proposers too (the lab: tree.py, budget.py, ar_drafter.py).
* ``forward(ids, cache, logits_to_keep=0, **inputs) -> (logits, hidden_states, final)``: one
  target pass; ``TargetForward`` is transformers' forward (the lab's lean pass and exact mode
  replace it).
* ``pick(logits, final) -> tokens``: the target's choice, ``greedy`` or ``Sample(T)`` (the lab
  decides bf16 near-ties in fp32 around it).
* ``state``: what has been committed. ``Sequence`` is one sequence; a ragged batch of many is
  the lab's (batch.py), with the same methods.
* ``on_step(state, draft, outcome, logits)``: what a step records (timings, acceptance).
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from .drafter import target_features


def accepted_lengths(block: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """a per row: how many drafts agree with the target before the first that does not.
    block (N, W) = [t, d_1..d_{W-1}], y (N, W) the target's choices -> (N,)."""
    return (block[:, 1:] == y[:, :-1]).long().cumprod(1).sum(1)


@dataclass
class Outcome:
    kept: list[list[int]]      # per row: the draft's columns committed, 0 (t) first
    bonus: torch.Tensor        # (N,) the target's token after the last kept column
    choices: torch.Tensor | None = None   # (N, W) the target's choice at every column (chains)


@dataclass
class Draft:
    """A chain: row i verifies ids[i] = [t, d_1, ..., d_{W-1}] at positions start_i .. start_i +
    W - 1, each token seeing the ones before it (the causal mask the target uses anyway)."""
    ids: torch.Tensor                      # (N, W)
    q: torch.Tensor | None = None          # (N, W-1) the drafter's probability of each draft
    lengths: torch.Tensor | None = None    # (N,) drafts row i may accept (a cut); None: all

    def inputs(self, state) -> dict:
        """The verify pass's positions, and the state's attention mask if it keeps one."""
        W = self.ids.shape[1]
        inputs = {"position_ids": state.start[:, None] + torch.arange(W, device=self.ids.device)}
        mask = state.attention(W)
        return inputs if mask is None else {**inputs, "attention_mask": mask}

    def walk(self, logits: torch.Tensor, final, pick) -> Outcome:
        """Accept the longest agreeing prefix of every row (at most its ``lengths``). At T > 0,
        with a one-hot draft, this is speculative sampling exactly: d_j is accepted with
        probability p(d_j), and after a rejection y_{j-1} ~ p without d_j, renormalised."""
        y = pick(logits, final)                                                # (N, W)
        a = accepted_lengths(self.ids, y)                                      # (N,)
        if self.lengths is not None:
            a = torch.minimum(a, self.lengths)
        return Outcome([list(range(k + 1)) for k in a.tolist()], y.gather(1, a[:, None])[:, 0], y)


class BlockProposer:
    """The paper's proposal: the drafter's B-1 guesses for the slots after t, in one pass.
    Without a drafter (or block_size 1) a proposal of nothing: plain decoding."""

    def __init__(self, target, drafter, block_size: int, with_probs: bool = False):
        self.target, self.drafter, self.B, self.with_probs = target, drafter, block_size, with_probs

    def __call__(self, state, **kwargs) -> Draft:
        t = state.token[:, None]                                               # (N, 1)
        if self.drafter is None or self.B == 1:
            return Draft(t)
        if self.with_probs:
            kwargs["with_probs"] = True
        out = self.drafter.draft(self.target, **state.context(), block_size=self.B, **kwargs)
        guess, q = out if self.with_probs else (out, None)                     # (N, B-1)
        return Draft(torch.cat([t, guess], 1), q=q)


def greedy(logits: torch.Tensor, final=None) -> torch.Tensor:
    """The target's greedy choice at every position: logits (N, T, V) -> (N, T)."""
    return logits.argmax(-1)


class Sample:
    """The target's sample at temperature T at every position: logits (N, T, V) -> (N, T). An
    exact draw by inverse CDF: one uniform u per position, the first token whose cumulative
    probability exceeds u (one cumsum, cheaper than ``torch.multinomial`` over a block)."""

    samples = True

    def __init__(self, temperature: float, generator=None):
        self.temperature, self.generator = temperature, generator

    def __call__(self, logits: torch.Tensor, final=None) -> torch.Tensor:
        cdf = torch.softmax(logits.float() / self.temperature, dim=-1).cumsum(-1)  # (N, T, V)
        u = torch.rand(cdf.shape[:-1] + (1,), generator=self.generator, device=cdf.device)
        token = torch.searchsorted(cdf, u * cdf[..., -1:], right=True)         # (N, T, 1)
        return token[..., 0].clamp(max=cdf.shape[-1] - 1)


@functools.lru_cache(maxsize=None)
def _cache_name(model_class) -> str:
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def cache_kwargs(model, cache) -> dict:
    """Pass the KV cache under the name this transformers version uses (``cache`` in newer
    releases, ``past_key_values`` before)."""
    return {_cache_name(type(model)): cache, "use_cache": True}


class TargetForward:
    """One target pass through transformers: (logits, every layer's hidden states or None, the
    final normed states or None). layers: keep the hidden states (the drafter's features).
    final: return the last norm's output at the kept positions (for a tie rule)."""

    def __init__(self, target, layers: bool, final: bool = False):
        self.target, self.layers, self.final = target, layers, final

    def __call__(self, ids, cache, logits_to_keep: int = 0, **inputs):
        out = self.target(input_ids=ids, **cache_kwargs(self.target, cache), **inputs,
                          output_hidden_states=self.layers or self.final,
                          logits_to_keep=logits_to_keep)
        states = out.hidden_states if self.layers else None
        final = out.hidden_states[-1][:, -out.logits.shape[1]:] if self.final else None
        return out.logits, states, final


def keep_columns(cache: DynamicCache, start: int, keep: list[int]) -> None:
    """Keep cached positions 0..start-1 and start + keep (ascending), drop the rest. A chain
    keeps a prefix (a crop); a tree's path moves its columns to start, start + 1, ..."""
    if keep != list(range(len(keep))):
        src = torch.tensor(keep, dtype=torch.long, device=cache.layers[0].keys.device) + start
        for layer in cache.layers:
            layer.keys[:, :, start:start + len(keep)] = layer.keys[:, :, src]   # (N, Hkv, a+1, D)
            layer.values[:, :, start:start + len(keep)] = layer.values[:, :, src]
    extra = cache.get_seq_length() - (start + len(keep))
    if extra > 0:
        cache.crop(-extra)


class Sequence:
    """One sequence being decoded: the target's KV cache, the tokens committed, and the context
    the drafter has not read yet (features of committed tokens, and the tokens themselves).
    layers: the drafter's target_layer_ids (None: no drafter, no features kept)."""

    def __init__(self, input_ids, max_new_tokens: int, stop_ids=(), layers=None, draft_cache=None):
        self.prompt, self.max_new, self.stops, self.layers = input_ids, max_new_tokens, set(stop_ids), layers
        self.cache, self.draft_cache = DynamicCache(), draft_cache
        self.new, self.drafted, self.accepted, self.verified = [], [], [], []
        self.features = self.context_ids = None           # not yet read by the drafter

    def prefill(self, forward, pick) -> None:
        """The target reads the prompt once: its first token, and the prompt's features."""
        logits, states, final = forward(self.prompt, self.cache, logits_to_keep=1)
        self.token = pick(logits[:, -1:], final)[:, 0]                         # (1,)
        self.start = torch.tensor([self.prompt.shape[1]], device=self.prompt.device)  # t's position
        if self.layers is not None:
            self.features, self.context_ids = target_features(states, self.layers), self.prompt
        self.new, self.drafted = [int(self.token)], [False]
        self.stopped = self.new[0] in self.stops

    def active(self) -> bool:
        return len(self.new) < self.max_new and not self.stopped

    def attention(self, W: int):
        return None                      # one sequence: the causal mask is all a chain needs

    def tokens(self) -> list[int]:
        """The new tokens, cut at max_new_tokens and after the first stop token (kept): a step
        commits whole, so the last one may run past either."""
        new = self.new[:self.max_new]
        return new[:next((i + 1 for i, t in enumerate(new) if t in self.stops), len(new))]

    def context(self) -> dict:
        """What the drafter reads: t at its position, the features it has not seen, its cache."""
        features, ids, self.features, self.context_ids = self.features, self.context_ids, None, None
        return {"last_token": self.token, "target_hidden": features, "start": int(self.start),
                "cache": self.draft_cache, "context_ids": ids}

    def commit(self, draft, outcome: Outcome, states) -> None:
        """Keep t and the accepted drafts in the cache; their features become the drafter's."""
        kept, start = outcome.kept[0], int(self.start)
        keep_columns(self.cache, start, kept)
        committed = draft.ids[0, kept[1:]].tolist() + [int(outcome.bonus[0])]
        if self.layers is not None:      # a draft that skipped the drafter leaves its own unread
            h, ids = target_features(states, self.layers)[:, kept], draft.ids[:, kept]
            self.features = h if self.features is None else torch.cat([self.features, h], 1)
            self.context_ids = ids if self.context_ids is None else torch.cat([self.context_ids, ids], 1)
        self.new += committed
        self.stopped = not self.stops.isdisjoint(committed)
        self.drafted += [True] * (len(kept) - 1) + [False]
        self.accepted.append(len(kept))
        self.verified.append(draft.ids.shape[1] - 1)
        self.token, self.start = outcome.bonus, self.start + len(kept)


def generate(state, propose, forward, pick, on_step=None):
    """Decode until the state says stop: prefill, then propose -> verify -> accept -> commit."""
    state.prefill(forward, pick)
    while state.active():
        draft = propose(state)                                         # 1. the drafter's guesses
        logits, states, final = forward(draft.ids, state.cache, **draft.inputs(state))  # 2. one pass
        outcome = draft.walk(logits, final, pick)                      # 3. what the target agrees with
        if on_step is not None:
            on_step(state, draft, outcome, logits)
        state.commit(draft, outcome, states)                           # 4. keep it, feed the drafter
    return state

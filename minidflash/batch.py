"""Ragged batches: the bookkeeping that lets N requests share one KV cache (paper section 3,
batched; the serving engines' setting, not the reference code's).

Every verify step appends B columns to a batch's cache, but row i keeps only its own a_i + 1 of
them: rows grow at different speeds. minidflash keeps ONE transformers ``DynamicCache`` for the
whole batch plus a boolean ``valid`` (N, L): column j of row i holds one of that row's committed
tokens iff ``valid[i, j]``. Everything else is a *hole*: the prompt's left padding, drafts that
row rejected, the padding of a row's new context. The rules:

* a hole is never attended to: ``valid`` extended by the new block IS the 2D ``attention_mask``
  that transformers takes (its causal rule compares columns, which stay in each row's order);
* positions are per row, never a column index: row i's next token sits at ``start_i``, the number
  of tokens it has committed, whatever column it lands in (RoPE sees ``position_ids``);
* the columns after the longest row's last kept token are holes in every row: cropped at once;
* ``compact`` packs each row's valid columns to the right, in order (one stable sort of
  ``valid`` and a gather of every layer's keys and values), when that shrinks the cache by at
  least ``COMPACT_AT`` of its width. After it the cache is the left-padded layout of a plain
  batched ``generate``, as wide as the longest row;
* a finished row leaves the batch (``keep_rows``): it costs no compute from the next step on.

A worked example (3 rows, B = 4; ``.`` a hole, ``x`` a committed token)::

    prefill, lengths 3, 2, 3:   x x x           valid = the left-padded attention_mask
                                . x x
                                x x x
    a verify appends B = 4 columns; the rows keep 2, 3, 1 of them; crop to the longest (3):
                                x x x x x .
                                . x x x x x
                                x x x x . .
    compact (pack right):       x x x x x       width 5: the longest row
                                x x x x x
                                . x x x x

The drafter's context cache follows the same rules with its own ``valid``: its new context of
a step (the a_i + 1 committed tokens' features) is ``right_align``-ed, its padding masked.

The alternative this replaces, and why: *crop every row to the shortest row and feed the longer
rows' surplus again* needs no mask for the rejected drafts, but re-runs the target on tokens it
has already seen, every step, for every row ahead of the slowest one (notebook 12 counts it).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from .core.drafter import target_features
from .core.verifier import keep_columns

COMPACT_AT = 0.25     # compact when packing would drop at least this share of the cache width


def left_pad(prompts, pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch from prompts of different lengths, each (S_i,) or (1, S_i): (ids, attention_mask),
    both (N, S), left-padded (what a tokenizer with ``padding_side="left"`` returns)."""
    rows = [torch.as_tensor(p).reshape(-1) for p in prompts]
    S = max(len(r) for r in rows)
    ids = torch.full((len(rows), S), pad_id, dtype=torch.long, device=rows[0].device)
    mask = torch.zeros((len(rows), S), dtype=torch.long, device=rows[0].device)
    for i, r in enumerate(rows):
        ids[i, S - len(r):] = r
        mask[i, S - len(r):] = 1
    return ids, mask


def prompt_positions(mask: torch.Tensor) -> torch.Tensor:
    """Position of every column of a left-padded prompt: mask (N, S) -> (N, S), the first real
    token of each row at 0 (padding columns get 0 too; they are never attended to)."""
    return (mask.long().cumsum(1) - 1).clamp(min=0)


def pack_right(valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Where each row's valid columns go when packed to the right, in order.

    valid (N, L) bool -> (index (N, W), packed (N, W)) with W the most valid columns of any row:
    ``x.gather(1, index)`` holds row i's valid entries in its last n_i columns, and ``packed``
    says which columns those are. A stable sort puts holes (False) first and keeps the order.
    """
    n = valid.sum(1)                                                          # (N,)
    W = int(n.max()) if valid.numel() else 0
    order = torch.sort(valid.to(torch.uint8), dim=1, stable=True).indices     # (N, L) holes first
    index = order[:, valid.shape[1] - W:]                                     # (N, W)
    packed = torch.arange(W, device=valid.device) >= (W - n)[:, None]         # (N, W)
    return index, packed


def right_align(x: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (N, L, ...) with valid (N, L) -> (x packed, (N, W, ...)), packed valid (N, W)): each
    row's valid entries at its end, in order. The drafter's new context is right-aligned so
    that its positions can run up to each row's own ``start`` (holes get junk, masked)."""
    index, packed = pack_right(valid)
    idx = index.view(*index.shape, *([1] * (x.dim() - 2))).expand(-1, -1, *x.shape[2:])
    return x.gather(1, idx), packed


def check_cache(cache) -> None:
    """A ragged batch gathers columns of plain full-attention layers only."""
    sliding = [i for i, layer in enumerate(getattr(cache, "layers", [])) if layer.is_sliding]
    if sliding:
        raise ValueError(f"cache layers {sliding} use a sliding window: batched decoding with "
                         f"ragged rows supports full-attention targets only; decode one row at a "
                         f"time (input_ids of shape (1, S)).")


def compact(cache, valid: torch.Tensor, at: float | None = None) -> torch.Tensor:
    """Pack every row of ``cache`` to the right when that drops at least ``at`` (default
    ``COMPACT_AT``) of its L columns; returns the new valid (N, W) (or ``valid`` unchanged).

    Every layer's keys and values (N, Hkv, L, D) are gathered along L with ``pack_right``'s
    index, so each row keeps its tokens in order and the holes between them go.
    """
    at = COMPACT_AT if at is None else at
    L = valid.shape[1]
    W = int(valid.sum(1).max()) if valid.numel() else 0
    if L == 0 or L - W == 0 or L - W < at * L:
        return valid
    index, packed = pack_right(valid)                                         # (N, W)
    for layer in cache.layers:
        if layer.get_seq_length() == 0:
            continue
        Hkv, D = layer.keys.shape[1], layer.keys.shape[3]
        idx = index[:, None, :, None].expand(-1, Hkv, -1, D)                  # (N, Hkv, W, D)
        layer.keys, layer.values = layer.keys.gather(2, idx), layer.values.gather(2, idx)
    return packed


def keep_rows(cache, rows: torch.Tensor) -> None:
    """Drop every row of ``cache`` not in rows (sorted (n,) indices): finished rows leave."""
    cache.batch_select_indices(rows)


class Batch:
    """The core loop's state for N sequences at once (core/verifier.py's ``Sequence``, ragged):
    one target cache and one drafter cache with their ``valid`` columns, per-row positions
    ``start`` (n,), finished rows dropped before the next step. ``rows`` are the active rows'
    original indices; ``new``, ``accepted``, ``drafted``, ``verified`` are kept per original row.
    on_end(i) is told when row i decodes its last token."""

    def __init__(self, input_ids, mask, max_new_tokens: int, stop_ids=(), layers=None,
                 draft_cache=None, on_end=None):
        self.ids, self.mask, self.max_new, self.stops = input_ids, mask, max_new_tokens, set(stop_ids)
        self.layers, self.draft_cache, self.on_end = layers, draft_cache, on_end or (lambda i: None)
        self.cache, N = DynamicCache(), input_ids.shape[0]
        self.lengths = mask.sum(1).tolist()                                   # prompt lengths
        self.accepted, self.verified = [[] for _ in range(N)], [[] for _ in range(N)]
        self.seen = None                         # the drafter's context mask of this step

    def prefill(self, forward, pick) -> None:
        """Every row's prompt in one pass; padding columns are holes from the start."""
        logits, states, final = forward(self.ids, self.cache, logits_to_keep=1,
                                        attention_mask=self.mask.long(),
                                        position_ids=prompt_positions(self.mask))
        check_cache(self.cache)
        self.token = pick(logits[:, -1:], final)[:, 0]                        # (N,)
        self.valid, N = self.mask, self.ids.shape[0]     # (n, L) target columns of committed tokens
        if self.layers is not None:                      # features (n, C, L_f*H), their mask (n, C)
            self.features, self.fresh = target_features(states, self.layers), self.mask
            self.draft_valid = self.mask[:, :0]                               # (n, 0): empty
        self.new, self.drafted = [[t] for t in self.token.tolist()], [[False] for _ in range(N)]
        self.rows, self.start = list(range(N)), torch.tensor(self.lengths, device=self.ids.device)
        self.live = [k for k in self.rows if self.new[k][0] not in self.stops and self.max_new > 1]

    def active(self) -> bool:
        """True while a row decodes; finished rows leave the batch first (their cache rows go)."""
        if self.live and len(self.live) < len(self.rows):
            idx = torch.tensor(self.live, dtype=torch.long, device=self.ids.device)
            self.rows = [self.rows[k] for k in self.live]
            self.token, self.start = self.token[idx], self.start[idx]
            keep_rows(self.cache, idx)
            self.valid = compact(self.cache, self.valid[idx])
            if self.layers is not None:
                keep_rows(self.draft_cache, idx)
                self.draft_valid = compact(self.draft_cache, self.draft_valid[idx])
                self.features, self.fresh = self.features[idx], self.fresh[idx]
        return bool(self.live)

    def attention(self, W: int) -> torch.Tensor:
        """The verify pass's 2D mask: each row's committed columns, then its W new ones."""
        return torch.cat([self.valid, self.valid.new_ones(len(self.rows), W)], 1).long()

    def context(self) -> dict:
        """What the drafter reads: every row's t, its new features, their holes masked."""
        self.seen = torch.cat([self.draft_valid, self.fresh], 1)                # (n, Ld + C)
        return {"last_token": self.token, "target_hidden": self.features, "start": self.start,
                "cache": self.draft_cache, "context_mask": self.seen}

    def commit(self, draft, outcome, states) -> None:
        """Row k keeps t, d_1..d_a_k: crop what no row kept, compact, right-align the features."""
        if self.seen is not None:             # the drafter appended this step's context
            self.draft_valid, self.seen = compact(self.draft_cache, self.seen), None
        W, L = draft.ids.shape[1], self.valid.shape[1]
        a = torch.tensor([len(k) - 1 for k in outcome.kept], device=draft.ids.device)  # (n,)
        kept, width = torch.arange(W, device=a.device) <= a[:, None], int(a.max()) + 1  # (n, W)
        keep_columns(self.cache, L, list(range(width)))  # crop what no row kept: a prefix of W
        self.valid = compact(self.cache, torch.cat([self.valid, kept[:, :width]], 1))
        if self.layers is not None:
            features = target_features(states, self.layers)[:, :width]
            self.features, self.fresh = right_align(features, kept[:, :width])  # (n, C, L_f*H)
        a_list, blocks, bonus, self.live = a.tolist(), draft.ids.tolist(), outcome.bonus.tolist(), []
        lengths = None if draft.lengths is None else draft.lengths.tolist()
        for k, i in enumerate(self.rows):
            committed = blocks[k][1:a_list[k] + 1] + [bonus[k]]
            self.new[i] += committed
            self.drafted[i] += [True] * a_list[k] + [False]
            self.accepted[i].append(a_list[k] + 1)
            self.verified[i].append(W - 1 if lengths is None else lengths[k])
            if self.stops.isdisjoint(committed) and len(self.new[i]) < self.max_new:
                self.live.append(k)
            else:
                self.on_end(i)
        self.token, self.start = outcome.bonus, self.start + a + 1

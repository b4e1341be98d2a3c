"""Speculative decoding with a DFlash drafter: draft a block, verify it, keep what agrees.

Paper section 3 (inference). One step, with B the block size and t the last committed token:

1. Draft   d_1..d_{B-1} = argmax drafter([t, MASK, ..., MASK] | context features)   (1 pass)
2. Verify  y_0..y_{B-1} = target's own choice after [t, d_1, ..., d_{B-1}]          (1 pass)
           (argmax when greedy; a sample from softmax(logits / T) at temperature T > 0)
3. Accept  a = max{ k : d_j = y_{j-1} for all j <= k },  commit d_1..d_a and the bonus y_a.

Every committed token is the target's own choice given a prefix of committed tokens, so the
output is *identical* to plain greedy decoding, and at T > 0 *identically distributed* to plain
sampling (each emitted token is a target sample; the drafter only decides how many of them one
target pass can certify). Tokens per step a + 1 is at most B; tau is its mean.

After a step the target's KV cache is cropped back to the committed tokens, and the hidden
states the verify pass computed for them become the drafter's next context: nothing is ever
recomputed. ``block_size=1`` skips the drafter: plain autoregressive decoding through the same
code, the paper's baseline. Every timestamp is read by ``clock``, after a CUDA synchronise, so a
pass's GPU time lands in its own bucket (prefill, draft, verify).

The confidence cut (``p_min``, llama.cpp's ``--spec-draft-p-min``): with q_j the drafter's
probability of its own token at slot j, only d_1..d_m go to the verify pass, m the number of
leading slots with q_j >= p_min (m = 0: a plain decode step). On a CPU a verify pass over k
tokens costs more the larger k is, so tokens the drafter itself doubts are cheaper left out. The
cut reads the drafter's outputs only, never the target's, so it changes how many tokens a step
can certify, not which: greedy output stays identical and sampling exact. A drafter's files may
carry its default (``decoding.json``, ``drafter.decoding``). ``cost`` (verify_cost.py) instead
picks the m with the most expected tokens per unit of measured time, and skips the drafter for a
while (plain steps) where no m pays; both may be on at once (m is the smaller). The files may
also name a tree of drafts (tree.py), which a call then verifies instead of the chain.

Many requests at once (``speculative_generate_batch``): input_ids (N, S), left-padded, with an
attention_mask, as transformers' ``generate`` takes them. Each row accepts its own a_i + 1
tokens per step (*ragged acceptance*), so after one step the rows have different lengths. The
scheme kept (batch.py): ONE cache for the batch, padded, with a per-row ``valid`` mask that is
the attention mask (holes: padding and each row's rejected drafts), per-row positions, a crop to
the longest row after every verify, compaction when holes make the cache a quarter too wide, and
finished rows dropped from the batch. Each row's tokens are exactly what that prompt alone
decodes (greedy), or a sample from the same distribution (T > 0).

The front door: ``speculative_generate(target, drafter, input_ids, config, **fields)`` and its
batch twin take one ``DecodingConfig`` (settings.py; None: the drafter's decoding.json), any of
its fields as keywords over it, and a ``generator`` for sampling. ``decoding.prepare`` merges
and checks them once; the loops below read the resolved config and nothing else.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from . import batch as ragged
from .ar_drafter import ARDrafter
from .decoding import (GenerationResult, choose, clock, crop_cache, prepare, result, target_pass,
                       tie_head)
from .core.drafter import target_features
from .decoding_config import DecodingConfig
from .tree import tree_generate
from .verify_cost import Trust, confident_prefix


def accepted_lengths(block: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """a per row: how many drafts agree with the target before the first that does not.
    block (N, B) = [t, d_1..d_{B-1}], y (N, B) the target's choices -> (N,)."""
    return (block[:, 1:] == y[:, :-1]).long().cumprod(1).sum(1)


def draft_block(drafter, target, token, hidden, start, cache, B, p_min, want=False, **context):
    """[t, d_1..d_{B-1}] from one draft, and q (N, B-1) (None unless p_min > 0 or want).

    The drafter's chain or block comes back whole; ``verify_lengths`` decides how much of it
    the target verifies. An autoregressive drafter is told p_min so that its chain stops after
    the first doubtful token: the passes it would spend after it are saved too.
    """
    want = want or p_min > 0
    kwargs = {"with_probs": True} if want else {}
    if want and isinstance(drafter, ARDrafter):
        kwargs["p_min"] = p_min
    out = drafter.draft(target, token, hidden, start, cache, B, **context, **kwargs)
    guess, q = out if want else (out, None)
    return torch.cat([token.view(-1, 1), guess], dim=1), q                    # (N, <=B), (N, <=B-1)


def verify_lengths(q: torch.Tensor, cfg: DecodingConfig, trust: Trust | None = None):
    """m per row, how many leading drafts the target verifies: those before the cut (q < p_min),
    then as many of them as pay on the cost curve. q (N, k) -> (m (N,), the first row's expected
    tokens per unit of time, or None without a cost model)."""
    m = (confident_prefix(q, cfg.p_min) if cfg.p_min > 0
         else torch.full((q.shape[0],), q.shape[1], dtype=torch.long, device=q.device))
    if not cfg.cost:
        return m, None
    picks = [cfg.cost.best_length(q[i, :int(m[i])], trust.value if trust else 1.0)
             for i in range(q.shape[0])]
    return torch.tensor([n for n, _ in picks], device=q.device), picks[0][1]


def accept(block: torch.Tensor, logits: torch.Tensor, temperature: float, generator=None,
           hidden=None, head=None):
    """The acceptance rule. block (1, B) = [t, d_1..d_{B-1}], logits (1, B, V) of the target.

    The target picks y_j at every position (argmax, or a sample at T > 0); d_j is accepted while
    d_j == y_{j-1}. Returns (a, committed = [d_1..d_a, y_a], y (1, B)). With a one-hot draft this
    is speculative sampling exactly: d_j is accepted with probability p(d_j), and after a
    rejection y_{j-1} ~ p restricted to tokens != d_j, renormalised. hidden, head: see
    ``decoding.choose``.
    """
    y = choose(logits, temperature, generator, hidden, head)                   # (1, B)
    a = int(accepted_lengths(block, y)[0])
    return a, block[0, 1:a + 1].tolist() + [int(y[0, a])], y


@torch.inference_mode()
def speculative_generate(target, drafter, input_ids: torch.Tensor,
                         config: DecodingConfig | None = None, *,
                         generator: torch.Generator | None = None, **fields) -> GenerationResult:
    """Decode after input_ids (1, S) with draft -> verify -> accept: the front door.

    config: a ``DecodingConfig`` (None: the drafter's decoding.json, what a plain call runs);
    any of its fields as a keyword overrides it (``max_new_tokens=64, block_size=4``, tree=False:
    a chain, block_size=1: plain decoding). At temperature > 0 the target samples with
    ``generator``; the drafter always drafts greedily. A tree goes to ``tree.tree_generate``.
    """
    cfg = prepare(target, drafter, input_ids, config, fields, generator=generator)
    if cfg.tree:
        return tree_generate(target, drafter, input_ids, cfg, generator)
    B, T, device = cfg.block_size, cfg.temperature, input_ids.device
    head = tie_head(target, cfg)                     # None: fp32, sampling, or not asked
    layers = drafter.target_layer_ids if B > 1 else None
    # 1. Prefill: the target reads the prompt once; its first token and its features.
    t0, cache = clock(device), DynamicCache()
    logits, states, last = target_pass(target, input_ids, cache, B > 1, head is not None, 1,
                                       lean=cfg.lean, exact=cfg.rows)
    token = choose(logits[:, -1:], T, generator, last, head)[:, 0]            # (1,)
    hidden = target_features(states, layers) if B > 1 else None               # (1, S, L_f*H)
    draft_cache = drafter.new_cache() if B > 1 else None
    t1 = clock(device)
    new, drafted, lengths, steps, verified = [int(token)], [False], [], [], []
    times = {"prefill": t1 - t0, "draft": 0.0, "verify": 0.0}
    context_ids, start = input_ids, input_ids.shape[1]   # features in `hidden`; `token`'s position
    skip = wait = 0                                      # plain steps after drafts that did not pay
    trust = Trust(cfg.cost.trust_weight) if cfg.cost and cfg.cost.trust_weight else None
    stops, done = set(cfg.stop_token_ids), new[0] in cfg.stop_token_ids
    while len(new) < cfg.max_new_tokens and not done:
        # 2. Draft B-1 tokens in one drafter pass; keep the leading m the cut and cost allow.
        ts, fed = clock(device), B > 1 and not wait
        block, q = token.view(1, 1), None
        if fed:
            block, q = draft_block(drafter, target, token, hidden, start, draft_cache, B,
                                   cfg.p_min, bool(cfg.cost), context_ids=context_ids)
            m, rate = verify_lengths(q, cfg, trust) if q is not None else ([B - 1], None)
            if rate is not None:
                skip = wait = cfg.cost.next_skip(rate, skip)
            drafts, block = block, block[:, :1 + int(m[0])]                   # (1, m+1)
        wait -= not fed and wait > 0
        # 3. Verify the block in one target pass.
        tv = clock(device)
        pos = torch.arange(start, start + block.shape[1], device=device)[None]
        logits, states, last = target_pass(target, block, cache, B > 1, head is not None,
                                           lean=cfg.lean, exact=cfg.rows, position_ids=pos)
        te = clock(device)
        # 4. Accept the longest agreeing prefix, plus the target's bonus token.
        a, committed, choice = accept(block, logits, T, generator, last, head)
        if trust and fed:
            trust.update(q[0], block.shape[1] - 1, a, drafts[0], choice[0])
        if cfg.record_steps:
            steps.append(step_record(start, block[0].tolist(), choice[0].tolist(), a, logits[0],
                                     T, q, drafts if fed else None))
        new += committed
        done = not stops.isdisjoint(committed)
        drafted += [True] * a + [False]
        lengths.append(a + 1)
        verified.append(block.shape[1] - 1)
        token, start = choice[:, a], start + a + 1
        crop_cache(cache, start)                  # keep t, d_1..d_a; the bonus is not fed yet
        if B > 1:         # the drafter's next context; a skipped draft leaves its own unread
            h, ids = target_features(states, layers)[:, :a + 1], block[:, :a + 1]
            hidden = h if fed else torch.cat([hidden, h], 1)
            context_ids = ids if fed else torch.cat([context_ids, ids], 1)
        times["draft"] += tv - ts
        times["verify"] += te - tv
    times["decode"] = clock(device) - t1
    return result(input_ids, new, cfg, lengths, drafted, times, steps=steps, verified=verified)


def check_batch(input_ids, attention_mask) -> torch.Tensor:
    """The batch's attention mask as (N, S) bool, checked: left padding, a token in every row
    (the drafter, a DFlash one, is checked by ``decoding.check_call``)."""
    N, S = input_ids.shape
    if attention_mask is None:
        return torch.ones(N, S, dtype=torch.bool, device=input_ids.device)
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != input_ids.shape:
        raise ValueError(f"attention_mask must have input_ids' shape {tuple(input_ids.shape)}, got "
                         f"{getattr(attention_mask, 'shape', type(attention_mask).__name__)}.")
    if not ((attention_mask == 0) | (attention_mask == 1)).all():
        raise ValueError("attention_mask must hold 0 (padding) and 1 (token) only.")
    mask = attention_mask.bool()
    if (mask[:, 1:] < mask[:, :-1]).any():
        raise ValueError("attention_mask is not left-padded (a row has padding after a token): "
                         "pad on the left, e.g. tokenizer.padding_side = 'left', or batch.left_pad.")
    if not mask[:, -1].all():
        empty = (~mask[:, -1]).nonzero()[:, 0].tolist()
        raise ValueError(f"rows {empty[:5]} of the batch are empty: give every prompt at least one "
                         f"token.")
    return mask


@torch.inference_mode()
def speculative_generate_batch(target, drafter, input_ids: torch.Tensor,
                               config: DecodingConfig | None = None, *,
                               attention_mask: torch.Tensor | None = None,
                               generator: torch.Generator | None = None,
                               **fields) -> list[GenerationResult]:
    """N requests at once: input_ids (N, S), left-padded, attention_mask (N, S) (None: no
    padding). One result per row, as ``speculative_generate`` would return for that prompt
    alone: the same tokens when greedy, the same distribution at T > 0. Settings as
    ``speculative_generate``'s; a batch verifies chains (a drafter's default tree gives way,
    one asked for is refused; ``result.config.describe(...)`` says which ran).

    Each step drafts every active row's block in one drafter pass and verifies all blocks in one
    target pass; row i commits its own a_i + 1 tokens. The caches are ragged (batch.py). Timings
    are the batch's: a row's draft and verify time sum the steps it took part in; its decode
    time runs from the prefill's end to its own last step. A cut or cost model gives each row
    its own m_i: the verify pass is as wide as the longest, a row accepts at most its own m_i;
    the batch never skips the drafter (its rows would disagree on when).
    """
    cfg = prepare(target, drafter, input_ids, config, fields, batch=True, generator=generator)
    mask = check_batch(input_ids, attention_mask)                             # (N, S) bool
    B, T, device, (N, S) = cfg.block_size, cfg.temperature, input_ids.device, input_ids.shape
    head, layers = tie_head(target, cfg), drafter.target_layer_ids if cfg.block_size > 1 else None
    stops, lengths = set(cfg.stop_token_ids), mask.sum(1)                   # (N,) prompt lengths
    # 1. Prefill every row; padding columns are holes from the start.
    t0, cache = clock(device), DynamicCache()
    logits, states, last = target_pass(target, input_ids, cache, B > 1, head is not None, 1,
                                       lean=cfg.lean, exact=cfg.rows, attention_mask=mask.long(),
                                       position_ids=ragged.prompt_positions(mask))
    ragged.check_cache(cache)
    token = choose(logits[:, -1:], T, generator, last, head)[:, 0]            # (N,)
    valid = mask                                  # (n, L): target cache columns of committed tokens
    if B > 1:
        hidden, fresh = target_features(states, layers), mask                 # (n, C, L_f*H), (n, C)
        draft_cache, draft_valid = drafter.new_cache(), mask[:, :0]           # (n, 0): empty
    t1 = clock(device)
    new, drafted = [[t] for t in token.tolist()], [[False] for _ in range(N)]
    accepted, verified, steps = [[] for _ in range(N)], [[] for _ in range(N)], [[] for _ in range(N)]
    times = [{"prefill": t1 - t0, "draft": 0.0, "verify": 0.0, "end": t1} for _ in range(N)]
    rows, start = list(range(N)), lengths.clone()  # original index of each active row; positions
    live = [k for k in rows if new[k][0] not in stops and cfg.max_new_tokens > 1]
    while live:
        if len(live) < len(rows):                 # finished rows leave the batch
            idx = torch.tensor(live, dtype=torch.long, device=device)
            rows, token, start = [rows[k] for k in live], token[idx], start[idx]
            ragged.keep_rows(cache, idx)
            valid = ragged.compact(cache, valid[idx])
            if B > 1:
                ragged.keep_rows(draft_cache, idx)
                draft_valid = ragged.compact(draft_cache, draft_valid[idx])
                hidden, fresh = hidden[idx], fresh[idx]
        n = len(rows)
        # 2. Draft every row's block in one drafter pass; the new context's holes are masked.
        ts, block, m = clock(device), token.view(n, 1), None
        if B > 1:
            seen = torch.cat([draft_valid, fresh], 1)                         # (n, Ld + C)
            block, q = draft_block(drafter, target, token, hidden, start, draft_cache, B,
                                   cfg.p_min, bool(cfg.cost), context_mask=seen)  # (n, B)
            if q is not None:             # each row its own m; the pass as wide as the widest
                m = verify_lengths(q, cfg)[0]
                block = block[:, :1 + int(m.max())]                           # (n, W)
            draft_valid = ragged.compact(draft_cache, seen)
        # 3. Verify all blocks in one target pass, each at its row's own positions.
        tv, L, W = clock(device), valid.shape[1], block.shape[1]
        pos = start[:, None] + torch.arange(W, device=device)                # (n, W)
        visible = torch.cat([valid, valid.new_ones(n, W)], 1)                 # (n, L + W)
        logits, states, last = target_pass(target, block, cache, B > 1, head is not None,
                                           lean=cfg.lean, exact=cfg.rows, attention_mask=visible.long(),
                                           position_ids=pos)
        te = clock(device)
        # 4. Accept per row (at most its own m); keep t, d_1..d_a, crop what no row kept, compact.
        choice = choose(logits, T, generator, last, head)                     # (n, W)
        a = accepted_lengths(block, choice)                                   # (n,)
        a = a if m is None else torch.minimum(a, m)
        kept, width = torch.arange(W, device=device) <= a[:, None], int(a.max()) + 1   # (n, W)
        crop_cache(cache, L + width)
        valid = ragged.compact(cache, torch.cat([valid, kept[:, :width]], 1))
        if B > 1:
            features = target_features(states, layers)[:, :width]
            hidden, fresh = ragged.right_align(features, kept[:, :width])     # (n, C, L_f*H)
        a_list, blocks, choices, live = a.tolist(), block.tolist(), choice.tolist(), []
        for k, i in enumerate(rows):
            committed = blocks[k][1:a_list[k] + 1] + [choices[k][a_list[k]]]
            w = W if m is None else 1 + int(m[k])       # this row's own block: t, d_1..d_m
            new[i] += committed
            drafted[i] += [True] * a_list[k] + [False]
            accepted[i].append(a_list[k] + 1)
            verified[i].append(w - 1)
            times[i]["draft"] += tv - ts
            times[i]["verify"] += te - tv
            if cfg.record_steps:
                steps[i].append(step_record(int(start[k]), blocks[k][:w], choices[k][:w],
                                            a_list[k], logits[k, :w], T))
            if stops.isdisjoint(committed) and len(new[i]) < cfg.max_new_tokens:
                live.append(k)
            else:
                times[i]["end"] = clock(device)
        token, start = choice.gather(1, a[:, None])[:, 0], start + a + 1      # (n,) bonus tokens
    # 5. One result per row: its own prompt (no padding), cut at max_new_tokens and a stop.
    return [result(input_ids[i:i + 1, S - int(lengths[i]):], new[i], cfg, accepted[i],
                   drafted[i], dict(times[i], decode=times[i]["end"] - t1), steps=steps[i],
                   verified=verified[i]) for i in range(N)]


def step_record(start: int, block: list, choice: list, a: int, logits, temperature, q=None,
                drafts=None) -> dict:
    """One step of one row as ``record_steps`` keeps it (logits (B, V) of that row): the
    drafts, the target's choices, a, and at T > 0 the probability that the target's sample
    equals each draft token; with q, every draft before the cut and the drafter's q of each."""
    step = {"start": start, "draft": block[1:], "target": choice, "accepted": a, "p_draft": None}
    if temperature > 0:
        probs = torch.softmax(logits[:-1].float() / temperature, -1)
        step["p_draft"] = probs.gather(-1, torch.tensor(block[1:], device=logits.device)[:, None]
                                       )[:, 0].tolist()
    if q is not None and drafts is not None:
        step["q"], step["uncut"] = q[0].tolist(), drafts[0, 1:].tolist()
    return step

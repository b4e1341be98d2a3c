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
carry its default (``decoding.json``, ``drafter.p_min``). ``cost`` (verify_cost.py) instead
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
decodes (greedy), or a sample from the same distribution (T > 0). A batch of one row takes the
single-sequence loop below, unchanged.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from transformers import DynamicCache

from . import batch as ragged
from .ar_drafter import ARDrafter
from .decoding import GenerationResult, cache_kwargs, clock, crop_cache, greedy_choice, tie_head
from .drafter import DFlashDrafter, check_fits, target_features
from .settings import DecodingConfig
from .tree import tree_generate
from .verify_cost import Trust, VerifyCost, confident_prefix, for_threads


def _choose(logits: torch.Tensor, temperature: float, generator, hidden=None,
            head=None) -> torch.Tensor:
    """The target's token at every position: logits (N, T, V) -> (N, T).

    Greedy: the argmax, a bf16 near-tie decided in fp32 when the final hidden states (N, T, H)
    and the lm_head are given (``decoding.greedy_choice``).
    At T > 0 an exact sample of softmax(logits / T) by inverse CDF: one uniform u per position,
    the first token whose cumulative probability exceeds u. One cumsum over (N, T, V) instead
    of ``torch.multinomial``, which cost as much as a whole draft.
    """
    if temperature == 0:
        return greedy_choice(logits, hidden, head)
    cdf = torch.softmax(logits.float() / temperature, dim=-1).cumsum(-1)      # (N, T, V)
    u = torch.rand(cdf.shape[:-1] + (1,), generator=generator, device=cdf.device)
    token = torch.searchsorted(cdf, u * cdf[..., -1:], right=True)            # (N, T, 1)
    return token[..., 0].clamp(max=cdf.shape[-1] - 1)


def accepted_lengths(block: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """a per row: how many drafts agree with the target before the first that does not.
    block (N, B) = [t, d_1..d_{B-1}], y (N, B) the target's choices -> (N,)."""
    return (block[:, 1:] == y[:, :-1]).long().cumprod(1).sum(1)


def draft_block(drafter, target, token, hidden, start, cache, B, p_min, want=False, **context):
    """[t, d_1..d_{B-1}] from one draft, and q (N, B-1) (None unless p_min > 0 or want).

    The drafter's chain or block comes back whole; ``confident_prefix`` decides how much of it
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


def accept(block: torch.Tensor, logits: torch.Tensor, temperature: float, generator=None,
           hidden=None, head=None):
    """The acceptance rule. block (1, B) = [t, d_1..d_{B-1}], logits (1, B, V) of the target.

    The target picks y_j at every position (argmax, or a sample at T > 0); d_j is accepted while
    d_j == y_{j-1}. Returns (a, committed = [d_1..d_a, y_a], y (1, B)). With a one-hot draft this
    is speculative sampling exactly: d_j is accepted with probability p(d_j), and after a
    rejection y_{j-1} ~ p restricted to tokens != d_j, renormalised. hidden, head: see
    ``_choose``.
    """
    y = _choose(logits, temperature, generator, hidden, head)                  # (1, B)
    a = int(accepted_lengths(block, y)[0])
    return a, block[0, 1:a + 1].tolist() + [int(y[0, a])], y


def _settings(target, drafter, config, batch: bool = False, **given) -> DecodingConfig:
    """The one DecodingConfig a call runs: ``config`` (None: the drafter's decoding.json) with
    the call's own arguments over it, block size and tree resolved. A batch verifies chains: a
    default tree is not used there, one asked for is refused."""
    if batch and given.get("tree"):
        raise ValueError("a tree decodes one sequence at a time: pass tree=False (or None) for a "
                         "batch, whose rows verify chains.")
    settings = (config or DecodingConfig.of(drafter)).override(**given).resolve(drafter)
    if batch and settings.tree:
        settings = replace(settings, tree=None)
    return settings


def _cost(target, drafter, settings: DecodingConfig) -> VerifyCost | None:
    """The cost model of a call: the drafter's curve for the target's dtype and torch's thread
    count (cost=True), the one given, or None."""
    if settings.block_size == 1 or not settings.cost:
        return None
    if isinstance(settings.cost, VerifyCost):
        return settings.cost
    if not getattr(drafter, "costs", None):
        raise ValueError("cost=True prices verify lengths on the drafter's measured curve, and "
                         "its decoding.json carries none: `python -m minidflash budget curve`, "
                         "then `budget cost`, or pass a VerifyCost.")
    return for_threads(drafter.costs, dtype=target.dtype)


def _validate(target, drafter, input_ids, max_new_tokens, block_size):
    """What the settings cannot check alone (DecodingConfig checks its own fields): the prompt,
    the length, and the block against this drafter and target."""
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.dtype != torch.long:
        raise ValueError("input_ids must be a (N, S) LongTensor of token ids, e.g. "
                         "tokenizer(text, return_tensors='pt')['input_ids'].")
    if input_ids.shape[1] == 0:
        raise ValueError("The prompt is empty: give at least one token (e.g. the chat template's "
                         "generation prompt).")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}.")
    vocab = target.get_input_embeddings().weight.shape[0]
    if int(input_ids.min()) < 0 or int(input_ids.max()) >= vocab:
        raise ValueError(f"input_ids hold ids outside the target's vocabulary 0..{vocab - 1}: "
                         f"was the prompt tokenized with this target's tokenizer?")
    if block_size > 1:
        if drafter is None:
            raise ValueError("block_size > 1 needs a drafter; pass one or use block_size=1.")
        check_fits(drafter, target)
        limit = drafter.config.max_position_embeddings
        if block_size > drafter.block_size:
            raise ValueError(f"block_size {block_size} exceeds the drafter's trained block size "
                             f"{drafter.block_size}; use a block size in 2..{drafter.block_size}.")
        if input_ids.shape[1] + max_new_tokens + block_size > limit:
            raise ValueError(f"prompt + max_new_tokens + block_size exceeds the drafter's "
                             f"{limit} positions; shorten the prompt or max_new_tokens.")


@torch.inference_mode()
def speculative_generate(target, drafter: DFlashDrafter | None, input_ids: torch.Tensor,
                         max_new_tokens: int, block_size: int | None = None,
                         temperature: float | None = None, stop_token_ids=None,
                         generator: torch.Generator | None = None,
                         record_steps: bool | None = None,
                         attention_mask: torch.Tensor | None = None,
                         p_min: float | None = None, cost: VerifyCost | bool | None = None,
                         tree: dict | bool | None = None, fp32_ties: bool | None = None,
                         config: DecodingConfig | None = None
                         ) -> GenerationResult | list[GenerationResult]:
    """Decode up to max_new_tokens after input_ids (1, S) with draft -> verify -> accept.

    How: ``config`` (settings.DecodingConfig; None: the drafter's decoding.json, which a plain
    call runs), each of block_size, temperature, record_steps, p_min, cost, tree and fp32_ties
    that is given overriding its field (tree=False: a chain; block_size=1: plain decoding).
    Generation stops after the first stop token (which is kept). At temperature > 0 the target
    samples with ``generator``; the drafter always drafts greedily.

    With an attention_mask, input_ids is a batch (N, S), left-padded, and the answer is a list
    of N results, one per row: ``speculative_generate_batch`` (chains only).
    """
    given = dict(block_size=block_size, temperature=temperature, record_steps=record_steps,
                 p_min=p_min, cost=cost, tree=tree, fp32_ties=fp32_ties)
    if attention_mask is not None:
        return speculative_generate_batch(target, drafter, input_ids, max_new_tokens,
                                          attention_mask, stop_token_ids=stop_token_ids,
                                          generator=generator, config=config, **given)
    settings = _settings(target, drafter, config, **given)
    block_size, temperature, p_min = settings.block_size, settings.temperature, settings.p_min
    record_steps, fp32_ties = settings.record_steps, settings.fp32_ties
    _validate(target, drafter, input_ids, max_new_tokens, block_size)
    cost = _cost(target, drafter, settings)
    if settings.tree:
        return tree_generate(target, drafter, input_ids, max_new_tokens, block_size,
                             settings.tree["node_budget"], settings.tree["top_k"], temperature,
                             stop_token_ids, generator, cost=cost, fp32_ties=fp32_ties)
    if input_ids.shape[0] != 1:
        raise ValueError(f"speculative_generate decodes one sequence at a time without an "
                         f"attention_mask, got a batch of {input_ids.shape[0]}: pass the "
                         f"tokenizer's attention_mask (left padding) for one result per row.")
    B, device = block_size, input_ids.device
    stops = set(int(t) for t in (stop_token_ids or []))
    layer_ids = drafter.target_layer_ids if B > 1 else None
    head = tie_head(target, temperature, fp32_ties)      # None: fp32, sampling, or not asked
    states = B > 1 or head is not None                   # the passes return hidden states
    last = lambda out, n: out.hidden_states[-1][:, -n:] if head is not None else None

    # 1. Prefill: the target reads the prompt once; its first token and its features.
    t0 = clock(device)
    cache = DynamicCache()
    out = target(input_ids=input_ids, **cache_kwargs(target, cache),
                 output_hidden_states=states, logits_to_keep=1)
    token = _choose(out.logits[:, -1:], temperature, generator, last(out, 1), head)[:, 0]  # (1,)
    hidden = target_features(out.hidden_states, layer_ids) if B > 1 else None  # (1, S, L_f*H)
    draft_cache = drafter.new_cache() if B > 1 else None
    t1 = clock(device)

    new = [int(token)]
    drafted, lengths, steps, verified = [False], [], [], []
    draft_time = verify_time = 0.0
    context_ids = input_ids                       # the tokens whose features are in `hidden`
    start = input_ids.shape[1]                    # position of `token`, the block's slot 0
    done = new[0] in stops
    skip = wait = 0                               # plain steps after drafts that did not pay
    trust = Trust(cost.trust_weight) if cost and cost.trust_weight else None
    while len(new) < max_new_tokens and not done:
        # 2. Draft B-1 tokens in one drafter pass; keep the confident prefix d_1..d_m.
        ts = clock(device)
        block, q, fed = token.view(1, 1), None, B > 1 and not wait
        if fed:
            block, q = draft_block(drafter, target, token, hidden, start, draft_cache, B, p_min,
                                   want=bool(cost), context_ids=context_ids)   # (1, B)
            m = int(confident_prefix(q, p_min)[0]) if p_min > 0 else B - 1
            if cost:
                m, rate = cost.best_length(q[0, :m], trust.value if trust else 1.0)
                skip = wait = cost.next_skip(rate, skip)
            drafts, block = block, block[:, :1 + m]                           # (1, m+1)
        wait -= not fed and wait > 0
        tv = clock(device)
        # 3. Verify the block in one target pass.
        pos = torch.arange(start, start + block.shape[1], device=device)[None]
        out = target(input_ids=block, position_ids=pos, **cache_kwargs(target, cache),
                     output_hidden_states=states)
        te = clock(device)
        # 4. Accept the longest agreeing prefix, plus the target's bonus token.
        a, committed, choice = accept(block, out.logits, temperature, generator,
                                      last(out, block.shape[1]), head)
        if trust and fed:
            trust.update(q[0], m, a, drafts[0], choice[0])
        if record_steps:
            step = _step_record(start, block[0].tolist(), choice[0].tolist(), a, out.logits[0],
                                temperature)
            if q is not None:     # all B-1 drafts before the cut, and the drafter's q of each
                step["q"], step["uncut"] = q[0].tolist(), drafts[0, 1:].tolist()
            steps.append(step)
        new += committed
        done = not stops.isdisjoint(committed)
        drafted += [True] * a + [False]
        lengths.append(a + 1)
        verified.append(block.shape[1] - 1)
        token = choice[:, a]
        start += a + 1
        crop_cache(cache, start)                          # keep t, d_1..d_a; the bonus is not fed yet
        if B > 1:         # the drafter's next context; a skipped draft leaves its own unread
            h, ids = target_features(out.hidden_states, layer_ids)[:, :a + 1], block[:, :a + 1]
            hidden = h if fed else torch.cat([hidden, h], 1)
            context_ids = ids if fed else torch.cat([context_ids, ids], 1)
        draft_time += tv - ts
        verify_time += te - tv

    # 5. Cut at max_new_tokens and after the first stop token.
    new = new[:max_new_tokens]
    hits = [i for i, t in enumerate(new) if t in stops]
    if hits:
        new = new[:hits[0] + 1]
    t2 = clock(device)
    output_ids = torch.cat([input_ids, torch.tensor([new], dtype=torch.long, device=device)], 1)
    return GenerationResult(output_ids=output_ids, prompt_length=input_ids.shape[1],
                            acceptance_lengths=lengths, drafted=drafted[:len(new)],
                            prefill_time=t1 - t0, draft_time=draft_time, verify_time=verify_time,
                            decode_time=t2 - t1, block_size=B, steps=steps, verified=verified)


def _validate_batch(drafter, input_ids, attention_mask, block_size) -> torch.Tensor:
    """The batch's attention mask as (N, S) bool, checked: left padding, a token in every row."""
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
    if block_size > 1 and not isinstance(drafter, DFlashDrafter):
        raise ValueError(f"a batch needs the DFlash drafter: {type(drafter).__name__} drafts one "
                         f"row at a time; call speculative_generate on each prompt (1, S) "
                         f"without an attention_mask.")
    return mask


@torch.inference_mode()
def speculative_generate_batch(target, drafter: DFlashDrafter | None, input_ids: torch.Tensor,
                               max_new_tokens: int, attention_mask: torch.Tensor | None = None,
                               block_size: int | None = None, temperature: float = 0.0,
                               stop_token_ids=None, generator: torch.Generator | None = None,
                               record_steps: bool | None = None, p_min: float | None = None,
                               cost: VerifyCost | bool | None = None,
                               fp32_ties: bool | None = None, tree=None,
                               config: DecodingConfig | None = None) -> list[GenerationResult]:
    """N requests at once: input_ids (N, S), left-padded, attention_mask (N, S) (None: no
    padding). One result per row, as ``speculative_generate`` would return for that prompt
    alone: the same tokens when greedy, the same distribution at T > 0.

    Each step drafts every active row's block in one drafter pass and verifies all blocks in one
    target pass; row i commits its own a_i + 1 tokens. The caches are ragged (batch.py): one
    padded cache per model, a per-row ``valid`` mask that is the attention mask, per-row
    positions ``start`` (N,), compaction when holes pile up, and rows that hit a stop token or
    max_new_tokens leave the batch. Timings are the batch's: a row's draft and verify time sum
    the steps it took part in; its decode time runs from the prefill's end to its own last step.
    With a confidence cut each row keeps its own m_i drafts: the verify pass is as wide as the
    longest row's m + 1, and a row accepts at most its own m_i. A cost model picks each row's
    m_i the same way; the batch never skips the drafter (its rows would disagree on when).
    Settings as ``speculative_generate``'s; a batch verifies chains (a tree is refused).
    """
    settings = _settings(target, drafter, config, batch=True, block_size=block_size,
                         temperature=temperature, record_steps=record_steps, p_min=p_min,
                         cost=cost, tree=tree, fp32_ties=fp32_ties)
    block_size, temperature, p_min = settings.block_size, settings.temperature, settings.p_min
    record_steps, fp32_ties = settings.record_steps, settings.fp32_ties
    _validate(target, drafter, input_ids, max_new_tokens, block_size)
    cost = _cost(target, drafter, settings)
    mask = _validate_batch(drafter, input_ids, attention_mask, block_size)   # (N, S) bool
    B, device = block_size, input_ids.device
    N, S = input_ids.shape
    stops = set(int(t) for t in (stop_token_ids or []))
    layer_ids = drafter.target_layer_ids if B > 1 else None
    lengths = mask.sum(1)                                                    # (N,) prompt lengths
    head = tie_head(target, temperature, fp32_ties)
    states = B > 1 or head is not None
    last = lambda out, n: out.hidden_states[-1][:, -n:] if head is not None else None

    # 1. Prefill every row; padding columns are holes from the start.
    t0 = clock(device)
    cache = DynamicCache()
    out = target(input_ids=input_ids, attention_mask=mask.long(),
                 position_ids=ragged.prompt_positions(mask), **cache_kwargs(target, cache),
                 output_hidden_states=states, logits_to_keep=1)
    ragged.check_cache(cache)
    token = _choose(out.logits[:, -1:], temperature, generator, last(out, 1), head)[:, 0]  # (N,)
    valid = mask                                  # (n, L): target cache columns of committed tokens
    if B > 1:
        hidden, fresh = target_features(out.hidden_states, layer_ids), mask   # (n, C, L_f*H), (n, C)
        draft_cache, draft_valid = drafter.new_cache(), mask[:, :0]           # (n, 0): empty
    t1 = clock(device)

    new = [[t] for t in token.tolist()]
    drafted = [[False] for _ in range(N)]
    accepted = [[] for _ in range(N)]
    verified = [[] for _ in range(N)]
    steps = [[] for _ in range(N)]
    times = [{"draft": 0.0, "verify": 0.0, "end": t1} for _ in range(N)]
    rows = list(range(N))                         # original index of each active row
    start = lengths.clone()                       # (n,) position of each row's `token`
    live = [k for k in rows if new[k][0] not in stops and max_new_tokens > 1]
    while True:
        # Finished rows leave the batch: no more compute for them.
        if len(live) < len(rows):
            idx = torch.tensor(live, dtype=torch.long, device=device)
            rows, token, start = [rows[k] for k in live], token[idx], start[idx]
            if not rows:
                break
            ragged.keep_rows(cache, idx)
            valid = ragged.compact(cache, valid[idx])
            if B > 1:
                ragged.keep_rows(draft_cache, idx)
                draft_valid = ragged.compact(draft_cache, draft_valid[idx])
                hidden, fresh = hidden[idx], fresh[idx]
        n = len(rows)
        # 2. Draft every row's block in one drafter pass; the new context's holes are masked.
        ts = clock(device)
        block, m = token.view(n, 1), None
        if B > 1:
            seen = torch.cat([draft_valid, fresh], 1)                         # (n, Ld + C)
            block, q = draft_block(drafter, target, token, hidden, start, draft_cache, B, p_min,
                                   want=bool(cost), context_mask=seen)        # (n, B)
            if p_min > 0 or cost:               # each row its own m; the pass as wide as the widest
                m = confident_prefix(q, p_min) if p_min > 0 else q.new_full((n,), B - 1).long()
                if cost:
                    m = torch.tensor([cost.best_length(q[i, :int(m[i])])[0] for i in range(n)],
                                     device=device)
                block = block[:, :1 + int(m.max())]                           # (n, W)
            draft_valid = ragged.compact(draft_cache, seen)
        tv = clock(device)
        # 3. Verify all blocks in one target pass, each at its row's own positions.
        L, W = valid.shape[1], block.shape[1]
        pos = start[:, None] + torch.arange(W, device=device)                # (n, W)
        visible = torch.cat([valid, valid.new_ones(n, W)], 1)                 # (n, L + W)
        out = target(input_ids=block, attention_mask=visible.long(), position_ids=pos,
                     **cache_kwargs(target, cache), output_hidden_states=states)
        te = clock(device)
        # 4. Accept per row (at most its own m); keep t, d_1..d_a, crop what no row kept, compact.
        choice = _choose(out.logits, temperature, generator, last(out, W), head)  # (n, W)
        a = accepted_lengths(block, choice)                                   # (n,)
        if m is not None:
            a = torch.minimum(a, m)
        kept = torch.arange(W, device=device) <= a[:, None]                   # (n, W)
        width = int(a.max()) + 1
        crop_cache(cache, L + width)
        valid = ragged.compact(cache, torch.cat([valid, kept[:, :width]], 1))
        if B > 1:
            features = target_features(out.hidden_states, layer_ids)[:, :width]
            hidden, fresh = ragged.right_align(features, kept[:, :width])     # (n, C, L_f*H)
        a_list, blocks, choices = a.tolist(), block.tolist(), choice.tolist()
        live = []
        for k, i in enumerate(rows):
            committed = blocks[k][1:a_list[k] + 1] + [choices[k][a_list[k]]]
            new[i] += committed
            drafted[i] += [True] * a_list[k] + [False]
            accepted[i].append(a_list[k] + 1)
            w = W if m is None else 1 + int(m[k])       # this row's own block: t, d_1..d_m
            verified[i].append(w - 1)
            times[i]["draft"] += tv - ts
            times[i]["verify"] += te - tv
            if record_steps:
                steps[i].append(_step_record(int(start[k]), blocks[k][:w], choices[k][:w],
                                             a_list[k], out.logits[k, :w], temperature))
            if stops.isdisjoint(committed) and len(new[i]) < max_new_tokens:
                live.append(k)
            else:
                times[i]["end"] = clock(device)
        token = choice.gather(1, a[:, None])[:, 0]                            # (n,) bonus tokens
        start = start + a + 1

    # 5. One result per row: its own prompt (no padding), cut at max_new_tokens and a stop.
    results = []
    for i in range(N):
        ids = new[i][:max_new_tokens]
        hits = [j for j, t in enumerate(ids) if t in stops]
        ids = ids[:hits[0] + 1] if hits else ids
        prompt = input_ids[i:i + 1, S - int(lengths[i]):]
        output_ids = torch.cat([prompt, torch.tensor([ids], dtype=torch.long, device=device)], 1)
        results.append(GenerationResult(
            output_ids=output_ids, prompt_length=prompt.shape[1], acceptance_lengths=accepted[i],
            drafted=drafted[i][:len(ids)], prefill_time=t1 - t0, draft_time=times[i]["draft"],
            verify_time=times[i]["verify"], decode_time=times[i]["end"] - t1, block_size=B,
            steps=steps[i], verified=verified[i]))
    return results


def _step_record(start: int, block: list, choice: list, a: int, logits, temperature) -> dict:
    """One step of one row as ``record_steps`` keeps it (logits (B, V) of that row): the
    drafts, the target's choices, a, and at T > 0 the probability that the target's sample
    equals each draft token."""
    step = {"start": start, "draft": block[1:], "target": choice, "accepted": a, "p_draft": None}
    if temperature > 0:
        probs = torch.softmax(logits[:-1].float() / temperature, -1)
        step["p_draft"] = probs.gather(-1, torch.tensor(block[1:], device=logits.device)[:, None]
                                       )[:, 0].tolist()
    return step

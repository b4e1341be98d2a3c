"""The front door: ``speculative_generate`` and ``speculative_generate_batch``.

The method itself, one decode loop with seams, is ``core/verifier.py``; read it first. These two
functions resolve one ``DecodingConfig`` (decoding_config.py; None: the drafter's decoding.json,
any of its fields as a keyword over it) with ``prepare.prepare``, then build the loop's seams
from it, and nothing else:

* the proposer: the core's chain of a block (``BlockProposer``), plain decoding's proposal of
  nothing, a tree (``tree.TreeProposer``), or either chain inside the confidence cut and the cost
  model (``verify_cost.Budgeted``); the AR rival drafts through the same chain proposer;
* the forward: ``decoding.TargetPass`` (transformers' forward, the lean pass or exact mode),
  and in a lean decode the drafter's products packed once (``lean_drafter.drafting``);
* the pick: ``decoding.Pick`` (greedy with bf16 near-ties decided in fp32, or a sample);
* the state: the core's ``Sequence``, or a ragged batch (``batch.Batch``);
* on_step: the timings (``decoding.Stopwatch``), the trust of a cost model, the step records.
"""

from __future__ import annotations

import torch

from .core.verifier import BlockProposer, Sequence, generate
from .batch import Batch
from .decoding import GenerationResult, Pick, Stopwatch, TargetPass, result, tie_head
from .prepare import prepare
from .decoding_config import DecodingConfig
from .lean_drafter import drafting
from .tree import TreeProposer
from .verify_cost import Budgeted


def seams(target, drafter, cfg: DecodingConfig, generator, device, batch: bool = False):
    """propose, forward, pick and a Stopwatch for one resolved config; the stopwatch times the
    proposer and the forward from outside the loop."""
    head = tie_head(target, cfg)                     # None: fp32, sampling, or not asked
    B = cfg.block_size
    if cfg.tree:
        propose = TreeProposer(target, drafter, B, cfg.tree["node_budget"], cfg.tree["top_k"],
                               cfg.cost)
    else:
        budget = B > 1 and (cfg.p_min > 0 or bool(cfg.cost))
        propose = BlockProposer(target, drafter if B > 1 else None, B, with_probs=budget)
        propose = Budgeted(propose, cfg, batch) if budget else propose
    watch = Stopwatch(device)
    forward = TargetPass(target, B > 1, head is not None, cfg.lean, cfg.rows)
    return (watch.timed(propose, "draft"), watch.timed(forward, "verify"),
            Pick(cfg.temperature, generator, head), watch, propose)


@torch.inference_mode()
def speculative_generate(target, drafter, input_ids: torch.Tensor,
                         config: DecodingConfig | None = None, *,
                         generator: torch.Generator | None = None, **fields) -> GenerationResult:
    """Decode after input_ids (1, S) with draft -> verify -> accept: the front door.

    config: a ``DecodingConfig`` (None: the drafter's decoding.json, what a plain call runs);
    any of its fields as a keyword overrides it (``max_new_tokens=64, block_size=4``, tree=False:
    a chain, block_size=1: plain decoding). At temperature > 0 the target samples with
    ``generator``; the drafter always drafts greedily.
    """
    cfg = prepare(target, drafter, input_ids, config, fields, generator=generator)
    propose, forward, pick, watch, proposer = seams(target, drafter, cfg, generator, input_ids.device)
    B, records = cfg.block_size, []

    def on_step(state, draft, outcome, logits):
        if isinstance(proposer, Budgeted):
            proposer.learn(draft, outcome)
        if cfg.record_steps and outcome.choices is not None:
            q, uncut = proposer.last if isinstance(proposer, Budgeted) and proposer.last else (None, None)
            records.append(step_record(int(state.start), draft.ids[0].tolist(),
                                       outcome.choices[0].tolist(), len(outcome.kept[0]) - 1,
                                       logits[0], cfg.temperature, q, uncut))

    state = Sequence(input_ids, cfg.max_new_tokens, cfg.stop_token_ids,
                     drafter.target_layer_ids if B > 1 else None,
                     drafter.new_cache() if B > 1 else None)
    with drafting(drafter, cfg.lean and B > 1, cfg.draft_int8):
        generate(state, propose, forward, pick, on_step)
    return result(input_ids, state.new, cfg, state.accepted, state.drafted, watch.total(),
                  steps=records, verified=state.verified)


def check_batch(input_ids, attention_mask) -> torch.Tensor:
    """The batch's attention mask as (N, S) bool, checked: left padding, a token in every row
    (the drafter, a DFlash one, is checked by ``prepare.check_call``)."""
    N, S = input_ids.shape
    if attention_mask is None:
        return torch.ones(N, S, dtype=torch.bool, device=input_ids.device)
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != input_ids.shape:
        raise ValueError(f"attention_mask must have input_ids' shape {tuple(input_ids.shape)}, got "
                         f"{getattr(attention_mask, 'shape', type(attention_mask).__name__)}.")
    if attention_mask.device.type == "meta":
        raise ValueError(f"attention_mask {tuple(attention_mask.shape)} is a tensor on the meta "
                         f"device, which holds no values: give the tokenizer's mask.")
    if not ((attention_mask == 0) | (attention_mask == 1)).all():
        bad = attention_mask[(attention_mask != 0) & (attention_mask != 1)].unique()[:5].tolist()
        raise ValueError(f"attention_mask must hold 0 (padding) and 1 (token) only, got {bad}.")
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

    The core's loop runs with a ragged state (``batch.Batch``): each step drafts every active
    row's block in one drafter pass and verifies all blocks in one target pass; row i commits its
    own a_i + 1 tokens. Timings are the batch's: a row's draft and verify time sum the steps it
    took part in; its decode time runs from the prefill's end to its own last step. A cut or cost
    model gives each row its own m_i (``verify_cost.Budgeted``).
    """
    cfg = prepare(target, drafter, input_ids, config, fields, batch=True, generator=generator)
    mask = check_batch(input_ids, attention_mask)                             # (N, S) bool
    propose, forward, pick, watch, _ = seams(target, drafter, cfg, generator, input_ids.device,
                                             batch=True)
    B, N, S = cfg.block_size, *input_ids.shape
    times = [{"draft": 0.0, "verify": 0.0, "end": 0.0} for _ in range(N)]
    records = [[] for _ in range(N)]

    def on_step(state, draft, outcome, logits):
        lengths = draft.lengths.tolist() if draft.lengths is not None else None
        for k, i in enumerate(state.rows):
            times[i]["draft"] += watch.step["draft"]
            times[i]["verify"] += watch.step["verify"]
            if cfg.record_steps:
                w = draft.ids.shape[1] if lengths is None else 1 + lengths[k]
                records[i].append(step_record(int(state.start[k]), draft.ids[k, :w].tolist(),
                                              outcome.choices[k, :w].tolist(),
                                              len(outcome.kept[k]) - 1, logits[k, :w],
                                              cfg.temperature))

    state = Batch(input_ids, mask, cfg.max_new_tokens, cfg.stop_token_ids,
                  drafter.target_layer_ids if B > 1 else None,
                  drafter.new_cache() if B > 1 else None, on_end=lambda i: times[i].update(end=watch.now()))
    with drafting(drafter, cfg.lean and B > 1, cfg.draft_int8):
        generate(state, propose, forward, pick, on_step)
    t1 = watch.prefilled
    return [result(input_ids[i:i + 1, S - state.lengths[i]:], state.new[i], cfg, state.accepted[i],
                   state.drafted[i], {"prefill": watch.times["prefill"], "draft": times[i]["draft"],
                                      "verify": times[i]["verify"],
                                      "decode": (times[i]["end"] or t1) - t1},
                   steps=records[i], verified=state.verified[i]) for i in range(N)]


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

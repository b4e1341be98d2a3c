"""The verify-budget tool: the cost curve covers k = 1..16 at every thread count, and the
calibration counts every drafted slot the target reached exactly once; a saved curve becomes a
drafter's cost model."""

import json

import pytest
import torch

from minidflash.decoding_config import DecodingConfig, decoding_of, set_decoding
from minidflash.checkpoints import load_drafter, save_drafter
from minidflash.target import chat_ids, load_target, stop_ids
from minidflash.tools.measure import budget
from minidflash.tools import common
from minidflash.verifier import speculative_generate
from minidflash.verify_cost import VerifyCost
from tests.helpers import random_drafter, tiny_target


@pytest.fixture(scope="module")
def tiny():
    target, tokenizer = load_target()
    return target, tokenizer, load_drafter(target=target)


def test_curve_covers_every_length_and_thread_count(tiny):
    target, _, drafter = tiny
    before = torch.get_num_threads()
    out = budget.curve_by_threads(target, drafter, [1, 2], rounds=1, context=16, max_k=16, repeats=1)
    assert torch.get_num_threads() == before
    for t in ("1", "2"):
        c = out[t]
        assert len(c["verify_ms"]) == 16 and min(c["verify_ms"]) > 0 and c["draft_ms"] > 0
        assert c["in_decode_steps"][0] == 1.0


def test_calibration_counts_each_reached_slot_once(tiny):
    target, tokenizer, drafter = tiny
    rows = common.suite_prompts("arithmetic", "dev", 2)
    cal = budget.calibration(target, tokenizer, drafter, rows, 40, block_size=8)
    # the same decodes, counted by hand: slot j is reached when slots 1..j-1 were accepted
    reached = accepted = steps = 0
    for row in rows:
        out = speculative_generate(target, drafter, chat_ids(tokenizer, row["messages"]),
                                   max_new_tokens=40, block_size=8,
                                   stop_token_ids=stop_ids(tokenizer), p_min=0.0,
                                   record_steps=True)
        steps += len(out.steps)
        for a in (step["accepted"] for step in out.steps):   # what the pass reached, not the cut
            reached += min(a + 1, 7)
            accepted += a
    assert sum(cal["reached"]) == reached and sum(cal["accepted"]) == accepted
    assert sum(s["reached"] for s in cal["slots"]) == reached
    assert all(0 <= s["all_accepted"] <= 1 and 0 < s["q_product"] <= 1 for s in cal["slots"])
    assert cal["slots"][0]["reached"] == steps                 # slot 1 is reached every step


def test_cost_writes_a_saved_curve_into_the_drafters_files(tmp_path):
    """`budget cost --from curve.json --drafter DIR`: the curves, per thread count, become the
    drafter's default cost model; its other settings stay."""
    target = tiny_target(4, vocab=97, layers=4)
    drafter = random_drafter(target, 4)
    set_decoding(drafter, DecodingConfig(p_min=0.3))
    save_drafter(drafter, tmp_path / "d")
    curve = {"threads": {"1": {"in_decode_steps": [1.0, 1.8, 2.2], "verify_ms": [10.0, 18, 22],
                               "draft_ms": 2.0},
                         "2": {"in_decode_steps": [1.0, 1.4, 1.5], "verify_ms": [6.0, 8.4, 9],
                               "draft_ms": 1.5}}}
    (tmp_path / "curve.json").write_text(json.dumps(curve))
    budget.main(["cost", "--from", str(tmp_path / "curve.json"), "--drafter", str(tmp_path / "d")])
    loaded = load_drafter(tmp_path / "d", target=target)
    assert DecodingConfig.of(loaded).p_min == 0.3
    assert decoding_of(loaded)[1] == {(None, 1): VerifyCost((1.0, 1.8, 2.2), 0.2),
                            (None, 2): VerifyCost((1.0, 1.4, 1.5), 0.25)}
    assert not list(tmp_path.glob("d/*.tmp"))
    budget.main(["cost", "--from", str(tmp_path / "curve.json"), "--drafter", str(tmp_path / "d"),
                 "--trust", "0.2"])
    again = load_drafter(tmp_path / "d", target=target)
    assert {c.trust_weight for c in decoding_of(again)[1].values()} == {0.2}
    with pytest.raises(ValueError, match="not a drafter folder"):
        budget.write_cost(tmp_path, decoding_of(loaded)[1])


def test_curve_of_a_published_shape_with_random_weights(tmp_path, monkeypatch):
    """--shape builds the target and drafter from shapes alone (here a small stand-in for
    Qwen3-8B's, in bf16) and measures passes up to --max-k tokens and one draft of its block."""
    small = dict(budget.QWEN3_8B, vocab_size=512, hidden_size=64, intermediate_size=128,
                 num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    monkeypatch.setitem(budget.SHAPES, "small", (small, dict(
        num_hidden_layers=2, target_layer_ids=[1, 3, 5], block_size=4, mask_token_id=511)))
    out = tmp_path / "curve.json"
    budget.main(["curve", "--shape", "small", "--dtype", "bfloat16", "--threads", "1",
                 "--max-k", "6", "--context", "32", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["target"] == "small, random weights" and saved["dtype"] == "bfloat16"
    assert len(saved["threads"]["1"]["verify_ms"]) == 6 and saved["threads"]["1"]["draft_ms"] > 0
    assert saved["threads"]["1"]["in_decode_steps"][0] == 1.0 and out.with_suffix(".png").exists()
    with pytest.raises(SystemExit):
        budget.main(["curve", "--shape", "small", "--target", "x"])

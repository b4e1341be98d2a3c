"""The decoding settings as one object (settings.DecodingConfig): loaded from a drafter's files,
overridden field by field, once, never one field making another illegal, round-tripped through
its text and decoding.json, refused when malformed, and said in words."""

import json
import math
import warnings

import pytest
import torch

from minidflash.checkpoints import load_drafter, save_drafter
from minidflash.decoding_config import DecodingConfig, decoding_of, set_decoding
from minidflash.tools.measure import methods
from minidflash.verifier import speculative_generate, speculative_generate_batch
from minidflash.verify_cost import VerifyCost, for_threads
from tests.helpers import random_drafter, tiny_target

TREE = {"node_budget": 15, "top_k": 2}
CURVE = VerifyCost((1.0, 1.5), 0.2)


class FakeDrafter:
    block_size = 8          # what the config reads of a drafter; its settings: set_decoding


def drafter(config=None, costs=None):
    d = FakeDrafter()
    set_decoding(d, config, costs)
    return d


def test_a_drafters_files_load_into_the_config():
    d = drafter(DecodingConfig(cost=True, tree=TREE), {(None, 1): CURVE})
    assert DecodingConfig.of(d) == DecodingConfig(cost=True, tree=TREE)
    assert DecodingConfig.of(None) == DecodingConfig(block_size=1)


def test_a_call_overrides_field_by_field_and_no_field_makes_another_illegal():
    default = DecodingConfig(cost=True, tree=TREE)
    assert default.override(block_size=4) == DecodingConfig(block_size=4, cost=True, tree=TREE)
    assert default.override(tree=False).tree is None
    assert DecodingConfig(tree=False) == DecodingConfig()              # False: a chain, as a keyword
    assert default.override(block_size=1).tree is None                 # plain decoding drafts nothing
    assert default.override(p_min=None, cost=None) == default           # None: keep the field
    assert default.override(cost=False).tree == TREE
    assert default.override(p_min=0.3) == DecodingConfig(p_min=0.3, cost=True)   # selects a chain
    assert default.override(record_steps=True).tree is None
    with pytest.raises(ValueError, match="a chain's"):                  # one config naming both
        DecodingConfig(tree=TREE, p_min=0.3)
    with pytest.raises(ValueError, match="unknown decoding settings"):
        default.override(blocksize=4)


def test_resolve_takes_the_drafters_block_size_and_tree():
    d = drafter(DecodingConfig(tree=TREE))
    assert DecodingConfig().resolve(d).block_size == 8
    assert DecodingConfig().override(tree=True).resolve(d).tree == TREE
    assert DecodingConfig(tree=True).resolve(d, batch=True).tree is None      # a batch: chains
    with pytest.raises(ValueError, match="has none"):
        DecodingConfig().override(tree=True).resolve(drafter())


@pytest.mark.parametrize("field,value,match", [
    ("block_size", 0, "block_size must be"), ("block_size", True, "block_size must be"),
    ("max_new_tokens", True, "max_new_tokens must be"), ("max_new_tokens", 0, "max_new_tokens"),
    ("p_min", 1.0, "p_min must be"), ("p_min", True, "p_min must be"),
    ("temperature", math.nan, "finite number"), ("temperature", -1, "finite number"),
    ("cost", [1.0, 2.0], "cost must be"), ("tree", {"node_budget": True, "top_k": 2}, "integers"),
    ("tree", {"node_budget": 10_000, "top_k": 2}, "over 128"), ("trust", 2.0, "trust must be"),
    ("fp32_ties", 1, "True or False"), ("stop_token_ids", torch.ones(2, 2, dtype=torch.long), "1-D"),
    ("stop_token_ids", "2", "token ids"), ("stop_token_ids", [1.5], "token ids"),
    ("draft_int8", 1, "draft_int8 must be"),
])
def test_malformed_settings_are_refused(field, value, match):
    with pytest.raises(ValueError, match=match):
        DecodingConfig(**{field: value})


def test_stop_ids_take_an_int_a_list_or_a_tensor():
    for stops in (2, [2], (2,), torch.tensor([2]), torch.tensor(2)):
        assert DecodingConfig(stop_token_ids=stops).stop_token_ids == (2,)


@pytest.mark.parametrize("text", [
    "plain", "dflash", "dflash:16", "dflash:16/p0.3", "dflash:8/p0.3/cost/trust0.5", "tree",
    "tree:8/n15/top8/cost", "dflash:4/T0.7", "plain/argmax", "dflash:8/steps", "tree/n31/top4/T1",
    "dflash:8/nolean", "dflash/int8", "tree:8/n15/top8/cost/noint8", "dflash:8/nolean/noint8"])
def test_the_text_is_the_config(text):
    assert str(DecodingConfig.parse(text)) == text
    config = DecodingConfig.parse(text)
    assert DecodingConfig.parse(str(config)) == config


@pytest.mark.parametrize("text", ["dflash:x", "plain:4", "tree:8/n15", "dflash:8/n15/top4",
                                  "dflash/q3", "ar:4", "dflash/p1.5", "dflash/int8x",
                                  "dflash/int8/noint8"])
def test_a_wrong_text_is_refused(text):
    with pytest.raises(ValueError):
        DecodingConfig.parse(text)


def test_decoding_json_round_trips(tmp_path):
    target = tiny_target(0, vocab=61, layers=2)
    d = random_drafter(target, 0, block_size=8)
    for config, costs in [(DecodingConfig(p_min=0.3), None),
                          (DecodingConfig(tree=TREE, cost=True, temperature=0.5), {(None, 1): CURVE}),
                          (DecodingConfig(), None)]:
        set_decoding(d, config, costs)
        save_drafter(d, tmp_path / "d")
        back = load_drafter(tmp_path / "d")
        assert decoding_of(back) == (config, costs)


@pytest.mark.parametrize("content,match", [
    ('{"p_min": 0.3', "not valid JSON"), ("", "not valid JSON"), ("[1, 2]", "JSON object"),
    ('{"pmin": 0.3}', "unknown keys"), ('{"p_min": 0.3, "tree": {"node_budget": 8, "top_k": 2}}',
                                        "a chain's"),
    ('{"tree": {"node_budget": 8}}', "a tree is"), ('{"max_new_tokens": 9}', "unknown keys")])
def test_a_broken_decoding_json_names_the_file(tmp_path, content, match):
    target = tiny_target(0, vocab=61, layers=2)
    save_drafter(random_drafter(target, 0, block_size=8), tmp_path / "d")
    (tmp_path / "d" / "decoding.json").write_text(content)
    with pytest.raises(ValueError, match=match) as err:
        load_drafter(tmp_path / "d")
    assert "decoding.json" in str(err.value)


def test_it_says_what_a_step_does():
    said = DecodingConfig(block_size=8, cost=True, tree=TREE).describe()
    assert "tree of up to 15 nodes" in said and "top 2" in said and "verify curve" in said
    assert "q < 0.3" in DecodingConfig(block_size=8, p_min=0.3).describe()
    assert "plain decoding" in DecodingConfig(block_size=1).describe()
    assert "temperature 0.7" in DecodingConfig(temperature=0.7).describe()


def test_it_says_what_this_target_and_drafter_run():
    target = tiny_target(0, vocab=61, layers=2)
    d = random_drafter(target, 0, block_size=8)
    set_decoding(d, DecodingConfig(tree=TREE, cost=True), {("bfloat16", 1): CURVE,
                                                          ("float32", 2): CURVE})
    said = DecodingConfig.of(d).describe(target, d)
    assert "fp32 logits: no ties" in said and "float32 curve at 2 thread" in said
    assert "bfloat16 near-ties decided in fp32" in DecodingConfig().describe(target.bfloat16(), d)
    assert "float16 near-ties" in DecodingConfig().describe(target.half(), d)
    said = DecodingConfig.of(d).describe(target.float(), d, batch=True)
    assert "chain" in said and "a batch verifies chains" in said
    with pytest.raises(ValueError, match="not in float16"):     # no other dtype's curve, silently
        for_threads(decoding_of(d)[1], dtype=torch.float16)


def test_a_keyword_over_a_config_warns_once_and_wins():
    target = tiny_target(0, vocab=61, layers=2)
    d = random_drafter(target, 0, block_size=4)
    ids = torch.randint(0, 60, (1, 4))
    with pytest.warns(UserWarning, match="max_new_tokens"):
        out = speculative_generate(target, d, ids, DecodingConfig(max_new_tokens=3), max_new_tokens=5)
    assert out.num_new_tokens == 5
    with warnings.catch_warnings():
        warnings.simplefilter("error")                   # the same value: nothing to warn about
        speculative_generate(target, d, ids, DecodingConfig(max_new_tokens=3), max_new_tokens=3)
    with pytest.raises(TypeError, match="max_new_tokens=64"):
        speculative_generate(target, d, ids, 64)
    with pytest.raises(TypeError, match="unknown decoding settings"):
        speculative_generate(target, d, ids, max_tokens=5)


def test_block_size_one_stays_inside_the_targets_context():
    target = tiny_target(0, vocab=61, layers=2)
    ids = torch.randint(0, 60, (1, 4))
    limit = target.config.max_position_embeddings
    with pytest.raises(ValueError, match="target's .* positions"):
        speculative_generate(target, None, ids, max_new_tokens=limit, block_size=1)
    with pytest.raises(ValueError, match="target's .* positions"):
        speculative_generate_batch(target, None, ids, max_new_tokens=limit, block_size=1)


def test_the_bench_names_its_methods_from_the_config():
    d = drafter(DecodingConfig(cost=True, tree=TREE), {(None, 1): CURVE})
    config = lambda spec: methods.config_of(methods.parse(spec), d)
    assert config("dflash") == DecodingConfig(cost=True, tree=TREE)
    assert config("dflash:8") == DecodingConfig(block_size=8)
    assert config("dflash:8/p0.3/cost") == DecodingConfig(block_size=8, p_min=0.3, cost=True)
    assert config("tree:8/n31/top4/cost") == DecodingConfig(
        block_size=8, cost=True, tree={"node_budget": 31, "top_k": 4})
    assert config("plain/bf16/argmax") == DecodingConfig(block_size=1, fp32_ties=False)
    assert config("ar:4").block_size == 5
    assert config("dflash:4/T0.7").temperature == 0.7

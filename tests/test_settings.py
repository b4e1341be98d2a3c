"""The decoding settings as one object (settings.DecodingConfig): loaded from a drafter's files,
overridden field by field, never one field silently switching another off, refused when
malformed, and said in words."""

import math
from types import SimpleNamespace

import pytest

from minidflash.settings import DecodingConfig
from minidflash.tools.measure import methods
from minidflash.verify_cost import VerifyCost

TREE = {"node_budget": 15, "top_k": 2}


def drafter(**files):
    return SimpleNamespace(block_size=8, p_min=files.get("p_min", 0.0),
                           costs=files.get("costs"), tree=files.get("tree"))


def test_a_drafters_files_load_into_the_config():
    d = drafter(costs={(None, 1): VerifyCost((1.0, 1.5), 0.2)}, tree=TREE)
    assert DecodingConfig.of(d) == DecodingConfig(cost=True, tree=TREE)
    assert DecodingConfig.of(drafter(p_min=0.3)) == DecodingConfig(p_min=0.3)
    assert DecodingConfig.of(None) == DecodingConfig(block_size=1)


def test_a_call_overrides_field_by_field_and_switches_nothing_off():
    default = DecodingConfig(cost=True, tree=TREE)
    assert default.override(block_size=4) == DecodingConfig(block_size=4, cost=True, tree=TREE)
    assert default.override(tree=False).tree is None
    assert default.override(block_size=1).tree is None             # plain decoding drafts nothing
    assert default.override(p_min=None, cost=None) == default       # None: keep the field
    assert default.override(cost=False).tree == TREE
    with pytest.raises(ValueError, match="a chain's"):
        default.override(p_min=0.3)
    with pytest.raises(ValueError, match="a chain's"):
        default.override(record_steps=True)
    assert default.override(tree=False, p_min=0.3).p_min == 0.3
    with pytest.raises(ValueError, match="unknown decoding settings"):
        default.override(blocksize=4)


def test_resolve_takes_the_drafters_block_size_and_tree():
    d = drafter(tree=TREE)
    assert DecodingConfig().resolve(d).block_size == 8
    assert DecodingConfig().override(tree=True).resolve(d).tree == TREE
    with pytest.raises(ValueError, match="has none"):
        DecodingConfig().override(tree=True).resolve(drafter())


@pytest.mark.parametrize("field,value,match", [
    ("block_size", 0, "block_size must be"), ("block_size", True, "block_size must be"),
    ("p_min", 1.0, "p_min must be"), ("p_min", True, "p_min must be"),
    ("temperature", math.nan, "finite number"), ("temperature", -1, "finite number"),
    ("cost", [1.0, 2.0], "cost must be"), ("tree", {"node_budget": True, "top_k": 2}, "integers"),
    ("fp32_ties", 1, "True or False"),
])
def test_malformed_settings_are_refused(field, value, match):
    with pytest.raises(ValueError, match=match):
        DecodingConfig(**{field: value})


def test_it_says_what_a_step_does():
    said = DecodingConfig(block_size=8, cost=True, tree=TREE).describe()
    assert "tree of up to 15 nodes" in said and "top 2" in said and "verify curve" in said
    assert "q < 0.3" in DecodingConfig(block_size=8, p_min=0.3).describe()
    assert "plain decoding" in DecodingConfig(block_size=1).describe()
    assert "temperature 0.7" in DecodingConfig(temperature=0.7).describe()


def test_the_bench_names_its_methods_from_the_config():
    d = drafter(costs={(None, 1): VerifyCost((1.0, 1.5), 0.2)}, tree=TREE)
    config = lambda spec: methods.config_of(methods.parse(spec), d)
    assert config("dflash") == DecodingConfig(cost=True, tree=TREE)
    assert config("dflash:8") == DecodingConfig(block_size=8)
    assert config("dflash:8/p0.3/cost") == DecodingConfig(block_size=8, p_min=0.3, cost=True)
    assert config("tree:8/n31/top4/cost") == DecodingConfig(
        block_size=8, cost=True, tree={"node_budget": 31, "top_k": 4})
    assert config("plain/bf16/argmax") == DecodingConfig(block_size=1, fp32_ties=False)
    assert config("ar:4").block_size == 5

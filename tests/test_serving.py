"""Serving what we train: the saved drafter carries what SGLang and vLLM read (README, 'serve
your drafter').

Each engine's reads are written down below as a table, with the file they come from (SGLang
0.5.23 and vLLM 0.33.0 wheels; z-lab/dflash 44947fb for its MLX loader). Both engines load
config.json through transformers' AutoConfig (model_type "qwen3"), so the config is also read
back that way, and the safetensors must hold exactly the published tensor names (vLLM raises on
an unexpected name; SGLang drops it silently, so a misnamed tensor would serve random weights).

Not in our files, on the command line: vLLM's ``num_speculative_tokens`` = block_size - 1 (it
does not read block_size); SGLang's ``--speculative-num-draft-tokens`` = block_size.
"""

import json
import numbers

import pytest
from safetensors.torch import load_file
from transformers import AutoConfig

from minidflash.checkpoints import save_drafter
from tests.helpers import published_names, random_drafter, tiny_target

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128,
        "rope_theta": 500000.0}

is_int = lambda v: isinstance(v, int) and not isinstance(v, bool)
positive = lambda v: is_int(v) and v >= 1
number = lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool)


def layer_ids_ok(v, cfg):
    return isinstance(v, list) and v and all(is_int(i) and 0 <= i < cfg["num_target_layers"] for i in v)


def mask_ok(v, cfg):
    return is_int(v) and 0 <= v < cfg["vocab_size"]


def layer_types_ok(v, cfg):
    return (isinstance(v, list) and len(v) == cfg["num_hidden_layers"]
            and all(t in ("full_attention", "sliding_attention") for t in v))


def rope_ok(v, cfg):
    return isinstance(v, dict) and number(v.get("rope_theta")) and isinstance(v.get("rope_type"), str)


def scaling_ok(v, cfg):  # the older spelling: absent for default RoPE, else rope_parameters less theta
    params = {k: x for k, x in cfg["rope_parameters"].items() if k != "rope_theta"}
    return v == (None if params.get("rope_type") == "default" else params)


# (key path in config.json, check(value, config) -> bool); every key must be present.
SGLANG = [
    # sglang/srt/models/dflash.py: EntryClass, resolved from architectures by the registry
    ("architectures", lambda v, c: v == ["DFlashDraftModel"]),
    # sglang/srt/speculative/dflash_utils.py parse_dflash_draft_config: dflash_config, then top
    ("block_size", lambda v, c: positive(v)),
    ("num_target_layers", lambda v, c: positive(v)),
    ("dflash_config.target_layer_ids", layer_ids_ok),
    # sglang/srt/speculative/dflash_worker_v2.py: an int >= 0, not a bool, < target vocabulary
    ("dflash_config.mask_token_id", mask_ok),
    # sglang/srt/models/dflash.py DFlashDraftModel
    ("hidden_size", lambda v, c: positive(v)),
    ("num_hidden_layers", lambda v, c: positive(v)),
    ("num_attention_heads", lambda v, c: positive(v)),
    ("num_key_value_heads", lambda v, c: positive(v)),
    ("head_dim", lambda v, c: positive(v)),
    ("intermediate_size", lambda v, c: positive(v)),
    ("rms_norm_eps", lambda v, c: number(v) and v > 0),
    ("attention_bias", lambda v, c: isinstance(v, bool)),
    ("hidden_act", lambda v, c: v == "silu"),
    ("max_position_embeddings", lambda v, c: positive(v)),
    # sglang/srt/models/dflash.py via get_rope_config: rope_parameters, else theta + scaling
    ("rope_parameters", rope_ok),
    ("rope_theta", lambda v, c: number(v) and v == c["rope_parameters"]["rope_theta"]),
    ("rope_scaling", scaling_ok),
    # sglang/srt/speculative/dflash_utils.py get_dflash_layer_types (sliding: sliding_window)
    ("layer_types", layer_types_ok),
]
VLLM = [
    # vllm/model_executor/models/registry.py: "DFlashDraftModel" -> qwen3_dflash
    ("architectures", lambda v, c: v == ["DFlashDraftModel"]),
    # vllm/model_executor/models/qwen3_dflash.py: captures target layers [i + 1 for i in ids]
    ("dflash_config.target_layer_ids", layer_ids_ok),
    # vllm/v1/spec_decode/llm_base_proposer.py: required, the proposer raises without it
    ("dflash_config.mask_token_id", mask_ok),
    # vllm/model_executor/models/qwen3_dflash.py DFlashQwen3Model
    ("hidden_size", lambda v, c: positive(v)),
    ("num_attention_heads", lambda v, c: positive(v)),
    ("num_key_value_heads", lambda v, c: positive(v)),
    ("head_dim", lambda v, c: positive(v)),
    ("intermediate_size", lambda v, c: positive(v)),
    ("hidden_act", lambda v, c: v == "silu"),
    ("rms_norm_eps", lambda v, c: number(v) and v > 0),
    ("attention_bias", lambda v, c: isinstance(v, bool)),
    ("max_position_embeddings", lambda v, c: positive(v)),
    ("vocab_size", lambda v, c: positive(v)),
    ("rope_parameters", rope_ok),   # via transformers; set_default_rope_theta(config, 1e6)
    ("layer_types", layer_types_ok),
]
ZLAB_MLX = [  # z-lab/dflash dflash/model_mlx.py load_draft: raw JSON, KeyError if missing
    (key, lambda v, c: v is not None) for key in [
        "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "head_dim", "intermediate_size", "vocab_size", "rms_norm_eps", "rope_theta",
        "max_position_embeddings", "block_size", "dflash_config.target_layer_ids",
        "num_target_layers", "dflash_config.mask_token_id"]]
ENGINES = {"sglang": SGLANG, "vllm": VLLM, "zlab_mlx": ZLAB_MLX}


def lookup(cfg, path):
    value = cfg
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(path)
        value = value[part]
    return value


@pytest.fixture(scope="module", params=["default_rope", "yarn_rope"])
def saved(request, tmp_path_factory):
    target = tiny_target(0, layers=6)
    if request.param == "yarn_rope":
        target.config.rope_parameters = dict(YARN)
    drafter = random_drafter(target, 0, layers=2, block_size=16)
    path = tmp_path_factory.mktemp(request.param) / "drafter"
    save_drafter(drafter, path)
    return drafter, path, json.loads((path / "config.json").read_text())


@pytest.mark.parametrize("engine", ENGINES)
def test_saved_config_carries_what_each_engine_reads(saved, engine):
    _, _, cfg = saved
    for key, check in ENGINES[engine]:
        try:
            value = lookup(cfg, key)
        except KeyError:
            pytest.fail(f"{engine} reads {key}, which our config.json lacks")
        assert check(value, cfg), f"{engine} reads {key} = {value!r}: wrong type or value"


def test_transformers_autoconfig_keeps_every_key(saved):
    """What both engines actually see: our config through AutoConfig (model_type qwen3)."""
    drafter, path, cfg = saved
    seen = AutoConfig.from_pretrained(path)
    assert seen.architectures == ["DFlashDraftModel"]
    assert seen.block_size == drafter.block_size and seen.num_target_layers == cfg["num_target_layers"]
    assert seen.dflash_config == {"mask_token_id": drafter.mask_token_id,
                                  "target_layer_ids": drafter.target_layer_ids}
    assert dict(seen.rope_parameters) == cfg["rope_parameters"] == dict(drafter.config.rope_parameters)
    assert seen.layer_types == ["full_attention"] * cfg["num_hidden_layers"]
    assert seen.sliding_window is None


def test_tensor_names_are_exactly_the_published_set(saved):
    drafter, path, cfg = saved
    assert sorted(p.name for p in path.iterdir()) == ["config.json", "model.safetensors"]
    tensors = load_file(str(path / "model.safetensors"))
    assert set(tensors) == published_names(cfg["num_hidden_layers"])
    assert tensors["fc.weight"].shape[1] == len(drafter.target_layer_ids) * cfg["hidden_size"]

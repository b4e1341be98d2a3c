"""The drafter's published format, its layer choice, and clear errors on bad input."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from minidflash.drafter import (DFlashDrafter, default_target_layer_ids, load_drafter,
                                make_drafter_config)
from minidflash.verifier import speculative_generate
from tests.helpers import random_drafter, tiny_target

PUBLISHED_NAMES = {"fc.weight", "hidden_norm.weight", "norm.weight"} | {
    f"layers.{{i}}.{n}.weight" for n in [
        "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "self_attn.q_norm", "self_attn.k_norm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
        "input_layernorm", "post_attention_layernorm"]}


def names_for(layers):
    return {n.replace("{i}", str(i)) for n in PUBLISHED_NAMES for i in range(layers)}


def test_target_layer_ids_formula():
    assert default_target_layer_ids(36, 5) == [1, 9, 17, 25, 33]      # Qwen3-4B / 8B
    assert default_target_layer_ids(36, 1) == [18]
    assert default_target_layer_ids(6, 3) == [1, 2, 3]


def test_round_trip_writes_exactly_the_published_format(tmp_path):
    target = tiny_target(0)
    d = random_drafter(target, 0, layers=2, block_size=8)
    d.save_pretrained(tmp_path / "d")
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["config.json", "model.safetensors"]
    cfg = json.loads((tmp_path / "d" / "config.json").read_text())
    assert cfg["architectures"] == ["DFlashDraftModel"] and cfg["model_type"] == "qwen3"
    assert cfg["block_size"] == 8 and cfg["num_target_layers"] == 4
    assert cfg["dflash_config"] == {"mask_token_id": 96, "target_layer_ids": d.target_layer_ids}
    assert set(load_file(str(tmp_path / "d" / "model.safetensors"))) == names_for(2)
    e = load_drafter(tmp_path / "d", target=target)
    for k, v in d.state_dict().items():
        assert torch.equal(v, e.state_dict()[k]), k
    ids = torch.randint(0, 96, (1, 6))
    assert torch.equal(speculative_generate(target, d, ids, 20).output_ids,
                       speculative_generate(target, e, ids, 20).output_ids)


def published_checkpoint(path, target, layers=2, block_in_dflash_config=False):
    """A checkpoint written by hand exactly as z-lab/Qwen3-8B-DFlash-b16 is laid out."""
    t = target.config
    config = {"architectures": ["DFlashDraftModel"], "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
              "model_type": "qwen3", "num_target_layers": t.num_hidden_layers,
              "num_hidden_layers": layers, "hidden_size": t.hidden_size,
              "intermediate_size": t.intermediate_size, "num_attention_heads": t.num_attention_heads,
              "num_key_value_heads": t.num_key_value_heads, "head_dim": t.head_dim,
              "rope_theta": 1000000, "rms_norm_eps": 1e-6, "max_position_embeddings": 512,
              "vocab_size": t.vocab_size, "tie_word_embeddings": False, "dtype": "bfloat16",
              "attention_bias": False, "hidden_act": "silu",
              "dflash_config": {"mask_token_id": t.vocab_size - 1, "target_layer_ids": [0, 2]}}
    if block_in_dflash_config:
        config["dflash_config"]["block_size"] = 10
    else:
        config["block_size"] = 16
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    H, D = t.hidden_size, t.head_dim
    shapes = {"fc.weight": (H, 2 * H), "hidden_norm.weight": (H,), "norm.weight": (H,)}
    for i in range(layers):
        p = f"layers.{i}."
        shapes.update({p + "self_attn.q_proj.weight": (t.num_attention_heads * D, H),
                       p + "self_attn.k_proj.weight": (t.num_key_value_heads * D, H),
                       p + "self_attn.v_proj.weight": (t.num_key_value_heads * D, H),
                       p + "self_attn.o_proj.weight": (H, t.num_attention_heads * D),
                       p + "self_attn.q_norm.weight": (D,), p + "self_attn.k_norm.weight": (D,),
                       p + "mlp.gate_proj.weight": (t.intermediate_size, H),
                       p + "mlp.up_proj.weight": (t.intermediate_size, H),
                       p + "mlp.down_proj.weight": (H, t.intermediate_size),
                       p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,)})
    g = torch.Generator().manual_seed(0)
    tensors = {k: (torch.randn(s, generator=g) * 0.02).to(torch.bfloat16) for k, s in shapes.items()}
    save_file(tensors, str(path / "model.safetensors"))
    return tensors


@pytest.mark.parametrize("inner", [False, True])
def test_loads_published_layout_without_remote_code(tmp_path, inner):
    target = tiny_target(1)
    tensors = published_checkpoint(tmp_path / "z", target, block_in_dflash_config=inner)
    d = load_drafter(tmp_path / "z", target=target)
    assert d.block_size == (10 if inner else 16) and d.target_layer_ids == [0, 2]
    assert d.mask_token_id == target.config.vocab_size - 1
    assert torch.equal(d.state_dict()["fc.weight"], tensors["fc.weight"].float())
    ids = torch.randint(0, 96, (1, 5))
    assert torch.equal(speculative_generate(target, d, ids, 12).output_ids,
                       speculative_generate(target, None, ids, 12, block_size=1).output_ids)


def test_missing_tensor_fails_clearly(tmp_path):
    target = tiny_target(1)
    tensors = published_checkpoint(tmp_path / "z", target)
    del tensors["layers.1.mlp.up_proj.weight"]
    save_file(tensors, str(tmp_path / "z" / "model.safetensors"))
    with pytest.raises(ValueError, match=r"missing \['layers.1.mlp.up_proj.weight'\]"):
        load_drafter(tmp_path / "z")


def test_unexpected_tensor_fails_clearly(tmp_path):
    target = tiny_target(1)
    tensors = published_checkpoint(tmp_path / "z", target)
    tensors["lm_head.weight"] = torch.zeros(3, 3)
    save_file(tensors, str(tmp_path / "z" / "model.safetensors"))
    with pytest.raises(ValueError, match=r"unexpected \['lm_head.weight'\]"):
        load_drafter(tmp_path / "z")


def test_missing_files_fail_clearly(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_drafter(tmp_path / "empty")
    target = tiny_target(1)
    published_checkpoint(tmp_path / "z", target)
    (tmp_path / "z" / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors"):
        load_drafter(tmp_path / "z")


def test_offline_hub_id_names_the_tiny_default(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="tiny default"):
        load_drafter("z-lab/no-such-drafter-b16")
    from minidflash.target import load_target
    with pytest.raises(FileNotFoundError, match="tiny default"):
        load_target("no-such-owner/no-such-model")


# --------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pair():
    target = tiny_target(2)
    return target, random_drafter(target, 2, block_size=8)


@pytest.mark.parametrize("kwargs,match", [
    (dict(block_size=0), "block_size must be an integer >= 1"),
    (dict(block_size=9), "exceeds the drafter's trained block size 8"),
    (dict(max_new_tokens=0), "max_new_tokens must be an integer >= 1"),
    (dict(temperature=-1.0), "temperature must be >= 0"),
    (dict(input_ids=torch.zeros(1, 0, dtype=torch.long)), "prompt is empty"),
    (dict(input_ids=torch.zeros(2, 4, dtype=torch.long)), "one sequence at a time"),
    (dict(input_ids=torch.zeros(1, 4)), "LongTensor"),
    (dict(input_ids=torch.tensor([[1, 500]])), "outside the target's vocabulary"),
])
def test_bad_generation_arguments(pair, kwargs, match):
    target, drafter = pair
    args = dict(input_ids=torch.tensor([[1, 2, 3]]), max_new_tokens=5)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        speculative_generate(target, drafter, **args)


def test_drafter_that_does_not_fit_the_target(pair):
    target, _ = pair
    ids = torch.tensor([[1, 2, 3]])
    other = tiny_target(3, hidden=32, heads=2, kv_heads=1)
    with pytest.raises(ValueError, match="hidden size 32 != target hidden size 64"):
        speculative_generate(target, random_drafter(other, 3), ids, 4)
    with pytest.raises(ValueError, match="mask_token_id 400 is outside"):
        speculative_generate(target, random_drafter(target, 3, mask_token_id=400), ids, 4)
    bad = make_drafter_config(target.config, target_layer_ids=[1, 7], mask_token_id=5)
    with pytest.raises(ValueError, match=r"name layers \[7\]"):
        speculative_generate(target, DFlashDrafter(bad).eval(), ids, 4)
    with pytest.raises(ValueError, match="needs a drafter"):
        speculative_generate(target, None, ids, 4, block_size=4)

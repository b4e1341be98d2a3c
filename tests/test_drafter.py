"""The drafter's published format, its layer choice, and clear errors on bad input."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding

from minidflash.core.drafter import DFlashDrafter, default_target_layer_ids, make_drafter_config
from minidflash.checkpoints import load_drafter, save_drafter
from minidflash.verifier import speculative_generate
from tests.helpers import published_names, random_drafter, tiny_target

def test_target_layer_ids_formula():
    assert default_target_layer_ids(36, 5) == [1, 9, 17, 25, 33]      # Qwen3-4B / 8B
    assert default_target_layer_ids(36, 1) == [18]
    assert default_target_layer_ids(6, 3) == [1, 2, 3]


def test_round_trip_writes_exactly_the_published_format(tmp_path):
    target = tiny_target(0)
    d = random_drafter(target, 0, layers=2, block_size=8)
    save_drafter(d, tmp_path / "d")
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["config.json", "model.safetensors"]
    cfg = json.loads((tmp_path / "d" / "config.json").read_text())
    assert cfg["architectures"] == ["DFlashDraftModel"] and cfg["model_type"] == "qwen3"
    assert cfg["block_size"] == 8 and cfg["num_target_layers"] == 4
    assert cfg["dflash_config"] == {"mask_token_id": 96, "target_layer_ids": d.target_layer_ids}
    assert set(load_file(str(tmp_path / "d" / "model.safetensors"))) == published_names(2)
    e = load_drafter(tmp_path / "d", target=target)
    for k, v in d.state_dict().items():
        assert torch.equal(v, e.state_dict()[k]), k
    ids = torch.randint(0, 96, (1, 6))
    assert torch.equal(speculative_generate(target, d, ids, max_new_tokens=20).output_ids,
                       speculative_generate(target, e, ids, max_new_tokens=20).output_ids)


def published_checkpoint(path, target, layers=2, block_in_dflash_config=False, **overrides):
    """A checkpoint written by hand exactly as z-lab/Qwen3-8B-DFlash-b16 is laid out; overrides
    change config keys (None drops one)."""
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
    config.update(overrides)
    config = {k: v for k, v in config.items() if v is not None}
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
    assert torch.equal(speculative_generate(target, d, ids, max_new_tokens=12).output_ids,
                       speculative_generate(target, None, ids, max_new_tokens=12, block_size=1).output_ids)


YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128}
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 128}
THETA = {"rope_theta": 500000.0}
ROPE_CONFIGS = {  # config.json keys as published drafters write them -> the RoPE they mean
    "theta_only": (THETA, {"rope_type": "default", **THETA}),
    "rope_scaling_yarn": ({**THETA, "rope_scaling": YARN}, {**YARN, **THETA}),
    "rope_parameters_llama3": ({"rope_theta": None, "rope_parameters": {**LLAMA3, **THETA}},
                               {**LLAMA3, **THETA}),
    "rope_parameters_yarn": ({"rope_theta": None, "rope_parameters": {**YARN, **THETA}},
                             {**YARN, **THETA}),
}


@pytest.mark.parametrize("kind", ROPE_CONFIGS)
def test_rope_round_trips_in_every_spelling(tmp_path, kind):
    """Hand-written configs of each kind load with the RoPE they mean (the same cos/sin as a
    target built with it), and save -> load gives the same RoPE and the same drafter outputs."""
    keys, meant = ROPE_CONFIGS[kind]
    target = tiny_target(1)
    published_checkpoint(tmp_path / "z", target, **keys)
    d = load_drafter(tmp_path / "z", target=target)
    assert dict(d.config.rope_parameters) == meant
    reference = Qwen3Config(hidden_size=64, num_attention_heads=4, head_dim=16,
                            max_position_embeddings=512, rope_parameters=meant)   # as the target
    x, pos = torch.zeros(1, 1, 16), torch.arange(0, 400, 7)[None]
    for got, want in zip(d.rotary_emb(x, pos), Qwen3RotaryEmbedding(reference)(x, pos)):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    save_drafter(d, tmp_path / "again")
    cfg = json.loads((tmp_path / "again" / "config.json").read_text())
    assert cfg["rope_parameters"] == meant and cfg["rope_theta"] == meant["rope_theta"]
    scaling = {k: v for k, v in meant.items() if k != "rope_theta"}
    assert cfg["rope_scaling"] == (None if meant["rope_type"] == "default" else scaling)
    e = load_drafter(tmp_path / "again", target=target)
    assert dict(e.config.rope_parameters) == meant
    block, ctx = torch.randn(1, 16, 64), torch.randn(1, 300, 2 * 64)
    pos = torch.arange(0, 316)[None]
    assert torch.equal(d(block, ctx, pos), e(block, ctx, pos))


def test_scaled_rope_of_the_target_survives_save_and_load(tmp_path):
    """make_drafter_config copies the target's YaRN RoPE; the saved drafter keeps it."""
    target = tiny_target(1)
    target.config.rope_parameters = {**YARN, "rope_theta": 500000.0}
    d = random_drafter(target, 1, layers=2)
    save_drafter(d, tmp_path / "d")
    e = load_drafter(tmp_path / "d", target=target)
    block, ctx, pos = torch.randn(1, 16, 64), torch.randn(1, 300, 3 * 64), torch.arange(0, 316)[None]
    assert dict(e.config.rope_parameters) == {**YARN, "rope_theta": 500000.0}
    assert torch.equal(d(block, ctx, pos), e(block, ctx, pos))


@pytest.mark.parametrize("keys", [
    {"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 64,
     "use_sliding_window": True},
    {"layer_types": ["sliding_attention", "full_attention"]},      # window lost by transformers
    {"use_sliding_window": True, "sliding_window": 64, "max_window_layers": 1},  # types derived
])
def test_sliding_window_config_is_refused(tmp_path, keys):
    """Sliding-window layers are not implemented: refused, never run with full attention."""
    target = tiny_target(1)
    published_checkpoint(tmp_path / "z", target, **keys)
    with pytest.raises(ValueError, match="'sliding_attention'.*will not silently widen"):
        load_drafter(tmp_path / "z", target=target)
    with pytest.raises(AssertionError, match="full attention only"):
        DFlashDrafter(make_drafter_config(target.config, num_hidden_layers=2, mask_token_id=5, **keys))


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
    (dict(temperature=-1.0), "temperature must be a finite number >= 0"),
    (dict(input_ids=torch.zeros(1, 0, dtype=torch.long)), "prompt is empty"),
    (dict(input_ids=torch.zeros(2, 4, dtype=torch.long)), "one sequence"),
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
        speculative_generate(target, random_drafter(other, 3), ids, max_new_tokens=4)
    with pytest.raises(ValueError, match="mask_token_id 400 is outside"):
        speculative_generate(target, random_drafter(target, 3, mask_token_id=400), ids,
                             max_new_tokens=4)
    bad = make_drafter_config(target.config, target_layer_ids=[1, 7], mask_token_id=5)
    with pytest.raises(ValueError, match=r"name layers \[7\]"):
        speculative_generate(target, DFlashDrafter(bad).eval(), ids, max_new_tokens=4)
    with pytest.raises(ValueError, match="needs a drafter"):
        speculative_generate(target, None, ids, max_new_tokens=4, block_size=4)


def test_load_drafter_names_a_missing_folder_not_the_network(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "empty").mkdir()
    for name, said in [("./missing", "No such folder"), ("a/b/c", "No such folder"),
                       ("file.txt", "is a file"), ("empty", "has no config.json")]:
        with pytest.raises(FileNotFoundError, match=said) as err:
            load_drafter(name)
        assert "load_drafter takes a folder" in str(err.value) and "network" not in str(err.value)

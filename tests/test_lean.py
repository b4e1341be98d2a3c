"""The lean pass (lean.py) computes transformers' numbers, bit for bit, on every kind of pass a
decode makes: the prefill, a one-token step, a block at its positions, a tree with its 4D mask,
a left-padded batch with its 2D mask; for Qwen3 (q_norm, k_norm) and Llama, in fp32 and bf16
(packed weights where the CPU has bf16 units). In fp32 its products are MKL's packed ones,
which round differently: with ``F.linear`` in their place the pass is transformers' bit for
bit, and with them every pass is within 1e-5 of it and picks the same tokens. Every loop runs it when ``lean`` is on and never
when off; a model it cannot run is refused with the reason, or passed by where lean is not asked.
"""

import copy

import pytest
import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM, Qwen3ForCausalLM

import minidflash.lean as lean
from minidflash.batch import left_pad, prompt_positions
from minidflash.decoding import crop_cache, target_pass
from minidflash.tree import tree_attention_mask
from minidflash.verifier import speculative_generate
from tests.helpers import decode_on, random_drafter, tiny_target


def tiny_llama(seed=0, dtype=torch.float32, bias=False):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      attention_bias=bias, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():                     # transformers starts biases at 0: give them weight
        for m in model.modules():
            if isinstance(m, torch.nn.Linear) and m.bias is not None:
                m.bias.normal_(0, 0.1)
    return model.to(dtype).eval().requires_grad_(False)


MODELS = {
    "qwen3-fp32": lambda: tiny_target(3),
    "qwen3-bf16": lambda: tiny_target(3).to(torch.bfloat16),
    "llama-fp32": lambda: tiny_llama(),
    "llama-bf16-bias": lambda: tiny_llama(1, torch.bfloat16, bias=True),
    "llama-fp32-bias": lambda: tiny_llama(2, bias=True),
}


def both(model, ids, caches, layers=True, **kwargs):
    """The same pass through transformers (caches[0]) and the lean pass (caches[1])."""
    ref = target_pass(model, ids, caches[0], layers, True, **kwargs)
    got = target_pass(model, ids, caches[1], layers, True, lean=True, **kwargs)
    return ref, got


def assert_same(ref, got, what):
    (rl, rs, rf), (gl, gs, gf) = ref, got
    assert torch.equal(rl, gl), f"{what}: logits differ by {(rl - gl).abs().max():.3g}"
    assert torch.equal(rf, gf), f"{what}: the final state differs"
    if rs is not None:
        assert len(rs) == len(gs), f"{what}: {len(gs)} hidden states, transformers gives {len(rs)}"
        for i, (a, b) in enumerate(zip(rs, gs)):
            assert torch.equal(a, b), f"{what}: hidden_states[{i}] differ"


@pytest.fixture
def fp32_as_transformers(monkeypatch):
    """fp32 products through F.linear, as transformers' modules make them (no MKL packing)."""
    monkeypatch.setattr(lean, "PACK_FP32", False)


@pytest.mark.parametrize("name", MODELS)
def test_every_kind_of_pass_is_transformers_bit_for_bit(name, fp32_as_transformers):
    every_kind_of_pass(MODELS[name](), name, assert_same)


def assert_close(ref, got, what):
    """fp32 through MKL's packed products: within 1e-5 of transformers, the same greedy tokens."""
    (rl, rs, rf), (gl, gs, gf) = ref, got
    assert torch.allclose(rl, gl, rtol=1e-5, atol=1e-5), \
        f"{what}: logits differ by {(rl - gl).abs().max():.3g}"
    assert torch.equal(rl.argmax(-1), gl.argmax(-1)), f"{what}: another greedy token"
    assert torch.allclose(rf, gf, rtol=1e-5, atol=1e-5), f"{what}: the final state differs"
    for i, (a, b) in enumerate(zip(rs or (), gs or ())):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-5), f"{what}: hidden_states[{i}] differ"


@pytest.mark.parametrize("name", ["qwen3-fp32", "llama-fp32", "llama-fp32-bias"])
def test_fp32_packed_products_are_close_to_transformers(name):
    model = MODELS[name]()
    assert lean.of(model).layers[0]["qkv"].packed == "mkl"
    every_kind_of_pass(model, name, assert_close)


def every_kind_of_pass(model, name, check):
    """The prefill, a step, a block, a tree after a crop: each through transformers and the lean
    pass, compared by ``check``."""
    assert_same = check
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 96, (1, 21), generator=g)
    caches = (DynamicCache(), DynamicCache())
    assert_same(*both(model, ids, caches), f"{name} prefill")
    assert_same(*both(model, ids[:, :1], caches, layers=False, logits_to_keep=1), f"{name} step")
    start = caches[0].get_seq_length()
    block = torch.randint(0, 96, (1, 8), generator=g)
    pos = torch.arange(start, start + 8)[None]
    assert_same(*both(model, block, caches, position_ids=pos), f"{name} block")
    for c in caches:
        crop_cache(c, start + 3)                           # three accepted, as a verify keeps
    parents = torch.tensor([-1, -1, 0, 1, 2, 2])           # a tree of six nodes under the root
    depths = torch.tensor([0, 1, 1, 2, 2, 3, 3])           # the root, then each node's depth
    tree = torch.randint(0, 96, (1, 7), generator=g)
    mask = tree_attention_mask(parents, start + 3, model.dtype)
    assert_same(*both(model, tree, caches, position_ids=start + 3 + depths[None],
                      attention_mask=mask), f"{name} tree")


@pytest.mark.parametrize("name", ["qwen3-fp32", "llama-bf16-bias"])
def test_a_left_padded_batch_is_transformers_bit_for_bit(name, fp32_as_transformers):
    model = MODELS[name]()
    g = torch.Generator().manual_seed(1)
    ids, mask = left_pad([torch.randint(0, 96, (n,), generator=g) for n in (9, 4, 13)])
    caches = (DynamicCache(), DynamicCache())
    assert_same(*both(model, ids, caches, attention_mask=mask,
                      position_ids=prompt_positions(mask.bool())), f"{name} batch prefill")
    block = torch.randint(0, 96, (3, 5), generator=g)
    seen = torch.cat([mask, mask.new_ones(3, 5)], 1)
    pos = mask.sum(1, keepdim=True) + torch.arange(5)
    assert_same(*both(model, block, caches, attention_mask=seen, position_ids=pos),
                f"{name} batch verify")


def test_bf16_weights_are_packed_where_the_cpu_has_bf16_units():
    model = MODELS["qwen3-bf16"]()
    packed = lean.of(model).layers[0]["qkv"].packed
    assert packed == ("onednn" if torch.ops.mkldnn._is_mkldnn_bf16_supported() else None)
    assert lean.of(tiny_target(3)).layers[0]["qkv"].packed == "mkl"      # fp32: MKL's packing


def count_lean_passes(monkeypatch):
    calls = []
    real = lean.LeanTarget.__call__
    monkeypatch.setattr(lean.LeanTarget, "__call__",
                        lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    return calls


@pytest.mark.parametrize("path", ["plain", "chain", "tree", "batch"])
def test_every_loop_runs_the_lean_pass_when_on_and_only_then(path, monkeypatch):
    target = tiny_target(5, vocab=89, layers=3)
    drafter = random_drafter(target, 5, block_size=4)
    ids = torch.randint(0, 88, (1, 9), generator=torch.Generator().manual_seed(2))
    calls = count_lean_passes(monkeypatch)
    decode = lambda **fields: decode_on(path, target, drafter, ids, **fields)
    on = decode(max_new_tokens=12)
    passes = 1 + len(on.acceptance_lengths)                 # the prefill, then one per step
    assert on.config.lean is True and len(calls) == passes
    off = decode(max_new_tokens=12, lean=False)
    assert off.config.lean is False and len(calls) == passes   # none more
    assert torch.equal(on.output_ids, off.output_ids)


def test_a_model_the_lean_pass_cannot_run_is_refused_or_passed_by():
    config = copy.deepcopy(tiny_target(5, vocab=89, layers=3).config)
    config.use_sliding_window, config.sliding_window = True, 4
    config.layer_types = ["full_attention", "sliding_attention", "full_attention"]
    model = Qwen3ForCausalLM(config).eval().requires_grad_(False)
    why = lean.supports(model)
    assert why and "sliding" in why
    ids = torch.randint(0, 88, (1, 5))
    with pytest.raises(ValueError, match="sliding.*lean=False"):
        speculative_generate(model, None, ids, max_new_tokens=3, lean=True)
    out = speculative_generate(model, None, ids, max_new_tokens=3)      # not asked: passed by
    assert out.config.lean is False and out.num_new_tokens == 3


def test_the_pass_is_built_again_when_the_weights_change(fp32_as_transformers):
    model = tiny_target(3)
    ids = torch.randint(0, 96, (1, 6))
    first = lean.of(model)
    assert lean.of(model) is first
    with torch.no_grad():
        model.lm_head.weight.mul_(-1)                        # an in-place edit
    assert lean.of(model) is not first
    assert_same(*both(model, ids, (DynamicCache(), DynamicCache())), "after an edit")
    twin = copy.deepcopy(model)                              # a copy: its own pass
    assert lean.of(twin) is not lean.of(model)
    model.to(torch.bfloat16)                                 # a cast
    assert_same(*both(model, ids, (DynamicCache(), DynamicCache())), "after a cast")

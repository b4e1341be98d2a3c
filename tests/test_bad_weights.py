"""Broken weights are refused at load, each error naming the file and the tensor or value: a table
of broken drafter folders (``load_drafter``), AR drafter folders (``load_ar_drafter``) and target
folders (``load_target``, built from a copy of the shipped data/target), each row with the
exception type and what its message must name. Then what the checks must let through, the
non-finite check itself, and planted bugs: with the non-finite check removed, or the AR loader's
checks bypassed, the rows that test them go red."""

import json
import math
import os
import shutil
import types
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import Qwen3Config

import minidflash.ar_drafter as ar_module
from minidflash import checkpoints, target as target_module
from minidflash.ar_drafter import ARDrafter, make_ar_config
from minidflash.checkpoints import load_drafter, save_drafter
from minidflash.paths import TINY_TARGET_DIR
from minidflash.target import load_target
from minidflash.verifier import speculative_generate as sg
from minidflash.weights import check_finite, read_header

from .helpers import random_drafter, tiny_target


@pytest.fixture(scope="session")
def w(tmp_path_factory):
    """A 6-layer random target (hidden 64, vocab 61: the drafter's fc.weight is (64, 192)), its
    block-8 drafter and an AR drafter saved to folders, a folder of symlinks to the shipped tiny
    target; ``copy(kind)`` a fresh copy of one (``last``: the copy made last, which every
    message about a folder must name)."""
    root = tmp_path_factory.mktemp("bad_weights")
    target = tiny_target(0, vocab=61, layers=6)
    save_drafter(random_drafter(target, 0, block_size=8), root / "drafter")
    torch.manual_seed(0)
    ARDrafter(make_ar_config(target.config)).eval().save_pretrained(root / "ar")
    count = iter(range(10**6))
    w = types.SimpleNamespace(target=target, root=root, last=None)

    def copy(kind):
        w.last = out = root / f"{kind}_copy{next(count)}"
        if kind == "target":          # symlinks: put() replaces a link before it writes
            out.mkdir()
            for f in TINY_TARGET_DIR.iterdir():
                (out / f.name).symlink_to(f)
        else:
            shutil.copytree(root / kind, out)
        return out
    w.copy = copy
    return w


def put(d: Path, name: str, content) -> None:
    """``d/name`` holds ``content`` (bytes, str, a dict of tensors; None: removed), never written
    through a symlink into the shipped folder."""
    if (d / name).is_symlink() or (d / name).exists():
        (d / name).unlink()
    if isinstance(content, dict):
        save_file(content, str(d / name), {"format": "pt"})
    elif isinstance(content, bytes):
        (d / name).write_bytes(content)
    elif content is not None:
        (d / name).write_text(content)


LOADERS = {"drafter": lambda d, **kw: load_drafter(d, **kw),
           "ar": lambda d, **kw: ar_module.load_ar_drafter(d, **kw),   # looked up at call time:
           "target": lambda d, **kw: load_target(d, **kw)}            # the planted test swaps it
WEIGHTS = "model.safetensors"


def config(kind, **changes):
    """A copy whose config.json has ``changes`` (``...`` deletes a key; dflash_<key> edits
    dflash_config, rope_theta every place the RoPE base is kept)."""
    def run(w):
        d = w.copy(kind)
        cfg = json.loads((d / "config.json").read_text())
        for k, v in changes.items():
            if k == "rope_theta":
                cfg["rope_theta"] = v
                cfg.setdefault("rope_parameters", {})["rope_theta"] = v
            elif v is ...:
                del cfg[k]
            elif k.startswith("dflash_"):
                cfg["dflash_config"][k[len("dflash_"):]] = v
            else:
                cfg[k] = v
        put(d, "config.json", json.dumps(cfg))
        return LOADERS[kind](d)
    return run


def file(kind, name, content, **kw):
    """A copy whose ``name`` holds ``content`` (None removes it)."""
    def run(w):
        d = w.copy(kind)
        put(d, name, content)
        return LOADERS[kind](d, **kw)
    return run


def cut(kind, name=WEIGHTS, keep=0.5, extra=b""):
    """A copy whose ``name`` keeps ``keep`` of its bytes (an int: that many) and then ``extra``."""
    def run(w):
        d = w.copy(kind)
        data = (d / name).read_bytes()
        put(d, name, data[:keep if isinstance(keep, int) else int(len(data) * keep)] + extra)
        return LOADERS[kind](d)
    return run


def flip(kind, at, value: bytes, name=WEIGHTS):
    """A copy whose ``name`` has ``value`` written at byte ``at`` (negative: from the end)."""
    def run(w):
        d = w.copy(kind)
        data = bytearray((d / name).read_bytes())
        at_ = at if at >= 0 else len(data) + at
        data[at_:at_ + len(value)] = value
        put(d, name, bytes(data))
        return LOADERS[kind](d)
    return run


def tensors(kind, edit, **kw):
    """A copy whose model.safetensors holds the tensors ``edit(state)`` leaves (in place)."""
    def run(w):
        d = w.copy(kind)
        state = load_file(str(d / WEIGHTS))
        edit(state)
        put(d, WEIGHTS, state)
        return LOADERS[kind](d, **kw)
    return run


def set_at(key, index, value):
    def edit(state):
        state[key][index] = value
    return edit


def cast(key, fn):
    def edit(state):
        state[key] = fn(state[key])
    return edit


def second_file(kind, name, keys=None):
    """A copy with another *.safetensors holding the same tensors (or only ``keys``)."""
    def run(w):
        d = w.copy(kind)
        state = load_file(str(d / WEIGHTS))
        put(d, name, {k: v.clone() for k, v in state.items() if keys is None or k in keys})
        return LOADERS[kind](d)
    return run


def tokenizer_smaller_than_embedding(w):
    """The target's embedding cut to 1000 rows (vocab_size too): its 4096-token tokenizer's ids
    would index past it."""
    d = w.copy("target")
    state = load_file(str(d / WEIGHTS))
    state["model.embed_tokens.weight"] = state["model.embed_tokens.weight"][:1000].clone()
    put(d, WEIGHTS, state)
    cfg = json.loads((d / "config.json").read_text())
    put(d, "config.json", json.dumps({**cfg, "vocab_size": 1000}))
    return load_target(d)


def sharded(index_text, shard_missing=False):
    def run(w):
        d = w.copy("target")
        if shard_missing:
            put(d, WEIGHTS, None)
        put(d, "model.safetensors.index.json", index_text)
        return load_target(d)
    return run


def ar_for(hidden):
    """The AR drafter (hidden 64) loaded for a target of another hidden size."""
    def run(w):
        return ar_module.load_ar_drafter(w.copy("ar"), target=tiny_target(0, vocab=61, layers=6,
                                                                         hidden=hidden))
    return run


NAN, INF = float("nan"), float("inf")
V, T, F = ValueError, TypeError, FileNotFoundError
D, AR, TG = "drafter", "ar", "target"
UP = "layers.0.mlp.up_proj.weight"
TUP = "model.layers.3.mlp.up_proj.weight"
FULL = ["full_attention"]
# (case id, call, exception, what the message must name); a folder's case also names its folder
CASES = [
    # -- a DFlash drafter (load_drafter) ------------------------------------------------------
    ("D NaN fc", tensors(D, set_at("fc.weight", (0, 0), NAN)), V,
     r"model\.safetensors: tensor 'fc\.weight' \(64, 192\) holds 1 NaN and 0 inf.*\[0, 0\]"),
    ("D NaN layer", tensors(D, set_at("layers.0.mlp.down_proj.weight", (5, 7), NAN)), V,
     r"model\.safetensors: tensor 'layers\.0\.mlp\.down_proj\.weight'.*1 NaN.*\[5, 7\]"),
    ("D NaN last element", tensors(D, set_at("norm.weight", -1, NAN)), V,
     r"'norm\.weight' \(64,\) holds 1 NaN.*\[63\]"),
    ("D NaN whole tensor", tensors(D, cast("layers.0.self_attn.q_proj.weight",
                                           lambda t: torch.full_like(t, NAN))), V,
     r"'layers\.0\.self_attn\.q_proj\.weight' \(64, 64\) holds 4096 NaN"),
    ("D +inf", tensors(D, set_at("hidden_norm.weight", 3, INF)), V,
     r"model\.safetensors: tensor 'hidden_norm\.weight'.*0 NaN and 1 inf.*\[3\]"),
    ("D -inf", tensors(D, set_at("layers.0.input_layernorm.weight", 0, -INF)), V,
     r"'layers\.0\.input_layernorm\.weight'.*1 inf"),
    ("D inf and NaN", tensors(D, lambda s: [set_at(UP, (0, 0), INF)(s), set_at(UP, (1, 1), NAN)(s)]),
     V, rf"'{UP}'.*1 NaN and 1 inf"),
    ("D NaN stored bf16", tensors(D, lambda s: [cast(UP, torch.Tensor.bfloat16)(s),
                                                 set_at(UP, (2, 3), NAN)(s)]), V,
     rf"model\.safetensors: tensor '{UP}'.*1 NaN"),
    ("D NaN loaded bf16", tensors(D, set_at(UP, (2, 3), NAN), dtype="bfloat16"), V,
     rf"'{UP}'.*1 NaN.*in bfloat16"),
    ("D overflow in fp16", tensors(D, set_at(UP, (4, 4), 1e6), dtype="float16"), V,
     rf"'{UP}'.*0 NaN and 1 inf.*\[4, 4\]\) in float16"),
    ("D int64 tensor", tensors(D, cast(UP, torch.Tensor.long)), V,
     rf"model\.safetensors: tensor '{UP}' is stored as I64"),
    ("D int32 tensor", tensors(D, cast("fc.weight", torch.Tensor.int)), V,
     r"tensor 'fc\.weight' is stored as I32"),
    ("D uint8 tensor", tensors(D, cast("norm.weight", lambda t: t.to(torch.uint8))), V,
     r"tensor 'norm\.weight' is stored as U8"),
    ("D bool tensor", tensors(D, cast("norm.weight", lambda t: t > 0)), V,
     r"model\.safetensors: tensor 'norm\.weight' is stored as BOOL"),
    ("D fc transposed", tensors(D, cast("fc.weight", lambda t: t.T.contiguous())), V,
     r"model\.safetensors does not match .*config\.json: fc\.weight is \(192, 64\) in the weights, "
     r"\(64, 192\)"),
    ("D q_proj transposed", tensors(D, cast("layers.0.self_attn.k_proj.weight",
                                            lambda t: t.T.contiguous())), V,
     r"layers\.0\.self_attn\.k_proj\.weight is \(64, 32\) in the weights, \(32, 64\)"),
    ("D tensor dropped", tensors(D, lambda s: s.pop("hidden_norm.weight")), V,
     r"missing \['hidden_norm\.weight'\]"),
    ("D tensor added", tensors(D, lambda s: s.__setitem__("stray.weight", torch.ones(2))), V,
     r"unexpected \['stray\.weight'\]"),
    ("D header length flipped", flip(D, 3, b"\x7f"), V,
     r"model\.safetensors is not a readable safetensors file: its header claims \d+ bytes"),
    ("D header brace flipped", flip(D, 8, b"#"), V,
     r"model\.safetensors is not a readable.*header is not JSON"),
    ("D header bytes undecodable", flip(D, 12, b"\xff\xfe"), V,
     r"model\.safetensors is not a readable.*header is not JSON"),
    ("D data flipped to NaN", flip(D, -4, b"\xff\xff\xff\x7f"), V,
     r"model\.safetensors: tensor '[\w.]+' .*1 NaN"),
    ("D truncated 1 byte", cut(D, keep=-1), V,
     r"model\.safetensors is not a readable.*need (\d+) bytes of data and it holds (\d+) "
     r"\(truncated\)"),
    ("D truncated to 4 bytes", cut(D, keep=4), V,
     r"model\.safetensors is not a readable.*holds 4 bytes.*truncated"),
    ("D bytes appended", cut(D, keep=1.0, extra=b"\0" * 16), V,
     r"model\.safetensors is not a readable.*bytes appended"),
    ("D a copy beside it", second_file(D, "extra.safetensors"), V,
     r"extra\.safetensors and .*model\.safetensors both hold the tensors \['fc\.weight'"),
    ("D a copy sorted first", second_file(D, "a.safetensors"), V,
     r"a\.safetensors and .*model\.safetensors both hold"),
    ("D one tensor twice", second_file(D, "patch.safetensors", keys={"norm.weight"}), V,
     r"model\.safetensors and .*patch\.safetensors both hold the tensors \['norm\.weight'\] "
     r"\(1 names\)"),
    ("D layer ids 1,1,1", config(D, dflash_target_layer_ids=[1, 1, 1]), V,
     r"config\.json: dflash_config\.target_layer_ids \[1, 1, 1\] names layers \[1\] more than once"),
    ("D layer ids 1,2,2", config(D, dflash_target_layer_ids=[1, 2, 2]), V,
     r"config\.json: .*\[1, 2, 2\] names layers \[2\]"),
    ("D layer ids 3,1,3", config(D, dflash_target_layer_ids=[3, 1, 3]), V, r"\[3, 1, 3\].*\[3\]"),
    ("D layer id 6 of 6", config(D, dflash_target_layer_ids=[1, 2, 6]), V,
     r"config\.json: dflash_config\.target_layer_ids.*0\.\.5.*\[1, 2, 6\]"),
    ("D layer id 1.0", config(D, dflash_target_layer_ids=[1.0, 2, 3]), V,
     r"config\.json: .*target_layer_ids.*\[1\.0, 2, 3\]"),
    ("D rope_theta 0", config(D, rope_theta=0), V, r"config\.json: rope_theta.*RoPE base.*got 0"),
    ("D rope_theta negative", config(D, rope_theta=-1e6), V, r"config\.json: rope_theta.*-1000000"),
    ("D rope_theta NaN", config(D, rope_theta=NAN), V, r"config\.json: rope_theta.*got nan"),
    ("D rope_theta inf", config(D, rope_theta=INF), V, r"config\.json: rope_theta.*got inf"),
    ("D rope_theta text", config(D, rope_theta="1e6"), V, r"config\.json: rope_theta.*'1e6'"),
    ("D rope_parameters -5", config(D, rope_parameters={"rope_type": "default", "rope_theta": -5}),
     V, r"config\.json: rope_parameters\.rope_theta.*got -5"),
    ("D rope_theta disagrees", config(D, rope_theta=1e5, rope_parameters={
        "rope_type": "default", "rope_theta": 1e6}), V,
     r"config\.json: the RoPE base differs.*100000\.0.*1000000\.0"),
    ("D eps -1", config(D, rms_norm_eps=-1), V, r"config\.json: rms_norm_eps.*got -1"),
    ("D eps 0", config(D, rms_norm_eps=0.0), V, r"config\.json: rms_norm_eps.*got 0\.0"),
    ("D eps NaN", config(D, rms_norm_eps=NAN), V, r"config\.json: rms_norm_eps.*got nan"),
    ("D eps text", config(D, rms_norm_eps="1e-6"), V, r"config\.json: rms_norm_eps.*'1e-6'"),
    ("D heads -4", config(D, num_attention_heads=-4), V,
     r"config\.json: num_attention_heads must be an integer >= 1, got -4"),
    ("D kv heads 0", config(D, num_key_value_heads=0), V,
     r"config\.json: num_key_value_heads.*got 0"),
    ("D intermediate -1", config(D, intermediate_size=-1), V,
     r"config\.json: intermediate_size.*got -1"),
    ("D vocab 0", config(D, vocab_size=0), V, r"config\.json: vocab_size.*got 0"),
    ("D positions 0", config(D, max_position_embeddings=0), V,
     r"config\.json: max_position_embeddings.*got 0"),
    ("D head_dim odd", config(D, head_dim=15), V, r"config\.json: head_dim 15 is odd"),
    ("D head_dim 16.5", config(D, head_dim=16.5), V, r"config\.json: head_dim.*16\.5"),
    ("D target a tuple", lambda w: load_drafter(w.root / D, target=(w.target, None)), T,
     r"load_drafter: target is the \(model, tokenizer\) tuple load_target returns"),
    ("D target a path", lambda w: load_drafter(w.root / D, target="data/target"), T,
     r"load_drafter: target must be .* got str"),
    # -- the front door given load_target()'s tuple --------------------------------------------
    ("front door target tuple", lambda w: sg((w.target, None), None, torch.tensor([[1, 2]])), T,
     r"target is the \(model, tokenizer\) tuple.*Qwen3ForCausalLM"),
    ("front door drafter tuple", lambda w: sg(w.target, (w.target, None), torch.tensor([[1, 2]])),
     T, r"drafter is the \(model, tokenizer\) tuple"),
    # -- an AR drafter (load_ar_drafter) -------------------------------------------------------
    ("AR config garbled", file(AR, "config.json", "{not json"), V, r"config\.json is not valid JSON"),
    ("AR config truncated", cut(AR, "config.json"), V, r"config\.json is not valid JSON"),
    ("AR config empty", file(AR, "config.json", ""), V, r"config\.json is not valid JSON.*empty"),
    ("AR config a list", file(AR, "config.json", "[1, 2]"), V,
     r"config\.json must hold a JSON object.*list"),
    ("AR config missing", file(AR, "config.json", None), F, r"lacks config\.json"),
    ("AR weights missing", file(AR, WEIGHTS, None), F, r"lacks model\.safetensors"),
    ("AR a file", lambda w: ar_module.load_ar_drafter(w.copy(AR) / "config.json"), F,
     r"config\.json' is a file, not a folder"),
    ("AR no target_layer_ids", config(AR, target_layer_ids=...), V,
     r"config\.json is not an AR drafter config.*target_layer_ids \(got None\)"),
    ("AR no num_target_layers", config(AR, num_target_layers=...), V,
     r"config\.json is not an AR drafter config.*num_target_layers.*got None"),
    ("AR layer ids 1,1,1", config(AR, target_layer_ids=[1, 1, 1]), V,
     r"config\.json: target_layer_ids \[1, 1, 1\] names layers \[1\] more than once"),
    ("AR layer id 99", config(AR, target_layer_ids=[1, 2, 99]), V,
     r"config\.json: target_layer_ids.*0\.\.5.*99"),
    ("AR layer ids text", config(AR, target_layer_ids="1,2,3"), V,
     r"config\.json: target_layer_ids.*'1,2,3'"),
    ("AR block_size 1", config(AR, block_size=1), V, r"config\.json: block_size.*got 1"),
    ("AR architectures", config(AR, architectures=["DFlashDraftModel"]), V,
     r"config\.json names architectures \['DFlashDraftModel'\]"),
    ("AR rope_theta 0", config(AR, rope_theta=0), V, r"config\.json: rope_theta.*got 0"),
    ("AR eps -1", config(AR, rms_norm_eps=-1), V, r"config\.json: rms_norm_eps.*got -1"),
    ("AR head_dim odd", config(AR, head_dim=15), V, r"config\.json: head_dim 15 is odd"),
    ("AR hidden_size 0", config(AR, hidden_size=0), V, r"config\.json: hidden_size.*got 0"),
    ("AR weights truncated", cut(AR), V, r"model\.safetensors is not a readable.*truncated"),
    ("AR weights empty", file(AR, WEIGHTS, b""), V,
     r"model\.safetensors is not a readable.*0 bytes.*empty"),
    ("AR weights garbage", file(AR, WEIGHTS, b"garbage" * 50), V,
     r"model\.safetensors is not a readable.*header claims"),
    ("AR fc transposed", tensors(AR, cast("fc.weight", lambda t: t.T.contiguous())), V,
     r"model\.safetensors does not match .*config\.json: fc\.weight is \(192, 64\) in the weights, "
     r"\(64, 192\)"),
    ("AR q_proj transposed", tensors(AR, cast("midlayer.q_proj.weight",
                                              lambda t: t.T.contiguous())), V,
     r"midlayer\.q_proj\.weight is \(128, 64\) in the weights, \(64, 128\)"),
    ("AR tensor dropped", tensors(AR, lambda s: s.pop("norm.weight")), V,
     r"model\.safetensors does not hold the tensors of an ARDrafter: missing \['norm\.weight'\]"),
    ("AR tensor added", tensors(AR, lambda s: s.__setitem__("extra.bias", torch.ones(3))), V,
     r"unexpected \['extra\.bias'\]"),
    ("AR NaN", tensors(AR, set_at("midlayer.mlp.down_proj.weight", (1, 2), NAN)), V,
     r"model\.safetensors: tensor 'midlayer\.mlp\.down_proj\.weight'.*1 NaN.*\[1, 2\]"),
    ("AR inf", tensors(AR, set_at("fc.weight", (0, 5), INF)), V,
     r"model\.safetensors: tensor 'fc\.weight'.*1 inf"),
    ("AR int64 tensor", tensors(AR, cast("norm.weight", torch.Tensor.long)), V,
     r"model\.safetensors: tensor 'norm\.weight' is stored as I64"),
    ("AR bool tensor", tensors(AR, cast("midlayer.hidden_norm.weight", lambda t: t > 0)), V,
     r"tensor 'midlayer\.hidden_norm\.weight' is stored as BOOL"),
    ("AR dtype bf16", lambda w: ar_module.load_ar_drafter(w.root / AR, dtype="bf16"), V,
     r"'bf16' is spelled 'bfloat16'"),
    ("AR dtype fp32", lambda w: ar_module.load_ar_drafter(w.root / AR, dtype="fp32"), V,
     r"'fp32' is spelled 'float32'"),
    ("AR dtype int8", lambda w: ar_module.load_ar_drafter(w.root / AR, dtype="int8"), V,
     r"dtype.*'int8'"),
    ("AR dtype int64", lambda w: ar_module.load_ar_drafter(w.root / AR, dtype=torch.int64), V,
     r"torch\.int64"),
    ("AR target a tuple", lambda w: ar_module.load_ar_drafter(w.root / AR, target=(w.target, 0)),
     T, r"load_ar_drafter: target is the \(model, tokenizer\) tuple"),
    ("AR target hidden 32", ar_for(32), V,
     r"ar_copy\d+: Drafter hidden size 64 != target hidden size 32"),
    # -- a target folder (load_target), from a copy of data/target ----------------------------
    ("T weights truncated", cut(TG), V, r"model\.safetensors is not a readable.*truncated"),
    ("T weights empty", file(TG, WEIGHTS, b""), V,
     r"model\.safetensors is not a readable.*holds 0 bytes.*empty"),
    ("T weights garbage", file(TG, WEIGHTS, b"garbage" * 50), V,
     r"model\.safetensors is not a readable.*header claims"),
    ("T weights missing", file(TG, WEIGHTS, None), F,
     r"target_copy\d+ has no model\.safetensors"),
    ("T weights renamed", lambda w: [os.rename(w.copy(TG) / WEIGHTS, w.last / "w.safetensors"),
                                     load_target(w.last)], F,
     r"has no model\.safetensors .* but w\.safetensors"),
    ("T header flipped", flip(TG, 8, b"["), V, r"model\.safetensors is not a readable.*header"),
    ("T NaN in one layer", tensors(TG, set_at(TUP, (7, 9), NAN)), V,
     rf"model\.safetensors: tensor '{TUP}' \(768, 256\) holds 1 NaN.*\[7, 9\]"),
    ("T NaN whole layer", tensors(TG, cast(TUP, lambda t: torch.full_like(t, NAN))), V,
     rf"tensor '{TUP}' \(768, 256\) holds 196608 NaN"),
    ("T inf norm", tensors(TG, set_at("model.norm.weight", 0, INF)), V,
     r"model\.safetensors: tensor 'model\.norm\.weight' .*1 inf"),
    ("T NaN embedding (tied)", tensors(TG, set_at("model.embed_tokens.weight", (4000, 3), NAN)), V,
     r"tensor 'model\.embed_tokens\.weight' \(4096, 256\) holds 1 NaN.*\[4000, 3\]"),
    ("T overflow in fp16", tensors(TG, set_at(TUP, (0, 1), 1e6), dtype=torch.float16), V,
     rf"tensor '{TUP}'.*0 NaN and 1 inf.*in float16"),
    ("T int64 tensor", tensors(TG, cast(TUP, torch.Tensor.long)), V,
     rf"model\.safetensors: tensor '{TUP}' is stored as I64"),
    ("T bool tensor", tensors(TG, cast("model.norm.weight", lambda t: t > 0)), V,
     r"tensor 'model\.norm\.weight' is stored as BOOL"),
    ("T a copy beside it", second_file(TG, "model-copy.safetensors"), V,
     r"model\.safetensors and .*model-copy\.safetensors both hold the tensors"),
    ("T tokenizer.json garbled", file(TG, "tokenizer.json", "{not json"), V,
     r"tokenizer\.json is not valid JSON"),
    ("T tokenizer.json truncated", cut(TG, "tokenizer.json"), V,
     r"tokenizer\.json is not valid JSON"),
    ("T tokenizer.json empty", file(TG, "tokenizer.json", ""), V,
     r"tokenizer\.json is not valid JSON.*empty"),
    ("T tokenizer.json missing", file(TG, "tokenizer.json", None), F,
     r"target_copy\d+ has no tokenizer: none of tokenizer\.json"),
    ("T tokenizer.json {}", file(TG, "tokenizer.json", "{}"), V,
     r"target_copy\d+: its tokenizer files do not make a tokenizer"),
    ("T tokenizer_config garbled", file(TG, "tokenizer_config.json", "{x"), V,
     r"tokenizer_config\.json is not valid JSON"),
    ("T tokenizer larger", tokenizer_smaller_than_embedding, V,
     r"target_copy\d+: the tokenizer has 4096 tokens and the model's embedding 1000 rows"),
    ("T template garbled", file(TG, "chat_template.jinja", "{% for m in messages %}{{ m"), V,
     r"chat_template\.jinja: the chat template does not render.*TemplateSyntaxError"),
    ("T template raises", file(TG, "chat_template.jinja", "{{ raise_exception('no turns') }}"),
     V, r"chat_template\.jinja: the chat template does not render.*no turns"),
    ("T template undefined", file(TG, "chat_template.jinja", "{{ messages[3].content }}"), V,
     r"chat_template\.jinja: the chat template does not render.*UndefinedError"),
    ("T generation config garbled", file(TG, "generation_config.json", "{x"), V,
     r"generation_config\.json is not valid JSON"),
    ("T config a list", file(TG, "config.json", "[]"), V,
     r"config\.json must hold a JSON object.*list"),
    ("T vocab 5000", config(TG, vocab_size=5000), V,
     r"model\.safetensors: tensor 'model\.embed_tokens\.weight' is \(4096, 256\) in the weights "
     r"and \(5000, 256\) by .*config\.json"),
    ("T vocab 100", config(TG, vocab_size=100), V, r"\(4096, 256\) in the weights and \(100, 256\)"),
    ("T vocab 0", config(TG, vocab_size=0), V, r"config\.json: vocab_size.*got 0"),
    ("T hidden 128", config(TG, hidden_size=128), V,
     r"model\.safetensors: tensor '[\w.]+' is .* in the weights and .*128"),
    ("T layers 4", config(TG, num_hidden_layers=4, layer_types=FULL * 4), V,
     r"model\.safetensors: the weights hold \['model\.layers\.4\..*num_hidden_layers 4"),
    ("T layers 8", config(TG, num_hidden_layers=8, layer_types=FULL * 8), V,
     r"target_copy\d+: the weights lack \['model\.layers\.6\."),
    ("T layers 0", config(TG, num_hidden_layers=0), V, r"config\.json: num_hidden_layers.*got 0"),
    ("T model_type llama", config(TG, model_type="llama"), V,
     r"config\.json: model_type 'llama' builds a LlamaForCausalLM, but architectures names "
     r"Qwen3ForCausalLM \(model_type 'qwen3'\)"),
    ("T model_type and arch llama", config(TG, model_type="llama",
                                           architectures=["LlamaForCausalLM"]), V,
     r"model\.safetensors: the weights hold \['model\.layers\.0\.self_attn\.k_norm"),
    ("T model_type unknown", config(TG, model_type="qwen9"), V,
     r"config\.json: model_type 'qwen9' is not a causal LM"),
    ("T model_type missing", config(TG, model_type=...), V, r"config\.json: model_type None"),
    ("T rope_theta 0", config(TG, rope_theta=0.0), V, r"config\.json: rope_theta.*got 0\.0"),
    ("T rope_theta negative", config(TG, rope_parameters={"rope_type": "default",
                                                          "rope_theta": -1.0}), V,
     r"config\.json: rope_parameters\.rope_theta.*got -1\.0"),
    ("T eps -1", config(TG, rms_norm_eps=-1), V, r"config\.json: rms_norm_eps.*got -1"),
    ("T eps 0", config(TG, rms_norm_eps=0.0), V, r"config\.json: rms_norm_eps.*got 0\.0"),
    ("T head_dim odd", config(TG, head_dim=63), V, r"config\.json: head_dim 63 is odd"),
    ("T heads 3 of kv 2", config(TG, num_attention_heads=3), V,
     r"config\.json: num_attention_heads 3 is not a multiple of num_key_value_heads 2"),
    ("T index garbled", sharded("{x"), V, r"model\.safetensors\.index\.json is not valid JSON"),
    ("T index no map", sharded("[]"), V, r"model\.safetensors\.index\.json has no weight_map"),
    ("T index lost shard", sharded(json.dumps({"weight_map": {
        "model.norm.weight": "model-00001-of-00002.safetensors"}}), shard_missing=True), F,
     r"index\.json names the shards \['model-00001-of-00002\.safetensors'\]"),
]


def outcome(call, w, error, match) -> str | None:
    """None when ``call`` raises exactly ``error``, in one line, matching ``match`` and naming
    the folder it broke; else what went wrong instead."""
    import re
    w.last = None
    try:
        call(w)
    except Exception as e:
        if type(e) is not error:
            return f"raised {type(e).__name__}: {e}"
        text = str(e)
        if "\n" in text or not re.search(match, text):
            return f"message does not match {match!r}: {text}"
        if w.last is not None and w.last.name not in text:
            return f"message does not name the folder {w.last.name}: {text}"
        return None
    return "loaded silently"


@pytest.mark.parametrize("call,error,match", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_broken_weights_are_refused_naming_what(w, call, error, match):
    wrong = outcome(call, w, error, match)
    assert wrong is None, wrong


def test_the_table_is_large_and_unique():
    assert len(CASES) >= 60 and len({c[0] for c in CASES}) == len(CASES)
    kinds = [c[0].split()[0] for c in CASES]
    assert kinds.count("D") >= 40 and kinds.count("AR") >= 25 and kinds.count("T") >= 40


# -- what the checks must let through ---------------------------------------------------------
def test_good_folders_load(w):
    """The saved drafter, AR drafter and tiny target load, as do a bf16-stored tensor, a value
    whose norm overflows (finite), a folder without tokenizer_config.json or chat template (on
    purpose: transformers' defaults; chat_ids then says there is no template), and repeated
    layer ids where default_target_layer_ids makes them (a 4-layer target: [1, 1, 1])."""
    load_drafter(w.copy(D), target=w.target)
    ar_module.load_ar_drafter(w.copy(AR), target=w.target)
    tensors(D, cast(UP, torch.Tensor.bfloat16))(w)
    d = tensors(D, set_at(UP, (0, 0), 1e30))(w)              # its 2-norm overflows float32
    assert d.state_dict()[UP][0, 0] == 1e30
    model, tokenizer = file(TG, "tokenizer_config.json", None)(w)
    assert len(tokenizer) == 4096
    file(TG, "chat_template.jinja", None)(w)
    small = tiny_target(0, vocab=61, layers=4)
    drafter = random_drafter(small, 0, block_size=8)
    assert drafter.target_layer_ids == [1, 1, 1]
    save_drafter(drafter, w.root / "four_layers")
    assert load_drafter(w.root / "four_layers", target=small).target_layer_ids == [1, 1, 1]


def test_the_shipped_checkpoints_load_as_before():
    from minidflash.paths import TINY_AR_DRAFTER_DIR, TINY_DRAFTER_DIR
    target, _ = load_target()
    assert load_drafter(TINY_DRAFTER_DIR, target).target_layer_ids == [1, 2, 3]
    assert ar_module.load_ar_drafter(TINY_AR_DRAFTER_DIR, target).target_layer_ids == [1, 2, 3]


# -- the non-finite check itself ---------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_check_finite_finds_every_bad_value(dtype):
    """A NaN, +inf or -inf at any place of tensors of many sizes (the vectorised body and the
    tail of a reduction) is found and named; large finite values are not."""
    g = torch.Generator().manual_seed(0)
    for n in (1, 3, 8, 17, 64, 255, 4097, 65537):
        x = torch.randn(n, generator=g).to(dtype)
        check_finite({"x": x}, lambda k: "f")
        for bad in (NAN, INF, -INF):
            for at in {0, n // 2, n - 1, int(torch.randint(n, (1,), generator=g))}:
                y = x.clone()
                y[at] = bad
                with pytest.raises(ValueError, match=rf"f: tensor 'x' \({n},\) holds .*\[{at}\]"):
                    check_finite({"ok": x, "x": y}, lambda k: "f")
    big = torch.full((1000,), torch.finfo(dtype).max / 2, dtype=dtype)  # norm overflows: fine
    check_finite({"big": big}, lambda k: "f")


def test_read_header_agrees_with_safetensors(w):
    """read_header's names, dtypes and shapes are safetensors' own."""
    path = w.copy(D) / WEIGHTS
    header, state = read_header(path), load_file(str(path))
    assert set(header) == set(state)
    for k, t in state.items():
        assert header[k]["shape"] == list(t.shape) and header[k]["dtype"] == "F32"


# -- planted bugs: each red ---------------------------------------------------------------------
NON_FINITE = [c for c in CASES if ("NaN" in c[3] or "inf" in c[3]) and "config" not in c[3]]


def test_planted_no_non_finite_check_lets_nan_through(w, monkeypatch):
    """With check_finite a no-op in the three loaders, every non-finite row goes red: the drafter
    or target loads, NaN and all."""
    assert len(NON_FINITE) >= 15
    noop = lambda *a, **k: None
    for module in (checkpoints, ar_module, target_module):
        monkeypatch.setattr(module, "check_finite", noop)
    for name, call, error, match in NON_FINITE:
        assert outcome(call, w, error, match) == "loaded silently", name
    drafter = tensors(D, set_at("fc.weight", (0, 0), NAN))(w)
    assert torch.isnan(drafter.fc.weight).any()


# The AR loader before its checks (as it was: json.loads, strict=False, no dtype spellings).
def unchecked_load_ar_drafter(path, target=None, dtype=None, device=None):
    like = next(target.parameters()) if target is not None else None
    dtype = dtype or (like.dtype if like is not None else torch.float32)
    device = device or (like.device if like is not None else "cpu")
    path = Path(path)
    if not (path / "config.json").is_file() or not (path / WEIGHTS).is_file():
        raise FileNotFoundError(f"{path} needs config.json and model.safetensors "
                                f"(write them with ARDrafter.save_pretrained).")
    raw = json.loads((path / "config.json").read_text())
    if raw.get("architectures") != ["ARDrafter"]:
        raise ValueError(f"{path} holds {raw.get('architectures')}, not an ARDrafter; "
                         f"load DFlash drafters with minidflash.checkpoints.load_drafter.")
    for key in ("architectures", "model_type", "transformers_version"):
        raw.pop(key, None)
    drafter = ARDrafter(Qwen3Config(**raw))
    drafter.load_state_dict(load_file(str(path / WEIGHTS)), strict=False)
    missing = set(drafter.state_dict()) - set(load_file(str(path / WEIGHTS)))
    if {m for m in missing if not m.startswith("rotary_emb")}:
        raise ValueError(f"{path} lacks tensors {sorted(missing)[:5]} of an ARDrafter.")
    drafter.to(device=device, dtype=dtype).eval().requires_grad_(False)
    if target is not None and target.config.hidden_size != drafter.config.hidden_size:
        raise ValueError(f"AR drafter hidden size {drafter.config.hidden_size} != target "
                         f"{target.config.hidden_size}: it must be trained for this target.")
    return drafter


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")
def test_planted_ar_loader_without_its_checks_fails_its_rows(w, monkeypatch):
    """The AR rows against the loader without its checks: every one goes red (silent, a raw
    error, or a message that names nothing)."""
    rows = [c for c in CASES if c[0].startswith("AR ")]
    monkeypatch.setattr(ar_module, "load_ar_drafter", unchecked_load_ar_drafter)
    passed = [name for name, call, error, match in rows if outcome(call, w, error, match) is None]
    assert passed == [], passed


def test_planted_ar_checks_bypassed_one_by_one(w, monkeypatch):
    """Each check the AR loader calls, made a no-op, turns the rows it guards red."""
    noop = lambda *a, **k: None
    guards = {"read_weights": ["AR weights truncated", "AR int64 tensor", "AR bool tensor"],
              "check_finite": ["AR NaN", "AR inf"],
              "check_layer_ids": ["AR layer ids 1,1,1"],
              "check_config_values": ["AR rope_theta 0", "AR head_dim odd"]}
    rows = {c[0]: c[1:] for c in CASES}
    for check, names in guards.items():
        with monkeypatch.context() as m:
            m.setattr(ar_module, check, noop)
            for name in names:
                assert outcome(*rows[name][:1], w, *rows[name][1:]) is not None, (check, name)
        for name in names:                                   # and green again with it
            assert outcome(*rows[name][:1], w, *rows[name][1:]) is None, (check, name)


def test_nan_target_decodes_token_zero_forever_without_the_check(w, monkeypatch):
    """What the check stops (the issue's report): a target with one NaN layer emits token 0
    forever."""
    monkeypatch.setattr(target_module, "check_finite", lambda *a, **k: None)
    model, tokenizer = tensors(TG, cast(TUP, lambda t: torch.full_like(t, NAN)))(w)
    out = sg(model, None, torch.tensor([[1, 2, 3]]), max_new_tokens=5)
    assert out.new_ids.tolist() == [0] * 5
    assert not math.isfinite(float(model.model.layers[3].mlp.up_proj.weight.sum()))

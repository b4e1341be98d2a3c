"""A wrong value is told in one error that names it: a table of bad inputs through the Python
API (DecodingConfig fields and texts, the front door's arguments, the loaders) and corrupted
drafter folders, each with the exception type and what its message must say. Then the values a
check could wrongly refuse, and tau counting what a decode committed."""

import json
import re
import shutil
import types

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from minidflash.ar_drafter import ARDrafter, load_ar_drafter, make_ar_config
from minidflash.paths import TINY_AR_DRAFTER_DIR, TINY_DRAFTER_DIR, TINY_TARGET_DIR
from minidflash.checkpoints import load_drafter, save_drafter
from minidflash.decoding_config import DecodingConfig as C
from minidflash.verify_cost import VerifyCost as VC, costs_from_dict, costs_to_dict
from minidflash.target import load_target
from minidflash.verifier import speculative_generate as sg, speculative_generate_batch as sgb

from .helpers import OracleDrafter, random_drafter, tiny_target

TREE = {"node_budget": 8, "top_k": 3}
CURVE = VC((1.0, 1.5), 0.2)
NAN, INF = float("nan"), float("inf")


def distinct_layers(drafter, ids=(1, 2, 3)):
    """The drafter reading target layers ``ids`` (the default spacing repeats layer 1 on a
    4-layer target, and the loader refuses a layer read twice); the same shapes."""
    drafter.target_layer_ids = list(ids)
    drafter.config.dflash_config = {**drafter.config.dflash_config, "target_layer_ids": list(ids)}
    return drafter


@pytest.fixture(scope="session")
def w(tmp_path_factory):
    """The tiny random target (vocab 61, 4 layers), a block-8 drafter saved to a folder, an AR
    drafter, a prompt and a batch; ``copy()`` a fresh copy of the drafter folder."""
    root = tmp_path_factory.mktemp("bad_inputs")
    target = tiny_target(0, vocab=61, layers=4)
    drafter = distinct_layers(random_drafter(target, 0, block_size=8))
    save_drafter(drafter, root / "drafter")
    torch.manual_seed(0)
    ar = ARDrafter(make_ar_config(target.config)).eval().requires_grad_(False)
    count = iter(range(10**6))

    def copy():
        out = root / f"copy{next(count)}"
        shutil.copytree(root / "drafter", out)
        return out
    return types.SimpleNamespace(target=target, drafter=drafter, ar=ar, copy=copy, root=root,
                                 ids=torch.tensor([[1, 2, 3, 4, 5]]),
                                 batch=torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]]))


# -- corrupting a drafter folder -----------------------------------------------------------------
def edit_config(**changes):
    """A folder whose config.json has ``changes`` (dflash_config keys as dflash_<key>)."""
    def run(w):
        d = w.copy()
        cfg = json.loads((d / "config.json").read_text())
        for k, v in changes.items():
            if v is ...:
                del cfg[k]
            elif k.startswith("dflash_"):
                cfg["dflash_config"][k[len("dflash_"):]] = v
            else:
                cfg[k] = v
        (d / "config.json").write_text(json.dumps(cfg))
        return load_drafter(d)
    return run


def write(name, content):
    """A folder whose ``name`` holds ``content`` (bytes or str; None removes the file)."""
    def run(w):
        d = w.copy()
        if content is None:
            (d / name).unlink()
        elif isinstance(content, bytes):
            (d / name).write_bytes(content)
        else:
            (d / name).write_text(content)
        return load_drafter(d)
    return run


def truncated(name, keep=0.5):
    def run(w):
        d = w.copy()
        data = (d / name).read_bytes()
        (d / name).write_bytes(data[:int(len(data) * keep)])
        return load_drafter(d)
    return run


def target_without(key):
    """A copy of the shipped target folder whose weights lack ``key``."""
    def run(w):
        d = w.root / f"target_without_{key}"
        if not d.exists():
            shutil.copytree(TINY_TARGET_DIR, d)
            state = load_file(str(d / "model.safetensors"))
            del state[key]
            save_file(state, str(d / "model.safetensors"), {"format": "pt"})
        return load_target(d)
    return run


def other_target_layers(w):
    """The 4-layer target's drafter (layers 1..3 read) loaded for a 2-layer target."""
    return load_drafter(w.root / "drafter", target=tiny_target(0, vocab=61, layers=2))


# -- the table: (case id, call, exception, what the message must say) --------------------------
V = ValueError
T = TypeError
F = FileNotFoundError
CASES = [
    # DecodingConfig, field by field
    ("T 1e-38", lambda w: C(temperature=1e-38), V, r"1e-38.*temperature=0 for greedy"),
    ("T 1e-5", lambda w: C(temperature=1e-5), V, r"1e-05 is below"),
    ("T negative", lambda w: C(temperature=-1.0), V, r"temperature.*-1\.0"),
    ("T nan", lambda w: C(temperature=float("nan")), V, r"temperature.*nan"),
    ("T inf", lambda w: C(temperature=float("inf")), V, r"temperature.*inf"),
    ("T text", lambda w: C(temperature="0.7"), V, r"temperature.*'0\.7'"),
    ("trust no cost", lambda w: C(trust=0.5), V, r"trust=0\.5.*trust needs cost"),
    ("trust cost False", lambda w: C(trust=0.2, cost=False), V, r"trust=0\.2.*needs cost"),
    ("trust 1", lambda w: C(trust=1.0, cost=True), V, r"trust must be.*1\.0"),
    ("trust negative", lambda w: C(trust=-0.1, cost=True), V, r"trust.*-0\.1"),
    ("tree 1", lambda w: C(tree=1), V, r"tree=.*got 1\."),
    ("tree 1.0", lambda w: C(tree=1.0), V, r"got 1\.0\."),
    ("tree 0", lambda w: C(tree=0), V, r"got 0\."),
    ("tree text", lambda w: C(tree="yes"), V, r"got 'yes'"),
    ("tree no top_k", lambda w: C(tree={"node_budget": 8}), V, r"a tree is.*node_budget': 8"),
    ("tree budget 0", lambda w: C(tree={"node_budget": 0, "top_k": 2}), V, r"'node_budget': 0"),
    ("tree budget 500", lambda w: C(tree={"node_budget": 500, "top_k": 2}), V, r"500 is over"),
    ("tree top_k bool", lambda w: C(tree={"node_budget": 8, "top_k": True}), V, r"'top_k': True"),
    ("lean 1", lambda w: C(lean=1), V, r"lean must be.*got 1\."),
    ("lean text", lambda w: C(lean="yes"), V, r"lean.*'yes'"),
    ("fp32_ties 1", lambda w: C(fp32_ties=1), V, r"fp32_ties must be True or False, got 1"),
    ("record_steps text", lambda w: C(record_steps="no"), V, r"record_steps.*'no'"),
    ("max_new_tokens 0", lambda w: C(max_new_tokens=0), V, r"max_new_tokens.*got 0"),
    ("max_new_tokens 2.5", lambda w: C(max_new_tokens=2.5), V, r"max_new_tokens.*2\.5"),
    ("max_new_tokens True", lambda w: C(max_new_tokens=True), V, r"max_new_tokens.*True"),
    ("block_size 0", lambda w: C(block_size=0), V, r"block_size.*got 0"),
    ("block_size 2.0", lambda w: C(block_size=2.0), V, r"block_size.*2\.0"),
    ("p_min 1", lambda w: C(p_min=1.0), V, r"p_min.*1\.0"),
    ("p_min negative", lambda w: C(p_min=-0.1), V, r"p_min.*-0\.1"),
    ("cost text", lambda w: C(cost="yes"), V, r"cost must be.*'yes'"),
    ("stop -1", lambda w: C(stop_token_ids=-1), V, r"stop_token_ids.*-1"),
    ("stop text", lambda w: C(stop_token_ids="2"), V, r"stop_token_ids.*'2'"),
    ("stop 2-D", lambda w: C(stop_token_ids=torch.tensor([[1, 2]])), V, r"shape \(1, 2\)"),
    ("stop float", lambda w: C(stop_token_ids=[1.5]), V, r"\[1\.5\]"),
    ("tree and cut", lambda w: C(tree=TREE, p_min=0.3), V,
     r"p_min=0\.3 with tree=\{'node_budget': 8, 'top_k': 3\}: p_min and record_steps"),
    ("tree and steps", lambda w: C(tree=TREE, record_steps=True), V,
     r"record_steps=True with tree=\{'node_budget': 8.*a chain's"),
    ("override unknown", lambda w: C().override(temprature=0.5), V, r"temprature"),
    # decoding.json's content
    ("to_file tree True", lambda w: C(tree=True).to_file(), V, r"tree=True.*node_budget"),
    ("from_file tree true", lambda w: C.from_file({"tree": True}), V, r'"tree": true'),
    ("from_file tree false", lambda w: C.from_file({"tree": False}), V, r'"tree": false'),
    ("from_file trust", lambda w: C.from_file({"trust": 0.5}), V,
     r"decoding\.json: trust=0\.5 .*needs cost"),
    ("from_file list", lambda w: C.from_file([1]), V, r"decoding\.json.*got a list"),
    ("from_file p_min 2", lambda w: C.from_file({"p_min": 2}), V, r"decoding\.json.*p_min.*2"),
    ("from_file unknown", lambda w: C.from_file({"foo": 1}), V, r"decoding\.json.*'foo'"),
    ("from_file tiny T", lambda w: C.from_file({"temperature": 1e-30}), V, r"1e-30"),
    # DecodingConfig.parse: texts, duplicates, keywords against the text
    ("parse T1e-40", lambda w: C.parse("dflash/T1e-40"), V, r"1e-40.*temperature=0"),
    ("parse T1e-5", lambda w: C.parse("dflash:8/T1e-5"), V, r"1e-05"),
    ("parse trust no cost", lambda w: C.parse("dflash/trust0.5"), V,
     r"'dflash/trust0\.5': trust=0\.5 .*trust needs cost"),
    ("parse p twice", lambda w: C.parse("dflash/p0.3/p0.5"), V, r"'p0\.3' and 'p0\.5'"),
    ("parse cost twice", lambda w: C.parse("dflash/cost/cost"), V, r"'cost' and 'cost'"),
    ("parse n twice", lambda w: C.parse("tree/n15/n8/top2"), V, r"'n15' and 'n8'"),
    ("parse lean nolean", lambda w: C.parse("dflash/lean/nolean"), V, r"'lean' and 'nolean'"),
    ("parse T twice", lambda w: C.parse("dflash/T0.5/T0.7"), V, r"'T0\.5' and 'T0\.7'"),
    ("parse argmax twice", lambda w: C.parse("dflash/argmax/argmax"), V, r"'argmax' and"),
    ("parse B vs keyword", lambda w: C.parse("dflash:8", block_size=4), V,
     r"block_size=8.*block_size=4"),
    ("parse plain vs keyword", lambda w: C.parse("plain", block_size=4), V,
     r"'plain' sets block_size=1.*block_size=4"),
    ("parse p vs keyword", lambda w: C.parse("dflash/p0.3", p_min=0.5), V, r"p_min=0\.3.*0\.5"),
    ("parse chain vs tree", lambda w: C.parse("dflash", tree=True), V, r"tree=None.*tree=True"),
    ("parse tree vs dict", lambda w: C.parse("tree:4/n8/top2", tree=TREE), V, r"'top_k': 2"),
    ("parse unknown keyword", lambda w: C.parse("dflash", temprature=1), T, r"temprature"),
    ("parse bad head", lambda w: C.parse("dflsh"), V, r"'dflsh' is not a decoding"),
    ("parse bad B", lambda w: C.parse("dflash:x"), V, r"'dflash:x'"),
    ("parse plain B", lambda w: C.parse("plain:4"), V, r"'plain:4'"),
    ("parse bad option", lambda w: C.parse("dflash/q3"), V, r"option 'q3'"),
    ("parse bad number", lambda w: C.parse("dflash/pabc"), V, r"'dflash/pabc': option 'pabc'"),
    ("parse chain n", lambda w: C.parse("dflash/n8/top2"), V, r"'dflash/n8/top2'.*tree's"),
    ("parse tree half", lambda w: C.parse("tree/n8"), V, r"'tree/n8'.*both"),
    ("parse p 1.5", lambda w: C.parse("dflash/p1.5"), V, r"'dflash/p1\.5': p_min.*1\.5"),
    ("parse n500", lambda w: C.parse("tree:4/n500/top2"), V, r"'tree:4/n500/top2': .*500"),
    # the front door: what is passed, and in which order
    ("target a path", lambda w: sg("data/target", w.drafter, w.ids), T,
     r"'data/target'.*load_target"),
    ("drafter a path", lambda w: sg(w.target, "data/drafter", w.ids), T,
     r"'data/drafter'.*load_drafter"),
    ("target None", lambda w: sg(None, w.drafter, w.ids), T, r"target must be.*NoneType"),
    ("swapped", lambda w: sg(w.drafter, w.target, w.ids), T, r"DFlashDrafter.*order is"),
    ("drafter an LM", lambda w: sg(w.target, w.target, w.ids), T, r"drafter must be.*Qwen3For"),
    ("drafter as target", lambda w: sg(w.drafter, None, w.ids), T, r"target is a DFlashDrafter"),
    ("target a tensor", lambda w: sg(w.ids, w.drafter, w.ids), T, r"target must be.*Tensor"),
    ("drafter a dict", lambda w: sg(w.target, {}, w.ids), T, r"drafter must be.*dict"),
    ("generator int T>0", lambda w: sg(w.target, w.drafter, w.ids, generator=0,
                                       temperature=0.7), T, r"generator.*int 0"),
    ("generator text T=0", lambda w: sg(w.target, w.drafter, w.ids, generator="seed"), T,
     r"generator.*'seed'"),
    ("generator plain", lambda w: sg(w.target, None, w.ids, generator=1.5, temperature=1.0), T,
     r"generator.*1\.5"),
    ("tiny T chain", lambda w: sg(w.target, w.drafter, w.ids, temperature=1e-38), V, r"1e-38"),
    ("tiny T plain", lambda w: sg(w.target, None, w.ids, temperature=1e-38), V, r"1e-38"),
    ("tiny T tree", lambda w: sg(w.target, w.drafter, w.ids, tree=TREE, temperature=1e-38), V,
     r"1e-38"),
    ("trust keyword", lambda w: sg(w.target, w.drafter, w.ids, trust=0.5), V,
     r"trust=0\.5 .*needs cost"),
    ("tree=1 keyword", lambda w: sg(w.target, w.drafter, w.ids, tree=1), V, r"got 1\."),
    ("tree=1.0 keyword", lambda w: sg(w.target, w.drafter, w.ids, tree=1.0), V, r"got 1\.0"),
    ("stop 10**9", lambda w: sg(w.target, w.drafter, w.ids, stop_token_ids=10**9), V,
     r"\[1000000000\].*0\.\.60"),
    ("stop 61", lambda w: sg(w.target, None, w.ids, stop_token_ids=[2, 61]), V, r"\[61\]"),
    ("tree top_k > V", lambda w: sg(w.target, w.drafter, w.ids,
                                    tree={"node_budget": 8, "top_k": 100}), V, r"top_k 100.*61"),
    ("ids float", lambda w: sg(w.target, w.drafter, w.ids.float()), V,
     r"LongTensor.*got a 2-D float32 tensor of shape \(1, 5\)"),
    ("ids 1-D", lambda w: sg(w.target, w.drafter, w.ids[0]), V,
     r"\(1, S\) LongTensor.*got a 1-D int64 tensor of shape \(5,\)"),
    ("ids a list", lambda w: sg(w.target, w.drafter, [[1, 2]]), V,
     r"LongTensor.*got list \[\[1, 2\]\]"),
    ("ids empty", lambda w: sg(w.target, w.drafter, w.ids[:, :0]), V,
     r"prompt is empty \(input_ids \(1, 0\)\)"),
    ("ids outside V", lambda w: sg(w.target, w.drafter, w.ids + 10**6), V,
     r"ids \[1000001, 1000002.*0\.\.60"),
    ("ids a batch", lambda w: sg(w.target, w.drafter, w.batch), V, r"batch of 2"),
    ("block over drafter's", lambda w: sg(w.target, w.drafter, w.ids, block_size=32), V,
     r"block_size 32.*2\.\.8"),
    ("block without drafter", lambda w: sg(w.target, None, w.ids, block_size=4), V,
     r"block_size 4 needs a drafter"),
    ("too long", lambda w: sg(w.target, w.drafter, w.ids, max_new_tokens=10**5), V,
     r"max_new_tokens \(100000\).*512 positions"),
    ("config a text", lambda w: sg(w.target, w.drafter, w.ids, "dflash"), T, r"'dflash'"),
    ("unknown keyword", lambda w: sg(w.target, w.drafter, w.ids, temprature=1), T,
     r"temprature"),
    ("mask to one row", lambda w: sg(w.target, w.drafter, w.ids,
                                     attention_mask=torch.ones_like(w.ids)), T, r"_batch"),
    ("AR drafter tree", lambda w: sg(w.target, w.ar, w.ids, tree=TREE), V, r"ARDrafter"),
    ("cost without curve", lambda w: sg(w.target, w.drafter, w.ids, cost=True), V,
     r"cost=True.*budget machine"),
    # a tree through the front door
    ("tree top_k", lambda w: sg(w.target, w.drafter, w.ids, tree={"node_budget": 8, "top_k": 99}),
     V, r"top_k 99"),
    ("tree generator", lambda w: sg(w.target, w.drafter, w.ids, tree=TREE, generator=3), T,
     r"generator.*int 3"),
    # the batch
    ("batch AR no mask", lambda w: sgb(w.target, w.ar, w.batch), V, r"ARDrafter.*one row"),
    ("batch AR mask", lambda w: sgb(w.target, w.ar, w.batch,
                                    attention_mask=torch.ones_like(w.batch)), V, r"ARDrafter"),
    ("batch empty", lambda w: sgb(w.target, w.drafter, w.batch[:0]), V, r"\(0, 4\) holds no"),
    ("batch no columns", lambda w: sgb(w.target, w.drafter, w.batch[:, :0]), V,
     r"empty \(input_ids \(2, 0\)\)"),
    ("batch generator", lambda w: sgb(w.target, w.drafter, w.batch, generator=7,
                                      temperature=0.5), T, r"generator.*int 7"),
    ("batch target path", lambda w: sgb("data/target", w.drafter, w.batch), T, r"load_target"),
    ("batch swapped", lambda w: sgb(w.drafter, w.target, w.batch), T, r"order is"),
    ("batch tree", lambda w: sgb(w.target, w.drafter, w.batch, tree=TREE), V,
     r"tree decodes one sequence"),
    ("batch mask shape", lambda w: sgb(w.target, w.drafter, w.batch,
                                       attention_mask=torch.ones(2, 3)), V, r"\(2, 4\)"),
    ("batch right padded", lambda w: sgb(w.target, w.drafter, w.batch,
                                         attention_mask=torch.tensor([[1, 1, 1, 0], [1] * 4])), V,
     r"left-padded"),
    ("batch mask values", lambda w: sgb(w.target, w.drafter, w.batch,
                                        attention_mask=torch.full((2, 4), 2)), V,
     r"0.*and 1.*got \[2\]"),
    ("batch mask meta", lambda w: sgb(w.target, w.drafter, w.batch,
                                      attention_mask=torch.ones(2, 4, device="meta")), V,
     r"attention_mask \(2, 4\) is a tensor on the meta device"),
    ("batch stop 10**9", lambda w: sgb(w.target, w.drafter, w.batch, stop_token_ids=[10**9]), V,
     r"1000000000"),
    ("batch tiny T", lambda w: sgb(w.target, w.drafter, w.batch, temperature=1e-39), V,
     r"1e-39"),
    # the loaders' arguments
    ("load_drafter bf16", lambda w: load_drafter(dtype="bf16"), V, r"'bf16' is spelled 'bfloat16'"),
    ("load_drafter int8", lambda w: load_drafter(dtype="int8"), V, r"dtype.*'int8'"),
    ("load_drafter int64", lambda w: load_drafter(dtype=torch.int64), V, r"torch\.int64"),
    ("load_drafter no folder", lambda w: load_drafter("./no/such/folder"), F, r"no/such/folder"),
    ("load_drafter a file", lambda w: load_drafter(TINY_DRAFTER_DIR / "config.json"), F,
     r"config\.json' is a file"),
    ("load_drafter backend", lambda w: load_drafter(backend="cuda"), V, r"backend 'cuda'"),
    ("load_target a drafter", lambda w: load_target(TINY_DRAFTER_DIR), V,
     r"drafter.*DFlashDraftModel.*load_drafter"),
    ("load_target AR drafter", lambda w: load_target(TINY_AR_DRAFTER_DIR), V,
     r"ar_drafter holds a drafter.*ARDrafter"),
    ("load_target bf16", lambda w: load_target(dtype="bf16"), V, r"'bf16' is spelled"),
    ("load_target no norm", target_without("model.norm.weight"), V,
     r"target_without_model.norm.weight: .*model\.norm\.weight"),
    ("load_target no embed", target_without("model.embed_tokens.weight"), V,
     r"model\.embed_tokens\.weight"),
    ("layer ids vs target", other_target_layers, V,
     r"drafter: target_layer_ids \[1, 2, 3\] name layers \[2, 3\].*with 2 layers"),
    # a corrupted drafter folder
    ("config garbled", write("config.json", "{not json"), V, r"config\.json is not valid JSON"),
    ("config truncated", truncated("config.json"), V, r"config\.json is not valid JSON"),
    ("config empty", write("config.json", ""), V, r"config\.json is not valid JSON.*empty"),
    ("config bytes", write("config.json", b"\xff\xfe\x00"), V, r"config\.json is not valid JSON"),
    ("config a list", write("config.json", "[1, 2]"), V, r"config\.json must hold.*list"),
    ("config a number", write("config.json", "16"), V, r"config\.json must hold.*int"),
    ("config no dflash", edit_config(dflash_config=...), V, r"config\.json is not a DFlash"),
    ("config missing", write("config.json", None), F, r"no config\.json"),
    ("file block_size 0", edit_config(block_size=0), V, r"config\.json: block_size.*>= 2.*got 0"),
    ("file block_size 1", edit_config(block_size=1), V, r"config\.json: block_size.*got 1\."),
    ("block_size -3", edit_config(block_size=-3), V, r"config\.json: block_size.*-3"),
    ("block_size text", edit_config(block_size="16"), V, r"config\.json: block_size.*'16'"),
    ("block_size float", edit_config(block_size=16.0), V, r"config\.json: block_size.*16\.0"),
    ("hidden_size changed", edit_config(hidden_size=128), V,
     r"model\.safetensors does not match .*config\.json.*\(64"),
    ("heads changed", edit_config(num_attention_heads=8), V,
     r"model\.safetensors does not match .*config\.json: layers\.0\.self_attn"),
    ("kv heads changed", edit_config(num_key_value_heads=4), V, r"does not match .*config\.json"),
    ("head_dim changed", edit_config(head_dim=32), V, r"does not match .*config\.json"),
    ("intermediate changed", edit_config(intermediate_size=64), V, r"does not match.*mlp"),
    ("layers 2", edit_config(num_hidden_layers=2), V, r"config\.json: layer_types lists 1.*2"),
    ("layers 2 and types", edit_config(num_hidden_layers=2, layer_types=["full_attention"] * 2),
     V, r"2-layer.*missing \['layers\.1\."),
    ("sliding layer", edit_config(layer_types=["sliding_attention"]), V,
     r"config\.json does not make a drafter.*sliding_attention"),
    ("layers 0", edit_config(num_hidden_layers=0), V, r"config\.json: num_hidden_layers.*0"),
    ("hidden_size 0", edit_config(hidden_size=0), V, r"config\.json: hidden_size.*got 0"),
    ("hidden_size text", edit_config(hidden_size="64"), V, r"config\.json: hidden_size.*'64'"),
    ("head_dim 0", edit_config(head_dim=0), V, r"config\.json: head_dim.*0"),
    ("heads not multiple", edit_config(num_attention_heads=3), V, r"config\.json.*3.*multiple"),
    ("target layers 0", edit_config(num_target_layers=0), V, r"config\.json: num_target_layers"),
    ("layer ids fewer", edit_config(dflash_target_layer_ids=[1, 2]), V,
     r"does not match .*config\.json: fc\.weight"),
    ("layer ids 99", edit_config(dflash_target_layer_ids=[1, 2, 99]), V,
     r"config\.json: dflash_config\.target_layer_ids.*0\.\.3.*99"),
    ("layer ids negative", edit_config(dflash_target_layer_ids=[-1, 1, 2]), V,
     r"config\.json: dflash_config\.target_layer_ids.*-1"),
    ("layer ids text", edit_config(dflash_target_layer_ids="1,2,3"), V,
     r"config\.json: dflash_config\.target_layer_ids.*'1,2,3'"),
    ("layer ids empty", edit_config(dflash_target_layer_ids=[]), V,
     r"config\.json: dflash_config\.target_layer_ids.*\[\]"),
    ("mask id negative", edit_config(dflash_mask_token_id=-5), V, r"config\.json: .*mask.*-5"),
    ("mask id text", edit_config(dflash_mask_token_id="x"), V, r"config\.json: .*mask.*'x'"),
    ("weights empty", write("model.safetensors", b""), V, r"model\.safetensors is not a readable"),
    ("weights garbage", write("model.safetensors", b"garbage" * 50), V,
     r"model\.safetensors is not a readable"),
    ("weights truncated", truncated("model.safetensors"), V, r"model\.safetensors is not a read"),
    ("weights missing", write("model.safetensors", None), F, r"no \*\.safetensors"),
    ("decoding garbled", write("decoding.json", "{p_min: 0.3"), V,
     r"decoding\.json is not valid JSON"),
    ("decoding empty", write("decoding.json", "  \n"), V, r"decoding\.json is not valid.*empty"),
    ("decoding list", write("decoding.json", "[]"), V, r"decoding\.json must hold"),
    ("decoding tree true", write("decoding.json", '{"tree": true}'), V,
     r'decoding\.json: "tree": true'),
    ("decoding tree 1", write("decoding.json", '{"tree": 1}'), V, r"decoding\.json: .*got 1\."),
    ("decoding trust", write("decoding.json", '{"trust": 0.5}'), V,
     r"decoding\.json: trust=0\.5 .*trust needs cost"),
    ("decoding tiny T", write("decoding.json", '{"temperature": 1e-39}'), V,
     r"decoding\.json: temperature 1e-39"),
    ("decoding bad tree", write("decoding.json", '{"tree": {"node_budget": 8}}'), V,
     r"decoding\.json: a tree is"),
    ("draft vocab garbled", write("draft_vocab.json", "{token_ids"), V, r"draft_vocab\.json"),
    ("draft vocab list", write("draft_vocab.json", "[1, 2]"), V, r"draft_vocab\.json is not a"),
    ("draft vocab outside", write("draft_vocab.json", '{"token_ids": [1, 5000]}'), V,
     r"draft_vocab\.json.*5000"),
    ("draft vocab empty", write("draft_vocab.json", '{"token_ids": []}'), V,
     r"draft_vocab\.json.*non-empty"),
    # the cost model: NaN and inf refused (a NaN draft cost made every step's rate NaN, and
    # decoding almost plain), as are bools and text where numbers belong
    ("cost draft nan", lambda w: VC((1.0, 2.0), NAN), V, r"draft cost must be a finite.*got nan"),
    ("cost draft inf", lambda w: VC((1.0, 2.0), INF), V, r"draft cost.*got inf"),
    ("cost verify nan", lambda w: VC((1.0, NAN), 0.1), V, r"verify\[1\] = nan: not a finite"),
    ("cost verify inf", lambda w: VC((1.0, 2.0, INF), 0.1), V, r"verify\[2\] = inf"),
    ("cost first nan", lambda w: VC((NAN, 2.0), 0.1), V, r"verify\[0\] = nan"),
    ("cost verify bool", lambda w: VC((1.0, True), 0.1), V, r"verify\[1\] = True"),
    ("cost verify text", lambda w: VC((1.0, "2"), 0.1), V, r"verify\[1\] = '2'"),
    ("cost trust nan", lambda w: VC((1.0, 2.0), 0.1, trust_weight=NAN), V,
     r"trust_weight.*got nan"),
    ("cost max_skip bool", lambda w: VC((1.0, 2.0), 0.1, max_skip=True), V,
     r"max_skip.*got True"),
    ("cost max_skip 2.5", lambda w: VC((1.0, 2.0), 0.1, max_skip=2.5), V, r"max_skip.*got 2\.5"),
    ("cost draft text", lambda w: VC.from_dict({"verify": [1, 2], "draft": "0.1"}), V,
     r"draft cost.*got '0\.1'"),
    ("cost verify a text", lambda w: VC.from_dict({"verify": "1,2", "draft": 0.1}), V,
     r"got '1,2'"),
    ("cost by thread nan", lambda w: costs_from_dict({"by_threads": {"1": {
        "verify": [1.0, NAN], "draft": 0.1}}}), V, r"by_threads\['1'\]: .*verify\[1\] = nan"),
    ("cost thread ²", lambda w: costs_from_dict({"by_threads": {"²": CURVE.to_dict()}}), V,
     r"by_threads maps.*'²'"),
    ("cost dtype bf16", lambda w: costs_from_dict({"by_dtype": {"bf16": CURVE.to_dict()}}), V,
     r"by_dtype maps.*'bf16'"),
    ("costs none", lambda w: costs_to_dict({}), V, r"one curve at least, got \{\}"),
    ("costs 0 and 1", lambda w: costs_to_dict({(None, 0): CURVE, (None, 1): CURVE}), V,
     r"any thread count \(0\).*\[1\] threads"),
    ("costs int8", lambda w: costs_to_dict({("int8", 1): CURVE}), V, r"got \('int8', 1\)"),
    ("costs a list", lambda w: costs_to_dict({(None, 1): [1.0, 2.0]}), V,
     r"got \(None, 1\): \[1\.0, 2\.0\]"),
    ("trust nan", lambda w: C(trust=NAN, cost=True), V, r"trust must be.*got nan"),
    ("trust inf", lambda w: C(trust=INF, cost=True), V, r"trust must be.*got inf"),
    ("p_min nan", lambda w: C(p_min=NAN), V, r"p_min must be.*got nan"),
    ("p_min inf", lambda w: C(p_min=INF), V, r"p_min must be.*got inf"),
    ("keyword p_min nan", lambda w: sg(w.target, w.drafter, w.ids, p_min=NAN), V, r"p_min.*nan"),
    ("keyword cost [nan]", lambda w: sg(w.target, w.drafter, w.ids, cost=[NAN]), V,
     r"cost must be.*\[nan\]"),
    # numpy's numbers: taken as numbers, and refused by value like Python's
    ("numpy length 0", lambda w: C(max_new_tokens=np.int64(0)), V,
     r"max_new_tokens.*np\.int64\(0\)"),
    ("numpy bool block", lambda w: C(block_size=np.bool_(True)), V, r"block_size.*np\.True_"),
    ("numpy stop -1", lambda w: C(stop_token_ids=[np.int64(-1)]), V, r"np\.int64\(-1\)"),
    ("numpy tree 0", lambda w: C(tree={"node_budget": np.int64(0), "top_k": 2}), V,
     r"'node_budget': np\.int64\(0\)"),
    ("numpy stops 2-D", lambda w: C(stop_token_ids=np.array([[1, 2]])), V,
     r"numpy int64 array of shape \(1, 2\)"),
    ("numpy stops float", lambda w: C(stop_token_ids=np.array([1.5])), V,
     r"numpy float64 array"),
    ("numpy T nan", lambda w: sg(w.target, w.drafter, w.ids, temperature=np.float32("nan")), V,
     r"temperature.*np\.float32\(nan\)"),
    ("numpy block 99", lambda w: sg(w.target, w.drafter, w.ids, block_size=np.int64(99)), V,
     r"block_size 99 exceeds.*2\.\.8"),
    # to_file writes every field decoding.json holds and refuses the others, by name
    ("to_file exact", lambda w: C(exact=True).to_file(), V,
     r"decoding\.json does not hold exact=True"),
    ("to_file lean", lambda w: C(lean=False).to_file(), V, r"does not hold lean=False"),
    ("to_file steps", lambda w: C(record_steps=True).to_file(), V,
     r"does not hold record_steps=True"),
    ("to_file length", lambda w: C(max_new_tokens=64).to_file(), V,
     r"does not hold max_new_tokens=64"),
    ("to_file stops", lambda w: C(stop_token_ids=[2]).to_file(), V,
     r"does not hold stop_token_ids=\(2,\)"),
    ("to_file two", lambda w: C(exact=True, lean=False).to_file(), V,
     r"does not hold lean=False, exact=True"),
    ("to_file curves no cost", lambda w: C().to_file({(None, 1): CURVE}), V,
     r"costs=\{\(None, 1\).*with cost=False"),
    ("to_file curve twice", lambda w: C(cost=CURVE).to_file({(None, 1): CURVE}), V,
     r"cost=VerifyCost\(.*and costs=.*both"),
    ("to_file 0 and 1", lambda w: C(cost=True).to_file({(None, 0): CURVE, (None, 1): CURVE}), V,
     r"any thread count \(0\)"),
    ("to_file fp8", lambda w: C(cost=True).to_file({("fp8", 1): CURVE}), V, r"\('fp8', 1\)"),
    # decoding.json's content: NaN and inf as JSON writes them
    ("from_file p NaN", lambda w: C.from_file(json.loads('{"p_min": NaN}')), V,
     r"decoding\.json: p_min.*got nan"),
    ("from_file verify NaN", lambda w: C.from_file(json.loads(
        '{"cost": {"verify": [1, NaN], "draft": 0.1}}')), V, r"decoding\.json: .*verify\[1\] = nan"),
    ("from_file draft NaN", lambda w: C.from_file(json.loads(
        '{"cost": {"verify": [1, 2], "draft": NaN}}')), V, r"decoding\.json: draft cost.*nan"),
    ("from_file draft inf", lambda w: C.from_file(json.loads(
        '{"cost": {"verify": [1, 2], "draft": Infinity}}')), V, r"decoding\.json: draft.*inf"),
    ("from_file T inf", lambda w: C.from_file(json.loads('{"temperature": Infinity}')), V,
     r"decoding\.json: temperature.*inf"),
    ("from_file exact", lambda w: C.from_file({"exact": True}), V,
     r"decoding\.json: \"exact\" is True; it names exact mode's default drafting"),
    ("from_file exact keys", lambda w: C.from_file({"exact": {"p_min": 0.3}}), V,
     r"decoding\.json: \"exact\" is \{'p_min': 0.3\}"),
    ("from_file exact tree", lambda w: C.from_file({"exact": {"tree": {"node_budget": 3}}}), V,
     r"decoding\.json: \"exact\": a tree is"),
    ("from_file threads 0", lambda w: C.from_file({"cost": {"by_threads": {
        "0": CURVE.to_dict()}}}), V, r"decoding\.json: by_threads.*'0'"),
    ("from_file float64", lambda w: C.from_file({"cost": {"by_dtype": {
        "float64": CURVE.to_dict()}}}), V, r"decoding\.json: by_dtype.*'float64'"),
    ("decoding draft NaN", write("decoding.json", '{"cost": {"verify": [1.0, 2.0], "draft": NaN}}'),
     V, r"decoding\.json: draft cost must be a finite number.*got nan"),
    ("decoding verify Infinity", write(
        "decoding.json", '{"cost": {"verify": [1.0, Infinity], "draft": 0.1}}'), V,
     r"decoding\.json: .*verify\[1\] = inf"),
    ("decoding exact", write("decoding.json", '{"exact": true}'), V,
     r"decoding\.json: \"exact\" is True"),
    # DecodingConfig.parse: every refusal names the text
    ("parse dflash:", lambda w: C.parse("dflash:"), V, r"'dflash:' is not a decoding \(no block"),
    ("parse dflash:²", lambda w: C.parse("dflash:²"), V, r"'dflash:²'.*'²' is not a block size"),
    ("parse tree:", lambda w: C.parse("tree:"), V, r"'tree:' is not a decoding"),
    ("parse plain:", lambda w: C.parse("plain:"), V, r"'plain:' is not a decoding"),
    ("parse dflash:0", lambda w: C.parse("dflash:0"), V, r"'dflash:0': block_size.*got 0"),
    ("parse other digits", lambda w: C.parse("dflash/p٠.٣"), V, r"option 'p٠\.٣'"),
    ("parse n²", lambda w: C.parse("tree/n²/top2"), V, r"'tree/n²/top2': option 'n²'"),
    ("parse an int", lambda w: C.parse(8), T, r"got int 8"),
    ("parse None", lambda w: C.parse(None), T, r"got NoneType None"),
    ("parse pnan", lambda w: C.parse("dflash/pnan"), V, r"'dflash/pnan': p_min.*nan"),
    ("parse Tinf", lambda w: C.parse("dflash/Tinf"), V, r"'dflash/Tinf': temperature.*inf"),
    ("parse trustnan", lambda w: C.parse("dflash/cost/trustnan"), V, r"'dflash/cost/trustnan'"),
    ("parse 17 exact:16", lambda w: C.parse("dflash:17/exact:16"), V,
     r"'dflash:17/exact:16': exact mode on W = 16.*block of 17 takes 17; use exact=17"),
    ("parse exact:", lambda w: C.parse("dflash/exact:"), V, r"option 'exact:'.*exact:W"),
    ("parse trailing /", lambda w: C.parse("dflash/"), V, r"'dflash/': option ''"),
    ("parse keyword 0", lambda w: C.parse("dflash", max_new_tokens=0), V,
     r"'dflash': max_new_tokens.*got 0"),
    # input_ids: what was given, said
    ("ids int32", lambda w: sg(w.target, w.drafter, w.ids.int()), V,
     r"\(1, S\) LongTensor.*got a 2-D int32 tensor of shape \(1, 5\) \(\.long\(\)\)"),
    ("ids 3-D", lambda w: sg(w.target, w.drafter, w.ids[None]), V,
     r"got a 3-D int64 tensor of shape \(1, 1, 5\)"),
    ("ids numpy", lambda w: sg(w.target, w.drafter, w.ids.numpy()), V,
     r"got a numpy int64 array of shape \(1, 5\)"),
    ("ids 0-d", lambda w: sg(w.target, w.drafter, torch.tensor(5)), V,
     r"got a 0-D int64 tensor of shape \(\)"),
    ("ids None", lambda w: sg(w.target, w.drafter, None), V, r"got NoneType None"),
    ("ids bool", lambda w: sg(w.target, w.drafter, w.ids.bool()), V, r"got a 2-D bool tensor"),
    ("ids meta", lambda w: sg(w.target, w.drafter, w.ids.to("meta")), V,
     r"input_ids \(1, 5\) is a tensor on the meta device"),
    ("ids meta plain", lambda w: sg(w.target, None, w.ids.to("meta")), V, r"meta device"),
    ("ids meta AR", lambda w: sg(w.target, w.ar, w.ids.to("meta")), V, r"meta device"),
    ("ids negative", lambda w: sg(w.target, w.drafter, w.ids - 3), V,
     r"ids \[-2, -1\] outside the target's vocabulary"),
    ("batch ids meta", lambda w: sgb(w.target, w.drafter, w.batch.to("meta")), V,
     r"input_ids \(2, 4\) is a tensor on the meta device"),
    ("batch ids int32", lambda w: sgb(w.target, w.drafter, w.batch.int()), V,
     r"\(N, S\) LongTensor.*2-D int32 tensor of shape \(2, 4\)"),
    ("batch ids 1-D", lambda w: sgb(w.target, w.drafter, w.batch[0]), V,
     r"1-D int64 tensor of shape \(4,\) \(\[None\] for one row\)"),
    ("stops meta", lambda w: sg(w.target, w.drafter, w.ids,
                                stop_token_ids=torch.tensor([1], device="meta")), V,
     r"stop_token_ids is a tensor on the meta device"),
]


@pytest.mark.parametrize("call,error,match", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_input_is_named(w, call, error, match):
    with pytest.raises(error, match=match) as err:
        call(w)
    assert err.type is error                      # not a subclass from deeper down
    assert "\n" not in str(err.value)             # one line


def holds(w, name) -> bool:
    """Does the table's row ``name`` pass: its call raising exactly its error, in one line,
    saying what the row says?"""
    _, call, error, match = next(c for c in CASES if c[0] == name)
    try:
        call(w)
    except Exception as e:                        # noqa: BLE001 (any other kind: the row fails)
        return type(e) is error and re.search(match, str(e)) is not None and "\n" not in str(e)
    return False


NON_FINITE = ["cost draft nan", "cost draft inf", "cost verify inf", "cost verify nan",
              "from_file draft NaN", "from_file draft inf", "decoding draft NaN",
              "decoding verify Infinity"]


def test_a_planted_missing_non_finite_check_goes_red(w, monkeypatch):
    """The rows have power: with VerifyCost's finiteness check as it was (a number is a number,
    NaN and inf too) every NaN / inf cost row fails, a NaN draft cost is accepted, and a
    decode under it falls back to plain steps (its rate NaN: never above 1)."""
    from minidflash import verify_cost

    assert all(holds(w, name) for name in NON_FINITE)
    monkeypatch.setattr(verify_cost, "finite_number",
                        lambda x: isinstance(x, (int, float)))            # the check removed
    assert not any(holds(w, name) for name in NON_FINITE)
    nan_cost = VC((1.0,) * 8, NAN)                                       # accepted now
    flat = sg(w.target, w.drafter, w.ids, max_new_tokens=12, cost=VC((1.0,) * 8, 0.0))
    sick = sg(w.target, w.drafter, w.ids, max_new_tokens=12, cost=nan_cost)
    assert set(flat.verified) == {7} and 0 in sick.verified          # plain steps, silently


def test_the_table_is_large_and_unique():
    assert len(CASES) >= 190 and len({c[0] for c in CASES}) == len(CASES)


# -- what a check could wrongly refuse ---------------------------------------------------------
def test_small_temperatures_that_are_valid_still_sample(w):
    for t in (1e-4, 0.01):
        assert C(temperature=t).temperature == t
    gen = lambda: torch.Generator().manual_seed(0)
    for kw in ({}, {"tree": TREE}, {"block_size": 1}):
        out = sg(w.target, w.drafter, w.ids, max_new_tokens=12, temperature=0.01,
                 generator=gen(), **kw)
        assert out.config.temperature == 0.01 and out.num_new_tokens == 12
        assert set(out.new_ids.tolist()) != {60}                 # not the last id every step
    hot = [sg(w.target, None, w.ids, max_new_tokens=12, temperature=50.0,
              generator=torch.Generator().manual_seed(s)).new_ids.tolist() for s in range(3)]
    assert len({tuple(h) for h in hot}) > 1                          # it samples


def test_valid_values_pass(w):
    assert C(tree=False).tree is None and C(tree=True).tree is True and C(tree=None).tree is None
    assert C(trust=0.5, cost=True).trust == 0.5 and C(lean=False).lean is False
    assert C(trust=0.5, cost=True).override(cost=False) == C()      # no cost: the trust goes too
    assert C.parse("dflash", block_size=4) == C(block_size=4)        # a keyword the text lacks
    assert C.parse("dflash:8", block_size=8) == C(block_size=8)      # the same value twice
    assert C.parse("dflash", tree=False, max_new_tokens=9) == C(max_new_tokens=9)
    assert C.parse("tree:4/n8/top3", tree=dict(TREE)) == C(block_size=4, tree=TREE)
    assert C.parse("dflash/cost/trust0.5") == C(cost=True, trust=0.5)
    for c in (C(), C(block_size=1), C(block_size=8, p_min=0.3, cost=True, trust=0.25),
              C(tree=True), C(tree=TREE, temperature=0.7, fp32_ties=False), C(temperature=1e-4),
              C(record_steps=True, lean=False)):
        assert C.parse(str(c)) == c, str(c)
    assert C.from_file(C(tree=TREE).to_file()) == (C(tree=TREE), None)
    out = sg(w.target, w.drafter, w.ids, max_new_tokens=4, generator=torch.Generator())  # T = 0
    assert out.num_new_tokens == 4
    assert next(load_drafter(dtype="bfloat16").parameters()).dtype == torch.bfloat16
    # numpy's numbers are numbers, kept as Python's (JSON, text and == see no difference)
    c = C(max_new_tokens=np.int64(5), block_size=np.int32(4), p_min=np.float32(0.25),
          stop_token_ids=np.array([2, 3]), temperature=np.float64(0.5))
    assert c == C(max_new_tokens=5, block_size=4, p_min=0.25, stop_token_ids=(2, 3),
                  temperature=0.5)
    assert type(c.max_new_tokens) is int and type(c.p_min) is float and str(c) == "dflash:4/p0.25/T0.5"
    assert C(tree={"node_budget": np.int64(8), "top_k": np.int64(3)}).tree == TREE
    assert C(stop_token_ids=[np.int64(2)]).stop_token_ids == (2,)
    assert VC([1, np.float32(2.0)], np.float64(0.1), np.int64(3)) == VC((1.0, 2.0), 0.1, 3)
    out = sg(w.target, w.drafter, w.ids, max_new_tokens=np.int64(4), block_size=np.int64(4))
    assert out.num_new_tokens == 4 and out.config.block_size == 4
    # to_file writes every field decoding.json holds, and it loads back as it was
    full = C(block_size=8, p_min=0.3, cost=True, trust=0.25, temperature=0.7, fp32_ties=False)
    back = C.from_file(json.loads(json.dumps(full.to_file({(None, 1): CURVE}))))
    assert back == (full, {(None, 1): CURVE})
    assert C.from_file(C(cost=CURVE).to_file()) == (C(cost=True), {(None, 0): CURVE})
    assert C.parse("dflash:08") == C(block_size=8)
    assert next(load_drafter(dtype="auto").parameters()).dtype == torch.float32


# -- tau counts what was committed -------------------------------------------------------------
@pytest.fixture(scope="session")
def shipped():
    target, tokenizer = load_target(dtype=torch.float32)
    return target, load_drafter(None, target), load_ar_drafter(TINY_AR_DRAFTER_DIR, target), \
        tokenizer


@pytest.mark.parametrize("path", ["chain", "tree", "batch", "ar"])
def test_tau_counts_the_committed_tokens(shipped, path):
    """A step cut by max_new_tokens or a stop counts what it kept: acceptance_lengths sum to
    the new tokens after the prefill's one (the shipped pair: max_new_tokens=2 once gave [16])."""
    target, drafter, ar, tokenizer = shipped
    from minidflash.target import chat_ids
    ids = chat_ids(tokenizer, [{"role": "user", "content": "What is 12 + 7?"}])

    def run(**kw):
        if path == "batch":
            return sgb(target, drafter, ids.repeat(2, 1), **kw)[0]
        return sg(target, ar if path == "ar" else drafter, ids,
                  **({"tree": {"node_budget": 15, "top_k": 4}} if path == "tree" else {}), **kw)
    free = run(max_new_tokens=40)
    assert max(free.acceptance_lengths) > 2                # steps long enough for a cut to bite
    for n in (1, 2, 3, 7, 40):
        out = run(max_new_tokens=n)
        assert out.num_new_tokens == n
        assert sum(out.acceptance_lengths) == n - 1 and len(out.verified) == len(
            out.acceptance_lengths)
        assert out.tau == ((n - 1) / len(out.acceptance_lengths) if n > 1 else 1.0)
    new = free.new_ids.tolist()
    j = next(j for j in range(3, 40) if new[j] not in new[:j])
    out = run(max_new_tokens=40, stop_token_ids=[new[j]])
    assert out.new_ids.tolist() == new[:j + 1] and sum(out.acceptance_lengths) == j
    first = run(max_new_tokens=40, stop_token_ids=[new[0]])      # the prefill's token: no pass
    assert first.acceptance_lengths == [] and first.tau == 1.0


def test_an_oracle_chain_cut_at_two_tokens(w):
    """max_new_tokens=2 under a drafter accepted in full: one step of 8, of which 1 is kept."""
    ref = sg(w.target, None, w.ids, max_new_tokens=40).output_ids
    oracle = OracleDrafter(w.drafter, ref, 0.0, 0)
    out = sg(w.target, oracle, w.ids, max_new_tokens=2, lean=False)
    assert out.acceptance_lengths == [1] and out.tau == 1.0
    assert sg(w.target, oracle, w.ids, max_new_tokens=20, lean=False).acceptance_lengths == [
        8, 8, 3]

"""A wrong value is told in one error that names it: a table of bad inputs through the Python
API (DecodingConfig fields and texts, the front door's arguments, the loaders) and corrupted
drafter folders, each with the exception type and what its message must say. Then the values a
check could wrongly refuse, and tau counting what a decode committed."""

import json
import shutil
import types

import pytest
import torch
from safetensors.torch import load_file, save_file

from minidflash.ar_drafter import ARDrafter, load_ar_drafter, make_ar_config
from minidflash.paths import TINY_AR_DRAFTER_DIR, TINY_DRAFTER_DIR, TINY_TARGET_DIR
from minidflash.checkpoints import load_drafter, save_drafter
from minidflash.decoding_config import DecodingConfig as C
from minidflash.target import load_target
from minidflash.verifier import speculative_generate as sg, speculative_generate_batch as sgb

from .helpers import OracleDrafter, random_drafter, tiny_target

TREE = {"node_budget": 8, "top_k": 3}


@pytest.fixture(scope="session")
def w(tmp_path_factory):
    """The tiny random target (vocab 61, 4 layers), a block-8 drafter saved to a folder, an AR
    drafter, a prompt and a batch; ``copy()`` a fresh copy of the drafter folder."""
    root = tmp_path_factory.mktemp("bad_inputs")
    target = tiny_target(0, vocab=61, layers=4)
    drafter = random_drafter(target, 0, block_size=8)
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
    ("tree and cut", lambda w: C(tree=TREE, p_min=0.3), V, r"p_min and record_steps"),
    ("tree and steps", lambda w: C(tree=TREE, record_steps=True), V, r"p_min and record_steps"),
    ("override unknown", lambda w: C().override(temprature=0.5), V, r"temprature"),
    # decoding.json's content
    ("to_file tree True", lambda w: C(tree=True).to_file(), V, r"tree=True.*node_budget"),
    ("from_file tree true", lambda w: C.from_file({"tree": True}), V, r'"tree": true'),
    ("from_file tree false", lambda w: C.from_file({"tree": False}), V, r'"tree": false'),
    ("from_file trust", lambda w: C.from_file({"trust": 0.5}), V, r"decoding\.json.*needs cost"),
    ("from_file list", lambda w: C.from_file([1]), V, r"decoding\.json.*got a list"),
    ("from_file p_min 2", lambda w: C.from_file({"p_min": 2}), V, r"decoding\.json.*p_min.*2"),
    ("from_file unknown", lambda w: C.from_file({"foo": 1}), V, r"decoding\.json.*'foo'"),
    ("from_file tiny T", lambda w: C.from_file({"temperature": 1e-30}), V, r"1e-30"),
    # DecodingConfig.parse: texts, duplicates, keywords against the text
    ("parse T1e-40", lambda w: C.parse("dflash/T1e-40"), V, r"1e-40.*temperature=0"),
    ("parse T1e-5", lambda w: C.parse("dflash:8/T1e-5"), V, r"1e-05"),
    ("parse trust no cost", lambda w: C.parse("dflash/trust0.5"), V, r"trust needs cost"),
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
    ("parse bad number", lambda w: C.parse("dflash/pabc"), V, r"option 'pabc'"),
    ("parse chain n", lambda w: C.parse("dflash/n8/top2"), V, r"'dflash/n8/top2'.*tree's"),
    ("parse tree half", lambda w: C.parse("tree/n8"), V, r"'tree/n8'.*both"),
    ("parse p 1.5", lambda w: C.parse("dflash/p1.5"), V, r"p_min.*1\.5"),
    ("parse n500", lambda w: C.parse("tree:4/n500/top2"), V, r"500"),
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
    ("trust keyword", lambda w: sg(w.target, w.drafter, w.ids, trust=0.5), V, r"needs cost"),
    ("tree=1 keyword", lambda w: sg(w.target, w.drafter, w.ids, tree=1), V, r"got 1\."),
    ("tree=1.0 keyword", lambda w: sg(w.target, w.drafter, w.ids, tree=1.0), V, r"got 1\.0"),
    ("stop 10**9", lambda w: sg(w.target, w.drafter, w.ids, stop_token_ids=10**9), V,
     r"\[1000000000\].*0\.\.60"),
    ("stop 61", lambda w: sg(w.target, None, w.ids, stop_token_ids=[2, 61]), V, r"\[61\]"),
    ("tree top_k > V", lambda w: sg(w.target, w.drafter, w.ids,
                                    tree={"node_budget": 8, "top_k": 100}), V, r"top_k 100.*61"),
    ("ids float", lambda w: sg(w.target, w.drafter, w.ids.float()), V, r"LongTensor"),
    ("ids 1-D", lambda w: sg(w.target, w.drafter, w.ids[0]), V, r"\(1, S\) LongTensor"),
    ("ids a list", lambda w: sg(w.target, w.drafter, [[1, 2]]), V, r"LongTensor"),
    ("ids empty", lambda w: sg(w.target, w.drafter, w.ids[:, :0]), V, r"prompt is empty"),
    ("ids outside V", lambda w: sg(w.target, w.drafter, w.ids + 10**6), V, r"0\.\.60"),
    ("ids a batch", lambda w: sg(w.target, w.drafter, w.batch), V, r"batch of 2"),
    ("block over drafter's", lambda w: sg(w.target, w.drafter, w.ids, block_size=32), V,
     r"block_size 32.*2\.\.8"),
    ("block without drafter", lambda w: sg(w.target, None, w.ids, block_size=4), V,
     r"needs a drafter"),
    ("too long", lambda w: sg(w.target, w.drafter, w.ids, max_new_tokens=10**5), V,
     r"max_new_tokens \(100000\).*512 positions"),
    ("config a text", lambda w: sg(w.target, w.drafter, w.ids, "dflash"), T, r"'dflash'"),
    ("unknown keyword", lambda w: sg(w.target, w.drafter, w.ids, temprature=1), T,
     r"temprature"),
    ("mask to one row", lambda w: sg(w.target, w.drafter, w.ids,
                                     attention_mask=torch.ones_like(w.ids)), T, r"_batch"),
    ("AR drafter tree", lambda w: sg(w.target, w.ar, w.ids, tree=TREE), V, r"ARDrafter"),
    ("cost without curve", lambda w: sg(w.target, w.drafter, w.ids, cost=True), V,
     r"cost=True.*budget curve"),
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
    ("batch no columns", lambda w: sgb(w.target, w.drafter, w.batch[:, :0]), V, r"empty"),
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
                                        attention_mask=torch.full((2, 4), 2)), V, r"0.*and 1"),
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
     r"drafter: The drafter was built for a target with 4 layers, this target has 2"),
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
     r"decoding\.json: .*trust needs cost"),
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
]


@pytest.mark.parametrize("call,error,match", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_input_is_named(w, call, error, match):
    with pytest.raises(error, match=match) as err:
        call(w)
    assert err.type is error                      # not a subclass from deeper down
    assert "\n" not in str(err.value)             # one line


def test_the_table_is_large_and_unique():
    assert len(CASES) >= 110 and len({c[0] for c in CASES}) == len(CASES)


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

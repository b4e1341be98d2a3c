"""The benchmark tools run and check what they claim: every method's output is compared with
plain decoding, and the draft-cost sweep covers every drafter and length."""

import pytest

from minidflash.config import PROMPTS_DIR, TINY_AR_DRAFTER_DIR
from minidflash.target import load_target
from minidflash.tools import corpus, methods


@pytest.fixture(scope="module")
def tiny():
    return load_target()


def test_every_method_decodes_what_plain_decoding_does(tiny):
    target, tokenizer = tiny
    specs = ["plain", "dflash:4", "ar:2", "lookup:3", "generate"]
    drafters = methods.load_method_drafters(specs, target, None, str(TINY_AR_DRAFTER_DIR))
    rows = corpus.read_jsonl(PROMPTS_DIR / "arithmetic.jsonl")[:2]
    out = methods.run_methods(target, tokenizer, rows, specs, drafters, max_new_tokens=24,
                              progress=False)
    assert out["prompts"] == 2 and list(out["methods"]) == specs
    for spec, r in out["methods"].items():
        assert r["identical"], spec
        assert r["speedup"] > 0
    assert out["methods"]["plain"]["tau"] == 1.0 and out["methods"]["dflash:4"]["tau"] >= 1.0
    assert out["methods"]["lookup:3"]["tau"] is None
    # the loop split covers every prompt: tau is the prompt-weighted mean of its two halves
    n_loop, d = out["looping_prompts"], out["methods"]["dflash:4"]
    halves = [(n_loop, d["tau_looping"]), (2 - n_loop, d["tau_not_looping"])]
    assert d["tau"] == pytest.approx(sum(n * t for n, t in halves if n) / 2)
    assert d["layers"] == 1 and out["methods"]["plain"]["layers"] is None


def test_families_group_depths_and_chain_lengths():
    fig = lambda layers, ms: {"layers": layers, "draft_ms_per_step": ms, "speedup": 1.0, "tau": 2.0}
    curves = methods.families({"plain": fig(None, 0.0), "dflash:16@d5": fig(5, 6.0),
                               "dflash:16": fig(1, 2.0), "dflash:16@d3": fig(3, 4.0),
                               "dflash:8": fig(1, 1.5), "ar:8": fig(1, 7.0), "ar:4": fig(1, 4.0),
                               "lookup:10": fig(None, 0.0)})
    assert {n: [p for p, _ in c] for n, c in curves.items()} == {
        "DFlash, B = 16": ["1L", "3L", "5L"], "DFlash, B = 8": ["1L"], "AR, 1 layer": ["k=4", "k=8"]}


def test_method_names_are_checked():
    assert methods.parse("dflash:16@some/dir") == ("dflash", 16, "some/dir")
    assert methods.parse("plain") == ("plain", 1, None)
    with pytest.raises(ValueError, match="needs a number"):
        methods.parse("ar")
    with pytest.raises(ValueError, match="unknown method"):
        methods.parse("medusa:4")


def test_draft_cost_covers_every_drafter_and_length(tiny):
    target, _ = tiny
    cost = methods.draft_cost(target, context=32, max_tokens=3, repeats=1, dflash_layers=(1, 2))
    assert set(cost["ms"]) == {"AR (1 layer)", "DFlash (1 layer)", "DFlash (2 layers)"}
    assert all(len(v) == 3 and min(v) > 0 for v in cost["ms"].values())

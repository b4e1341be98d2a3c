"""The benchmark tools run and check what they claim: every method's output is compared with
plain decoding, and the draft-cost sweep covers every drafter and length."""

import json
import os

import pytest

from minidflash.decoding_config import DecodingConfig
import torch

from minidflash.paths import PROMPTS_DIR, TINY_AR_DRAFTER_DIR
from minidflash.checkpoints import load_drafter, save_drafter
from minidflash.target import load_target
from minidflash.tools.measure import bench, methods
from minidflash.tools import common


@pytest.fixture(scope="module")
def tiny():
    return load_target()


def test_a_divergence_is_located_and_its_logit_gap_measured(tiny):
    """Where a method's output parts from plain decoding, the bench records the first differing
    token and how far apart the two tokens' logits were (a near-tie, or a real disagreement)."""
    target, tokenizer = tiny
    ids = torch.tensor([[1, 5, 9, 14, 3]])
    from minidflash.verifier import speculative_generate
    plain = speculative_generate(target, None, ids, max_new_tokens=12, block_size=1).new_ids.tolist()
    with torch.no_grad():
        logits = target(torch.cat([ids, torch.tensor([plain[:7]])], 1)).logits[0, -1]
    second = int(logits.topk(2).indices[1])
    other = plain[:7] + [second] + plain[8:]
    d = methods.divergence(target, ids, plain, other)
    assert (d["token"], d["plain"], d["method"]) == (7, plain[7], second)
    assert d["gap"] == pytest.approx(float(logits[plain[7]] - logits[second]), abs=1e-5)
    assert d["gap"] > 0                             # plain's token is the argmax of the prefix
    assert methods.divergence(target, ids, plain, plain[:5])["token"] == 5   # one stopped early


def test_every_method_decodes_what_plain_decoding_does(tiny):
    target, tokenizer = tiny
    specs = ["plain", "dflash:4", "dflash:4/p0.5", "dflash", "ar:2", "ar:4/p0.95", "lookup:3",
             "generate"]
    drafters = methods.load_method_drafters(specs, target, None, str(TINY_AR_DRAFTER_DIR))
    rows = common.read_jsonl(PROMPTS_DIR / "arithmetic.jsonl")[:2]
    out = methods.run_methods(target, tokenizer, rows, specs, drafters, max_new_tokens=24,
                              progress=False)
    assert out["prompts"] == 2 and list(out["methods"]) == specs
    for spec, r in out["methods"].items():
        assert r["identical"] and r["divergences"] == [], spec
        assert r["speedup"] > 0
    assert out["methods"]["plain"]["tau"] == 1.0 and out["methods"]["dflash:4"]["tau"] >= 1.0
    assert out["methods"]["lookup:3"]["tau"] is None
    # the loop split covers every prompt: tau is the prompt-weighted mean of its two halves
    n_loop, d = out["looping_prompts"], out["methods"]["dflash:4"]
    halves = [(n_loop, d["tau_looping"]), (2 - n_loop, d["tau_not_looping"])]
    assert d["tau"] == pytest.approx(sum(n * t for n, t in halves if n) / 2)
    assert d["layers"] == 1 and out["methods"]["plain"]["layers"] is None
    # the cut verifies fewer drafted tokens per step than the whole block (3 for B = 4)
    m = out["methods"]
    assert m["dflash:4"]["verified_per_step"] == 3 and m["ar:2"]["verified_per_step"] == 2
    assert m["dflash:4/p0.5"]["verified_per_step"] < 3 and m["ar:4/p0.95"]["verified_per_step"] < 4
    # prompt by prompt: the figures of a subset (GSM8K without GSM-Symbolic's source items)
    for spec, r in m.items():
        assert len(r["per_prompt"]["tpot_ms"]) == 2
        assert r["tpot_ms"] == pytest.approx(sum(r["per_prompt"]["tpot_ms"]) / 2)
    every = methods.without(out, [])
    assert every["fastest_plain"] == out["fastest_plain"]
    for spec, r in every["methods"].items():
        assert r["tau"] == m[spec]["tau"], spec
        assert r["speedup_vs_fastest_plain"] == pytest.approx(m[spec]["speedup_vs_fastest_plain"])
        assert r["speedup_same_dtype"] == pytest.approx(m[spec]["speedup_same_dtype"])
    second = methods.without(out, [0])["methods"]["dflash:4"]
    assert second["tau"] == m["dflash:4"]["per_prompt"]["tau"][1]
    assert second["speedup_same_dtype"] == pytest.approx(
        m["plain"]["per_prompt"]["tpot_ms"][1] / m["dflash:4"]["per_prompt"]["tpot_ms"][1])


def test_gsm8k_results_name_the_prompts_gsm_symbolic_was_made_from():
    """Lines 33, 39, 46, 61 and 92 of gsm8k.jsonl: the test part's prompts 24, 30 and 37 of its
    first 40 (0-based 23, 29, 36), none of the dev part, none of another suite."""
    from minidflash.tools.measure.bench import template_sources

    assert template_sources("gsm8k", "test", 40) == [23, 29, 36]
    assert template_sources("gsm8k", "test", 90) == [23, 29, 36, 51, 82]
    assert template_sources("gsm8k", "dev", 10) == []
    assert template_sources("gsm8k", "all", 40) == [33, 39]
    assert template_sources("math500", "test", 40) == []


def test_families_group_depths_and_chain_lengths():
    fig = lambda layers, ms: {"layers": layers, "draft_ms_per_step": ms, "speedup": 1.0, "tau": 2.0}
    curves = methods.families({"plain": fig(None, 0.0), "dflash:16@d5": fig(5, 6.0),
                               "dflash:16": fig(1, 2.0), "dflash:16@d3": fig(3, 4.0),
                               "dflash:8": fig(1, 1.5), "ar:8": fig(1, 7.0), "ar:4": fig(1, 4.0),
                               "lookup:10": fig(None, 0.0)})
    assert {n: [p for p, _ in c] for n, c in curves.items()} == {
        "DFlash, B = 16": ["1L", "3L", "5L"], "DFlash, B = 8": ["1L"], "AR, 1 layer": ["k=4", "k=8"]}


def test_a_cost_method_needs_a_drafter_with_a_cost_curve(tiny):
    target, tokenizer = tiny
    drafter = load_drafter(target=target)                  # the tiny drafter ships no curve
    ids = torch.tensor([[1, 5, 9]])
    with pytest.raises(ValueError, match="carries a cost curve"):
        methods.decode(target, drafter, ids, 8, [], methods.parse("dflash:8/cost"))


def test_method_names_are_checked():
    """A method's decoding is the config's own text; the bench adds ar:k, lookup, generate, a
    dtype and @PATH around it."""
    C = DecodingConfig
    m = methods.parse("dflash:16@some/dir")
    assert (m.kind, m.k, m.path, m.config) == ("dflash", 16, "some/dir", C(block_size=16))
    assert methods.parse("dflash:8/p0.3").config == C(block_size=8, p_min=0.3)
    assert methods.parse("dflash").config is None                     # the drafter's defaults
    assert methods.parse("dflash/argmax").over == (("fp32_ties", False),)
    assert methods.parse("dflash:8/p0.3/cost").config == C(block_size=8, p_min=0.3, cost=True)
    ar = methods.parse("ar:8/p0.25@d")
    assert (ar.kind, ar.k, ar.path, ar.config) == ("ar", 8, "d", C(block_size=9, p_min=0.25))
    assert methods.parse("tree:16/n24/top4").config == C(
        block_size=16, tree={"node_budget": 24, "top_k": 4})
    assert methods.parse("plain/bf16").config == C(block_size=1)
    assert methods.parse("plain/bf16").dtype == "bfloat16"
    assert methods.parse("dflash:8/cost/trust0.3").config == C(block_size=8, cost=True, trust=0.3)
    assert methods.parse("dflash:4/T0.7").config.temperature == 0.7
    for spec in ("dflash:8/p0.3/cost", "tree:8/n15/top2/cost", "plain/argmax", "dflash:4/T0.7"):
        assert str(methods.parse(spec).config) == spec               # the text round-trips
    for bad, why in (("ar", "needs a number"), ("medusa:4", "unknown method"),
                     ("dflash:8/trust0.3", "trust needs cost"),
                     ("dflash:8/q3", "not one of pP"), ("tree:16/n24", "nodes and its candidates"),
                     ("dflash:8/n4", "are a tree's"), ("generate/p0.3", "lookup:k or generate"),
                     ("tree:8/n15/top2/cost/trust0.2", "not a tree's"),
                     ("dflash:x", "not a decoding"), ("plain/fp32/bf16", "one dtype")):
        with pytest.raises(ValueError, match=why):
            methods.parse(bad)


def test_draft_cost_covers_every_drafter_and_length(tiny):
    target, _ = tiny
    from minidflash.tools.measure.draft_cost import draft_cost
    cost = draft_cost(target, context=32, max_tokens=3, repeats=1, dflash_layers=(1, 2))
    assert set(cost["ms"]) == {"AR (1 layer)", "DFlash (1 layer)", "DFlash (2 layers)"}
    assert all(len(v) == 3 and min(v) > 0 for v in cost["ms"].values())


def test_step_times_cover_every_piece_at_every_thread_count(tiny):
    target, _ = tiny
    drafter = load_drafter(target=target)
    threads = torch.get_num_threads()
    out = bench.step_times_by_threads(target, drafter, [1, 2], context=32, repeats=1, rounds=2)
    assert torch.get_num_threads() == threads              # the caller's count is restored
    pieces = {"prefill_ms", "decode_ms", *(f"{k}_{B}_ms" for k in ("verify", "draft") for B in (4, 8, 16))}
    for t in ("1", "2"):
        ms = out[t]
        assert pieces <= set(ms) and all(ms[k] > 0 for k in pieces)
        assert ms["dflash_step_in_decode_steps"] == pytest.approx(
            (ms["draft_16_ms"] + ms["verify_16_ms"]) / ms["decode_ms"])


def test_step_times_command_writes_each_thread_count(tmp_path, monkeypatch):
    """``bench --step-times --threads 1 2 --out F``: the counts take turns, each is recorded,
    the figure is drawn; several counts without --step-times are refused."""
    seen = []

    def fake_step_times(target, drafter, context=512, repeats=20, lean=None):
        t = torch.get_num_threads()
        seen.append(t)
        return {"prefill_ms": 50.0 * t, "decode_ms": 2.0 * t,
                **{f"verify_{B}_ms": (3.0 + B / 4) * t for B in (4, 8, 16)},
                **{f"draft_{B}_ms": 1.0 * t for B in (4, 8, 16)}}
    monkeypatch.setattr(bench, "step_times", fake_step_times)
    path = tmp_path / "step_times.json"
    bench.main(["--step-times", "--threads", "1", "2", "--out", str(path)])
    saved = json.loads(path.read_text())
    assert seen == [1, 2, 2, 1, 1, 2]
    assert list(saved["threads"]) == ["1", "2"] and saved["threads"]["2"]["decode_ms"] == 4.0
    assert saved["threads"]["1"]["dflash_step_in_decode_steps"] == pytest.approx((1 + 7) / 2)
    assert saved["command"] == f"python -m minidflash bench --step-times --threads 1 2 --out {path}"
    assert saved["target"] == "data/target" and saved["drafter"] == "data/drafter"
    machine = saved["machine"]                     # what the timings hold on
    assert machine["cores"] == os.cpu_count() and machine["cpu"] and machine["torch"] == torch.__version__
    assert machine["native_bf16"] == torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert path.with_suffix(".png").exists()
    with pytest.raises(SystemExit):
        bench.main(["--threads", "1", "2", "--n", "1"])


def test_full_vocab_ignores_the_draft_vocabulary_file(tmp_path, monkeypatch, tiny):
    """``--full-vocab`` drafts over the whole vocabulary, as an engine that ignores
    draft_vocab.json does; without it the file's subset is used; the JSON says which."""
    drafter = load_drafter(target=tiny[0])
    drafter.set_draft_vocab(range(0, drafter.config.vocab_size, 2))
    save_drafter(drafter, tmp_path / "d")
    seen = []

    def fake_step_times(target, drafter, context=512, repeats=20, lean=None):
        seen.append(drafter.draft_vocab)
        return {"prefill_ms": 50.0, "decode_ms": 2.0, **{f"verify_{B}_ms": 3.0 for B in (4, 8, 16)},
                **{f"draft_{B}_ms": 1.0 for B in (4, 8, 16)}}
    monkeypatch.setattr(bench, "step_times", fake_step_times)
    argv = ["--step-times", "--drafter", str(tmp_path / "d"), "--out"]
    subset = bench.main(argv + [str(tmp_path / "a.json")])
    full = bench.main(argv + [str(tmp_path / "b.json"), "--full-vocab"])
    half = (drafter.config.vocab_size + 1) // 2
    assert seen[0].numel() == half and seen[-1] is None
    assert subset["draft_vocab"] == half and full["draft_vocab"] is None


def test_step_times_times_the_pass_a_decode_runs(monkeypatch, tiny):
    """``bench --step-times`` (and llama-cpp's torch step times) time decoding.target_pass with
    the lean setting a decode would run: through lean.py where the target supports it, else
    (--no-lean) transformers' forward."""
    seen = []
    real = bench.target_pass
    monkeypatch.setattr(bench, "target_pass",
                        lambda *a, lean=False, **k: seen.append(lean) or real(*a, lean=lean, **k))
    drafter = load_drafter(target=tiny[0])
    on = bench.step_times(tiny[0], drafter, context=32, repeats=1)
    assert on["lean"] is True and seen and all(seen)
    seen.clear()
    off = bench.step_times(tiny[0], drafter, context=32, repeats=1, lean=False)
    assert off["lean"] is False and seen and not any(seen)

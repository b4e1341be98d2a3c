"""Every path honours every field of DecodingConfig: the chain, the tree and the batch (the
three loops), the bench's methods and the demo. One test per field per path, each with an
observation that an ignored field would not produce (a planted "ignore the field" in a loop
turns its test red: ``test_a_planted_ignored_temperature_goes_red`` does it for the batch's
temperature, the bug this file was written for).

The shipped tiny target and drafter: real drafts, accepted often, in about a second a decode.
"""

import copy
from dataclasses import replace

import pytest
import torch

import minidflash.decoding as decoding
import minidflash.verifier as verifier
from minidflash import verify_cost
from minidflash.paths import PROMPTS_DIR
from minidflash.checkpoints import load_drafter
from minidflash.decoding_config import DecodingConfig, set_decoding
from minidflash.target import chat_ids, load_target, stop_ids
from minidflash.tools.common import read_jsonl
from minidflash.tools.measure import methods
from minidflash.verifier import speculative_generate, speculative_generate_batch
from minidflash.verify_cost import VerifyCost

PATHS = ["chain", "tree", "batch"]
TREE = {"node_budget": 12, "top_k": 3}
NOTHING_PAYS = VerifyCost(tuple(1.0 + 5.0 * k for k in range(16)), draft=0.0)   # every m > 0 costs more than it gives


@pytest.fixture(scope="module")
def tiny():
    target, tokenizer = load_target()
    drafter = load_drafter(target=target)
    rows = read_jsonl(PROMPTS_DIR / "arithmetic.jsonl")[:2]
    prompts = [chat_ids(tokenizer, r["messages"]) for r in rows]
    return target, drafter, prompts, stop_ids(tokenizer)


def run(path, target, drafter, ids, **fields):
    """One decode of ids (1, S) on a path: the chain, the tree (a tree unless the fields name a
    chain's setting) or the batch (two rows: the prompt twice, row 0 returned)."""
    if path == "tree":
        fields = {"tree": TREE, **fields}
    if path == "batch":
        return speculative_generate_batch(target, drafter, ids.repeat(2, 1), **fields)[0]
    return speculative_generate(target, drafter, ids, **fields)


@pytest.mark.parametrize("path", PATHS)
def test_max_new_tokens(tiny, path):
    target, drafter, prompts, _ = tiny
    for n in (1, 7, 23):
        out = run(path, target, drafter, prompts[0], max_new_tokens=n)
        assert out.num_new_tokens == n
        assert 1 + sum(out.acceptance_lengths[:-1]) < n or n == 1   # the loop stopped, not the cut


@pytest.mark.parametrize("path", PATHS)
def test_stop_token_ids(tiny, path):
    target, drafter, prompts, _ = tiny
    free = run(path, target, drafter, prompts[0], max_new_tokens=30).new_ids.tolist()
    j = next(j for j in range(5, 30) if free[j] not in free[:j])      # its first occurrence
    for stops in (free[j], [free[j]], torch.tensor([free[j], 10**6 % 61])):
        out = run(path, target, drafter, prompts[0], max_new_tokens=30, stop_token_ids=stops)
        assert out.new_ids.tolist() == free[:j + 1]
        assert 1 + sum(out.acceptance_lengths[:-1]) <= j      # the loop stopped at the step that
        #                                                       committed it, not only the cut


@pytest.mark.parametrize("path", PATHS)
def test_block_size(tiny, path):
    target, drafter, prompts, _ = tiny
    wide = run(path, target, drafter, prompts[0], max_new_tokens=40)
    assert max(wide.acceptance_lengths) > 3                           # the drafter goes further
    out = run(path, target, drafter, prompts[0], max_new_tokens=40, block_size=3)
    assert max(out.acceptance_lengths) <= 3 and out.block_size == 3
    assert torch.equal(out.output_ids, wide.output_ids)
    plain = run(path, target, drafter, prompts[0], max_new_tokens=40, block_size=1)
    assert set(plain.acceptance_lengths) == {1} and sum(plain.verified) == 0


@pytest.mark.parametrize("path", ["chain", "batch"])
def test_p_min(tiny, path):
    target, drafter, prompts, _ = tiny
    free = run(path, target, drafter, prompts[0], max_new_tokens=40)
    cut = run(path, target, drafter, prompts[0], max_new_tokens=40, p_min=0.999)
    assert sum(cut.verified) / len(cut.verified) < sum(free.verified) / len(free.verified)
    assert torch.equal(cut.output_ids, free.output_ids)


def test_p_min_over_a_tree_selects_the_chain(tiny):
    target, drafter, prompts, _ = tiny
    d = copy.copy(drafter)
    set_decoding(d, DecodingConfig(tree=TREE))                 # a drafter whose default is a tree
    out = speculative_generate(target, d, prompts[0], max_new_tokens=20, p_min=0.5)
    assert out.config.tree is None and out.config.p_min == 0.5
    assert "default tree is not used" in out.config.describe(target, d)


@pytest.mark.parametrize("path", PATHS)
def test_cost(tiny, path):
    target, drafter, prompts, _ = tiny
    free = run(path, target, drafter, prompts[0], max_new_tokens=30)
    priced = run(path, target, drafter, prompts[0], max_new_tokens=30, cost=NOTHING_PAYS)
    assert sum(free.verified) > 0 and sum(priced.verified) == 0      # no draft pays: none verified
    assert torch.equal(priced.output_ids, free.output_ids)


def test_trust(tiny, monkeypatch):
    """trust: the chain corrects q as it goes (a Trust per decode, updated every drafted step)."""
    target, drafter, prompts, _ = tiny
    made = []

    class Spy(verify_cost.Trust):
        def __init__(self, weight):
            super().__init__(weight)
            made.append(self)

    monkeypatch.setattr(verify_cost, "Trust", Spy)
    flat = VerifyCost(tuple(1.0 + 0.01 * k for k in range(16)), draft=0.05)
    run("chain", target, drafter, prompts[0], max_new_tokens=20, cost=flat)
    assert not made
    out = run("chain", target, drafter, prompts[0], max_new_tokens=20, cost=flat, trust=0.5)
    assert len(made) == 1 and made[0].weight == 0.5 and out.config.cost.trust_weight == 0.5


def test_tree(tiny):
    target, drafter, prompts, _ = tiny
    chain = run("chain", target, drafter, prompts[0], max_new_tokens=30, block_size=4)
    assert max(chain.verified) <= 3
    for tree in ({"node_budget": 12, "top_k": 3}, {"node_budget": 5, "top_k": 1}):
        out = run("chain", target, drafter, prompts[0], max_new_tokens=30, block_size=4, tree=tree)
        paths = sum(tree["top_k"] ** depth for depth in (1, 2, 3))    # every path 3 deep
        assert max(out.verified) == min(tree["node_budget"], paths)
        assert torch.equal(out.output_ids, chain.output_ids)


def test_a_batch_refuses_a_tree_and_lets_a_default_tree_give_way(tiny):
    target, drafter, prompts, _ = tiny
    with pytest.raises(ValueError, match="one sequence at a time"):
        run("batch", target, drafter, prompts[0], max_new_tokens=5, tree=TREE)
    d = copy.copy(drafter)
    set_decoding(d, DecodingConfig(tree=TREE))
    out = speculative_generate_batch(target, d, prompts[0], max_new_tokens=5)[0]
    assert out.config.tree is None
    assert "a batch verifies chains" in out.config.describe(target, d, batch=True)


@pytest.mark.parametrize("path", PATHS)
def test_temperature(tiny, path):
    """T > 0 samples: seeded, the same seed gives the same output and another seed another; at
    T = 0 the generator changes nothing."""
    target, drafter, prompts, _ = tiny
    greedy = run(path, target, drafter, prompts[0], max_new_tokens=30)
    seeded = lambda s, T: run(path, target, drafter, prompts[0], max_new_tokens=30,
                              temperature=T, generator=torch.Generator().manual_seed(s))
    assert torch.equal(seeded(0, 0.0).output_ids, greedy.output_ids)
    hot = [seeded(s, 3.0).new_ids.tolist() for s in range(3)]
    assert all(h != greedy.new_ids.tolist() for h in hot) and hot[0] != hot[1]
    assert seeded(0, 3.0).new_ids.tolist() == hot[0]


def test_the_batch_honours_a_configs_temperature(tiny):
    """The bug this file was written for: a config's temperature reached the batch as 0."""
    target, drafter, prompts, _ = tiny
    ids = prompts[0].repeat(2, 1)
    gen = lambda: torch.Generator().manual_seed(0)
    greedy = speculative_generate_batch(target, drafter, ids, DecodingConfig(max_new_tokens=30))
    hot = speculative_generate_batch(target, drafter, ids,
                                     DecodingConfig(max_new_tokens=30, temperature=3.0),
                                     generator=gen())
    assert hot[0].config.temperature == 3.0
    assert hot[0].new_ids.tolist() != greedy[0].new_ids.tolist()


def test_a_planted_ignored_temperature_goes_red(tiny, monkeypatch):
    """The check has power: a loop that reads temperature 0 whatever the config says makes
    ``test_temperature``'s observation fail, for each of the three loops."""
    target, drafter, prompts, _ = tiny
    real = decoding.Pick
    monkeypatch.setattr(verifier, "Pick", lambda T, *a, **k: real(0, *a, **k))
    for path in PATHS:
        greedy = run(path, target, drafter, prompts[0], max_new_tokens=30)
        hot = run(path, target, drafter, prompts[0], max_new_tokens=30, temperature=3.0,
                  generator=torch.Generator().manual_seed(0))
        assert hot.new_ids.tolist() == greedy.new_ids.tolist(), path   # what the test would catch


@pytest.mark.parametrize("path", PATHS)
def test_fp32_ties(tiny, monkeypatch, path):
    """fp32_ties: a bf16 target's greedy choices go to greedy_choice with the lm_head (near-ties
    decided in fp32) when on, without it when off; an fp32 target has nothing to decide."""
    target, drafter, prompts, _ = tiny
    heads = []
    real = decoding.greedy_choice
    monkeypatch.setattr(decoding, "greedy_choice",
                        lambda logits, hidden=None, head=None: heads.append(head) or
                        real(logits, hidden, head))
    bf16 = copy.deepcopy(target).to(torch.bfloat16)
    d16 = copy.deepcopy(drafter).to(torch.bfloat16)
    for model, d, ties, want in [(bf16, d16, True, True), (bf16, d16, False, False),
                                 (target, drafter, True, False)]:
        heads.clear()
        out = run(path, model, d, prompts[0], max_new_tokens=12, fp32_ties=ties)
        assert heads and all((h is not None) == want for h in heads), (ties, model.dtype)
        assert out.config.fp32_ties == ties


@pytest.mark.parametrize("path", ["chain", "batch"])
def test_record_steps(tiny, path):
    target, drafter, prompts, _ = tiny
    assert run(path, target, drafter, prompts[0], max_new_tokens=20).steps == []
    out = run(path, target, drafter, prompts[0], max_new_tokens=20, record_steps=True)
    assert len(out.steps) == len(out.acceptance_lengths)
    accepted = [s["accepted"] + 1 for s in out.steps]      # what each verify pass accepted
    assert accepted[:-1] == out.acceptance_lengths[:-1]     # the last step: what the cut kept
    assert out.acceptance_lengths[-1] <= accepted[-1]
    assert 1 + sum(out.acceptance_lengths) == out.num_new_tokens


def test_record_steps_over_a_tree_selects_the_chain(tiny):
    target, drafter, prompts, _ = tiny
    d = copy.copy(drafter)
    set_decoding(d, DecodingConfig(tree=TREE))
    out = speculative_generate(target, d, prompts[0], max_new_tokens=20, record_steps=True)
    assert out.config.tree is None and len(out.steps) == len(out.acceptance_lengths)


# -- the bench: a method's text is its config, and each of its fields reaches the decode ------
@pytest.mark.parametrize("spec,check", [
    ("dflash:3", lambda r: max(r.acceptance_lengths) <= 3),
    ("dflash:8/p0.999", lambda r: sum(r.verified) / len(r.verified) < 2),
    ("tree:4/n12/top3", lambda r: max(r.verified) > 3),
    ("dflash:8/T3", lambda r: r.config.temperature == 3.0),
    ("dflash:8/steps", lambda r: len(r.steps) == len(r.acceptance_lengths)),
    ("plain", lambda r: set(r.acceptance_lengths) == {1}),
    ("dflash:8/argmax", lambda r: r.config.fp32_ties is False),
    ("dflash:8/nolean", lambda r: r.config.lean is False),
    ("dflash:8/lean", lambda r: r.config.lean is True),
    ("dflash:8/exact", lambda r: r.config.exact is True),
    ("dflash:8/int8", lambda r: r.config.draft_int8 is True),
    ("dflash:8/noint8", lambda r: r.config.draft_int8 is False),
])
def test_the_bench_decodes_what_its_method_says(tiny, spec, check):
    target, drafter, prompts, stops = tiny
    m = methods.parse(spec)
    r = methods.decode(target, drafter, prompts[0], 17, stops, m)
    assert check(r) and r.num_new_tokens <= 17 and r.config.max_new_tokens == 17
    assert r.config.stop_token_ids == tuple(stops)
    assert str(replace(r.config, block_size=m.config.block_size, lean=m.config.lean)) == str(m.config)


# -- the demo and the bench's block-size runs: each command-line field reaches every decode ----
FLAGS = [(["--max-new-tokens", "9"], "max_new_tokens", 9), (["--block-size", "3"], "block_size", 3),
         (["--p-min", "0.5"], "p_min", 0.5), (["--temperature", "0.7"], "temperature", 0.7),
         (["--no-fp32-ties"], "fp32_ties", False), (["--tree", "5,2"], "tree",
                                                     {"node_budget": 5, "top_k": 2}),
         (["--cost"], "cost", True), (["--no-cost"], "cost", False),
         (["--no-lean"], "lean", False), (["--lean"], "lean", True), (["--exact"], "exact", True),
         (["--draft-int8"], "draft_int8", True), (["--no-draft-int8"], "draft_int8", False)]


def test_every_field_a_command_line_sets_is_checked_here():
    from dataclasses import fields as fields_of
    from minidflash.decoding_config import DecodingConfig
    checked = {f for _, f, _ in FLAGS} | {"stop_token_ids", "trust", "record_steps"}
    assert {f.name for f in fields_of(DecodingConfig)} <= checked   # trust, steps: methods above


def spy_on(module, monkeypatch):
    """Every config a command's decodes ran (the resolved config each result carries)."""
    seen, real = [], module.speculative_generate

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        seen.append(out.config)
        return out
    monkeypatch.setattr(module, "speculative_generate", spy)
    return seen


@pytest.mark.parametrize("flag,field,value", FLAGS)
def test_the_demo_honours_every_flag(tiny, monkeypatch, capsys, flag, field, value):
    from minidflash.tools.measure import demo
    target, drafter, _, _ = tiny
    if field == "cost":      # the tiny drafter ships no curve: give it one
        monkeypatch.setattr(demo, "get_drafter", lambda *a: with_curve(drafter))
    seen = spy_on(demo, monkeypatch)
    demo.main(["--n", "1", "--max-new-tokens", "12", *flag])
    decodes = [c for c in seen if c.block_size != 1 and c.max_new_tokens != 8]   # not warm-up
    got = lambda c: bool(c.cost) if field == "cost" else getattr(c, field)
    assert decodes and all(got(c) == value for c in decodes), [str(c) for c in seen]
    assert field != "cost" or value is not True or "verify curve" in capsys.readouterr().out


def with_curve(drafter):
    d = copy.copy(drafter)
    set_decoding(d, DecodingConfig.of(drafter),
                 {("float32", 1): VerifyCost(tuple(1.0 + 0.05 * k for k in range(16)), draft=0.1)})
    return d


@pytest.mark.parametrize("flag,field,value", [f for f in FLAGS if f[1] not in ("block_size",
                                                                              "max_new_tokens")])
def test_the_bench_honours_every_flag(tiny, monkeypatch, flag, field, value):
    from minidflash.tools.measure import bench
    target, drafter, _, _ = tiny
    monkeypatch.setattr(bench, "load_drafter", lambda *a, **k: with_curve(drafter))
    seen = spy_on(bench, monkeypatch)
    bench.main(["--suites", "arithmetic", "--n", "1", "--block-sizes", "4",
                "--max-new-tokens", "10", *flag])
    decodes = [c for c in seen if c.block_size == 4 and c.max_new_tokens == 10]
    got = lambda c: bool(c.cost) if field == "cost" else getattr(c, field)
    assert decodes and all(got(c) == value for c in decodes), [str(c) for c in seen]

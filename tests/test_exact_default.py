"""Exact mode's own settings: its prices (every pass W rows: ``verify_cost.at_rows``), the
drafting a drafter's decoding.json chose for it ("exact", ``budget exact`` from a dev bench),
taken by a call that asks for exact mode and names no block or tree, and kept by every save."""

import json

import pytest
import torch

from minidflash.checkpoints import load_drafter, save_drafter
from minidflash.decoding_config import (DecodingConfig, exact_default_of, set_decoding,
                                        set_exact_default)
from minidflash.prepare import cost_of
from minidflash.tools.measure import budget
from minidflash.verifier import speculative_generate
from minidflash.verify_cost import VerifyCost, at_rows
from tests.helpers import random_drafter, tiny_target

CURVE = VerifyCost((1.0, 1.2, 1.5, 1.9, 2.0, 2.1, 2.2, 2.4), 0.3)


def test_exact_prices_are_flat_at_w_rows():
    flat = at_rows(CURVE, 4)
    assert flat.verify == (1.0,) * 8 and flat.draft == round(0.3 / 1.9, 3)
    assert at_rows(CURVE, 16).draft == round(0.3 / 2.4, 3)        # W past the curve: its end


@pytest.fixture
def pair():
    target = tiny_target(7, vocab=89, layers=3)
    drafter = random_drafter(target, 7, block_size=8)
    set_decoding(drafter, DecodingConfig(tree={"node_budget": 7, "top_k": 4}, cost=True),
                 {("float32", 1): CURVE})
    set_exact_default(drafter, {"block_size": 4})
    return target, drafter


def test_a_call_in_exact_mode_takes_the_drafting_chosen_for_it(pair):
    target, drafter = pair
    ids = torch.tensor([[3, 5, 7, 11, 13]])
    out = speculative_generate(target, drafter, ids, max_new_tokens=24, exact=True)
    assert out.config.block_size == 4 and out.config.tree is None and out.config.rows == 4
    assert out.config.cost.verify == (1.0,) * 8                    # priced at W rows
    plain = speculative_generate(target, None, ids, max_new_tokens=24, exact=4)
    assert torch.equal(out.output_ids, plain.output_ids)           # plain exact decoding at W 4
    assert all(m in (0, 3) for m in out.verified)                  # every draft verified, or none
    named = speculative_generate(target, drafter, ids, max_new_tokens=24, exact=True, block_size=8)
    assert named.config.block_size == 8 and named.config.rows == 8  # a call that names its own
    assert isinstance(speculative_generate(target, drafter, ids, max_new_tokens=8).config.tree,
                      dict)                                        # outside exact mode: the tree
    words = DecodingConfig.of(drafter, exact=True).override(exact=True).describe(target, drafter)
    assert "3 tokens; verify them as a chain" in words and "at W rows a pass" in words


def test_saves_and_cost_writes_keep_the_exact_default(pair, tmp_path):
    target, drafter = pair
    save_drafter(drafter, tmp_path / "d")
    assert json.loads((tmp_path / "d" / "decoding.json").read_text())["exact"] == {"block_size": 4}
    back = load_drafter(tmp_path / "d", target=target)
    assert exact_default_of(back) == {"block_size": 4}
    budget.write_cost(tmp_path / "d", {1: CURVE}, dtype="float32")
    assert json.loads((tmp_path / "d" / "decoding.json").read_text())["exact"] == {"block_size": 4}


def dev_bench(split="dev", identical=True):
    row = lambda x, same=True: {"speedup_vs_fastest_plain": x, "identical": same}
    return {"split": split, "suites": {s: {"methods": {
        "plain": row(1.0), "plain/exact:4": row(0.9), "plain/exact:8": row(0.8),
        "dflash:4/exact": row(a), "tree:8/n7/top4/exact": row(b, identical),
        "dflash:8": row(2.0)}} for s, (a, b) in {"gsm8k": (1.5, 1.9), "mtbench": (1.2, 1.1)}.items()}}


def test_budget_exact_writes_the_fastest_exact_method_of_a_dev_bench(pair, tmp_path, capsys):
    target, drafter = pair
    save_drafter(drafter, tmp_path / "d")
    (tmp_path / "dev.json").write_text(json.dumps(dev_bench()))
    out = budget.main(["exact", "--from", str(tmp_path / "dev.json"), "--drafter", str(tmp_path / "d")])
    assert out["exact"] == {"block_size": 8, "tree": {"node_budget": 7, "top_k": 4}}  # 1.45 > 1.34
    assert "tree:8/n7/top4/exact" in capsys.readouterr().out
    assert exact_default_of(load_drafter(tmp_path / "d", target=target))["tree"]["node_budget"] == 7
    best, _, scores = budget.choose_exact(dev_bench(identical=False), "f")    # not identical:
    assert best == "dflash:4/exact" and "tree:8/n7/top4/exact" not in scores  # never chosen


def test_budget_exact_refuses_a_bench_of_the_test_part(tmp_path, capsys):
    (tmp_path / "t.json").write_text(json.dumps(dev_bench("test")))
    with pytest.raises(SystemExit):
        budget.main(["exact", "--from", str(tmp_path / "t.json"), "--drafter", str(tmp_path)])
    assert "chosen on the dev part" in capsys.readouterr().err

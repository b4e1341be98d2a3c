"""This machine's prices (prices.py): ``budget machine`` keeps the verify curve it measured, a
decode with the cost model then prices on it instead of the drafter's shipped curve (and says
so), the key tells CPU kinds, shapes and dtypes apart, and a broken file is an error that names
it."""

import json

import pytest
import torch

from minidflash import prices
from minidflash.decoding_config import DecodingConfig, set_decoding
from minidflash.prepare import cost_of
from minidflash.tools.measure import budget
from minidflash.verify_cost import VerifyCost
from tests.helpers import random_drafter, tiny_target

SHIPPED = {("float32", 1): VerifyCost((1.0, 1.1, 1.2, 1.3), 0.2)}


def curve(steps, draft_ms=2.0, t1=10.0):
    return {"1": {"verify_ms": [t1 * x for x in steps], "in_decode_steps": list(steps),
                  "draft_ms": draft_ms}}


@pytest.fixture
def pair(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIDFLASH_PRICES", str(tmp_path / "prices"))
    target = tiny_target()
    drafter = random_drafter(target, block_size=4)
    set_decoding(drafter, DecodingConfig(cost=True), SHIPPED)
    return target, drafter


def test_a_decode_prices_on_this_machines_curve_once_measured(pair):
    target, drafter = pair
    cfg = DecodingConfig(cost=True, block_size=4)
    assert cost_of(target, drafter, cfg).verify == (1.0, 1.1, 1.2, 1.3)       # the shipped
    assert "shipped with the drafter" in cfg.describe(target, drafter)
    path = prices.save(target, drafter, curve([1.0, 2.0, 2.5, 3.0]), "budget machine")
    assert path.parent == prices.cache_dir()
    cost = cost_of(target, drafter, cfg)
    assert cost.verify == (1.0, 2.0, 2.5, 3.0) and cost.draft == 0.2
    assert f"measured on this CPU ({path})" in cfg.describe(target, drafter)


def test_the_key_tells_dtypes_shapes_and_cpus_apart(pair, monkeypatch):
    target, drafter = pair
    prices.save(target, drafter, curve([1.0, 3.0]))
    assert prices.measured(target, drafter) is not None
    assert prices.measured(target.to(torch.bfloat16), drafter.to(torch.bfloat16)) is None
    target.to(torch.float32), drafter.to(torch.float32)
    assert prices.measured(target, random_drafter(target, block_size=8)) is None   # a shape
    assert prices.measured(target, drafter) is not None
    kind = prices.cpu_kind()
    monkeypatch.setattr(prices, "cpu_kind", lambda: {**kind, "isa": "another"})
    assert prices.measured(target, drafter) is None                            # another CPU kind
    assert prices.measured(target, None) is None                               # plain: no drafter


@pytest.mark.parametrize("text", ["{", "[]", '{"key": 1}'])
def test_a_broken_prices_file_is_an_error_that_names_it(pair, text):
    target, drafter = pair
    path = prices.save(target, drafter, curve([1.0, 3.0]))
    path.write_text(text)
    with pytest.raises(ValueError, match=f"{path}: not a prices file.*budget machine"):
        cost_of(target, drafter, DecodingConfig(cost=True, block_size=4))


def test_budget_machine_measures_and_keeps_the_curve(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MINIDFLASH_PRICES", str(tmp_path / "prices"))
    out = budget.main(["machine", "--threads", "1"])
    data = json.loads(open(out["file"]).read())
    assert data["key"]["cpu"] == prices.cpu_kind() and data["key"]["dtype"] == "float32"
    assert len(data["curve"]["1"]["verify_ms"]) == 16 and data["command"].startswith(
        "python -m minidflash budget machine")
    assert "prices kept in" in capsys.readouterr().out


def test_budget_machine_refuses_what_would_not_be_a_decodes_prices(capsys):
    with pytest.raises(SystemExit):
        budget.main(["machine", "--max-k", "4"])
    assert "drop --shape, --context and --max-k" in capsys.readouterr().err

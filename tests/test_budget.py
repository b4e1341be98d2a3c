"""The verify-budget tool: the cost curve covers k = 1..16 at every thread count, and the
calibration counts every drafted slot the target reached exactly once; a saved curve becomes a
drafter's cost model."""

import json

import pytest
import torch

from minidflash.decoding_config import DecodingConfig, decoding_of, set_decoding
from minidflash.checkpoints import load_drafter, save_drafter
from minidflash.target import chat_ids, load_target, stop_ids
from minidflash.tools.measure import budget
from minidflash.tools import common
from minidflash.verifier import speculative_generate
from minidflash.verify_cost import VerifyCost
from tests.helpers import random_drafter, tiny_target


@pytest.fixture(scope="module")
def tiny():
    target, tokenizer = load_target()
    return target, tokenizer, load_drafter(target=target)


def test_curve_covers_every_length_and_thread_count(tiny):
    target, _, drafter = tiny
    before = torch.get_num_threads()
    out = budget.curve_by_threads(target, drafter, [1, 2], rounds=1, context=16, max_k=16, repeats=1)
    assert torch.get_num_threads() == before
    for t in ("1", "2"):
        c = out[t]
        assert len(c["verify_ms"]) == 16 and min(c["verify_ms"]) > 0 and c["draft_ms"] > 0
        assert c["in_decode_steps"][0] == 1.0


def test_a_draft_is_timed_after_a_target_pass_as_in_a_decode(tiny, monkeypatch):
    """The draft's price is taken right after a one-token target pass each time (the target's
    weights push the drafter's out of the caches, as in a decode), and that pass is not timed."""
    from minidflash.tools.measure import curve
    target, _, drafter = tiny
    events, real_pass, real_draft = [], curve.target_pass, drafter.draft
    monkeypatch.setattr(curve, "target_pass", lambda t, ids, *a, **k: events.append(
        ("pass", ids.shape[1])) or real_pass(t, ids, *a, **k))
    monkeypatch.setattr(drafter, "draft", lambda *a, **k: events.append(("draft",)) or real_draft(*a, **k))
    out = curve.verify_curve(target, drafter, context=16, max_k=2, repeats=3)
    drafts = [i for i, e in enumerate(events) if e == ("draft",)]
    assert len(drafts) == 1 + 3 and out["draft_ms"] > 0          # the first one fills the cache
    assert all(events[i - 1] == ("pass", 1) for i in drafts[1:])
    timed = []
    common.median_ms(lambda: timed.append("fn"), 2, before=lambda: timed.append("before"))
    assert timed == ["before", "fn"] * 2


def test_calibration_counts_each_reached_slot_once(tiny):
    target, tokenizer, drafter = tiny
    rows = common.suite_prompts("arithmetic", "dev", 2)
    cal = budget.calibration(target, tokenizer, drafter, rows, 40, block_size=8)
    # the same decodes, counted by hand: slot j is reached when slots 1..j-1 were accepted
    reached = accepted = steps = 0
    for row in rows:
        out = speculative_generate(target, drafter, chat_ids(tokenizer, row["messages"]),
                                   max_new_tokens=40, block_size=8,
                                   stop_token_ids=stop_ids(tokenizer), p_min=0.0,
                                   record_steps=True)
        steps += len(out.steps)
        for a in (step["accepted"] for step in out.steps):   # what the pass reached, not the cut
            reached += min(a + 1, 7)
            accepted += a
    assert sum(cal["reached"]) == reached and sum(cal["accepted"]) == accepted
    assert sum(s["reached"] for s in cal["slots"]) == reached
    assert all(0 <= s["all_accepted"] <= 1 and 0 < s["q_product"] <= 1 for s in cal["slots"])
    assert cal["slots"][0]["reached"] == steps                 # slot 1 is reached every step


def test_cost_writes_a_saved_curve_into_the_drafters_files(tmp_path):
    """`budget cost --from curve.json --drafter DIR`: the curves, per thread count, become the
    drafter's default cost model; its other settings stay."""
    target = tiny_target(4, vocab=97, layers=6)            # 6 layers: 3 distinct ones read
    drafter = random_drafter(target, 4)
    set_decoding(drafter, DecodingConfig(p_min=0.3))
    save_drafter(drafter, tmp_path / "d")
    curve = {"threads": {"1": {"in_decode_steps": [1.0, 1.8, 2.2], "verify_ms": [10.0, 18, 22],
                               "draft_ms": 2.0},
                         "2": {"in_decode_steps": [1.0, 1.4, 1.5], "verify_ms": [6.0, 8.4, 9],
                               "draft_ms": 1.5}}}
    (tmp_path / "curve.json").write_text(json.dumps(curve))
    budget.main(["cost", "--from", str(tmp_path / "curve.json"), "--drafter", str(tmp_path / "d")])
    loaded = load_drafter(tmp_path / "d", target=target)
    assert DecodingConfig.of(loaded).p_min == 0.3
    assert decoding_of(loaded)[1] == {(None, 1): VerifyCost((1.0, 1.8, 2.2), 0.2),
                            (None, 2): VerifyCost((1.0, 1.4, 1.5), 0.25)}
    assert not list(tmp_path.glob("d/*.tmp"))
    budget.main(["cost", "--from", str(tmp_path / "curve.json"), "--drafter", str(tmp_path / "d"),
                 "--trust", "0.2"])
    again = load_drafter(tmp_path / "d", target=target)
    assert {c.trust_weight for c in decoding_of(again)[1].values()} == {0.2}
    with pytest.raises(ValueError, match="not a drafter folder"):
        budget.write_cost(tmp_path, decoding_of(loaded)[1])


def test_curve_of_a_published_shape_with_random_weights(tmp_path, monkeypatch):
    """--shape builds the target and drafter from shapes alone (here a small stand-in for
    Qwen3-8B's, in bf16) and measures passes up to --max-k tokens and one draft of its block."""
    small = dict(budget.QWEN3_8B, vocab_size=512, hidden_size=64, intermediate_size=128,
                 num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    monkeypatch.setitem(budget.SHAPES, "small", (small, dict(
        num_hidden_layers=2, target_layer_ids=[1, 3, 5], block_size=4, mask_token_id=511)))
    out = tmp_path / "curve.json"
    budget.main(["curve", "--shape", "small", "--dtype", "bfloat16", "--threads", "1",
                 "--max-k", "6", "--context", "32", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["target"] == "small, random weights" and saved["dtype"] == "bfloat16"
    assert len(saved["threads"]["1"]["verify_ms"]) == 6 and saved["threads"]["1"]["draft_ms"] > 0
    assert saved["threads"]["1"]["in_decode_steps"][0] == 1.0 and out.with_suffix(".png").exists()
    with pytest.raises(SystemExit):
        budget.main(["curve", "--shape", "small", "--target", "x"])


# -- `budget cost` writes only what the loader takes, and only into a drafter's folder ----------
GOOD = {"in_decode_steps": [1.0, 1.5, 1.9], "verify_ms": [10.0, 15.0, 19.0], "draft_ms": 2.0}
NAN, INF = float("nan"), float("inf")


def entry(**changes):
    return {**GOOD, **changes}


GOOD_CURVES = {       # name: the curve file's content
    "one count": {"threads": {"1": GOOD}},
    "two counts": {"threads": {"1": GOOD, "2": entry(draft_ms=0.0)}},
    "float32": {"threads": {"1": GOOD}, "dtype": "float32"},
    "bfloat16": {"threads": {"1": GOOD, "4": GOOD}, "dtype": "bfloat16"},
    "float16": {"threads": {"2": GOOD}, "dtype": "float16"},
}
BAD_CURVES = [        # (name, the curve file's content, what the one line must name)
    ("threads []", {"threads": []}, '"threads" is []'),
    ("threads {}", {"threads": {}}, '"threads" is {}'),
    ("threads text", {"threads": "1"}, "\"threads\" is '1'"),
    ("no threads", {"thread": {"1": GOOD}}, 'no "threads"'),
    ("a list", [GOOD], "not a verify curve"),
    ("a number", 3, "not a verify curve"),
    ("thread 0", {"threads": {"0": GOOD}}, "thread count '0'"),
    ("thread -1", {"threads": {"-1": GOOD}}, "thread count '-1'"),
    ("thread x", {"threads": {"x": GOOD}}, "thread count 'x'"),
    ("thread ²", {"threads": {"²": GOOD}}, "thread count '²'"),
    ("entry a list", {"threads": {"1": [1.0, 2.0]}}, "threads['1'] is [1.0, 2.0]"),
    ("no draft_ms", {"threads": {"1": {"in_decode_steps": [1.0, 2.0], "verify_ms": [1, 2]}}},
     "threads['1'] is"),
    ("verify_ms 0", {"threads": {"1": entry(verify_ms=[0.0, 15.0, 19.0])}},
     "threads['1'].verify_ms[0] is 0.0"),
    ("verify_ms negative", {"threads": {"1": entry(verify_ms=[10.0, -15.0, 19.0])}},
     "verify_ms[1] is -15.0"),
    ("verify_ms text", {"threads": {"1": entry(verify_ms=[10.0, "15", 19.0])}},
     "verify_ms[1] is '15'"),
    ("verify_ms nan", {"threads": {"1": entry(verify_ms=[NAN, 15.0, 19.0])}},
     "verify_ms[0] is nan"),
    ("verify_ms inf", {"threads": {"1": entry(verify_ms=[10.0, INF, 19.0])}},
     "verify_ms[1] is inf"),
    ("steps text", {"threads": {"1": entry(in_decode_steps=[1.0, "1.5", 1.9])}},
     "in_decode_steps[1] is '1.5'"),
    ("steps nan", {"threads": {"1": entry(in_decode_steps=[1.0, NAN, 1.9])}},
     "in_decode_steps[1] is nan"),
    ("steps zero", {"threads": {"1": entry(in_decode_steps=[1.0, 0.0, 1.9])}},
     "in_decode_steps[1] is 0.0"),
    ("steps rounding to 0", {"threads": {"1": entry(in_decode_steps=[1.0, 1e-4, 1.9])}},
     "in_decode_steps[1] is 0.0001"),
    ("steps bool", {"threads": {"1": entry(in_decode_steps=[1.0, True, 1.9])}},
     "in_decode_steps[1] is True"),
    ("steps first 2", {"threads": {"1": entry(in_decode_steps=[2.0, 3.0, 3.8])}},
     "in_decode_steps[0] is 2.0"),
    ("steps one", {"threads": {"1": entry(in_decode_steps=[1.0], verify_ms=[10.0])}},
     "in_decode_steps is [1.0]"),
    ("steps a text", {"threads": {"1": entry(in_decode_steps="1,2")}}, "in_decode_steps is 1,2"),
    ("lengths differ", {"threads": {"1": entry(verify_ms=[10.0, 15.0])}}, "verify_ms 2"),
    ("draft nan", {"threads": {"1": entry(draft_ms=NAN)}}, "draft_ms is nan"),
    ("draft inf", {"threads": {"1": entry(draft_ms=INF)}}, "draft_ms is inf"),
    ("draft negative", {"threads": {"1": entry(draft_ms=-2.0)}}, "draft_ms is -2.0"),
    ("draft text", {"threads": {"1": entry(draft_ms="2")}}, "draft_ms is '2'"),
    ("second count bad", {"threads": {"1": GOOD, "2": entry(draft_ms=NAN)}}, "threads['2']"),
    ("dtype bf16", {"threads": {"1": GOOD}, "dtype": "bf16"}, "\"dtype\" is 'bf16'"),
    ("dtype float64", {"threads": {"1": GOOD}, "dtype": "float64"}, "'float64'"),
    ("dtype a number", {"threads": {"1": GOOD}, "dtype": 16}, '"dtype" is 16'),
]
DECODING = {          # what the drafter's decoding.json held before: None, text, or a folder
    "none": None,
    "a cut": '{"p_min": 0.3}',
    "a tree": '{"tree": {"node_budget": 8, "top_k": 2}}',
    "float32 curves": json.dumps({"cost": {"by_dtype": {"float32": {"by_threads": {
        "1": {"verify": [1.0, 2.0], "draft": 0.1}}}}}}),
    "dtype-free curve": '{"cost": {"verify": [1.0, 2.0], "draft": 0.1}, "trust": 0.5}',
    "garbled": '{"p_min": 0.3',
    "a list": "[]",
    "unknown key": '{"pmin": 0.3}',
    "a NaN cost": '{"cost": {"verify": [1.0, NaN], "draft": 0.1}}',
    "a folder": ...,
}
BROKEN = {"garbled": "not valid JSON", "a list": "must hold a JSON object",
          "unknown key": "'pmin'", "a NaN cost": "nan", "a folder": "is not a file"}
FLAGS = {"none": [], "tree": ["--tree", "15,8"], "trust": ["--trust", "0.2"]}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A 6-layer target and its drafter saved to a folder; ``folder(decoding)`` a fresh copy
    whose decoding.json holds ``decoding`` (DECODING's values)."""
    import shutil

    root = tmp_path_factory.mktemp("cost")
    target = tiny_target(4, vocab=97, layers=6)
    save_drafter(random_drafter(target, 4), root / "drafter")
    count = iter(range(10**6))

    def folder(decoding=None):
        d = root / f"d{next(count)}"
        shutil.copytree(root / "drafter", d)
        if decoding is ...:
            (d / "decoding.json").mkdir()
        elif decoding is not None:
            (d / "decoding.json").write_text(decoding)
        return d
    return target, root, folder


def cost_line(argv, capsys):
    """``budget cost`` run as the command line runs it: (None, the result) or (the one line it
    refused with, None); a refusal must be exit status 2 and one line."""
    from minidflash.__main__ import main

    try:
        out = main(["budget", "cost", *argv])
    except SystemExit as e:
        err = capsys.readouterr().err
        lines = [x for x in err.splitlines() if "error" in x]
        assert e.code == 2 and len(lines) == 1 and "Traceback" not in err, err
        assert lines[0].startswith("python -m minidflash budget: error: "), err
        return lines[0], None
    capsys.readouterr()
    return None, out


@pytest.mark.parametrize("curve", list(GOOD_CURVES))
def test_every_decoding_json_budget_cost_writes_loads(pair, tmp_path, capsys, curve):
    """Each curve that is one, over each decoding.json a folder could hold, with each of the
    flags cost takes: the file written loads (load_drafter) with the curves it was given, or the
    command refused in one line naming the file, and left the folder as it was."""
    target, _, folder = pair
    data = GOOD_CURVES[curve]
    (tmp_path / "c.json").write_text(json.dumps(data))
    dtype = data.get("dtype")
    wrote = refused = 0
    for before, content in DECODING.items():
        for flag, extra in FLAGS.items():
            d = folder(content)
            file = d / "decoding.json"
            old = file.read_bytes() if file.is_file() else None
            line, out = cost_line(["--from", str(tmp_path / "c.json"), "--drafter", str(d),
                                   *extra], capsys)
            if line is not None:                          # refused: named, nothing written
                refused += 1
                assert f"--drafter {d}" in line, line
                assert (file.read_bytes() if file.is_file() else None) == old, line
                if before in BROKEN:
                    assert "decoding.json" in line and BROKEN[before] in line, line
                else:
                    assert (before, flag) == ("a cut", "tree") and "p_min 0.3" in line, line
                continue
            assert before not in BROKEN and (before, flag) != ("a cut", "tree"), (before, flag)
            wrote += 1
            loaded = load_drafter(d, target=target)
            config, costs = decoding_of(loaded)
            assert config.cost is True and config.tree == (
                {"node_budget": 15, "top_k": 8} if flag == "tree" else
                {"node_budget": 8, "top_k": 2} if before == "a tree" else None), (before, flag)
            for t in data["threads"]:                     # the curves given, as given
                c = costs[(dtype, int(t))]
                assert c.verify == tuple(data["threads"][t]["in_decode_steps"])
                assert c.trust_weight == (0.2 if flag == "trust" else 0.0)
            if before == "float32 curves" and dtype not in ("float32", None):
                assert ("float32", 1) in costs          # another dtype's curves stay beside
            assert DecodingConfig.from_file(json.loads(file.read_text())) == (config, costs)
    assert wrote >= 12 and refused == len(BROKEN) * len(FLAGS) + 1


@pytest.mark.parametrize("name, curve, named", BAD_CURVES, ids=[c[0] for c in BAD_CURVES])
def test_a_bad_curve_file_is_one_line_naming_file_and_field(pair, tmp_path, capsys, name, curve,
                                                             named):
    _, _, folder = pair
    d = folder('{"p_min": 0.3}')
    (tmp_path / "c.json").write_text(json.dumps(curve))
    line, _ = cost_line(["--from", str(tmp_path / "c.json"), "--drafter", str(d)], capsys)
    assert line is not None, name
    assert f"--from {tmp_path / 'c.json'}" in line and named in line, line
    assert (d / "decoding.json").read_text() == '{"p_min": 0.3}'          # nothing written


def test_cost_refuses_every_folder_but_a_dflash_drafters(pair, tmp_path, capsys):
    """A target's folder (named as one), an AR drafter's (its loader reads no decoding.json), a
    folder without config.json, a missing one, a file, a broken drafter config: refused, in one
    line naming the folder, and nothing written there."""
    import shutil

    from minidflash.paths import TINY_AR_DRAFTER_DIR, TINY_TARGET_DIR

    _, _, folder = pair
    (tmp_path / "c.json").write_text(json.dumps(GOOD_CURVES["one count"]))
    target_copy, ar_copy = tmp_path / "target", tmp_path / "ar"
    for src, dst in ((TINY_TARGET_DIR, target_copy), (TINY_AR_DRAFTER_DIR, ar_copy)):
        dst.mkdir()
        shutil.copy(src / "config.json", dst / "config.json")
    broken = folder()
    cfg = json.loads((broken / "config.json").read_text())
    cfg["dflash_config"]["target_layer_ids"] = [1, 2, 99]
    (broken / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "empty").mkdir()
    (tmp_path / "a file").write_text("x")
    for d, named in [(target_copy, "Qwen3ForCausalLM"), (ar_copy, "AR drafter"),
                     (tmp_path / "empty", "no config.json"), (tmp_path / "none", "no config.json"),
                     (tmp_path / "a file", "no config.json"), (broken, "99")]:
        line, _ = cost_line(["--from", str(tmp_path / "c.json"), "--drafter", str(d)], capsys)
        assert line is not None and f"--drafter {d}" in line and named in line, line
        assert not (d / "decoding.json").exists() if d.is_dir() else True


def test_a_planted_missing_curve_check_goes_red(pair, tmp_path, capsys, monkeypatch):
    """The rows have power: without ``check_curve`` an empty thread list and a zero verify time
    raise from Python (AttributeError, ZeroDivisionError) and a NaN draft time is refused by
    VerifyCost without the file or the field: each row above would fail."""
    _, _, folder = pair
    monkeypatch.setattr(budget, "check_curve", lambda curve, where: None)
    for name, raw in (("threads []", AttributeError), ("verify_ms 0", ZeroDivisionError),
                      ("draft nan", None)):
        _, curve, named = next(c for c in BAD_CURVES if c[0] == name)
        (tmp_path / "c.json").write_text(json.dumps(curve))
        argv = ["--from", str(tmp_path / "c.json"), "--drafter", str(folder())]
        if raw is not None:
            with pytest.raises(raw):
                cost_line(argv, capsys)
        else:
            line, _ = cost_line(argv, capsys)
            assert named not in line and f"--from {tmp_path / 'c.json'}" not in line, line

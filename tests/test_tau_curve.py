"""``python -m minidflash tau-curve``: snapshots of a training run decoded in order of step."""

import json

import pytest
import torch

from minidflash.decoding_config import DecodingConfig, set_decoding
from minidflash.paths import TINY_DRAFTER_DIR
from minidflash.checkpoints import load_drafter
from minidflash.tools.measure import tau_curve


def test_curve_orders_snapshots_and_trained_beats_untrained(tmp_path):
    trained = load_drafter().state_dict()
    untrained = {k: torch.zeros_like(v) if k.startswith("fc") else v for k, v in trained.items()}
    history = {"step": [0, 1, 2], "tau": [1.0, 2.0, 3.0]}
    files = []
    # out of order; "later" continued the drafter of "late" (init_drafter): its steps count on
    for name, sd, step, before in (("late", trained, 3000, None), ("early", untrained, 10, None),
                                   ("later", trained, 5, 12000)):
        files.append(tmp_path / f"state-{name}.pt")
        state = {"drafter": sd, "step": step, "history": history, "config": {"batch_size": 4}}
        torch.save(state if before is None else {**state, "answers_before": before}, files[-1])
    out = tmp_path / "curve.json"
    result = tau_curve.main([*map(str, files), "--drafter", str(TINY_DRAFTER_DIR), "--suites",
                             "arithmetic", "--n", "2", "--max-new-tokens", "48", "--out", str(out)])
    assert [p["step"] for p in result["points"]] == [10, 3000, 5]
    assert [p["answers_seen"] for p in result["points"]] == [40, 12000, 12020]  # + step x batch
    early, late = (p["tau"]["arithmetic"] for p in result["points"][:2])
    assert late > early + 1.0, (early, late)        # blind features (fc zeroed) draft far worse
    assert json.loads(out.read_text())["points"] == result["points"]
    assert out.with_suffix(".png").is_file()


def test_curve_refuses_a_file_that_is_not_a_checkpoint(tmp_path):
    bad = tmp_path / "x.pt"
    torch.save({"weights": torch.zeros(1)}, bad)
    with pytest.raises(SystemExit, match="not a trainer checkpoint"):
        tau_curve.main([str(bad), "--drafter", str(TINY_DRAFTER_DIR), "--suites", "arithmetic"])


def test_extend_adds_a_later_runs_points_to_a_saved_curve(tmp_path):
    """A later run's snapshots join the saved curve in order of answers seen, with both commands
    recorded; a curve measured otherwise, or the same snapshot twice, is refused."""
    sd = load_drafter().state_dict()

    def snapshot(name, step, before):
        f = tmp_path / f"state-{name}.pt"
        torch.save({"drafter": sd, "step": step, "answers_before": before, "config": {"batch_size": 4},
                    "history": {"step": [0, 1], "tau": [1.0, 2.0]}}, f)
        return str(f)

    out = str(tmp_path / "curve.json")
    common = ["--drafter", str(TINY_DRAFTER_DIR), "--suites", "arithmetic", "--n", "1",
              "--max-new-tokens", "24", "--out", out]
    first = tau_curve.main([snapshot("a", 10, 0), snapshot("b", 20, 0), *common])
    both = tau_curve.main([snapshot("c", 5, 80), *common, "--extend"])
    assert [p["answers_seen"] for p in both["points"]] == [40, 80, 100]
    assert both["points"][:2] == first["points"]
    assert both["command"] == first["command"] and len(both["extended_by"]) == 1
    assert "state-c.pt" in both["extended_by"][0]
    assert both["training_anchors"]["answers_seen"] == [4, 84]   # run after run (every 10th step)
    assert json.loads(open(out).read())["points"] == both["points"]
    with pytest.raises(SystemExit, match="already has points at answers seen"):
        tau_curve.main([snapshot("c", 5, 80), *common, "--extend"])
    with pytest.raises(SystemExit, match="n 1 there, 2 here"):
        tau_curve.main([snapshot("d", 9, 80), *common, "--extend", "--n", "2"])
    with pytest.raises(SystemExit, match="is not a file"):
        tau_curve.main([snapshot("d", 9, 80), *common[:-1], str(tmp_path / "none.json"), "--extend"])


def test_snapshot_tau_is_the_whole_block_whatever_decoding_json_asks():
    """A curve's points must measure one thing: the whole block, verified as a chain. A drafter
    whose decoding.json asks for a cut (or a cost model, a tree) would otherwise verify fewer
    drafts at the points measured after the file changed."""
    from minidflash.paths import PROMPTS_DIR
    from minidflash.target import load_target
    from minidflash.tools import common

    target, tokenizer = load_target()
    drafter = load_drafter(target=target)
    rows = {"arithmetic": common.read_jsonl(PROMPTS_DIR / "arithmetic.jsonl")[:2]}
    whole = tau_curve.snapshot_taus(target, tokenizer, drafter, rows, 32)
    set_decoding(drafter, DecodingConfig(p_min=0.9))             # as if decoding.json asked for a confidence cut
    assert tau_curve.snapshot_taus(target, tokenizer, drafter, rows, 32) == whole

"""Every results file says where it was measured (machine, dtype, the drafter's weights, threads,
load), and one line prints it; what a file does not record is said, never guessed."""

import json
from pathlib import Path

import pytest

from minidflash.paths import DATA_DIR, ROOT, TINY_DRAFTER_DIR
from minidflash.tools import common
from minidflash.tools.measure import (ablations, bench, budget, llama_cpp_bench, misses,
                                      step_profile, tau_curve)
from minidflash.tools.measure.render import provenance

RESULTS = sorted((DATA_DIR / "results").glob("*.json"))
KEYS = ("machine", "dtype", "drafter_sha256", "load")


def test_the_line_names_each_part_and_says_what_is_missing():
    full = {"machine": {"cpu": "Some CPU", "cores": 2, "native_bf16": True}, "dtype": "bfloat16",
            "drafter_sha256": {"data/smollm2_drafter": "ab" * 32}, "threads": 2, "load": "shared"}
    assert provenance(full) == ("machine Some CPU, 2 cores, native bf16; dtype bfloat16; "
                                "drafter data/smollm2_drafter (sha256 abababababab); threads 2; "
                                "load beside another process")
    assert provenance({}).count("not recorded") == 5
    swept = {**full, "threads": {"1": {}, "2": {}}, "drafter_sha256": {}, "load": "alone"}
    assert "threads 1 and 2" in provenance(swept) and "drafter none" in provenance(swept)
    assert "load alone" in provenance(swept)


def test_a_written_file_carries_its_provenance(tmp_path, monkeypatch):
    """``bench --step-times --load shared --out F``: F holds the machine, the dtype, the drafter's
    weights' sha256 (the same as the test helpers compute) and the load; the line reads them."""
    monkeypatch.setattr(bench, "step_times", lambda target, drafter, context=512, repeats=20,
                        lean=None: {
        "prefill_ms": 5.0, "decode_ms": 2.0, **{f"{k}_{B}_ms": 3.0 for k in ("verify", "draft")
                                                for B in (4, 8, 16)}})
    path = tmp_path / "t.json"
    bench.main(["--step-times", "--threads", "1", "--load", "shared", "--out", str(path)])
    saved = json.loads(path.read_text())
    assert set(KEYS) <= set(saved) and saved["dtype"] == "float32" and saved["load"] == "shared"
    sha = common.weights_sha256(TINY_DRAFTER_DIR)
    assert saved["drafter_sha256"] == {"data/drafter": sha}
    line = provenance(saved)
    assert f"data/drafter (sha256 {sha[:12]})" in line and "beside another process" in line
    assert "not recorded" not in line


@pytest.mark.parametrize("command", [bench, budget, step_profile, tau_curve, misses, ablations,
                                     llama_cpp_bench], ids=lambda m: m.__name__.split(".")[-1])
def test_every_measuring_command_takes_load(command, capsys):
    with pytest.raises(SystemExit):
        (command.arguments if command is llama_cpp_bench else command.main)(
            ["curve", "--help"] if command is budget else
            ["x.pt", "--help"] if command is tau_curve else ["--help"])
    assert "--load {alone,shared}" in capsys.readouterr().out


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.name)
def test_every_results_file_carries_its_provenance(path):
    """Each shipped results file has the four keys (backfilled ones with "not recorded" where
    unknown), and a drafter hash it names for a folder of the repository is that of the shipped
    weights today. A folder outside it (an absolute path: a trial drafter, not shipped) keeps the
    hash it was measured with; it cannot be checked here, and it cannot pass for a shipped one."""
    saved = json.loads(path.read_text())
    assert all(k in saved for k in KEYS), f"{path.name} lacks {[k for k in KEYS if k not in saved]}"
    assert saved["load"] in ("alone", "shared", "not recorded")
    for folder, sha in (saved["drafter_sha256"] if isinstance(saved["drafter_sha256"], dict)
                        else {}).items():
        if sha != "not recorded" and not Path(folder).is_absolute():
            assert sha == common.weights_sha256(ROOT / folder), f"{path.name}: {folder} changed"

"""Notebook 11's bookkeeping (tools/measure/smollm2.py) reads the training record and the results
files as they are: the runs of the shipped drafter's line, the command its last run ran with the
shard ranges it read, a suite's tau without some of its prompts, and a command wrapped for a
shell. No model is loaded."""

import json

import pytest

from minidflash.paths import SMOLLM2_DRAFTER_DIR
from minidflash.tools.measure import smollm2

INFO = json.loads((SMOLLM2_DRAFTER_DIR / "training.json").read_text())["info"]


def test_the_runs_of_the_line_end_where_training_json_says():
    ends = smollm2.run_ends(INFO)
    assert list(ends) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13]        # runs 11 and 14: not kept
    assert ends[1] == 14_400 and ends[12] == 219_200 and ends[13] == 228_800
    taus = smollm2.tau_by_run(smollm2.read("tau_curve_smollm2.json"), INFO)
    assert set(taus) == set(ends) and all(1 <= t["gsm8k"] <= 4 for t in taus.values())


def test_the_last_command_names_the_shards_it_read():
    """training.json records whole folders; run 13 read codeio 0-6 and gym-math 0-5 (1,533 and
    1,500 answers), the folders hold all twelve shards now."""
    command = smollm2.exact_command(INFO)
    assert "data/smollm2_codeio:0-6 data/smollm2_gym_math:0-5" in command
    assert smollm2.answers_in("data/smollm2_codeio:0-6") == 1_533
    assert smollm2.answers_in("data/smollm2_gym_math:0-5") == 1_500
    assert smollm2.answers_in("data/smollm2_codeio") > 1_533          # what the bare name reads now
    read = [smollm2.RUN13_READ.get(a, a) for a in INFO["data"]["answers"]]
    assert sum(map(smollm2.answers_in, read)) >= INFO["sequences"]


def test_tau_without_prompts_is_the_mean_of_the_others():
    name, method = "smollm2_new_kinds_2threads.json", "dflash"
    per = smollm2.read(name)["suites"]["mtbench"]["methods"][method]["per_prompt"]["tau"]
    same = smollm2.tau_without(name, method, {}, first=10)
    assert all(n == 0 and a == pytest.approx(b) for a, b, n in same.values())
    tau, without, n = smollm2.tau_without(name, method, {"mtbench": {34}}, first=10)["mtbench"]
    assert n == 1 and without == pytest.approx((sum(per) - per[34 - 10]) / (len(per) - 1))
    assert tau == pytest.approx(smollm2.read(name)["suites"]["mtbench"]["methods"][method]["tau"])


def test_a_wrapped_command_keeps_each_flag_with_its_value():
    command = "python -m minidflash bench --target HuggingFaceTB/SmolLM2-135M-Instruct " * 3
    lines = smollm2.wrap(command.strip(), width=60).split("\n")
    assert all(len(line) <= 62 for line in lines)
    assert all(line.endswith(" \\") for line in lines[:-1])
    assert all("--target HuggingFaceTB" in line for line in lines if "--target" in line)
    assert " ".join(line.rstrip(" \\").strip() for line in lines) == command.strip()

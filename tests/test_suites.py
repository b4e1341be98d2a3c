"""The shipped benchmark prompt files (data/prompts/<suite>.jsonl) parse and have the right shape."""

import json

import pytest

from minidflash.paths import PROMPTS_DIR
from minidflash.tools.make_data.suites import HUMANEVAL_TEMPLATE, MATH_SUFFIX

COUNTS = {"humaneval": 164, "mtbench": 80, "gsm8k": 100, "math500": 311}


def load(suite: str) -> list[dict]:
    with open(PROMPTS_DIR / f"{suite}.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.mark.parametrize("suite", COUNTS)
def test_count_ids_and_messages(suite):
    rows = load(suite)
    assert len(rows) == COUNTS[suite]
    assert len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        assert r["source"] == suite
        msgs = r["messages"]
        assert isinstance(msgs, list) and msgs
        for m in msgs:
            assert set(m) == {"role", "content"}
            assert m["role"] in ("system", "user", "assistant")
            assert isinstance(m["content"], str) and m["content"].strip()
        assert msgs[-1]["role"] == "user"


@pytest.mark.parametrize("suite", ["gsm8k", "math500"])
def test_math_template_and_answer(suite):
    assert MATH_SUFFIX == "\nPlease reason step by step, and put your final answer within \\boxed{}."
    for r in load(suite):
        assert r["messages"][-1]["content"].endswith(MATH_SUFFIX)
        assert isinstance(r["answer"], str) and r["answer"].strip()


def test_humaneval_fields_and_template():
    for r in load("humaneval"):
        assert r["id"] == r["task_id"] and r["task_id"].startswith("HumanEval/")
        assert r["entry_point"] in r["prompt"]
        assert "def check(candidate)" in r["test"]
        assert r["messages"][-1]["content"] == HUMANEVAL_TEMPLATE.format(prompt=r["prompt"])
    assert HUMANEVAL_TEMPLATE.startswith(
        "Write a solution to the following problem and make sure that it passes the tests:\n```python\n")


def test_mtbench_turns_and_category():
    rows = load("mtbench")
    for r in rows:
        assert len(r["turns"]) == 2
        assert r["messages"][-1]["content"] == r["turns"][0]
    assert {r["category"] for r in rows} == {"writing", "roleplay", "reasoning", "math", "coding",
                                             "extraction", "stem", "humanities"}


def test_held_out_prompts_never_occur_in_training():
    """The in-domain suites are held out: no prompt occurs in the tiny target's training pool
    nor in the drafters' training prompts, and none occurs twice."""
    from minidflash.tools.common import read_jsonl
    from minidflash.tools.train.tiny_target import make_splits
    from minidflash.tools.train.train_drafter import training_prompts

    pool, _ = make_splits()
    pool = {e["messages"][0]["content"] for e in pool}
    pool |= {p["messages"][0]["content"] for p in training_prompts()}
    for suite in ("arithmetic", "code"):
        texts = [r["messages"][0]["content"] for r in read_jsonl(PROMPTS_DIR / f"{suite}.jsonl")]
        assert len(texts) >= 120, suite
        assert len(set(texts)) == len(texts), f"{suite}: a prompt occurs twice"
        leaked = [t[:60] for t in texts if t in pool]
        assert not leaked, f"{suite}: {len(leaked)} held-out prompts occur in training: {leaked[:3]}"

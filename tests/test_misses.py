"""``python -m minidflash misses``: every verify step sorted by the target's first token."""

import pytest

from minidflash.paths import PROMPTS_DIR, TINY_DRAFTER_DIR
from minidflash.checkpoints import load_drafter
from minidflash.target import chat_ids, load_target, stop_ids
from minidflash.tools import common
from minidflash.tools.measure import misses
from minidflash.verifier import speculative_generate


def test_kind_sorts_words_of_the_question_from_the_rest():
    question = misses.words_of([{"role": "user", "content": "Janet's ducks lay 16 eggs."}])
    assert question == {"janet", "s", "ducks", "lay", "eggs"}
    assert misses.kind(" duck", question) == "word in question"     # the first piece of "ducks"
    assert misses.kind("Eggs", question) == "word in question"
    assert misses.kind(" hens", question) == "other word"
    assert misses.kind(" 16", question) == "digits"
    assert misses.kind(" $", question) == "symbols"
    assert misses.kind("\n\n", question) == "spaces and newlines"


def test_the_steps_it_sorts_are_the_decode_s_steps():
    """The steps of every kind add up to the decode's verify steps, and the ones it counts as
    rejected at the first slot are exactly the steps that committed one token."""
    model, tok = load_target()
    tiny_drafter = load_drafter(TINY_DRAFTER_DIR, target=model)
    rows = common.read_jsonl(PROMPTS_DIR / "code.jsonl")[:2]
    r = misses.misses(model, tok, tiny_drafter, rows, 48)
    lengths, committed = [], []
    for row in rows:
        out = speculative_generate(model, tiny_drafter, chat_ids(tok, row["messages"]),
                                   max_new_tokens=48, stop_token_ids=stop_ids(tok),
                                   record_steps=True)
        lengths += [step["accepted"] + 1 for step in out.steps]   # what each pass accepted
        committed += out.acceptance_lengths                        # what it kept, after the cut
    assert r["steps"] == len(lengths) == sum(k["steps"] for k in r["kinds"].values())
    assert r["first_slot_rejected"] == lengths.count(1) == sum(k["missed"] for k in r["kinds"].values())
    assert r["tau"] == pytest.approx(sum(committed) / len(committed))
    words = r["kinds"]["word in question"]["missed"], r["kinds"]["other word"]["missed"]
    assert min(words) > 0                      # both kinds of word occur in these two prompts
    assert sum(n for _, n in r["missed_words"]) == sum(words)


def test_the_command_writes_its_json_and_refuses_a_missing_suite(tmp_path, capsys):
    out = tmp_path / "m.json"
    result = misses.main(["--suites", "arithmetic", "--n", "1", "--max-new-tokens", "24",
                          "--drafter", str(TINY_DRAFTER_DIR), "--out", str(out)])
    assert out.is_file() and result["suites"]["arithmetic"]["steps"] > 0
    with pytest.raises(SystemExit):
        misses.main(["--suites", "nope", "--n", "1"])
    assert "--suites nope: no such suite in data/prompts; the suites are" in capsys.readouterr().err

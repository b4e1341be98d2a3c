"""The new kinds of training prompts (make_data/magpie.py, gym.py, prompts.py, overlap.py): none of
them a suite's prompt in disguise, each in the shape its suite asks in, made reproducibly, and
answered by the same ``answers`` command as the builder's kinds."""

import json
import random
import re
import subprocess
import warnings
from collections import Counter
from pathlib import Path

import pytest
import torch

from minidflash.paths import PROMPTS_DIR
from minidflash.target import load_target
from minidflash.tools.make_data import answers, chat_prompts, gym, magpie, overlap
from minidflash.tools.common import read_jsonl
from minidflash.tools.make_data.suites import HUMANEVAL_TEMPLATE, MATH_SUFFIX

TRAIN_PROMPTS = Path(__file__).resolve().parent.parent / "data" / "train_prompts"
GSM8K = read_jsonl(PROMPTS_DIR / "gsm8k.jsonl")


@pytest.fixture(scope="module")
def suites():
    return overlap.SuiteOverlap()


def text_of(row):
    return "\n".join(m["content"] for m in row["messages"] if m["role"] == "user")


# --------------------------------------------------------------------------------------------
# The overlap check, and every training prompt through it
# --------------------------------------------------------------------------------------------

def test_a_reworded_suite_question_is_caught_and_a_fresh_one_is_not(suites):
    """A GSM8K question with its names and numbers redrawn (what a GSM-Symbolic template is)
    still shares runs of eight words with it; a question of the same topic in other words does
    not; the shared templates (the math suffix) do not count."""
    q = GSM8K[46]["messages"][0]["content"].removesuffix(MATH_SUFFIX)
    redrawn = re.sub(r"\d+", "17", q).replace("Elise", "Maria")
    assert "gsm8k:46" in suites.overlaps(redrawn)
    assert suites.overlaps("Tom writes the alphabet four times a day for a week. How many letters "
                           "has he written?" + MATH_SUFFIX) == []
    assert suites.overlaps("Hello there." + MATH_SUFFIX) == []
    body = GSM8K[3]["messages"][0]["content"].removesuffix(MATH_SUFFIX)
    assert overlap.body(HUMANEVAL_TEMPLATE.format(prompt="def f(x):\n    pass\n")) == "def f(x):\n    pass\n"
    assert suites.overlaps(body) == ["gsm8k:3"]


@pytest.mark.parametrize("name", ["magpie.jsonl", "magpie_s1.jsonl", "magpie_s2.jsonl",
                                  "magpie_s3.jsonl", "magpie_s4.jsonl",
                                  "codeio.jsonl", "gym_math.jsonl"])
def test_no_shipped_training_prompt_shares_eight_words_with_a_suite(suites, name):
    path = TRAIN_PROMPTS / name
    assert path.is_file(), f"{path} is shipped (python -m minidflash prompts makes it)"
    rows = read_jsonl(path)
    meta = json.loads(path.with_suffix(".json").read_text())
    assert len(rows) == meta["prompts"] >= 1000 and meta["command"].startswith("python -m minidflash prompts")
    assert overlap.SuiteOverlap.report(suites, rows) == {}
    texts = [text_of(r) for r in rows]
    assert len(set(texts)) == len(texts)                                     # no repeats


def test_what_training_reads_of_the_builder_kinds_shares_no_eight_words_with_a_suite(suites):
    """Every kind of the builder (math, code, prose, stories, tasks, chains, GSM-Symbolic, wide:
    what earlier drafters read), less
    what ``train`` excludes: nothing left overlaps a suite. What is excluded is the seven
    suite-shaped CHAINS templates (all their draws) and a handful of rows that share a phrase.
    GSM-Symbolic's templates made from our suite's items (GSM_SYMBOLIC_HELD: lines 33, 39, 46,
    61 and 92 of gsm8k.jsonl among them) are never drawn, so none of its rows is excluded."""
    try:
        rows = chat_prompts.chat_training_prompts(200, 200, 100, seed=1, n_story=300, n_task=300,
                                                  n_chain=600, n_symbolic=400, n_wide=300)
    except (subprocess.CalledProcessError, OSError) as e:      # no PyPI: the sdists are not here
        pytest.skip(f"the sdists of the texts and reasoning-gym are unavailable: {e}")
    why = Counter((r["kind"], suites.why_excluded(text_of(r))) for r in rows)
    kept = [r for r in rows if suites.why_excluded(text_of(r)) is None]
    assert overlap.SuiteOverlap.report(suites, kept) == {}
    assert why[("chain", "suite-shaped template")] + why[("chain", "suite overlap")] > 60
    assert not any(w for (kind, w) in why if kind in ("symbolic", "story", "math", "prose") and w)
    assert sum(n for (kind, w), n in why.items() if w) < 0.2 * len(rows)
    ids = {GSM8K[i]["id"] for i in chat_prompts.GSM_SYMBOLIC_SOURCES}
    assert ids == {"gsm8k-test-0440", "gsm8k-test-0469", "gsm8k-test-0546", "gsm8k-test-0740",
                   "gsm8k-test-1247"}


def test_the_suite_shaped_templates_are_exactly_those_whose_draws_overlap(suites):
    """Found afresh: a template is suite-shaped when one of 150 draws
    shares eight words with a suite; that set is SUITE_SHAPED, and every draw of a listed
    template is excluded, overlapping or not."""
    from minidflash.tools.make_data.word_problems import CHAINS, STORIES, SUITE_SHAPED, word_problem

    found = set()
    for i, t in enumerate(STORIES + CHAINS):
        draws = [word_problem([t], random.Random(i)) for _ in range(150)]
        if any(suites.overlaps(d) for d in draws):
            found.add(t[0])
        if t[0] in SUITE_SHAPED:
            assert all(suites.why_excluded(d) for d in draws), t[0][:60]
    assert found == set(SUITE_SHAPED)


def test_results_name_the_suite_items_a_training_template_was_shaped_on():
    """The items the seven templates were written after (0-based lines), and the label every
    result carries for its prompts: 1-based prompt numbers, only those inside the range."""
    assert overlap.shaped_items() == {"gsm8k": (4, 54, 55, 76, 85, 95), "mtbench": (34,)}
    assert overlap.split_label("mtbench", "test", 40).endswith(
        "prompts 11-50 of the file (prompt 35 of the file: the shape of a training template the "
        "drafters before the overlap check read)")
    assert overlap.split_label("gsm8k", "test", 40) == "gsm8k test part, prompts 11-50 of the file"
    assert "(prompts 55, 56, 77, 86, 96 of the file" in overlap.split_label("gsm8k", "test", 90)
    assert "(prompt 5 of the file" in overlap.split_label("gsm8k", "dev", 10)


def test_train_drops_the_excluded_rows_of_kept_answers(suites):
    from minidflash.target import chat_ids
    from minidflash.tools.make_data.word_problems import CHAINS, STORIES, SUITE_SHAPED, word_problem

    _, tok = load_target("data/target")
    rng = random.Random(0)
    shaped = next(t for t in CHAINS if t[0] in SUITE_SHAPED)
    questions = [word_problem([shaped], rng), word_problem([STORIES[0]], rng),
                 GSM8K[60]["messages"][0]["content"]]
    rows = []
    for q in questions:
        ids = chat_ids(tok, [{"role": "user", "content": q}])[0]
        rows.append({"ids": torch.cat([ids, torch.tensor([7, 8, 9])]), "response_start": len(ids)})
    kept, dropped = suites.drop_excluded(rows, tok)
    assert kept == [rows[1]]
    assert dropped == {"suite-shaped template": 1, "suite overlap": 1}


def test_the_check_sees_the_held_templates_if_they_were_drawn(suites):
    """The planted bug: GSM-Symbolic with nothing held out. Its templates made from our suite's
    items then overlap (so the test above is not empty by construction)."""
    try:
        generators = chat_prompts.gsm_symbolic_generators.__wrapped__   # the uncached builder
    except OSError as e:
        pytest.skip(f"reasoning-gym's sdist unavailable: {e}")
    held = chat_prompts.GSM_SYMBOLIC_HELD
    try:
        chat_prompts.GSM_SYMBOLIC_HELD = ()
        every = generators()
    finally:
        chat_prompts.GSM_SYMBOLIC_HELD = held
    rng = random.Random(0)
    hits = {h.split(":")[0] for k in held if k in every
            for h in suites.overlaps(every[k](rng, 1.0)["question"])}
    assert hits == {"gsm8k"}


# --------------------------------------------------------------------------------------------
# reasoning-gym's kinds
# --------------------------------------------------------------------------------------------

def test_codeio_prompts_alternate_humaneval_shape_and_plain_words():
    try:
        rows = gym.codeio_prompts(40, seed=2)
    except OSError as e:
        pytest.skip(f"reasoning-gym's sdist unavailable: {e}")
    assert len(rows) == 40 and {r["kind"] for r in rows} == {"codeio"}
    head, tail = HUMANEVAL_TEMPLATE.split("{prompt}")
    for i, r in enumerate(rows):
        q = text_of(r)
        if i % 2 == 0:
            assert q.startswith(head + "def main_solution(") and q.endswith('"""\n' + tail)
            with warnings.catch_warnings():          # a docstring's "\(" is the task's own
                warnings.simplefilter("ignore")
                assert compile(q[len(head):-len(tail)] + "    pass\n", "task", "exec")   # parses
        else:
            assert q.endswith("Write a Python function `main_solution` that does this.")
    assert rows == gym.codeio_prompts(40, seed=2) and rows != gym.codeio_prompts(40, seed=3)


@pytest.mark.parametrize("question,expected", [
    ("Find the GCD of these numbers: 780, 461. Give only the GCD as your final answer.",
     "Find the GCD of these numbers: 780, 461."),
    ("Solve for real e:\n-16*e**3 = 0\nIn solving equations, please follow these instructions:\n"
     "1. Provide all answers as comma-separated decimal values.", "Solve for real e:\n-16*e**3 = 0"),
    ("Find the incircle radius of triangle ABC. For all geometry problems:\n1. Give coordinates",
     "Find the incircle radius of triangle ABC."),
    ("What are the odds of rolling 17 or higher? Please respond with a reduced fraction [ex., 1/60].",
     "What are the odds of rolling 17 or higher?"),
])
def test_gym_math_drops_the_answer_format_and_asks_for_a_box(question, expected):
    assert gym.math_question(question) == expected + MATH_SUFFIX


# --------------------------------------------------------------------------------------------
# Magpie
# --------------------------------------------------------------------------------------------

def test_magpie_keeps_finished_distinct_requests_and_says_why_it_drops():
    seen, starts = set(), Counter()
    keep = lambda t, fin=True: magpie.keep_or_why(t, fin, seen, starts, max_same_start=2)
    assert keep("Write a poem about the sea at night.") is None
    assert keep("write a poem about the SEA at night!") == "duplicate"
    assert keep("Write a poem about the sea in winter.") is None
    assert keep("Write a poem about the sea and the stars.") == "same start"
    assert keep("Explain how a rainbow forms", fin=False) == "unfinished"
    assert keep("Hi there") == "length"
    assert keep("assistant: Sure, here is a poem for you today.") == "template token"
    assert keep("Tell me about <|im_end|> tokens in chat models.") == "template token"


def test_magpie_starts_the_user_turn_after_the_steering_system_prompt():
    _, tok = load_target("data/target")
    text = magpie.pre_query(tok, "You are a math tutor.")
    assert text.endswith("You are a math tutor.<|im_end|>\n<|im_start|>user\n")
    assert "<|im_start|>assistant" not in text


def test_magpie_requests_are_balanced_filtered_and_seeded():
    """With the tiny target (its template is Qwen3's ChatML): n requests, as many of each kind,
    user-only prompts, none overlapping a suite, the same list for the same seed."""
    target, tok = load_target("data/target")
    kept, counts = magpie.magpie_requests(target, tok, 16, seed=0, max_new_tokens=48,
                                          batch_size=16, progress=False)
    assert len(kept) == 16 and counts["kept"] == 16
    assert Counter(r["kind"] for r in kept) == {f"magpie-{k}": 2 for k in magpie.KINDS}
    assert counts["sampled"] == 16 + sum(counts["dropped"].values())
    for r in kept:
        assert [m["role"] for m in r["messages"]] == ["user"]
        assert 5 <= len(text_of(r).split()) <= 150
    again, _ = magpie.magpie_requests(target, tok, 16, seed=0, max_new_tokens=48, batch_size=16,
                                      progress=False)
    assert again == kept


# --------------------------------------------------------------------------------------------
# answers --prompts
# --------------------------------------------------------------------------------------------

def test_answers_reads_prompt_files_and_their_content_is_the_recipe(tmp_path):
    """``answers --prompts FILE``: the file's prompts answered (the builder's kinds default to
    none), the file's hash in the recipe (an edited file is another recipe), sampled answers
    when asked, seeded per shard, and a clear error for a file that is not prompts."""
    prompts = tmp_path / "p.jsonl"
    rows = [{"messages": [{"role": "user", "content": f"Say {w} twice."}], "kind": "test"}
            for w in ("one", "two", "three", "four", "five")]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "a"
    argv = ["--target", "data/target", "--prompts", str(prompts), "--out", str(out), "--shards", "2",
            "--max-new-tokens", "8", "--dtype", "float32", "--threads", "1"]
    made = answers.main(argv)
    assert made["answers"] == 5
    manifest = json.loads((out / answers.MANIFEST).read_text())
    assert manifest["recipe"]["n_math"] == 0 and list(manifest["recipe"]["prompts"]) == ["p.jsonl"]
    _, tok = load_target("data/target")
    asked = {tok.decode(r["ids"][:r["response_start"]]) for r in answers.load_answers(out)}
    assert all(any(f"Say {w} twice." in a for a in asked) for w in ("one", "three", "five"))
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows[:4]))
    with pytest.raises(ValueError, match="another recipe"):
        answers.main(argv)
    sampled = [answers.main(argv[:5] + [str(tmp_path / f"s{i}")] + argv[6:] + ["--temperature", "1"])
               for i in range(2)]
    a, b = (answers.load_answers(tmp_path / f"s{i}") for i in range(2))
    assert all(torch.equal(x["ids"], y["ids"]) for x, y in zip(a, b)) and sampled[0]["answers"] == 4
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"messages": [{"role": "assistant", "content": "hi"}]}) + "\n")
    with pytest.raises(ValueError, match="line 1"):
        answers.main(["--target", "data/target", "--prompts", str(bad), "--out", str(tmp_path / "b")])


def test_two_shard_ranges_fill_one_folder(tmp_path):
    """``--only-shards``: a run makes only its range; another run's range lands in the same
    answers.json (read again under the folder's lock before each write), none made twice."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"Count to {i}."}]})
                               + "\n" for i in range(6)))
    out = tmp_path / "a"
    argv = ["--target", "data/target", "--prompts", str(prompts), "--out", str(out), "--shards", "3",
            "--max-new-tokens", "6", "--dtype", "float32", "--threads", "1"]
    first = answers.main(argv + ["--only-shards", "1-2"])
    assert first["this_run"]["shards"] == [1, 2]
    second = answers.main(argv + ["--only-shards", "0"])
    assert second["this_run"]["shards"] == [0] and second["answers"] == 6
    assert sorted(json.loads((out / answers.MANIFEST).read_text())["shards"]) == ["0", "1", "2"]
    with pytest.raises(SystemExit):
        answers.arguments(argv + ["--only-shards", "5-2"])


def test_the_folder_lock_lets_one_writer_in_at_a_time(tmp_path):
    import threading
    import time

    inside, most = [], []

    def writer():
        with answers.locked(tmp_path):
            inside.append(1)
            most.append(len(inside))
            time.sleep(0.05)
            inside.pop()
    threads = [threading.Thread(target=writer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most == [1, 1, 1, 1] and not list(tmp_path.iterdir())     # and no lock file left

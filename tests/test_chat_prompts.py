"""The chat training prompts (tools/make_data/chat_prompts.py): reproducible, and never an evaluation item."""

import re
import subprocess

import pytest
import torch

from minidflash.paths import PROMPTS_DIR
from minidflash.tools.make_data import chat_prompts as cp
from minidflash.tools.make_data import word_problems as wp
from minidflash.tools.common import read_jsonl
from minidflash.tools.make_data.suites import HUMANEVAL_TEMPLATE, MATH_SUFFIX

SUITES = ["gsm8k", "math500", "humaneval", "mtbench", "arithmetic", "code"]
HUMANEVAL_RE = re.compile(re.escape(HUMANEVAL_TEMPLATE).replace(re.escape("{prompt}"), "(.*)"), re.S)
CODE_RE = re.compile(re.escape(cp.CODE_PREFIX) + r"(.*)\n```", re.S)
MIN_SUBSTRING = 40   # bodies at least this long must not occur inside one another either


def body(content: str) -> str:
    """The question without its template: math suffix, HumanEval or code wrapper removed."""
    if content.endswith(MATH_SUFFIX):
        content = content[:-len(MATH_SUFFIX)]
    for pattern in (HUMANEVAL_RE, CODE_RE):
        if m := pattern.fullmatch(content):
            content = m.group(1)
    return content


def norm(text: str) -> str:
    return " ".join(text.lower().split())


def text_of(row: dict) -> str:
    (msg,) = [m for m in row["messages"] if m["role"] == "user"]
    return msg["content"]


@pytest.fixture(scope="module", params=["texts", "docstrings"])
def prompts(request):
    """More of every kind than a training run takes (all the stdlib training functions)."""
    try:
        n_prose = min(6000, cp.prose_capacity(request.param) // 2)
        return cp.chat_training_prompts(n_math=6000, n_code=len(cp._code_heads()), n_prose=n_prose,
                                        seed=0, prose_source=request.param, n_story=6000,
                                        n_task=3000, n_chain=3000, n_symbolic=3000,
                                        n_wide=3000)
    except (subprocess.CalledProcessError, OSError) as e:   # no PyPI: the sdists are not here
        pytest.skip(f"prose texts unavailable: {e}")


def test_template_stripping_is_right():
    assert body("What is 2+2?" + MATH_SUFFIX) == "What is 2+2?"
    assert body(HUMANEVAL_TEMPLATE.format(prompt="def f(x):\n    '''doc'''")) == "def f(x):\n    '''doc'''"
    assert body(cp.CODE_PREFIX + "def g():\n    '''doc'''\n```") == "def g():\n    '''doc'''"
    assert norm("  A\n b\tC ") == "a b c"


def test_builder_is_deterministic():
    try:
        a = cp.chat_training_prompts(50, 40, 30, seed=3)
    except (subprocess.CalledProcessError, OSError) as e:   # no PyPI: the sdists are not here
        pytest.skip(f"prose texts unavailable: {e}")
    assert a == cp.chat_training_prompts(50, 40, 30, seed=3)
    assert a != cp.chat_training_prompts(50, 40, 30, seed=4)
    assert [r["kind"] for r in a].count("math") == 50
    assert [r["kind"] for r in a].count("code") == 40
    assert [r["kind"] for r in a].count("prose") == 30
    for r in a:
        assert [m["role"] for m in r["messages"]] == ["user"] and text_of(r).strip()
    kinds = {r["kind"]: text_of(r) for r in a}
    assert kinds["math"].endswith(MATH_SUFFIX)
    assert HUMANEVAL_RE.fullmatch(kinds["code"])


@pytest.mark.parametrize("suite", SUITES)
def test_no_training_prompt_is_an_evaluation_item(prompts, suite):
    evals = read_jsonl(PROMPTS_DIR / f"{suite}.jsonl")
    assert evals
    train_text = {text_of(r) for r in prompts}
    train_body = {norm(body(text_of(r))) for r in prompts}
    assert len(train_text) == len(prompts)                   # no repeats either
    for e in evals:
        q = text_of(e)
        assert q not in train_text, f"{suite}: exact training prompt {q[:80]!r}"
        assert norm(body(q)) not in train_body, f"{suite}: same question {q[:80]!r}"
    # ... nor inside one another (a suite's question quoted in a training prompt, or a training
    # function that is a HumanEval problem's body)
    joined_train = "\x00".join(train_body)
    eval_bodies = [norm(body(text_of(e))) for e in evals]
    joined_eval = "\x00".join(eval_bodies)
    for b in eval_bodies:
        assert len(b) < MIN_SUBSTRING or b not in joined_train, f"{suite}: {b[:80]!r} in training"
    for b in train_body:
        assert len(b) < MIN_SUBSTRING or b not in joined_eval, f"{suite}: training {b[:80]!r} in it"


def test_stories_are_many_situations_in_the_math_template():
    rows = cp.story_prompts(3000, seed=0)
    assert rows == cp.story_prompts(3000, seed=0) and rows != cp.story_prompts(3000, seed=1)
    texts = [text_of(r) for r in rows]
    assert len(set(texts)) == 3000 and all(t.endswith(MATH_SUFFIX) for t in texts)
    assert {r["kind"] for r in rows} == {"story"}
    for question, sample in wp.STORIES:          # every situation drawn, every field filled
        words = max(re.split(r"\{\w+\}", question), key=len)      # its longest fixed words
        assert sum(words in t for t in texts) > 3000 / len(wp.STORIES) / 3, question[:60]
    assert not any(c in t.replace("\\boxed{}", "") for t in texts for c in "{}")
    mixed = cp.chat_training_prompts(20, 10, 10, seed=2, n_story=15)
    assert [r["kind"] for r in mixed].count("story") == 15


def test_chains_are_gsm8k_shaped_and_read_well():
    """Every chained situation is drawn, every field filled, the pronouns agree with the name,
    and the mix takes them only when asked (without them it is what it always was)."""
    rows = cp.chain_prompts(3000, seed=2)
    assert rows == cp.chain_prompts(3000, seed=2) and rows != cp.chain_prompts(3000, seed=3)
    texts = [text_of(r) for r in rows]
    assert len(set(texts)) == 3000 and all(t.endswith(MATH_SUFFIX) for t in texts)
    assert {r["kind"] for r in rows} == {"chain"}
    for question, _ in wp.CHAINS:
        words = max(re.split(r"\{[\w\[\]]+\}", question), key=len)
        assert sum(words in t for t in texts) > 3000 / len(wp.CHAINS) / 3, question[:60]
    assert not any(c in t.replace("\\boxed{}", "") for t in texts for c in "{}")
    assert all(t[0].isupper() for t in texts)
    for t in texts:                       # a name's pronoun: she for the names in SHE, he else
        first = t.split()[0].split("'")[0]
        if first in wp.FIRST_NAMES:
            other = {" he ", " He ", " his ", " him"} if first in wp.SHE else {" she ", " She ", " her "}
            mine = ".".join(t.split(".")[:3])          # the first sentences, about the name
            assert not any(w in mine for w in other), t[:120]
    plain = cp.chat_training_prompts(20, 10, 10, seed=2)
    mixed = cp.chat_training_prompts(20, 10, 10, seed=2, n_chain=15)
    assert [r["kind"] for r in mixed].count("chain") == 15
    assert [r for r in mixed if r["kind"] != "chain"] != [] and len(mixed) == len(plain) + 15


def words_of(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]+", body(text).lower()) if len(w) > 3}


def test_symbolic_problems_never_take_a_gsm8k_suite_problem_s_template(monkeypatch):
    """GSM-Symbolic's templates are GSM8K test problems with names and numbers to redraw, so a
    redrawn one is not an exact match of a suite item and the checks above cannot see it. By
    their words: a generator made from one of our suite's items shares more than 40% of its
    words (the six in GSM_SYMBOLIC_HELD: 50-82%); the others at most 33%."""
    try:
        generators = cp.gsm_symbolic_generators()
    except (subprocess.CalledProcessError, OSError) as e:   # no PyPI: the sdist is not here
        pytest.skip(f"reasoning-gym's sdist unavailable: {e}")
    suite = [words_of(text_of(e)) for e in read_jsonl(PROMPTS_DIR / "gsm8k.jsonl")]

    def closest(question):
        mine = words_of(question)
        return max(len(mine & s) / len(mine | s) for s in suite)

    rows = cp.symbolic_prompts(3000, seed=4)
    assert rows == cp.symbolic_prompts(3000, seed=4) and rows != cp.symbolic_prompts(3000, seed=5)
    texts = [text_of(r) for r in rows]
    assert len(set(texts)) == 3000 and all(t.endswith(MATH_SUFFIX) for t in texts)
    assert {r["kind"] for r in rows} == {"symbolic"} and len(generators) == 79
    assert max(closest(t) for t in texts) < 0.4
    import random
    held = cp.GSM_SYMBOLIC_HELD
    monkeypatch.setattr(cp, "GSM_SYMBOLIC_HELD", ())
    every = cp.gsm_symbolic_generators.__wrapped__()    # uncached: the held ones included
    rng = random.Random(0)
    for k in held:
        assert max(closest(every[k](rng, 1.0)["question"]) for _ in range(5)) > 0.4, k
    mixed = cp.chat_training_prompts(20, 10, 10, seed=2, n_symbolic=15)
    assert [r["kind"] for r in mixed].count("symbolic") == 15


# independent solutions of some tasks, to check the doctests the table writes
CHECK = {
    "running_sum": lambda xs: [sum(xs[:i + 1]) for i in range(len(xs))],
    "differences": lambda xs: [xs[i] - xs[i - 1] for i in range(1, len(xs))],
    "rotate_left": lambda xs, k: [xs[(i + k) % len(xs)] for i in range(len(xs))],
    "rotate_right": lambda xs, k: [xs[(i - k) % len(xs)] for i in range(len(xs))],
    "second_largest": lambda xs: sorted(set(xs))[-2] if len(set(xs)) > 1 else None,
    "count_vowels": lambda s: len(re.findall("[aeiouAEIOU]", s)),
    "reverse_words": lambda s: " ".join(reversed(s.split())),
    "shift_letters": lambda s, k: s.translate(str.maketrans(
        "abcdefghijklmnopqrstuvwxyz", "abcdefghijklmnopqrstuvwxyz"[k:] + "abcdefghijklmnopqrstuvwxyz"[:k])),
    "fibonacci": lambda n: round(((1 + 5 ** 0.5) / 2) ** n / 5 ** 0.5),
    "collatz_steps": lambda n: 0 if n == 1 else 1 + CHECK["collatz_steps"](n // 2 if n % 2 == 0 else 3 * n + 1),
    "to_binary": lambda n: bin(n)[2:],
    "keep_div3": lambda xs: [x for x in xs if x % 3 == 0],
    "max_odd": lambda xs: (sorted(x for x in xs if x % 2 == 1)[-1:] or [None])[0],
}


def test_tasks_are_humaneval_shaped_and_their_doctests_are_right():
    import ast

    rows = cp.task_prompts(3000, seed=0)
    assert rows == cp.task_prompts(3000, seed=0) and rows != cp.task_prompts(3000, seed=1)
    assert {r["kind"] for r in rows} == {"task"} and len({text_of(r) for r in rows}) == 3000
    names, checked = set(), 0
    for r in rows:
        m = HUMANEVAL_RE.fullmatch(text_of(r))
        assert m, text_of(r)[:80]
        tree = ast.parse(m.group(1))                     # valid Python: imports, def, docstring
        (fn,) = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
        names.add(fn.name)
        doc = ast.get_docstring(fn, clean=False).split("\n")
        calls = [(line.strip()[4:], doc[i + 1].strip()) for i, line in enumerate(doc)
                 if line.strip().startswith(">>> ")]
        assert 1 <= len(calls) <= 3 and len({c for c, _ in calls}) == len(calls)
        for call, want in calls:
            assert call.startswith(fn.name + "(")
            want = ast.literal_eval(want)                 # outputs are literals
            if fn.name in CHECK:
                args = ast.literal_eval("(" + call[len(fn.name) + 1:-1] + ",)")
                assert CHECK[fn.name](*args) == want, (call, want)
                checked += 1
    assert set(CHECK) <= names and checked > 300
    assert len(names) > 60                               # every table entry, its variants drawn
    mixed = cp.chat_training_prompts(20, 10, 10, seed=2, n_task=15)
    assert [r["kind"] for r in mixed].count("task") == 15


def test_the_kept_answers_are_answers_to_these_prompts():
    """Every answers folder in data/ (smollm2_answers, smollm2_stories) was made from
    chat_training_prompts with its recorded recipe: every shard's prompts still hash to what the
    shard records (adding a kind must not move them)."""
    import hashlib
    import json

    from minidflash.paths import DATA_DIR
    from minidflash.tools.make_data import answers

    folders = sorted(DATA_DIR.glob(f"*/{answers.MANIFEST}"))
    assert DATA_DIR / "smollm2_answers" / answers.MANIFEST in folders
    for path in folders:
        manifest = json.loads(path.read_text())
        r = manifest["recipe"]
        try:
            prompts = cp.chat_training_prompts(r["n_math"], r["n_code"], r["n_prose"], r["seed"],
                                               r["prose_source"], r.get("n_story", 0),
                                               r.get("n_task", 0), r.get("n_chain", 0),
                                               r.get("n_symbolic", 0), r.get("n_wide", 0))
        except (subprocess.CalledProcessError, OSError) as e:   # no PyPI: no sdists here
            pytest.skip(f"prose texts unavailable: {e}")
        if "prompts" in r:                 # and the prompt files, as named and hashed
            files = [DATA_DIR / "train_prompts" / name for name in r["prompts"]]
            assert {f.name: hashlib.sha1(f.read_bytes()).hexdigest()[:12] for f in files} == r["prompts"]
            prompts += answers.file_prompts([str(f) for f in files])
        for s, shard in manifest["shards"].items():
            assert answers.prompts_key(prompts[int(s)::r["shards"]]) == shard["prompts_key"], (path, s)


def test_wide_problems_name_things_and_people_from_the_long_lists():
    """The wide kind is the story and chain templates with every short list swapped for its
    long one: its names are all from WIDE_NAMES, with pronouns that agree, and about half its
    problems name a thing no short list has."""
    rows = cp.wide_prompts(3000, seed=8)
    assert rows == cp.wide_prompts(3000, seed=8) and rows != cp.wide_prompts(3000, seed=9)
    assert {r["kind"] for r in rows} == {"wide"} and len({text_of(r) for r in rows}) == 3000
    texts = [text_of(r) for r in rows]
    words = [set(re.findall(r"[A-Za-z']+", t)) for t in texts]
    assert not any(w & set(wp.FIRST_NAMES) for w in words)       # no short-list name is left
    assert sum(bool(w & set(wp.WIDE_NAMES)) for w in words) > 0.95 * len(rows)
    short = {m for _, m in wp.GOODS} | set(wp.THINGS) | set(wp.FRUIT) | {m for _, m in wp.ANIMALS}
    long = ({m for _, m in wp.WIDE_GOODS} | set(wp.WIDE_THINGS) | set(wp.WIDE_FRUIT)
            | {m for _, m in wp.WIDE_ANIMALS}) - short
    named = sum(any(re.search(rf"\b{re.escape(m)}\b", t) for m in long) for t in texts)
    assert 0.4 * len(rows) < named < 0.7 * len(rows), named
    for t in texts:                    # the first person named is the one {he} stands for
        first = min((m.start(), m.group()) for m in re.finditer(r"[A-Z][a-z]+", t)
                    if m.group() in wp.WIDE_NAMES)[1]
        if re.search(r"\b([Hh]e|[Ss]he)\b", t):
            assert bool(re.search(r"\b[Ss]he\b", t)) == (first in wp.WIDE_SHE), t
    mixed = cp.chat_training_prompts(20, 10, 10, seed=2, n_wide=15)
    assert [r["kind"] for r in mixed].count("wide") == 15


def test_math_and_code_match_the_suites_templates():
    """The held-out arithmetic problems are excluded even when asked for many; code heads come
    from the training modules only (code.jsonl's modules are held out)."""
    held = {norm(text_of(r)) for r in read_jsonl(PROMPTS_DIR / "arithmetic.jsonl")}
    math = cp.math_prompts(3000, seed=0)
    assert not held & {norm(body(text_of(r))) for r in math}
    code = {norm(body(text_of(r))) for r in read_jsonl(PROMPTS_DIR / "code.jsonl")}
    assert not code & {norm(h) for h in cp._code_heads()}


# --------------------------------------------------------------------------------------------
# Their regeneration: the target's features captured while it answers (train_data.regenerate)
# --------------------------------------------------------------------------------------------

class IdsTokenizer:
    """A prompt's content is its token ids, space separated; pad 0."""
    pad_token_id = 0


def test_regenerate_captures_the_features_a_fresh_forward_gives(monkeypatch):
    import torch

    from minidflash import train_data
    from tests.helpers import tiny_target

    target = tiny_target(5, vocab=97, layers=4)
    torch.manual_seed(2)
    prompts = [{"messages": [{"role": "user", "content": " ".join(
        str(t) for t in torch.randint(1, 96, (n,)).tolist())}]} for n in (4, 9, 6, 12, 7)]
    monkeypatch.setattr(train_data, "chat_ids", lambda tok, messages: torch.tensor(
        [[int(t) for t in messages[0]["content"].split()]]))
    # a stop token that the first prompt's greedy answer reaches early: rows end at different steps
    first = train_data.chat_ids(None, prompts[0]["messages"])
    stop = int(target.generate(first, do_sample=False, max_new_tokens=4, pad_token_id=0,
                               attention_mask=torch.ones_like(first))[0, -1])
    monkeypatch.setattr(train_data, "stop_ids", lambda tok: [stop])
    layer_ids = [0, 2, 3]                     # 3: the last layer, whose entry is after the norm
    plain = train_data.regenerate(target, IdsTokenizer(), prompts, max_new_tokens=20, batch_size=5,
                                  progress=False)
    assert all("features" not in d for d in plain)
    for batch_size in (5, 2):                 # left padding of different widths
        data = train_data.regenerate(target, IdsTokenizer(), prompts, max_new_tokens=20,
                                     batch_size=batch_size, progress=False, layer_ids=layer_ids,
                                     features_dtype=torch.float32)
        lengths = [len(d["ids"]) - d["response_start"] for d in data]
        assert min(lengths) < 20 and max(lengths) == 20   # some stopped early, some ran out
        for d, p in zip(data, plain):
            assert torch.equal(d["ids"], p["ids"]) and d["response_start"] == p["response_start"]
            fresh = train_data.features_of(target, d["ids"][None], layer_ids)[0]   # (S, 3*H)
            assert d["features"].dtype == torch.float32
            assert d["features"].shape == (len(d["ids"]) - 1, fresh.shape[1])
            assert torch.allclose(d["features"], fresh[:-1], atol=1e-5, rtol=0), \
                (d["features"] - fresh[:-1]).abs().max()
    half = train_data.regenerate(target, IdsTokenizer(), prompts[:2], max_new_tokens=20,
                                 progress=False, layer_ids=layer_ids)
    assert half[0]["features"].dtype == torch.float16      # the default: fp16, as train() keeps them


# --------------------------------------------------------------------------------------------
# The command line: the tiny target's commands mean what they meant; --target takes these
# --------------------------------------------------------------------------------------------

def cli_run(monkeypatch, argv):
    """What ``python -m minidflash train ARGV`` would load, regenerate and train (nothing runs)."""
    from types import SimpleNamespace

    from minidflash.tools.train import train_drafter as td

    seen = {}
    target = SimpleNamespace(config=SimpleNamespace(num_hidden_layers=30))
    load = lambda name=None, dtype="auto": (seen.update(target=name, dtype=dtype), (target, None))[1]
    monkeypatch.setattr(td, "load_target", load)
    monkeypatch.setattr(td, "distributed", lambda t: (0, 1))
    monkeypatch.setattr(td, "tiny_training_data", lambda *a, **k: (seen.update(tiny=k), [])[1])
    monkeypatch.setattr(td, "chat_training_data", lambda *a, **k: (seen.update(chat=k), [])[1])
    monkeypatch.setattr(td, "train", lambda cfg, t, tok, data, info: (
        seen.update(cfg=cfg, info=info), {"info": {}})[1])
    td.main(argv)
    return seen


def test_tiny_target_commands_are_unchanged(monkeypatch):
    from minidflash.paths import TINY_AR_DRAFTER_DIR, TINY_DRAFTER_DIR
    from minidflash.trainer import TrainConfig

    seen = cli_run(monkeypatch, "--num-layers 1 --steps 3000 --lr 1.5e-3".split())
    assert seen["target"] is None and "chat" not in seen
    assert seen["dtype"] == torch.float32          # features in fp32; bf16 copies by --feature-dtype
    assert seen["cfg"] == TrainConfig(num_layers=1, steps=3000, lr=1.5e-3, out=str(TINY_DRAFTER_DIR))
    assert seen["tiny"] == {"seed": 0, "progress": True, "n_arithmetic": 4000, "n_code": 1000,
                            "max_new_tokens": 256}
    assert seen["info"] == {"data": {"n_arithmetic": 4000, "n_code": 1000, "max_new_tokens": 256},
                            "command": "python -m minidflash train --num-layers 1 --steps 3000 "
                                       "--lr 1.5e-3", "world_size": 1}
    seen = cli_run(monkeypatch, "--drafter ar --ttt-steps 4 --num-layers 1 --steps 3000".split())
    assert seen["cfg"].out == str(TINY_AR_DRAFTER_DIR)


def test_target_option(monkeypatch):
    name = "HuggingFaceTB/SmolLM2-135M-Instruct"
    seen = cli_run(monkeypatch, f"--target {name} --out /x --n-math 7 --features offline".split())
    assert seen["target"] == name and "tiny" not in seen and seen["cfg"].out == "/x"
    chat = seen["chat"]
    assert (chat["n_math"], chat["n_code"], chat["n_prose"]) == (7, 1500, 1500)
    assert chat["layer_ids"] == [1, 14, 27]        # offline: features captured while regenerating
    assert cli_run(monkeypatch, f"--target {name} --out /x".split())["chat"]["layer_ids"] is None
    for bad in (f"--target {name}", "--n-math 5", f"--target {name} --out /x --n-arithmetic 9"):
        with pytest.raises(SystemExit):           # --out required; chat counts need --target
            cli_run(monkeypatch, bad.split())


def test_use_shards_budget(monkeypatch):
    """--use-shards K trains on shards 0..K-1 of --regen-shards, and says so in the drafter's
    training record; out of range, or without --target, is refused."""
    name = "HuggingFaceTB/SmolLM2-135M-Instruct"
    seen = cli_run(monkeypatch, f"--target {name} --out /x --regen-shards 16 --use-shards 6".split())
    assert list(seen["chat"]["mine"]) == list(range(6)) and seen["chat"]["regen_shards"] == 16
    assert seen["info"]["data"]["use_shards"] == 6
    seen = cli_run(monkeypatch, f"--target {name} --out /x --regen-shards 4".split())
    assert list(seen["chat"]["mine"]) == list(range(4)) and "use_shards" not in seen["info"]["data"]
    for bad in (f"--target {name} --out /x --regen-shards 4 --use-shards 5",
                f"--target {name} --out /x --regen-shards 4 --use-shards 0", "--use-shards 2"):
        with pytest.raises(SystemExit):
            cli_run(monkeypatch, bad.split())

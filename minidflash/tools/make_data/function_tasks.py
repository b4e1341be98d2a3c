"""Small function tasks for the chat training prompts (``chat_prompts``): HumanEval's shape (a
typed signature, a docstring, doctests), the paper's code domain without HumanEval's items.

Each entry of ``TASKS`` draws a variant (which filter, which side, which operation) and returns
``(name, parameters, return type, docstring, solution, sampler of arguments)``; ``render_task``
writes one with 1-3 doctests whose outputs the solution computes, so the doctests are right.
The words the string tasks use are data (``chat_prompts/words.json``, "task_words").
"""

from __future__ import annotations

import math
import re

from .word_problems import FIRST_NAMES, load

WORDS = load("words.json")["task_words"]
FILTERS = {   # word -> (test, description)
    "even": (lambda x: x % 2 == 0, "even"), "odd": (lambda x: x % 2 == 1, "odd"),
    "positive": (lambda x: x > 0, "positive"), "negative": (lambda x: x < 0, "negative"),
    "div3": (lambda x: x % 3 == 0, "divisible by 3"),
}
VOWELS = "aeiou"


def _ints(r, lo=-9, hi=20, n=(3, 8)):
    return [r.randint(lo, hi) for _ in range(r.randint(*n))]


def _words(r, n=(2, 6)):
    return [r.choice(WORDS) for _ in range(r.randint(*n))]


def _text(r):
    return " ".join(_words(r, (2, 5)))


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


def render_task(r) -> str:
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


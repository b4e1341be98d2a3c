"""Text the tiny target learns from, in two domains, as chat conversations.

DFlash needs a target whose greedy answers are worth imitating. A tiny model trained on raw
code loops ("self.x = b''" again and again), which inflates acceptance without teaching the
drafter anything. So the tiny target learns two domains, both as chat turns:

* ``arithmetic``: step-by-step word problems (GSM8K-style) generated here, each with a
  checkable answer in ``\\boxed{}``. Structured reasoning, correct or not: the honest way to
  high acceptance.
* ``code``: real Python functions from CPython's standard library (PSF licence), asked for by
  signature and docstring.

Everything is seeded; the held-out prompts (``data/prompts/<domain>.jsonl``, read and written by
``tools/common.py``) never occur in the training set (different seeds / different stdlib modules,
checked).
"""

from __future__ import annotations

import ast
import random
import sysconfig
import zlib
from pathlib import Path

# --------------------------------------------------------------------------------------------
# Arithmetic word problems
# --------------------------------------------------------------------------------------------

NAMES = ["Tom", "Mia", "Sam", "Lena", "Omar", "Ava", "Ben", "Zoe", "Ravi", "Nora", "Leo",
         "Ivy", "Max", "Ella", "Kai", "Ruth", "Finn", "Jade", "Hugo", "Maya"]
ITEMS = ["apples", "pencils", "stickers", "marbles", "books", "cookies", "stamps", "shells",
         "cards", "coins", "eggs", "flowers", "toys", "candies", "balloons", "buttons"]
BOXES = ["bags", "boxes", "packs", "baskets", "jars", "crates"]


def _problem(rng: random.Random) -> tuple[str, str, int]:
    """One word problem: (question, step-by-step solution, answer). All numbers stay >= 0."""
    name, item, box = rng.choice(NAMES), rng.choice(ITEMS), rng.choice(BOXES)
    friend = rng.choice([n for n in NAMES if n != name])
    kind = rng.randrange(5)
    if kind == 0:  # start, buy boxes, give away
        a, k, m = rng.randint(5, 60), rng.randint(2, 9), rng.randint(2, 12)
        b = k * m
        g = rng.randint(1, a + b)
        q = (f"{name} has {a} {item}. {name} buys {k} {box} with {m} {item} each, then gives "
             f"{g} {item} to {friend}. How many {item} does {name} have now?")
        s = (f"{name} starts with {a} {item}.\n"
             f"{k} {box} with {m} {item} each is {k} * {m} = {b} {item}.\n"
             f"After buying, {name} has {a} + {b} = {a + b} {item}.\n"
             f"After giving {g} away, {name} has {a + b} - {g} = {a + b - g} {item}.\n")
        ans = a + b - g
    elif kind == 1:  # two people, combine, share equally
        a, b = rng.randint(3, 50), rng.randint(3, 50)
        p = rng.choice([2, 3, 4, 5])
        total = a + b
        total -= total % p
        b = total - a if total - a > 0 else b
        total = a + b
        if total % p:
            p = 1 if total % 2 else 2
        q = (f"{name} has {a} {item} and {friend} has {b} {item}. They put them together and "
             f"share them equally among {p} children. How many {item} does each child get?")
        s = (f"Together they have {a} + {b} = {total} {item}.\n"
             f"Shared among {p} children, each gets {total} / {p} = {total // p} {item}.\n")
        ans = total // p
    elif kind == 2:  # price problem
        price, n = rng.randint(2, 15), rng.randint(2, 9)
        price2, n2 = rng.randint(2, 15), rng.randint(2, 9)
        cost = price * n + price2 * n2
        paid = (cost // 10 + rng.randint(1, 5)) * 10
        q = (f"{name} buys {n} {item} for {price} dollars each and {n2} {box} for {price2} "
             f"dollars each. {name} pays with {paid} dollars. How much change does {name} get?")
        s = (f"The {item} cost {n} * {price} = {price * n} dollars.\n"
             f"The {box} cost {n2} * {price2} = {price2 * n2} dollars.\n"
             f"In total {name} spends {price * n} + {price2 * n2} = {cost} dollars.\n"
             f"The change is {paid} - {cost} = {paid - cost} dollars.\n")
        ans = paid - cost
    elif kind == 3:  # days of saving
        per_day, days, spent = rng.randint(2, 12), rng.randint(2, 9), rng.randint(1, 20)
        got = per_day * days
        spent = min(spent, got)
        q = (f"{name} saves {per_day} dollars every day for {days} days, then spends {spent} "
             f"dollars on {item}. How many dollars does {name} have left?")
        s = (f"In {days} days {name} saves {days} * {per_day} = {got} dollars.\n"
             f"After spending {spent}, {name} has {got} - {spent} = {got - spent} dollars.\n")
        ans = got - spent
    else:  # three steps: rows of items, some broken, add more
        rows, per_row = rng.randint(2, 9), rng.randint(3, 12)
        got = rows * per_row
        lost, more = rng.randint(1, got), rng.randint(2, 40)
        q = (f"{name} puts {item} in {rows} rows of {per_row}. {name} loses {lost} of them and "
             f"then finds {more} more. How many {item} does {name} have?")
        s = (f"{rows} rows of {per_row} is {rows} * {per_row} = {got} {item}.\n"
             f"After losing {lost}, {name} has {got} - {lost} = {got - lost} {item}.\n"
             f"After finding {more}, {name} has {got - lost} + {more} = {got - lost + more} {item}.\n")
        ans = got - lost + more
    return q, s + f"The answer is \\boxed{{{ans}}}.", ans


def arithmetic_examples(n: int, seed: int, exclude: set[str] = frozenset()) -> list[dict]:
    """n distinct problems as {"messages": [...], "answer": str}; questions in exclude are skipped."""
    rng, seen, out = random.Random(seed), set(exclude), []
    while len(out) < n:
        q, s, ans = _problem(rng)
        if q in seen:
            continue
        seen.add(q)
        out.append({"messages": [{"role": "user", "content": q},
                                 {"role": "assistant", "content": s}], "answer": str(ans)})
    return out


def held_out_arithmetic(seed: int = 0, n: int = 128) -> list[dict]:
    """The held-out arithmetic problems (data/prompts/arithmetic.jsonl): never trained on."""
    return arithmetic_examples(n, seed=seed + 1)


# --------------------------------------------------------------------------------------------
# Python functions from the standard library
# --------------------------------------------------------------------------------------------

def _stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = ("site-packages", "test", "tests", "idle_test", "__pycache__", "lib2to3", "ensurepip")
    files = [p for p in root.rglob("*.py") if not set(p.relative_to(root).parts) & set(skip)]
    return sorted(files)


def code_examples(max_chars: int = 900) -> tuple[list[dict], list[dict]]:
    """(train, held_out) functions with a docstring, asked for by signature and docstring.

    The split is by module (a hash of the file name), so held-out prompts come from modules the
    target never saw; a held-out function whose prompt also occurs in a training module (the
    same code copied between modules) is dropped, and so are repeats.
    """
    train, held = [], []
    root = Path(sysconfig.get_paths()["stdlib"])
    for path in _stdlib_files():
        try:
            source = path.read_text(encoding="utf-8")
            tree = ast.parse(source)
        except (SyntaxError, UnicodeDecodeError):
            continue
        lines = source.splitlines()
        bucket = held if zlib.crc32(str(path.relative_to(root)).encode()) % 20 == 0 else train
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef) or ast.get_docstring(node) is None:
                continue
            body = "\n".join(lines[node.lineno - 1:node.end_lineno])
            indent = len(body) - len(body.lstrip())
            body = "\n".join(l[indent:] for l in body.splitlines())
            if len(body) > max_chars or "\t" in body or node.decorator_list:
                continue
            doc_node = node.body[0]
            head = "\n".join(l[indent:] for l in lines[node.lineno - 1:doc_node.end_lineno])
            q = f"Complete this Python function:\n```python\n{head}\n```"
            a = f"```python\n{body}\n```"
            bucket.append({"messages": [{"role": "user", "content": q},
                                        {"role": "assistant", "content": a}]})
    # The same function can live in several modules: a held-out prompt must not occur in
    # training at all, and only once among the held-out ones.
    seen = {e["messages"][0]["content"] for e in train}
    unique = []
    for e in held:
        if e["messages"][0]["content"] not in seen:
            seen.add(e["messages"][0]["content"])
            unique.append(e)
    return train, unique


# --------------------------------------------------------------------------------------------
# Held-out prompts (written to data/prompts/ by tools/common.py's write_jsonl)
# --------------------------------------------------------------------------------------------

def as_prompt(example: dict) -> dict:
    """Drop the assistant turn: what a held-out prompt file stores."""
    out = {"messages": [m for m in example["messages"] if m["role"] != "assistant"]}
    if "answer" in example:
        out["answer"] = example["answer"]
    return out

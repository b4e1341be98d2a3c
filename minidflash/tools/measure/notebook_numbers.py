"""The notebooks' measured sentences, rendered from their files (issue 67): a notebook's markdown
speaks about a number without typing it, and a code cell prints the sentence that states it with
these helpers. The papers' figures come from ``data/paper_numbers.json`` (value, what, source and
locator), printed as "the paper reports ...", never typed.

    >>> span([1.28, 1.71])
    '1.28x to 1.71x'
    >>> than(0.78)
    'slower'
"""

from __future__ import annotations

import json
import textwrap

from ...paths import ROOT

PAPER_NUMBERS = ROOT / "data" / "paper_numbers.json"
WIDTH = 98


def paper(key: str) -> dict:
    """One entry of data/paper_numbers.json: value, unit, what, source, locator."""
    return json.loads(PAPER_NUMBERS.read_text())["numbers"][key]


def value(key: str):
    return paper(key)["value"]


def with_unit(number, unit: str) -> str:
    """A paper's figure as written: ``4.86x``, ``tau 6.49``, a list of them joined (a list as
    the paper rounds it: ``5.1x, 4.5x``)."""
    if isinstance(number, list):
        return ", ".join(f"{n:g}{unit}" for n in number)
    return f"tau {number:.2f}" if unit == "tau" else f"{number:.2f}{unit}"


def paper_says(*keys: str, width: int = WIDTH) -> str:
    """'the paper reports' each entry (what: value), then each distinct source and locator."""
    entries = [paper(k) for k in keys]
    lines = [f"the paper reports {e['what']}: {with_unit(e['value'], e['unit'])}" for e in entries]
    where = dict.fromkeys(f"({e['source']}; {e['locator']})" for e in entries)
    return "\n".join(textwrap.fill(s, width, subsequent_indent="    ") for s in [*lines, *where])


def say(text: str, width: int = WIDTH) -> None:
    """Print a rendered sentence wrapped to the notebook's width."""
    print(textwrap.fill(text, width, break_on_hyphens=False))


def span(values, fmt: str = "{:.2f}", unit: str = "x") -> str:
    """The range of values, low to high: ``1.28x to 1.71x`` (one value when they agree); a unit
    that is a word (it starts with a space) is written once: ``38.6 to 40.7 ms``."""
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    if lo == hi:
        return f"{lo}{unit}"
    return f"{lo} to {hi}{unit}" if unit.startswith(" ") else f"{lo}{unit} to {hi}{unit}"


def than(ratio: float, up: str = "faster", down: str = "slower", level: str = "as fast") -> str:
    """The word a ratio (this over that) earns at two decimals: above 1 ``up``, below ``down``."""
    r = round(ratio, 2)
    return up if r > 1 else down if r < 1 else level


def every(ratios, up: str = "faster", down: str = "slower") -> str:
    """What a set of ratios says together: 'faster in every case', 'slower in every case', or
    'faster in N of M cases'."""
    ratios = [round(r, 2) for r in ratios]
    above = sum(r > 1 for r in ratios)
    if above == len(ratios):
        return f"{up} in every case"
    if not above:
        return f"{down} in every case" if all(r < 1 for r in ratios) else f"never {up}"
    return f"{up} in {above} of {len(ratios)} cases"

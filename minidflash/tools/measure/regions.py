"""The rendered regions of the course's pages: a sentence or a table that states a measured
number sits between ``<!-- numbers: module.function of FILE [and FILE] -->`` and
``<!-- /numbers -->``, and is what ``module.function`` (in minidflash.tools.measure) makes of
those files. tests/test_claims.py renders every region again and compares the words; this
module also writes the regions of a page from their files:

    python -m minidflash.tools.measure.regions README.md docs/results.md data/README.md

A file is named as ``data/results/NAME.json`` (passed to the function as ``NAME.json``) or by its
path in the repository (``data/target/training.json``, passed as written).
"""

from __future__ import annotations

import importlib
import json
import re
import sys
import textwrap

from ...paths import ROOT, RESULTS_DIR

REGION = re.compile(r"<!-- numbers: ([\w.]+) of ([^>]*?) ?-->\n(.*?)\n?<!-- /numbers -->", re.S)
OPENED = "<!-- numbers:"
WIDTH = 100


def files_named(spec: str) -> list[str]:
    """The files a region's comment names, in order (``data/results/`` left off)."""
    return re.findall(r"(?:data/results/)?([\w./-]+\.json)", spec)


def read(name: str) -> dict:
    """A results file by name (``NAME.json`` under data/results), or a file of the repository
    by its path."""
    path = RESULTS_DIR / name if (RESULTS_DIR / name).exists() else ROOT / name
    return json.loads(path.read_text())


def regions(text: str) -> list[tuple[int, str, list[str], str]]:
    """(line of the opening comment, renderer, files, the region as written) of each region."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(1), files_named(m.group(2)), m.group(3))
            for m in REGION.finditer(text)]


def render(renderer: str, files: list[str]) -> str:
    """What ``renderer`` (``module.function`` in minidflash.tools.measure) makes of the files:
    a function of results files by name; ``step_profile.markdown`` takes one file's dict and
    ``smollm2.speeds_markdown`` a {threads: file} dict."""
    module, function = renderer.rsplit(".", 1)
    fn = getattr(importlib.import_module(f"minidflash.tools.measure.{module}"), function)
    if renderer == "step_profile.markdown":
        return fn(read(files[0]))
    if renderer == "smollm2.speeds_markdown":
        return fn({"1": files[0], "2": files[1]})
    return fn(*files)


def words(text: str) -> list[str]:
    """A region's words: line breaks and runs of spaces do not count (a sentence may wrap)."""
    return text.split()


def first_difference(written: str, rendered: str) -> str:
    """Where a region parts from its rendering: a few words of each from the first that differs."""
    a, b = words(written), words(rendered)
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"written {' '.join(a[i:i + 8])!r}, rendered {' '.join(b[i:i + 8])!r}"


def wrong(text: str) -> list[tuple[int, str]]:
    """(line, what differs) for each region of ``text`` that is not what its files render."""
    out = []
    for line, renderer, files, written in regions(text):
        rendered = render(renderer, files)
        if words(written) != words(rendered):
            out.append((line, f"{renderer} of {' and '.join(files)}: "
                              f"{first_difference(written, rendered)}"))
    return out


def wrap(rendered: str) -> str:
    """A rendering as a page holds it: table lines as they are, each paragraph wrapped."""
    out = []
    for block in rendered.split("\n\n"):
        lines = block.splitlines()
        if all(line.lstrip().startswith(("|", "<sub>", "- ")) for line in lines):
            out.append("\n".join(lines) if lines[0].lstrip().startswith(("|", "<sub>")) else
                       "\n".join(textwrap.fill(line, WIDTH, subsequent_indent="  ",
                                               break_on_hyphens=False, break_long_words=False)
                                 for line in lines))
        else:
            out.append(textwrap.fill(" ".join(block.split()), WIDTH, break_on_hyphens=False,
                                     break_long_words=False))
    return "\n\n".join(out)


def fill(text: str) -> str:
    """``text`` with every region written again from its files."""
    def again(m):
        rendered = wrap(render(m.group(1), files_named(m.group(2))))
        return f"<!-- numbers: {m.group(1)} of {m.group(2)} -->\n{rendered}\n<!-- /numbers -->"
    return REGION.sub(again, text)


if __name__ == "__main__":
    for name in sys.argv[1:]:
        page = ROOT / name
        page.write_text(fill(page.read_text()))

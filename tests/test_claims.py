"""What the course states, checked against the files it quotes: the commands it shows parse on
today's command line, the tables that name their file render from it, and every number with a
unit in a notebook's prose is printed by that notebook, is in a results file it reads, or is in
docs/claims_ledger.json with its source. Each check returns what it found wrong (an empty list:
nothing), so a test can plant a stale number, a removed flag or a wrong cell and see it reported.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import shlex
from pathlib import Path
from unittest import mock

from minidflash.__main__ import COMMANDS, main as minidflash
from minidflash.paths import ROOT

RESULTS = ROOT / "data" / "results"
LEDGER = ROOT / "docs" / "claims_ledger.json"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "data" / "README.md"]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


# --------------------------------------------------------------------------------------------
# Commands: `python -m minidflash CMD ...` parsed by CMD's parser, nothing run
# --------------------------------------------------------------------------------------------

PLACEHOLDERS = ("FLAGS",)       # a recorded command's stand-in for each variant's own flags


class _Parsed(Exception):
    """Raised in place of running a command once its parser accepted the arguments."""


def parse_error(command: str) -> str | None:
    """None if today's command line parses ``command`` (a ``python -m minidflash ...`` or
    ``torchrun ... -m minidflash ...`` line), else argparse's message. Only the parser runs: the
    command's main is stopped the moment its ArgumentParser returns."""
    try:
        words = shlex.split(command, comments=False)
    except ValueError as e:
        return f"not a shell line ({e})"
    if "minidflash" not in words:
        return "no `-m minidflash` in it"
    argv = []
    for w in words[words.index("minidflash") + 1:]:
        if w.startswith("$"):                       # a shell variable: drop it and its option
            argv = argv[:-1] if argv and argv[-1].startswith("--") else argv
        elif w not in PLACEHOLDERS:
            argv.append(w)
    if not argv or argv[0] not in COMMANDS:
        return f"no command {argv[:1]}: use one of {', '.join(COMMANDS)}"
    if "..." in argv and _parse(argv):       # "..." for more options, or for an option's values
        return _parse([w for w in argv if w != "..."])
    return _parse(argv)


def _parse(argv: list[str]) -> str | None:
    parse = argparse.ArgumentParser.parse_known_args

    def parse_then_stop(self, args=None, namespace=None):
        known, extra = parse(self, args, namespace)
        if self.prog == f"python -m minidflash {argv[0]}":      # the command's own parser
            if extra:                               # what parse_args would refuse
                self.error(f"unrecognized arguments: {' '.join(extra)}")
            raise _Parsed
        return known, extra

    err = io.StringIO()
    with (mock.patch.object(argparse.ArgumentParser, "parse_known_args", parse_then_stop),
          contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO())):
        try:
            minidflash(argv)
        except _Parsed:
            return None
        except SystemExit:
            return err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else "exit"
    return "the command ran past its parser"


def _unwrap(text: str) -> str:
    """A command printed over several lines (a trailing backslash, or the next line indented
    four or more spaces, as textwrap prints it) as one line."""
    return re.sub(r"[ \t]*\\?\n[ \t]{4,}", " ", re.sub(r"[ \t]*\\\n[ \t]*", " ", text))


def commands_in(text: str) -> list[str]:
    """Each ``python -m minidflash CMD ...`` / ``torchrun ... -m minidflash CMD ...`` in a text,
    up to the end of its line, a backtick, a `;` or `&&`, a `#` comment or a table's `|`. A
    command named alone (``python -m minidflash answers``) names it, it is no command line."""
    text = _unwrap(re.sub(r"(?<!`)`[^`]+`(?!`)", lambda m: m.group(0).replace("\n", " "), text))
    found = []
    for m in re.finditer(r"(?:python -m|torchrun[^`\n|;]*?-m) minidflash +[\w-]+(?=[ `\n]|$)"
                         r"(?: [^`\n|;#&]*)?", text):
        command = " ".join(m.group(0).split())
        command = command if command.endswith("...") else command.rstrip(".,:)")
        if re.fullmatch(r".* minidflash [\w-]+(?: --help)?", command):
            continue
        found.append(command)
    return found


def results_commands(saved) -> list[str]:
    """The minidflash commands a results file records (``command``, ``commands``, or any other
    string of it that runs ``-m minidflash``)."""
    if isinstance(saved, dict):
        return [c for v in saved.values() for c in results_commands(v)]
    if isinstance(saved, list):
        return [c for v in saved for c in results_commands(v)]
    return commands_in(saved) if isinstance(saved, str) and "-m minidflash" in saved else []


def notebook_text(path: Path) -> tuple[str, str, list[str]]:
    """(markdown, saved outputs, code sources) of a notebook, each cell's text joined."""
    cells = json.loads(path.read_text())["cells"]
    md = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    outs, code = [], []
    for c in cells:
        if c["cell_type"] == "code":
            code.append("".join(c["source"]))
            for o in c.get("outputs", []):
                outs.append("".join(o.get("text") or o.get("data", {}).get("text/plain", "")))
    return md, "\n".join(outs), code


def bad_commands(text: str) -> list[tuple[str, str]]:
    """(command, why) for each command in ``text`` that today's command line does not parse."""
    return [(c, e) for c in commands_in(text) if (e := parse_error(c))]


# --------------------------------------------------------------------------------------------
# Tables that name their file: `<!-- numbers: module.function of FILE [and FILE] -->`
# --------------------------------------------------------------------------------------------

def tables(page_text: str) -> list[tuple[str, list[str], str]]:
    """(renderer, [file, ...], the table as written) after each ``numbers:`` comment."""
    out = []
    for m in re.finditer(r"<!-- numbers: ([\w.]+) of ([^>]*?)-->\n((?:\|[^\n]*\n?)+)", page_text):
        files = re.findall(r"(?:data/results/)?([\w./]+\.json)", m.group(2))
        out.append((m.group(1), files, m.group(3).rstrip("\n")))
    return out


def render_table(renderer: str, files: list[str]) -> str:
    """The table ``renderer`` (``module.function`` in minidflash.tools.measure) makes of the
    files: a function of results files by name, or step_profile.markdown of one file's dict."""
    import importlib
    module, function = renderer.rsplit(".", 1)
    fn = getattr(importlib.import_module(f"minidflash.tools.measure.{module}"), function)
    if renderer == "step_profile.markdown":
        return fn(json.loads((RESULTS / files[0]).read_text()))
    if renderer == "smollm2.speeds_markdown":               # {threads: file}
        return fn({"1": files[0], "2": files[1]})
    return fn(*files)


def bad_tables(page_text: str) -> list[tuple[str, str]]:
    """(file, the first line that differs) for each named table not what its files render."""
    bad = []
    for renderer, files, written in tables(page_text):
        rendered = render_table(renderer, files)
        if rendered != written:
            diff = next((f"{a!r} != rendered {b!r}" for a, b in zip(written.splitlines(),
                        rendered.splitlines()) if a != b), "rows differ in number")
            bad.append((" and ".join(files), diff))
    return bad


# --------------------------------------------------------------------------------------------
# Numbers with a unit in a notebook's prose: printed, in a file it reads, or in the ledger
# --------------------------------------------------------------------------------------------

NUM = r"\d+(?:,\d{3})*(?:\.\d+)?"
UNITS = {"x": r"x\b", "ms": r"ms\b", "tokens/s": r"(?:tokens|tok)/s\b", "%": "%"}
CLAIM = re.compile(rf"(?<![\w.^{{])({NUM})(?:\s*(?:-|–|to|and|/)\s*({NUM}))?\s*"
                   rf"({'|'.join(UNITS.values())})")
TAU_CLAIM = re.compile(rf"(?:\\tau\$?|\btau)\s+(?:of\s+|=\s*|is\s+)?(?:about\s+)?\$?({NUM})"
                       rf"(?:\s*(?:-|to|/)\s*({NUM}))?(?![\w.]*}})")
KEYS = {"x": ("speedup", "over", "ratio", "_x"), "ms": ("ms",), "tokens/s": ("tokens_per_s",),
        "%": ("",), "tau": ("tau",)}


def unit_of(suffix: str) -> str:
    return next(u for u, rx in UNITS.items() if re.fullmatch(rx, suffix))


def claims(markdown: str) -> list[tuple[str, str, str]]:
    """(number, unit, the words quoted) of every number with a unit (x, ms, tokens/s, %) or
    after tau in a notebook's prose; code spans, links and LaTeX exponents left out."""
    md = re.sub(r"`[^`]*`|\]\([^)]*\)|\^\{[^}]*\}", " ", markdown)
    out = []
    for m in CLAIM.finditer(md):
        out += [(n, unit_of(m.group(3)), m.group(0)) for n in m.group(1, 2) if n]
    for m in TAU_CLAIM.finditer(md):
        out += [(n, "tau", m.group(0)) for n in m.group(1, 2) if n]
    return out


def _values(o, unit: str, key: str = "", acc=None) -> list[float]:
    """Every number in a results file under a key that fits the unit (speedup, ms, ...)."""
    acc = [] if acc is None else acc
    if isinstance(o, dict):
        for k, v in o.items():
            _values(v, unit, k if any(w in k for w in KEYS[unit]) else key, acc)
    elif isinstance(o, list):
        for v in o:
            _values(v, unit, key, acc)
    elif isinstance(o, (int, float)) and not isinstance(o, bool) and key:
        acc.append(float(o) * (100 if unit == "%" and abs(o) <= 1 else 1))
    return acc


def _printed(outputs: str, unit: str) -> list[float]:
    """Numbers a notebook printed with that unit (for tau: on a line or table saying tau)."""
    if unit == "tau":
        blocks = [b for b in re.split(r"\n\s*\n", outputs) if "tau" in b]
        return [float(n.replace(",", "")) for b in blocks for n in re.findall(NUM, b)]
    if unit == "x":          # a line of speedups: its numbers (a gap between two, "0.19 apart")
        lines = [line for line in outputs.splitlines() if re.search(rf"{NUM}x\b", line)]
        return [float(n.replace(",", "")) for line in lines for n in re.findall(NUM, line)]
    return [float(m.group(1).replace(",", "")) for m in
            re.finditer(rf"({NUM})\s*(?:{UNITS[unit]})", outputs)]


def _matches(number: str, values) -> bool:
    x, places = float(number.replace(",", "")), len(number.partition(".")[2])
    return any(abs(round(v, places) - x) < 1e-9 for v in values)


def read_files(code: list[str], outputs: str) -> list[str]:
    """The results files a notebook reads: named in its code or in a provenance line it printed."""
    names = set(re.findall(r"([\w]+\.json)", "\n".join(code)))
    names |= set(re.findall(r"data/results/([\w./]+\.json)", outputs))
    return sorted(n for n in names if (RESULTS / n).exists())


def cited_files(markdown: str) -> list[str]:
    """The results files a paragraph names (``smollm2_lean_*.json`` globbed)."""
    return sorted({p.relative_to(RESULTS).as_posix() for pattern in
                   re.findall(r"([\w*]+\.json)", markdown) for p in RESULTS.glob(pattern)})


def ledger() -> list[dict]:
    return json.loads(LEDGER.read_text())["entries"]


def unsourced(name: str, cells: list[str], outputs: str, files: list[str], entries=None) -> list[str]:
    """The numbers with a unit in a notebook's markdown ``cells`` that neither its outputs, nor a
    results file it reads or the paragraph names, nor a ledger entry for the notebook hold."""
    entries = ledger() if entries is None else entries
    listed = {e["claim"] for e in entries if name in e["where"]}
    read = {f: json.loads((RESULTS / f).read_text()) for f in files}
    bad = []
    for cell in cells:
        saved = [*read.values(), *(json.loads((RESULTS / f).read_text()) for f in cited_files(cell))]
        for number, unit, quoted in claims(cell):
            if f"{number} {unit}" in listed or _matches(number, _printed(outputs, unit)):
                continue
            if any(_matches(number, _values(s, unit)) for s in saved):
                continue
            bad.append(f"{quoted!r} ({number} {unit})")
    return bad


# --------------------------------------------------------------------------------------------
# The tests
# --------------------------------------------------------------------------------------------

import pytest  # noqa: E402

RESULT_FILES = sorted(RESULTS.rglob("*.json"))
TABLE_PAGES = [ROOT / "README.md", ROOT / "docs" / "results.md"]


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("path", RESULT_FILES, ids=lambda p: p.relative_to(RESULTS).as_posix())
def test_every_recorded_command_parses(path):
    """A results file's command can be run again as recorded (argparse only: nothing runs)."""
    bad = [(c, e) for c in results_commands(json.loads(path.read_text())) if (e := parse_error(c))]
    assert not bad, f"{_name(path)} records commands today's command line refuses: {bad}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_command_a_notebook_shows_parses(path):
    md, outputs, _ = notebook_text(path)
    bad = bad_commands(md) + bad_commands(outputs)
    assert not bad, f"{_name(path)} (markdown or saved outputs) shows commands that do not parse: {bad}"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_command_a_page_shows_parses(page):
    bad = bad_commands(page.read_text())
    assert not bad, f"{_name(page)} shows commands that do not parse: {bad}"


@pytest.mark.parametrize("page", TABLE_PAGES, ids=_name)
def test_every_table_naming_its_file_is_what_the_file_renders(page):
    text = page.read_text()
    assert len(tables(text)) >= 2, f"{_name(page)}: no table names its file"
    assert text.count("<!-- numbers:") == len(tables(text)), (
        f"{_name(page)}: a `<!-- numbers: ... -->` comment that is not `module.function of FILE "
        "[and FILE]` right above its table")
    bad = bad_tables(text)
    assert not bad, f"{_name(page)}: tables not what their files render (re-render them): {bad}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_number_with_a_unit_in_a_notebook_is_sourced(path):
    cells = [("".join(c["source"])) for c in json.loads(path.read_text())["cells"]
             if c["cell_type"] == "markdown"]
    _, outputs, code = notebook_text(path)
    bad = unsourced(path.name, cells, outputs, read_files(code, outputs))
    assert not bad, (f"{path.name} quotes numbers no output prints and no results file it reads "
                     f"holds: {bad}; print them, name the file, or add them to "
                     f"docs/claims_ledger.json with their source")


def test_each_ledger_entry_has_a_source_and_is_quoted_where_it_says():
    names = {p.name: p for p in NOTEBOOKS}
    for e in ledger():
        assert e["source"] and e["what"] and e["where"], e
        number, unit = e["claim"].rsplit(" ", 1)
        for where in e["where"]:
            md = notebook_text(names[where])[0]
            assert (number, unit) in {(n, u) for n, u, _ in claims(md)}, (
                f"docs/claims_ledger.json: {e['claim']} is no longer quoted in {where}: drop it")


# --- each check goes red on a planted fault -------------------------------------------------

def test_a_stale_number_is_reported():
    path = ROOT / "notebooks" / "11_a_real_llm_on_your_cpu.ipynb"
    cells = [("".join(c["source"])) for c in json.loads(path.read_text())["cells"]
             if c["cell_type"] == "markdown"]
    _, outputs, code = notebook_text(path)
    files = read_files(code, outputs)
    assert not unsourced(path.name, cells, outputs, files)
    stale = [c.replace("1.89x and 1.98x on GSM8K", "1.89x and 2.31x on GSM8K") for c in cells]
    assert stale != cells
    assert unsourced(path.name, stale, outputs, files) == ["'2.31x' (2.31 x)"]
    assert unsourced(path.name, cells + ["a step of 973.1 ms, tau 9.87"], outputs, files) == [
        "'973.1 ms' (973.1 ms)", "'tau 9.87' (9.87 tau)"]


def test_a_removed_flag_is_reported():
    saved = json.loads((RESULTS / "bench.json").read_text())
    assert not [c for c in results_commands(saved) if parse_error(c)]
    saved["command"] = saved["command"].replace("--out", "--json")
    assert "unrecognized arguments: --json" in parse_error(results_commands(saved)[0])
    page = "Run `python -m minidflash budget curve --threads 1 --json curve.json` first."
    assert [e for _, e in bad_commands(page)] == [
        "python -m minidflash budget: error: unrecognized arguments: --json curve.json"]
    assert bad_commands("`python -m minidflash bench --n 4 --methods plain dflash`") == []


def test_a_wrong_table_cell_is_reported():
    readme = (ROOT / "README.md").read_text()
    assert not bad_tables(readme)
    wrong = readme.replace("| 2.65 / 2.84 |", "| 2.65 / 2.94 |")
    assert wrong != readme
    [(files, diff)] = bad_tables(wrong)
    assert "smollm2_lean_1thread.json" in files and "2.94" in diff

"""The README is a front door a newcomer can trust: short, its code runs, every path it names
exists, every command's options exist, and the provenance line under each table is what its
file says."""

import contextlib
import io
import json
import re

import pytest

from minidflash.__main__ import COMMANDS, main as minidflash
from minidflash.paths import ROOT
from minidflash.tools.measure.render import provenance

README = ROOT / "README.md"
PAGES = [README, ROOT / "docs" / "results.md"]
TEST_COMMAND = ("python -m pytest -q -n auto --dist loadscope tests notebooks --nbval "
                "--nbval-sanitize-with notebooks/nbval_sanitize.cfg")


def text(page) -> str:
    """A page without its HTML comments (notes to whoever edits the tables)."""
    return re.sub(r"<!--.*?-->", "", page.read_text(), flags=re.S)


def test_the_readme_is_short_and_names_the_test_command():
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move detail to docs/"
    assert f"pip install -r requirements.txt && {TEST_COMMAND}" in lines
    assert any(line.startswith("**") and "x faster" in line for line in lines[:8])   # the headline


def test_the_readme_python_runs(capsys):
    """The decode shown is the front door, max_new_tokens a keyword, and it runs."""
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    assert "speculative_generate(target, drafter, ids, max_new_tokens=" in code
    exec(compile(code, "README.md", "exec"), {})
    assert "tau " in capsys.readouterr().out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_path_named_exists(page):
    body = text(page)
    names = re.findall(r"`((?:data|docs|notebooks|minidflash|tests)/[^`\s*]+)`", body)
    names += [n for n in re.findall(r"\]\(([^)#\s]+)", body) if not n.startswith("http")]
    missing = [n for n in names if not (page.parent / n).exists() and not (ROOT / n).exists()]
    assert not missing, f"{page.name} names paths that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_option_exists(page):
    """Each `python -m minidflash CMD ... --flag` on the page: CMD exists and takes --flag."""
    body = re.sub(r"(?<!`)`[^`]+`(?!`)", lambda m: m.group(0).replace("\n", " "), text(page))  # spans whole
    commands = [c for c in re.findall(r"python -m minidflash ([^`\n]+)", body) if c[0] != "<"]
    assert commands, f"{page.name} shows no command"
    for command in commands:
        name, *rest = command.split()
        assert name in COMMANDS, f"{page.name}: `python -m minidflash {command}`: no {name}"
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
            minidflash([name, "--help"])
        for flag in (w for w in rest if w.startswith("--")):
            assert re.search(rf"{re.escape(flag)}\b", out.getvalue()), (
                f"{page.name}: `python -m minidflash {command}`: {name} has no {flag}")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_each_provenance_line_is_its_files(page):
    lines = re.findall(r"`(data/results/[\w.]+\.json)`: (machine [^<\n]+)", text(page))
    assert lines, f"{page.name} shows no provenance line"
    for path, line in lines:
        assert provenance(json.loads((ROOT / path).read_text())) == line.strip(), path


def test_the_lean_step_tables_are_their_files():
    """docs/results.md's split of a step and its tokens-per-second table are what their files
    render to (``step_profile.markdown``, ``smollm2.speeds_markdown``), not numbers typed in."""
    from minidflash.tools.measure import smollm2, step_profile
    body = (ROOT / "docs" / "results.md").read_text()
    split = json.loads((ROOT / "data/results/step_profile_smollm2_bfloat16.json").read_text())
    assert step_profile.markdown(split) in body
    assert smollm2.speeds_markdown({"1": "smollm2_lean_1thread.json",
                                    "2": "smollm2_lean_2threads.json"}) in body

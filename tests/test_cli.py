"""The commands speak one language: ``--threads``, ``--n``, ``--suites``, the dtypes and ``--out``
are spelled and read the same way in every one, and a bad value a new user would try is one
line from argparse (``prog: error: ...``, exit code 2), never a traceback."""

import argparse

import pytest

from minidflash.__main__ import COMMANDS, main
from minidflash.tools.common import DTYPES, count

OLD_SPELLINGS = ("--json", "--out-dir", "--suite")


class Parsed(Exception):
    """Raised in place of parsing: carries the command's parser."""


def parser_of(command: str, monkeypatch) -> argparse.ArgumentParser:
    def grab(self, args=None, namespace=None):
        raise Parsed(self)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", grab)
    with pytest.raises(Parsed) as caught:
        main([command])
    return caught.value.args[0]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_answers_help(command, capsys):
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0 and f"python -m minidflash {command}" in capsys.readouterr().out


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_spells_the_shared_options_one_way(command, monkeypatch):
    actions = {s: a for a in parser_of(command, monkeypatch)._actions for s in a.option_strings}
    assert not set(OLD_SPELLINGS) & set(actions), f"{command}: {set(OLD_SPELLINGS) & set(actions)}"
    for flag, a in actions.items():
        if flag.endswith("dtype"):
            assert tuple(a.choices) == DTYPES, (command, flag)
            assert "(default " in a.help and "auto:" in a.help, (command, flag)
    if "--threads" in actions:
        a = actions["--threads"]
        assert a.type is count and "(default " in a.help, command
    if "--n" in actions:
        assert actions["--n"].type is count, command
    if "--suites" in actions:
        assert actions["--suites"].nargs == "+", command


@pytest.mark.parametrize("argv, message", [
    (["demo", "--n", "0"], "argument --n: 0: give 1 or more"),
    (["demo", "--suites", "nope"], "--suites nope: no such suite in data/prompts; the suites are "
                                   "arithmetic, code, gsm8k, humaneval, math500, mtbench"),
    (["demo", "--suites", "arithmetic", "nope", "gone"], "--suites nope gone: no such suite"),
    (["bench", "--n", "0"], "argument --n: 0: give 1 or more"),
    (["bench", "--suites", "nope"], "--suites nope: no such suite"),
    (["bench", "--suites", "gsm8k", "--n", "500"],
     "--n 500: gsm8k's test part holds 90 prompts, fewer than the 500 asked for"),
    (["bench", "--split", "dev", "--n", "11"], "--n 11: arithmetic's dev part holds 10 prompts"),
    (["bench", "--threads", "0"], "argument --threads: 0: give 1 or more"),
    (["bench", "--threads", "1", "2"], "several thread counts only with --step-times"),
    (["bench", "--n", "ten"], "argument --n: invalid count value: 'ten'"),
    (["misses", "--n", "0"], "argument --n: 0: give 1 or more"),
    (["misses", "--suites", "nope"], "--suites nope: no such suite"),
    (["tau-curve", "s.pt", "--drafter", "d", "--n", "0"], "argument --n: 0: give 1 or more"),
    (["tau-curve", "s.pt", "--drafter", "d", "--suites", "nope"], "--suites nope: no such suite"),
    (["budget", "calibration", "--n", "0"], "argument --n: 0: give 1 or more"),
    (["budget", "calibration", "--suites", "nope"], "--suites nope: no such suite"),
    (["budget", "curve", "--threads", "1", "0"], "argument --threads: 0: give 1 or more"),
    (["llama-cpp", "--n", "0"], "argument --n: 0: give 1 or more"),
    (["llama-cpp", "--suites", "nope"], "--suites nope: no such suite"),
    (["llama-cpp", "--p-min", "1.5"], "every --p-min must be in [0, 1)"),
    (["ablations", "--n", "0"], "argument --n: 0: give 1 or more"),
    (["prompts", "--kind", "magpie", "--out", "x.jsonl"], "--kind magpie needs --n"),
    (["prompts", "--kind", "codeio", "--out", "x.jsonl", "--n", "0"], "argument --n: 0"),
    (["answers", "--out", "x", "--dtype", "float16"], "argument --dtype: invalid choice"),
    (["answers", "--out", "x", "--threads", "0"], "argument --threads: 0: give 1 or more"),
    (["train", "--threads", "0"], "argument --threads: 0: give 1 or more"),
    (["train", "--compute-dtype", "fp32"], "argument --compute-dtype: invalid choice"),
])
def test_a_bad_value_is_one_line_not_a_traceback(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"python -m minidflash {argv[0]}: error: ") and message in last, err
    assert "Traceback" not in err


def test_auto_is_resolved_to_a_dtype_name_on_the_model():
    """``--dtype auto`` (answers) and ``--feature-dtype`` / ``--compute-dtype auto`` (train) become
    float32 or bfloat16 before anything records them: fp32 for a model too small to gain."""
    import torch

    from minidflash.tools.common import resolved_dtype

    small = torch.nn.Linear(4, 4)
    assert resolved_dtype("auto", small) == "float32"
    assert resolved_dtype("bfloat16", small) == "bfloat16" and resolved_dtype("float32", small) == "float32"

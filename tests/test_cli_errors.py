"""A wrong value on any command is one line naming the flag and what it accepts, never a
traceback: argparse's own line for what the value alone decides (a range, a dtype, an --out that
cannot be written), and the same shape (``python -m minidflash <command>: error: ...``, exit
status 2) for what only the loaded models can refuse (a block size over the drafter's, a length
past the target's positions, --cost without a curve, a drafter folder that is not one), checked
before any long work. And every flag of every command says what it is for."""

import argparse
import subprocess
import sys
from dataclasses import fields

import pytest

from minidflash.__main__ import COMMANDS, main
from minidflash.paths import ROOT
from minidflash.train_config import TrainConfig
from minidflash.decoding_config import DecodingConfig
from minidflash.tools.flags import FLAG_HELP

FOLDER, FILE = "@folder", "@file"      # stand-ins for a folder and a file that exist (tmp_path)

CASES = [   # (command line, what its one line must name)
    # demo: parse-time
    ("demo --n 0", "--n: 0:"),
    ("demo --suites nope", "--suites nope"),
    ("demo --block-size 0", "--block-size: 0:"),
    ("demo --block-size x", "--block-size"),
    ("demo --p-min 1.5", "--p-min: 1.5:"),
    ("demo --p-min nan", "--p-min: nan:"),
    ("demo --trust 1", "--trust: 1:"),
    ("demo --tree 15", "--tree"),
    ("demo --tree 500,8", "--tree"),
    ("demo --tree 0,8", "--tree"),
    ("demo --temperature -1", "--temperature: -1:"),
    ("demo --temperature inf", "--temperature: inf:"),
    ("demo --max-new-tokens 0", "--max-new-tokens: 0:"),
    ("demo --threads 0", "--threads: 0:"),
    ("demo --dtype fp16", "--dtype: invalid choice: 'fp16'"),
    ("demo --record-steps", "--record-steps"),
    # demo: what the loaded models refuse, before any decode
    ("demo --n 1 --block-size 99", "--block-size 99"),
    ("demo --n 1 --max-new-tokens 100000", "--max-new-tokens 100000"),
    ("demo --n 1 --drafter /nonexistent/drafter", "--drafter /nonexistent/drafter"),
    ("demo --n 1 --drafter data/target", "--drafter data/target"),
    ("demo --n 1 --target /nonexistent/target", "--target /nonexistent/target"),
    ("demo --n 1 --cost", "--cost"),
    ("demo --n 1 --trust 0.5", "--trust"),
    ("demo --n 1 --tree 15,8 --p-min 0.3", "--p-min 0.3"),
    # bench
    ("bench --block-sizes 1", "--block-sizes"),
    ("bench --block-size 99 --n 1", "--block-sizes 99"),
    ("bench --n 1 --max-new-tokens 100000", "--max-new-tokens 100000"),
    ("bench --n 1 --cost", "--cost"),
    ("bench --out @folder", "--out"),
    ("bench --out @file/x.json", "--out"),
    ("bench --split nope", "--split: invalid choice: 'nope'"),
    ("bench --step-times --p-min 0.3", "--p-min"),
    ("bench --temperature abc", "--temperature"),
    ("bench --batch-sizes 0", "--batch-sizes"),
    ("bench --block-sizes 2 x", "--block-sizes"),
    # misses
    ("misses --n 1 --block-size 99", "--block-size 99"),
    ("misses --out @folder", "--out"),
    ("misses --p-min 2", "--p-min: 2:"),
    ("misses --tree 15,8", "--tree"),
    # tau-curve
    ("tau-curve missing.pt --drafter data/drafter --suites arithmetic", "missing.pt"),
    ("tau-curve s.pt --drafter d --max-new-tokens 0", "--max-new-tokens"),
    ("tau-curve s.pt --drafter d --out @folder", "--out"),
    # budget
    ("budget cost --drafter data/drafter", "--from"),
    ("budget cost --from @file --drafter data/drafter", "--from"),
    ("budget cost --from nope.json --drafter data/drafter", "--from nope.json"),
    ("budget cost --trust-weight 0.5", "--trust-weight"),
    ("budget cost --tree 15 8", "--tree"),
    ("budget curve --tree 15,8", "--tree"),
    ("budget curve --max-k 1", "--max-k: 1:"),
    ("budget curve --context 0", "--context"),
    ("budget calibration --trust 0.5", "--trust"),
    ("budget calibration --n 1 --suites arithmetic --block-size 99", "--block-size 99"),
    ("budget what", "what"),
    # llama-cpp, parity (no llama.cpp, no reference: refused before either is looked for)
    ("llama-cpp --max-new-tokens 1", "--max-new-tokens"),
    ("llama-cpp --n-max 0", "--n-max"),
    ("llama-cpp --out @folder", "--out"),
    ("parity --reference /nonexistent/dflash", "--reference"),
    ("parity --reference @folder --fit-steps -1", "--fit-steps"),
    ("parity --reference @folder --out @folder", "--out"),
    # answers, prompts, suites (nothing loaded)
    ("answers --out @file", "--out"),
    ("answers --out x --n-math -1", "--n-math"),
    ("answers --out x --temperature -1", "--temperature"),
    ("answers --out x --max-new-tokens 0", "--max-new-tokens"),
    ("answers --out x --engine llama-cpp --temperature 0.5", "--temperature"),
    ("answers --out x --results @folder", "--results"),
    ("prompts --kind magpie --out @folder --n 2", "--out"),
    ("prompts --kind nope --out x.jsonl", "--kind"),
    ("prompts --kind magpie --out x.jsonl --n 2 --temperature 0", "--temperature"),
    ("suites --wheels w --out @file", "--out"),
    # train: every TrainConfig field checked at parse time, before any data is made
    ("train --steps -1", "--steps: -1:"),
    ("train --num-layers 0", "--num-layers"),
    ("train --lr 0", "--lr: 0:"),
    ("train --warmup-ratio 2", "--warmup-ratio: 2:"),
    ("train --block-size 1", "--block-size"),
    ("train --target-layer-ids 1,x", "--target-layer-ids"),
    ("train --gamma -1", "--gamma"),
    ("train --eval-every 0", "--eval-every"),
    ("train --random-anchors false", "false"),
    ("train --out @file", "--out"),
    ("train --n-arithmetic -5", "--n-arithmetic"),
    ("train --regen-shards 0", "--regen-shards"),
    # train-target, eval-target, ablations, step-profile, bench-kernel
    ("train-target --steps -1", "--steps"),
    ("train-target --lr 0", "--lr"),
    ("train-target --out @file", "--out"),
    ("train-target --eval", "--eval"),
    ("eval-target --n 0", "--n"),
    ("eval-target --out x", "--out"),
    ("eval-target --n 1 --max-new-tokens 100000", "--max-new-tokens 100000"),
    ("ablations --steps 0", "--steps"),
    ("ablations --lr -1", "--lr"),
    ("step-profile --tokens 1", "--tokens"),
    ("step-profile --context 0", "--context"),
    ("bench-kernel --out @folder", "--out"),
    # --out opened before the work: a path whose folder cannot take a file (a virtual file
    # system: permissions say yes, to root above all), or one that is not a regular file
    ("misses --n 1 --out /proc/minidflash.json", "--out: /proc/minidflash.json: no file can be"),
    ("step-profile --out /proc/minidflash.json", "--out: /proc/minidflash.json"),
    ("prompts --kind codeio --n 2 --out /proc/x.jsonl", "--out: /proc/x.jsonl"),
    ("bench --n 1 --out /proc/minidflash.json", "--out: /proc/minidflash.json"),
    ("tau-curve s.pt --drafter d --out /proc/x.json", "--out: /proc/x.json"),
    ("budget curve --out /proc/x.json", "--out: /proc/x.json"),
    ("budget calibration --out /proc/sub/x.json", "--out: /proc/sub/x.json"),
    ("answers --out /proc/answers", "--out: /proc/answers"),
    ("answers --out x --results /proc/r.json", "--results: /proc/r.json"),
    ("train --out /proc/drafter", "--out: /proc/drafter"),
    ("train-target --out /proc/target", "--out: /proc/target"),
    ("ablations --out /proc/x.json", "--out: /proc/x.json"),
    ("llama-cpp --out /proc/x.json", "--out: /proc/x.json"),
    ("bench-kernel --out /proc/x.json", "--out: /proc/x.json"),
    ("parity --reference @folder --out /proc/x.json", "--out: /proc/x.json"),
    ("suites --wheels w --out /proc/prompts", "--out: /proc/prompts"),
    ("misses --out @fifo", "--out: @fifo is not a regular file"),
    ("bench --out @fifo", "--out: @fifo is not a regular file"),
    ("step-profile --out @fifo", "--out: @fifo is not a regular file"),
    ("prompts --kind codeio --n 2 --out @fifo", "--out: @fifo is not a regular file"),
    # suites --wheels: a folder, or one that can be made
    ("suites --wheels @file", "--wheels: '@file' is a file"),
    ("suites --wheels @file/sub", "--wheels: @file/sub: @file is a file"),
    # tau-curve: the snapshots read before any model, each named
    ("tau-curve @garbage.pt --drafter data/drafter --suites arithmetic",
     "snapshot @garbage.pt: torch.load cannot read it"),
    ("tau-curve @file --drafter data/drafter --suites arithmetic", "snapshot @file:"),
    ("tau-curve @weights.pt --drafter data/drafter --suites arithmetic",
     "snapshot @weights.pt is not a trainer checkpoint"),
    ("tau-curve @weights.pt --drafter data/drafter --suites arithmetic --extend --out @file",
     "--out @file: not a tau curve"),
    ("tau-curve @weights.pt --drafter data/drafter --extend --out @garbage.pt",
     "@garbage.pt is not valid JSON"),
    # budget: --device, and cost's curve files and folders
    ("budget curve --device nope", "--device: 'nope' is not a device"),
    ("budget curve --shape qwen3-8b --device nope", "--device: 'nope'"),
    ("budget curve --shape qwen3-8b --device meta", "--device: 'meta'"),
    ("budget curve --shape qwen3-8b --device cuda:99", "--device: 'cuda:99'"),
    ("budget calibration --device cpu:x", "--device: 'cpu:x'"),
    ("budget cost --from @threads_list --drafter @drafter", '--from @threads_list: "threads" is []'),
    ("budget cost --from @verify_zero --drafter @drafter",
     "--from @verify_zero: threads['1'].verify_ms[0] is 0"),
    ("budget cost --from @steps_text --drafter @drafter",
     "--from @steps_text: threads['1'].in_decode_steps[1] is '1.5'"),
    ("budget cost --from @draft_nan --drafter @drafter", "--from @draft_nan: threads['1'].draft_ms is nan"),
    ("budget cost --from @garbage.pt --drafter @drafter", "--from @garbage.pt: @garbage.pt is not valid"),
    ("budget cost --from @curve --drafter @target", "--drafter @target: @target is not a drafter folder"),
    ("budget cost --from @curve --drafter @ar", "--drafter @ar: @ar is an AR drafter's folder"),
    ("budget cost --from @curve --drafter @folder", "--drafter @folder: @folder is not a drafter"),
    ("budget cost --from @curve --drafter @cut --tree 15,8", "@cut/decoding.json holds p_min 0.3"),
    ("budget cost --from @curve --drafter @broken", "@broken/decoding.json: draft cost must be a finite"),
    # train: the layers read, against the target's, before any data is made
    ("train --target-layer-ids 99", "--target-layer-ids 99: the target has 6 layers"),
    ("train --target-layer-ids 1,2,6", "--target-layer-ids 1,2,6: the target has 6 layers"),
    ("train --target-layer-ids 1,1,2", "--target-layer-ids: 1,1,2: names layers [1] more than once"),
    ("train --target-layer-ids 0,7,1", "--target-layer-ids 0,7,1: the target has 6 layers"),
    # ablations, answers
    ("ablations --only nothing_matches", "--only nothing_matches: no variant's name"),
    ("ablations --only layer nope", "--only nope: no variant's name"),
    ("ablations --only", "--only (nothing)"),
    ("ablations --out @garbage.pt", "--out @garbage.pt: @garbage.pt is not valid JSON"),
    ("ablations --out @file", "--out @file: not an ablations file"),
    ("answers --out x --coverage -1", "--coverage: -1: give 1 or more"),
    ("answers --out x --coverage 0", "--coverage: 0: give 1 or more"),
    ("answers --out x --coverage abc", "--coverage: 'abc' is not a whole number"),
    ("answers --out x --layer-ids 1,x", "--layer-ids: '1,x'"),
    ("answers --out x --layer-ids 1,1", "--layer-ids: '1,1'"),
    ("answers --out x --prompts /nonexistent.jsonl", "--prompts: /nonexistent.jsonl: no such file"),
    ("answers --out x --prompts @folder", "--prompts: @folder: no such file (a folder)"),
    ("train --init-drafter /nonexistent/drafter", "--init-drafter /nonexistent/drafter: No such"),
    ("train --init-drafter @file", "--init-drafter @file: '@file' is a file"),
    ("llama-cpp --gguf-dir @file", "--gguf-dir: '@file' is a file"),
    ("llama-cpp --gguf-dir /proc/gguf", "--gguf-dir: /proc/gguf: no file can be created"),
    ("bench --methods nope --n 1", "--methods nope: unknown method 'nope'"),
    ("bench --methods dflash:x --n 1", "--methods dflash:x: 'dflash:x' is not a decoding"),
]

CURVE = {"in_decode_steps": [1.0, 1.5], "verify_ms": [10.0, 15.0], "draft_ms": 2.0}
FILES = {   # stand-ins for files that exist (tmp_path), longest name first when replaced
    "@threads_list": {"threads": []},
    "@verify_zero": {"threads": {"1": {**CURVE, "verify_ms": [0.0, 15.0]}}},
    "@steps_text": {"threads": {"1": {**CURVE, "in_decode_steps": [1.0, "1.5"]}}},
    "@draft_nan": {"threads": {"1": {**CURVE, "draft_ms": float("nan")}}},
    "@curve": {"threads": {"1": CURVE}},
}


def stand_ins(tmp_path) -> dict:
    """{stand-in: the path it stands for}: a folder, files, a garbage .pt, a dict of weights
    saved as a .pt, a pipe, curve files, and copies of the shipped drafter (one whose
    decoding.json holds a cut, one whose holds a NaN cost), target and AR drafter folders."""
    import json
    import os
    import shutil

    import torch

    from minidflash.paths import TINY_AR_DRAFTER_DIR, TINY_DRAFTER_DIR, TINY_TARGET_DIR

    (tmp_path / "f").write_text("{}")
    (tmp_path / "g.pt").write_bytes(bytes(range(256)) * 3)
    torch.save({"weights": torch.zeros(1)}, tmp_path / "w.pt")
    os.mkfifo(tmp_path / "fifo")
    out = {FOLDER: tmp_path, FILE: tmp_path / "f", "@garbage.pt": tmp_path / "g.pt",
           "@weights.pt": tmp_path / "w.pt", "@fifo": tmp_path / "fifo"}
    for name, content in FILES.items():
        out[name] = tmp_path / f"{name[1:]}.json"
        out[name].write_text(json.dumps(content))
    for name, src, decoding in (("@drafter", TINY_DRAFTER_DIR, None),
                                ("@cut", TINY_DRAFTER_DIR, '{"p_min": 0.3}'),
                                ("@broken", TINY_DRAFTER_DIR,
                                 '{"cost": {"verify": [1.0, 2.0], "draft": NaN}}'),
                                ("@target", TINY_TARGET_DIR, None),
                                ("@ar", TINY_AR_DRAFTER_DIR, None)):
        out[name] = tmp_path / name[1:]
        out[name].mkdir()
        shutil.copy(src / "config.json", out[name] / "config.json")
        if decoding:
            (out[name] / "decoding.json").write_text(decoding)
    return out


def swap(text: str, paths: dict) -> str:
    for name in sorted(paths, key=len, reverse=True):
        text = text.replace(name, str(paths[name]))
    return text


def one_line(err: str) -> list[str]:
    """What stderr says is wrong: its lines that mention an error, an exception or a file of a
    traceback. argparse's usage block is not one of them, nor a progress bar or a status line
    (``bench: the target in float32``); the wrong value must be the only one, and the last line."""
    lines = [line for line in err.splitlines() if line.strip()]
    said = [line for line in lines if any(w in line for w in ("rror", "Exception", 'File "'))]
    assert not said or said[-1] == lines[-1], err
    return said


@pytest.mark.parametrize("line, named", CASES, ids=[c[0] for c in CASES])
def test_a_wrong_value_is_one_line_naming_the_flag(line, named, tmp_path, capsys, monkeypatch):
    """The one line names the flag, and the bad value or file where there is one."""
    monkeypatch.chdir(ROOT)
    paths = stand_ins(tmp_path)
    argv = [swap(w, paths) for w in line.split()]
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    assert "Traceback" not in err
    rest = one_line(err)
    assert len(rest) == 1, err
    assert rest[0].startswith(f"python -m minidflash {argv[0]}: error: "), err
    assert swap(named, paths) in rest[0], err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before      # nothing written


def test_enough_command_lines_are_tried_across_the_commands():
    assert len(CASES) >= 155 and len({c[0] for c in CASES}) == len(CASES)
    decoding = {"demo", "bench", "misses", "tau-curve", "budget", "llama-cpp", "parity", "answers",
                "eval-target"}
    assert decoding <= {line.split()[0] for line, _ in CASES}


def test_no_arguments_lists_the_commands_one_line_each(capsys):
    for argv in ([], ["--help"]):
        main(argv)
        out = capsys.readouterr().out
        for command in COMMANDS:
            assert sum(line.split()[:1] == [command] for line in out.splitlines()) == 1, command
        assert len(out.splitlines()) <= len(COMMANDS) + 5
    with pytest.raises(SystemExit) as e:
        main(["nope"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and "'nope'" in err


def test_a_bug_keeps_its_traceback(monkeypatch):
    """The last net in __main__ turns a ValueError into one line; another exception is a bug
    and is raised as it is."""
    from minidflash.tools.measure import demo

    def broken(argv=None):
        raise KeyError("a bug")
    monkeypatch.setattr(demo, "main", broken)
    with pytest.raises(KeyError):
        main(["demo"])


class Parsed(Exception):
    """Raised in place of parsing: carries the command's parser."""


def parser_of(command, monkeypatch):
    def grab(self, args=None, namespace=None):
        raise Parsed(self)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", grab)
    with pytest.raises(Parsed) as caught:
        main([command])
    monkeypatch.undo()
    return caught.value.args[0]


def test_every_flag_of_every_command_has_help(monkeypatch, capsys):
    counted = 0
    for command in COMMANDS:
        parser = parser_of(command, monkeypatch)
        for a in parser._actions:
            if a.help == argparse.SUPPRESS or "-h" in a.option_strings:
                continue
            assert a.help and a.help.strip(), f"{command}: {a.option_strings or a.dest} has no help"
            counted += 1
        with pytest.raises(SystemExit):
            main([command, "--help"])
        shown = capsys.readouterr().out
        for a in parser._actions:
            for flag in a.option_strings:
                assert flag in shown, (command, flag)
    assert counted > 200, counted


def test_the_flags_come_from_the_configs_fields():
    """One help per DecodingConfig field (its flag on every command that decodes), and every
    TrainConfig field with its help and what it accepts."""
    assert list(FLAG_HELP) == [f.name for f in fields(DecodingConfig) if f.name != "stop_token_ids"]
    for f in fields(TrainConfig):
        assert f.metadata["help"] and f.metadata["accepts"], f.name


@pytest.mark.parametrize("argv", [
    ["bench", "--block-size", "99", "--n", "1"],
    ["train", "--steps", "-1"],
])
def test_from_a_shell_a_wrong_value_is_one_line(argv):
    run = subprocess.run([sys.executable, "-m", "minidflash", *argv], capture_output=True,
                         text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert len(one_line(run.stderr)) == 1, run.stderr

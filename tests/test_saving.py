"""Saving loses nothing: each file is written atomically into its folder (files.py), every other
file there is left alone, and a save that fails or is killed half-way leaves the old files
whole and no temporary behind."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from minidflash import files
from minidflash.paths import TINY_DRAFTER_DIR
from minidflash.checkpoints import DECODING_FILE, DRAFT_VOCAB_FILE, load_drafter, save_drafter
from minidflash.files import save_figure, save_into, write_json, write_text, write_with
from minidflash.decoding_config import DecodingConfig, decoding_of, set_decoding
from minidflash.tools import common
from tests.helpers import random_drafter, tiny_target

OWNED = {"config.json", "model.safetensors", DRAFT_VOCAB_FILE, DECODING_FILE}


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under folder (hidden ones too) by relative path -> its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def temporaries(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob("*") if ".tmp" in p.name]


def same_weights(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.fixture(scope="module")
def drafters():
    """Two different drafters for one tiny target: the old save and the new one."""
    target = tiny_target(0)
    return random_drafter(target, 0), random_drafter(target, 1)


def test_saving_into_a_folder_leaves_its_other_files(tmp_path, drafters):
    old, new = drafters
    folder = tmp_path / "d"
    (folder / "sub").mkdir(parents=True)
    (folder / "notes.txt").write_text("what this drafter is for\n")
    (folder / "sub" / "data.csv").write_bytes(b"a,b\n1,2\n")
    (folder / "config.json.bak").write_text("{}")
    others = snapshot(folder)
    for d in (old, new):                                  # into a new folder, then over a save
        save_drafter(d, folder)
        after = snapshot(folder)
        assert {k: after[k] for k in others} == others
        assert set(after) == set(others) | {"config.json", "model.safetensors"}
        assert same_weights(load_drafter(folder), d)


def test_saving_over_the_shipped_drafter_keeps_its_records(tmp_path, drafters):
    folder = tmp_path / "drafter"
    shutil.copytree(TINY_DRAFTER_DIR, folder)
    before = snapshot(folder)
    assert {"training.json", "loss.png", "expected_tau.json"} <= set(before)
    save_drafter(drafters[1], folder)
    after = snapshot(folder)
    kept = {k for k in before if k not in OWNED}
    assert {k: after[k] for k in kept} == {k: before[k] for k in kept}
    assert set(after) == set(before) and not temporaries(folder)
    assert same_weights(load_drafter(folder), drafters[1])


def half_then_fail(write):
    """A writer that writes the real bytes, cuts them in half, then fails (a full disk)."""
    def failing(*args, **kwargs):
        write(*args, **kwargs)
        path = Path(args[1] if write.__name__ == "save_file" else args[0])
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        raise OSError(28, "No space left on device")
    return failing


@pytest.mark.parametrize("fails", ["model.safetensors", DRAFT_VOCAB_FILE, "config.json"])
def test_a_save_that_fails_half_way_leaves_the_old_drafter(tmp_path, drafters, monkeypatch,
                                                           fails):
    old, new = drafters
    folder = tmp_path / "d"
    old.set_draft_vocab([4, 5, 6])
    try:
        save_drafter(old, folder)
    finally:
        old.set_draft_vocab(None)
    (folder / "notes.txt").write_text("kept\n")
    before = snapshot(folder)
    new.set_draft_vocab([7, 8])
    if fails == "model.safetensors":
        import safetensors.torch
        monkeypatch.setattr(safetensors.torch, "save_file",
                            half_then_fail(safetensors.torch.save_file))
    else:
        real = Path.write_text

        def write_text_(self, text, *args, **kwargs):
            if self.name == fails and self.parent.name == "new":     # the save's new file
                return half_then_fail(real)(self, text, *args, **kwargs)
            return real(self, text, *args, **kwargs)
        monkeypatch.setattr(Path, "write_text", write_text_)
    try:
        with pytest.raises(OSError, match="No space left"):
            save_drafter(new, folder)
    finally:
        new.set_draft_vocab(None)
        monkeypatch.undo()
    assert snapshot(folder) == before                    # byte for byte, and no temporary
    back = load_drafter(folder)
    assert same_weights(back, old) and back.draft_vocab.tolist() == [4, 5, 6]


@pytest.mark.parametrize("cut_at", [1, 2, 3, 4])
def test_a_save_cut_between_its_renames_is_undone(tmp_path, drafters, monkeypatch, cut_at):
    """A rename into the folder that fails (the cut_at-th: config.json aside, the weights aside,
    the new weights in, the new config in) or is interrupted (Ctrl-C) puts back what the renames
    before it moved: the old drafter, byte for byte, and nothing hidden left."""
    old, new = drafters
    folder = tmp_path / "d"
    save_drafter(old, folder)
    (folder / "notes.txt").write_text("kept\n")
    before = snapshot(folder)
    real, calls = os.replace, []

    def cut(src, dst):
        if Path(dst).name != files.JOURNAL:                # the renames of the files themselves
            calls.append((Path(src).name, Path(dst).name))
            if len(calls) == cut_at:
                raise KeyboardInterrupt if cut_at % 2 else OSError(5, "Input/output error")
        real(src, dst)
    monkeypatch.setattr(files.os, "replace", cut)
    with pytest.raises((KeyboardInterrupt, OSError)):
        save_drafter(new, folder)
    monkeypatch.undo()
    assert calls[0] == ("config.json", "config.json")      # config.json goes aside first
    assert snapshot(folder) == before
    assert same_weights(load_drafter(folder), old)
    save_drafter(new, folder)
    assert same_weights(load_drafter(folder), new) and not hidden(folder)


def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("side", [DECODING_FILE, DRAFT_VOCAB_FILE, "model.safetensors"])
def test_a_folder_where_a_saved_file_goes_is_refused_before_anything_is_written(tmp_path,
                                                                               drafters, side):
    """The issue's case: a decoding.json (draft_vocab.json, ...) that is a folder made a rename
    fail half-way. It is refused before anything is written, naming it; the folder, the
    drafter in it and the folder's files are as they were."""
    old, new = drafters
    folder = tmp_path / "d"
    save_drafter(old, folder)
    (folder / side).unlink(missing_ok=True)
    (folder / side / "inside").mkdir(parents=True)
    (folder / side / "inside" / "x.txt").write_text("mine")
    before = snapshot(folder)
    new.set_draft_vocab([7, 8])
    set_decoding(new, DecodingConfig(p_min=0.25))
    try:
        with pytest.raises(IsADirectoryError, match=f"{side} is a folder"):
            save_drafter(new, folder)
    finally:
        new.set_draft_vocab(None)
        set_decoding(new, None)
    assert snapshot(folder) == before and not hidden(folder)
    if side != "model.safetensors":
        assert same_weights(load_drafter(folder), old)


def test_a_folder_named_like_a_side_file_the_new_drafter_has_not_is_left_alone(tmp_path,
                                                                              drafters):
    """A stale draft_vocab.json is removed by a save without one; a folder of that name is not
    the save's to remove (and the loader does not read it)."""
    old, new = drafters
    folder = tmp_path / "d"
    (folder / DRAFT_VOCAB_FILE).mkdir(parents=True)
    (folder / DRAFT_VOCAB_FILE / "x.txt").write_text("mine")
    save_drafter(new, folder)
    assert (folder / DRAFT_VOCAB_FILE / "x.txt").read_text() == "mine" and not hidden(folder)
    back = load_drafter(folder)
    assert same_weights(back, new) and back.draft_vocab is None


def test_recover_leaves_what_is_not_a_cut_save_alone(tmp_path):
    """recover() is called first by every loader: a hub id, a missing folder, a file, a folder
    without a journal, something that is no path at all: nothing done, nothing said. A journal
    it cannot read is refused, naming it."""
    (tmp_path / "a.txt").write_text("x")
    for thing in ("z-lab/Qwen3-8B-DFlash-b16", tmp_path / "missing", tmp_path / "a.txt",
                  tmp_path, 3, None, "~nobody-at-all/x"):
        assert files.recover(thing) is None
    assert snapshot(tmp_path) == {"a.txt": b"x"}
    (tmp_path / ".minidflash-save.json.0a1b.tmp").write_text("{")  # a cut journal write
    (tmp_path / ".minidflash-save.0a1b" / "new").mkdir(parents=True)   # staging, no journal
    (tmp_path / ".minidflash-save.0a1b" / "new" / "config.json").write_text("{}")
    (tmp_path / ".minidflash-save.2c3d" / "old").mkdir(parents=True)   # with an old file in it
    (tmp_path / ".minidflash-save.2c3d" / "old" / "config.json").write_text("old")
    with pytest.warns(files.InterruptedSave, match=r"\.minidflash-save\.2c3d .*old files"):
        files.recover(tmp_path)
    assert sorted(snapshot(tmp_path)) == [".minidflash-save.2c3d/old/config.json", "a.txt"]
    shutil.rmtree(tmp_path / ".minidflash-save.2c3d")
    (tmp_path / files.JOURNAL).write_text('{"id": "../x", "state": "renaming", "ops": []}')
    with pytest.raises(ValueError, match=r"\.minidflash-save\.json is not a save journal"):
        files.recover(tmp_path)
    with pytest.raises(ValueError, match="not a save journal"):
        load_drafter(tmp_path)


KILLED_WRITER = """
import sys, time
from minidflash.files import write_together
def slow(tmp):
    with open(tmp, "wb") as f:
        f.write(b"x" * 100_000)
        f.flush()
        time.sleep(60)
write_together(sys.argv[1], {"model.safetensors": slow, "config.json": lambda t: t.write_text("{}")})
"""


def test_a_save_killed_by_sigkill_leaves_the_old_drafter(tmp_path, drafters):
    """A real kill (SIGKILL, nothing can clean up) of a slow writer while the weights are
    written (the real save_drafter killed at 50 random moments: tests/test_save_cuts.py): the old
    files are whole; what is left is hidden (the journal, the staging folder), and load_drafter
    removes it, says so and loads the old drafter. (The child imports files.py only: no torch,
    well under a second.)"""
    old, new = drafters
    folder = tmp_path / "d"
    save_drafter(old, folder)
    before = snapshot(folder)
    child = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(folder)],
                             cwd=Path(__file__).resolve().parent.parent)
    try:
        deadline = time.time() + 30
        while not any(p.stat().st_size >= 100_000
                      for p in folder.glob(".minidflash-save.*/new/model.safetensors")):
            assert child.poll() is None and time.time() < deadline, "the writer never started"
            time.sleep(0.02)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    staging = [p for p in folder.iterdir() if p.is_dir() and p.name.startswith(".minidflash-save.")]
    assert len(staging) == 1 and hidden(folder) == sorted([files.JOURNAL, staging[0].name])
    assert {k: v for k, v in snapshot(folder).items() if k in before} == before
    with pytest.warns(files.InterruptedSave, match="cut while writing its new files"):
        back = load_drafter(folder)
    assert same_weights(back, old) and snapshot(folder) == before
    save_drafter(new, folder)
    assert set(snapshot(folder)) == set(before) and same_weights(load_drafter(folder), new)


def test_save_drafter_removes_only_its_own_stale_files(tmp_path, drafters):
    """draft_vocab.json and decoding.json belong to the drafter saved there: one that has none
    removes them (they would be read with its weights); files of other names stay."""
    old, new = drafters
    folder = tmp_path / "d"
    old.set_draft_vocab([4, 5, 6])
    set_decoding(old, DecodingConfig(p_min=0.3))
    try:
        save_drafter(old, folder)
    finally:
        old.set_draft_vocab(None)
        set_decoding(old, None)
    assert {DRAFT_VOCAB_FILE, DECODING_FILE} <= set(snapshot(folder))
    for name in ("draft_vocab.json.bak", "decoding.old.json", "training.json"):
        (folder / name).write_text("{}")
    save_drafter(new, folder)
    assert set(snapshot(folder)) == {"config.json", "model.safetensors", "draft_vocab.json.bak",
                                     "decoding.old.json", "training.json"}
    back = load_drafter(folder)
    assert back.draft_vocab is None and decoding_of(back) == (DecodingConfig(), None)
    assert same_weights(back, new)


def test_the_ar_drafter_saves_beside_other_files(tmp_path):
    from minidflash.ar_drafter import ARDrafter, load_ar_drafter, make_ar_config
    target = tiny_target(0)
    d = ARDrafter(make_ar_config(target.config)).eval()
    (tmp_path / "ar").mkdir()
    (tmp_path / "ar" / "training.json").write_text("{}")
    d.save_pretrained(tmp_path / "ar")
    assert set(snapshot(tmp_path / "ar")) == {"config.json", "model.safetensors", "training.json"}
    assert same_weights(load_ar_drafter(tmp_path / "ar"), d)


def plot(results, path):
    from matplotlib.figure import Figure
    fig = Figure(figsize=(2, 2))
    fig.subplots().plot(results["x"])
    save_figure(fig, path, dpi=50)


def broken_plot(results, path):
    write_with(path, half_then_fail(lambda tmp: tmp.write_bytes(b"\x89PNG half a figure")))


def test_results_are_written_beside_other_files_and_a_failed_plot_loses_nothing(tmp_path):
    """common.write: the JSON and its PNG, each atomically, other files untouched. A plot that
    fails raises (saying the results are written) after the JSON: the measurement is kept, the
    old PNG is whole, no temporary is left."""
    (tmp_path / "notes.txt").write_text("kept\n")
    path = tmp_path / "run.json"
    common.write({"x": [1, 2, 3]}, str(path), plot, dtype="float32", drafters=[], load="shared")
    png = (tmp_path / "run.png").read_bytes()
    assert png.startswith(b"\x89PNG") and json.loads(path.read_text())["x"] == [1, 2, 3]
    with pytest.raises(OSError) as err:
        common.write({"x": [4]}, str(path), broken_plot, dtype="float32", drafters=[],
                     load="shared")
    assert any("results are written to" in note for note in err.value.__notes__)
    assert json.loads(path.read_text())["x"] == [4]
    assert (tmp_path / "run.png").read_bytes() == png
    assert set(snapshot(tmp_path)) == {"notes.txt", "run.json", "run.png"}
    common.write_jsonl([{"a": 1}, {"b": 2}], tmp_path / "rows.jsonl")
    assert common.read_jsonl(tmp_path / "rows.jsonl") == [{"a": 1}, {"b": 2}]
    assert set(snapshot(tmp_path)) == {"notes.txt", "run.json", "run.png", "rows.jsonl"}


def test_the_helpers_write_atomically_and_refuse_a_folder(tmp_path):
    (tmp_path / "a.json").write_text("old")
    with pytest.raises(OSError):
        write_with(tmp_path / "a.json", half_then_fail(lambda tmp: tmp.write_text("new" * 100)))
    assert (tmp_path / "a.json").read_text() == "old" and set(snapshot(tmp_path)) == {"a.json"}
    write_json(tmp_path / "deep" / "b.json", {"k": 1}, indent=1)     # parents are made
    assert json.loads((tmp_path / "deep" / "b.json").read_text()) == {"k": 1}
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("kept")
    with pytest.raises(IsADirectoryError, match="is a folder"):
        write_text(tmp_path / "out", "results")
    assert (tmp_path / "out" / "x").read_text() == "kept"


def test_save_into_moves_a_saved_folder_in_file_by_file(tmp_path, monkeypatch):
    """What a transformers save_pretrained writes (the tiny target's) joins the folder's other
    files; config.json goes in last."""
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "eval.json").write_text("{}")
    order, real = [], os.replace

    def save(tmp):
        (tmp / "config.json").write_text('{"a": 1}')
        (tmp / "model.safetensors").write_bytes(b"w")
        (tmp / "tokenizer.json").write_text("{}")
    monkeypatch.setattr(files.os, "replace",
                        lambda src, dst: (order.append(Path(dst).relative_to(tmp_path / "t")),
                                          real(src, dst)))
    save_into(tmp_path / "t", save)
    monkeypatch.undo()
    into = [str(p) for p in order if not str(p).startswith(".")]   # not the journal, staging
    assert into[-1] == "config.json" and len(into) == 3
    assert snapshot(tmp_path / "t") == {"config.json": b'{"a": 1}', "eval.json": b"{}",
                                        "model.safetensors": b"w", "tokenizer.json": b"{}"}


def test_a_save_to_the_empty_path_is_refused_and_tilde_is_expanded(tmp_path, monkeypatch):
    """'' would write into the current folder: refused, naming it; '~/x' lands in $HOME/x, with
    no literal './~' made."""
    from minidflash.checkpoints import load_drafter, save_drafter
    target = tiny_target(1, layers=6)
    d = random_drafter(target, 1)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"empty path ''"):
        save_drafter(d, "")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    save_drafter(d, "~/x")
    assert (tmp_path / "home" / "x" / "config.json").is_file() and not (tmp_path / "~").exists()
    assert load_drafter("~/x", target=target).block_size == d.block_size

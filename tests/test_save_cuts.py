"""A save is all or nothing, whatever cuts it (issue 66): the REAL ``save_drafter`` and
``ARDrafter.save_pretrained``, never a stub,

* with a failure injected at every file operation of the save in turn (every open, write, fsync,
  rename, unlink, mkdir and file writer: the k-th raises, for k = 1, 2, ... until the save gets
  through), three ways: that one operation fails (the save undoes itself), the disk dies there
  (every operation from the k-th on fails, the undo too: the loader finishes the job), and the
  process dies there (nothing after the k-th runs, no undo: as SIGKILL leaves it);
* killed with SIGKILL at 50 random moments in a subprocess (half at a random delay over the
  whole save, half a random moment after its renames begin),

and every time the folder then loads as exactly the old drafter or exactly the new one: the
folder byte for byte (its other files untouched, no temporary, backup or journal left), the
loaded tensors and the side files (draft_vocab.json, decoding.json). A save that raised loads as
the old one. The loader says when it finished or undid a cut save (``files.InterruptedSave``).
Planted, each red: the rollback removed; the loader not recovering.
"""

import collections
import errno
import hashlib
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest
import torch

from minidflash import ar_drafter, checkpoints, files
from minidflash.ar_drafter import ARDrafter, load_ar_drafter, make_ar_config
from minidflash.checkpoints import load_drafter, save_drafter
from minidflash.decoding_config import DecodingConfig, decoding_of, set_decoding
from minidflash.files import JOURNAL, InterruptedSave
from tests.helpers import random_drafter, tiny_target

ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------------------
# The drafters: an old save and a new one, and what loading each must give
# ------------------------------------------------------------------------------------------------

@dataclass
class Pair:
    old: torch.nn.Module
    new: torch.nn.Module
    save: Callable           # save(drafter, folder): the real one
    load: Callable           # load(folder): the real loader (which recovers a cut save first)
    prints: dict = field(default_factory=dict)      # "old" / "new" -> fingerprint of the load


KINDS = ["dflash-sides-replaced", "dflash-sides-added", "ar"]


def make_pair(kind: str, hidden: int = 64, layers: int = 1) -> Pair:
    """Two drafters of one target, deterministic (the kill server builds the same ones).
    dflash-sides-replaced: the old one has a draft vocabulary and decoding settings, the new one
    another vocabulary and none (decoding.json is removed by the save); dflash-sides-added: the
    old one has neither, the new one both; ar: two AR drafters (config + weights only)."""
    target = tiny_target(0, hidden=hidden, layers=6)     # 6 layers: distinct feature layers
    if kind == "ar":
        def ar(seed):
            torch.manual_seed(seed)
            return ARDrafter(make_ar_config(target.config)).eval()
        return Pair(ar(1), ar(2), lambda d, folder: d.save_pretrained(folder), load_ar_drafter)
    old, new = random_drafter(target, 0, layers=layers), random_drafter(target, 1, layers=layers)
    if kind == "dflash-sides-replaced":
        old.set_draft_vocab([4, 5, 6])
        set_decoding(old, DecodingConfig(p_min=0.3))
        new.set_draft_vocab([7, 8])
    else:
        new.set_draft_vocab([9, 10, 11])
        set_decoding(new, DecodingConfig(p_min=0.5, block_size=4))
    return Pair(old, new, save_drafter, load_drafter)


def fingerprint(drafter) -> tuple:
    """What a load gave: every tensor's bytes (hashed), the draft vocabulary, the decoding
    settings."""
    tensors = tuple((k, hashlib.sha256(v.detach().cpu().contiguous().numpy().tobytes()).hexdigest())
                    for k, v in sorted(drafter.state_dict().items()))
    vocab = getattr(drafter, "draft_vocab", None)
    return (tensors, None if vocab is None else vocab.tolist(),
            repr(decoding_of(drafter)) if not isinstance(drafter, ARDrafter) else None)


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under folder (hidden ones too) by relative path -> its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file() or p.is_symlink()}


def prepare(pair: Pair, tmp: Path) -> tuple[Path, dict, dict]:
    """A folder with the old save among other files; the bytes of the folder after the old save
    and after the new one; the fingerprints of loading each."""
    pristine = tmp / "pristine"
    (pristine / "sub").mkdir(parents=True)
    (pristine / "notes.txt").write_text("what this drafter is for\n")
    (pristine / "sub" / "data.csv").write_bytes(b"a,b\n1,2\n")
    (pristine / "config.json.bak").write_text("{}")
    pair.save(pair.old, pristine)
    shutil.copytree(pristine, tmp / "expected_new")
    pair.save(pair.new, tmp / "expected_new")
    old_bytes, new_bytes = snapshot(pristine), snapshot(tmp / "expected_new")
    assert old_bytes != new_bytes and not any(k.startswith(".") for k in new_bytes)
    pair.prints = {"old": fingerprint(pair.load(pristine)),
                   "new": fingerprint(pair.load(tmp / "expected_new"))}
    assert pair.prints["old"] != pair.prints["new"]
    return pristine, old_bytes, new_bytes


def loads_old_or_new(pair: Pair, folder: Path, old_bytes: dict, new_bytes: dict) -> str:
    """Load the folder (the loader recovers a cut save first): it must be exactly the old save or
    exactly the new one, on disk and as loaded, and the loader must have said so when it had a
    cut save to mend (and only then). Returns "old" or "new"."""
    cut = os.path.lexists(folder / JOURNAL) or any(folder.glob(f"{JOURNAL}.*.tmp"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = pair.load(folder)
    got = snapshot(folder)
    assert got in (old_bytes, new_bytes), (
        f"neither the old save nor the new one: {sorted(got)} (old {sorted(old_bytes)}; files "
        f"differing from old: {sorted(k for k in got if got[k] != old_bytes.get(k))})")
    which = "old" if got == old_bytes else "new"
    assert fingerprint(loaded) == pair.prints[which], "the files are whole, the load is not"
    said = [str(w.message) for w in caught if issubclass(w.category, InterruptedSave)]
    assert bool(said) == cut, f"a cut save to mend: {cut}; the loader said {said}"
    return which


# ------------------------------------------------------------------------------------------------
# A failure injected at the k-th file operation
# ------------------------------------------------------------------------------------------------

def _save_file_attr():
    import safetensors.torch
    return safetensors.torch


OPERATIONS = [(os, "open"), (os, "write"), (os, "fsync"), (os, "replace"), (os, "rename"),
              (os, "unlink"), (os, "mkdir"), (os, "link"), (shutil, "copyfile"),
              (Path, "write_text"), (Path, "write_bytes"), (_save_file_attr, "save_file")]


class FaultyDisk:
    """Within ``with``: the k-th file operation of this thread raises (mode "fail": only that one;
    "dies": that one and every one after; "killed": that one, and ``files._undo`` does nothing,
    as when the process is killed there and nothing of it runs after). ``failed`` names the
    operation that raised first; ``calls`` counts them all."""

    def __init__(self, k: int, mode: str):
        self.k, self.mode, self.calls, self.failed = k, mode, 0, None
        self.thread = threading.get_ident()
        self.saved = []

    def _wrap(self, real, name):
        def op(*args, **kwargs):
            if threading.get_ident() != self.thread:
                return real(*args, **kwargs)
            self.calls += 1
            if self.calls == self.k or (self.mode == "dies" and self.calls > self.k):
                self.failed = self.failed or f"{name}{tuple(str(a)[-40:] for a in args[:2])}"
                raise OSError(errno.EIO, f"injected failure of {name} (operation {self.calls})")
            return real(*args, **kwargs)
        return op

    def __enter__(self):
        for owner, name in OPERATIONS:
            owner = owner() if callable(owner) and not isinstance(owner, type) else owner
            real = getattr(owner, name)
            self.saved.append((owner, name, real))
            setattr(owner, name, self._wrap(real, f"{getattr(owner, '__name__', owner)}.{name}"))
        if self.mode == "killed":
            self.saved.append((files, "_undo", files._undo))
            files._undo = lambda folder, journal: []
        return self

    def __exit__(self, *exc):
        for owner, name, real in reversed(self.saved):
            setattr(owner, name, real)
        return False


def cut_at_every_operation(pair: Pair, tmp: Path, mode: str) -> collections.Counter:
    """The save of pair.new over pair.old, failing at operation k = 1, 2, ... until it gets
    through untouched; after each, the folder loads as old or new (a save that raised: old, and
    with mode "fail" byte for byte as before without the loader's help). Returns the outcomes,
    by (operation that failed, old or new)."""
    pristine, old_bytes, new_bytes = prepare(pair, tmp)
    outcomes = collections.Counter()
    for k in itertools.count(1):
        assert k < 400, "the save never got through"
        folder = tmp / f"cut{k}"
        shutil.copytree(pristine, folder)
        raised = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", InterruptedSave)  # a failed cleanup after the commit
            with FaultyDisk(k, mode) as disk:
                try:
                    pair.save(pair.new, folder)
                except OSError as e:
                    raised = e
        if disk.failed is None:                                   # fewer than k operations
            assert raised is None and snapshot(folder) == new_bytes
            break
        where = f"k={k} ({disk.failed}, mode {mode})"
        if raised is not None and mode == "fail":
            assert snapshot(folder) == old_bytes, f"{where}: not undone by the save itself"
        which = loads_old_or_new(pair, folder, old_bytes, new_bytes)
        assert which == ("old" if raised is not None else "new"), where
        outcomes[(disk.failed.split("(")[0], which)] += 1
        shutil.rmtree(folder)
    return outcomes


@pytest.mark.parametrize("mode", ["fail", "dies", "killed"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_failure_at_every_file_operation_leaves_the_old_or_the_new_drafter(tmp_path, kind,
                                                                              mode):
    outcomes = cut_at_every_operation(make_pair(kind), tmp_path, mode)
    points = sum(outcomes.values())
    print(f"\n{kind} {mode}: {points} injected failure points, outcomes {dict(outcomes)}")
    assert points >= 20 and {w for _, w in outcomes} == {"old", "new"}
    assert {op for op, _ in outcomes} >= {"os.replace", "os.fsync", "os.open", "os.write"}


def test_planted_without_the_rollback_a_cut_save_is_caught(tmp_path, monkeypatch):
    """Planted: the rollback removed (``_undo`` does nothing, in the save and in the loader):
    the injected failures leave folders that are neither old nor new."""
    monkeypatch.setattr(files, "_undo", lambda folder, journal: [])
    with pytest.raises(AssertionError, match="not undone by the save itself|neither the old"):
        cut_at_every_operation(make_pair("dflash-sides-replaced"), tmp_path, "fail")


@pytest.mark.parametrize("kind", ["dflash-sides-replaced", "ar"])
def test_planted_a_loader_that_does_not_recover_is_caught(tmp_path, monkeypatch, kind):
    """Planted: the loader's ``recover`` call removed; a save killed mid-rename then fails to
    load, or loads a mix."""
    monkeypatch.setattr(checkpoints if kind != "ar" else ar_drafter, "recover", lambda *_: None)
    with pytest.raises((AssertionError, FileNotFoundError),
                       match="neither the old save nor the new one|no config.json|needs config"):
        cut_at_every_operation(make_pair(kind), tmp_path, "killed")


# ------------------------------------------------------------------------------------------------
# The real save killed with SIGKILL at random moments
# ------------------------------------------------------------------------------------------------

KILL_SERVER = r"""
import json, os, signal, sys, time, traceback
import torch
torch.set_num_threads(1)
from tests.test_save_cuts import make_pair
pair = make_pair(sys.argv[1], hidden=int(sys.argv[2]), layers=int(sys.argv[3]))
import tempfile
with tempfile.TemporaryDirectory() as warm:        # imports done here, not in every child
    pair.save(pair.new, warm)
print("ready", flush=True)
for line in sys.stdin:
    folder, how, arg = line.split("\t")
    arg = float(arg)
    journal = os.path.join(folder, ".minidflash-save.json")
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:                                   # the child: the real save, nothing else
        code = 1
        try:
            pair.save(pair.new, folder)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    status = None
    if how == "delay":                             # a random moment of the whole save
        time.sleep(arg)
    elif how == "renaming":                        # a random moment after the renames begin
        while status is None:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
                break
            try:
                with open(journal) as f:
                    if '"renaming"' in f.read():
                        break
            except OSError:
                pass
        until = time.perf_counter() + arg
        while time.perf_counter() < until:
            pass
    if status is None:
        if how != "none":
            os.kill(pid, signal.SIGKILL)
        status = os.waitpid(pid, 0)[1]
    killed = os.WIFSIGNALED(status)
    print(json.dumps({"killed": killed, "code": None if killed else os.WEXITSTATUS(status),
                      "seconds": time.perf_counter() - start}), flush=True)
"""

KILLS = 50


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the kill server forks its savers")
@pytest.mark.parametrize("kind", ["dflash-sides-replaced", "ar"])
def test_the_real_save_killed_at_random_moments_leaves_the_old_or_the_new_drafter(tmp_path,
                                                                                   kind):
    """A server process builds the drafters once (a few MB: a save takes ~20-50 ms) and forks a
    child for each save, which it kills with SIGKILL: half after a random delay over the whole
    save (calibrated), half at a random moment up to 2 ms after the journal says the renames
    begin; until 50 saves were cut (one that ended first is checked too, and not counted).
    After each the folder loads as the old or the new drafter, whole."""
    hidden, layers = 256, 2
    pair = make_pair(kind, hidden=hidden, layers=layers)
    pristine, old_bytes, new_bytes = prepare(pair, tmp_path)
    server = subprocess.Popen([sys.executable, "-c", KILL_SERVER, kind, str(hidden), str(layers)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert server.stdout.readline().strip() == "ready", "the kill server did not start"

        def run(folder, how, arg):
            server.stdin.write(f"{folder}\t{how}\t{arg}\n")
            server.stdin.flush()
            return json.loads(server.stdout.readline())

        took = []
        for i in range(5):                                          # calibrate: whole saves
            shutil.copytree(pristine, folder := tmp_path / f"whole{i}")
            reply = run(folder, "none", 0)
            assert reply["code"] == 0 and snapshot(folder) == new_bytes
            took.append(reply["seconds"])
        whole = sorted(took)[2]
        rng, outcomes, kills = random.Random(66), collections.Counter(), 0
        for i in itertools.count():                  # until KILLS saves were cut by the kill
            assert i < 4 * KILLS, f"only {kills} of {i} saves were killed before they ended"
            if kills == KILLS:
                break
            shutil.copytree(pristine, folder := tmp_path / f"kill{i}")
            how, arg = (("delay", rng.uniform(0, whole)) if i % 2 == 0
                        else ("renaming", rng.uniform(0, 0.002)))
            reply = run(folder, how, arg)
            assert reply["killed"] or reply["code"] == 0, f"the save failed: {reply}"
            kills += reply["killed"]
            try:
                state = json.loads((folder / JOURNAL).read_text())["state"]
            except FileNotFoundError:
                state = "no journal"
            which = loads_old_or_new(pair, folder, old_bytes, new_bytes)
            outcomes[(how, "killed" if reply["killed"] else "finished", state, which)] += 1
            shutil.rmtree(folder)
    finally:
        server.stdin.close()
        server.wait(timeout=30)
    print(f"\n{kind}: {KILLS} kills in {i} saves (a whole save {whole * 1e3:.1f} ms): "
          + "; ".join(f"{' '.join(k)}: {n}" for k, n in sorted(outcomes.items())))
    assert sum(n for k, n in outcomes.items() if k[2] != "no journal") >= 5, outcomes

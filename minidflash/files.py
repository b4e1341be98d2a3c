"""Writing files without losing any: what every save in the package goes through.

Not a paper section. A file is written to a temporary file beside it (``.<name>.<random>.tmp``,
in the same folder, so on the same disk) and renamed over it in one step (``os.replace``): a
reader sees the old file or the new one, never half of one, and a write that fails leaves the old
file as it was and removes its temporary. Nothing here removes a file it was not asked to write:
saving into a folder leaves every other file in it alone.
A single file's write killed mid-way leaves its hidden temporary, which no loader reads and
which is safe to delete (``write_together`` removes those of the files it writes).

* ``write_text`` / ``write_json``: text; ``write_with(path, write)``: whatever ``write(tmp)``
  puts at the path it is given (``torch.save``, safetensors' ``save_file``, a converter);
  ``save_figure``: a matplotlib figure, in the format of the path's suffix.
* ``write_together``: several files of one folder that only make sense together (a drafter's
  config and weights) as ONE save, all or nothing, whatever cuts it (an exception, SIGKILL, a
  power cut). ``save_into``: the same for the files a ``save(folder)`` function writes (a
  transformers model's ``save_pretrained``). ``recover(folder)``: what a loader calls first, to
  finish or undo a save that was cut (it warns, ``InterruptedSave``, saying which).

How a save survives a cut. Every new file is written into a hidden staging folder inside the
target folder (``.minidflash-save.<id>/new/``, same disk; a writer's own temporaries land there
too) and fsynced, while the old files stay untouched; a small hidden journal
(``.minidflash-save.json``, itself written atomically) names the renames to come; then each old
file is moved aside into the staging folder (``old/``) and its new one renamed in, config.json
(the file loaders open first) moved aside first and renamed in last: that rename is the commit.
A failure before the commit puts the old files back and removes the new ones (the journal
names them, and each new file's inode, size and time prove it is the save's own); after it,
the staging folder and the journal are removed. A save killed at any moment leaves the journal:
``recover`` (the loaders call it, and so does the next save) undoes the save (killed before the
commit) or finishes it (after) and warns; so a folder always loads as the old save or the new
one, never a mix, and no temporary stays behind. One save into a folder at a time.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator


def _temp_beside(path: Path) -> Path:
    """A new empty file ``.<name>.<random>.tmp`` in path's folder (created with its parents)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    return Path(tmp)


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path to write path's new content to: on a clean exit it replaces path, on an
    exception it is removed (and path is left as it was)."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder: give a file name to write to.")
    tmp = _temp_beside(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_with(path: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp)`` to write a file, then put it at path; atomically."""
    with atomic_path(path) as tmp:
        write(tmp)
    return Path(path)


def write_text(path: str | os.PathLike, text: str) -> Path:
    return write_with(path, lambda tmp: tmp.write_text(text))


def write_json(path: str | os.PathLike, data, **dumps) -> Path:
    """data as JSON (``json.dumps(data, **dumps)``) and a newline; atomically."""
    return write_text(path, json.dumps(data, **dumps) + "\n")


def save_figure(fig, path: str | os.PathLike, **savefig) -> Path:
    """``fig.savefig`` to path, atomically; the format is the path's suffix (``.png``), given
    explicitly because the temporary name ends in ``.tmp``."""
    fmt = savefig.pop("format", None) or Path(path).suffix.lstrip(".") or "png"
    return write_with(path, lambda tmp: fig.savefig(tmp, format=fmt, **savefig))


# ------------------------------------------------------------------------------------------------
# Several files as one save: a journal, hidden backups, config.json last (see the module notes)
# ------------------------------------------------------------------------------------------------

JOURNAL = ".minidflash-save.json"    # hidden, in the folder, only while a save is under way
_STAGING = ".minidflash-save."       # + the save's id: a hidden folder, its new/ and old/ files
_STATES = ("writing", "renaming", "undoing")


class InterruptedSave(UserWarning):
    """A folder held a save that was cut (killed, a power cut, an undo that failed too): it was
    finished or undone before the folder was read or saved into again."""


def _sync_dir(folder: Path) -> None:
    """fsync a folder, so the renames in it are on disk before the next step (a power cut)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:             # a system that cannot open a folder (Windows): nothing to sync
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_journal(folder: Path, journal: dict) -> None:
    """The journal, atomically: its own hidden temporary, fsynced, renamed over it, the folder
    synced."""
    tmp = folder / f"{JOURNAL}.{os.urandom(6).hex()}.tmp"
    data = memoryview((json.dumps(journal, indent=1) + "\n").encode())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        try:
            while data:
                data = data[os.write(fd, data):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, folder / JOURNAL)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass                # recover() removes a journal temporary left behind
        raise
    _sync_dir(folder)


def _staging(folder: Path, tid: str) -> Path:
    return folder / f"{_STAGING}{tid}"


def _names(folder: Path, op: dict, tid: str) -> tuple[Path, Path, Path]:
    """An op's target, where its new file is written (new/ of the save's hidden staging folder,
    on the same disk: a writer's own temporaries land there too, as safetensors' ``.tmpXXXXXX``)
    and where its old file is moved aside (old/)."""
    staging = _staging(folder, tid)
    return folder / op["name"], staging / "new" / op["name"], staging / "old" / op["name"]


def _stamp(path: Path) -> list[int]:
    """What tells the file a save wrote from any other: inode, size, modification time."""
    st = os.lstat(path)
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def _ours(path: Path, stamp) -> bool:
    """Is the file at path the new file a save wrote (the stamp the journal recorded: the same
    inode, or, on a file system whose inodes are not kept across a rename, the same size and
    modification time)?"""
    if not stamp:
        return True
    try:
        now = _stamp(path)
    except FileNotFoundError:
        return False
    return (now[0] == stamp[0] and now[0] != 0) or now[1:] == stamp[1:]


def _clear(folder: Path, tid: str) -> None:
    """The save's staging folder and journal removed: the save is over."""
    staging = _staging(folder, tid)
    if os.path.lexists(staging):
        shutil.rmtree(staging)
    (folder / JOURNAL).unlink(missing_ok=True)
    _sync_dir(folder)


def _undo(folder: Path, journal: dict) -> list[str]:
    """Undo a save that has not committed, idempotently (a kill within the undo is undone by the
    next call): the old files back from their backups, the new ones removed. Returns the names
    put back. A target that is neither the old file nor the save's own new file (someone wrote it
    since) is never overwritten: that raises."""
    tid, ops = journal["id"], journal["ops"]
    if journal["state"] == "renaming":
        journal = {**journal, "state": "undoing"}   # from here on, a missing last new file
        try:                                         # means an undone save, not a committed one
            _write_journal(folder, journal)
        except OSError:
            pass
    restored = []
    if journal["state"] == "undoing":
        for op in reversed(ops):
            target, new, old = _names(folder, op, tid)
            if op.get("had_old") and os.path.lexists(old):
                if os.path.lexists(target) and not _ours(target, op.get("stamp")):
                    raise FileExistsError(
                        f"{target} changed after an interrupted save into {folder} (its old "
                        f"file is still in {old.relative_to(folder)}): keep the one you want "
                        f"under {op['name']}, then delete {_staging(folder, tid).name} and "
                        f"{JOURNAL}.")
                os.replace(old, target)
                restored.append(op["name"])
            elif (op.get("had_old") is False and op["new"] and not os.path.lexists(new)
                  and _ours(target, op.get("stamp"))):
                os.unlink(target)                    # our new file, where there was none
    _clear(folder, tid)
    return restored


def _read_journal(path: Path) -> dict:
    """The journal at path, checked: an id, a state and ops naming files inside the folder."""
    try:
        journal = json.loads(path.read_text())
        ok = (isinstance(journal, dict) and journal.get("state") in _STATES
              and isinstance(journal.get("id"), str) and journal["id"].isalnum()
              and isinstance(journal.get("ops"), list) and bool(journal["ops"]))
        for op in journal["ops"] if ok else ():
            name = op.get("name") if isinstance(op, dict) else None
            ok = (ok and isinstance(name, str) and bool(name) and not Path(name).is_absolute()
                  and ".." not in Path(name).parts and isinstance(op.get("new"), bool)
                  and op.get("had_old") in (True, False, None)
                  and (op.get("stamp") is None or (isinstance(op["stamp"], list)
                                                    and len(op["stamp"]) == 3 and all(
                                                        type(v) is int for v in op["stamp"]))))
        if not ok:
            raise ValueError("not the journal of a save")
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not a save journal minidflash can read ({e}): it marks a "
                         f"save into {path.parent} that was cut. Its hidden {_STAGING}<id> "
                         f"folder may hold old files moved aside (old/) and new ones (new/): "
                         f"put back the ones you want, then delete both.") from None
    return journal


def recover(folder) -> str | None:
    """Finish or undo a save into folder that was cut (killed, a power cut), before the folder
    is read: what ``load_drafter`` and ``load_ar_drafter`` call first, and ``write_together``
    before it saves. A save cut before its commit (config.json renamed in) is undone: the folder
    holds the files it held before; one cut after it is finished: the folder holds the new save.
    Either way its hidden staging folder (new files, backups) and journal are removed, and an
    ``InterruptedSave`` warning says what was done (also returned). Nothing to do (no journal;
    not a folder; a hub id): None, at the cost of a stat and a look for hidden leftovers."""
    try:
        folder = Path(os.fspath(folder)).expanduser()
        if not folder.is_dir():
            return None
        leftovers = sorted(folder.glob(glob.escape(_STAGING) + "*"))    # journal too
    except (TypeError, ValueError, RuntimeError, OSError):   # not a path, "~nobody", ...
        return None
    if not leftovers:
        return None
    journal_path = folder / JOURNAL
    try:
        journal = _read_journal(journal_path) if os.path.lexists(journal_path) else None
        if journal is None:
            what = "left hidden files (and no journal): those of its own were removed"
        elif journal["state"] == "writing":
            _undo(folder, journal)
            what = ("was cut while writing its new files, before it changed anything: they "
                    "were removed, and the folder holds what it held before")
        elif (journal["state"] == "renaming"
              and not os.path.lexists(_names(folder, journal["ops"][-1], journal["id"])[1])):
            _clear(folder, journal["id"])
            what = (f"was cut after its last file ({journal['ops'][-1]['name']}) was renamed "
                    f"into place: it was finished (the hidden backups of the old files "
                    f"removed), and the folder holds the new save")
        else:
            restored = _undo(folder, journal)
            what = (f"was cut while renaming its files into place: it was undone (put back "
                    f"from hidden backups: {', '.join(restored) or 'none'}; its new files "
                    f"removed), and the folder holds what it held before")
        kept = []
        for stray in leftovers:     # a journal's temporary; a staging folder no journal names
            if stray.name == JOURNAL or not os.path.lexists(stray):
                continue
            if stray.name.endswith(".tmp") and stray.is_file():
                stray.unlink()
            elif stray.name[len(_STAGING):].isalnum() and stray.is_dir() and not stray.is_symlink():
                if any(p.is_file() for p in (stray / "old").rglob("*")):
                    kept.append(stray.name)     # old files moved aside: not ours to delete
                else:
                    shutil.rmtree(stray)
        if kept:
            what += (f"; {', '.join(kept)} (hidden) holds old files of a save no journal "
                     f"names, moved aside (old/): put back the ones you want, then delete it")
    except OSError as e:
        raise OSError(f"{folder} holds a save that was cut ({JOURNAL}), and it could not be "
                      f"finished or undone: {e}. Make the folder writable and load it "
                      f"again.") from e
    message = f"An earlier save into {folder} {what}."
    warnings.warn(message, InterruptedSave, stacklevel=2)
    return message


def write_together(folder: str | os.PathLike, writers: dict[str, Callable[[Path], object]],
                   remove: Iterable[str] = ()) -> Path:
    """Write the files ``writers`` names (relative to folder, created with its parents) as one
    save, all or nothing: after it returns the folder holds the new files; after it raises, or
    is killed at any moment, the old ones (or, killed after its commit, the new ones), whole,
    once ``recover`` has run (the loaders run it). Each ``write(path)`` writes one file to the
    path it is given. The files in ``remove`` (those of an earlier save the new one has not) go
    with the old files; one that is a folder is left alone. The last file named (config.json) is
    moved aside first and renamed in last: a reader that opens it first and knows nothing of the
    journal (an engine) finds the old set, the new set or no config.json, never a mix. Other
    files in folder are never touched; a folder where a file is to be written is refused before
    anything is written. One save into a folder at a time. "~" is expanded; an empty path is
    refused (it would write into the current folder)."""
    if not str(folder).strip():
        raise ValueError(f"a save needs a folder, got the empty path {str(folder)!r} (it would "
                         f"write into the current folder): name one, e.g. 'out/drafter'.")
    folder = Path(folder).expanduser()
    if not writers:
        raise ValueError("write_together needs at least one file to write.")
    folder.mkdir(parents=True, exist_ok=True)
    recover(folder)                                    # a cut save first: finished or undone
    for name in writers:
        if (folder / name).is_dir():
            raise IsADirectoryError(f"{folder / name} is a folder, where this save writes the "
                                    f"file {name}: move or rename the folder and save again.")
        for old in (folder / name).parent.glob(glob.escape(f".{Path(name).name}.") + "*.tmp"):
            old.unlink(missing_ok=True)      # a temporary of an earlier version's killed save
    *first, last = writers
    ops = ([{"name": n, "new": True} for n in first]
           + [{"name": n, "new": False} for n in dict.fromkeys(remove)
              if n not in writers and os.path.lexists(folder / n) and not (folder / n).is_dir()]
           + [{"name": last, "new": True}])
    journal = {"what": "minidflash: a save under way (files.write_together); if it was cut, "
                       "minidflash.files.recover(folder) finishes or undoes it",
               "id": os.urandom(6).hex(), "state": "writing", "ops": ops}
    tid, state = journal["id"], "writing"
    try:
        _write_journal(folder, journal)
        for op in ops:                          # 1. the new files, in the hidden staging folder
            target, new, old = _names(folder, op, tid)
            old.parent.mkdir(parents=True, exist_ok=True)
            if op["new"]:
                target.parent.mkdir(parents=True, exist_ok=True)
                new.parent.mkdir(parents=True, exist_ok=True)
                writers[op["name"]](new)
                if not new.is_file():
                    raise FileNotFoundError(f"the writer of {op['name']} wrote no file at {new}.")
                _fsync(new)
        for op in ops:                          # 2. what the renames will find, journaled
            target, new, _ = _names(folder, op, tid)
            op["had_old"] = os.path.lexists(target)
            op["stamp"] = _stamp(new) if op["new"] else None
        for d in {p.parent for op in ops for p in _names(folder, op, tid)[1:]}:
            _sync_dir(d)
        journal["state"] = state = "renaming"
        _write_journal(folder, journal)
        # 3. the renames: config.json aside first, then each old file aside and its new one in,
        #    config.json in last: the commit
        *rest, (_, target, new, old) = [(op, *_names(folder, op, tid)) for op in ops]
        if ops[-1]["had_old"]:
            os.replace(target, old)
        for op, target_, new_, old_ in rest:
            if op["had_old"]:
                os.replace(target_, old_)
            if op["new"]:
                os.replace(new_, target_)
        os.replace(new, target)
    except BaseException as e:                       # before the commit: undone
        try:
            _undo(folder, {**journal, "state": state})
        except BaseException as undo_error:
            e.add_note(f"The save into {folder} could not be undone ({undo_error!r}): its "
                       f"journal {JOURNAL} is left there, and the next load or save undoes it "
                       f"(minidflash.files.recover).")
        raise
    try:                                             # 4. committed: the backups, the journal
        for d in {_names(folder, op, tid)[0].parent for op in ops} - {folder}:
            _sync_dir(d)
        _clear(folder, tid)
    except OSError as e:
        warnings.warn(f"Saved into {folder}, but its hidden backups or journal could not be "
                      f"removed ({e}): the next load or save removes them.", InterruptedSave,
                      stacklevel=2)
    return folder


def save_into(folder: str | os.PathLike, save: Callable[[Path], object],
              last: str = "config.json") -> Path:
    """What ``save(tmp_folder)`` writes (``model.save_pretrained``, ``tokenizer.save_pretrained``),
    put into folder file by file as one ``write_together``, ``last`` renamed last; other files
    in folder are left alone."""
    with tempfile.TemporaryDirectory() as tmp:
        save(Path(tmp))
        made = sorted(f.relative_to(tmp).as_posix() for f in Path(tmp).rglob("*") if f.is_file())
        made.sort(key=lambda name: name == last)             # stable: only `last` moves, to the end
        write_together(folder, {name: lambda dest, name=name: shutil.copyfile(Path(tmp, name), dest)
                                for name in made})
    return Path(folder)

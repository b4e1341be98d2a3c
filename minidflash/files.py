"""Writing files without losing any: what every save in the package goes through.

Not a paper section. A file is written to a temporary file beside it (``.<name>.<random>.tmp``,
in the same folder, so on the same disk) and renamed over it in one step (``os.replace``): a
reader sees the old file or the new one, never half of one, and a write that fails leaves the old
file as it was and removes its temporary. Nothing here removes a file it was not asked to write:
saving into a folder leaves every other file in it alone.

* ``write_text`` / ``write_json``: text; ``write_with(path, write)``: whatever ``write(tmp)``
  puts at the path it is given (``torch.save``, safetensors' ``save_file``, a converter);
  ``save_figure``: a matplotlib figure, in the format of the path's suffix.
* ``write_together``: several files of one folder that only make sense together (a drafter's
  config and weights): all written first, then renamed into place, the one a reader opens first
  (the last one named) removed before and renamed after the others. ``save_into``: the same for
  the files a ``save(folder)`` function writes (a transformers model's ``save_pretrained``).

A process killed while it writes (SIGKILL, a power cut) cannot remove its temporary: it stays as
a hidden ``.<name>.<random>.tmp`` that no loader reads and that is safe to delete;
``write_together`` removes those of its own files when it runs next.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import tempfile
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


def write_together(folder: str | os.PathLike, writers: dict[str, Callable[[Path], object]],
                   remove: Iterable[str] = ()) -> Path:
    """Write the files ``writers`` names (relative to folder, created with its parents) as one
    save: each ``write(tmp)`` runs first, while the old files stay untouched (a failure there
    leaves the folder as it was and no temporary). Then the last file named and the files in
    ``remove`` are deleted, the others renamed into place in order, and the last one renamed
    after them. A reader that opens the last file first (a loader its config.json) finds the old
    set, the new set, or, for a save killed within those renames, no such file, which fails
    loudly; never old and new files mixed. Other files in folder are left alone."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name in writers:                     # temporaries of a killed earlier save of these files
        for old in (folder / name).parent.glob(glob.escape(f".{Path(name).name}.") + "*.tmp"):
            old.unlink(missing_ok=True)
    temps: dict[str, Path] = {}
    try:
        for name, write in writers.items():
            temps[name] = _temp_beside(folder / name)
            write(temps[name])
        for name in (list(writers)[-1], *remove):
            (folder / name).unlink(missing_ok=True)
        for name, tmp in temps.items():
            os.replace(tmp, folder / name)
    except BaseException:
        for tmp in temps.values():
            tmp.unlink(missing_ok=True)
        raise
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

"""What the tools share: prompt files and suites, the answer checks, timing, results files, and
the command-line options every command spells the same way.

Not a paper section. The tools sit in folders that import one way, bottom to top::

    engines  <  common  <  make_data  <  train  <  measure

and this module is the one leaf they all may read (it imports the core package and nothing else
of the tools; ``tests/test_layout.py`` checks the order).

* **Prompt files.** ``data/prompts/<suite>.jsonl`` holds one prompt a line. Every suite is split
  once, by position in its file: the first ``DEV_PROMPTS`` prompts are the *dev* part, where
  drafters, training data and decoding settings are chosen; the rest is the *test* part, where
  results are reported (``suite_prompts``).
* **Answer checks.** Loops (repeated 4-grams) and task accuracy by the suites' own rules: the last
  ``\\boxed{}`` for math (the paper's prompt template), the HumanEval tests run in a subprocess
  for code.
* **Timing and results.** ``median_ms`` / ``take_turns`` time a piece of work the same way in
  every benchmark; ``write`` saves a result as JSON with its plot beside it and its provenance:
  the machine, the dtype, the drafter's weights (sha256) and the load (``--load``).
* **Options.** ``--threads``, ``--dtype`` (``auto`` / ``float32`` / ``bfloat16``), ``--n``,
  ``--suites`` and ``--load`` mean the same in every command; a bad value is one line from argparse.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from ..paths import PROMPTS_DIR, repo_relative
from ..files import save_figure, write_json, write_text   # save_figure: for the tools too

# --------------------------------------------------------------------------------------------
# Prompt files and suites
# --------------------------------------------------------------------------------------------

DEV_PROMPTS = 10
SPLITS = ("test", "dev", "all")


def write_jsonl(rows: list[dict], path: str | Path) -> None:
    """One JSON row a line, atomically (a failed write leaves the old file)."""
    write_text(path, "".join(json.dumps(r) + "\n" for r in rows))


def read_jsonl(path: str | Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def suite_names(prompts_dir: str | Path | None = None) -> list[str]:
    """The suites there are: the files of ``data/prompts`` (without .jsonl), sorted."""
    return sorted(q.stem for q in Path(prompts_dir or PROMPTS_DIR).glob("*.jsonl"))


def part_start(split: str) -> int:
    """Where a part begins in its suite's file (0-based line): the test part after the dev part."""
    return {"dev": 0, "test": DEV_PROMPTS, "all": 0}[split]


def suite_prompts(suite: str, split: str = "test", n: int | None = None,
                  prompts_dir: str | Path | None = None) -> list[dict]:
    """The first n prompts of one part of ``data/prompts/<suite>.jsonl``.

    split: "dev" (the first DEV_PROMPTS prompts of the file), "test" (the rest) or "all".
    n None takes the whole part; asking for more than the part holds is an error, so a number
    reported for "n = 40" always means 40 prompts.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    path = Path(prompts_dir or PROMPTS_DIR) / f"{suite}.jsonl"
    if not path.exists():
        raise ValueError(f"no prompt suite {suite!r}: {path} does not exist; the suites are "
                         f"{', '.join(suite_names(path.parent))}")
    rows = read_jsonl(path)
    part = rows[part_start(split):DEV_PROMPTS if split == "dev" else None]
    if n is not None and n > len(part):
        raise ValueError(f"{suite}'s {split} part holds {len(part)} prompts, fewer than the "
                         f"{n} asked for: ask for n <= {len(part)}")
    return part if n is None else part[:n]


# --------------------------------------------------------------------------------------------
# Answer checks: loops and task accuracy
# --------------------------------------------------------------------------------------------

LOOPING = 0.25   # an answer "loops" when more than this share of its 4-grams repeat earlier ones


def repeated_4gram_share(ids: list[int]) -> float:
    """Share of the 4-grams of a response that already occurred earlier in it."""
    seen, rep, grams = set(), 0, [tuple(ids[i:i + 4]) for i in range(len(ids) - 3)]
    for g in grams:
        rep += g in seen
        seen.add(g)
    return rep / max(1, len(grams))


def boxed(text: str) -> str | None:
    m = re.findall(r"\\boxed\{([^{}]*)\}", text)
    return m[-1].strip() if m else None


def humaneval_passes(row: dict, completion: str, timeout: float = 5.0) -> bool:
    """Run a HumanEval problem's tests on the code in a completion, in a subprocess."""
    code = re.findall(r"```(?:python)?\n(.*?)```", completion, re.S)
    program = (code[0] if code else completion) + "\n\n" + row["test"] + f"\ncheck({row['entry_point']})\n"
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(program)
    try:
        r = subprocess.run([sys.executable, f.name], capture_output=True, timeout=timeout)
        return r.returncode == 0
    except subprocess.TimeoutExpired:
        return False
    finally:
        Path(f.name).unlink(missing_ok=True)


def correct(row: dict, text: str) -> bool | None:
    """True/False where the suite is checkable, None where it is not."""
    if "answer" in row:
        return boxed(text) == str(row["answer"]).strip()
    if "test" in row and "entry_point" in row:
        return humaneval_passes(row, text)
    return None


# --------------------------------------------------------------------------------------------
# Timing and results files
# --------------------------------------------------------------------------------------------

def median_ms(fn, repeats: int, device=None, before=None) -> float:
    """Median milliseconds of ``repeats`` calls of fn, each timed by ``clock``; ``before``, where
    given, called ahead of each, untimed (what a decode runs between two such calls)."""
    from ..decoding import clock

    ts = []
    for _ in range(repeats):
        if before is not None:
            before()
        t = clock(device)
        fn()
        ts.append(clock(device) - t)
    return 1e3 * sorted(ts)[len(ts) // 2]


def take_turns(measure, threads, rounds: int) -> dict:
    """{t: [measure() at t torch threads, one per round]}: the thread counts take turns round by
    round (order reversed every other round), so all see the same machine state; the caller's
    thread count is restored."""
    import torch

    runs, before = {t: [] for t in threads}, torch.get_num_threads()
    try:
        for r in range(rounds):
            for t in (threads if r % 2 == 0 else threads[::-1]):
                torch.set_num_threads(t)
                runs[t].append(measure())
    finally:
        torch.set_num_threads(before)
    return runs


# --------------------------------------------------------------------------------------------
# Provenance: what every results file says about how it was measured
# --------------------------------------------------------------------------------------------

NOT_RECORDED = "not recorded"
LOADS = ("alone", "shared")
BUSY = 0.5      # a 1-minute load average above this when a command began: something else ran


def load_average() -> float | None:
    """The 1-minute load average (None where the system has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        return None


LOAD_AVERAGE_AT_START = load_average()    # taken when a command imports the tools, before it works


def weights_sha256(folder) -> str:
    """sha256 (hex) of a drafter's weights: ``folder/model.safetensors``, or ``folder`` itself
    when it is a file (a training snapshot)."""
    path = Path(folder).expanduser()
    path = path / "model.safetensors" if path.is_dir() else path
    stat = path.stat()
    return _sha256(str(path.resolve()), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=32)
def _sha256(path: str, mtime_ns: int, size: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def drafter_hashes(folders) -> dict:
    """{folder (repository-relative where it can be): its weights' sha256} for each distinct
    folder or snapshot; NOT_RECORDED for a name with no local weights (a hub id)."""
    out = {}
    for folder in dict.fromkeys(str(f) for f in folders if f is not None):
        try:
            out[repo_relative(folder)] = weights_sha256(folder)
        except OSError:
            out[repo_relative(folder)] = NOT_RECORDED
    return out


def write(results: dict, json_path: str | None, plot_fn, *, dtype: str, drafters, load: str) -> None:
    """The figures as JSON at json_path (if given) and their plot (``plot_fn``, may be None) as a
    PNG beside it. Every file carries its provenance (``render.provenance`` prints it): the
    machine, ``dtype``, ``drafter_sha256`` of ``drafters`` (folders; empty where none was used),
    ``load`` (``--load``) and the load average when the command began. Each file is written
    atomically (``files.py``; other files in the folder are left alone), the JSON first: a plot
    that fails raises and loses no measurement."""
    from ..target import describe_machine

    if not json_path:
        return
    path = Path(json_path)
    results.setdefault("machine", describe_machine())     # timings hold on this machine
    results.update(dtype=str(dtype).removeprefix("torch."), drafter_sha256=drafter_hashes(drafters),
                   load=load, load_average_at_start=LOAD_AVERAGE_AT_START)
    if load == "alone" and (LOAD_AVERAGE_AT_START or 0) > BUSY:
        print(f"note: --load alone, but the 1-minute load average was {LOAD_AVERAGE_AT_START} when "
              f"this command began: if another process ran, say --load shared", file=sys.stderr)
    write_json(path, results, indent=1)
    if plot_fn is not None:
        try:
            plot_fn(results, path.with_suffix(".png"))
        except Exception as e:
            e.add_note(f"The results are written to {path}; their plot was not (a "
                       f"{path.with_suffix('.png').name} beside it is an earlier run's).")
            raise


def add_load(p: argparse.ArgumentParser) -> None:
    """``--load alone|shared``: what else ran while this measured, recorded in the results file."""
    p.add_argument("--load", choices=LOADS, default="alone",
                   help="what else ran on the machine while this measured, recorded in the results "
                        "file: alone (default) or shared (beside another process, e.g. two "
                        "benchmarks side by side). You say it; it is not measured, because the "
                        "load average counts this command's own threads and cannot tell a rival "
                        "from them. The file also keeps the 1-minute load average when the "
                        f"command began, and a note is printed when it was above {BUSY} under "
                        "--load alone")


# --------------------------------------------------------------------------------------------
# The options every command spells the same way
# --------------------------------------------------------------------------------------------

DTYPES = ("auto", "float32", "bfloat16")
AUTO = ("auto: bf16 where the device multiplies bf16 natively and the model is large enough to "
        "gain, else fp32 (target.resolve_dtype)")


def count(text: str) -> int:
    """An argparse type: a whole number of 1 or more (prompts, threads)."""
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n}: give 1 or more")
    return n


def at_least(low: int, what: str = ""):
    """An argparse type: a whole number of ``low`` or more (``what``: what it counts)."""
    def number(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if n < low:
            raise argparse.ArgumentTypeError(f"{n}: give {low} or more{' ' + what if what else ''}")
        return n
    number.__name__ = f"at_least_{low}"
    return number


def a_file(text: str) -> str:
    """An argparse type: a file to read, that is there (a folder or a missing path refused)."""
    path = Path(text).expanduser()
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text}: no such file" + (" (a folder)" if path.is_dir()
                                                                      else ""))
    return str(path)


def layer_ids(text: str) -> list[int]:
    """An argparse type: target layer ids as 1,2,3, whole numbers >= 0, each once."""
    try:
        ids = [int(i) for i in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: layer ids are whole numbers, e.g. 1,2,3") \
            from None
    if any(i < 0 for i in ids) or len(set(ids)) < len(ids):
        raise argparse.ArgumentTypeError(f"{text!r}: layer ids are whole numbers >= 0, each "
                                         f"once, e.g. 1,2,3")
    return ids


def layers_within(ids: list[int] | None, layers: int, flag: str = "--layer-ids"):
    """``ids`` (None passes) when each is a layer of a target with ``layers`` layers; else a
    ValueError naming ``flag`` and the ids (the command line's one line)."""
    if ids is not None and max(ids) >= layers:
        raise ValueError(f"{flag} {','.join(map(str, ids))}: the target has {layers} layers "
                         f"(ids 0..{layers - 1})")
    return ids


def positive(text: str) -> float:
    """An argparse type: a finite number above 0 (a learning rate)."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < x < float("inf"):
        raise argparse.ArgumentTypeError(f"{text}: give a finite number above 0")
    return x


def _writable(path: Path, kind: str) -> str:
    """A path a command can write its ``kind`` to, checked before the run; else ArgumentTypeError.
    The folder it would be written in (or the nearest one of it that exists) is tried for real:
    a hidden file is created and removed there, as the atomic write will (``files.py``), since
    permissions alone do not show a virtual or read-only file system (nor anything to root)."""
    parent = next((q for q in [path, *path.parents] if q.exists()), Path("."))
    if parent != path and not parent.is_dir():
        raise argparse.ArgumentTypeError(f"{path}: {parent} is a file, so nothing can be written "
                                         f"under it; name a {kind} in a folder")
    if parent == path and not (path.is_file() or path.is_dir()):
        raise argparse.ArgumentTypeError(f"{path} is not a regular {kind} (a device, a pipe or "
                                         f"a socket), which a save would replace; name a {kind} "
                                         f"in a folder")
    folder = parent if parent.is_dir() else parent.parent
    if not os.access(folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"{path}: {folder} is not writable here; name a {kind} "
                                         f"in a folder you can write")
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".minidflash-probe.", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise argparse.ArgumentTypeError(f"{path}: no file can be created in {folder} "
                                         f"([Errno {e.errno}] {e.strerror}: a virtual or "
                                         f"read-only file system?); name a {kind} in a folder "
                                         f"you can write") from None
    return str(path)


def out_file(text: str) -> str:
    """An argparse type for ``--out`` / ``--results``: a file that can be written, refused before
    the run when it is a folder, lies under a file, or cannot be written."""
    path = Path(text).expanduser()
    if not text or path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder: name the results file, e.g. "
                                         f"{path / 'results.json'}")
    return _writable(path, "file")


def out_dir(text: str) -> str:
    """An argparse type for an output folder: refused when it is a file, lies under a file, or
    cannot be written."""
    path = Path(text).expanduser()
    if not text or path.is_file():
        raise argparse.ArgumentTypeError(f"{text!r} is a file: name a folder")
    return _writable(path, "folder")


def telling(error):
    """``error`` (an ArgumentParser's: usage, ``prog: error: message``, exit status 2) whose
    SystemExit also reads as the message, for a caller that catches it (a test) to see why."""
    def refuse(message: str):
        try:
            error(message)
        except SystemExit as e:
            e.args = (message,)             # the exit status stays 2
            raise
    return refuse


def or_error(error, flag: str, load, *args, **kwargs):
    """``load(*args, **kwargs)`` (a model, a file); its ValueError or OSError as one line through
    ``error`` (an ArgumentParser's), naming ``flag`` (e.g. "--drafter data/x")."""
    try:
        return load(*args, **kwargs)
    except (ValueError, OSError) as e:
        error(f"{flag}: {e}")


def flags_in(message: str, given: dict) -> str:
    """The flags of ``given`` (fields the command line set) that an error ``message`` names, as
    "--block-size 99"; else what sets the rest: the drafter's decoding.json."""
    named = [f"--{k.replace('_', '-')} {'' if isinstance(v, bool) else v}".strip()
             for k, v in given.items() if k in message]
    return ", ".join(named) or "the drafter's decoding.json"


def check_decoding(error, target, drafter, given: dict, prompts, **call):
    """The config a command decodes with: the drafter's decoding.json, the command line's fields
    (``given``) and the command's own (``call``) over it, checked by ``prepare.prepare`` on the
    longest of ``prompts`` (1, S) before any long work. What it refuses (a block size over the
    drafter's, a length past the target's positions, --cost without a curve) is one line through
    ``error``, naming the flags of ``given`` that the message names."""
    from ..prepare import prepare
    from ..decoding_config import DecodingConfig

    try:
        config = DecodingConfig.of(drafter).override(**given, **call)
        prepare(target, drafter, max(prompts, key=lambda ids: ids.shape[1]), config)
    except ValueError as e:
        error(f"{flags_in(str(e), given)}: {e}")
    return config


def add_threads(p: argparse.ArgumentParser, default=1, what: str = "torch threads",
                more: str = "") -> None:
    """``--threads N`` (or ``N M ...`` where the command sweeps: a list default), each >= 1;
    the help says the default."""
    several = isinstance(default, list)
    shown = " ".join(map(str, default)) if several else default
    p.add_argument("--threads", type=count, nargs="+" if several else None, default=default,
                   metavar="N", help=f"{what} (default {shown}){more}")


def add_dtype(p: argparse.ArgumentParser, flag: str = "--dtype", default: str = "auto",
              what: str = "the target's and drafter's dtype") -> None:
    """A dtype option: auto / float32 / bfloat16, the help saying the default and what auto is."""
    p.add_argument(flag, choices=DTYPES, default=default,
                   help=f"{what} (default {default}; {AUTO})")


def resolved_dtype(dtype: str, model) -> str:
    """"float32" or "bfloat16": ``dtype`` itself, or for "auto" what ``target.resolve_dtype``
    picks for ``model`` (its size, its device)."""
    if dtype != "auto":
        return dtype
    from ..target import resolve_dtype

    first = next(model.parameters())
    size = sum(q.numel() for q in model.parameters())
    return str(resolve_dtype("auto", size, first.device)).removeprefix("torch.")


def check_suites(error, suites: list[str], n: int | None = None, split: str | None = None,
                 prompts_dir: str | Path | None = None) -> None:
    """One line through ``error`` (an ArgumentParser's ``error``) unless every suite is a file of
    data/prompts and, with ``split``, its part holds ``n`` prompts."""
    known = suite_names(prompts_dir)
    unknown = [s for s in suites if s not in known]
    if unknown:
        error(f"--suites {' '.join(unknown)}: no such suite in "
              f"{repo_relative(prompts_dir or PROMPTS_DIR)}; "
              f"the suites are {', '.join(known)}")
    if split is not None:
        for s in suites:
            try:
                suite_prompts(s, split, n, prompts_dir)
            except ValueError as e:
                error(f"--n {n}: {e}")

"""The files the repository ships, named once: the tiny target and its drafters, the prompts,
the results, the regenerated cache; and ``repo_relative``, how a recorded file names a path."""

from __future__ import annotations

from pathlib import Path


# The files the repository ships.
ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "data"
TINY_TARGET_DIR = DATA_DIR / "target"
TINY_DRAFTER_DIR = DATA_DIR / "drafter"
TINY_AR_DRAFTER_DIR = DATA_DIR / "ar_drafter"     # the EAGLE-3-style rival, same budget
TINY_DEEP_DRAFTER_DIR = DATA_DIR / "drafter_3l"   # a 3-layer DFlash drafter, same budget
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"   # the real chat target (hub.PACKAGED: offline)
SMOLLM2_DRAFTER_DIR = DATA_DIR / "smollm2_drafter"  # its DFlash drafter, trained here
PROMPTS_DIR = DATA_DIR / "prompts"
RESULTS_DIR = DATA_DIR / "results"
CACHE_DIR = ROOT / "cache"            # regenerated training data (not shipped)


def repo_relative(path) -> str:
    """How a recorded file names a path: relative to the repository when inside it (the same on
    every clone, e.g. ``data/drafter``), otherwise as given."""
    p = Path(path)
    try:
        return p.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)

"""The paper's defaults and the shipped files, named once (paper sections 3-5).

Every other module reads its defaults from here, so a reader can see in one screen what DFlash
fixes and what this project chose for its tiny, CPU-sized runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class PaperDefaults:
    """What the paper (and the published z-lab drafters) use for Qwen3 targets."""

    block_size: int = 16              # B: slot 0 = last committed token, slots 1..15 drafted
    num_layers: int = 5               # drafter decoder layers
    num_features: int = 5             # L_f target layers read (Qwen3-8B: [1, 9, 17, 25, 33])
    mask_token: str = "<|MASK|>"      # the block's placeholder token (Qwen3: id 151669)
    gamma: dict = field(default_factory=lambda: {16: 7.0, 10: 5.0, 8: 4.0})  # loss decay per B
    anchors_per_seq: int = 512        # random anchors drawn per training sequence
    lr: float = 6e-4
    warmup_ratio: float = 0.04
    grad_clip: float = 1.0
    max_length: int = 3072            # training sequence length


PAPER = PaperDefaults()

# What minidflash changes for its tiny target on a CPU (see data/README.md for the runs).
TINY_NUM_LAYERS = 1                   # a 1-layer drafter keeps a draft at ~2 ms on one core
TINY_NUM_FEATURES = 3                 # the tiny target has 6 layers: features of layers 1, 2, 3
TINY_ANCHORS_PER_SEQ = 32             # answers are ~60-250 tokens, not 3072


def gamma_for(block_size: int) -> float:
    """The paper's loss decay gamma for a block size (7 for B = 16, 5 for 10, 4 for 8); block
    sizes the paper does not train fall back to 16's value."""
    return PAPER.gamma.get(block_size, PAPER.gamma[16])


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

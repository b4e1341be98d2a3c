"""The training recipe's settings, as one object: ``TrainConfig`` (``python -m minidflash train``
derives one flag per field from it). Its defaults are the paper's (core/paper.py) or, where a
CPU needs smaller, the tiny run's choices below (see data/README.md for the runs)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from .core.paper import PAPER
from .paths import TINY_DRAFTER_DIR


# What minidflash changes for its tiny target on a CPU.
TINY_NUM_LAYERS = 1                   # a 1-layer drafter keeps a draft cheap on one core
TINY_NUM_FEATURES = 3                 # the tiny target has 6 layers: features of layers 1, 2, 3
TINY_ANCHORS_PER_SEQ = 32             # answers are ~60-250 tokens, not 3072


# The recipe's knobs (trainer.py): each field's default, its help on the command line
# (``python -m minidflash train``, one flag per field) and what it accepts, checked when a
# TrainConfig is made.
def knob(default, help: str, accepts: str, ok, type=None):
    return field(default=default, metadata={"help": help, "accepts": accepts, "ok": ok,
                                            "type": type})


_whole = lambda lo: lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= lo
_real = lambda lo, hi=float("inf"): lambda v: (isinstance(v, (int, float)) and not isinstance(
    v, bool) and lo <= v <= hi)
_bool = lambda v: isinstance(v, bool)


@dataclass
class TrainConfig:
    """The recipe's knobs; defaults are the paper's (PAPER) or, where a CPU needs smaller, the
    tiny target's (TINY_*). A value a field does not accept is a ValueError naming the field."""
    # drafter shape
    drafter: str = knob("dflash", "dflash: the block drafter; ar: the EAGLE-3-style rival "
                        "(ar_drafter.py)", "'dflash' or 'ar'", lambda v: v in ("dflash", "ar"))
    ttt_steps: int = knob(4, "ar: steps unrolled in training (training-time test)",
                          "an integer >= 1", _whole(1))
    num_layers: int = knob(TINY_NUM_LAYERS, "the drafter's decoder layers", "an integer >= 1",
                           _whole(1))
    block_size: int = knob(PAPER.block_size, "B: slot 0 and B-1 drafted slots",
                           "an integer >= 2", _whole(2))
    num_features: int = knob(TINY_NUM_FEATURES, "L_f target layers read, evenly spaced",
                             "an integer >= 1", _whole(1))
    target_layer_ids: list | None = knob(
        None, "the target layers read, e.g. 1,2,3 (default: --num-features evenly spaced)",
        "a list of layer ids >= 0, or None", lambda v: v is None or (
            isinstance(v, list) and len(v) > 0 and all(_whole(0)(i) for i in v)), type=list)
    use_target_features: bool = knob(True, "the target's features as context (--no-...: the "
                                     "ablation 'no target features', context zeroed)",
                                     "True or False", _bool)
    features: str = knob("online", "online: a target forward every step; offline: cached",
                         "'online' or 'offline'", lambda v: v in ("online", "offline"))
    # recipe
    anchors_per_seq: int = knob(TINY_ANCHORS_PER_SEQ, "anchors drawn per training sequence",
                                "an integer >= 1", _whole(1))
    random_anchors: bool = knob(True, "random anchors (--no-...: the ablation 'uniform blocks', "
                                "a fixed stride)", "True or False", _bool)
    gamma: float | None = knob(None, "the loss decay over slots (default: the paper's for the "
                               "block size; 0: no decay)", "a number >= 0, or None",
                               lambda v: v is None or _real(0)(v), type=float)
    steps: int = knob(2000, "optimizer steps", "an integer >= 0", _whole(0))
    batch_size: int = knob(8, "sequences a step (the global batch under torchrun)",
                           "an integer >= 1", _whole(1))
    lr: float = knob(PAPER.lr, "peak learning rate (AdamW)", "a number > 0",
                     lambda v: _real(0)(v) and 0 < v < float("inf"))
    warmup_ratio: float = knob(PAPER.warmup_ratio, "the share of steps warming up, linearly",
                               "a number in [0, 1]", _real(0, 1))
    min_lr_ratio: float = knob(0.1, "the cosine decay's floor, as a share of --lr",
                               "a number in [0, 1]", _real(0, 1))
    weight_decay: float = knob(0.0, "AdamW's weight decay", "a number >= 0", _real(0))
    grad_clip: float = knob(PAPER.grad_clip, "the gradients' norm is clipped to this",
                            "a number > 0", lambda v: _real(0)(v) and v > 0)
    seed: int = knob(0, "anchors, data order and fresh weights", "an integer", _whole(-2**63))
    backend: str | None = knob(None, "attention: sdpa, triton or flex (default: per device)",
                               "'sdpa', 'triton', 'flex' or None",
                               lambda v: v in (None, "sdpa", "triton", "flex"), type=str)
    eval_every: int = knob(200, "steps between evaluations and checkpoints", "an integer >= 1",
                           _whole(1))
    out: str = knob(str(TINY_DRAFTER_DIR), "the drafter's folder (other files in it stay)",
                    "a folder path", lambda v: isinstance(v, str) and v != "")
    # beyond the paper
    draft_vocab: int = knob(0, "K > 0: draft over the K most frequent answer tokens (0: all)",
                            "an integer >= 0", _whole(0))
    soft_labels: int = knob(0, "k > 0: KL to the target's top-k logits, instead of CE",
                            "an integer >= 0", _whole(0))
    init_from_target: bool = knob(False, "start the layers as copies of the target's last ones",
                                  "True or False", _bool)
    init_drafter: str | None = knob(None, "start from this saved drafter's weights (a fresh "
                                    "optimizer)", "a folder path, or None",
                                    lambda v: v is None or isinstance(v, str), type=str)
    compute_dtype: str = knob("float32", "the drafter's matmuls: bfloat16 under autocast, the "
                              "weights staying fp32", "'float32', 'bfloat16' or 'auto'",
                              lambda v: v in ("float32", "bfloat16", "auto"))

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Every field checked on its own: a value it does not accept is a ValueError that names
        the field and what it accepts."""
        for f in fields(self):
            value = getattr(self, f.name)
            if not f.metadata["ok"](value):
                raise ValueError(f"TrainConfig.{f.name} = {value!r}: {f.name} accepts "
                                 f"{f.metadata['accepts']}.")

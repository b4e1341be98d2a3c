"""The paper's defaults: what DFlash fixes for Qwen3 targets (paper sections 3-5, the published
z-lab drafters). The decoding and training settings of this package start from these."""

from __future__ import annotations

from dataclasses import dataclass, field


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


def gamma_for(block_size: int) -> float:
    """The paper's loss decay gamma for a block size (7 for B = 16, 5 for 10, 4 for 8); block
    sizes the paper does not train fall back to 16's value."""
    return PAPER.gamma.get(block_size, PAPER.gamma[16])

"""Training the DFlash drafter: the objective and one plain step (paper section 4.2).

1. Data: prompts whose responses the TARGET regenerated (greedy), so that the drafter learns to
   imitate the target, not a data set; the target's features of every position come with them.
2. Anchors: per sequence, n positions drawn without replacement among the response positions
   ``p <= S - B``. Block b is ``[x_{a_b}, MASK, ..., MASK]`` at positions ``a_b .. a_b + B - 1``.
3. One drafter pass trains every block of a sequence: keys are ``[context features of all S
   tokens ; all blocks]``, and ``mask.visible`` says who sees whom (context j < a_b, its own
   block both ways, no other block): exactly what one block sees at inference.
4. Labels and loss: slot k (1..B-1) of block b predicts ``x_{a_b + k}``; slot 0 has no loss.
       L = sum_{b,k} w_k CE(logits_{b,k}, x_{a_b+k}) / sum_{b,k} w_k,   w_k = exp(-(k-1)/gamma)
   Early slots matter most: a wrong slot k ends acceptance there, whatever follows.
5. The target's embedding and lm_head are shared and frozen; only the drafter trains.

The lab's trainer (``minidflash/trainer.py``) runs this over data sets with AdamW, warmup and
cosine decay, checkpoints, data parallelism, soft labels and a draft vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange


def sample_anchors(response_start: int, length: int, block_size: int, n: int,
                   generator: torch.Generator, random_anchors: bool = True) -> torch.Tensor:
    """Up to n sorted anchors in [response_start, length - block_size], without replacement.

    random_anchors=False is the ablation: blocks tiled uniformly from the response start.
    """
    lo, hi = response_start, length - block_size
    if hi < lo:
        return torch.zeros(0, dtype=torch.long)
    if not random_anchors:
        return torch.arange(lo, hi + 1, block_size)[:n]
    count = hi - lo + 1
    pick = torch.randperm(count, generator=generator)[:n]
    return (lo + pick).sort().values


def block_positions(anchors: torch.Tensor, block_size: int) -> torch.Tensor:
    """The position of every slot (N, n, B): the block at anchor a covers a .. a + B - 1."""
    return anchors[:, :, None] + torch.arange(block_size, device=anchors.device)


def block_inputs(ids: torch.Tensor, anchors: torch.Tensor, block_size: int, mask_token_id: int):
    """Block tokens (N, n*B) = [x_a, MASK, ...] per anchor, and their positions (N, n*B)."""
    N, n = anchors.shape
    tokens = torch.full((N, n, block_size), mask_token_id, dtype=torch.long, device=ids.device)
    tokens[:, :, 0] = ids.gather(1, anchors)
    pos = block_positions(anchors, block_size)                                 # (N, n, B)
    return rearrange(tokens, "N n B -> N (n B)"), rearrange(pos, "N n B -> N (n B)")


def block_labels(ids: torch.Tensor, anchors: torch.Tensor, block_size: int) -> torch.Tensor:
    """Labels (N, n, B): slot k of the block at anchor a is labelled x_{a+k}; slot 0 is -100."""
    pos = block_positions(anchors, block_size)                                 # (N, n, B)
    at = rearrange(pos.clamp(max=ids.shape[1] - 1), "N n B -> N (n B)")
    labels = rearrange(ids.gather(1, at), "N (n B) -> N n B", B=block_size)
    labels[pos >= ids.shape[1]] = -100   # past the end: no label (anchors <= S - B avoid this)
    labels[:, :, 0] = -100
    return labels


def loss_weights(block_size: int, gamma: float | None) -> torch.Tensor:
    """w_k = exp(-(k-1)/gamma) for k = 1..B-1, w_0 = 0; gamma 0 means no decay."""
    k = torch.arange(block_size, dtype=torch.float32)
    w = torch.ones(block_size) if not gamma else torch.exp(-(k - 1) / gamma)
    w[0] = 0.0
    return w


def drafter_logits(drafter, target, ids, hidden, anchors):
    """Logits (N, n, B, V) for all blocks of each sequence in one drafter pass.

    ids (N, S) tokens, hidden (N, S, L_f*H) target features of every position, anchors (N, n).
    """
    N, S = ids.shape
    B = drafter.block_size
    assert hidden.shape[:2] == (N, S) and anchors.shape[0] == N, "ids, hidden, anchors agree"
    tokens, pos = block_inputs(ids, anchors, B, drafter.mask_token_id)       # (N, n*B)
    ctx_pos = torch.arange(S, device=ids.device).expand(N, -1)
    x = target.get_input_embeddings()(tokens)                                 # (N, n*B, H)
    h = drafter(x, hidden, torch.cat([ctx_pos, pos], 1), anchors=anchors)     # (N, n*B, H)
    return rearrange(drafter.logits(target, h), "N (n B) V -> N n B V", B=B)  # V, or K columns


def block_loss(logits, labels, weights, valid):
    """The weighted cross-entropy over slots, and tau at these anchors (1 + the leading correct
    slots). logits (N, n, B, V), labels (N, n, B) (-100: no label), weights (B,), valid (N, n)."""
    w = weights[None, None, :] * valid[:, :, None] * (labels >= 0)            # (N, n, B)
    ce = F.cross_entropy(logits.flatten(0, 2).float(), labels.clamp(min=0).flatten(),
                         reduction="none").view(labels.shape)                   # (N, n, B)
    loss = (ce * w).sum() / w.sum().clamp(min=1e-9)
    with torch.no_grad():
        correct = (logits.argmax(-1) == labels)[:, :, 1:].long()
        tau = ((correct.cumprod(-1).sum(-1) + 1) * valid).sum() / valid.sum().clamp(min=1)
    return loss, float(tau)


def train_step(drafter, target, ids, hidden, response_start, optimizer, generator, n_anchors,
               gamma):
    """One plain step on a batch: ids (N, S) regenerated tokens, hidden (N, S, L_f*H) the
    target's features of them, response_start (N,) where each answer begins. Returns (loss, tau)."""
    B = drafter.block_size
    anchors = [sample_anchors(int(r), ids.shape[1], B, n_anchors, generator) for r in response_start]
    n = max(1, max(len(a) for a in anchors))                  # rows with fewer: padded, no loss
    valid = torch.tensor([[float(i < len(a)) for i in range(n)] for a in anchors])      # (N, n)
    anchors = torch.stack([torch.cat([a, a.new_zeros(n - len(a))]) for a in anchors])  # (N, n)
    logits = drafter_logits(drafter, target, ids, hidden, anchors)               # (N, n, B, V)
    loss, tau = block_loss(logits, block_labels(ids, anchors, B), loss_weights(B, gamma), valid)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return float(loss), tau

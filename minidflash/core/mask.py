"""Who sees whom in the drafter's attention: the one place this rule lives (paper section 4.2).

Keys are laid out as ``[context features of S tokens ; block 0 ; block 1 ; ...]``, each block
``block_size`` slots long. Block ``b`` starts at its *anchor*: a clean token at position
``anchor_b`` in slot 0, then ``block_size - 1`` MASK slots. A query in block ``b`` sees

* context key ``j``  iff  ``j < anchor_b``  (strictly: at inference the last committed token's
  feature is not known yet, so in training the anchor's own feature must not be seen either),
* every slot of its own block (bidirectional: this is block *diffusion*, not causal decoding),
* no slot of any other block.

Inference is the one-block case with ``anchor = S`` (the block follows all committed context),
so there every key is visible and no mask is needed.

``visible`` is written with plain operators only, so the same function works on Python ints,
on broadcast torch tensors (``block_mask``), and compiled by Triton inside the kernel
(``triton.jit(visible)``).
"""

from __future__ import annotations

import torch


def visible(q_block, k, anchor, num_context, block_size):
    """True where a query of block ``q_block`` (anchored at ``anchor``) may attend to key ``k``.

    ``k`` indexes the concatenated keys: ``k < num_context`` is a context feature (its position is
    ``k``), ``k >= num_context`` is slot ``(k - num_context) % block_size`` of block
    ``(k - num_context) // block_size``.
    """
    return ((k < num_context) & (k < anchor)) | (
        (k >= num_context) & ((k - num_context) // block_size == q_block))


def block_mask(anchors: torch.Tensor, num_context: int, block_size: int) -> torch.Tensor:
    """Dense boolean mask (n*B, S + n*B) for n blocks at ``anchors`` (n,) over S context tokens.

    Row ``b * B + i`` is slot i of block b; True means "may attend".
    """
    n = anchors.shape[0]
    q_block = torch.arange(n * block_size, device=anchors.device) // block_size  # (n*B,)
    k = torch.arange(num_context + n * block_size, device=anchors.device)         # (S + n*B,)
    anchor = anchors.to(torch.long)[q_block]                                      # (n*B,)
    return visible(q_block[:, None], k[None, :], anchor[:, None], num_context, block_size)


def dense_mask(anchors: torch.Tensor, num_context: int, block_size: int) -> torch.Tensor:
    """Batched :func:`block_mask`: anchors (N, n) -> (N, 1, n*B, S + n*B), ready for SDPA.

    The one place a dense mask is built (the SDPA backend, the kernel's reference, pictures).
    """
    return torch.stack([block_mask(a, num_context, block_size) for a in anchors])[:, None]

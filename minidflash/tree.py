"""Tree verification of DFlash drafts (DDTree, arXiv 2604.12989; DFLASH_SPEC section 12).

Glossary of the shape comments: B block size, S sequence, H hidden, V vocabulary (or K, the
drafter's draft vocabulary), L_f target features, n tree nodes.

The chain (verifier.py) verifies one guess per slot: [t, d_1..d_{B-1}]. But the drafter drafts
the B-1 slots *in parallel*: slot j has its own distribution q_j, the same whatever the slots
before it hold. A candidate path x_1..x_j then scores

    score(x_1..x_j) = log q_1(x_1) + ... + log q_j(x_j)            (the log of prod_i q_i(x_i))

Every prefix of a path scores at least as high as the path (log q <= 0), so the n best paths
form a prefix-closed set: a tree, rooted at t, found best-first from the per-slot top-k lists
(``build_tree``). The tree costs ONE target pass, as the chain does:

1. Flatten [root = t, node_1..node_n], parents first. Node i sits at position start + depth(i)
   and may see the committed cache, the root, its ancestors and itself (``tree_attention_mask``).
   The target's output at a node is its next-token choice after that node's path.
   transformers (5.24) takes a 4D mask as given: an additive float mask in the target's dtype
   works under SDPA and eager attention alike (a bool mask under SDPA only), with a DynamicCache
   and per-node position_ids.
2. Accept (``accept_tree``): from the root, take the target's token y at the current node (the
   argmax; at T > 0 a sample of softmax(logits / T)); if a child holds y, move to it and repeat,
   else stop. Emit the path's tokens and y: tokens per step = path length + 1. Every emitted
   token is the target's own choice after the committed prefix, so greedy output is identical to
   plain decoding and sampled output identically distributed (the tree depends on the drafter
   only, never on the target's draws).
3. Keep only the root's and the path's columns of the target's KV cache (``keep_columns``) and
   give the drafter their target features as its next context, as the chain gives it the
   accepted prefix's.

With top_k = 1 and n = B-1 the tree is the chain. One sequence at a time (N = 1).

On a CPU every node verified is paid for. With a cost curve (``cost``, verify_cost.py) a step
keeps only the first n of the nodes in the order they left the heap, every prefix of which is a
tree: the n whose expected tokens, 1 + the sum of their paths' probabilities, per unit of
measured time are the most; where no n pays, the next steps skip the drafter, as the chain does.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import torch

from . import batch as ragged
from .core.verifier import Outcome, keep_columns  # noqa: F401  (keep_columns: a tree's path kept)
from .decoding import Pick
from .verify_cost import VerifyCost


@dataclass
class Tree:
    tokens: torch.Tensor    # (n,) index into the drafter's logits (V, or K: drafter.token_ids)
    parents: torch.Tensor   # (n,) index of the parent node, -1 for the root's children
    depths: torch.Tensor    # (n,) 1 for the root's children: node i drafts slot depths[i]
    scores: torch.Tensor    # (n,) log prod_i q_i(x_i) of the node's path


def build_tree(log_q: torch.Tensor, node_budget: int, top_k: int) -> Tree:
    """The node_budget best paths over the per-slot top-k lists, parents first.

    log_q (B-1, V): the drafter's logits or log-probabilities at slots 1..B-1 (normalised here).
    Best-first: a heap of candidates, each the next sibling (same parent, next token of the top-k
    list) or the first child (the best token of the next slot) of a node already taken. Both score
    no higher than the node that pushed them, so nodes leave the heap best first and every node
    after its parent: the first node_budget popped are the best paths, and a tree.
    """
    D = log_q.shape[0]
    k = min(top_k, log_q.shape[-1])
    vals, idx = torch.log_softmax(log_q.float(), -1).topk(k, dim=-1)          # (B-1, k) best first
    vals, idx = vals.tolist(), idx.tolist()
    tokens, parents, depths, scores = [], [], [], []
    heap = [(-vals[0][0], 0, -1, 0, 0)] if D > 0 and node_budget > 0 else []
    pushed = 1                                   # entries: (-score, order, parent, slot, rank)
    while heap and len(tokens) < node_budget:
        neg, _, parent, slot, rank = heapq.heappop(heap)
        node = len(tokens)
        tokens.append(idx[slot][rank])
        parents.append(parent)
        depths.append(slot + 1)
        scores.append(-neg)
        base = scores[parent] if parent >= 0 else 0.0
        if rank + 1 < k:                         # next sibling
            heapq.heappush(heap, (-(base + vals[slot][rank + 1]), pushed, parent, slot, rank + 1))
            pushed += 1
        if slot + 1 < D:                         # first child
            heapq.heappush(heap, (-(scores[node] + vals[slot + 1][0]), pushed, node, slot + 1, 0))
            pushed += 1
    as_long = lambda x: torch.tensor(x, dtype=torch.long, device=log_q.device)
    return Tree(as_long(tokens), as_long(parents), as_long(depths),
                torch.tensor(scores, dtype=torch.float32, device=log_q.device))


def tree_attention_mask(parents: torch.Tensor, past_length: int,
                        dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The 4D mask (1, 1, 1+n, past+1+n) of a verify pass over [root, node_1..node_n] after
    past_length cached tokens: every query sees the whole cache, the root, its ancestors, itself.

    parents (n,) parents-first (parents[i] < i, -1 for the root). dtype: a float dtype gives the
    additive mask (0 seen, the dtype's minimum hidden), which transformers' SDPA and eager
    attention both take; torch.bool gives True where seen, which SDPA takes and eager does not.
    """
    up = parents.tolist()
    if any(not -1 <= p < i for i, p in enumerate(up)):
        raise ValueError("parents must list every node after its parent (parents[i] < i, -1 for "
                         "the root's children), as build_tree orders them.")
    n = len(up)
    seen = torch.eye(1 + n, dtype=torch.bool)     # (1+n, 1+n) built on the CPU, moved once
    for i, p in enumerate(up):                    # row i+1 = node i; its parent's row is complete
        seen[i + 1] |= seen[p + 1]
    seen = torch.cat([seen.new_ones(1 + n, past_length), seen], 1)            # (1+n, past+1+n)
    seen = seen.to(parents.device)
    if dtype == torch.bool:
        return seen[None, None]
    mask = torch.zeros(seen.shape, dtype=dtype, device=parents.device)
    return mask.masked_fill(~seen, torch.finfo(dtype).min)[None, None]


@dataclass
class TreeDraft:
    """A tree for the core's loop (core/verifier.py): ids (1, 1+n) = [root t, node_1..node_n],
    node i at position start + depths[i], seeing the cache, the root, its ancestors, itself."""
    ids: torch.Tensor         # (1, 1+n) full-vocabulary ids
    parents: torch.Tensor     # (n,) parents first, -1 for the root's children
    depths: torch.Tensor      # (n,)
    dtype: torch.dtype        # the target's: the additive mask's

    def inputs(self, state) -> dict:
        """Positions and the tree's mask; the root alone (a step that skipped the drafter) needs
        no mask: its pass is plain decoding's."""
        pos = int(state.start) + torch.cat([self.depths.new_zeros(1), self.depths])[None]
        if not len(self.parents):
            return {"position_ids": pos}
        return {"position_ids": pos,
                "attention_mask": tree_attention_mask(self.parents, int(state.start), self.dtype)}

    def walk(self, logits, final, pick) -> Outcome:
        """From the root, take the target's token y at the current node; if a child holds y,
        move to it and repeat, else stop: the path, and y as the bonus. Greedy: every node's
        choice at once; a sample only where the walk goes (the tree never sees the draws)."""
        tokens, parents = self.ids[0, 1:].tolist(), self.parents.tolist()
        child = {(p + 1, t): i + 1 for i, (p, t) in enumerate(zip(parents, tokens))}
        every = None if getattr(pick, "samples", False) else pick(logits, final)[0].tolist()
        path, node = [], 0
        while True:
            y = every[node] if every is not None else int(pick(logits[:, node:node + 1], None)[0, 0])
            if (node, y) not in child:
                return Outcome([[0] + path], torch.tensor([y], device=self.ids.device))
            node = child[(node, y)]
            path.append(node)


class TreeProposer:
    """The proposer of a tree (``speculative_generate`` with a config's tree): one drafter pass,
    then the node_budget best paths; with a cost curve the n of them that pay, and plain steps
    (the root alone) after trees that did not, as the chain's cost model does."""

    def __init__(self, target, drafter, block_size: int, node_budget: int, top_k: int,
                 cost: VerifyCost | bool = False):
        self.target, self.drafter, self.B, self.cost = target, drafter, block_size, cost
        self.node_budget, self.top_k, self.skip, self.wait, self.checked = node_budget, top_k, 0, 0, False

    def __call__(self, state) -> TreeDraft:
        if not self.checked:                     # kept columns are gathered: full attention only
            ragged.check_cache(state.cache)
            self.checked = True
        root, dtype = state.token, self.target.dtype                           # (1,)
        if self.wait:                            # a plain step: the root alone
            self.wait -= 1
            none = torch.zeros(0, dtype=torch.long, device=root.device)
            return TreeDraft(root[None], none, none, dtype)
        c = state.context()
        log_q = self.drafter.block_logits(self.target, root, c["target_hidden"], c["start"],
                                          c["cache"], self.B)                  # (1, B-1, V)
        tree = build_tree(log_q[0], self.node_budget, self.top_k)
        n = len(tree.tokens)
        if self.cost:
            n, rate = self.cost.best_count(tree.scores.exp())
            self.skip = self.wait = self.cost.next_skip(rate, self.skip)
        tokens = self.drafter.token_ids(tree.tokens[:n])                        # (n,)
        return TreeDraft(torch.cat([root, tokens])[None], tree.parents[:n], tree.depths[:n], dtype)


def accept_tree(tokens: torch.Tensor, parents: torch.Tensor, logits: torch.Tensor,
                temperature: float = 0.0, generator=None, hidden=None,
                head=None) -> tuple[list[int], int]:
    """Walk the tree (``TreeDraft.walk``). tokens (n,) full-vocabulary ids, parents (n,), logits
    (1+n, V) the target's at [root, nodes]. Returns (path, y): path the accepted nodes as rows of
    logits (1..n), root to leaf, and y the target's token after the last of them (the bonus).
    hidden (1+n, H), head: a bf16 target's greedy near-ties decided in fp32 (``decoding.Pick``)."""
    draft = TreeDraft(torch.cat([tokens.new_zeros(1), tokens])[None], parents,
                      torch.zeros_like(parents), logits.dtype)    # depths: the walk reads none
    out = draft.walk(logits[None], None if hidden is None else hidden[None],
                     Pick(temperature, generator, head))
    return out.kept[0][1:], int(out.bonus[0])

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
from transformers import DynamicCache

from . import batch as ragged
from .decoding import (GenerationResult, choose, clock, crop_cache, prepare, result, target_pass,
                       tie_head)
from .verify_cost import VerifyCost
from .core.drafter import target_features
from .decoding_config import DecodingConfig


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


def accept_tree(tokens: torch.Tensor, parents: torch.Tensor, logits: torch.Tensor,
                temperature: float = 0.0, generator=None, hidden=None,
                head=None) -> tuple[list[int], int]:
    """Walk the tree. tokens (n,) full-vocabulary ids, parents (n,), logits (1+n, V) the target's
    at [root, nodes]. Returns (path, y): path the accepted nodes as rows of logits (1..n), root
    to leaf, and y the target's token after the last of them (the bonus). hidden (1+n, H), head:
    a bf16 target's greedy near-ties decided in fp32 (``decoding.greedy_choice``)."""
    child = {(p + 1, t): i + 1 for i, (p, t) in enumerate(zip(parents.tolist(), tokens.tolist()))}
    greedy = None
    if temperature == 0:           # every node's choice at once; a sample only where walked
        greedy = choose(logits[None], 0, None, None if hidden is None else hidden[None], head)
        greedy = greedy[0].tolist()
    path, node = [], 0
    while True:
        y = (greedy[node] if greedy is not None
             else int(choose(logits[node][None, None], temperature, generator)[0, 0]))
        if (node, y) not in child:
            return path, y
        node = child[(node, y)]
        path.append(node)


def keep_columns(cache: DynamicCache, start: int, keep: list[int]) -> None:
    """Keep columns 0..start-1 and start + keep (ascending) of every layer; drop the rest.

    The kept columns are moved to start, start+1, ... and the cache cropped after them: a + 1
    columns copied per layer, not all of them (batch.compact gathers every column, for rows
    that differ; it gives the same cache here, tests/test_tree.py checks).
    """
    src = torch.tensor(keep, dtype=torch.long, device=cache.layers[0].keys.device) + start
    for layer in cache.layers:
        layer.keys[:, :, start:start + len(keep)] = layer.keys[:, :, src]      # (N, Hkv, a+1, D)
        layer.values[:, :, start:start + len(keep)] = layer.values[:, :, src]
    crop_cache(cache, start + len(keep))


@torch.inference_mode()
def tree_generate(target, drafter, input_ids: torch.Tensor, cfg: DecodingConfig,
                  generator: torch.Generator | None = None) -> GenerationResult:
    """Decode after input_ids (1, S), verifying a tree of drafts per step: the loop that
    ``speculative_generate`` runs for a config with a tree (resolved by ``decoding.prepare``:
    its block size, {"node_budget": n, "top_k": k}, the cost model or False).

    The tree is at most B-1 deep. cost: each step verifies the n best nodes (n <= node_budget)
    with the most expected tokens per unit of measured time, a node's chance being its path's
    probability, and skips the drafter after steps that did not pay, as the chain does.
    A config not resolved yet (tree=True, block_size None, cost=True, lean None) is resolved
    here as ``speculative_generate`` resolves it; one without a tree is refused.
    """
    if not (isinstance(cfg, DecodingConfig) and isinstance(cfg.tree, dict) and cfg.block_size
            and (cfg.cost is False or isinstance(cfg.cost, VerifyCost)) and cfg.lean is not None):
        cfg = prepare(target, drafter, input_ids, cfg, generator=generator)
    if not isinstance(cfg.tree, dict):
        raise ValueError(f"tree_generate verifies a tree, and the config {str(cfg)!r} names none: "
                         f"pass tree={{'node_budget': n, 'top_k': k}} (or call "
                         f"speculative_generate, which runs a chain).")
    B, T, device, layers = cfg.block_size, cfg.temperature, input_ids.device, drafter.target_layer_ids
    node_budget, top_k, cost = cfg.tree["node_budget"], cfg.tree["top_k"], cfg.cost
    stops = set(cfg.stop_token_ids)
    head = tie_head(target, cfg)                         # None: fp32, sampling, or not asked
    # 1. Prefill: the target reads the prompt; its first token and its features.
    t0, cache = clock(device), DynamicCache()
    logits, states, last = target_pass(target, input_ids, cache, True, head is not None, 1,
                                       lean=cfg.lean, exact=cfg.rows)
    ragged.check_cache(cache)                    # kept columns are gathered: full attention only
    token = int(choose(logits[:, -1:], T, generator, last, head)[0, 0])
    hidden = target_features(states, layers)                                  # (1, S, L_f*H)
    draft_cache = drafter.new_cache()
    t1 = clock(device)
    new, drafted, lengths, verified = [token], [False], [], []
    times = {"prefill": t1 - t0, "draft": 0.0, "verify": 0.0}
    start = input_ids.shape[1]                   # position of `token`, the tree's root
    done = token in stops
    skip = wait = 0                              # plain steps after trees that did not pay
    while len(new) < cfg.max_new_tokens and not done:
        # 2. Draft: one drafter pass, then the best node_budget paths (the n of them that pay).
        ts = clock(device)
        root, fed = torch.tensor([token], device=device), not wait
        if fed:
            log_q = drafter.block_logits(target, root, hidden, start, draft_cache, B)  # (1, B-1, V)
            tree = build_tree(log_q[0], node_budget, top_k)
            if cost:
                n, rate = cost.best_count(tree.scores.exp())
                skip = wait = cost.next_skip(rate, skip)
                tree = Tree(tree.tokens[:n], tree.parents[:n], tree.depths[:n], tree.scores[:n])
        else:                                    # a plain step: the root alone
            wait -= 1
            none = torch.zeros(0, dtype=torch.long, device=device)
            tree = Tree(none, none, none, none.float())
        tokens = drafter.token_ids(tree.tokens)                                 # (n,)
        tv = clock(device)
        # 3. Verify root + all nodes in one target pass, each node at start + depth.
        ids = torch.cat([root, tokens])[None]                                   # (1, 1+n)
        pos = start + torch.cat([tree.depths.new_zeros(1), tree.depths])[None]  # (1, 1+n)
        mask = tree_attention_mask(tree.parents, start, target.dtype)           # (1, 1, 1+n, S+1+n)
        logits, states, last = target_pass(target, ids, cache, True, head is not None,
                                           lean=cfg.lean, exact=cfg.rows,
                                           position_ids=pos, attention_mask=mask)
        te = clock(device)
        # 4. Accept a path, keep its columns; its features are the drafter's next context.
        path, token = accept_tree(tokens, tree.parents, logits[0], T, generator,
                                  None if last is None else last[0], head)
        committed = tokens[[p - 1 for p in path]].tolist() + [token]
        keep = [0] + path
        keep_columns(cache, start, keep)
        h = target_features(states, layers)[:, keep]                            # (1, a+1, L_f*H)
        hidden = h if fed else torch.cat([hidden, h], 1)   # a skipped draft leaves its own unread
        new += committed
        done = not stops.isdisjoint(committed)
        drafted += [True] * len(path) + [False]
        lengths.append(len(path) + 1)
        verified.append(len(tokens))
        start += len(path) + 1
        times["draft"] += tv - ts
        times["verify"] += te - tv
    times["decode"] = clock(device) - t1
    return result(input_ids, new, cfg, lengths, drafted, times, verified=verified)

"""Tree verification (tree.py), each piece against the obvious version of it.

build_tree: the best-N paths by brute force over all paths, prefix-closed, parents first. The
tree pass: every node's logits and last hidden state equal a sequential decode of its path
(Qwen3 and Llama; additive float and bool masks under SDPA, float under eager). keep_columns:
exactly the root's and the path's columns (against batch.compact, and by decoding on from the
cache). tree_generate: greedy output identical to plain greedy decoding for random drafters and
for drafters that are often right (paths accepted, through second-ranked branches too), with stop
tokens; top_k 1 is the chain; the drafter's context is the committed tokens' target features. At
T = 1 and T = 0.5 the outputs' distribution is the target's (chi-square), and planted bugs (a wrong
walk, an ignored temperature) fail it. Bad arguments (ids outside the vocabulary, a NaN
temperature, a bool for an integer) are refused with a clear error.
"""

import itertools
import random

import pytest
import torch
from scipy import stats
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

import minidflash.tree as tree_mod
from minidflash import decoding
from minidflash.core.verifier import Outcome
from minidflash.ar_drafter import ARDrafter, make_ar_config
from minidflash import batch as ragged
from minidflash.core.drafter import DFlashDrafter, target_features
from minidflash.checkpoints import load_drafter, save_drafter
from minidflash.decoding_config import DecodingConfig, check_tree, set_decoding
from minidflash.tree import accept_tree, build_tree, keep_columns, tree_attention_mask
from minidflash.decoding import cache_kwargs, choose
from minidflash.verifier import speculative_generate, speculative_generate_batch
from minidflash.verify_cost import VerifyCost
from tests import helpers
from tests.helpers import random_drafter, tiny_target


def plain_greedy(target, ids, n, stop=None):
    return target.generate(ids, do_sample=False, max_new_tokens=n, eos_token_id=stop,
                           pad_token_id=0, attention_mask=torch.ones_like(ids))


def paths(tree) -> list[tuple]:
    """Each node's path from the root, as a tuple of tokens."""
    out = []
    for t, p in zip(tree.tokens.tolist(), tree.parents.tolist()):
        out.append((out[p] if p >= 0 else ()) + (t,))
    return out


# --------------------------------------------------------------------------------------------
# build_tree and the mask
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(12))
def test_build_tree_is_the_best_paths(seed):
    rng = random.Random(seed)
    D, V = rng.randint(1, 4), rng.randint(2, 7)
    k = rng.randint(1, V)
    logits = torch.randn(D, V, generator=torch.Generator().manual_seed(seed)) * 2
    log_q = torch.log_softmax(logits.double(), -1)
    top = log_q.topk(k, -1).indices.tolist()
    every = [p for j in range(1, D + 1) for p in itertools.product(*top[:j])]   # all candidates
    score = {p: sum(float(log_q[i, x]) for i, x in enumerate(p)) for p in every}
    for budget in sorted({0, 1, rng.randint(2, 8), len(every), len(every) + 3}):
        tree = build_tree(logits, budget, k)
        got = paths(tree)
        best = sorted(every, key=score.get, reverse=True)[:budget]
        assert set(got) == set(best) and len(got) == len(best) == min(budget, len(every))
        assert all(p[:-1] in got[:i] for i, p in enumerate(got) if len(p) > 1)  # parents first
        assert (tree.parents < torch.arange(len(got))).all()
        assert tree.depths.tolist() == [len(p) for p in got]
        torch.testing.assert_close(tree.scores.double(), torch.tensor([score[p] for p in got],
                                   dtype=torch.double), atol=1e-5, rtol=0)


def test_build_tree_edges():
    logits = torch.randn(5, 11)
    empty = build_tree(logits, 0, 4)
    assert empty.tokens.numel() == empty.parents.numel() == empty.depths.numel() == 0
    chain = build_tree(logits, 5, 1)                     # top_k 1: the chain of argmaxes
    assert chain.tokens.tolist() == logits.argmax(-1).tolist()
    assert chain.parents.tolist() == [-1, 0, 1, 2, 3] and chain.depths.tolist() == [1, 2, 3, 4, 5]
    assert build_tree(logits[:, :2], 100, 3).tokens.numel() == 2 + 4 + 8 + 16 + 32  # k capped at V


def test_tree_attention_mask_sees_cache_ancestors_and_self():
    parents = build_tree(torch.randn(4, 6), 20, 3).parents
    n, past = len(parents), 7
    seen = tree_attention_mask(parents, past, torch.bool)[0, 0]
    additive = tree_attention_mask(parents, past, torch.float32)[0, 0]
    assert seen.shape == additive.shape == (1 + n, past + 1 + n)
    assert torch.equal(additive == 0, seen)
    for q in range(1 + n):                               # row q: the root (0) or node q - 1
        line, node = {0, q}, q - 1
        while node >= 0:
            line.add(node + 1)
            node = int(parents[node])
        expect = [True] * past + [j in line for j in range(1 + n)]
        assert seen[q].tolist() == expect, f"query {q}"
    assert tree_attention_mask(parents[:0], 3).shape == (1, 1, 1, 4)
    with pytest.raises(ValueError, match="parents first|after its parent"):
        tree_attention_mask(torch.tensor([-1, 2, 0]), 3)


# --------------------------------------------------------------------------------------------
# The tree pass and the cache it leaves
# --------------------------------------------------------------------------------------------

def tiny_llama(seed=0, vocab=97):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    model = LlamaForCausalLM(cfg).eval().requires_grad_(False)
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
    return model


@pytest.mark.parametrize("model,attention,kind", [
    ("qwen3", "sdpa", torch.float32), ("qwen3", "sdpa", torch.bool), ("qwen3", "eager", torch.float32),
    ("llama", "sdpa", torch.float32), ("llama", "sdpa", torch.bool)])
def test_tree_pass_equals_sequential_decode(model, attention, kind):
    """Each node's logits and last hidden state after ONE pass over the tree equal those of its
    path decoded on its own; after keep_columns the cache decodes on as the path's own would."""
    target = tiny_target(3, layers=3) if model == "qwen3" else tiny_llama(3)
    target.set_attn_implementation(attention)
    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, 96, (1, 9), generator=gen)
    root = torch.randint(0, 96, (1, 1), generator=gen)
    tree = build_tree(torch.randn(5, 96, generator=gen), 14, 3)
    n, S = len(tree.tokens), prompt.shape[1]
    with torch.no_grad():
        cache = DynamicCache()
        target(input_ids=prompt, **cache_kwargs(target, cache))
        ids = torch.cat([root[0], tree.tokens])[None]                           # (1, 1+n)
        pos = S + torch.cat([torch.zeros(1, dtype=torch.long), tree.depths])[None]
        out = target(input_ids=ids, position_ids=pos, **cache_kwargs(target, cache),
                     attention_mask=tree_attention_mask(tree.parents, S, kind),
                     output_hidden_states=True)
        for q, path in enumerate([()] + paths(tree)):
            alone = target(torch.cat([prompt, root, torch.tensor([path], dtype=torch.long)], 1),
                           output_hidden_states=True)
            torch.testing.assert_close(out.logits[0, q], alone.logits[0, -1], atol=1e-4, rtol=0)
            torch.testing.assert_close(out.hidden_states[-1][0, q], alone.hidden_states[-1][0, -1],
                                       atol=1e-4, rtol=0)
        leaf = int(tree.depths.argmax())                 # the deepest node's path is kept
        keep, node = [], leaf
        while node >= 0:
            keep, node = [node + 1] + keep, int(tree.parents[node])
        keep_columns(cache, S, [0] + keep)
        assert cache.get_seq_length() == S + 1 + len(keep)
        nxt = torch.tensor([[5]])
        on = target(input_ids=nxt, position_ids=torch.tensor([[S + 1 + len(keep)]]),
                    **cache_kwargs(target, cache))
        full = torch.cat([prompt, root, tree.tokens[[k - 1 for k in keep]][None], nxt], 1)
        torch.testing.assert_close(on.logits[0, -1], target(full).logits[0, -1], atol=1e-4, rtol=0)


def test_keep_columns_keeps_root_and_path():
    """Columns 0..start-1 and start + keep, in order, in every layer: the same cache as
    batch.compact makes from the equivalent valid mask."""
    start, n, keep = 6, 7, [0, 2, 3, 7]
    made = []
    for _ in range(2):
        cache, gen = DynamicCache(), torch.Generator().manual_seed(0)
        for layer in range(3):
            cache.update(torch.randn(1, 2, start + 1 + n, 4, generator=gen),
                         torch.randn(1, 2, start + 1 + n, 4, generator=gen), layer)
        made.append(cache)
    cache, other = made
    before = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]
    keep_columns(cache, start, keep)
    columns = list(range(start)) + [start + k for k in keep]
    valid = torch.zeros(1, start + 1 + n, dtype=torch.bool)
    valid[0, columns] = True
    ragged.compact(other, valid, at=0.0)
    assert cache.get_seq_length() == other.get_seq_length() == len(columns)
    for (k, v), layer, ref in zip(before, cache.layers, other.layers):
        assert torch.equal(layer.keys, k[:, :, columns]) and torch.equal(layer.values, v[:, :, columns])
        assert torch.equal(layer.keys, ref.keys) and torch.equal(layer.values, ref.values)


def test_accept_tree_walks_to_the_target_choice():
    tokens, parents = torch.tensor([4, 7, 2, 4, 9]), torch.tensor([-1, -1, 0, 1, 2])
    logits = torch.zeros(6, 10)
    logits[0, 7] = logits[2, 4] = logits[4, 1] = 1      # root -> 7 (node 2) -> 4 (node 4) -> 1
    assert accept_tree(tokens, parents, logits) == ([2, 4], 1)
    logits[0, 7], logits[0, 3] = 0, 1                    # 3 is no child of the root
    assert accept_tree(tokens, parents, logits) == ([], 3)


# --------------------------------------------------------------------------------------------
# Greedy: token identity with plain decoding
# --------------------------------------------------------------------------------------------

class BoostedDrafter(DFlashDrafter):
    """A random drafter told the target's greedy continuation ``reference``: at each slot the
    true token is made the drafter's first choice (p_first), its second behind a random decoy
    (p_second), or left where it is. Records every block_logits call (start, features, cache)."""

    def __init__(self, base, reference, p_first, p_second, seed):
        super().__init__(base.config)
        self.load_state_dict(base.state_dict())
        self.to(next(base.parameters()).dtype).eval().requires_grad_(False)
        self.reference, self.p_first, self.p_second = reference[0], p_first, p_second
        self.rng = torch.Generator().manual_seed(seed)
        self.calls = []

    def block_logits(self, target, last_token, target_hidden, start, cache, block_size=None,
                     context_mask=None):
        self.calls.append((int(start), target_hidden.clone(), cache.get_seq_length()))
        logits = super().block_logits(target, last_token, target_hidden, start, cache,
                                      block_size, context_mask).clone()        # (1, B-1, V)
        truth = self.reference[start + 1:start + 1 + logits.shape[1]].tolist()
        for j, t in enumerate(truth):
            u, decoy = float(torch.rand(1, generator=self.rng)), t
            while decoy == t:
                decoy = int(torch.randint(0, logits.shape[-1], (1,), generator=self.rng))
            top = logits[0, j].max()
            if u < self.p_first + self.p_second:
                logits[0, j, t] = top + 4
            if self.p_first <= u < self.p_first + self.p_second:
                logits[0, j, decoy] = top + 5
        return logits


@pytest.mark.parametrize("seed", range(8))
def test_greedy_identical_random_drafter(seed):
    rng = random.Random(seed)
    target = tiny_target(seed, vocab=rng.choice([61, 97]), layers=rng.choice([2, 3]))
    drafter = random_drafter(target, seed)
    ids = torch.randint(0, target.config.vocab_size - 1, (1, rng.randint(1, 20)))
    n, B = rng.randint(1, 50), rng.randint(2, 16)
    full = plain_greedy(target, ids, n)
    stop = int(full[0, rng.randrange(ids.shape[1], full.shape[1])])
    ref = plain_greedy(target, ids, n, stop=stop)
    for budget, k in [(1, 1), (B - 1, 1), (8, 4), (rng.randint(1, 30), rng.randint(1, 8))]:
        out = speculative_generate(target, drafter, ids, max_new_tokens=n, block_size=B,
                                   stop_token_ids=[stop], tree={"node_budget": budget, "top_k": k})
        assert torch.equal(out.output_ids, ref), f"B={B} budget={budget} top_k={k}"


@pytest.mark.parametrize("seed", range(6))
def test_greedy_identical_with_accepted_paths(seed):
    """A drafter often right, often only at its second choice: long paths are accepted, through
    second-ranked branches the chain never drafts; the output is still plain decoding's."""
    rng = random.Random(100 + seed)
    target = tiny_target(seed, vocab=89, layers=3)
    ids = torch.randint(0, 88, (1, rng.randint(2, 12)))
    n = rng.randint(40, 80)
    full = plain_greedy(target, ids, n)
    new = full[0, ids.shape[1]:].tolist()
    stop = rng.choice([t for t in new if new.index(t) >= 20] or [None])  # a late first stop
    ref, stops = plain_greedy(target, ids, n, stop=stop), [stop] if stop is not None else []
    padded = torch.cat([full, torch.zeros(1, 32, dtype=torch.long)], 1)
    base = random_drafter(target, seed)
    tau, B_chain = {}, rng.randint(3, 16)
    for budget, k, B in [(8, 2, 8), (16, 4, 16), (32, 3, 12), (B_chain - 1, 1, B_chain)]:
        drafter = BoostedDrafter(base, padded, 0.6, 0.3, seed)
        out = speculative_generate(target, drafter, ids, max_new_tokens=n, block_size=B,
                                   stop_token_ids=stops, tree={"node_budget": budget, "top_k": k})
        assert torch.equal(out.output_ids, ref), f"budget={budget} top_k={k} B={B}"
        assert max(out.acceptance_lengths) <= B and len(out.drafted) == out.num_new_tokens
        tau[budget, k] = out.tau
    chain = speculative_generate(target, BoostedDrafter(base, padded, 0.6, 0.3, seed), ids,
                                 max_new_tokens=n, block_size=16, stop_token_ids=stops)
    assert torch.equal(chain.output_ids, ref)
    assert tau[16, 4] > 1.5                     # paths were accepted: multi-token steps tested
    assert tau[16, 4] > chain.tau               # and branches beyond the chain's


def test_top_k_one_is_the_chain():
    target = tiny_target(4, vocab=89, layers=3)
    ids = torch.randint(0, 88, (1, 6))
    ref = plain_greedy(target, ids, 60)
    padded = torch.cat([ref, torch.zeros(1, 32, dtype=torch.long)], 1)
    base = random_drafter(target, 4)
    for B in (4, 16):
        tree = speculative_generate(target, BoostedDrafter(base, padded, 0.8, 0.0, 1), ids,
                                    max_new_tokens=60, block_size=B,
                                    tree={"node_budget": B - 1, "top_k": 1})
        chain = speculative_generate(target, BoostedDrafter(base, padded, 0.8, 0.0, 1), ids,
                                     max_new_tokens=60, block_size=B)
        assert torch.equal(tree.output_ids, ref) and torch.equal(chain.output_ids, ref)
        assert tree.acceptance_lengths == chain.acceptance_lengths and tree.tau > 1.5


def test_drafter_context_is_the_committed_features():
    """Every draft gets the target features of exactly the tokens committed since the last one
    (the root and the accepted path, not the other nodes), and its cache holds the rest."""
    target = tiny_target(6, vocab=89, layers=3)
    ids = torch.randint(0, 88, (1, 7))
    ref = plain_greedy(target, ids, 50)
    drafter = BoostedDrafter(random_drafter(target, 6), torch.cat([ref, ref], 1), 0.5, 0.4, 2)
    out = speculative_generate(target, drafter, ids, max_new_tokens=50, block_size=8,
                               tree={"node_budget": 12, "top_k": 3})
    assert torch.equal(out.output_ids, ref) and out.tau > 1.5
    with torch.no_grad():
        states = target(out.output_ids, output_hidden_states=True).hidden_states
    features = target_features(states, drafter.target_layer_ids)                  # (1, S, L_f*H)
    assert drafter.calls[0][0] == ids.shape[1] and len(drafter.calls) == len(out.acceptance_lengths)
    for (start, hidden, cached), a in zip(drafter.calls[1:], out.acceptance_lengths):
        assert hidden.shape[1] == a and cached + a == start
        torch.testing.assert_close(hidden[0], features[0, start - a:start], atol=1e-4, rtol=0)


STEEP = VerifyCost((1.0, 1.9, 2.3, 1.8, 2.0, 2.0, 2.1, 2.2, 2.2, 2.3, 2.4, 2.4), draft=0.2,
                   max_skip=4)                                                # a CPU's shape


@pytest.mark.parametrize("seed", range(3))
def test_greedy_identical_with_the_cost_model(seed):
    """Each step verifies the n best nodes the cost curve pays for (0: a plain step) and skips the
    drafter after steps that did not pay: still plain decoding's output, and each skipped stretch
    reaches the drafter's next call as the features of every token committed meanwhile."""
    rng = random.Random(300 + seed)
    target = tiny_target(seed, vocab=89, layers=3)
    ids = torch.randint(0, 88, (1, rng.randint(2, 12)))
    n = rng.randint(40, 80)
    ref = plain_greedy(target, ids, n)
    padded = torch.cat([ref, torch.zeros(1, 32, dtype=torch.long)], 1)
    base = random_drafter(target, seed)
    flat = VerifyCost((1.0,) * 16, draft=0.0)
    sizes = {}
    for cost, p_first in [(STEEP, 0.3), (STEEP, 0.8), (flat, 0.5)]:
        drafter = BoostedDrafter(base, padded, p_first, 0.2, seed)
        out = speculative_generate(target, drafter, ids, max_new_tokens=n, block_size=8, cost=cost,
                                   tree={"node_budget": 11, "top_k": 3})
        assert torch.equal(out.output_ids, ref), (cost, p_first)
        assert len(drafter.calls) <= len(out.acceptance_lengths)
        for start, hidden, cached in drafter.calls:
            assert hidden.shape[1] == start - cached        # nothing lost, nothing fed twice
        sizes[cost is flat, p_first] = (set(out.verified), len(drafter.calls),
                                        len(out.acceptance_lengths))
    assert sizes[True, 0.5][0] == {11}                       # a free verify takes every node
    assert 0 in sizes[False, 0.3][0] and sizes[False, 0.3][1] < sizes[False, 0.3][2]   # skips
    assert len(sizes[False, 0.8][0] - {0, 11}) > 0          # and trees of the sizes between


def test_a_drafters_default_tree_is_what_a_plain_call_verifies(tmp_path):
    """decoding.json's "tree" makes speculative_generate verify that tree; a call's settings
    override it field by field and never switch it off behind the caller's back: a block size
    keeps the tree (at that depth), tree=False gives the chain, block size 1 plain decoding, and
    the chain's own options (the cut, recorded steps) with a tree are refused. A batch refuses
    a tree; the setting survives save and load, a bad one is refused."""
    target = tiny_target(5, vocab=89, layers=3)
    ids = torch.randint(0, 88, (1, 6))
    ref = plain_greedy(target, ids, 50)
    padded = torch.cat([ref, torch.zeros(1, 32, dtype=torch.long)], 1)
    base = random_drafter(target, 5, block_size=8)
    boosted = lambda: BoostedDrafter(base, padded, 0.5, 0.4, 3)           # the same draws each

    def with_tree():
        drafter = boosted()
        set_decoding(drafter, DecodingConfig(tree={"node_budget": 12, "top_k": 3}))
        return drafter
    default = speculative_generate(target, with_tree(), ids, max_new_tokens=50)
    want = speculative_generate(target, boosted(), ids, max_new_tokens=50,
                                tree={"node_budget": 12, "top_k": 3})
    chain = speculative_generate(target, boosted(), ids, max_new_tokens=50)
    assert torch.equal(default.output_ids, ref) and torch.equal(want.output_ids, ref)
    assert default.acceptance_lengths == want.acceptance_lengths != chain.acceptance_lengths
    for kwargs, runs in [({"block_size": 8}, want), ({"p_min": 0.0}, want),
                         ({"config": DecodingConfig(tree={"node_budget": 12, "top_k": 3})}, want),
                         ({"tree": False}, chain), ({"config": DecodingConfig()}, chain)]:
        out = speculative_generate(target, with_tree(), ids, max_new_tokens=50, **kwargs)
        assert out.acceptance_lengths == runs.acceptance_lengths, kwargs
    shallow = speculative_generate(target, with_tree(), ids, max_new_tokens=50, block_size=4)
    assert torch.equal(shallow.output_ids, ref) and max(shallow.acceptance_lengths) <= 4
    plain = speculative_generate(target, with_tree(), ids, max_new_tokens=50, block_size=1)
    assert torch.equal(plain.output_ids, ref) and set(plain.acceptance_lengths) == {1}
    drafter = with_tree()
    for kwargs in ({"p_min": 0.3}, {"record_steps": True}):   # a chain's settings select a chain
        out = speculative_generate(target, drafter, ids, max_new_tokens=5, **kwargs)
        assert out.config.tree is None and "default tree is not used" in out.config.describe(
            target, drafter) and "a chain's" in out.config.describe(target, drafter)
    with pytest.raises(ValueError, match="a chain's"):        # one config naming both: refused
        DecodingConfig(tree={"node_budget": 12, "top_k": 3}, p_min=0.3)
    with pytest.raises(ValueError, match="one sequence"):
        speculative_generate_batch(target, drafter, ids, max_new_tokens=5, tree=True)
    for kwargs, match in [({"tree": {"node_budget": 0, "top_k": 2}}, "integers >= 1")]:
        with pytest.raises(ValueError, match=match):
            speculative_generate(target, drafter, ids, max_new_tokens=5, **kwargs)
    with pytest.raises(ValueError, match="has none"):
        speculative_generate(target, base, ids, max_new_tokens=5, tree=True)
    save_drafter(drafter, tmp_path / "d")
    assert DecodingConfig.of(load_drafter(tmp_path / "d")).tree == {"node_budget": 12, "top_k": 3}
    (tmp_path / "d" / "decoding.json").write_text('{"tree": {"node_budget": 8}}')
    with pytest.raises(ValueError, match="decoding.json.*a tree is"):
        load_drafter(tmp_path / "d")


def test_refuses_bad_arguments():
    target = tiny_target(0, vocab=61, layers=2)
    drafter = random_drafter(target, 0, block_size=8)
    ids = torch.randint(0, 60, (1, 4))
    tree = {"node_budget": 7, "top_k": 4}
    for kwargs, match in [({"tree": {"node_budget": -1, "top_k": 4}}, "node_budget"),
                          ({"tree": {"node_budget": 7, "top_k": 0}}, "top_k"),
                          ({"tree": {"node_budget": 10_000, "top_k": 4}}, "node_budget 10000"),
                          ({"tree": tree, "block_size": 9}, "block_size"),
                          ({"tree": tree, "temperature": -1.0}, "temperature")]:
        with pytest.raises(ValueError, match=match):
            speculative_generate(target, drafter, ids, max_new_tokens=5, **kwargs)
    with pytest.raises(ValueError, match="one sequence"):
        speculative_generate(target, drafter, ids.repeat(2, 1), max_new_tokens=5, tree=tree)
    with pytest.raises(ValueError, match="DFlash drafter"):
        speculative_generate(target, ARDrafter(make_ar_config(target.config)).eval(), ids,
                             max_new_tokens=5, block_size=4, tree=tree)


def test_out_of_vocabulary_prompt_is_a_clear_error():
    """An id outside the target's vocabulary is the chain's clear ValueError, not an IndexError
    from the embedding, whether tree_generate is called or speculative_generate picks a tree."""
    target = tiny_target(0, vocab=61, layers=2)
    drafter = random_drafter(target, 0, block_size=8)
    for bad in (61, -1):
        ids = torch.tensor([[3, bad, 5]])
        with pytest.raises(ValueError, match="outside the target's vocabulary 0..60"):
            speculative_generate(target, drafter, ids, max_new_tokens=5,
                                 tree={"node_budget": drafter.block_size - 1, "top_k": 4})
        with pytest.raises(ValueError, match="outside the target's vocabulary 0..60"):
            speculative_generate(target, drafter, ids, max_new_tokens=5,
                                 tree={"node_budget": 4, "top_k": 2})
    for ids in (torch.tensor([[3.0, 4.0]]), torch.tensor([3, 4])):       # a float, a 1D prompt
        with pytest.raises(ValueError, match="LongTensor"):
            speculative_generate(target, drafter, ids, max_new_tokens=5,
                                 tree={"node_budget": drafter.block_size - 1, "top_k": 4})


def test_tree_refuses_nan_temperature():
    """NaN < 0 is False: a NaN (or infinite, or non-number) temperature is refused up front, not
    left to fail in torch.multinomial (or to sample garbage) after the prefill."""
    target = tiny_target(0, vocab=61, layers=2)
    drafter = random_drafter(target, 0, block_size=8)
    ids = torch.randint(0, 60, (1, 4))
    for temperature in (float("nan"), float("inf"), "0.5", True):
        with pytest.raises(ValueError, match="temperature must be a finite number"):
            speculative_generate(target, drafter, ids, max_new_tokens=5, temperature=temperature,
                                 tree={"node_budget": 4, "top_k": 2})


def test_chain_refuses_nan_temperature():
    """The chain (verifier.py) refuses a NaN temperature as the tree does."""
    target = tiny_target(0, vocab=61, layers=2)
    drafter = random_drafter(target, 0, block_size=8)
    ids = torch.randint(0, 60, (1, 4))
    with pytest.raises(ValueError, match="temperature must be a finite number"):
        speculative_generate(target, drafter, ids, max_new_tokens=5, tree=False,
                             temperature=float("nan"))


def test_a_bool_is_not_a_node_budget_or_top_k():
    """True is an int to isinstance: node_budget=True or top_k=True is refused, not read as 1,
    by tree_generate and by check_tree (decoding.json's default tree)."""
    target = tiny_target(0, vocab=61, layers=2)
    drafter = random_drafter(target, 0, block_size=8)
    ids = torch.randint(0, 60, (1, 4))
    for tree in ({"node_budget": True, "top_k": 4}, {"node_budget": 7, "top_k": True}):
        with pytest.raises(ValueError, match="integers >= 1"):
            speculative_generate(target, drafter, ids, max_new_tokens=5, tree=tree)
    for tree in ({"node_budget": True, "top_k": 2}, {"node_budget": 4, "top_k": True}):
        with pytest.raises(ValueError, match="integers >= 1"):
            check_tree(tree)
    assert check_tree({"node_budget": 4, "top_k": 2}) == {"node_budget": 4, "top_k": 2}


# --------------------------------------------------------------------------------------------
# Sampling: the exact distribution, and a wrong rule that fails the same test
# --------------------------------------------------------------------------------------------

V, N_STOP, STOP, TEMP, COLD = 4, 4, 2, 1.0, 0.5


@pytest.fixture(scope="module")
def sampling_setup():
    target = tiny_target(7, vocab=V, layers=2, hidden=32, heads=2, kv_heads=1)
    with torch.no_grad():
        target.lm_head.weight.mul_(0.1)  # 20x from tiny_target was too sharp for V = 4
    drafter = random_drafter(target, 7, mask_token_id=V - 1)
    ids = torch.tensor([[1, 2, 0]])
    return target, drafter, ids, helpers.exact_stopped_distribution(target, ids, V, N_STOP, STOP, TEMP)


def sampled_pvalue(target, drafter, ids, probs, n=1500, cost=None, sizes=None, temperature=TEMP):
    """Chi-square p-value of n tree_generate outputs (B = 3, a 5-node tree of top-2 lists) at
    ``temperature`` against the exact distribution (at the same temperature); outcomes expected
    fewer than 5 times are pooled into one bin. With a cost, the trees' sizes go into ``sizes``."""
    gen, counts, accepted = torch.Generator().manual_seed(0), {}, 0
    for _ in range(n):
        out = speculative_generate(target, drafter, ids, max_new_tokens=N_STOP, block_size=3,
                                   temperature=temperature, stop_token_ids=[STOP], generator=gen,
                                   cost=cost, tree={"node_budget": 5, "top_k": 2})
        key = tuple(out.new_ids.tolist())
        counts[key] = counts.get(key, 0) + 1
        accepted += sum(out.drafted)
        if sizes is not None:
            sizes.update(out.verified)
    assert set(counts) <= set(probs), f"impossible outputs: {sorted(set(counts) - set(probs))[:5]}"
    assert accepted > n / 2                     # drafted tokens were accepted, paths walked
    big = [k for k in probs if probs[k] * n >= 5]
    obs = [counts.get(k, 0) for k in big] + [n - sum(counts.get(k, 0) for k in big)]
    exp = [probs[k] * n for k in big] + [n * (1 - sum(probs[k] for k in big))]
    return stats.chisquare(obs, exp).pvalue


def test_sampling_matches_target_distribution(sampling_setup):
    """T = 1 over several steps with a stop token: the outputs are distributed as the target's."""
    target, drafter, ids, probs = sampling_setup
    early = sum(p for k, p in probs.items() if len(k) < N_STOP)
    assert abs(sum(probs.values()) - 1) < 1e-9 and 0.3 < early < 0.7
    assert sampled_pvalue(target, drafter, ids, probs) > 1e-3


def test_sampling_with_the_cost_model_matches_target_distribution(sampling_setup):
    """T = 1 with a cost curve under which trees of 0 to 5 nodes are verified and some steps skip
    the drafter: the size depends on the drafter only, so the outputs stay the target's."""
    target, drafter, ids, probs = sampling_setup
    sizes = set()
    cost = VerifyCost((1.0, 1.3, 1.5, 1.6, 1.7, 1.8), draft=0.05, max_skip=1)
    assert sampled_pvalue(target, drafter, ids, probs, cost=cost, sizes=sizes) > 1e-3
    assert len(sizes) >= 3 and 0 in sizes


def wrong_accept_tree(tokens, parents, logits, temperature=0.0, generator=None, hidden=None,
                      head=None):
    """A plausible bug: when the target's sample is any child, move to the drafter's best child
    (the first listed) instead of the child that holds the sample."""
    path, node = [], 0
    while True:
        y = int(decoding.choose(logits[node][None, None], temperature, generator)[0, 0])
        kids = [i + 1 for i, p in enumerate(parents.tolist()) if p + 1 == node]
        if y not in [int(tokens[i - 1]) for i in kids]:
            return path, y
        node = kids[0]
        path.append(node)


def test_wrong_tree_rule_is_caught(sampling_setup, monkeypatch):
    """The same test, same seed and size, rejects the planted rule: it has power."""
    target, drafter, ids, probs = sampling_setup
    def wrong_walk(draft, logits, final, pick):         # the planted rule as the tree's walk
        path, y = wrong_accept_tree(draft.ids[0, 1:], draft.parents, logits[0],
                                    pick.sample.temperature, pick.sample.generator)
        return Outcome([[0] + path], torch.tensor([y]))
    monkeypatch.setattr(tree_mod.TreeDraft, "walk", wrong_walk)
    assert sampled_pvalue(target, drafter, ids, probs) < 1e-6


@pytest.fixture(scope="module")
def cold_probs(sampling_setup):
    """The exact distribution at T = COLD (0.5)."""
    target, _, ids, _ = sampling_setup
    return helpers.exact_stopped_distribution(target, ids, V, N_STOP, STOP, COLD)


def test_sampling_at_another_temperature_matches_target_distribution(sampling_setup, cold_probs):
    """T = 0.5: the outputs are distributed as softmax(logits / T)'s. The T = 1 tests alone pass
    a tree that drops the temperature; this one does not (nor logits * T: T = 2's distribution)."""
    target, drafter, ids, _ = sampling_setup
    assert sampled_pvalue(target, drafter, ids, cold_probs, temperature=COLD) > 1e-3


def test_ignored_temperature_is_caught(sampling_setup, cold_probs, monkeypatch):
    """The T = 0.5 test, same seed and size, rejects a tree that samples at T = 1: it has power."""
    target, drafter, ids, _ = sampling_setup
    real = tree_mod.TreeDraft.walk
    monkeypatch.setattr(tree_mod.TreeDraft, "walk", lambda draft, logits, final, pick: real(
        draft, logits, final, decoding.Pick(1.0, pick.sample.generator)))
    assert sampled_pvalue(target, drafter, ids, cold_probs, temperature=COLD) < 1e-6


def test_a_step_that_skipped_the_drafter_passes_no_mask():
    """The root alone (the cost model skipped the drafter) is plain decoding's pass: its position,
    no tree mask (a mask made the one-token pass slower than plain decoding's)."""
    from types import SimpleNamespace
    none = torch.zeros(0, dtype=torch.long)
    alone = tree_mod.TreeDraft(torch.tensor([[5]]), none, none, torch.float32)
    inputs = alone.inputs(SimpleNamespace(start=torch.tensor([7])))
    assert set(inputs) == {"position_ids"} and inputs["position_ids"].tolist() == [[7]]
    one = tree_mod.TreeDraft(torch.tensor([[5, 6]]), torch.tensor([-1]), torch.tensor([1]),
                             torch.float32)
    inputs = one.inputs(SimpleNamespace(start=torch.tensor([7])))
    assert inputs["position_ids"].tolist() == [[7, 8]] and inputs["attention_mask"].shape == (1, 1, 2, 9)

"""The confidence cut (verify_cost.confident_prefix, ``p_min``): only the leading drafts the drafter
gives probability >= p_min are verified. It reads the drafter's outputs only, so it may change
how many tokens a step certifies, never which: greedy output identical to plain decoding, T = 1
distributed as plain sampling, a batch's rows cut at their own lengths, and the AR drafter's
chain stopped (passes saved) at its first doubtful token.
"""

import json
import random

import pytest
import torch
from scipy import stats

from minidflash.decoding_config import DecodingConfig, set_decoding
from minidflash.ar_drafter import ARDrafter, make_ar_config
from minidflash.core.drafter import DFlashDrafter
from minidflash.checkpoints import load_drafter, save_drafter
from minidflash.verifier import speculative_generate, speculative_generate_batch
from minidflash.verify_cost import confident_prefix
from tests import helpers
from tests.helpers import random_drafter, tiny_target
from tests.test_batched import RowOracle, plain_greedy


def test_confident_prefix_counts_leading_slots_like_a_loop():
    gen = torch.Generator().manual_seed(0)
    q = torch.rand(64, 9, generator=gen)
    for p in (0.0, 0.2, 0.5, 0.9, 0.999):
        want = []
        for row in q.tolist():
            m = 0
            while m < len(row) and row[m] >= p:
                m += 1
            want.append(m)
        assert confident_prefix(q, p).tolist() == want


class DoubtfulOracle(RowOracle):
    """RowOracle (right for some slots, wrong for others) whose drafts come with a probability q
    that depends on (position, token) only: the same whether a row is decoded alone or in a
    batch, and unrelated to whether the draft is right, so every cut length meets every
    acceptance length."""

    def draft(self, target, last_token, target_hidden, start, cache, block_size=None,
              context_ids=None, context_mask=None, with_probs=False):
        guess = super().draft(target, last_token, target_hidden, start, cache, block_size,
                              context_mask=context_mask)
        if not with_probs:
            return guess
        starts = torch.as_tensor(start).reshape(-1).expand(guess.shape[0]).tolist()
        q = torch.tensor([[random.Random(f"{self.seed}/{s + 1 + j}/{int(t)}").random()
                           for j, t in enumerate(row)] for s, row in zip(starts, guess)])
        return guess, q


def references(target, prompts, n):
    refs = [plain_greedy(target, ids, n + 24) for ids in prompts]
    return refs, [r[:, :ids.shape[1] + n] for r, ids in zip(refs, prompts)]


@pytest.mark.parametrize("seed", range(4))
def test_greedy_identical_for_every_cut(seed):
    rng = random.Random(seed)
    target = tiny_target(seed, vocab=89, layers=3)
    prompts = [torch.randint(0, 88, (1, rng.randint(2, 16))) for _ in range(2)]
    n = rng.randint(30, 70)
    refs, want = references(target, prompts, n)
    drafter = DoubtfulOracle(random_drafter(target, seed), refs, p_wrong=[0.15, 0.3], seed=seed)
    longest = 0
    for B in (2, 5, 16):
        for p in (0.2, 0.5, 0.8, 0.999):
            for ids, ref in zip(prompts, want):
                out = speculative_generate(target, drafter, ids, max_new_tokens=n, block_size=B,
                                           p_min=p, record_steps=True)
                assert torch.equal(out.output_ids, ref), (B, p)
                for step, m in zip(out.steps, out.verified):     # m = the leading q >= p
                    assert m == int(confident_prefix(torch.tensor([step["q"]]), p)[0])
                    assert len(step["draft"]) == m and step["accepted"] <= m
                longest = max(longest, *out.acceptance_lengths)
            if p == 0.999:                                        # every draft doubted
                assert set(out.verified) == {0} and out.tau == 1.0
    assert longest > 2                           # multi-token steps were cut and accepted


def test_p_min_zero_verifies_the_whole_block_as_before():
    target = tiny_target(3, vocab=89, layers=3)
    ids = torch.randint(0, 88, (1, 9))
    refs, _ = references(target, [ids], 40)
    drafter = DoubtfulOracle(random_drafter(target, 3), refs, p_wrong=[0.2], seed=3)
    out = speculative_generate(target, drafter, ids, max_new_tokens=40, block_size=6, p_min=0.0)
    assert set(out.verified) == {5}


@pytest.mark.parametrize("seed", range(3))
def test_batch_rows_cut_at_their_own_lengths(seed):
    """Each row of a batch decodes, and cuts, exactly what it does alone."""
    rng = random.Random(10 + seed)
    target = tiny_target(seed, vocab=89, layers=3)
    prompts = [torch.randint(0, 88, (1, rng.randint(1, 20))) for _ in range(3)]
    n = 40
    refs, want = references(target, prompts, n)
    drafter = DoubtfulOracle(random_drafter(target, seed), refs, p_wrong=[0.05, 0.3, 0.6],
                             seed=seed)
    from minidflash.batch import left_pad
    ids, mask = left_pad(prompts)
    rows = speculative_generate_batch(target, drafter, ids, max_new_tokens=n, attention_mask=mask,
                                      block_size=8, p_min=0.4)
    for row, ref, prompt in zip(rows, want, prompts):
        alone = speculative_generate(target, drafter, prompt, max_new_tokens=n, block_size=8,
                                     p_min=0.4)
        assert torch.equal(row.output_ids, ref)
        assert row.verified == alone.verified and row.acceptance_lengths == alone.acceptance_lengths
    assert len({tuple(r.verified) for r in rows}) == 3            # the rows were cut differently


V, N_NEW, STOP, TEMP = 4, 4, 2, 1.0


class RandomConfidence(DFlashDrafter):
    """A random drafter whose q is a hash of its inputs and outputs (position, last committed
    token, drafted token): spread over [0, 1), so a threshold cuts steps at every length, and
    never a function of the target's verdict on the block."""

    def draft(self, target, last_token, target_hidden, start, *args, with_probs=False, **kwargs):
        guess = super().draft(target, last_token, target_hidden, start, *args, **kwargs)
        if not with_probs:
            return guess
        last, start = int(last_token[0]), int(start)
        return guess, torch.tensor([[random.Random(f"{start + 1 + j}/{last}/{int(t)}").random()
                                     for j, t in enumerate(guess[0])]])


@pytest.fixture(scope="module")
def sampling_setup():
    target = tiny_target(7, vocab=V, layers=2, hidden=32, heads=2, kv_heads=1)
    with torch.no_grad():
        target.lm_head.weight.mul_(0.1)
    base = random_drafter(target, 7, mask_token_id=V - 1)
    drafter = RandomConfidence(base.config).eval()
    drafter.load_state_dict(base.state_dict())
    ids = torch.tensor([[1, 2, 0]])
    return target, drafter, ids, helpers.exact_stopped_distribution(target, ids, V, N_NEW, STOP, TEMP)


def test_sampling_with_the_cut_matches_the_target(sampling_setup):
    """T = 1, block 4, p_min between the drafter's typical probabilities so steps are cut at
    every length: the outputs follow the target's own distribution (chi-square; outcomes
    expected fewer than 5 times pooled)."""
    target, drafter, ids, probs = sampling_setup
    n, gen, counts, cuts = 1500, torch.Generator().manual_seed(0), {}, []
    for _ in range(n):
        out = speculative_generate(target, drafter, ids, max_new_tokens=N_NEW, block_size=4,
                                   temperature=TEMP, stop_token_ids=[STOP], generator=gen,
                                   p_min=0.35)
        key = tuple(out.new_ids.tolist())
        counts[key] = counts.get(key, 0) + 1
        cuts += out.verified
    assert len(set(cuts)) >= 3                          # the cut fell at several lengths
    assert set(counts) <= set(probs)
    big = [k for k in probs if probs[k] * n >= 5]
    obs = [counts.get(k, 0) for k in big] + [n - sum(counts.get(k, 0) for k in big)]
    exp = [probs[k] * n for k in big] + [n * (1 - sum(probs[k] for k in big))]
    assert stats.chisquare(obs, exp).pvalue > 1e-3


def test_ar_chain_stops_at_its_first_doubtful_token(monkeypatch):
    """The AR drafter told p_min makes no pass after a token below it; its drafts up to there
    are the same as without the cut."""
    target = tiny_target(5, vocab=97, layers=4)
    drafter = ARDrafter(make_ar_config(target.config)).eval()
    passes = []
    real = drafter._attend
    monkeypatch.setattr(drafter, "_attend", lambda *a: passes.append(1) or real(*a))
    ids = torch.randint(0, 96, (1, 12))
    with torch.no_grad():
        out = target(ids, output_hidden_states=True)
    from minidflash.core.drafter import target_features
    hidden = target_features(out.hidden_states, drafter.target_layer_ids)[:, :-1]
    whole, q = drafter.draft(target, ids[:, -1], hidden, 11, drafter.new_cache(), 9,
                             context_ids=ids[:, :-1], with_probs=True)
    p = float(q[0].sort().values[3])                      # a threshold some token falls below
    first = int((q[0] < p).nonzero()[0])
    passes.clear()
    cut, q_cut = drafter.draft(target, ids[:, -1], hidden, 11, drafter.new_cache(), 9,
                               context_ids=ids[:, :-1], with_probs=True, p_min=p)
    assert torch.equal(cut, whole[:, :first + 1]) and torch.allclose(q_cut, q[:, :first + 1])
    assert len(passes) == first + 1                       # context pass + one per kept token


def test_a_drafters_files_carry_its_default_cut(tmp_path):
    target = tiny_target(2, vocab=97, layers=4)
    drafter = random_drafter(target, 2)
    set_decoding(drafter, DecodingConfig(p_min=0.3))
    save_drafter(drafter, tmp_path / "d")
    assert json.loads((tmp_path / "d" / "decoding.json").read_text()) == {"p_min": 0.3}
    loaded = load_drafter(tmp_path / "d", target=target)
    assert DecodingConfig.of(loaded).p_min == 0.3
    ids = torch.randint(0, 96, (1, 8))
    default = speculative_generate(target, loaded, ids, max_new_tokens=20)
    assert default.verified == speculative_generate(target, loaded, ids, max_new_tokens=20,
                                                    p_min=0.3).verified
    (tmp_path / "d" / "decoding.json").write_text('{"p_min": 1.5}')
    with pytest.raises(ValueError, match="p_min must be in"):
        load_drafter(tmp_path / "d", target=target)
    with pytest.raises(ValueError, match="p_min must be in"):
        speculative_generate(target, drafter, ids, max_new_tokens=5, p_min=-0.1)

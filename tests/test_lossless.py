"""Losslessness: the contract of speculative decoding (paper section 3).

Greedy: token-for-token identical to ``target.generate(do_sample=False)``, for random targets,
RANDOM drafters (losslessness must not depend on drafter quality), random prompts, every block
size 2..16, lengths that cross block boundaries, and stop tokens inside a block.
Sampling: the distribution of whole generated sequences equals the target's, exactly computed
(after one verify step, and over several with a stop token), under a chi-square test that a
deliberately wrong acceptance rule fails.
"""

import math
import random

import pytest
import torch
from scipy import stats

import minidflash.verifier as verifier
import minidflash.core.verifier as core_verifier
from minidflash import decoding
from minidflash.verifier import speculative_generate
from tests import helpers
from tests.helpers import OracleDrafter, random_drafter, tiny_target


def plain_greedy(target, ids, n, stop=None):
    return target.generate(ids, do_sample=False, max_new_tokens=n, eos_token_id=stop,
                           pad_token_id=0, attention_mask=torch.ones_like(ids))


CASES = [(seed, random.Random(seed)) for seed in range(16)]


@pytest.mark.parametrize("seed,rng", CASES, ids=[f"case{s}" for s, _ in CASES])
def test_greedy_identical_random_drafter(seed, rng):
    target = tiny_target(seed, vocab=rng.choice([61, 97, 128]), layers=rng.choice([2, 4]))
    drafter = random_drafter(target, seed, layers=rng.choice([1, 2]))
    ids = torch.randint(0, target.config.vocab_size - 1, (1, rng.randint(1, 24)))
    n = rng.randint(1, 70)
    ref = plain_greedy(target, ids, n)
    for B in sorted({1, 2, 16, rng.randint(3, 15)}):
        out = speculative_generate(target, drafter, ids, max_new_tokens=n, block_size=B)
        assert torch.equal(out.output_ids, ref), f"block_size={B}"
        assert sum(out.acceptance_lengths) + 1 >= out.num_new_tokens


@pytest.mark.parametrize("seed", range(8))
def test_greedy_identical_with_acceptances(seed):
    """A drafter that is often right: every acceptance length, crop and bonus path."""
    rng = random.Random(100 + seed)
    target = tiny_target(seed, vocab=89, layers=3)
    ids = torch.randint(0, 88, (1, rng.randint(2, 16)))
    n = rng.randint(20, 90)
    ref = plain_greedy(target, ids, n)
    padded = torch.cat([ref, torch.zeros(1, 32, dtype=torch.long)], 1)
    for B in range(2, 17):
        drafter = OracleDrafter(random_drafter(target, seed), padded, p_wrong=rng.random() * 0.3,
                                seed=seed * 100 + B)
        out = speculative_generate(target, drafter, ids, max_new_tokens=n, block_size=B)
        assert torch.equal(out.output_ids, ref), f"block_size={B}"
        assert max(out.acceptance_lengths) <= B
    assert out.tau > 1.5  # the oracle really was accepted: the multi-token path was tested


@pytest.mark.parametrize("seed", range(6))
def test_stop_token_inside_a_block(seed):
    target = tiny_target(seed, vocab=61)
    ids = torch.randint(0, 60, (1, 5))
    full = plain_greedy(target, ids, 60)
    new = full[0, 5:].tolist()
    stop = new[7 + seed]                     # a token the greedy answer really produces
    ref = plain_greedy(target, ids, 60, stop=stop)
    assert ref[0, -1] == stop or ref.shape[1] == 65
    padded = torch.cat([full, torch.zeros(1, 32, dtype=torch.long)], 1)
    for B in (2, 5, 16):
        drafter = OracleDrafter(random_drafter(target, seed), padded, p_wrong=0.1, seed=seed)
        out = speculative_generate(target, drafter, ids, max_new_tokens=60, block_size=B,
                                   stop_token_ids=[stop])
        assert torch.equal(out.output_ids, ref), f"block_size={B}"
        assert out.output_ids[0, -1] == stop


def test_max_new_tokens_one_and_block_larger_than_budget():
    target = tiny_target(3)
    drafter = random_drafter(target, 3)
    ids = torch.randint(0, 96, (1, 4))
    for n in (1, 2, 3, 17):
        out = speculative_generate(target, drafter, ids, max_new_tokens=n, block_size=16)
        assert torch.equal(out.output_ids, plain_greedy(target, ids, n))


def test_caches_are_context_only_and_cropped(monkeypatch):
    """The target cache is cropped to the committed tokens after every verify; the drafter
    cache holds only context features (the block's K/V are never kept)."""
    target = tiny_target(5, vocab=89, layers=3)
    ids = torch.randint(0, 88, (1, 9))
    ref = plain_greedy(target, ids, 40)
    drafter = OracleDrafter(random_drafter(target, 5), torch.cat([ref, ref], 1), 0.2, seed=1)
    target_caches, seen = [], []
    real_pass, real_draft = decoding.target_pass, drafter.draft

    def target_spy(target_, input_ids, cache, *args, **kwargs):   # every target pass, lean or not
        pos = kwargs.get("position_ids")        # None at the prefill
        # Each verify finds exactly the committed tokens before its block (t not fed yet).
        assert cache.get_seq_length() == (0 if pos is None else int(pos[0, 0]))
        target_caches.append(cache)
        return real_pass(target_, input_ids, cache, *args, **kwargs)

    def spy(target_, last_token, target_hidden, start, cache, block_size=None, context_ids=None):
        last, hidden, B = last_token, target_hidden, block_size
        assert target_caches[-1].get_seq_length() == start   # cropped: rejected drafts are gone
        # Before each draft the drafter cache covers exactly the context not passed again.
        assert cache.get_seq_length() + hidden.shape[1] == start
        out = real_draft(target_, last, hidden, start, cache, B, context_ids=context_ids)
        assert cache.get_seq_length() == start  # block K/V were not kept
        seen.append(start)
        return out

    monkeypatch.setattr(decoding, "target_pass", target_spy)
    monkeypatch.setattr(drafter, "draft", spy)
    out = speculative_generate(target, drafter, ids, max_new_tokens=40, block_size=8)
    assert torch.equal(out.output_ids, ref) and len(seen) == len(out.acceptance_lengths)
    assert len(target_caches) == len(seen) + 1 and len({id(c) for c in target_caches}) == 1
    # after the last step: every committed token but the last bonus (which is never fed)
    assert target_caches[-1].get_seq_length() == ids.shape[1] + sum(out.acceptance_lengths)
    assert max(out.acceptance_lengths) > 1        # crops after partial acceptances happened


# --------------------------------------------------------------------------------------------
# Sampling
# --------------------------------------------------------------------------------------------

V, N_NEW, TEMP = 4, 3, 1.0


def exact_distribution(target, ids):
    """P(y_1..y_3 | prompt) for all V**3 sequences, from the target's own softmax."""
    probs = {}
    with torch.no_grad():
        for k in range(V ** N_NEW):
            seq = [(k // V ** i) % V for i in range(N_NEW)]
            full = torch.cat([ids, torch.tensor([seq])], 1)
            logp = torch.log_softmax(target(full).logits[0].double() / TEMP, -1)
            p = ids.shape[1] - 1
            probs[tuple(seq)] = math.exp(sum(logp[p + i, seq[i]] for i in range(N_NEW)))
    return probs


def chi_square_pvalue(counts, probs, n):
    keys = sorted(probs)
    obs = [counts.get(k, 0) for k in keys]
    exp = [probs[k] * n for k in keys]
    return stats.chisquare(obs, exp).pvalue


def sample_counts(target, drafter, ids, n, seed, exact=False):
    gen = torch.Generator().manual_seed(seed)
    counts = {}
    for _ in range(n):
        out = speculative_generate(target, drafter, ids, max_new_tokens=N_NEW, block_size=3,
                                   temperature=TEMP, generator=gen, exact=exact)
        key = tuple(out.new_ids.tolist())
        counts[key] = counts.get(key, 0) + 1
    return counts


def wrong_accept(block, logits, temperature, generator=None, hidden=None, head=None):
    """A classic bug: accept d with probability p(d), and after a rejection resample from p
    itself (d included) instead of from p without d. Biased towards the draft."""
    probs = torch.softmax(logits[0].float() / temperature, -1)                 # (B, V)
    committed = []
    for j in range(1, block.shape[1]):
        d = int(block[0, j])
        if torch.rand(1, generator=generator) < probs[j - 1, d]:
            committed.append(d)
            continue
        break
    a = len(committed)
    committed.append(int(torch.multinomial(probs[a], 1, generator=generator)))
    y = torch.zeros_like(block)
    y[0, :a + 1] = torch.tensor(committed)
    return a, committed, y


def wrong_walk(draft, logits, final, pick):
    """``wrong_accept`` as the walk of the core loop's chain."""
    a, committed, y = wrong_accept(draft.ids, logits, pick.sample.temperature, pick.sample.generator)
    return core_verifier.Outcome([list(range(a + 1))], torch.tensor([committed[-1]]), y)


@pytest.fixture(scope="module")
def sampling_setup():
    target = tiny_target(7, vocab=V, layers=2, hidden=32, heads=2, kv_heads=1)
    with torch.no_grad():
        target.lm_head.weight.mul_(0.1)  # 20x from tiny_target was too sharp for V = 4
    drafter = random_drafter(target, 7, mask_token_id=V - 1)
    ids = torch.tensor([[1, 2, 0]])
    return target, drafter, ids, exact_distribution(target, ids)


@pytest.mark.parametrize("exact", [False, True], ids=["usual passes", "exact mode"])
def test_sampling_matches_target_distribution(sampling_setup, exact):
    """T > 0: the outputs' distribution is the target's (in exact mode too, where every pass
    after the prefill has 16 rows and the invariant attention)."""
    target, drafter, ids, probs = sampling_setup
    assert min(probs.values()) > 1e-3 and abs(sum(probs.values()) - 1) < 1e-9
    n = 1500
    counts = sample_counts(target, drafter, ids, n, seed=0, exact=exact)
    assert chi_square_pvalue(counts, probs, n) > 1e-3


@pytest.mark.parametrize("exact", [False, True], ids=["usual passes", "exact mode"])
def test_wrong_acceptance_rule_is_caught(sampling_setup, monkeypatch, exact):
    """The same test, same seed and size, rejects a subtly wrong rule: it has power."""
    target, drafter, ids, probs = sampling_setup
    monkeypatch.setattr(core_verifier.Draft, "walk", wrong_walk)
    n = 1500
    counts = sample_counts(target, drafter, ids, n, seed=0, exact=exact)
    assert chi_square_pvalue(counts, probs, n) < 1e-6


N_STOP, STOP = 4, 2   # the multi-step case: up to 4 tokens, stop token 2 (ends ~half early)


def exact_stopped_distribution(target, ids):
    """P(output) of every output of up to N_STOP tokens that ends at its first STOP (or has
    N_STOP tokens), summed from the target's softmax over all V**N_STOP continuations."""
    return helpers.exact_stopped_distribution(target, ids, V, N_STOP, STOP, TEMP)


def test_sampling_with_stop_token_over_several_steps(sampling_setup):
    """T > 0 across several verify steps (B = 3, up to 4 tokens) with a stop token that ends
    about half the outputs early, inside blocks too: the outputs' distribution is the target's.
    Outcomes expected fewer than 5 times are pooled into one bin."""
    target, drafter, ids, _ = sampling_setup
    probs = exact_stopped_distribution(target, ids)
    early = sum(p for k, p in probs.items() if len(k) < N_STOP)     # stopped before N_STOP
    assert abs(sum(probs.values()) - 1) < 1e-9 and 0.3 < early < 0.7
    n, gen, counts, steps = 1500, torch.Generator().manual_seed(0), {}, []
    for _ in range(n):
        out = speculative_generate(target, drafter, ids, max_new_tokens=N_STOP, block_size=3,
                                   temperature=TEMP, stop_token_ids=[STOP], generator=gen)
        key = tuple(out.new_ids.tolist())
        counts[key] = counts.get(key, 0) + 1
        steps.append(len(out.acceptance_lengths))
    assert set(counts) <= set(probs), f"impossible outputs: {sorted(set(counts) - set(probs))[:5]}"
    assert sum(s > 1 for s in steps) > n / 4     # many outputs took several verify steps
    big = [k for k in probs if probs[k] * n >= 5]
    obs = [counts.get(k, 0) for k in big] + [n - sum(counts.get(k, 0) for k in big)]
    exp = [probs[k] * n for k in big] + [n * (1 - sum(probs[k] for k in big))]
    assert stats.chisquare(obs, exp).pvalue > 1e-3


def test_acceptance_rate_equals_p_draft():
    """P(d_1 accepted) = p(d_1) under the target: measured over many steps vs analytic."""
    target = tiny_target(11, vocab=6, layers=2, hidden=32, heads=2, kv_heads=1)
    with torch.no_grad():
        target.lm_head.weight.mul_(0.1)
    drafter = random_drafter(target, 11, mask_token_id=5)
    gen = torch.Generator().manual_seed(0)
    accepted, p_sum, var = 0, 0.0, 0.0
    for _ in range(40):
        ids = torch.randint(0, 5, (1, 4), generator=gen)
        out = speculative_generate(target, drafter, ids, max_new_tokens=40, block_size=4,
                                   temperature=1.0, generator=gen, record_steps=True)
        for s in out.steps:
            p = s["p_draft"][0]
            accepted += s["accepted"] >= 1
            p_sum += p
            var += p * (1 - p)
    z = (accepted - p_sum) / math.sqrt(var)
    assert p_sum > 50  # enough drafts were plausible for the comparison to mean something
    assert abs(z) < 4, f"accepted {accepted}, expected {p_sum:.1f} (z = {z:.2f})"

"""The cost model (verify_cost.py): each step verifies the length with the most expected tokens per
unit of measured time, and skips the drafter (plain steps) after drafts that did not pay. Like
the cut it reads the drafter and the clock, never the target's verdict: greedy output identical
to plain decoding, T = 1 distributed as plain sampling; and a skipped draft must leave the
drafter's context whole, so the next draft sees every committed token.
"""

import itertools
import json
import random

import pytest
import torch
from scipy import stats

from minidflash.core.drafter import target_features
from minidflash.checkpoints import load_drafter, save_drafter
from minidflash.decoding_config import decoding_of, set_decoding
from minidflash.target import load_target
from minidflash.verifier import speculative_generate, speculative_generate_batch
from minidflash.verify_cost import Trust, VerifyCost, for_threads
from tests.helpers import random_drafter, tiny_target
from tests.test_cut import (N_NEW, STOP, TEMP, DoubtfulOracle, references,  # noqa: F401
                            sampling_setup)

STEEP = VerifyCost((1.0, 1.9, 2.3, 1.8, 2.0, 2.0, 2.1, 2.2), draft=0.2)    # a CPU's shape
FLAT = VerifyCost((1.0,) * 16, draft=0.0)                                    # a GPU's


def brute_force(q, cost):
    best, rate = 0, -1.0
    for m in range(min(len(q), len(cost.verify) - 1) + 1):
        expected = 1 + sum(float(torch.tensor(q[:j + 1]).prod()) for j in range(m))
        r = expected / (cost.draft + cost.verify[m])
        if r >= rate:                               # ties: the longer
            best, rate = m, r
    return best, rate


def test_best_length_is_the_best_rate_by_brute_force():
    rng = random.Random(0)
    for _ in range(300):
        k = rng.randint(1, 15)
        q = [rng.random() ** rng.choice([0.2, 1, 3]) for _ in range(k)]
        verify = (1.0, *sorted(1 + rng.random() * 3 for _ in range(rng.randint(1, 16))))
        cost = VerifyCost(verify, draft=rng.random() * 0.5)
        m, rate = cost.best_length(torch.tensor(q))
        want_m, want_rate = brute_force(q, cost)
        assert m == want_m and rate == pytest.approx(want_rate)
    assert FLAT.best_length(torch.full((15,), 0.01))[0] == 15     # a free verify takes it all
    assert STEEP.best_length(torch.full((7,), 0.99))[0] == 7
    assert STEEP.best_length(torch.full((7,), 0.3))[0] == 0      # nothing pays: a plain step


def test_best_count_is_the_best_rate_by_brute_force():
    """A tree's nodes best first, p their chances: n maximises (1 + p_1 + ... + p_n) over the
    cost of n drafts; a chain's q gives the same as best_length through its products."""
    rng = random.Random(1)
    for _ in range(300):
        p = sorted((rng.random() ** 2 for _ in range(rng.randint(1, 20))), reverse=True)
        verify = (1.0, *sorted(1 + rng.random() * 3 for _ in range(rng.randint(1, 16))))
        cost = VerifyCost(verify, draft=rng.random() * 0.5)
        rates = [(1 + sum(p[:n])) / (cost.draft + verify[n])
                 for n in range(min(len(p), len(verify) - 1) + 1)]
        n, rate = cost.best_count(torch.tensor(p))
        assert rate == pytest.approx(max(rates)) and rates[n] == pytest.approx(max(rates))
        assert all(r < max(rates) - 1e-12 for r in rates[n + 1:])          # ties: the longer
        q = torch.tensor([rng.random() for _ in range(rng.randint(1, 15))])
        assert cost.best_length(q) == cost.best_count(q.double().cumprod(0))


def test_skips_double_while_drafts_do_not_pay_and_reset_when_one_does():
    cost = VerifyCost((1.0, 2.0), draft=0.1, max_skip=8)
    skip, seen = 0, []
    for rate in (0.5, 0.5, 0.5, 0.5, 0.5, 1.2, 0.9):
        skip = cost.next_skip(rate, skip)
        seen.append(skip)
    assert seen == [1, 2, 4, 8, 8, 0, 1]


@pytest.mark.parametrize("bad, match", [
    ({"verify": [2.0, 3.0], "draft": 0.1}, "t\\(1\\)/t\\(1\\) = 1"),
    ({"verify": [1.0], "draft": 0.1}, "at least two"),
    ({"verify": [1.0, -2.0], "draft": 0.1}, "at least two positive"),
    ({"verify": [1.0, 2.0], "draft": -1}, "draft cost must be"),
    ({"verify": [1.0, 2.0]}, "a verify cost is"),
    ({"verify": [1.0, 2.0], "draft": 0.1, "speed": 3}, "unknown keys"),
])
def test_bad_cost_curves_are_refused_with_the_fix(bad, match):
    with pytest.raises(ValueError, match=match):
        VerifyCost.from_dict(bad)


def random_cost(rng, draft=None):
    verify = (1.0, *[1 + rng.random() * 2 for _ in range(rng.randint(2, 15))])
    return VerifyCost(verify, draft=rng.random() * 0.4 if draft is None else draft,
                      max_skip=rng.choice([0, 2, 8]))


@pytest.mark.parametrize("seed", range(4))
def test_greedy_identical_for_every_cost_curve(seed):
    rng = random.Random(seed)
    target = tiny_target(seed, vocab=89, layers=3)
    prompts = [torch.randint(0, 88, (1, rng.randint(2, 16))) for _ in range(2)]
    n = rng.randint(30, 70)
    refs, want = references(target, prompts, n)
    drafter = DoubtfulOracle(random_drafter(target, seed), refs, p_wrong=[0.15, 0.3], seed=seed)
    skipped = longest = 0
    for B, cost, p in itertools.product((2, 5, 16), (STEEP, FLAT, random_cost(rng)), (0.0, 0.4)):
        for ids, ref in zip(prompts, want):
            out = speculative_generate(target, drafter, ids, max_new_tokens=n, block_size=B,
                                       cost=cost, p_min=p, record_steps=True)
            assert torch.equal(out.output_ids, ref), (B, cost, p)
            for step, m in zip(out.steps, out.verified):
                if "q" not in step:                       # a skipped draft: a plain step
                    assert m == 0
                    skipped += 1
                    continue
                q = torch.tensor(step["q"])
                cut = int((q >= p).long().cumprod(0).sum()) if p else len(q)
                assert m == cost.best_length(q[:cut])[0] and len(step["draft"]) == m
            longest = max(longest, *out.acceptance_lengths)
    assert skipped > 0 and longest > 2


def test_trust_is_drafts_accepted_over_drafts_expected():
    q = torch.tensor([0.9, 0.5, 0.2])
    block, agree = torch.tensor([5, 1, 2, 3]), torch.tensor([1, 2, 9])
    cases = [  # m, accepted, choice: -> observed (expected: q_1 + q_1 q_2 + ... over m + 1 slots)
        (1, 1, agree[:2], 2),                     # d_1 verified and right; d_2 shown right too
        (1, 1, torch.tensor([1, 7]), 1),          # ... d_2 shown wrong
        (2, 0, torch.tensor([4, 2, 3]), 0),       # rejected at d_1: nothing more is known
        (0, 0, torch.tensor([1]), 1),             # nothing verified: d_1 shown right
        (3, 3, torch.tensor([1, 2, 3, 8]), 3),    # the whole block: no slot after it
    ]
    for m, a, choice, observed in cases:
        t = Trust(1.0 - 1e-9)                      # (weight ~1: the last step alone)
        t.update(q, m, a, block, choice)
        expected = float(q[:min(m + 1, 3)].double().cumprod(0).sum())
        assert t.value == pytest.approx(observed / expected, rel=1e-6, abs=1e-6), (m, a)
    t = Trust(0.5)                                 # running sums, from 1 / 1
    t.update(q, 0, 0, block, torch.tensor([4]))
    assert (t.got, t.meant) == pytest.approx((0.5, 0.95))
    # the scaled expectation decides the length: doubted drafts are left out, trusted ones kept
    assert STEEP.best_length(torch.full((7,), 0.8), trust=0.2)[0] == 0
    assert STEEP.best_length(torch.full((7,), 0.8), trust=1.0)[0] == 7
    with pytest.raises(ValueError, match="trust_weight"):
        VerifyCost((1.0, 2.0), 0.1, trust_weight=1.0)


@pytest.mark.parametrize("seed", range(2))
def test_trust_reads_only_earlier_steps_and_keeps_greedy_identical(seed):
    # Over-confident drafts (q unrelated to being right, mostly high): each step's length must be
    # best_length under the trust of the steps BEFORE it, replayed here from the records.
    rng = random.Random(seed)
    target = tiny_target(seed, vocab=89, layers=3)
    prompts = [torch.randint(0, 88, (1, rng.randint(2, 16))) for _ in range(2)]
    refs, want = references(target, prompts, 60)
    drafter = DoubtfulOracle(random_drafter(target, seed), refs, p_wrong=[0.3, 0.5], seed=seed)
    cost = VerifyCost(STEEP.verify, STEEP.draft, max_skip=2, trust_weight=0.3)
    differs = False
    for ids, ref in zip(prompts, want):
        out = speculative_generate(target, drafter, ids, max_new_tokens=60, block_size=8,
                                   cost=cost, record_steps=True)
        assert torch.equal(out.output_ids, ref)
        trust = Trust(0.3)
        for step, m in zip(out.steps, out.verified):
            if "q" not in step:                            # a skipped draft: nothing learned
                continue
            q = torch.tensor(step["q"])
            assert m == cost.best_length(q, trust.value)[0]
            differs |= m != cost.best_length(q)[0]
            trust.update(q, m, step["accepted"], torch.tensor([0, *step["uncut"]]),
                         torch.tensor(step["target"]))
    assert differs                                    # the correction changed some lengths


def test_flat_cost_verifies_the_whole_block():
    target = tiny_target(3, vocab=89, layers=3)
    ids = torch.randint(0, 88, (1, 9))
    refs, _ = references(target, [ids], 40)
    drafter = DoubtfulOracle(random_drafter(target, 3), refs, p_wrong=[0.2], seed=3)
    assert set(speculative_generate(target, drafter, ids, max_new_tokens=40, block_size=6,
                                    cost=FLAT).verified) == {5}


@pytest.fixture(scope="module")
def shipped():
    return load_target()[0], load_drafter()


def test_a_skipped_draft_leaves_the_drafters_context_whole(shipped):
    """After plain steps without the drafter, its next draft equals a draft from scratch over
    the target's features of every committed token: nothing was lost or fed twice."""
    target, drafter = shipped
    ids = torch.tensor([[int(t) for t in torch.randint(3, 200, (24,), generator=torch.Generator()
                                                        .manual_seed(1))]])
    cost = VerifyCost((1.0, 1.9, 2.3, 1.8, 2.0, 2.0, 2.1, 2.2), draft=0.3, max_skip=4)
    out = speculative_generate(target, drafter, ids, max_new_tokens=60, block_size=8, cost=cost,
                               record_steps=True)
    assert torch.equal(out.output_ids, references(target, [ids], 60)[1][0])
    drafted = [s for s in out.steps if "q" in s]
    after_skip = [s for prev, s in zip(out.steps, out.steps[1:]) if "q" not in prev and "q" in s]
    assert after_skip and len(drafted) < len(out.steps)             # both kinds of step ran
    with torch.no_grad():
        for step in drafted:
            start = step["start"]
            seq = out.output_ids[:, :start + 1]                   # committed, up to slot 0
            h = target(seq[:, :-1], output_hidden_states=True).hidden_states
            guess, q = drafter.draft(target, seq[:, -1], target_features(
                h, drafter.target_layer_ids), start, drafter.new_cache(), 8, with_probs=True)
            m = len(step["draft"])
            assert guess[0, :m].tolist() == step["draft"]
            assert torch.allclose(q[0], torch.tensor(step["q"]), atol=1e-4), start


@pytest.mark.parametrize("seed", range(2))
def test_batch_rows_pick_their_own_lengths(seed):
    rng = random.Random(20 + seed)
    target = tiny_target(seed, vocab=89, layers=3)
    prompts = [torch.randint(0, 88, (1, rng.randint(1, 20))) for _ in range(3)]
    refs, want = references(target, prompts, 40)
    drafter = DoubtfulOracle(random_drafter(target, seed), refs, p_wrong=[0.05, 0.3, 0.6],
                             seed=seed)
    from minidflash.batch import left_pad
    ids, mask = left_pad(prompts)
    rows = speculative_generate_batch(target, drafter, ids, max_new_tokens=40, attention_mask=mask,
                                      block_size=8, cost=VerifyCost(STEEP.verify, 0.0, max_skip=0))
    for row, ref in zip(rows, want):
        assert torch.equal(row.output_ids, ref)
    assert len({tuple(r.verified) for r in rows}) == 3


@pytest.mark.parametrize("trust", [0.0, 0.5])
def test_sampling_with_the_cost_model_matches_the_target(sampling_setup, trust):
    """T = 1, block 4, a cost curve under which steps verify 0..3 drafts and some skip the
    drafter, with and without the running trust (which reads earlier steps' target samples):
    the outputs follow the target's own distribution (chi-square)."""
    target, drafter, ids, probs = sampling_setup
    cost = VerifyCost((1.0, 1.5, 1.7, 1.9), draft=0.05, max_skip=1, trust_weight=trust)
    n, gen, counts, lengths = 1500, torch.Generator().manual_seed(0), {}, []
    for _ in range(n):
        out = speculative_generate(target, drafter, ids, max_new_tokens=N_NEW, block_size=4,
                                   temperature=TEMP, stop_token_ids=[STOP], generator=gen,
                                   cost=cost)
        key = tuple(out.new_ids.tolist())
        counts[key] = counts.get(key, 0) + 1
        lengths += out.verified
    assert len(set(lengths)) >= 3
    assert set(counts) <= set(probs)
    big = [k for k in probs if probs[k] * n >= 5]
    obs = [counts.get(k, 0) for k in big] + [n - sum(counts.get(k, 0) for k in big)]
    exp = [probs[k] * n for k in big] + [n * (1 - sum(probs[k] for k in big))]
    assert stats.chisquare(obs, exp).pvalue > 1e-3


def test_a_drafters_files_carry_its_cost_curve(tmp_path):
    target = tiny_target(2, vocab=97, layers=4)
    drafter = random_drafter(target, 2)
    set_decoding(drafter, None, {(None, 1): STEEP, (None, 2): FLAT})
    save_drafter(drafter, tmp_path / "d")
    saved = json.loads((tmp_path / "d" / "decoding.json").read_text())
    assert saved == {"cost": {"by_threads": {"1": STEEP.to_dict(), "2": FLAT.to_dict()}}}
    loaded = load_drafter(tmp_path / "d", target=target)
    config, costs = decoding_of(loaded)
    assert costs == {(None, 1): STEEP, (None, 2): FLAT} and config.p_min == 0.0
    assert for_threads(costs, 1) == STEEP and for_threads(costs, 16) == FLAT
    ids = torch.randint(0, 96, (1, 8))
    threads = torch.get_num_threads()
    try:
        for n, cost in ((1, STEEP), (2, FLAT)):               # the curve of torch's thread count
            torch.set_num_threads(n)
            default = speculative_generate(target, loaded, ids, max_new_tokens=20)
            assert default.verified == speculative_generate(target, loaded, ids, max_new_tokens=20,
                                                            cost=cost).verified
    finally:
        torch.set_num_threads(threads)
    assert set(speculative_generate(target, loaded, ids, max_new_tokens=20, cost=False).verified) == {15}
    saved["cost"] = STEEP.to_dict() | {"verify": [3.0, 4.0]}
    (tmp_path / "d" / "decoding.json").write_text(json.dumps(saved))
    with pytest.raises(ValueError, match="decoding.json: verify cost is in units"):
        load_drafter(tmp_path / "d", target=target)
    with pytest.raises(ValueError, match="cost must be True .* or a VerifyCost"):
        speculative_generate(target, drafter, ids, max_new_tokens=5, cost=[1.0, 2.0])

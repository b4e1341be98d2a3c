"""Many requests at once: lossless per row (paper section 3, batched; minidflash/batch.py).

Each row of a batch must decode exactly what its prompt decodes alone: greedy token-for-token
equal to ``target.generate`` at batch size 1, for random targets and drafters (published format),
rows of different lengths, drafters right for some rows and wrong for others (so rows accept
different numbers of tokens each step), a stop token that ends one row mid-batch, and with the
cache compacted every step or never. At T = 1 each row's outputs follow that prompt's own
distribution (chi-square, as test_lossless.py), and the same test rejects a verify that
forgets the attention mask.
"""

import random

import pytest
import torch
from scipy import stats

import minidflash.batch as ragged
import minidflash.verifier as verifier
from minidflash import decoding
from minidflash.ar_drafter import ARDrafter, make_ar_config
from minidflash.batch import left_pad, pack_right, right_align
from minidflash.core.drafter import DFlashDrafter
from minidflash.verifier import speculative_generate, speculative_generate_batch
from tests import helpers
from tests.helpers import random_drafter, tiny_target


def plain_greedy(target, ids, n, stop=None):
    """The reference: transformers' own greedy decode of ONE prompt (1, S)."""
    return target.generate(ids, do_sample=False, max_new_tokens=n, eos_token_id=stop,
                           pad_token_id=0, attention_mask=torch.ones_like(ids))


def random_prompts(rng, count, vocab, longest=24):
    return [torch.randint(0, vocab - 1, (1, rng.randint(1, longest))) for _ in range(count)]


class RowOracle(DFlashDrafter):
    """Drafts each row's known greedy continuation, wrong with the row's own probability.

    ``references[r]`` is row r's prompt and greedy answer (long enough for every block). A draft
    call sees rows only as (start, last token), so the row is looked up by that pair (a pair two
    rows share drafts the later row's truth: just a wrong draft, never a wrong output). Which
    slots are corrupted is a function of (row, position) only, so a row drafts the same whether
    it is decoded alone or in a batch. The real drafter forward still runs first, so its ragged
    context cache is exercised.
    """

    def __init__(self, base, references, p_wrong, seed=0):
        super().__init__(base.config)
        self.load_state_dict(base.state_dict())
        self.eval().requires_grad_(False)
        self.refs = [r.reshape(-1) for r in references]
        self.p_wrong, self.seed = p_wrong, seed
        self.table = {(s, int(t)): r for r, ref in enumerate(self.refs) for s, t in enumerate(ref)}

    def wrong(self, row, position):
        return random.Random(self.seed * 1_000_003 + row * 10_007 + position).random() < self.p_wrong[row]

    def draft(self, target, last_token, target_hidden, start, cache, block_size=None,
              context_ids=None, context_mask=None):
        guess = super().draft(target, last_token, target_hidden, start, cache, block_size,
                              context_mask=context_mask).clone()
        N, k = guess.shape
        starts = torch.as_tensor(start).reshape(-1).expand(N).tolist()
        for i in range(N):
            s = starts[i]
            r = self.table.get((s, int(last_token[i])))
            if r is None:
                continue
            truth = self.refs[r][s + 1:s + 1 + k]
            guess[i, :len(truth)] = truth
            for j in range(k):
                if self.wrong(r, s + 1 + j):
                    guess[i, j] = (guess[i, j] + 1) % (self.config.vocab_size - 1)
        return guess


# --------------------------------------------------------------------------------------------
# The bookkeeping, against loops that are obvious by inspection
# --------------------------------------------------------------------------------------------

def test_pack_right_keeps_each_rows_tokens_in_order():
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        valid = torch.rand(4, 9, generator=gen) < 0.6
        x = torch.arange(36).view(4, 9)
        index, packed = pack_right(valid)
        W = int(valid.sum(1).max())
        assert index.shape == packed.shape == (4, W)
        for i in range(4):
            mine = x[i][valid[i]].tolist()
            assert x[i].gather(0, index[i])[packed[i]].tolist() == mine
            assert packed[i].tolist() == [False] * (W - len(mine)) + [True] * len(mine)
        y, ok = right_align(x[:, :, None].expand(-1, -1, 2), valid)
        assert torch.equal(ok, packed) and torch.equal(y[..., 0][ok], x[valid])


# --------------------------------------------------------------------------------------------
# Greedy: every row equals its own decode at batch size 1
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(8))
def test_rows_equal_their_own_greedy_decode(seed):
    rng = random.Random(seed)
    target = tiny_target(seed, vocab=rng.choice([61, 97]), layers=rng.choice([2, 3]))
    drafter = random_drafter(target, seed, layers=rng.choice([1, 2]))
    prompts = random_prompts(rng, rng.randint(2, 6), target.config.vocab_size)
    ids, mask = left_pad(prompts)
    n = rng.randint(1, 50)
    refs = [plain_greedy(target, p, n) for p in prompts]
    for B in sorted({1, 2, 16, rng.randint(3, 15)}):
        results = speculative_generate_batch(target, drafter, ids, max_new_tokens=n, block_size=B,
                                             attention_mask=mask)
        assert len(results) == len(prompts)
        for i, (out, ref) in enumerate(zip(results, refs)):
            assert torch.equal(out.output_ids, ref), f"block_size={B}, row {i}"
            assert out.prompt_length == prompts[i].shape[1]


def verify_spy(target, monkeypatch, log):
    """Record every verify pass's batch and check the invariant of the ragged cache: each row
    sees exactly as many cache columns as it has committed tokens before its block (its
    position), whatever the holes."""
    real = decoding.target_pass

    def target_pass(target_, input_ids, cache, *args, **kwargs):    # every pass, lean or not
        pos = kwargs.get("position_ids")
        mask = kwargs.get("attention_mask")
        if log is not None:
            log.append(input_ids.shape[0])
        if pos is not None and mask is not None and input_ids.shape[1] == pos.shape[1]:
            B = pos.shape[1]
            seen = mask[:, :-B].sum(1)
            is_verify = cache is not None and cache.get_seq_length() > 0
            if is_verify:
                assert torch.equal(seen, pos[:, 0]), f"columns seen {seen.tolist()} != positions {pos[:, 0].tolist()}"
        return real(target_, input_ids, cache, *args, **kwargs)

    monkeypatch.setattr(decoding, "target_pass", target_pass)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("compact_at", [ragged.COMPACT_AT, 0.0, 10.0], ids=["default", "every-step", "never"])
def test_ragged_acceptance_rows_match_alone(seed, compact_at, monkeypatch):
    """Rows whose drafter is right, half right or mostly wrong: each row's tokens AND its
    acceptance lengths equal its decode alone, whether the cache is compacted or not."""
    monkeypatch.setattr(ragged, "COMPACT_AT", compact_at)
    rng = random.Random(200 + seed)
    target = tiny_target(seed, vocab=89, layers=3)
    prompts = random_prompts(rng, 4, 89, longest=20)
    n = rng.randint(30, 70)
    B = rng.choice([4, 8, 16])
    refs = [plain_greedy(target, p, n) for p in prompts]
    long_refs = [plain_greedy(target, p, n + 16) for p in prompts]
    drafter = RowOracle(random_drafter(target, seed), long_refs, p_wrong=[0.0, 0.05, 0.3, 0.8],
                        seed=seed)
    compactions = []
    real_compact = ragged.compact

    def counting(cache, valid, at=None):
        out = real_compact(cache, valid, at)
        compactions.append(out.shape[1] < valid.shape[1])
        return out
    monkeypatch.setattr(ragged, "compact", counting)
    verify_spy(target, monkeypatch, None)
    ids, mask = left_pad(prompts)
    results = speculative_generate_batch(target, drafter, ids, max_new_tokens=n,
                                         attention_mask=mask, block_size=B)
    alone = [speculative_generate(target, drafter, p, max_new_tokens=n, block_size=B) for p in prompts]
    for i, (out, ref, one) in enumerate(zip(results, refs, alone)):
        assert torch.equal(out.output_ids, ref), f"row {i}"
        assert out.acceptance_lengths == one.acceptance_lengths, f"row {i}"
    taus = [r.tau for r in results]
    assert taus[0] > 2.5 and taus[0] > taus[3]            # acceptance really was ragged
    if compact_at == 0.0:
        assert any(compactions)
    if compact_at == 10.0:
        assert not any(compactions)


@pytest.mark.parametrize("seed", range(4))
def test_stop_token_ends_one_row_mid_batch(seed, monkeypatch):
    """One row meets the stop token early: its output ends there, the others go on, and the
    batch shrinks by that row from the next verify on."""
    rng = random.Random(300 + seed)
    target = tiny_target(seed, vocab=61, layers=2)
    for _ in range(50):      # prompts where row 1's answer has a token no other answer has
        prompts = random_prompts(rng, 3, 61, longest=12)
        answers = [plain_greedy(target, p, 40)[0, p.shape[1]:].tolist() for p in prompts]
        others = set(answers[0]) | set(answers[2])
        early = [t for t in answers[1][3:20] if t not in others]
        if early:
            break
    stop = early[0]
    refs = [plain_greedy(target, p, 40, stop=stop) for p in prompts]
    assert refs[1].shape[1] < prompts[1].shape[1] + 21 and refs[1][0, -1] == stop
    long_refs = [plain_greedy(target, p, 60) for p in prompts]
    drafter = RowOracle(random_drafter(target, seed), long_refs, p_wrong=[0.3, 0.0, 0.3], seed=seed)
    batch_sizes = []
    verify_spy(target, monkeypatch, batch_sizes)
    ids, mask = left_pad(prompts)
    results = speculative_generate_batch(target, drafter, ids, max_new_tokens=40, block_size=6,
                                         stop_token_ids=[stop], attention_mask=mask)
    for i, (out, ref) in enumerate(zip(results, refs)):
        assert torch.equal(out.output_ids, ref), f"row {i}"
    v = len(results[1].acceptance_lengths)                   # row 1's verify passes
    assert len(results[0].acceptance_lengths) > v and len(results[2].acceptance_lengths) > v
    # the prefill and row 1's verifies had 3 rows; from the next pass on row 1 costs nothing
    assert batch_sizes[:1 + v] == [3] * (1 + v) and batch_sizes[1 + v] == 2
    assert batch_sizes == sorted(batch_sizes, reverse=True)


def test_batch_of_one_is_the_single_sequence_decode():
    target = tiny_target(4, vocab=89, layers=3)
    prompt = torch.randint(0, 88, (1, 7))
    ref = plain_greedy(target, prompt, 60)
    drafter = RowOracle(random_drafter(target, 4), [plain_greedy(target, prompt, 80)], [0.2])
    one = speculative_generate(target, drafter, prompt, max_new_tokens=60, block_size=8)
    (batched,) = speculative_generate_batch(target, drafter, prompt, max_new_tokens=60,
                                            block_size=8)
    (masked,) = speculative_generate_batch(target, drafter, prompt, max_new_tokens=60,
                                           block_size=8, attention_mask=torch.ones_like(prompt))
    for out in (one, batched, masked):
        assert torch.equal(out.output_ids, ref)
        assert out.acceptance_lengths == one.acceptance_lengths
    assert one.tau > 2


def test_shipped_models_rows_match_alone():
    """The shipped tiny target and drafter on four real prompts of different lengths: every row
    drafts, accepts and emits exactly what it does alone (so the drafter's ragged context, its
    positions and holes, are right: a wrong context changes drafts, not outputs)."""
    from minidflash.paths import PROMPTS_DIR
    from minidflash.checkpoints import load_drafter
    from minidflash.target import chat_ids, load_target, stop_ids
    from minidflash.tools.common import read_jsonl

    target, tokenizer = load_target()
    drafter = load_drafter(target=target)
    rows = read_jsonl(PROMPTS_DIR / "arithmetic.jsonl")[:2] + read_jsonl(PROMPTS_DIR / "code.jsonl")[:2]
    prompts = [chat_ids(tokenizer, r["messages"]) for r in rows]
    assert len({p.shape[1] for p in prompts}) > 1
    ids, mask = left_pad(prompts, pad_id=tokenizer.pad_token_id or 0)
    stops = stop_ids(tokenizer)
    results = speculative_generate_batch(target, drafter, ids, max_new_tokens=48,
                                         stop_token_ids=stops, attention_mask=mask)
    for i, p in enumerate(prompts):
        one = speculative_generate(target, drafter, p, max_new_tokens=48, stop_token_ids=stops)
        assert torch.equal(results[i].output_ids, one.output_ids), f"row {i}"
        assert results[i].acceptance_lengths == one.acceptance_lengths, f"row {i}"
    assert max(r.tau for r in results) > 2


# --------------------------------------------------------------------------------------------
# Bad batches
# --------------------------------------------------------------------------------------------

def test_bad_batches_are_refused_clearly():
    target = tiny_target(2)
    drafter = random_drafter(target, 2, block_size=8)
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    with pytest.raises(ValueError, match="decodes one sequence, got a batch of 2: call speculative_generate_batch"):
        speculative_generate(target, drafter, ids, max_new_tokens=4)
    with pytest.raises(ValueError, match="not left-padded"):
        speculative_generate_batch(target, drafter, ids, max_new_tokens=4,
                                   attention_mask=torch.tensor([[1, 1, 0], [1, 1, 1]]))
    with pytest.raises(ValueError, match=r"rows \[1\] of the batch are empty"):
        speculative_generate_batch(target, drafter, ids, max_new_tokens=4,
                                   attention_mask=torch.tensor([[1, 1, 1], [0, 0, 0]]))
    with pytest.raises(ValueError, match="input_ids' shape"):
        speculative_generate_batch(target, drafter, ids, max_new_tokens=4,
                                   attention_mask=torch.ones(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="0 .padding. and 1"):
        speculative_generate_batch(target, drafter, ids, max_new_tokens=4,
                                   attention_mask=torch.full((2, 3), 2))
    ar = ARDrafter(make_ar_config(target.config)).eval()
    with pytest.raises(ValueError, match="needs the DFlash drafter: ARDrafter"):
        speculative_generate_batch(target, ar, ids, max_new_tokens=4, block_size=4,
                                   attention_mask=torch.ones_like(ids))


# --------------------------------------------------------------------------------------------
# Sampling, per row
# --------------------------------------------------------------------------------------------

V, N_NEW, STOP, TEMP = 4, 4, 2, 1.0
PROMPTS = [torch.tensor([[1]]), torch.tensor([[3, 1, 0]]), torch.tensor([[0, 1, 3, 3, 1, 0]])]


def exact_distribution(target, ids):
    """P(output | prompt) of every output of up to N_NEW tokens that ends at its first STOP (or
    has N_NEW tokens), from the target's own softmax over all V**N_NEW continuations."""
    return helpers.exact_stopped_distribution(target, ids, V, N_NEW, STOP, TEMP)


@pytest.fixture(scope="module")
def sampling_setup():
    """A V = 4 target whose attention matters: a padding column or a rejected draft seen by
    mistake moves its next-token distribution by a total variation of about 0.2."""
    target = tiny_target(7, vocab=V, layers=2, hidden=32, heads=2, kv_heads=1)
    with torch.no_grad():
        target.lm_head.weight.mul_(0.3)                 # 20x from tiny_target: too sharp for V = 4
        for layer in target.model.layers:
            layer.self_attn.v_proj.weight.mul_(4.0)
            layer.self_attn.o_proj.weight.mul_(4.0)
    drafter = random_drafter(target, 7, mask_token_id=V - 1)
    return target, drafter, [exact_distribution(target, p) for p in PROMPTS]


def row_pvalues(target, drafter, probs, n, seed):
    """n batched decodes of PROMPTS; per row, the chi-square p-value of its outputs against its
    own exact distribution (outcomes expected < 5 times pooled into one bin)."""
    ids, mask = left_pad(PROMPTS)
    gen = torch.Generator().manual_seed(seed)
    counts = [{} for _ in PROMPTS]
    steps = 0
    for _ in range(n):
        results = speculative_generate_batch(target, drafter, ids, max_new_tokens=N_NEW,
                                             block_size=3, temperature=TEMP, stop_token_ids=[STOP],
                                             generator=gen, attention_mask=mask)
        for c, r in zip(counts, results):
            key = tuple(r.new_ids.tolist())
            c[key] = c.get(key, 0) + 1
        steps += sum(len(r.acceptance_lengths) > 1 for r in results)
    assert steps > n / 2                       # many rows took several (ragged) verify steps
    pvalues = []
    for c, p in zip(counts, probs):
        assert set(c) <= set(p), f"impossible outputs: {sorted(set(c) - set(p))[:5]}"
        big = [k for k in p if p[k] * n >= 5]
        obs = [c.get(k, 0) for k in big] + [n - sum(c.get(k, 0) for k in big)]
        exp = [p[k] * n for k in big] + [n * (1 - sum(p[k] for k in big))]
        pvalues.append(stats.chisquare(obs, exp).pvalue)
    return pvalues


def test_sampling_each_row_matches_its_own_distribution(sampling_setup):
    target, drafter, probs = sampling_setup
    assert all(abs(sum(p.values()) - 1) < 1e-9 for p in probs)
    early = [sum(q for k, q in p.items() if len(k) < N_NEW) for p in probs]
    assert all(0.2 < e < 0.8 for e in early)   # the stop token ends rows early, at different steps
    assert min(row_pvalues(target, drafter, probs, 1500, seed=0)) > 1e-3


def test_sampling_test_catches_a_verify_that_forgets_the_mask(sampling_setup, monkeypatch):
    """The same test, same seed and size, rejects a plausible bug: the verify pass run without
    the attention mask, so a row sees its padding and its rejected drafts."""
    target, drafter, probs = sampling_setup
    real = decoding.target_pass

    def target_pass(target_, input_ids, cache, *args, **kwargs):    # every pass, lean or not
        if cache is not None and cache.get_seq_length() > 0:
            kwargs.pop("attention_mask")
        return real(target_, input_ids, cache, *args, **kwargs)
    monkeypatch.setattr(decoding, "target_pass", target_pass)
    assert min(row_pvalues(target, drafter, probs, 1500, seed=0)) < 1e-6


def test_throughput_tool_compares_every_batch_with_plain_decoding():
    """bench --batch-sizes: every batch decoded by both methods, DFlash's rows checked against
    plain decoding's, figures for every (threads, N), the batched path timed at N = 1."""
    from minidflash.paths import PROMPTS_DIR
    from minidflash.checkpoints import load_drafter
    from minidflash.target import load_target
    from minidflash.tools.measure import batch_bench
    from minidflash.tools.common import read_jsonl

    target, tokenizer = load_target()
    drafter = load_drafter(target=target)
    rows = read_jsonl(PROMPTS_DIR / "arithmetic.jsonl")[:4]
    out = batch_bench.run_suite(target, tokenizer, drafter, rows, [1, 2, 4], [1], 16, 12,
                                progress=False)
    assert list(out) == ["1"] and list(out["1"]) == ["1", "2", "4"]
    for N, f in out["1"].items():
        assert f["identical"] and f["tokens"] > 0 and f["ratio"] > 0 and f["tau"] >= 1
        assert f["batches"] == 4 // int(N)
    assert out["1"]["1"]["dflash_batched_path_tokens_per_s"] > 0
    assert len({f["tau"] for f in out["1"].values()}) == 1     # each row accepts as it does alone


def test_throughput_tool_in_exact_mode_checks_every_row_against_its_prompt_alone(monkeypatch):
    """bench --batch-sizes --exact: each row of a batch (plain's and DFlash's) compared with plain
    decoding's answer for its prompt alone; one row changed, the check says so."""
    from minidflash.paths import PROMPTS_DIR
    from minidflash.checkpoints import load_drafter
    from minidflash.target import load_target
    from minidflash.tools.common import read_jsonl
    from minidflash.tools.measure import batch_bench

    target, tokenizer = load_target(dtype=torch.bfloat16)
    drafter = load_drafter(target=target)
    rows = read_jsonl(PROMPTS_DIR / "arithmetic.jsonl")[:2]
    run = lambda: batch_bench.run_suite(target, tokenizer, drafter, rows, [2, 1], [1], 16, 10,
                                        progress=False, exact=True)["1"]
    out = run()
    assert out["2"]["rows_as_batch_of_1"] is True and out["2"]["identical"]
    decode_batch = batch_bench.decode_batch

    def one_row_changed(target, drafter, prompts, *args):
        tokens, seconds, outs, taus = decode_batch(target, drafter, prompts, *args)
        if len(prompts) > 1:
            outs[1] = outs[1].clone()
            outs[1][-1] += 1
        return tokens, seconds, outs, taus
    monkeypatch.setattr(batch_bench, "decode_batch", one_row_changed)
    assert run()["2"]["rows_as_batch_of_1"] is False

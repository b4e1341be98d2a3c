"""A draft vocabulary (EAGLE-3's reduced draft vocabulary, FR-Spec): the drafter scores only K
token ids, a slice of the target's lm_head rows; verification scores all V, so decoding stays
lossless. Its ids live in an optional draft_vocab.json beside the published files."""

import json
import random

import pytest
import torch
from safetensors.torch import load_file

from minidflash import train_data, trainer
from minidflash.core.drafter import DFlashDrafter
from minidflash.checkpoints import DRAFT_VOCAB_FILE, check_draft_vocab, load_drafter, save_drafter
from minidflash.verifier import speculative_generate
from tests.helpers import published_names, random_drafter, tiny_target
from tests.test_lossless import N_NEW, TEMP, V, chi_square_pvalue, exact_distribution, plain_greedy


def with_vocab(drafter, ids):
    drafter.set_draft_vocab(ids)
    return drafter


def drafts(result) -> list[int]:
    return [t for s in result.steps for t in s["draft"]]


# --------------------------------------------------------------------------------------------
# Decoding stays lossless; the subset only changes what is drafted
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(8))
def test_greedy_identical_with_a_draft_vocabulary(seed):
    """Random targets, random drafters, random subsets (often missing tokens the target emits):
    token-for-token plain greedy decoding, and every drafted token is in the subset."""
    rng = random.Random(seed)
    target = tiny_target(seed, vocab=rng.choice([61, 97, 128]), layers=rng.choice([2, 4]))
    Vt = target.config.vocab_size
    subset = rng.sample(range(Vt), rng.randint(1, Vt // 2))
    drafter = with_vocab(random_drafter(target, seed, layers=rng.choice([1, 2])), subset)
    ids = torch.randint(0, Vt - 1, (1, rng.randint(1, 20)))
    n = rng.randint(1, 60)
    ref = plain_greedy(target, ids, n)
    for B in sorted({2, 16, rng.randint(3, 15)}):
        out = speculative_generate(target, drafter, ids, max_new_tokens=n, block_size=B,
                                   record_steps=True)
        assert torch.equal(out.output_ids, ref), f"block_size={B}"
        assert set(drafts(out)) <= set(subset)


class SubsetOracle(DFlashDrafter):
    """Drafts the target's greedy continuation through the real draft path: its forward (run for
    real first, so the cache grows as in decoding) returns at each block slot the lm_head row of
    the token the target emits there. Over all V the argmax is that token; over a subset it is
    that token when the subset has it, else some token of the subset."""

    def __init__(self, base: DFlashDrafter, reference: torch.Tensor, rows: torch.Tensor):
        super().__init__(base.config)
        self.load_state_dict(base.state_dict())
        self.eval().requires_grad_(False)
        self.reference, self.rows = reference[0], rows

    def forward(self, noise_embedding, target_hidden, position_ids, *args, **kwargs):
        h = super().forward(noise_embedding, target_hidden, position_ids, *args, **kwargs)
        return self.rows[self.reference[position_ids[:, -h.shape[1]:]]]      # (N, Q, H)


@pytest.mark.parametrize("seed", range(4))
def test_a_token_outside_the_subset_is_never_drafted_yet_still_emitted(seed):
    target = tiny_target(seed, vocab=97, layers=3)
    ids = torch.randint(0, 96, (1, 6))
    ref = plain_greedy(target, ids, 60)
    new = ref[0, 6:].tolist()
    banned = {new[5], new[20], new[40]}                 # tokens the target does emit
    subset = [t for t in range(97) if t not in banned]
    padded = torch.cat([ref, torch.zeros(1, 32, dtype=torch.long)], 1)
    oracle = SubsetOracle(random_drafter(target, seed), padded, target.lm_head.weight)
    full = speculative_generate(target, oracle, ids, max_new_tokens=60, block_size=8,
                                record_steps=True)
    assert torch.equal(full.output_ids, ref) and full.tau > 7   # the oracle drafts the truth
    out = speculative_generate(target, with_vocab(oracle, subset), ids, max_new_tokens=60,
                               block_size=8, record_steps=True)
    assert torch.equal(out.output_ids, ref)             # lossless: every banned token is emitted
    assert banned <= set(out.output_ids[0, 6:].tolist())
    assert not banned & set(drafts(out))                # ... and never drafted
    for s in out.steps:                                 # the draft path, slot by slot
        truth = padded[0, s["start"] + 1:s["start"] + 1 + len(s["draft"])].tolist()
        for d, t in zip(s["draft"], truth):
            assert d == t if t not in banned else (d != t and d in subset), (s["start"], d, t)
    assert 2 < out.tau < full.tau                       # banned tokens cut some blocks short


def test_draft_is_the_argmax_over_the_subset(monkeypatch):
    """draft() against a hand computation: full-vocabulary logits with the tokens outside the
    subset masked out, argmax, as token ids; a subset of all V drafts exactly as none."""
    target = tiny_target(2, vocab=97)
    drafter = random_drafter(target, 2, layers=1, block_size=8)
    with torch.no_grad():  # a sharper drafter: its argmax often falls outside the subset
        drafter.norm.weight.mul_(50.0)
    subset = torch.tensor([t for t in range(97) if t % 3])               # not a prefix of ids
    hidden = torch.randn(3, 10, 3 * 64)
    last = torch.randint(0, 96, (3,))
    got = {}
    for name, vocab in (("none", None), ("all", torch.arange(97)), ("subset", subset)):
        drafter.set_draft_vocab(vocab)
        got[name] = drafter.draft(target, last, hidden, 10, drafter.new_cache())
    with torch.no_grad():
        h = drafter(target.get_input_embeddings()(torch.cat(
            [last[:, None], torch.full((3, 7), drafter.mask_token_id)], 1)),
            hidden, torch.arange(0, 18).expand(3, -1))
        logits = target.lm_head(h[:, 1:])
    masked = logits.masked_fill(~torch.isin(torch.arange(97), subset), float("-inf"))
    assert torch.equal(got["none"], logits.argmax(-1)) and torch.equal(got["all"], got["none"])
    assert torch.equal(got["subset"], masked.argmax(-1))
    assert (got["none"] % 3 == 0).any()                 # the subset did change some drafts


def test_sampling_with_a_draft_vocabulary_matches_the_target():
    """T = 1 (test_lossless's exact distribution and chi-square): this drafter drafts 0 over
    all V; over the subset {1, 2} it never does, yet outputs with 0s keep their probability."""
    target = tiny_target(7, vocab=V, layers=2, hidden=32, heads=2, kv_heads=1)
    with torch.no_grad():
        target.lm_head.weight.mul_(0.1)
    drafter = random_drafter(target, 7, mask_token_id=V - 1)
    ids = torch.tensor([[1, 2, 0]])
    probs = exact_distribution(target, ids)
    full = speculative_generate(target, drafter, ids, max_new_tokens=N_NEW, block_size=3,
                                temperature=TEMP, generator=torch.Generator().manual_seed(0),
                                record_steps=True)
    assert 0 in drafts(full)
    drafter.set_draft_vocab([2, 1])
    gen, counts, drafted, n = torch.Generator().manual_seed(0), {}, set(), 1500
    for _ in range(n):
        out = speculative_generate(target, drafter, ids, max_new_tokens=N_NEW, block_size=3,
                                   temperature=TEMP, generator=gen, record_steps=True)
        key = tuple(out.new_ids.tolist())
        counts[key] = counts.get(key, 0) + 1
        drafted |= set(drafts(out))
    assert drafted and drafted <= {1, 2}
    assert sum(c for k, c in counts.items() if 0 in k) > n / 10
    assert chi_square_pvalue(counts, probs, n) > 1e-3


# --------------------------------------------------------------------------------------------
# On disk: an optional file beside the published ones
# --------------------------------------------------------------------------------------------

def test_round_trip_with_and_without_the_file(tmp_path):
    target = tiny_target(0)
    plain = random_drafter(target, 0, layers=2, block_size=8)
    subset = random_drafter(target, 0, layers=2, block_size=8)
    subset.set_draft_vocab([90, 3, 17, 5, 0, 2])
    save_drafter(plain, tmp_path / "plain")
    save_drafter(subset, tmp_path / "subset")
    assert sorted(p.name for p in (tmp_path / "plain").iterdir()) == ["config.json", "model.safetensors"]
    assert sorted(p.name for p in (tmp_path / "subset").iterdir()) == [
        "config.json", DRAFT_VOCAB_FILE, "model.safetensors"]
    # the published files are byte for byte what a drafter without a subset writes
    for name in ("config.json", "model.safetensors"):
        assert (tmp_path / "plain" / name).read_bytes() == (tmp_path / "subset" / name).read_bytes()
    assert set(load_file(str(tmp_path / "subset" / "model.safetensors"))) == published_names(2)
    assert set(subset.state_dict()) == published_names(2)
    assert json.loads((tmp_path / "subset" / DRAFT_VOCAB_FILE).read_text()) == {
        "token_ids": [0, 2, 3, 5, 17, 90]}

    loaded = load_drafter(tmp_path / "subset", target=target)
    assert loaded.draft_vocab.tolist() == [0, 2, 3, 5, 17, 90]
    assert load_drafter(tmp_path / "subset", draft_vocab=False).draft_vocab is None
    assert load_drafter(tmp_path / "plain").draft_vocab is None
    ids = torch.randint(0, 96, (1, 6))
    ignored = load_drafter(tmp_path / "subset", draft_vocab=False)
    runs = [drafts(speculative_generate(target, d, ids, max_new_tokens=30, record_steps=True))
            for d in (subset, loaded, plain, ignored)]
    assert runs[0] == runs[1] and runs[2] == runs[3] and runs[0] != runs[2]
    assert set(runs[0]) <= {0, 2, 3, 5, 17, 90}
    # saving a subset drafter again without its subset drops the file
    loaded.set_draft_vocab(None)
    save_drafter(loaded, tmp_path / "subset")
    assert not (tmp_path / "subset" / DRAFT_VOCAB_FILE).exists()


def test_save_is_atomic(tmp_path, monkeypatch):
    """A leftover half-written folder never ships its files; a save that fails leaves the old
    drafter whole."""
    target = tiny_target(0)
    d = random_drafter(target, 0)
    (tmp_path / "d.tmp").mkdir()
    (tmp_path / "d.tmp" / DRAFT_VOCAB_FILE).write_text('{"token_ids": [1]}')   # a stale file
    save_drafter(d, tmp_path / "d")
    assert load_drafter(tmp_path / "d").draft_vocab is None
    d.set_draft_vocab([4, 5, 6])
    save_drafter(d, tmp_path / "d")
    d.set_draft_vocab([7, 8])
    real = json.dumps

    def crash(obj, *args, **kwargs):
        if "token_ids" in obj:
            raise OSError("disk full")
        return real(obj, *args, **kwargs)
    monkeypatch.setattr(json, "dumps", crash)
    with pytest.raises(OSError):
        save_drafter(d, tmp_path / "d")
    monkeypatch.undo()
    assert load_drafter(tmp_path / "d").draft_vocab.tolist() == [4, 5, 6]


def test_bad_draft_vocabularies_are_refused_clearly(tmp_path):
    target = tiny_target(0)
    d = random_drafter(target, 0)
    for bad, says in (([97], "outside the vocabulary 0..96"), ([-1, 3], "outside the vocabulary"),
                      ([3, 5, 3], "repeats ids \\[3\\]"), ([], "non-empty"),
                      (torch.tensor([1.0, 2.0]), "integer token ids"),
                      (torch.tensor([[1, 2]]), "1-D")):
        with pytest.raises(ValueError, match=says):
            check_draft_vocab(bad, d.config.vocab_size)
    assert d.draft_vocab is None                        # a refused subset leaves none set
    save_drafter(d, tmp_path / "d")
    for text in ('{"token_ids": [1, 200]}', '{"ids": [1, 2]}', '{"token_ids": [4, 4]}'):
        (tmp_path / "d" / DRAFT_VOCAB_FILE).write_text(text)
        with pytest.raises(ValueError, match=DRAFT_VOCAB_FILE):
            load_drafter(tmp_path / "d")
    assert load_drafter(tmp_path / "d", draft_vocab=False).draft_vocab is None
    small = tiny_target(0, vocab=61)                    # a subset naming rows this target lacks
    d = with_vocab(random_drafter(target, 0, mask_token_id=60), [1, 80])
    with pytest.raises(ValueError, match="draft vocabulary names token 80"):
        speculative_generate(small, d, torch.tensor([[1, 2]]), max_new_tokens=5)


# --------------------------------------------------------------------------------------------
# Training: the subset from the regenerated answers, the loss over it
# --------------------------------------------------------------------------------------------

def test_draft_vocabulary_counts_answer_tokens():
    data = [{"ids": torch.tensor([9, 9, 9, 1, 2, 2, 3]), "response_start": 3},    # prompt: 9 9 9
            {"ids": torch.tensor([9, 2, 4, 4, 1]), "response_start": 1}]
    ids, coverage = train_data.draft_vocabulary(data, 3, vocab_size=10)
    # answer counts: 2 x3, 1 x2, 4 x2, 3 x1 (9 only in prompts); ties go to the lower id
    assert ids.tolist() == [1, 2, 4] and coverage == pytest.approx(7 / 8)
    assert train_data.draft_vocabulary(data, 10, 10)[1] == 1.0
    for k in (0, 11):
        with pytest.raises(ValueError, match="choose 1..10"):
            train_data.draft_vocabulary(data, k, 10)
    with pytest.raises(ValueError, match="outside 0..3"):
        train_data.draft_vocabulary(data, 2, 4)


def test_loss_over_the_subset_skips_labels_outside_it():
    """Hand computation: CE over the subset's columns for labels inside it; a label outside gets
    no loss but is a miss for tau; its share is reported."""
    torch.manual_seed(0)
    vocab = torch.tensor([1, 4, 6, 9])
    logits = torch.randn(1, 2, 3, 4)                                       # (N, n, B, K)
    labels = torch.tensor([[[-100, 4, 9], [-100, 5, 6]]])                  # 5 is outside
    weights, valid = torch.tensor([0.0, 1.0, 0.5]), torch.ones(1, 2)
    loss, st = trainer.drafter_loss(logits, labels, weights, valid, vocab=vocab)
    logp = torch.log_softmax(logits, -1)
    want = -(1.0 * logp[0, 0, 1, 1] + 0.5 * logp[0, 0, 2, 3] + 0.5 * logp[0, 1, 2, 2]) / 2.0
    assert loss.item() == pytest.approx(want.item(), rel=1e-6)
    assert st["outside"] == pytest.approx(1 / 4)
    # tau with the drafts mapped back to token ids: make block 0 right, block 1 right but for 5
    right = torch.full((1, 2, 3, 4), -5.0)
    for b, s, col in ((0, 1, 1), (0, 2, 3), (1, 1, 0), (1, 2, 2)):
        right[0, b, s, col] = 5.0
    assert trainer.drafter_loss(right, labels, weights, valid, vocab=vocab)[1]["tau"] == 2.0


def test_training_with_a_draft_vocabulary(tmp_path):
    """train() drafts over the K most frequent answer tokens, saves them beside the drafter,
    reports their coverage and the labels outside them; the drafter still learns."""
    from tests.test_trainer import Tok, toy_training_data

    target, data = toy_training_data()
    cfg = trainer.TrainConfig(num_layers=1, block_size=8, anchors_per_seq=8, steps=40,
                              batch_size=4, lr=3e-3, eval_every=40, out=str(tmp_path / "d"),
                              draft_vocab=12)
    out = trainer.train(cfg, target, Tok(60), data, progress=False)
    vocab, coverage = train_data.draft_vocabulary(data, 12, 61)
    assert torch.equal(out["drafter"].draft_vocab, vocab)
    assert load_drafter(tmp_path / "d").draft_vocab.tolist() == vocab.tolist()
    info = json.loads((tmp_path / "d" / "training.json").read_text())["info"]["draft_vocab"]
    assert info["k"] == 12 and info["answer_coverage"] == pytest.approx(coverage, abs=1e-5)
    assert 0 < info["labels_outside"] < 1 - coverage + 0.2
    h = out["history"]["loss"]
    assert sum(h[-10:]) < 0.8 * sum(h[:10])
    with pytest.raises(ValueError, match="DFlash drafter only"):
        trainer.train(trainer.TrainConfig(drafter="ar", draft_vocab=12, out=str(tmp_path / "a")),
                      target, Tok(60), data, progress=False)


def test_a_checkpoint_from_before_the_new_fields_resumes(tmp_path, monkeypatch):
    """A checkpoint whose config predates draft_vocab and soft_labels (their defaults, off)
    resumes instead of silently starting over; a config that really differs starts over."""
    from tests.test_trainer import Tok, toy_training_data

    target, data = toy_training_data()
    cfg = trainer.TrainConfig(num_layers=1, block_size=8, anchors_per_seq=8, steps=3,
                              batch_size=4, eval_every=3, out=str(tmp_path / "d"))
    first = trainer.train(cfg, target, Tok(60), data, progress=False)
    state = torch.load(tmp_path / "d.ckpt" / "state.pt")
    for key in ("draft_vocab", "soft_labels"):
        del state["config"][key]
    torch.save(state, tmp_path / "d.ckpt" / "state.pt")
    batches, real = [], trainer.make_batch
    monkeypatch.setattr(trainer, "make_batch", lambda *a, **k: (batches.append(1), real(*a, **k))[1])
    assert trainer.train(cfg, target, Tok(60), data, progress=False)["history"] == first["history"]
    assert batches == []                                # resumed at step 3 of 3: nothing to do
    state["config"]["num_layers"] = 2
    torch.save(state, tmp_path / "d.ckpt" / "state.pt")
    trainer.train(cfg, target, Tok(60), data, progress=False)
    assert len(batches) == 3                            # started over

"""Soft labels: the target's top-k logits at every answer position, taken in the pass that gives
the features, and the KL from the target's distribution (renormalised over its top-k, and over
the draft vocabulary when one is set) to the drafter's, in place of the CE to its tokens."""

import math

import pytest
import torch
import torch.nn.functional as F

from minidflash import train_data, trainer
from tests.helpers import tiny_target
from tests.test_chat_prompts import IdsTokenizer
from tests.test_trainer import Tok, toy_training_data


def hand_kl(drafter_logits, top_values, top_ids, keep=None) -> float:
    """KL(p || q) by the definition: p the softmax of the kept top-k values, q the softmax of
    all the drafter's logits (columns are token ids, or ``keep``'s positions when given)."""
    cols = list(range(len(drafter_logits))) if keep is None else keep
    zq = sum(math.exp(x) for x in drafter_logits)
    kept = [(v, t) for v, t in zip(top_values, top_ids) if t in cols]
    zp = sum(math.exp(v) for v, _ in kept)
    return sum(math.exp(v) / zp * (math.log(math.exp(v) / zp)
                                   - math.log(math.exp(drafter_logits[cols.index(t)]) / zq))
               for v, t in kept)


def test_soft_loss_is_the_kl_by_hand():
    torch.manual_seed(0)
    logits = torch.randn(1, 1, 3, 7)                               # (N, n, B, V)
    values = torch.randn(1, 1, 3, 3) * 3
    ids = torch.tensor([[[[4, 1, 6], [0, 2, 3], [5, 6, 1]]]])      # (N, n, B, k)
    kl, defined = trainer.soft_loss(logits, (values, ids))
    assert defined.all()
    for s in range(3):
        assert kl[0, 0, s].item() == pytest.approx(
            hand_kl(logits[0, 0, s].tolist(), values[0, 0, s].tolist(), ids[0, 0, s].tolist()), rel=1e-5)
    # the weighted loss of drafter_loss: sum_k w_k KL_k / sum_k w_k over labelled slots
    labels = torch.tensor([[[-100, 1, 2]]])
    w = torch.tensor([0.0, 1.0, 0.25])
    loss, _ = trainer.drafter_loss(logits, labels, w, torch.ones(1, 1), soft=(values, ids))
    assert loss.item() == pytest.approx((kl[0, 0, 1] + 0.25 * kl[0, 0, 2]).item() / 1.25, rel=1e-6)


def test_soft_loss_over_a_draft_vocabulary_by_hand():
    """Restricted to the draft vocabulary: p renormalised over the top-k tokens inside it; a slot
    whose top-k lies wholly outside has no loss (and no NaN)."""
    torch.manual_seed(1)
    vocab = torch.tensor([1, 3, 4, 6])
    logits = torch.randn(1, 1, 3, 4)                               # (N, n, B, K)
    values = torch.randn(1, 1, 3, 3) * 3
    ids = torch.tensor([[[[4, 0, 6], [3, 2, 1], [0, 2, 5]]]])      # slot 2: nothing inside
    kl, defined = trainer.soft_loss(logits, (values, ids), vocab)
    assert defined.tolist() == [[[True, True, False]]] and torch.isfinite(kl).all()
    for s in range(2):
        assert kl[0, 0, s].item() == pytest.approx(hand_kl(
            logits[0, 0, s].tolist(), values[0, 0, s].tolist(), ids[0, 0, s].tolist(),
            keep=vocab.tolist()), rel=1e-5)
    logits.requires_grad_(True)
    loss, _ = trainer.drafter_loss(logits, torch.tensor([[[-100, 3, 0]]]), torch.ones(3),
                                   torch.ones(1, 1), vocab=vocab, soft=(values, ids))
    loss.backward()
    assert loss.item() == pytest.approx(kl[0, 0, 1].item(), rel=1e-6)
    assert torch.isfinite(logits.grad).all() and (logits.grad[0, 0, 2] == 0).all()


def test_with_all_of_a_one_hot_target_it_ranks_like_ce():
    """k = V and target logits peaked on the label: the KL is the CE (less p's ~0 entropy), and
    it orders candidate drafters exactly as the CE does."""
    torch.manual_seed(2)
    Vs, B = 11, 5
    labels = torch.randint(0, Vs, (1, 1, B))
    labels[0, 0, 0] = -100
    values = F.one_hot(labels.clamp(min=0), Vs).float() * 40.0     # (1, 1, B, V)
    ids = torch.arange(Vs).expand(1, 1, B, Vs)
    w = trainer.loss_weights(B, 4.0)
    ce, kl = [], []
    for _ in range(20):
        logits = torch.randn(1, 1, B, Vs) * 3
        ce.append(trainer.drafter_loss(logits, labels, w, torch.ones(1, 1))[0].item())
        kl.append(trainer.drafter_loss(logits, labels, w, torch.ones(1, 1), soft=(values, ids))[0].item())
    assert kl == pytest.approx(ce, abs=1e-6)
    assert sorted(range(20), key=ce.__getitem__) == sorted(range(20), key=kl.__getitem__)


# --------------------------------------------------------------------------------------------
# The target's top-k: where it is taken, and which slot it goes to
# --------------------------------------------------------------------------------------------

def test_each_slot_gets_the_logits_that_chose_its_label():
    """On the target's own greedy text the top-1 of slot k's soft target is its hard label
    x_{a+k} (chosen from the logits at a+k-1), for every labelled slot."""
    target, data = toy_training_data()
    ids = torch.stack([d["ids"] for d in data[:4]])                  # (4, 46), no padding
    gen = torch.Generator().manual_seed(0)
    anchors = torch.stack([trainer.sample_anchors(6, ids.shape[1], 8, 6, gen) for _ in range(4)])
    _, top = train_data.target_pass(target, ids, [0, 1], topk=5)
    values, tids = trainer.slot_topk(top, anchors, 8)               # (4, 6, 8, 5)
    labels = trainer.block_labels(ids, anchors, 8)
    assert values.shape == (4, 6, 8, 5) and torch.equal(tids[:, :, 1:, 0], labels[:, :, 1:])
    assert (values[..., :-1] >= values[..., 1:]).all()              # sorted: top-1 first


def test_regenerate_keeps_the_top_k_a_fresh_forward_gives(monkeypatch):
    """regenerate(topk=k) takes the top-k from the lm_head while generating (left padding, rows
    that stop early): the same as a teacher-forced pass, placed as train() places it."""
    target = tiny_target(5, vocab=97, layers=4)
    torch.manual_seed(2)
    prompts = [{"messages": [{"role": "user", "content": " ".join(
        str(t) for t in torch.randint(1, 96, (n,)).tolist())}]} for n in (4, 9, 6, 12, 7)]
    monkeypatch.setattr(train_data, "chat_ids", lambda tok, messages: torch.tensor(
        [[int(t) for t in messages[0]["content"].split()]]))
    first = train_data.chat_ids(None, prompts[0]["messages"])
    stop = int(target.generate(first, do_sample=False, max_new_tokens=4, pad_token_id=0,
                               attention_mask=torch.ones_like(first))[0, -1])
    monkeypatch.setattr(train_data, "stop_ids", lambda tok: [stop])
    plain = train_data.regenerate(target, IdsTokenizer(), prompts, max_new_tokens=20, batch_size=5,
                                  progress=False)
    assert all("topk_ids" not in d for d in plain)
    for batch_size, layer_ids in ((5, None), (2, [0, 3])):
        data = train_data.regenerate(target, IdsTokenizer(), prompts, max_new_tokens=20,
                                     batch_size=batch_size, progress=False, layer_ids=layer_ids,
                                     topk=6)
        assert min(len(d["ids"]) - d["response_start"] for d in data) < 20
        for d, p in zip(data, plain):
            assert torch.equal(d["ids"], p["ids"]) and ("features" in d) == (layer_ids is not None)
            r, S = d["response_start"], len(d["ids"])
            assert d["topk_ids"].shape == (S - r, 6) and d["topk_ids"].dtype == torch.int32
            assert torch.equal(d["topk_ids"][:, 0].long(), d["ids"][r:])     # greedy: top-1 = token
            values, tids = train_data.answer_topk(d, 4, S)                   # (S, 4), by position
            _, (fresh_v, fresh_i) = train_data.target_pass(target, d["ids"][None], [0], topk=4)
            assert torch.equal(tids[r - 1:S - 1], fresh_i[0, r - 1:S - 1])
            assert torch.allclose(values[r - 1:S - 1], fresh_v[0, r - 1:S - 1], atol=2e-2, rtol=1e-3)
    with pytest.raises(ValueError, match="regenerate with topk >= 8"):
        train_data.answer_topk(data[0], 8, 40)


# --------------------------------------------------------------------------------------------
# Training with them
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("features,draft_vocab", [("online", 0), ("offline", 0), ("online", 20)])
def test_training_with_soft_labels(tmp_path, monkeypatch, features, draft_vocab):
    """A few dozen steps on a random target's own text: the KL falls, tau is measured against the
    hard labels; the loss really is the soft one (the KL, not the CE, reached drafter_loss)."""
    target, data = toy_training_data()
    seen, real = [], trainer.drafter_loss
    monkeypatch.setattr(trainer, "drafter_loss",
                        lambda *a: (seen.append(a[5] if len(a) > 5 else None), real(*a))[1])
    cfg = trainer.TrainConfig(num_layers=1, block_size=8, anchors_per_seq=8, steps=40,
                              batch_size=4, lr=3e-3, eval_every=40, out=str(tmp_path / "d"),
                              features=features, soft_labels=8, draft_vocab=draft_vocab)
    out = trainer.train(cfg, target, Tok(60), data, progress=False)
    assert len(seen) == 40 and all(s is not None and s[1].shape[-1] == 8 for s in seen)
    h = out["history"]
    assert all(math.isfinite(x) for x in h["loss"]) and sum(h["loss"][-10:]) < 0.8 * sum(h["loss"][:10])
    assert all(1 <= t <= 8 for t in h["tau"])
    with pytest.raises(ValueError, match="choose 0 \\(off\\) or 1..61"):
        trainer.train(trainer.TrainConfig(soft_labels=62, out=str(tmp_path / "x")), target,
                      Tok(60), data, progress=False)

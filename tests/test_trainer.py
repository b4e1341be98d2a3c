"""The training recipe (paper section 4.2): the visibility rule, train/inference agreement, and a
regression test named after each bug that public training code has shipped."""

import json
import math

import pytest
import torch

import minidflash.core.mask as mask_mod
from minidflash import paths, train_data, train_start, trainer
from minidflash.core.paper import PAPER, gamma_for
from minidflash.core.drafter import target_features
from minidflash.core.mask import block_mask
from tests.helpers import random_drafter, tiny_target


def loop_mask(anchors, S, B):
    """The rule, by inspection: three nested loops over blocks, slots and keys."""
    n = len(anchors)
    m = torch.zeros(n * B, S + n * B, dtype=torch.bool)
    for b in range(n):
        for i in range(B):
            for j in range(S + n * B):
                if j < S:
                    m[b * B + i, j] = j < anchors[b]          # context strictly before the anchor
                else:
                    m[b * B + i, j] = (j - S) // B == b       # its own block, every slot
    return m


@pytest.mark.parametrize("anchors,S,B", [([0], 5, 1), ([3, 7, 7], 12, 4), ([2, 9, 30, 31], 40, 5),
                                         ([16], 16, 16), ([0, 1, 2], 3, 3)])
def test_visibility_rule_matches_loop(anchors, S, B):
    assert torch.equal(block_mask(torch.tensor(anchors), S, B), loop_mask(anchors, S, B))


def test_visibility_rule_on_ints():
    assert mask_mod.visible(0, 4, 5, 10, 4) and not mask_mod.visible(0, 5, 5, 10, 4)
    assert mask_mod.visible(1, 10 + 4, 7, 10, 4) and not mask_mod.visible(1, 10 + 3, 7, 10, 4)


# --------------------------------------------------------------------------------------------
# Training pass == inference path
# --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def setup():
    target = tiny_target(21, vocab=97, layers=4)
    drafter = random_drafter(target, 21, layers=2, block_size=6)
    torch.manual_seed(0)
    prompt = torch.randint(0, 96, (1, 7))
    ids = target.generate(prompt, do_sample=False, max_new_tokens=40, min_new_tokens=40,
                          pad_token_id=0, attention_mask=torch.ones_like(prompt))   # (1, 47)
    with torch.no_grad():
        hidden = target_features(target(ids, output_hidden_states=True).hidden_states,
                                 drafter.target_layer_ids)                          # (1, S, L_f*H)
    anchors = torch.tensor([[7, 8, 15, 30, 41]])                                    # <= S - B
    return target, drafter, ids, hidden, anchors


def inference_logits(drafter, target, ids, hidden, a, chunk=3):
    """Logits (B, V) of the block at anchor a the way decoding computes them: context features
    of positions < a reach the drafter's cache a few at a time (each call with a block whose
    K/V are not kept, as in decoding), then the real block, with no mask."""
    B, embed = drafter.block_size, target.get_input_embeddings()
    cache = drafter.new_cache()

    def call(lo, hi, first_token):
        block = torch.full((1, B), drafter.mask_token_id)
        block[0, 0] = first_token
        with torch.no_grad():
            return drafter(embed(block), hidden[:, lo:hi], torch.arange(lo, hi + B)[None], cache=cache)

    for lo in range(0, a - chunk, chunk):
        call(lo, lo + chunk, ids[0, lo + chunk])            # an earlier decoding step
    h = call(cache.get_seq_length(), a, ids[0, a])
    return target.get_output_embeddings()(h)[0]


def training_logits(setup):
    target, drafter, ids, hidden, anchors = setup
    with torch.no_grad():
        return trainer.drafter_logits(drafter, target, ids, hidden, anchors)[0]   # (n, B, V)


def max_gap(setup):
    target, drafter, ids, hidden, anchors = setup
    train = training_logits(setup)
    return max((train[b] - inference_logits(drafter, target, ids, hidden, int(a))).abs().max().item()
               for b, a in enumerate(anchors[0]))


def test_training_pass_equals_inference_path(setup):
    assert max_gap(setup) <= 1e-5


def test_bug_context_visible_at_anchor_is_caught(setup, monkeypatch):
    """Bug: context j <= anchor (the anchor's own feature leaks; at inference it is unknown)."""
    def leaky(q_block, k, anchor, num_context, block_size):
        return ((k < num_context) & (k <= anchor)) | (
            (k >= num_context) & ((k - num_context) // block_size == q_block))
    monkeypatch.setattr(mask_mod, "visible", leaky)
    assert max_gap(setup) > 1e-3


def test_bug_causal_instead_of_bidirectional_block_is_caught(setup, monkeypatch):
    """Bug: a causal mask inside the block (block diffusion is bidirectional within a block)."""
    def causal(anchors, num_context, block_size):
        m = correct_block_mask(anchors, num_context, block_size).clone()
        slot = torch.arange(m.shape[0]) % block_size
        ks = torch.arange(m.shape[1] - num_context) % block_size
        m[:, num_context:] &= ks[None, :] <= slot[:, None]
        return m
    correct_block_mask = mask_mod.block_mask
    monkeypatch.setattr(mask_mod, "block_mask", causal)
    assert max_gap(setup) > 1e-3


class Tok:
    """The two things train() asks of a tokenizer."""
    pad_token_id = 0

    def __init__(self, mask_id):
        self.mask_id = mask_id

    def convert_tokens_to_ids(self, token):
        return self.mask_id


@pytest.fixture(scope="module")
def regenerated():
    """A target and two of its own greedy answers (equal lengths: no padding), as train() gets."""
    target = tiny_target(21, vocab=97, layers=4)
    torch.manual_seed(1)
    prompts = torch.randint(1, 96, (2, 7))
    ids = target.generate(prompts, do_sample=False, max_new_tokens=40, min_new_tokens=40,
                          pad_token_id=0, attention_mask=torch.ones_like(prompts))   # (2, 47)
    return target, [{"ids": row, "response_start": 7} for row in ids]


def labels_fed_to_the_loss(target, data, out):
    """One real train() step; the (ids, anchors, labels) its loss was given."""
    seen, real_batch, real_loss = {}, trainer.make_batch, trainer.drafter_loss

    def make_batch(*args, **kwargs):
        batch = real_batch(*args, **kwargs)
        seen.update(ids=batch[0], anchors=batch[1])
        return batch

    def drafter_loss(logits, labels, *args):
        seen["labels"] = labels
        return real_loss(logits, labels, *args)

    cfg = trainer.TrainConfig(num_layers=1, block_size=6, anchors_per_seq=5, steps=1, batch_size=2,
                              eval_every=1, out=str(out))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(trainer, "make_batch", make_batch)
        m.setattr(trainer, "drafter_loss", drafter_loss)
        trainer.train(cfg, target, Tok(96), data, progress=False)
    return seen["ids"], seen["anchors"], seen["labels"]


def labels_are_the_target_tokens(target, ids, anchors, labels) -> bool:
    """Slot k of the block at a must be labelled x_{a+k}: on target-regenerated data exactly the
    target's greedy token after x_{..a+k-1}, which is what decoding must match; slot 0 none."""
    with torch.no_grad():
        greedy = target(ids).logits.argmax(-1)                 # greedy[:, p] = next token after p
    pos = anchors[:, :, None] + torch.arange(labels.shape[2])  # (N, n, B)
    want = greedy.gather(1, (pos[:, :, 1:] - 1).flatten(1)).view(pos[:, :, 1:].shape)
    return bool((labels[:, :, 0] == -100).all()) and torch.equal(labels[:, :, 1:], want)


def test_labels_are_the_tokens_the_target_would_emit(regenerated, tmp_path):
    """The labels train() gives its loss, checked against the target itself."""
    target, data = regenerated
    ids, anchors, labels = labels_fed_to_the_loss(target, data, tmp_path / "d")
    assert labels.shape == (2, 5, 6) and labels_are_the_target_tokens(target, ids, anchors, labels)


def test_bug_labels_shifted_by_one_is_caught(regenerated, tmp_path, monkeypatch):
    """Bug planted in the trainer's own label construction: slot k labelled x_{a+k+1}. The
    same check, on what train() then feeds its loss, must reject it."""
    target, data = regenerated
    real = trainer.block_labels
    monkeypatch.setattr(trainer, "block_labels", lambda ids, anchors, B: real(ids, anchors + 1, B))
    ids, anchors, labels = labels_fed_to_the_loss(target, data, tmp_path / "d")
    assert not labels_are_the_target_tokens(target, ids, anchors, labels)


# --------------------------------------------------------------------------------------------
# Recipe details
# --------------------------------------------------------------------------------------------

def test_anchors_inside_response_sorted_unique():
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        a = trainer.sample_anchors(10, 60, 16, 20, gen)
        assert len(a) == 20 and len(set(a.tolist())) == 20
        assert a.min() >= 10 and a.max() <= 60 - 16 and torch.equal(a, a.sort().values)
    assert len(trainer.sample_anchors(10, 20, 16, 5, gen)) == 0          # response too short
    assert trainer.sample_anchors(0, 40, 8, 99, gen, random_anchors=False).tolist() == [0, 8, 16, 24, 32]


def test_loss_weights_follow_paper():
    w = trainer.loss_weights(16, 7.0)
    assert w[0] == 0 and w[1] == 1 and math.isclose(w[8].item(), math.exp(-1), rel_tol=1e-6)
    assert trainer.loss_weights(16, 0).tolist() == [0.0] + [1.0] * 15
    assert PAPER.gamma == {16: 7.0, 10: 5.0, 8: 4.0}
    assert [gamma_for(b) for b in (16, 10, 8)] == [7.0, 5.0, 4.0]


def toy_training_data():
    target = tiny_target(3, vocab=61, layers=4)
    torch.manual_seed(0)
    data = []
    for _ in range(12):
        p = torch.randint(1, 59, (1, 6))
        ids = target.generate(p, do_sample=False, max_new_tokens=40, min_new_tokens=40,
                              pad_token_id=0, attention_mask=torch.ones_like(p))[0]
        data.append({"ids": ids, "response_start": 6})
    return target, data


def test_short_training_run_learns_and_resumes(tmp_path):
    """A few dozen steps on a random target's own greedy text: loss falls; resume continues."""
    target, data = toy_training_data()
    cfg = trainer.TrainConfig(num_layers=1, block_size=8, anchors_per_seq=8, steps=60,
                              batch_size=4, lr=3e-3, eval_every=30, out=str(tmp_path / "d"))
    out = trainer.train(cfg, target, Tok(60), data, progress=False)
    h = out["history"]["loss"]
    assert sum(h[-10:]) / 10 < 0.8 * sum(h[:10]) / 10
    assert (tmp_path / "d" / "model.safetensors").exists()
    # the checkpoint holds step 60 with the same config: a rerun resumes and trains nothing new
    again = trainer.train(cfg, target, Tok(60), data, progress=False)
    assert again["history"]["loss"] == h


def test_the_same_config_on_other_answers_starts_over(tmp_path, monkeypatch, capsys):
    """The checkpoint records which sequences it trained on: rerun on other answers (another
    --answers folder, one more shard) it starts over instead of resuming a foreign data stream."""
    target, data = toy_training_data()
    cfg = trainer.TrainConfig(num_layers=1, block_size=8, anchors_per_seq=8, steps=3,
                              batch_size=4, eval_every=3, out=str(tmp_path / "d"))
    trainer.train(cfg, target, Tok(60), data, progress=False)
    batches, real = [], trainer.make_batch
    monkeypatch.setattr(trainer, "make_batch", lambda *a, **k: (batches.append(1), real(*a, **k))[1])
    trainer.train(cfg, target, Tok(60), data, progress=False)
    assert batches == []                                # the same answers: resumed at step 3 of 3
    trainer.train(cfg, target, Tok(60), data[:10], progress=False)
    assert len(batches) == 3                            # two answers fewer: started over
    assert "other data: starting over" in capsys.readouterr().out
    saved = torch.load(tmp_path / "d.ckpt" / "state.pt")
    assert saved["data"] == train_data.data_fingerprint(data[:10])


def test_resume_from_the_middle_equals_an_uninterrupted_run(tmp_path, monkeypatch):
    """Killed after the step-5 checkpoint (at step 7), then rerun: the same history and weights
    as a run never interrupted (data order, anchors, optimiser and schedule all resume)."""
    target, data = toy_training_data()

    def run(out, stop_after=None):
        cfg = trainer.TrainConfig(num_layers=1, block_size=8, anchors_per_seq=8, steps=10,
                                  batch_size=5, lr=3e-3, eval_every=5, out=str(out))
        if stop_after is None:
            return trainer.train(cfg, target, Tok(60), data, progress=False)
        calls, real = [], trainer.make_batch

        def make_batch(*args, **kwargs):
            calls.append(1)
            if len(calls) > stop_after:
                raise KeyboardInterrupt("killed")
            return real(*args, **kwargs)
        with pytest.MonkeyPatch.context() as m:
            m.setattr(trainer, "make_batch", make_batch)
            with pytest.raises(KeyboardInterrupt):
                trainer.train(cfg, target, Tok(60), data, progress=False)

    whole = run(tmp_path / "whole")
    run(tmp_path / "cut", stop_after=7)
    resumed = run(tmp_path / "cut")
    assert resumed["history"] == whole["history"]
    for k, v in whole["drafter"].state_dict().items():
        assert torch.equal(v, resumed["drafter"].state_dict()[k]), k


def test_training_json_names_its_folder_as_every_clone_would(tmp_path, monkeypatch):
    """training.json records the output folder relative to the repository (``data/d``), never the
    absolute path of the machine that trained it; a folder outside the repository is kept as
    given. tmp_path/repo stands in for the repository."""
    target, data = toy_training_data()
    monkeypatch.setattr(paths, "ROOT", tmp_path / "repo")
    for out, recorded in ((tmp_path / "repo" / "data" / "d", "data/d"),
                          (tmp_path / "elsewhere", str(tmp_path / "elsewhere"))):
        cfg = trainer.TrainConfig(num_layers=1, block_size=8, anchors_per_seq=8, steps=1,
                                  batch_size=2, eval_every=1, out=str(out))
        trainer.train(cfg, target, Tok(60), data, progress=False)
        assert json.loads((out / "training.json").read_text())["info"]["config"]["out"] == recorded


def test_shipped_training_records_hold_no_absolute_path():
    """No file shipped in data/ names a folder of the machine that made it."""
    def strings(x):
        if isinstance(x, dict):
            return [s for v in x.values() for s in strings(v)]
        if isinstance(x, list):
            return [s for v in x for s in strings(v)]
        return [x] if isinstance(x, str) else []

    records = sorted(paths.DATA_DIR.glob("*/training.json"))
    assert len(records) >= 4        # the target and the three shipped drafters at least
    for path in records:
        info = json.loads(path.read_text()).get("info", {})
        absolute = [s for s in strings(info) if s.startswith("/") or s[1:3] in (":\\", ":/")]
        assert not absolute, f"{path.relative_to(paths.ROOT)} records {absolute}"


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_init_from_target_copies_the_last_layers(arch):
    """init_from_target: drafter layer i starts as target layer T - n + i, tensor for tensor
    (a Llama target has no q/k_norm: those keep their fresh init), the final norm as the
    target's; fc and hidden_norm stay fresh."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from minidflash.core.drafter import DFlashDrafter, make_drafter_config
    if arch == "qwen3":
        target = tiny_target(layers=5)
    else:
        torch.manual_seed(0)
        target = LlamaForCausalLM(LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=128,
                                              num_hidden_layers=5, num_attention_heads=4,
                                              num_key_value_heads=2, max_position_embeddings=512))
        with torch.no_grad():
            for layer in target.model.layers:   # norms away from their init of ones
                layer.input_layernorm.weight.uniform_(0.5, 1.5)
            target.model.norm.weight.uniform_(0.5, 1.5)
    drafter = DFlashDrafter(make_drafter_config(target.config, num_hidden_layers=2, num_features=3))
    fresh = {k: v.clone() for k, v in drafter.state_dict().items()}
    assert train_start.init_from_target(drafter, target) == [3, 4]
    for i, t in zip(range(2), (3, 4)):
        theirs = target.model.layers[t].state_dict()
        for name, value in drafter.layers[i].state_dict().items():
            if name in theirs:
                assert torch.equal(value, theirs[name]), (i, name)
            else:
                assert arch == "llama" and "_norm" in name
                assert torch.equal(value, fresh[f"layers.{i}.{name}"])
    assert torch.equal(drafter.norm.weight, target.model.norm.weight)
    assert torch.equal(drafter.fc.weight, fresh["fc.weight"])
    assert torch.equal(drafter.hidden_norm.weight, fresh["hidden_norm.weight"])


def test_init_drafter_continues_a_saved_drafter(tmp_path):
    """init_drafter: the new run starts from the saved weights (at another block size), its
    first loss is the trained drafter's, not a fresh one's, and training.json names the run it
    continues (steps, answers seen)."""
    target, data = toy_training_data()
    base = dict(num_layers=1, anchors_per_seq=8, batch_size=4, lr=3e-3)
    first = trainer.train(trainer.TrainConfig(block_size=8, steps=40, eval_every=40,
                                              out=str(tmp_path / "a"), **base),
                          target, Tok(60), data, progress=False)
    same = trainer.train(trainer.TrainConfig(block_size=4, steps=0, out=str(tmp_path / "b"),
                                             init_drafter=str(tmp_path / "a"), **base),
                         target, Tok(60), data, progress=False)
    for k, v in first["drafter"].state_dict().items():
        assert torch.equal(v, same["drafter"].state_dict()[k]), k
    assert same["drafter"].block_size == 4
    record = json.loads((tmp_path / "b" / "training.json").read_text())["info"]["init_drafter"]
    assert record["steps"] == 40 and record["answers_seen"] == 160 and record["block_size"] == 8

    def first_loss(**extra):
        cfg = trainer.TrainConfig(block_size=8, steps=1, out=str(tmp_path / f"c{len(extra)}"),
                                  **base, **extra)
        return trainer.train(cfg, target, Tok(60), data, progress=False)["history"]["loss"][0]
    trained, fresh = first_loss(init_drafter=str(tmp_path / "a")), first_loss()
    assert trained < 0.8 * fresh, (trained, fresh)
    # its checkpoint says how many answers the drafter had seen before (tau-curve adds them)
    assert torch.load(tmp_path / "c1.ckpt" / "state.pt")["answers_before"] == 160


def test_init_drafter_grows_a_saved_drafter(tmp_path):
    """init_drafter with more layers: the saved layer comes first and the new ones start closed,
    so the grown drafter's first loss is the saved one's to float precision (a new layer with an
    open branch would change it); one step opens the branches, and the saved file has 3 layers."""
    target, data = toy_training_data()
    base = dict(block_size=8, anchors_per_seq=8, batch_size=4, lr=3e-3)
    trainer.train(trainer.TrainConfig(num_layers=1, steps=30, eval_every=30,
                                      out=str(tmp_path / "a"), **base),
                  target, Tok(60), data, progress=False)

    def one_step(layers):
        cfg = trainer.TrainConfig(num_layers=layers, steps=1, out=str(tmp_path / f"g{layers}"),
                                  init_drafter=str(tmp_path / "a"), **base)
        return trainer.train(cfg, target, Tok(60), data, progress=False)
    same, grown = one_step(1), one_step(3)
    assert grown["history"]["loss"][0] == pytest.approx(same["history"]["loss"][0], rel=1e-5)
    saved = grown["drafter"]
    assert len(saved.layers) == 3
    for layer in saved.layers[1:]:
        assert layer.self_attn.o_proj.weight.abs().max() > 0
        assert layer.mlp.down_proj.weight.abs().max() > 0
    record = json.loads((tmp_path / "g3" / "training.json").read_text())["info"]["init_drafter"]
    assert record["grown_from_layers"] == 1 and record["answers_seen"] == 120


def test_init_drafter_rejects_another_shape(tmp_path):
    target, data = toy_training_data()
    cfg = trainer.TrainConfig(num_layers=2, block_size=8, anchors_per_seq=8, steps=1, batch_size=2,
                              out=str(tmp_path / "a"))
    trainer.train(cfg, target, Tok(60), data, progress=False)
    for wrong, message in (({"num_layers": 1}, "grow .* but not shrink"),
                           ({"num_features": 2}, "--target-layer-ids"),
                           ({"init_from_target": True}, "not both")):
        bad = trainer.TrainConfig(**{**cfg.__dict__, "out": str(tmp_path / "b"),
                                     "init_drafter": str(tmp_path / "a"), **wrong})
        with pytest.raises(ValueError, match=message):
            trainer.train(bad, target, Tok(60), data, progress=False)


def test_bf16_compute_runs_under_autocast_and_learns(tmp_path, monkeypatch):
    """compute_dtype="bfloat16": the loss is given bf16 logits (the matmuls ran in bf16), the
    weights stay fp32, and the run learns as the fp32 one does; another dtype is refused."""
    target, data = toy_training_data()
    dtypes, real = [], trainer.drafter_loss

    def drafter_loss(logits, *args):
        dtypes.append(logits.dtype)
        return real(logits, *args)
    monkeypatch.setattr(trainer, "drafter_loss", drafter_loss)
    cfg = trainer.TrainConfig(num_layers=1, block_size=8, anchors_per_seq=8, steps=60, batch_size=4,
                              lr=3e-3, eval_every=60, compute_dtype="bfloat16", out=str(tmp_path / "d"))
    out = trainer.train(cfg, target, Tok(60), data, progress=False)
    h = out["history"]["loss"]
    assert set(dtypes) == {torch.bfloat16}
    assert all(p.dtype == torch.float32 for p in out["drafter"].parameters())
    assert sum(h[-10:]) / 10 < 0.8 * sum(h[:10]) / 10
    with pytest.raises(ValueError, match="compute_dtype"):
        trainer.train(trainer.TrainConfig(compute_dtype="float16", out=str(tmp_path / "e")),
                      target, Tok(60), data, progress=False)


def test_bf16_compute_on_a_cpu_without_bf16_units_warns(tmp_path, monkeypatch):
    """Where bf16 is emulated (no AVX512-BF16 or AMX), asking for bf16 matmuls warns and says
    what to ask for instead; where the CPU has the units, nothing is said."""
    import warnings

    from minidflash import target as target_module

    toy, data = toy_training_data()
    cfg = lambda name: trainer.TrainConfig(num_layers=1, block_size=8, anchors_per_seq=8, steps=1,
                                           batch_size=2, compute_dtype="bfloat16",
                                           out=str(tmp_path / name))
    monkeypatch.setattr(target_module, "native_bf16", lambda device="cpu": False)
    with pytest.warns(RuntimeWarning, match="no bf16 matrix units.*--compute-dtype float32"):
        trainer.train(cfg("emulated"), toy, Tok(60), data, progress=False)
    monkeypatch.setattr(target_module, "native_bf16", lambda device="cpu": True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        trainer.train(cfg("native"), toy, Tok(60), data, progress=False)


def test_block_tensors_are_made_where_the_batch_is():
    """The step's index tensors follow ids and anchors to their device (a GPU under torchrun
    with NCCL): made on the CPU beside a CUDA batch, the embedding lookup would fail. The meta
    device stands in for a GPU: every tensor made from a meta batch must be meta too."""
    ids = torch.randint(0, 50, (2, 30)).to("meta")
    anchors = torch.tensor([[3, 9], [1, 20]]).to("meta")
    tokens, pos = trainer.block_inputs(ids, anchors, 4, mask_token_id=49)
    labels = trainer.block_labels(ids, anchors, 4)
    top = tuple(t.to("meta") for t in (torch.randn(2, 30, 3), torch.randint(0, 50, (2, 30, 3))))
    values, top_ids = trainer.slot_topk(top, anchors, 4)
    for t in (tokens, pos, labels, values, top_ids):
        assert t.device.type == "meta"
    assert tokens.shape == pos.shape == (2, 8) and labels.shape == values.shape[:3] == (2, 2, 4)

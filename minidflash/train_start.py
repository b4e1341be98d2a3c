"""Where a training run starts (paper section 4.2 trains a fresh drafter; the rest is beyond
the paper).

- Fresh: ``make_drafter`` builds the drafter a ``trainer.TrainConfig`` asks for (DFlash, or the
  autoregressive rival of ``ar_drafter.py``), over a draft vocabulary if it sets one.
- The target's last layers (``init_from_target``): the drafter's n layers start as copies of
  the target's last n instead of at random; no public result either way.
- A saved drafter (``init_from_drafter``): its weights (a fresh optimizer and schedule), e.g. to
  go on with more data or another block size, or to grow it: with more layers than the saved
  one, the new layers go on top with their residual branches zeroed, so the grown drafter
  starts out drafting exactly as the saved one.
- The run's own checkpoint (``resume``, written by ``save_checkpoint`` every ``eval_every``
  steps): a killed run goes on where it stopped, if its config and its sequences are the same.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import torch

from .ar_drafter import ARDrafter, make_ar_config
from .attention import check_backend, default_backend
from .paths import repo_relative
from .core.drafter import DFlashDrafter, default_target_layer_ids, make_drafter_config
from .checkpoints import check_draft_vocab, load_drafter
from .files import write_with
from .target import mask_token_id
from .train_data import draft_vocabulary


def make_drafter(cfg, target, tokenizer, data: list[dict]) -> tuple:
    """The drafter a run of ``cfg`` (a ``trainer.TrainConfig``) trains, in train mode, and what
    its start records for training.json: the run it continues ("init_drafter") and its draft
    vocabulary ("draft_vocab")."""
    start = {}
    if cfg.drafter == "ar":     # one EAGLE-3 layer reading the same target layers
        layer_ids = cfg.target_layer_ids or default_target_layer_ids(
            target.config.num_hidden_layers, cfg.num_features)
        return ARDrafter(make_ar_config(target.config, layer_ids)).train(), start
    drafter = DFlashDrafter(make_drafter_config(
        target.config, num_hidden_layers=cfg.num_layers, block_size=cfg.block_size,
        mask_token_id=mask_token_id(tokenizer),  # <|MASK|>, or a special token never emitted
        target_layer_ids=cfg.target_layer_ids, num_features=cfg.num_features))
    if cfg.init_from_target:
        init_from_target(drafter, target)
    if cfg.init_drafter:
        start["init_drafter"] = init_from_drafter(drafter, cfg.init_drafter, target)
    drafter.backend = check_backend(cfg.backend or default_backend(
        next(target.parameters()).device, training=True))
    if cfg.draft_vocab:   # the K most frequent answer tokens: the same on every rank (same data)
        vocab_size = target.get_output_embeddings().weight.shape[0]
        vocab, coverage = draft_vocabulary(data, cfg.draft_vocab, vocab_size)
        check_draft_vocab(vocab, drafter.config.vocab_size)
        drafter.set_draft_vocab(vocab)
        start["draft_vocab"] = {"k": cfg.draft_vocab, "answer_coverage": round(coverage, 5)}
    return drafter.train(), start


@torch.no_grad()
def init_from_target(drafter: DFlashDrafter, target) -> list[int]:
    """Start the drafter's n layers as copies of the target's last n (and its final norm as the
    target's): every tensor of the same name and shape (attention, MLP, RMSNorms); the rest (fc,
    hidden_norm, a Qwen3 q/k_norm the target lacks) keeps its fresh init. The last layers are
    the ones that turn deep states into the next token, which is what the drafter's shared
    lm_head reads. Returns the target layers copied."""
    layers = target.model.layers
    picked = list(range(len(layers) - len(drafter.layers), len(layers)))
    for mine, theirs in zip(drafter.layers, (layers[i] for i in picked)):
        source = theirs.state_dict()
        for name, t in mine.state_dict().items():
            if name in source and source[name].shape == t.shape:
                t.copy_(source[name])
    drafter.norm.weight.copy_(target.model.norm.weight)
    return picked


def init_from_drafter(drafter: DFlashDrafter, path, target) -> dict:
    """Start ``drafter`` as the drafter saved at ``path`` (its weights; block size, optimizer and
    schedule are the new run's). Returns what that drafter's training.json says of its own run
    (steps, answers seen), to be recorded beside the new one."""
    prior = load_drafter(path, target, draft_vocab=False)
    mine, theirs = drafter.config, prior.config
    n_mine, n_theirs = mine.num_hidden_layers, theirs.num_hidden_layers
    if n_mine < n_theirs:
        raise ValueError(f"init_drafter {path}: its num_hidden_layers is {n_theirs}, this run's is "
                         f"{n_mine}; a drafter can grow (more layers) but not shrink: train with "
                         f"--num-layers {n_theirs} or more, or start from random.")
    for key in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads"):
        if getattr(mine, key) != getattr(theirs, key):
            raise ValueError(f"init_drafter {path}: its {key} is {getattr(theirs, key)}, this run's "
                             f"is {getattr(mine, key)}; train with the same shape or start from "
                             f"random.")
    if prior.target_layer_ids != drafter.target_layer_ids:
        raise ValueError(f"init_drafter {path} reads target layers {prior.target_layer_ids}, this "
                         f"run {drafter.target_layer_ids}: pass --target-layer-ids "
                         f"{','.join(map(str, prior.target_layer_ids))}.")
    # Growing: the saved layers come first; each new one starts with its two residual branches
    # closed (o_proj and down_proj zero), so it passes its input through unchanged and the grown
    # drafter drafts exactly as the saved one did. Training opens them: the gradient reaches
    # o_proj and down_proj at once, and the rest of the new layer from the next step on.
    missing, unexpected = drafter.load_state_dict(prior.state_dict(), strict=False)
    grown = tuple(f"layers.{i}." for i in range(n_theirs, n_mine))
    if unexpected or not all(k.startswith(grown) for k in missing):
        raise ValueError(f"init_drafter {path}: its tensors do not match this drafter's "
                         f"(missing {missing[:3]}, unexpected {unexpected[:3]}).")
    with torch.no_grad():
        for layer in drafter.layers[n_theirs:]:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    record = {"path": repo_relative(path), "answers_seen": 0}
    if n_mine > n_theirs:
        record["grown_from_layers"] = n_theirs
    run = Path(path, "training.json")
    if run.is_file():
        seen = json.loads(run.read_text())["info"]
        c = seen.get("config", {})
        record.update(steps=c.get("steps"), batch_size=c.get("batch_size"),
                      block_size=c.get("block_size"), anchors_per_seq=c.get("anchors_per_seq"),
                      answers_seen=(c.get("steps") or 0) * (c.get("batch_size") or 0)
                      + (seen.get("init_drafter") or {}).get("answers_seen", 0),
                      prior=seen.get("init_drafter"))
    return record


def resume(ckpt: Path, cfg, fingerprint: str, drafter, opt, sched, gen,
           rank: int) -> dict:
    """The run's state: its history, the next step, this epoch's order of the data and the place
    in it. Fresh, unless ``ckpt`` holds a run of the same config on the same sequences: then
    the drafter, optimizer, schedule and data stream (``gen``) continue where it stopped."""
    run = {"history": {"step": [], "loss": [], "tau": [], "acc": [], "lr": []}, "step": 0,
           "order": [], "epoch_pos": 0}
    if cfg.draft_vocab:
        run["history"]["outside"] = []   # per step: share of labels outside the draft vocabulary
    if not (ckpt / "state.pt").exists():
        return run
    state = torch.load(ckpt / "state.pt")
    # a field added since the checkpoint was written reads as its default
    if ({**asdict(type(cfg)()), **state["config"]} != asdict(cfg)
            or state.get("data", fingerprint) != fingerprint):
        if rank == 0:
            print(f"{ckpt} holds a run of another config or other data: starting over "
                  f"(the checkpoint will be overwritten).")
        return run
    drafter.load_state_dict(state["drafter"])
    opt.load_state_dict(state["opt"])
    sched.load_state_dict(state["sched"])
    run.update(history=state["history"], step=state["step"])
    if "rng" in state:  # resume the data stream where it stopped, not from its start
        gen.set_state(state["rng"])
        run.update(order=state["order"], epoch_pos=state["epoch_pos"])
    return run


def save_checkpoint(ckpt: Path, cfg, run: dict, drafter, opt, sched, gen,
                    fingerprint: str, start: dict) -> None:
    """Everything ``resume`` reads, and how many answers the drafter had seen before this run
    (tau-curve adds them)."""
    state = {"config": asdict(cfg), "drafter": drafter.state_dict(), "opt": opt.state_dict(),
             "sched": sched.state_dict(), "rng": gen.get_state(), "data": fingerprint,
             **{k: run[k] for k in ("history", "step", "order", "epoch_pos")},
             "answers_before": start.get("init_drafter", {}).get("answers_seen", 0)}
    write_with(ckpt / "state.pt", lambda tmp: torch.save(state, tmp))

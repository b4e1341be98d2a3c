"""The settings of a call, merged and checked once: ``prepare`` turns a ``DecodingConfig`` (None:
the drafter's decoding.json) and the call's keywords into the one resolved config the front door
builds the loop's seams from (verifier.py): the block size and tree taken from the drafter where
the config leaves them, the cost curve picked for the target's dtype and thread count, the lean
pass where the target supports it, and every field checked against this target, drafter and
prompt (a clear error that says what is wrong and how to fix it)."""

from __future__ import annotations

import os
import warnings
from dataclasses import fields, replace

import torch

from .core.drafter import DFlashDrafter
from .checkpoints import check_fits
from . import prices
from .lean import runs_lean, supports
from .decoding_config import DecodingConfig, decoding_of
from .verify_cost import VerifyCost, at_rows, for_threads


def prepare(target, drafter, input_ids, config=None, given=None, batch: bool = False,
            stacklevel: int = 4, generator=None) -> DecodingConfig:
    """The one resolved config a call runs: ``config`` (None: the drafter's decoding.json) with
    the call's keywords over it, once (a warning where a keyword contradicts a value, other than
    the default, of a config the call also gave), block size and tree resolved, the cost curve
    picked (a VerifyCost, or False), and everything checked against target, drafter and prompt."""
    check_models(target, drafter)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got "
                        f"{type(generator).__name__} {generator!r}: e.g. "
                        f"generator=torch.Generator().manual_seed(0).")
    if config is not None and not isinstance(config, DecodingConfig):
        raise TypeError(f"config must be a DecodingConfig or None, got {config!r}: the length is "
                        f"a keyword (speculative_generate(target, drafter, ids, "
                        f"max_new_tokens=64)) or a field (DecodingConfig(max_new_tokens=64)).")
    given = {k: v for k, v in (given or {}).items() if v is not None}
    if "attention_mask" in given:
        raise TypeError("speculative_generate decodes one sequence (1, S); a left-padded batch "
                        "with its attention_mask is speculative_generate_batch(target, drafter, "
                        "ids, attention_mask=mask), one result per row.")
    names = {f.name for f in fields(DecodingConfig)}
    if set(given) - names:
        raise TypeError(f"unknown decoding settings {sorted(set(given) - names)}: the fields of "
                        f"DecodingConfig are {sorted(names)}.")
    if config is not None:                    # a keyword against a value the config chose
        default = DecodingConfig()
        clash = {k: v for k, v in given.items()
                 if v != getattr(config, k) and getattr(config, k) != getattr(default, k)}
        if clash:
            warnings.warn(f"keywords {clash} override the config's "
                          f"{ {k: getattr(config, k) for k in clash} }", stacklevel=stacklevel)
    base = config if config is not None else DecodingConfig.of(drafter, **given)
    if batch and (given.get("tree") or (config is not None and config.tree)):
        raise ValueError("a tree decodes one sequence at a time: pass tree=False for a batch, "
                         "whose rows verify chains (a drafter's default tree gives way by itself).")
    cfg = base.override(**given).resolve(drafter, batch)
    cost = cost_of(target, drafter, cfg)          # the trust, if any, is in it now
    cfg = replace(cfg, cost=cost, trust=cfg.trust if cost else None, lean=lean_of(target, cfg))
    check_call(target, drafter, input_ids, cfg, batch)
    return cfg


def check_models(target, drafter) -> None:
    """The target a transformers causal LM, the drafter a drafter (or None): a path, a name or
    the two swapped are told apart here, before any attribute of theirs is read."""
    order = "the order is (target, drafter, input_ids)"
    for name, x in (("target", target), ("drafter", drafter)):
        if isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], torch.nn.Module):
            raise TypeError(f"{name} is the (model, tokenizer) tuple load_target returns: "
                            f"target, tokenizer = load_target(...), and pass the model "
                            f"({type(x[0]).__name__}) alone: {order}.")
        if isinstance(x, (str, os.PathLike)):
            load = "load_target" if name == "target" else "load_drafter"
            raise TypeError(f"{name} is the path or name {str(x)!r}: load it first, "
                            f"{name} = minidflash.{name}.{load}({str(x)!r})"
                            f"{'[0] (it returns the model and its tokenizer)' if name == 'target' else ''}.")
    is_lm = lambda m: isinstance(m, torch.nn.Module) and all(
        hasattr(m, a) for a in ("get_input_embeddings", "get_output_embeddings", "config"))
    is_drafter = lambda m: isinstance(m, torch.nn.Module) and all(
        hasattr(m, a) for a in ("draft", "new_cache", "block_size", "target_layer_ids"))
    if is_drafter(target) and (drafter is None or is_lm(drafter)):
        raise TypeError(f"target is a {type(target).__name__}, a drafter, and drafter a "
                        f"{type(drafter).__name__}: {order}.")
    if not is_lm(target):
        raise TypeError(f"target must be a transformers causal LM (minidflash.target.load_target, "
                        f"AutoModelForCausalLM), got {type(target).__name__}: {order}.")
    if drafter is not None and not is_drafter(drafter):
        raise TypeError(f"drafter must be a DFlashDrafter (minidflash.checkpoints.load_drafter), an "
                        f"ARDrafter (ar_drafter.load_ar_drafter) or None (plain decoding), got "
                        f"{type(drafter).__name__}: {order}.")


def cost_of(target, drafter, cfg: DecodingConfig) -> VerifyCost | bool:
    """The cost model of a call: for cost=True the curve of the target's dtype and torch's thread
    count, measured on this CPU where it was (prices.py), else the drafter's; the one given; or
    False; ``trust`` set on it when the config names one."""
    if cfg.block_size == 1 or not cfg.cost:
        return False
    cost = cfg.cost
    if not isinstance(cost, VerifyCost):
        costs, _ = prices.costs_for(target, drafter, decoding_of(drafter)[1])
        if not costs:
            raise ValueError("cost=True prices verify lengths on a measured curve, and neither "
                             "this CPU (`python -m minidflash budget machine`) nor the drafter's "
                             "decoding.json has one: measure it, or pass a VerifyCost.")
        cost = for_threads(costs, dtype=target.dtype)
    if cfg.exact:
        cost = at_rows(cost, cfg.rows)
    return cost if cfg.trust is None else replace(cost, trust_weight=cfg.trust)


def lean_of(target, cfg: DecodingConfig) -> bool:
    """Whether the call's target passes run through lean.py: as asked, or (None) wherever the
    target supports it. Asked for where it cannot: an error that says why."""
    why = supports(target)
    if cfg.lean and why:
        raise ValueError(f"lean=True, but {why}: pass lean=False (--no-lean).")
    return runs_lean(target, cfg.lean)


def check_call(target, drafter, input_ids, cfg: DecodingConfig, batch: bool = False) -> None:
    """What the config cannot check alone: the prompt, and the block, tree and length against
    this drafter and target."""
    def given(ids) -> str:
        """What was given as input_ids, in words: its kind, dtype and shape."""
        if isinstance(ids, torch.Tensor):
            fix = ("" if ids.is_floating_point() or ids.dtype == torch.bool else " (.long())"
                   if ids.dim() == 2 else " ([None] for one row)" if ids.dim() == 1 else "")
            return (f"a {ids.dim()}-D {str(ids.dtype).replace('torch.', '')} tensor of shape "
                    f"{tuple(ids.shape)}{fix}")
        if type(ids).__module__ == "numpy" and hasattr(ids, "shape"):
            return (f"a numpy {getattr(ids, 'dtype', '')} array of shape {tuple(ids.shape)} "
                    f"(torch.from_numpy(ids).long())")
        text = repr(ids)
        return f"{type(ids).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"
    shape = "(N, S)" if batch else "(1, S)"
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.dtype != torch.long:
        raise ValueError(f"input_ids must be a {shape} LongTensor of token ids, e.g. "
                         f"tokenizer(text, return_tensors='pt')['input_ids'], got "
                         f"{given(input_ids)}.")
    if input_ids.device.type == "meta":
        raise ValueError(f"input_ids {tuple(input_ids.shape)} is a tensor on the meta device, "
                         f"which holds no token ids: give the prompt's ids on the target's "
                         f"device ({target.device}).")
    if input_ids.shape[0] == 0:
        raise ValueError(f"input_ids {tuple(input_ids.shape)} holds no prompt: give at least one "
                         f"row.")
    if input_ids.shape[0] != 1 and not batch:
        raise ValueError(f"speculative_generate decodes one sequence, got a batch of "
                         f"{input_ids.shape[0]}: call speculative_generate_batch with the "
                         f"tokenizer's attention_mask (left padding) for one result per row.")
    if input_ids.shape[1] == 0:
        raise ValueError(f"The prompt is empty (input_ids {tuple(input_ids.shape)}): give at least "
                         f"one token (e.g. the chat template's generation prompt).")
    vocab = target.get_input_embeddings().weight.shape[0]
    if int(input_ids.min()) < 0 or int(input_ids.max()) >= vocab:
        far = input_ids[(input_ids < 0) | (input_ids >= vocab)].unique()[:5].tolist()
        raise ValueError(f"input_ids hold ids {far} outside the target's vocabulary "
                         f"0..{vocab - 1}: was the prompt tokenized with this target's tokenizer?")
    V = target.get_output_embeddings().weight.shape[0]
    far = [t for t in cfg.stop_token_ids if t >= V]
    if far:
        raise ValueError(f"stop_token_ids {far[:5]} are outside the target's vocabulary "
                         f"0..{V - 1}: it can never emit them (minidflash.target.stop_ids"
                         f"(tokenizer) gives its own).")
    B, need = cfg.block_size, input_ids.shape[1] + cfg.max_new_tokens + cfg.block_size
    limit = getattr(target.config, "max_position_embeddings", None)
    if limit and need > limit:
        raise ValueError(f"prompt ({input_ids.shape[1]}) + max_new_tokens ({cfg.max_new_tokens}) "
                         f"+ block_size ({B}) exceeds the target's {limit} positions; shorten the "
                         f"prompt or max_new_tokens.")
    if B == 1:
        return
    if drafter is None:
        raise ValueError(f"block_size {B} needs a drafter (block_size > 1 drafts B - 1 tokens); "
                         f"pass one or use block_size=1.")
    if batch and not isinstance(drafter, DFlashDrafter):
        raise ValueError(f"a batch needs the DFlash drafter: {type(drafter).__name__} drafts one "
                         f"row at a time; call speculative_generate on each prompt (1, S), or "
                         f"pass block_size=1 for plain decoding of the batch.")
    if cfg.tree and not isinstance(drafter, DFlashDrafter):
        raise ValueError(f"a tree needs the DFlash drafter's per-slot distributions, got "
                         f"{type(drafter).__name__}: pass tree=False.")
    if cfg.tree:
        K = (V if drafter.draft_vocab is None else len(drafter.draft_vocab))
        if cfg.tree["top_k"] > K:
            raise ValueError(f"tree top_k {cfg.tree['top_k']} exceeds the {K} tokens the drafter "
                             f"scores ({'its draft vocabulary' if K != V else 'the vocabulary'}): "
                             f"use a top_k in 1..{K}.")
    check_fits(drafter, target)
    if B > drafter.block_size:
        raise ValueError(f"block_size {B} exceeds the drafter's trained block size "
                         f"{drafter.block_size}; use a block size in 2..{drafter.block_size}.")
    if need > drafter.config.max_position_embeddings:
        raise ValueError(f"prompt + max_new_tokens + block_size exceeds the drafter's "
                         f"{drafter.config.max_position_embeddings} positions; shorten the "
                         f"prompt or max_new_tokens.")

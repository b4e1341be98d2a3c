"""Loading and saving a DFlash drafter in the published format (the model itself is
``core/drafter.py``).

On disk it uses the published format (z-lab/Qwen3-8B-DFlash-b16): config.json with
``block_size``, ``num_target_layers``, ``dflash_config{mask_token_id, target_layer_ids}``, the
RoPE as given (``rope_parameters``, the older ``rope_scaling`` and a top-level ``rope_theta``),
and model.safetensors with exactly the tensors ``layers.{i}.*``, ``fc.weight``,
``hidden_norm.weight``, ``norm.weight``. SGLang (``--speculative-algorithm DFLASH``) and vLLM
(``"method": "dflash"``) serve it; tests/test_serving.py lists the keys each reads.

A draft vocabulary (``core.drafter``: the K token ids the drafter scores, the K most frequent
of the target's regenerated answers, ``train_data.draft_vocabulary``) lives in
``draft_vocab.json`` next to the published files, which stay as they are (an engine that ignores
the extra file drafts over all V); the drafter's decoding settings in ``decoding.json``, read
into ``decoding_config.decoding_of(drafter)``.

Sliding-window attention is not implemented: every drafter layer sees all the context. A config
whose ``layer_types`` hold ``"sliding_attention"`` (newer published drafters, e.g. for Qwen3.6)
is refused with an error rather than run with full attention, which would draft differently
from how it was trained.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import torch
from transformers import Qwen3Config

from .attention import check_backend, default_backend
from .core.drafter import DFlashDrafter
from .core.paper import PAPER
from .paths import TINY_DRAFTER_DIR
from .files import recover, write_together
from .hub import snapshot
from .decoding_config import (DecodingConfig, decoding_of, exact_default_of, exact_of_file,
                              set_decoding, set_exact_default)
from .target import check_folder, check_target, drafter_config, read_json, resolve_dtype
from .weights import check_finite, check_shapes, read_weights

DRAFT_VOCAB_FILE = "draft_vocab.json"     # optional, beside the published config + weights
DECODING_FILE = "decoding.json"   # optional: the drafter's DecodingConfig (a cut, cost curves, a tree)


def save_drafter(drafter: DFlashDrafter, save_directory: str | os.PathLike,
                 decoding: DecodingConfig | None = None, costs: dict | None = None) -> None:
    """Write config.json + model.safetensors in the published layout into save_directory
    (created if missing), and draft_vocab.json / decoding.json when the drafter has a draft
    vocabulary / decoding settings (``decoding`` and ``costs``, its cost curves; None: the
    drafter's own, ``decoding_config.decoding_of``); each file atomically, every other file in
    the folder left alone (``files.write_together``). Such a file left by an earlier save is
    removed when this drafter has none (the loader would read it with these weights).
    All or nothing: a save that raises leaves the old drafter whole (the files already renamed
    are put back from hidden backups); one killed at any moment leaves a hidden journal that
    load_drafter reads first (``files.recover``) to undo it (or, killed after config.json, the
    commit, was renamed in, to finish it), with a warning; never old and new files mixed. A
    folder where one of these files goes is refused before anything is written."""
    from safetensors.torch import save_file

    if decoding is None or costs is None:
        kept, kept_costs = decoding_of(drafter)
        decoding = kept if decoding is None else decoding
        costs = kept_costs if costs is None else costs
    c = drafter.config
    rope = dict(getattr(c, "rope_parameters", None)
                or {"rope_type": "default", "rope_theta": getattr(c, "rope_theta", 1e6)})
    scaling = {k: v for k, v in rope.items() if k != "rope_theta"}
    cfg = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3",
           "block_size": drafter.block_size, "num_target_layers": c.num_target_layers,
           "dflash_config": {"mask_token_id": drafter.mask_token_id,
                             "target_layer_ids": drafter.target_layer_ids},
           # the RoPE three ways, all the same: transformers v5 and the engines read
           # rope_parameters (or rope_theta + rope_scaling), z-lab's MLX loader rope_theta
           "rope_parameters": rope, "rope_theta": rope["rope_theta"],
           "rope_scaling": None if rope.get("rope_type", "default") == "default" else scaling,
           "layer_types": ["full_attention"] * c.num_hidden_layers,
           "dtype": str(next(drafter.parameters()).dtype).replace("torch.", "")}
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "rms_norm_eps", "max_position_embeddings",
                "vocab_size", "tie_word_embeddings", "attention_bias", "attention_dropout",
                "hidden_act", "initializer_range"):
        cfg[key] = getattr(c, key)
    state = {k: v.detach().contiguous() for k, v in drafter.state_dict().items()}
    files = {"model.safetensors": lambda tmp: save_file(state, str(tmp), {"format": "pt"})}
    if drafter.draft_vocab is not None:
        vocab = {"token_ids": drafter.draft_vocab.tolist()}
        files[DRAFT_VOCAB_FILE] = lambda tmp: tmp.write_text(
            json.dumps(vocab, separators=(",", ":")) + "\n")
    settings = replace(decoding, cost=bool(costs)).to_file(costs, exact_default_of(drafter))
    if settings:
        files[DECODING_FILE] = lambda tmp: tmp.write_text(json.dumps(settings) + "\n")
    files["config.json"] = lambda tmp: tmp.write_text(json.dumps(cfg, indent=2, sort_keys=True)
                                                      + "\n")
    write_together(save_directory, files, [f for f in (DRAFT_VOCAB_FILE, DECODING_FILE)
                                           if f not in files])


def load_drafter(name_or_path=None, target=None, dtype=None, device=None,
                 backend: str | None = None, draft_vocab: bool = True) -> DFlashDrafter:
    """Load a drafter in the published format; None is the shipped tiny drafter.

    With a target, checks that the drafter fits it (hidden size, vocabulary, layer ids). dtype,
    device: None takes the target's (without one fp32 on the CPU).
    backend: the attention backend, "sdpa", "triton" or "flex" (None: default_backend(device),
    which is SDPA for inference). draft_vocab: read draft_vocab.json when the folder has one
    (False ignores it and drafts over the full vocabulary, as an engine that does not know the
    file).

    Broken weights are refused, naming the file and the tensor or value (``weights.py``): a
    config no drafter runs with (sizes, RoPE base, epsilon, odd head_dim, repeated or
    out-of-range target_layer_ids), an unreadable, truncated or non-float weights file, a tensor
    name in two *.safetensors files, a shape the config disagrees with, a NaN or an inf.
    """
    recover(TINY_DRAFTER_DIR if name_or_path is None else name_or_path)  # finish/undo a cut save
    check_target(target, "load_drafter")
    like = next(target.parameters()) if target is not None else None
    device = device or (like.device if like is not None else "cpu")
    dtype = None if dtype in (None, "auto") else resolve_dtype(dtype, 0, device)  # load_target's
    dtype = dtype or (like.dtype if like is not None else torch.float32)         # spellings
    backend = check_backend(backend or default_backend(device))
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if name_or_path is not None and check_folder(name_or_path, "load_drafter", TINY_DRAFTER_DIR):
        name_or_path = Path(name_or_path).expanduser()      # a folder: the hub is never asked
    path = snapshot(TINY_DRAFTER_DIR if name_or_path is None else name_or_path, TINY_DRAFTER_DIR,
                    allow_patterns=["config.json", "*.safetensors", DRAFT_VOCAB_FILE, DECODING_FILE])
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} has no config.json: a drafter directory needs config.json "
                                f"and model.safetensors (write one with save_drafter).")
    raw = drafter_config(file := path / "config.json")
    try:
        config = Qwen3Config(**raw)
        check_config(config)
        drafter = DFlashDrafter(config)
    except Exception as e:            # transformers' validators raise their own kinds
        raise ValueError(f"{file} does not make a drafter: {' '.join(str(e).split())}") from e
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{path} has no *.safetensors weights next to its config.json.")
    headers = read_weights(files)     # readable, float, no tensor in two files (weights.py)
    state = {}
    for f in files:
        try:
            state.update(load_file(str(f)))
        except (SafetensorError, OSError) as e:
            raise ValueError(f"{f} is not a readable safetensors file ({e}): empty, truncated or "
                             f"not safetensors; save or fetch it again.") from None
    expected = set(drafter.state_dict())
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise ValueError(f"{path} does not hold the tensors of a {config.num_hidden_layers}-layer "
                         f"DFlash drafter: missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
                         f"unexpected {unexpected[:5]}{'...' if len(unexpected) > 5 else ''}. "
                         f"Check num_hidden_layers in config.json and the tensor names.")
    check_shapes(state, drafter.state_dict(), lambda name: headers[name][0], file,
                 "hidden_size, heads, head_dim, target_layer_ids")
    drafter.load_state_dict(state, strict=True)
    drafter.to(device=device, dtype=dtype).eval().requires_grad_(False)
    check_finite(drafter.state_dict(), lambda name: headers[name][0])   # no NaN, no inf
    drafter.backend = backend
    if draft_vocab and (path / DRAFT_VOCAB_FILE).is_file():
        try:
            token_ids = json.loads((path / DRAFT_VOCAB_FILE).read_text())["token_ids"]
            check_draft_vocab(token_ids, drafter.config.vocab_size)
            drafter.set_draft_vocab(token_ids)
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path / DRAFT_VOCAB_FILE} is not a draft vocabulary "
                             f'{{"token_ids": [...]}} for this drafter: {e} (delete the file to '
                             f"draft over the full vocabulary).") from e
    if (file := path / DECODING_FILE).is_file():
        data = read_json(file, "decoding settings, or delete it for the default decoding")
        set_decoding(drafter, *DecodingConfig.from_file(data, str(file)))
        set_exact_default(drafter, exact_of_file(data, str(file)))
    if target is not None:
        try:
            check_fits(drafter, target)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None
    return drafter


def check_config(config) -> None:
    """What the core's drafter asserts, said clearly: full attention only, a block of 2 or more."""
    sliding = [i for i, t in enumerate(getattr(config, "layer_types", None) or [])
               if t == "sliding_attention"]
    if sliding:
        raise ValueError(f"layer_types marks drafter layers {sliding} as 'sliding_attention' "
                         f"(window {getattr(config, 'sliding_window', None)}); minidflash "
                         f"implements full attention only and will not silently widen the "
                         f"window. Use a drafter whose layers are all 'full_attention'.")
    B = getattr(config, "block_size", None)
    B = (getattr(config, "dflash_config", None) or {}).get("block_size", 2) if B is None else B
    if not isinstance(B, int) or isinstance(B, bool) or B < 2:
        raise ValueError(f"block_size must be an integer >= 2 for a drafter, got {B!r}.")


def check_draft_vocab(token_ids, vocab_size: int) -> None:
    """What the core's ``set_draft_vocab`` asserts about a draft vocabulary, said clearly: a
    non-empty 1-D list of integer token ids, each inside 0..vocab_size-1, none repeated."""
    ids = torch.as_tensor(token_ids)
    V = vocab_size
    if ids.dim() != 1 or ids.numel() == 0 or ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise ValueError(f"draft_vocab must be a non-empty 1-D list of integer token ids, got "
                         f"{tuple(ids.shape)} {ids.dtype}; e.g. train_data.draft_vocabulary(data, k).")
    ids = ids.long()
    if int(ids.min()) < 0 or int(ids.max()) >= V:
        bad = ids[(ids < 0) | (ids >= V)][:5].tolist()
        raise ValueError(f"draft_vocab holds ids {bad} outside the vocabulary 0..{V - 1}: "
                         f"was it made for another target?")
    ids = ids.sort().values
    if (ids[1:] == ids[:-1]).any():
        dup = ids[1:][ids[1:] == ids[:-1]].unique()[:5].tolist()
        raise ValueError(f"draft_vocab repeats ids {dup}: list each token once.")


def check_fits(drafter: DFlashDrafter, target) -> None:
    """Raise a clear error when the drafter cannot draft for this target."""
    tc, dc = target.config, drafter.config
    if dc.hidden_size != tc.hidden_size:
        raise ValueError(f"Drafter hidden size {dc.hidden_size} != target hidden size "
                         f"{tc.hidden_size}: the drafter reads the target's embeddings and features, "
                         f"so it must be trained for this target.")
    vocab = target.get_input_embeddings().weight.shape[0]
    needs_mask = isinstance(drafter, DFlashDrafter)          # an AR drafter has no mask token
    if needs_mask and (drafter.mask_token_id is None or not 0 <= drafter.mask_token_id < vocab):
        raise ValueError(f"mask_token_id {drafter.mask_token_id} is outside the target's vocabulary "
                         f"(0..{vocab - 1}); set dflash_config.mask_token_id to the id of the "
                         f"target tokenizer's {PAPER.mask_token} token.")
    subset = getattr(drafter, "draft_vocab", None)
    if subset is not None and int(subset.max()) >= target.get_output_embeddings().weight.shape[0]:
        raise ValueError(f"The drafter's draft vocabulary names token {int(subset.max())}, outside "
                         f"the target's lm_head ({target.get_output_embeddings().weight.shape[0]} "
                         f"rows): it was made for another target.")
    bad = [i for i in drafter.target_layer_ids if not 0 <= i < tc.num_hidden_layers]
    if bad:
        raise ValueError(f"target_layer_ids {drafter.target_layer_ids} name layers {bad} that the "
                         f"target (with {tc.num_hidden_layers} layers) does not have.")
    if getattr(dc, "num_target_layers", tc.num_hidden_layers) != tc.num_hidden_layers:
        raise ValueError(f"The drafter was built for a target with {dc.num_target_layers} layers, "
                         f"this target has {tc.num_hidden_layers}: load the drafter trained for it.")

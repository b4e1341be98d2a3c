"""Prices measured on the machine that decodes: the verify curve of this CPU, dtype and thread
count, kept in a cache and read by every decode that prices its steps.

Not a paper section: what a verify pass costs where the decode runs. The cost model
(verify_cost.py) verifies as many drafts as pay on t(k)/t(1), the time of a target pass over k
tokens in one-token passes. That curve belongs to a machine: near flat in bf16 on a CPU with
bf16 units, steep in fp32 on one without (data/results/verify_curve_*.json, and the step
profiles of both). A drafter's decoding.json carries the curves measured where it was trained;
a reader's CPU may be neither of those. So:

* ``python -m minidflash budget machine`` times the target's passes of 1..16 tokens and one
  drafter call on this CPU, in the dtype and at the thread counts a decode will use (a progress
  bar; a minute or two), and ``save`` keeps them in the cache (``MINIDFLASH_PRICES``, default
  ``~/.cache/minidflash/prices``), one file per CPU kind, target shape, drafter shape and
  dtype, timed through the pass a decode runs by default (lean.py where the target supports
  it). Shapes, not weights: a pass's time does not depend on the weights' values, so a
  retrained drafter of the same shape keeps its prices.
* ``costs_for(target, drafter)`` is what a decode with ``cost=True`` prices on: this machine's
  curves where they were measured, else the drafter's shipped ones; ``describe()`` says which.

The CPU kind is its model name, the instruction set torch's kernels use
(``torch.backends.cpu.get_cpu_capability()``: ``ATEN_CPU_CAPABILITY=avx2`` holds a newer CPU to
AVX2, and the kind says so) and whether oneDNN multiplies bf16 in hardware.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path

import torch

from .files import write_json
from .verify_cost import VerifyCost, costs_from_dict, costs_to_dict

VERSION = 1       # the cache files' layout; a file of another version is measured again


def cache_dir() -> Path:
    """Where measured prices are kept: ``$MINIDFLASH_PRICES`` or ~/.cache/minidflash/prices."""
    return Path(os.environ.get("MINIDFLASH_PRICES") or "~/.cache/minidflash/prices").expanduser()


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo's), or what ``platform`` says where there is none."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), model)
    except OSError:                                    # not Linux
        pass
    return model


def cpu_kind() -> dict:
    """What a CPU's prices depend on: its model name, the instruction set torch's kernels run
    with, and whether it multiplies bf16 in hardware (oneDNN's test)."""
    return {"model": cpu_model(), "isa": torch.backends.cpu.get_cpu_capability(),
            "bf16_units": bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())}


def shape_of(model) -> dict:
    """The fields of a model's config that decide a pass's time (none of its weights)."""
    c = model.config
    names = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
             "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
             "block_size", "tie_word_embeddings")
    out = {n: getattr(c, n) for n in names if isinstance(getattr(c, n, None), (int, str, bool))}
    vocab = getattr(model, "draft_vocab", None)
    if vocab is not None:                               # a drafter over K of the target's tokens
        out["draft_vocab"] = int(len(vocab))
    return out


def key_of(target, drafter) -> dict:
    """Everything a cached curve was measured for: the CPU kind, both models' shapes and the
    target's dtype."""
    return {"version": VERSION, "cpu": cpu_kind(), "target": shape_of(target),
            "drafter": shape_of(drafter), "dtype": str(target.dtype).removeprefix("torch.")}


def path_of(key: dict) -> Path:
    """The cache file of a key: readable names first, a hash of the whole key last."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / f"{key['target'].get('model_type', 'model')}-{key['dtype']}-{digest}.json"


def save(target, drafter, curve: dict, command: str = "") -> Path:
    """Keep a measured curve (``budget``'s ``curve_by_threads`` result: {threads: {verify_ms,
    in_decode_steps, draft_ms}}) as this machine's prices for this target and drafter. Written
    atomically, beside the other cache files (which stay as they were)."""
    key = key_of(target, drafter)
    costs = {(key["dtype"], int(t)):
             VerifyCost(tuple(round(x, 3) for x in c["in_decode_steps"]),
                        round(c["draft_ms"] / c["verify_ms"][0], 3))
             for t, c in curve.items()}
    return write_json(path_of(key), {"key": key, "command": command, "curve": curve,
                                     "cost": costs_to_dict(costs)}, indent=1)


def measured(target, drafter) -> tuple[dict, Path] | None:
    """This machine's curves for the target, drafter, dtype and pass ({(dtype, threads):
    VerifyCost}) and their file, or None where none was measured. A file that is not what
    ``save`` writes is an error naming it and saying how to replace it: prices never come
    silently from a broken file."""
    if drafter is None or not hasattr(target, "config"):
        return None
    key = key_of(target, drafter)
    path = path_of(key)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        if data.get("key") != key:
            raise ValueError("its key is not this machine's, target's and drafter's")
        return costs_from_dict(data["cost"]), path
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: not a prices file ({e}); delete it, or measure again with "
                         f"`python -m minidflash budget machine`.") from None


def costs_for(target, drafter, shipped: dict | None) -> tuple[dict | None, str]:
    """The curves a decode prices on, and where they come from in words: this machine's
    (``measured``), else the drafter's shipped ones (``shipped``, from its decoding.json), else
    None."""
    mine = measured(target, drafter)
    if mine is not None:
        return mine[0], f"measured on this CPU ({mine[1]})"
    if shipped:
        return shipped, ("shipped with the drafter (none measured on this CPU: `python -m "
                         "minidflash budget machine`)")
    return None, "none"

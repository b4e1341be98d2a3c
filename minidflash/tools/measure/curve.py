"""The verify curve: what a target pass over k tokens costs on this machine, in one-token passes
(``python -m minidflash budget curve``, and ``budget machine``, which keeps it as this CPU's
prices for every later decode: prices.py).

t(k) is the median time of one target pass over k new tokens after a cached context, k = 1..16,
through the pass a decode runs (lean.py where the target supports it), and one drafter call;
at several thread counts the counts take turns. ``random_pair`` builds a published target and
drafter shape with random weights (``--shape qwen3-8b``): a pass's time depends on the shapes,
not on the weights' values.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import DynamicCache

from ... import prices
from ...decoding import crop_cache, target_pass
from ...decoding_config import DecodingConfig
from ...files import save_figure
from ...lean_drafter import drafting
from ...prepare import lean_of
from ..common import median_ms, take_turns

# Qwen/Qwen3-8B's config.json (DFLASH_SPEC section 5 gives its drafter's: 5 layers reading
# target layers 1, 9, 17, 25, 33, block 16).
QWEN3_8B = dict(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
                rope_theta=1e6, max_position_embeddings=40960, tie_word_embeddings=False)
SHAPES = {"qwen3-8b": (QWEN3_8B, dict(num_hidden_layers=5, target_layer_ids=[1, 9, 17, 25, 33],
                                      block_size=16, mask_token_id=151669))}


def device_name(text: str) -> str:
    """An argparse type: a device torch names and this machine has (cpu, cuda[:N], mps)."""
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a device: cpu, cuda, cuda:N or mps") \
            from None
    have = {"cpu": True, "cuda": torch.cuda.is_available(),
            "mps": torch.backends.mps.is_available()}
    if device.type not in have:
        raise argparse.ArgumentTypeError(f"{text!r}: time on cpu, cuda, cuda:N or mps")
    if not have[device.type] or (device.type == "cuda" and device.index is not None
                                  and device.index >= torch.cuda.device_count()):
        raise argparse.ArgumentTypeError(f"{text!r}: this machine has no such device")
    return text


def random_pair(shape, device: str, dtype: torch.dtype):
    """(target, drafter) of a published shape (a name of SHAPES, or its pair of field dicts) with
    random weights, built on the device."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from ...core.drafter import DFlashDrafter, make_drafter_config
    target_fields, drafter_fields = SHAPES[shape] if isinstance(shape, str) else shape
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            target = Qwen3ForCausalLM(Qwen3Config(**target_fields)).eval().requires_grad_(False)
            drafter = DFlashDrafter(make_drafter_config(target.config, **drafter_fields))
    finally:
        torch.set_default_dtype(torch.float32)
    return target, drafter.eval().requires_grad_(False)


@torch.inference_mode()
def verify_curve(target, drafter, context: int = 256, max_k: int = 16, repeats: int = 10,
                 lean: bool | None = None, tick=lambda: None) -> dict:
    """Median ms of a target pass over k = 1..max_k tokens after `context` cached tokens (with the
    hidden states the drafter reads), and of one drafter call for its block size (at most
    max_k) right after a one-token target pass, as a decode drafts (on a CPU the target's
    weights have pushed the drafter's out of the caches by then), on the target's device. lean:
    the pass a decode runs (None: lean.py where the target supports it, as a decode's default;
    False: transformers' forward)."""
    device = target.device
    lean = lean_of(target, DecodingConfig(lean=lean))
    ids = torch.randint(0, 200, (1, context + max_k), device=device)
    cache = DynamicCache()
    target_pass(target, ids[:, :context], cache, False, False, lean=lean)

    def verify(k: int):                    # a pass over k tokens, its keys cropped after it
        pos = torch.arange(context, context + k, device=device)[None]
        return lambda: (target_pass(target, ids[:, context:context + k], cache, True, False,
                                    lean=lean, position_ids=pos), crop_cache(cache, context))
    ms = []
    for k in range(1, max_k + 1):
        ms.append(median_ms(verify(k), repeats, device))
        tick()
    hidden = torch.randn(1, context, len(drafter.target_layer_ids) * target.config.hidden_size,
                         device=device, dtype=target.dtype)
    dcache, B = drafter.new_cache(), min(drafter.block_size, max_k)
    with drafting(drafter, lean):          # as a decode drafts, after a one-token pass each time
        drafter.draft(target, ids[:, context - 1], hidden, context, dcache, B)
        draft = median_ms(lambda: drafter.draft(target, ids[:, context - 1], hidden[:, :0],
                                                context, dcache, B), repeats, device,
                          before=verify(1))
    return {"verify_ms": ms, "draft_ms": draft, "lean": lean}


def curve_by_threads(target, drafter, threads, rounds: int = 3, **kw) -> dict:
    """``verify_curve`` at each thread count, the counts taking turns; per count the median over
    rounds, and t(k) / t(1): the cost of a pass over k tokens in plain decode steps."""
    with tqdm(total=rounds * len(threads) * kw.get("max_k", 16), desc="verify passes",
              unit="length", leave=False) as bar:
        runs = take_turns(lambda: verify_curve(target, drafter, tick=bar.update, **kw), threads,
                          rounds)
    med = lambda xs: sorted(xs)[len(xs) // 2]
    out = {}
    for t, rs in runs.items():
        ms = [med([r["verify_ms"][k] for r in rs]) for k in range(len(rs[0]["verify_ms"]))]
        out[str(t)] = {"verify_ms": ms, "in_decode_steps": [m / ms[0] for m in ms],
                       "draft_ms": med([r["draft_ms"] for r in rs]), "lean": rs[0]["lean"]}
    return out


def machine(target, drafter, threads, command: str) -> dict:
    """``budget machine``: the verify curve at each thread count, kept as this CPU's prices
    (prices.save), and what the cost model makes of them."""
    curve = curve_by_threads(target, drafter, threads)
    path = prices.save(target, drafter, curve, command)
    kind = prices.cpu_kind()
    print(f"{kind['model']} ({kind['isa']}, bf16 units: {'yes' if kind['bf16_units'] else 'no'}),"
          f" {str(target.dtype).removeprefix('torch.')}: prices kept in {path}")
    for t, c in curve.items():
        print(f"{t} thread(s): t(k)/t(1) for k = 1..{len(c['verify_ms'])}: "
              + " ".join(f"{x:.2f}" for x in c["in_decode_steps"])
              + f"  (t(1) {c['verify_ms'][0]:.1f} ms, draft {c['draft_ms']:.1f} ms)")
    return {"file": str(path), "cpu": kind, "threads": curve}


def plot_curve(results: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5, 3.8))
    ax = fig.subplots()
    for t, c in results["threads"].items():
        ks = range(1, len(c["in_decode_steps"]) + 1)
        ax.plot(ks, c["in_decode_steps"], "o-", label=results.get("device")
                or f"{t} thread{'s' if t != '1' else ''}")
    ax.axhline(1.0, color="k", lw=0.8, ls=":")
    ax.set(xlabel="tokens in the target pass (k)", ylabel="t(k) / t(1)",
           title=f"verify cost, {results['target'].split('/')[-1]}, context {results['context']}")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=100)

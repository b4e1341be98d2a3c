"""Every decoding method on the same target, prompts and process: ``bench --methods``.

The paper's comparison (DFlash against EAGLE-3) plus what a user has without training anything:

    plain          speculative_generate with block size 1 (the baseline of every ratio)
    dflash         the DFlash drafter with speculative_generate's defaults (the drafter's block
                   size and its decoding.json: a cut, a cost model, a tree): what a user gets
                   by calling it plainly
    dflash:B       the DFlash drafter, block size B (B-1 tokens drafted in ONE pass), all verified
    dflash:B/pP    the same, with the confidence cut at P: only the leading drafts the drafter
                   gives probability >= P are verified (verify_cost.confident_prefix)
    dflash:B/cost  the same, each step verifying the length with the most expected tokens per
                   unit of the drafter's measured cost curve (verify_cost.py; /pP/cost: both;
                   /cost/trustW: q corrected as the decode goes, weight W)
    ar:k           the EAGLE-3-style drafter (ar_drafter.py), k tokens drafted in k passes,
                   verified as a block of k+1 by the same loop
    ar:k/pP        the same with the cut: its chain stops at its first token below P
    tree:B/nN/topK a tree of N drafted nodes from the block's per-slot top-K (tree.py), verified
                   in one target pass (/cost: the n <= N best nodes that pay on the cost curve)
    lookup:k       transformers' prompt-lookup decoding, ``generate(prompt_lookup_num_tokens=k)``
    generate       transformers' plain greedy ``generate()``
    llamacpp-plain/T  llama.cpp's plain greedy decoding, the target as GGUF T: llamacpp_plain.py

Any method takes ``/fp32`` or ``/bf16``: it runs on a copy of the target in that dtype (and its
drafter in the same dtype), so that ``plain/fp32 plain/bf16 generate/fp32 generate/bf16`` in one
run find the fastest plain decoding this machine offers. ``/argmax``: greedy on the logits as the
target's dtype rounds them (``fp32_ties=False``; the default decides a bf16 near-tie in fp32,
``decoding.greedy_choice``).

A drafter other than the shipped one is named with ``@PATH`` (``dflash:16@data/dflash_1000``).
Methods run one after the other on each prompt, their order rotating prompt by prompt, so all
see the same machine state. Reported per suite and method: tau; draft, verify and other ms per
step (the rest of a step: cache cropping, feature gathering, acceptance, Python), and the
speedup a step would give if that rest cost nothing (tau over the two passes, in plain steps);
TPOT, speedup over plain (mean plain TPOT / mean TPOT), over plain decoding in the method's own
dtype, and over the fastest plain method of the run; how many outputs are identical to plain
decoding in the same dtype, and where each other one parts from it (``divergence``: the two
tokens' logit gap in the plain decode's own pass and in an fp32 pass over the same prefix); the
drafter's depth, and tau split between looping answers (a repeated-4-gram share above
``common.LOOPING``) and the rest: loops are easy to draft and lift tau. transformers'
``generate`` gives no split of its time: its TPOT is its wall time less the prefill time
measured for the same prompt by plain decoding, per new token.

The cost of one drafter call against the tokens it drafts (``bench --draft-cost``) is
draft_cost.py.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import torch
from tqdm.auto import tqdm
from transformers import DynamicCache

from ...ar_drafter import load_ar_drafter
from ...paths import TINY_AR_DRAFTER_DIR, TINY_DRAFTER_DIR
from ...decoding import cache_kwargs, clock
from ...checkpoints import load_drafter
from ...decoding_config import TEXT_FIELDS, DecodingConfig, decoding_of
from ...target import chat_ids, stop_ids
from ...verifier import speculative_generate
from ..common import LOOPING, correct, repeated_4gram_share, save_figure
from . import llamacpp_plain


class Method(NamedTuple):
    kind: str                    # plain | dflash | ar | tree | lookup | generate
    k: int | None                # block size (dflash, tree), drafted tokens (ar, lookup)
    config: DecodingConfig | None = None   # how it decodes (None: the drafter's decoding.json)
    path: str | None = None      # a drafter other than the default ("@PATH")
    dtype: str | None = None     # "float32" | "bfloat16": a copy of the target in it (None: the run's)
    over: tuple = ()             # bare dflash: fields set over the drafter's decoding.json
    gguf: str | None = None      # llamacpp: the target's GGUF type (llamacpp_plain.TYPES)

    # the config's fields under the names the tables and figures read
    p_min = property(lambda m: m.config.p_min if m.config else None)
    cost = property(lambda m: bool(m.config.cost) if m.config else None)
    argmax = property(lambda m: (not m.config.fp32_ties) if m.config else
                      dict(m.over).get("fp32_ties") is False)
    nodes = property(lambda m: m.config.tree["node_budget"] if m.kind == "tree" and m.config
                     and isinstance(m.config.tree, dict) else None)
    exact = property(lambda m: m.config.exact if m.config else dict(m.over).get("exact", False))


def parse(spec: str) -> Method:
    """'dflash:16/p0.3@path/fp32' -> a Method: the decoding is the config's own text
    (``DecodingConfig.parse``: dflash[:B], tree[:B]/nN/topK, plain, and /pP /cost /trustW /T
    /argmax), with the bench's own words around it: ``ar:k`` (the AR drafter, k drafted tokens,
    verified as a block of k + 1), ``lookup:k``, ``generate``, a dtype (/fp32, /bf16) and
    ``@PATH``. ``dflash`` alone: the drafter's decoding.json, what a plain call runs, with the
    options given over it (``dflash/argmax``: the drafter's decoding with fp32_ties off)."""
    name, _, path = spec.partition("@")
    if name.startswith("llamacpp"):                  # llama.cpp's own plain decoding
        return Method("llamacpp", None, gguf=llamacpp_plain.gguf_type(spec))
    head, *opts = name.split("/")
    kind, _, k = head.partition(":")
    dtypes = [o for o in opts if o in DTYPES]
    if len(dtypes) > 1:
        raise ValueError(f"method {spec!r}: one dtype at most (/fp32 or /bf16)")
    opts = [o for o in opts if o not in DTYPES]
    dtype = DTYPES[dtypes[0]] if dtypes else None
    if kind in ("lookup", "generate"):
        if opts or (kind == "lookup") != k.isdigit():
            raise ValueError(f"method {spec!r}: transformers' generate takes lookup:k or generate, "
                             f"with a dtype at most")
        return Method(kind, int(k) if k else None, None, path or None, dtype)
    if kind == "ar":
        if not k.isdigit():
            raise ValueError(f"method {spec!r} needs a number, e.g. ar:8")
        if any(o.startswith(("n", "top")) for o in opts):
            raise ValueError(f"method {spec!r}: /nN and /topK are for tree")
        config = DecodingConfig.parse("/".join([f"dflash:{int(k) + 1}"] + opts))
        return Method(kind, int(k), config, path or None, dtype)
    if kind not in ("plain", "dflash", "tree"):
        raise ValueError(f"unknown method {spec!r}: use plain, dflash, dflash:B, dflash:B/pP, "
                         f"ar:k, ar:k/pP, tree:B/nN/topK, lookup:k, generate (then /fp32 or /bf16), "
                         f"llamacpp-plain/T")
    if kind == "tree" and not (k and any(o.startswith("n") for o in opts)):
        raise ValueError(f"method {spec!r}: a tree needs its block, node budget and candidates, "
                         f"e.g. tree:16/n24/top4")
    config = DecodingConfig.parse("/".join([head] + opts))
    if head == "dflash":                       # the drafter's own, with what the options change
        over = tuple((f, getattr(config, f)) for f in TEXT_FIELDS
                     if getattr(config, f) != getattr(DecodingConfig(), f))
        return Method(kind, None, None, path or None, dtype, over)
    block = 1 if kind == "plain" else (int(k) if k else None)
    if config is not None and config.trust is not None and kind == "tree":
        raise ValueError(f"method {spec!r}: /trustW corrects a chain's q, not a tree's")
    return Method(kind, block, config, path or None, dtype)


DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def in_dtype(target, name: str):
    """The target in dtype ``name``: loaded again from what ``load_target`` read (an fp32 copy
    holds the checkpoint's own fp32 weights, not a cast of bf16 ones), else a cast copy."""
    dtype = getattr(torch, name)
    if target.dtype == dtype:
        return target
    if hasattr(target, "load_source"):
        from ...target import load_target
        return load_target(target.load_source, dtype=dtype, device=target.device)[0]
    return copy.deepcopy(target).to(dtype)


def load_targets(target, specs) -> dict:
    """dtype name -> the target in it: the run's own under its dtype and under None, one for
    every other dtype a method names, and an fp32 one always (``divergence`` measures there)."""
    own = str(target.dtype).replace("torch.", "")
    targets = {None: target, own: target}
    for name in {parse(s).dtype for s in specs} | {"float32"}:
        if name not in targets:
            targets[name] = in_dtype(target, name)
    return targets


def exact_rows(m: Method, drafter=None) -> int:
    """A method's exact-mode W, resolved against its drafter (0: not in exact mode)."""
    return config_of(m, drafter).resolve(drafter).rows if m.exact else 0


def reference(spec: str, specs, drafters=None) -> str:
    """The plain decoding a method's output is held against: plain in the method's dtype, argmax
    setting and exact mode at the same W (``exact_rows``; ``drafters``: spec -> drafter, which a
    bare dflash's W needs) when the run has it, else "plain" (``bench`` says so)."""
    m = parse(spec)
    key = (m.dtype, m.argmax, exact_rows(m, (drafters or {}).get(spec)))
    for other in specs:
        o = parse(other)
        if o.kind == "plain" and (o.dtype, o.argmax, exact_rows(o)) == key:
            return other
    return "plain"


def load_method_drafters(specs, targets, dflash_default=None, ar_default=None) -> dict:
    """spec -> drafter (None for methods without one), each file loaded once per dtype, in the
    dtype of the method's target (``load_targets``; a bare model is taken as its own)."""
    if not isinstance(targets, dict):
        targets = load_targets(targets, specs)
    cache, out = {}, {}
    for spec in specs:
        m = parse(spec)
        kind, path, target = m.kind, m.path, targets[m.dtype]
        if kind in ("dflash", "tree"):
            key = ("dflash", path or dflash_default, target.dtype)
            if key not in cache:
                cache[key] = load_drafter(key[1], target=target)
        elif kind == "ar":
            key = ("ar", path or ar_default or str(TINY_AR_DRAFTER_DIR), target.dtype)
            if key not in cache:
                cache[key] = load_ar_drafter(key[1], target=target)
        elif kind == "llamacpp":     # llama.cpp found, its GGUF made and tried: before any prompt
            key = ("llamacpp", m.gguf)
            cache[key] = cache.get(key) or llamacpp_plain.setup(m.gguf, target)
        else:
            key = None
        out[spec] = cache.get(key)
    return out


def method_folders(specs, dflash_default=None, ar_default=None) -> list[str]:
    """The drafter folders ``load_method_drafters`` reads for these methods (for the provenance
    of a results file), each once."""
    out = []
    for spec in specs:
        m = parse(spec)
        if m.kind in ("dflash", "tree"):
            out.append(str(m.path or dflash_default or TINY_DRAFTER_DIR))
        elif m.kind == "ar":
            out.append(str(m.path or ar_default or TINY_AR_DRAFTER_DIR))
    return list(dict.fromkeys(out))


def _generate(target, ids, max_new_tokens, stops, lookup: int | None):
    """transformers' generate (prompt lookup when lookup is set): new ids and wall seconds."""
    kwargs = dict(do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=stops,
                  pad_token_id=stops[0], attention_mask=torch.ones_like(ids))
    if lookup:
        kwargs["prompt_lookup_num_tokens"] = lookup
    t0 = clock(ids.device)
    out = target.generate(ids, **kwargs)
    return out[:, ids.shape[1]:], clock(ids.device) - t0


def config_of(m: Method, drafter=None) -> DecodingConfig:
    """The decoding settings a method names (``dflash`` alone: the drafter's decoding.json)."""
    return (m.config if m.config is not None else drafter if m.kind == "llamacpp"  # its describe()
            else DecodingConfig.of(drafter, **dict(m.over)).override(**dict(m.over)))


def decode(target, drafter, ids, max_new_tokens, stops, m: Method):
    """One decode with method m (not lookup or generate): a GenerationResult."""
    if m.cost and not decoding_of(drafter)[1]:
        raise ValueError(f"method {m.kind}:{m.k}/cost needs a drafter whose decoding.json "
                         f"carries a cost curve (`python -m minidflash budget curve`).")
    config = replace(config_of(m, drafter), max_new_tokens=max_new_tokens, stop_token_ids=stops)
    return speculative_generate(target, drafter, ids, config)


def fastest_plain(tpot: dict) -> str:
    """The plain decoding (ours or transformers' generate, any dtype) with the least TPOT."""
    return min((s for s in tpot if parse(s).kind in ("plain", "generate")), key=tpot.get)


def run_methods(targets, tokenizer, rows, specs, drafters, max_new_tokens=256,
                progress=True) -> dict:
    """Decode every prompt with every method (greedy); per-method figures for this suite.
    targets: dtype name -> target (``load_targets``; a bare model is taken as its own)."""
    if not isinstance(targets, dict):
        targets = load_targets(targets, specs)
    stops = stop_ids(tokenizer)
    specs = ["plain"] + [s for s in specs if s != "plain"]
    refs = {s: reference(s, specs, drafters) for s in specs}
    per = {s: {"tpot": [], "tau": [], "draft_ms": [], "verify_ms": [], "other_ms": [], "same": [],
               "correct": [], "verified": [], "diverged": []} for s in specs}
    looping = []                                  # per prompt: does plain decoding's answer loop?
    for i, row in enumerate(tqdm(rows, desc="prompts", disable=not progress, leave=False)):
        ids = chat_ids(tokenizer, row["messages"])
        order = specs[i % len(specs):] + specs[:i % len(specs)]       # rotate who goes first
        results = {}
        for spec in order:
            m = parse(spec)
            target = targets[m.dtype]
            if m.kind == "llamacpp":
                results[spec] = drafters[spec].decode(tokenizer, row["messages"], ids, max_new_tokens)
                continue
            if m.kind in ("lookup", "generate"):
                new, wall = _generate(target, ids, max_new_tokens, stops,
                                      m.k if m.kind == "lookup" else None)
                results[spec] = {"new": new[0].tolist(), "wall": wall}
                continue
            r = decode(target, drafters.get(spec), ids, max_new_tokens, stops, m)
            results[spec] = {"new": r.new_ids.tolist(), "result": r}
        plain = results["plain"]["result"]
        looping.append(repeated_4gram_share(results["plain"]["new"]) > LOOPING)
        for spec in specs:
            p, got, ref = per[spec], results[spec], results[refs[spec]]["new"]
            if "result" in got:
                r = got["result"]
                steps = max(1, len(r.acceptance_lengths))
                p["tpot"].append(r.tpot)
                p["tau"].append(r.tau)
                p["draft_ms"].append(1e3 * r.draft_time / steps)
                p["verify_ms"].append(1e3 * r.verify_time / steps)
                p["other_ms"].append(1e3 * (r.decode_time - r.draft_time - r.verify_time) / steps)
                p["verified"].append(sum(r.verified) / steps)
            elif "llama" in got:        # llama.cpp: its eval time per run, its text against plain
                llamacpp_plain.record(p, got, ref, tokenizer)
            else:   # generate: wall time less this prompt's prefill, per new token (the wall
                # time alone where a short answer's wall is within the prefill's noise)
                after = got["wall"] - plain.prefill_time
                p["tpot"].append((after if after > 0 else got["wall"]) / max(1, len(got["new"])))
            p["same"].append(got.get("same", got["new"] == ref))
            if not p["same"][-1]:
                m = parse(refs[spec])
                p["diverged"].append({"prompt": i, **divergence(
                    targets[m.dtype], ids, ref, got["new"], targets["float32"])})
            p["correct"].append(correct(row, tokenizer.decode(got["new"], skip_special_tokens=True)))
    mean = lambda xs: sum(xs) / len(xs) if xs else None
    tpot = {spec: mean(p["tpot"]) for spec, p in per.items()}
    fastest = fastest_plain(tpot)
    out = {}
    for spec, p in per.items():
        checks = [c for c in p["correct"] if c is not None]
        split = {f"tau_{name}": mean([t for t, loop in zip(p["tau"], looping) if loop == want])
                 for name, want in (("looping", True), ("not_looping", False))} if p["tau"] else {}
        drafter = drafters.get(spec)
        gaps = [d["gap_fp32"] for d in p["diverged"] if d.get("gap_fp32") is not None]
        passes = (mean(p["draft_ms"]) or 0) + (mean(p["verify_ms"]) or 0)    # ms a step
        out[spec] = {"tau": mean(p["tau"]), **split, "draft_ms_per_step": mean(p["draft_ms"]),
                     "verify_ms_per_step": mean(p["verify_ms"]),
                     "other_ms_per_step": mean(p["other_ms"]), "tpot_ms": 1e3 * tpot[spec],
                     # tau / (draft + t(m)) in plain steps: the speedup if the rest cost nothing
                     "passes_only_speedup": (mean(p["tau"]) * 1e3 * tpot[refs[spec]] / passes
                                             if passes and p["tau"] else None),
                     "tokens_per_s": 1 / tpot[spec],
                     "verified_per_step": mean(p["verified"]),
                     "speedup": tpot["plain"] / tpot[spec],
                     "reference": refs[spec],
                     "speedup_same_dtype": tpot[refs[spec]] / tpot[spec],
                     "speedup_vs_fastest_plain": tpot[fastest] / tpot[spec],
                     "identical": all(p["same"]), "identical_count": sum(p["same"]),
                     "divergences": p["diverged"],
                     "max_fp32_gap": max(map(abs, gaps)) if gaps else None,
                     "accuracy": mean(checks) if checks else None,
                     "dtype": str(targets[parse(spec).dtype].dtype).replace("torch.", ""),
                     "layers": drafter.config.num_hidden_layers if hasattr(drafter, "config") else None,
                     # prompt by prompt, in the part's order: figures of any subset of prompts
                     "per_prompt": {"tau": p["tau"] or None,
                                    "tpot_ms": [1e3 * t for t in p["tpot"]]}}
    return {"prompts": len(rows), "looping_prompts": sum(looping), "fastest_plain": fastest,
            "methods": llamacpp_plain.summarise(out, per)}


def without(suite_result: dict, drop: list[int]) -> dict:
    """The suite's figures over its prompts less those numbered ``drop`` (0-based in the part):
    per method tau, and the speedups as the run computes them (mean TPOT over mean TPOT)."""
    drop = sorted(set(drop))
    keep = [i for i in range(suite_result["prompts"]) if i not in drop]
    mean = lambda xs: sum(xs[i] for i in keep) / len(keep)
    ms = suite_result["methods"]
    tpot = {spec: mean(s["per_prompt"]["tpot_ms"]) for spec, s in ms.items()}
    fastest = fastest_plain(tpot)
    return {"prompts": len(keep), "dropped": drop, "fastest_plain": fastest,
            "methods": {spec: {"tau": None if s["per_prompt"]["tau"] is None
                               else mean(s["per_prompt"]["tau"]),
                               "speedup_same_dtype": tpot[s["reference"]] / tpot[spec],
                               "speedup_vs_fastest_plain": tpot[fastest] / tpot[spec]}
                        for spec, s in ms.items()}}


@torch.inference_mode()
def divergence(target, ids, plain: list, other: list, fp32_target=None) -> dict:
    """Where two greedy outputs part: the first differing new token j, both tokens, and the gap
    between their logits (plain's minus the other's):

    gap         in the pass that chose plain's token: plain decoding re-run to token j, one
                token a pass, in the target's dtype (a bf16 target: its logits as rounded)
    gap_head32  the same pass's final hidden state through the lm_head in fp32: what the
                default greedy choice read (``decoding.greedy_choice``); None for fp32
    gap_fp32    one pass of ``fp32_target`` (the same weights in fp32) over the prompt and the
                common prefix: the gap of exact arithmetic
    A gap near 0 is a near-tie that rounding decides: a token computed inside a verify block
    rounds differently from the same token computed alone. A wrong acceptance rule shows up as
    a large gap (the target never chose that token)."""
    j = next((k for k, (a, b) in enumerate(zip(plain, other)) if a != b), min(len(plain), len(other)))
    if j == len(plain) or j == len(other):          # one stopped where the other went on
        return {"token": j, "plain": None, "method": None, "gap": None}
    pair = [plain[j], other[j]]
    gap = lambda z: float(z[0] - z[1])
    cache = DynamicCache()                           # plain decoding, as speculative_generate runs it
    out = target(input_ids=ids, **cache_kwargs(target, cache), output_hidden_states=True,
                 logits_to_keep=1)
    for k in range(j):
        pos = torch.tensor([[ids.shape[1] + k]], device=ids.device)
        out = target(input_ids=torch.tensor([[plain[k]]], device=ids.device), position_ids=pos,
                     **cache_kwargs(target, cache), output_hidden_states=True)
    head = target.get_output_embeddings()
    row = {"token": j, "plain": plain[j], "method": other[j],
           "gap": gap(out.logits[0, -1, pair].float()), "gap_head32": None, "gap_fp32": None}
    if head.weight.dtype != torch.float32:
        h = out.hidden_states[-1][0, -1].float()
        row["gap_head32"] = gap(head.weight[pair].float() @ h)
    if fp32_target is not None:
        prefix = torch.cat([ids, torch.tensor([plain[:j]], dtype=ids.dtype, device=ids.device)], 1)
        row["gap_fp32"] = gap(fp32_target(prefix, logits_to_keep=1).logits[0, -1, pair].float())
    return row


def plot_methods(results: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    suites = list(results["suites"])
    specs = list(results["suites"][suites[0]]["methods"])
    fig = Figure(figsize=(13, 3.8))
    axes = fig.subplots(1, 2)
    width = 0.8 / len(suites)
    for i, s in enumerate(suites):
        m = results["suites"][s]["methods"]
        xs = [j + i * width for j in range(len(specs))]
        axes[0].bar(xs, [m[p]["speedup"] for p in specs], width, label=s)
        axes[1].bar(xs, [m[p]["tau"] or 0 for p in specs], width, label=s)
    for ax, title, ylabel in ((axes[0], "speedup over plain decoding", "speedup (x)"),
                              (axes[1], "tokens per target pass (tau)", "tau")):
        ax.set_xticks([j + width * (len(suites) - 1) / 2 for j in range(len(specs))], specs, rotation=30)
        ax.set(title=title, ylabel=ylabel)
        ax.legend(loc="upper right", fontsize=8)
    axes[0].axhline(1.0, color="k", lw=0.8, ls="--")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


def families(methods: dict) -> dict[str, list[tuple[str, dict]]]:
    """Group a suite's drafting methods into curves: DFlash at one block size over its depths,
    the AR drafter over k. Each curve: [(point label, figures)] sorted by draft time."""
    curves = {}
    for spec, s in methods.items():
        m = parse(spec)
        if m.kind == "dflash" and m.k and not m.p_min and not m.cost:
            name, label = f"DFlash, B = {m.k}", f"{s['layers']}L"
        elif m.kind == "ar" and not m.p_min and not m.cost:
            name, label = f"AR, {s['layers']} layer", f"k={m.k}"
        else:
            continue
        curves.setdefault(name, []).append((label, s))
    return {n: sorted(c, key=lambda p: p[1]["draft_ms_per_step"]) for n, c in curves.items()}


def plot_depth(results: dict, path: Path) -> None:
    """Speedup and tau against draft ms per step: DFlash deeper, the AR drafter longer."""
    from matplotlib.figure import Figure

    suites = list(results["suites"])
    fig = Figure(figsize=(5.2 * len(suites), 7))
    axes = fig.subplots(2, len(suites), squeeze=False)
    for col, suite in enumerate(suites):
        for i, (name, curve) in enumerate(families(results["suites"][suite]["methods"]).items()):
            xs = [s["draft_ms_per_step"] for _, s in curve]
            for row, key in enumerate(("speedup", "tau")):
                ys = [s[key] for _, s in curve]
                ax = axes[row, col]
                ax.plot(xs, ys, "s-" if name.startswith("DFlash") else "o--", color=f"C{i}", label=name)
                for (label, _), x, y in zip(curve, xs, ys):
                    ax.annotate(label, (x, y), textcoords="offset points", fontsize=8,
                                xytext=(4, 4) if name.startswith("DFlash") else (4, -11))
        axes[0, col].axhline(1.0, color="k", lw=0.8, ls=":")
        axes[0, col].set(title=f"{suite} ({results['threads']} thread{'s' if results['threads'] > 1 else ''})",
                         ylabel="speedup over plain (x)")
        axes[1, col].set(xlabel="draft ms per step", ylabel="tau (tokens per target pass)")
        axes[0, col].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)

"""Your drafter in llama.cpp: converted by llama.cpp's own converter, run plain and speculative.

Not a paper section: the engine people run on their own machines. llama.cpp serves DFlash
drafters as the speculative type ``draft-dflash``; its ``convert_hf_to_gguf.py`` reads the
published DFlash layout (``DFlashDraftModel``) that ``checkpoints.save_drafter`` writes, and takes
the vocabulary from the target (``--target-model-dir``). This command

1. converts a drafter to GGUF with that converter (unchanged, fp32), and the target too when no
   GGUF of it is published or ``--target-type`` asks for another (f32, bf16, q8_0, Q4_0); a
   drafter's draft vocabulary (``draft_vocab.json``) becomes the ``d2t`` ids and K head rows
   llama.cpp's DFlash model reads (``engines/llama_cpp.gguf_files``; ``--full-vocab`` leaves
   them out);
2. decodes the suites' prompts (``--split``: the test part of each suite unless it says
   otherwise) greedily with ``llama-completion`` (plain) and with
   ``llama-speculative-simple --spec-type draft-dflash --spec-draft-n-max N`` for each N (and
   ``--spec-draft-p-min P`` for each P: the block cut at the first drafted token whose drafter
   probability is below P), alternating prompt by prompt; the prompt is our tokenizer's chat
   template as text, and the prompt ids llama.cpp reads are checked equal to ours (no second
   template, no extra BOS);
3. optionally decodes the same prompts in minidflash (``speculative_generate``, block size N+1),
   times the target's passes with ``llama-bench`` (pp 1..16, tg) and with torch
   (``bench.step_times``), and writes everything, commands included, to one JSON.

**tau in llama.cpp.** ``llama-speculative-simple`` counts ``n_predict += accepted + 1`` and
``n_accept += accepted`` per kept target pass (examples/speculative-simple), so tau =
n_predict / (n_predict - n_accept). Its first pass verifies a draft made from the prompt;
minidflash's prefill commits the first token without one, so on n tokens the two conventions
differ by about one pass in n / tau.

llama.cpp is optional: only this command needs it (``tools/engines/``: ``llama_cpp.py``
converts, ``llama_cpp_binaries.py`` finds, runs and reads its programs). It is found through ``LLAMA_CPP_DIR`` (a llama.cpp folder holding
``build/bin`` and ``convert_hf_to_gguf.py``) or ``PATH``.

``python -m minidflash llama-cpp --drafter data/smollm2_drafter --suites gsm8k --n 2``
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ...files import save_figure
from .. import common
from ..common import (add_load, add_threads, at_least, check_suites, count, out_dir, out_file,
                      write)
from ..flags import add_flags
from ..engines.llama_cpp import TARGET_TYPES, gguf_files, shown
from ..engines.llama_cpp_binaries import (BENCH, PLAIN, PRE_TOKENIZER_REGEX, SPECULATIVE,
                                          bench_command, decode, find_binary, find_converter,
                                          parse_bench, parse_plain, parse_speculative,
                                          plain_command, plain_text, prompt_ids, run,
                                          speculative_command, speculative_text, step_costs)
from ..make_data.overlap import split_label


# --------------------------------------------------------------------------------------------
# Comparing two decodes
# --------------------------------------------------------------------------------------------

def parting(tokenizer, plain: str, spec: str, plain_stopped: bool) -> dict | None:
    """None if the speculative text is the plain one (plain cut by the token limit: a prefix of
    it, since speculative-simple may commit one token more), else the first token (by our
    tokenizer) where they part and what each has there."""
    if spec == plain or (not plain_stopped and spec.startswith(plain)):
        return None
    a = tokenizer(plain, add_special_tokens=False)["input_ids"]
    b = tokenizer(spec, add_special_tokens=False)["input_ids"]
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    piece = lambda ids: tokenizer.decode(ids[i:i + 1]) if i < len(ids) else "<end>"
    return {"token": i, "plain": piece(a), "speculative": piece(b),
            "before": tokenizer.decode(a[max(0, i - 8):i]),
            "ids": [a[i] if i < len(a) else None, b[i] if i < len(b) else None],
            "prefix": a[:i]}


def logit_gap(target, prompt: list[int], part: dict) -> float | None:
    """How close the call was: at the token where two decodes part, the fp32 target's logit of
    the plain choice minus that of the other one (same prefix). Near 0: a near-tie, which
    rounding can decide either way; None where one side ended."""
    import torch

    x, y = part["ids"]
    if x is None or y is None:
        return None
    with torch.inference_mode():
        logits = target(input_ids=torch.tensor([prompt + part["prefix"]])).logits[0, -1]
    return float(logits[x] - logits[y])



# --------------------------------------------------------------------------------------------
# The command, step by step
# --------------------------------------------------------------------------------------------

def arguments(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m minidflash llama-cpp", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--drafter", default="data/smollm2_drafter", help="a saved DFlash drafter")
    p.add_argument("--target", default="HuggingFaceTB/SmolLM2-135M-Instruct",
                   help="the drafter's target: hub id or folder (its tokenizer: the prompts)")
    p.add_argument("--target-gguf", default=None,
                   help="the target as GGUF (default: the offline source's, hub.PACKAGED, "
                        "else the target converted by llama.cpp's converter)")
    p.add_argument("--target-type", choices=TARGET_TYPES, default="packaged",
                   help="the target's weights in llama.cpp: packaged (the offline source's GGUF, "
                        "SmolLM2's Q4_1), or converted from the HF folder (f32, bf16, q8_0) or "
                        "quantized from that f32 by llama-quantize (Q4_0, which llama.cpp "
                        "repacks for AVX-512/AMX unless --no-repack)")
    p.add_argument("--pre-tokenizer", default=None, choices=sorted(PRE_TOKENIZER_REGEX),
                   help="name the target tokenizer's pre-tokenizer for the converter when it has "
                        "no hash for it (the tiny target: qwen2); its regex is checked first")
    p.add_argument("--gguf-dir", type=out_dir, default=None,
                   help="where the GGUFs made here go: the drafter's, and the target's when it "
                        "is converted (default: the user cache)")
    p.add_argument("--suites", nargs="+", default=["gsm8k", "math500", "humaneval", "mtbench"],
                   help="files in data/prompts, without .jsonl (default gsm8k math500 humaneval "
                        "mtbench)")
    p.add_argument("--split", choices=common.SPLITS, default="test",
                   help="which part of each suite: test (where results are reported, the "
                        "default), dev (the first 10 prompts, where choices are made) or all")
    p.add_argument("--n", type=count, default=8, help="prompts per suite (default 8)")
    p.add_argument("--n-max", type=at_least(1), nargs="+", default=[3, 7, 15],
                   help="--spec-draft-n-max values (drafted tokens; minidflash block size n+1)")
    p.add_argument("--p-min", type=float, nargs="+", default=[0.0],
                   help="--spec-draft-p-min values (0: no cut); each n-max runs with each p-min")
    p.add_argument("--full-vocab", action="store_true",
                   help="draft over the whole vocabulary in llama.cpp even when the drafter has "
                        "a draft_vocab.json (as llama.cpp's converter alone writes it)")
    p.add_argument("--drafter-type", choices=["f32", "q8_0"], default="f32",
                   help="the drafter's weights in GGUF (the converter's --outtype)")
    add_threads(p, what="llama.cpp threads for the decodes")
    p.add_argument("--no-repack", action="store_true",
                   help="pass llama.cpp's -nr (no weight repacking; avoids AMX kernels)")
    p.add_argument("--minidflash", action="store_true",
                   help="also decode every prompt in minidflash (tau, identity) on one torch thread")
    p.add_argument("--bench-threads", type=count, nargs="*", default=[],
                   help="also run llama-bench (pp 4/8/16, tg) at these thread counts")
    p.add_argument("--torch-step-times", type=count, nargs="*", default=[],
                   help="also time the torch fp32 passes (bench.step_times) at these thread counts")
    p.add_argument("--out", type=out_file, default=None,
                   help="write the figures here as JSON (and a .png beside it)")
    add_flags(p, only=("max_new_tokens",), defaults={"max_new_tokens": 128},
              why="llama.cpp decodes greedily, its block set by --n-max and its cut by --p-min "
                  "(lists: each run)")
    add_load(p)
    a = p.parse_args(argv)
    if a.max_new_tokens < 2:
        p.error(f"--max-new-tokens {a.max_new_tokens}: give 2 or more (llama.cpp's first token "
                f"comes from the prompt pass)")
    if not all(0 <= q < 1 for q in a.p_min):
        p.error(f"every --p-min must be in [0, 1), got {a.p_min}: 0 verifies every drafted token")
    check_suites(p.error, a.suites, a.n, a.split)
    return a


def settings(a: argparse.Namespace) -> list[tuple[str, int, float]]:
    """Every speculative run of a prompt: its name ("7", or "7/p0.5" with a cut), n-max, p-min."""
    return [(f"{n}/p{q:g}" if q else str(n), n, q) for n in a.n_max for q in a.p_min]


@dataclass
class Setup:
    """What decoding a prompt needs: llama.cpp's binaries, the two GGUFs, the target with its
    tokenizer and stop ids, the drafter in minidflash (None without --minidflash), the options."""
    tools: dict
    target_gguf: Path
    drafter_gguf: Path
    target: object
    tokenizer: object
    stops: list
    drafter: object
    a: argparse.Namespace


def llama_decodes(s: Setup, text: str, ours: list[int], i: int) -> tuple:
    """Step 2: one prompt in llama.cpp, plain and speculative at every n-max, which goes first
    alternating prompt by prompt (as bench does). Returns its record (plain speed, speculative
    counters with their text, whether llama.cpp read our prompt ids), the plain text, whether
    plain stopped by itself, and the runs repeated."""
    a, kw = s.a, dict(threads=s.a.threads, no_repack=s.a.no_repack)
    r, reruns, runs = {"speculative": {}}, 0, settings(a)
    for what in (["plain", *runs] if i % 2 == 0 else [*runs, "plain"]):
        if what == "plain":
            (r["plain"], theirs, (plain, stopped)), again = decode(
                plain_command(s.tools, s.target_gguf, text, a.max_new_tokens, **kw),
                lambda q: (parse_plain(q.stderr), prompt_ids(q.stderr), plain_text(q.stdout)))
            r["prompt_ids_match"] = theirs == ours
        else:
            name, n_max, p_min = what
            (spec, new), again = decode(
                speculative_command(s.tools, s.target_gguf, s.drafter_gguf, text,
                                    a.max_new_tokens, n_max, p_min=p_min, **kw),
                lambda q: (parse_speculative(q.stderr), speculative_text(q.stdout, text)))
            r["speculative"][name] = {**spec, "text": new}
        reruns += again
    r["prompt_ids_match"] &= all(spec.pop("prompt_tokens") == len(ours)
                                 for spec in r["speculative"].values())
    return r, plain, stopped, reruns


def minidflash_decodes(s: Setup, messages: list[dict], ours: list[int], plain: str,
                       stopped: bool) -> dict:
    """Step 3: the same prompt in minidflash: its plain decode against llama.cpp's (where they
    part, and how close the target's call was there), then speculative at block size n-max + 1
    with the same cut and no cost model (tau in both conventions, and whether every decode is
    its plain one). Our cut reads the softmax over the draft vocabulary, llama.cpp's the one
    over its sampler's top candidates: close, not equal."""
    import torch

    from ...target import chat_ids
    from ...decoding_config import DecodingConfig
    from ...verifier import speculative_generate

    ids = chat_ids(s.tokenizer, messages)
    base = speculative_generate(s.target, None, ids, max_new_tokens=s.a.max_new_tokens,
                                block_size=1, stop_token_ids=s.stops)
    mine = s.tokenizer.decode(base.new_ids, skip_special_tokens=True)
    # the two engines' plain decodes: "plain" is llama.cpp's, "speculative" ours
    r = {"engines_plain_parting": parting(s.tokenizer, plain, mine, stopped)}
    if (e := r["engines_plain_parting"]) is not None:
        e["fp32_logit_gap"] = logit_gap(s.target, ours, e)
    r["engines_plain_agree"] = e is None
    r["minidflash"], same = {}, True
    for name, k, p_min in settings(s.a):
        o = speculative_generate(s.target, s.drafter, ids, DecodingConfig(
            max_new_tokens=s.a.max_new_tokens, stop_token_ids=s.stops, block_size=k + 1, p_min=p_min))
        same &= torch.equal(o.output_ids, base.output_ids)
        r["minidflash"][name] = {"tau": o.tau, "tokens": o.num_new_tokens,
                                 "tau_per_pass": o.num_new_tokens / (len(o.acceptance_lengths) + 1)}
    r["minidflash_identical"] = same
    return r


def decode_prompt(s: Setup, suite: str, i: int, row: dict) -> tuple[dict, int]:
    """Steps 2-3 for one prompt: its record, each speculative text compared with the plain one,
    and the llama.cpp runs repeated."""
    from ...target import chat_ids, chat_text

    text = chat_text(s.tokenizer, row["messages"])
    ours = chat_ids(s.tokenizer, row["messages"])[0].tolist()
    decoded, plain, stopped, reruns = llama_decodes(s, text, ours, i)
    r = {"id": row.get("id", f"{suite}-{i}"), "prompt_tokens": len(ours), **decoded}
    for spec in r["speculative"].values():
        spec["parting"] = parting(s.tokenizer, plain, spec.pop("text"), stopped)
        if spec["parting"] is not None:               # how close the call was, in fp32
            spec["parting"]["fp32_logit_gap"] = logit_gap(s.target, ours, spec["parting"])
    if s.drafter is not None:
        r.update(minidflash_decodes(s, row["messages"], ours, plain, stopped))
    parts = [r.get("engines_plain_parting"), *(p["parting"] for p in r["speculative"].values())]
    for part in filter(None, parts):
        del part["prefix"]                     # (the ids were for logit_gap)
    k = settings(s.a)[-1][0]
    print(f"{suite:>10}[{i}] plain {r['plain']['tokens_per_s']:6.1f} tok/s | n-max {k}: "
          f"tau {r['speculative'][k]['tau']:.2f}"
          + (f" (minidflash {r['minidflash'][k]['tau']:.2f})" if s.drafter else "")
          + f", {r['speculative'][k]['tokens_per_s']:6.1f} tok/s, identical "
          f"{r['speculative'][k]['parting'] is None}", flush=True)
    return r, reruns


def step_timings(result: dict, s: Setup) -> None:
    """Step 4 (optional): what a target pass over k tokens costs in decode steps, in llama.cpp
    (llama-bench) and in torch (bench.step_times), into ``result``."""
    if s.a.bench_threads:
        cmd = bench_command(s.tools, s.target_gguf, s.a.bench_threads, no_repack=s.a.no_repack,
                            widths=range(1, 17))
        records = parse_bench(run(cmd).stdout)
        result["llama_bench"] = {"command": shown(cmd), "records": records,
                                 "step_costs": step_costs(records)}
    if s.a.torch_step_times:
        import torch

        from ...checkpoints import load_drafter
        from .bench import step_times
        drafter = s.drafter or load_drafter(s.a.drafter, target=s.target)
        result["torch_step_times"] = {}
        for t in s.a.torch_step_times:
            torch.set_num_threads(t)
            result["torch_step_times"][str(t)] = step_times(s.target, drafter, context=256,
                                                            repeats=9)
        torch.set_num_threads(1)


def summarise(rows: list[dict], names: list[str], minidflash: bool) -> dict:
    """A suite's figures: plain speed, and per setting (n-max, p-min: ``settings``) tau, speed,
    speedup and identical share (under "n_max", as before p-min was a setting)."""
    mean = lambda xs: sum(xs) / len(xs) if xs else None
    plain_t = sum(r["plain"]["eval_ms"] for r in rows) / 1e3
    plain_tps = sum(r["plain"]["runs"] for r in rows) / plain_t
    out = {"prompts": len(rows), "plain_tokens_per_s": plain_tps,
           "prompt_ids_match": all(r["prompt_ids_match"] for r in rows), "n_max": {}}
    for k in names:
        s = [r["speculative"][k] for r in rows]
        tps = sum(x["n_predict"] for x in s) / sum(x["decode_s"] for x in s)
        out["n_max"][k] = {"tau": mean([x["tau"] for x in s]), "tokens_per_s": tps,
                           "speedup": tps / plain_tps,
                           "identical_share": mean([x["parting"] is None for x in s])}
        if all(x.get("draft_calls") for x in s):       # one drafter pass, in plain decode steps
            per_call = sum(x["draft_ms"] for x in s) / sum(x["draft_calls"] for x in s)
            out["n_max"][k].update(draft_ms=per_call, draft_steps=per_call * plain_tps / 1e3,
                                   drafted_per_pass=sum(x["n_drafted"] for x in s)
                                   / sum(x["draft_calls"] for x in s))
        if minidflash:
            out["n_max"][k]["minidflash_tau"] = mean([r["minidflash"][k]["tau"] for r in rows])
            out["n_max"][k]["minidflash_tau_llama_convention"] = mean(
                [r["minidflash"][k]["tau_per_pass"] for r in rows])
    if minidflash:
        out["minidflash_identical"] = all(r["minidflash_identical"] for r in rows)
        out["engines_plain_agree_share"] = mean([r["engines_plain_agree"] for r in rows])
    return out


def main(argv=None) -> dict:
    """The steps of the module docstring over every prompt of the suites; the figures, also as
    JSON (and a plot) where --out says."""
    a = arguments(argv)
    tools = {b: find_binary(b) for b in (PLAIN, SPECULATIVE, *([BENCH] if a.bench_threads else []))}
    converter = find_converter()

    import torch

    from ...checkpoints import load_drafter
    from ...target import load_target, stop_ids

    torch.set_num_threads(1)
    target, tokenizer = load_target(a.target, dtype=torch.float32)
    target_gguf, drafter_gguf, conversion, target_conversion = gguf_files(
        a.drafter, a.target, target, converter, out_dir=a.gguf_dir, target_gguf=a.target_gguf,
        target_type=a.target_type, pre_tokenizer=a.pre_tokenizer, drafter_type=a.drafter_type,
        full_vocab=a.full_vocab)                      # step 1 (engines/llama_cpp.py)
    drafter = load_drafter(a.drafter, target=target) if a.minidflash else None
    s = Setup(tools, target_gguf, drafter_gguf, target, tokenizer, stop_ids(tokenizer), drafter, a)
    command = "python -m minidflash llama-cpp " + " ".join(sys.argv[1:] if argv is None else argv)
    result = {"command": command, "target": a.target, "target_gguf": target_gguf.name,
              "target_type": a.target_type,
              "drafter": a.drafter, "conversion": conversion, "target_conversion": target_conversion,
              "max_new_tokens": a.max_new_tokens, "n": a.n, "split": a.split, "n_max": a.n_max,
              "p_min": a.p_min, "settings": [name for name, *_ in settings(a)],
              "threads": a.threads, "no_repack": a.no_repack, "reruns": 0, "suites": {}}
    kw = dict(threads=a.threads, no_repack=a.no_repack)
    stamp = dict(dtype=f"llama.cpp {a.target_type}", drafters=[a.drafter], load=a.load)
    result["plain_command"] = shown(plain_command(tools, target_gguf.name, "PROMPT",
                                                  a.max_new_tokens, **kw))
    result["speculative_command"] = shown(speculative_command(
        tools, target_gguf.name, drafter_gguf.name, "PROMPT", a.max_new_tokens, "N", **kw))
    t0 = time.time()
    for suite in a.suites:
        rows, prompts = [], common.suite_prompts(suite, a.split, a.n)
        for i, row in enumerate(prompts):
            r, reruns = decode_prompt(s, suite, i, row)
            rows.append(r)
            result["reruns"] += reruns
            result["suites"][suite] = {
                "prompts_used": split_label(suite, a.split, len(prompts)), "prompts": rows,
                "summary": summarise(rows, result["settings"], drafter is not None)}
            write(result, a.out, None, **stamp)        # so far, in case the run is cut short
    result["decode_wall_s"] = round(time.time() - t0, 1)
    step_timings(result, s)
    print(report(result))
    write(result, a.out, plot, **stamp)
    return result


def report(result: dict) -> str:
    """The side-by-side table per suite and n-max, then the step costs."""
    lines = [f"{'suite':>10} {'n-max':>8} {'tau llama.cpp':>13} {'tau minidflash':>14} "
             f"{'tok/s plain':>11} {'tok/s spec':>10} {'speedup':>8} {'identical':>9} "
             f"{'draft (steps)':>13}"]
    for suite, s in result["suites"].items():
        m = s["summary"]
        for k, x in m["n_max"].items():
            mine = f"{x['minidflash_tau']:14.2f}" if "minidflash_tau" in x else f"{'-':>14}"
            lines.append(f"{suite:>10} {k:>8} {x['tau']:13.2f} {mine} {m['plain_tokens_per_s']:11.1f}"
                         f" {x['tokens_per_s']:10.1f} {x['speedup']:7.2f}x "
                         f"{100 * x['identical_share']:8.0f}% "
                         + (f"{x['draft_steps']:13.2f}" if "draft_steps" in x else f"{'-':>13}"))
    for t, c in result.get("llama_bench", {}).get("step_costs", {}).items():
        lines.append(f"llama-bench, {t} thread(s): decode step {c['decode_ms']:.2f} ms; a pass of "
                     + ", ".join(f"{k} tokens = {v:.2f}" for k, v in c["verify_steps"].items())
                     + " decode steps")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    suites = list(result["suites"])
    ks = result.get("settings") or [str(k) for k in result["n_max"]]
    fig = Figure(figsize=(13, 4.4))
    ax = fig.subplots(1, 3)
    w = 0.8 / (2 * len(ks))
    for j, k in enumerate(ks):
        sm = [result["suites"][s]["summary"]["n_max"][k] for s in suites]
        x = [i + (2 * j) * w for i in range(len(suites))]
        ax[0].bar(x, [m["tau"] for m in sm], w, color=f"C{j}", label=f"llama.cpp n-max {k}")
        if "minidflash_tau" in sm[0]:
            ax[0].bar([v + w for v in x], [m["minidflash_tau"] for m in sm], w, color=f"C{j}",
                      alpha=0.45, hatch="//", label=f"minidflash, the same {k}")
        ax[1].bar([i + j * 0.8 / len(ks) for i in range(len(suites))], [m["speedup"] for m in sm],
                  0.8 / len(ks), color=f"C{j}", label=f"n-max {k}")
    for a_ in ax[:2]:
        a_.set_xticks(range(len(suites)), suites, rotation=20)
    mine = "minidflash_tau" in result["suites"][suites[0]]["summary"]["n_max"][ks[0]]
    ax[0].set(title="tau: llama.cpp against minidflash" if mine else "tau in llama.cpp",
              ylabel="tokens per target pass", ylim=(0, None))
    ax[0].legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    ax[1].axhline(1, color="k", lw=0.8, ls="--")
    t = result["threads"]
    ax[1].set(title=f"llama.cpp speculative / plain ({t} thread{'s' if t > 1 else ''})", ylabel="x")
    ax[1].legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    for t, c in result.get("llama_bench", {}).get("step_costs", {}).items():
        ks_ = [int(k) for k in c["verify_steps"]]
        ax[2].plot([1, *ks_], [1, *c["verify_steps"].values()], marker="o",
                   label=f"llama.cpp, {t} thread(s)")
    for t, s in result.get("torch_step_times", {}).items():
        ks_ = [4, 8, 16]
        ax[2].plot([1, *ks_], [1, *(s[f"verify_{k}_ms"] / s["decode_ms"] for k in ks_)],
                   marker="s", ls="--", label=f"torch fp32, {t} thread(s)")
    if not (result.get("llama_bench") or result.get("torch_step_times")):
        ax[2].text(0.5, 0.5, "no step costs measured in this run\n(--bench-threads)",
                   ha="center", va="center", transform=ax[2].transAxes)
        ax[2].set_axis_off()
    else:
        ax[2].axhline(1, color="grey", lw=0.8, ls=":", label="one decode step")
        ax[2].set(title="a target pass over k tokens", xlabel="tokens k", ylabel="decode steps")
        ax[2].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


if __name__ == "__main__":
    main()

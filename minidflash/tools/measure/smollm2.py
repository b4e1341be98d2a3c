"""SmolLM2-135M-Instruct's drafter and what was measured of it: notebook 11's bookkeeping.

The notebook shows the idea; the loops that read a results file, a training record or a shard
of answers and print them as a table live here. Every table starts with its file's provenance
line (``render.provenance``: machine, dtype, drafter weights, threads, load), and timings
compare only between files whose lines agree. The run-by-run record these read is
docs/training_runs.md.

    curve = smollm2.read("tau_curve_smollm2.json")
    smollm2.plot_tau_by_kind(curve, info)          # tau at the end of each run, by the kind it added
    smollm2.speed_table("smollm2_new_kinds_2threads.json")
"""

from __future__ import annotations

import json
from pathlib import Path

from ...paths import DATA_DIR, RESULTS_DIR, SMOLLM2
from ...hub import PACKAGED
from ..make_data.answers import load_shard, shard_path
from ..make_data.overlap import SuiteOverlap
from ..train.train_drafter import answer_spec
from .render import provenance

# The runs of the shipped drafter's line (run 11 and run 14 were not kept: docs/training_runs.md),
# each with the answers it added to the mix and the kind of prompt they answer.
KINDS = {
    1: ("smollm2_answers", "chat mix"),
    2: ((), "(re-read, B 8)"),
    3: ("smollm2_stories", "stories"),
    4: ("smollm2_stories2", "stories"),
    5: ("smollm2_tasks", "tasks, 3 layers"),
    6: ("smollm2_chains", "chains"),
    7: ("smollm2_chains2", "chains"),
    8: ("smollm2_symbolic", "GSM-Symbolic"),
    9: ("smollm2_symbolic2", "GSM-Symbolic"),
    10: ("smollm2_symbolic3", "GSM-Symbolic"),
    12: ("smollm2_wide", "wide"),
    13: (("smollm2_magpie", "smollm2_codeio:0-6", "smollm2_gym_math:0-5"), "Magpie, codeio, gym-math"),
}
# Run 13 read the shards made by then; its recorded command names whole folders, which hold more
# now (docs/smollm2.md). What it read, as `train --answers` takes it:
RUN13_READ = {"data/smollm2_codeio": "data/smollm2_codeio:0-6",
              "data/smollm2_gym_math": "data/smollm2_gym_math:0-5"}
# Every folder of answers the shipped drafter's line read (runs 1-10, 12 and 13).
CHAIN_FOLDERS = ("smollm2_answers", "smollm2_stories", "smollm2_stories2", "smollm2_tasks",
                 "smollm2_chains", "smollm2_chains2", "smollm2_symbolic", "smollm2_symbolic2",
                 "smollm2_symbolic3", "smollm2_symbolic4", "smollm2_wide", "smollm2_magpie",
                 "smollm2_codeio:0-6", "smollm2_gym_math:0-5")


def read(name: str) -> dict:
    """A results file of data/results by its name."""
    return json.loads((RESULTS_DIR / name).read_text())


def header(name: str, results: dict | None = None) -> str:
    """``data/results/NAME: machine ...; dtype ...; ...``: where a file was measured."""
    return f"data/results/{name}: {provenance(read(name) if results is None else results)}"


def wrap(command: str, width: int = 96) -> str:
    """A long command as a shell takes it: lines of at most ``width``, a flag kept with its value."""
    units = []
    for word in command.split(" "):
        last = units[-1] if units else ""
        if last.startswith("-") and " " not in last and not word.startswith("-"):
            units[-1] += " " + word
        else:
            units.append(word)
    lines, line = [], ""
    for unit in units:
        if line.strip() and len(line) + len(unit) + 3 > width:
            lines.append(line + " \\")
            line = "    " + unit
        else:
            line = f"{line} {unit}" if line else unit
    return "\n".join(lines + [line])


# ------------------------------------------------------------------------------------------------
# The target's weights, and the training record
# ------------------------------------------------------------------------------------------------
def weights_source(target) -> str:
    """Which copy ``load_target(SMOLLM2)`` read: the offline source's dequantised Q4_1 GGUF, or
    the Hugging Face cache's (the hub's bf16 weights)."""
    src, path = PACKAGED[SMOLLM2], str(getattr(target.config, "_name_or_path", ""))
    if Path(src.member).stem in path:
        return f"the offline source, {src.spec}: {Path(src.member).name}, dequantised to fp32"
    return f"the Hugging Face cache or hub: {path} (the hub's bf16 weights)"


def answers_in(specs) -> int:
    """How many answers ``train --answers SPEC ...`` reads (``DIR`` or ``DIR:A-B``), from each
    folder's answers.json."""
    total = 0
    for spec in (specs,) if isinstance(specs, str) else specs:
        folder, shards = answer_spec(spec.removeprefix("data/"), error=ValueError)
        held = json.loads((DATA_DIR / folder / "answers.json").read_text())["shards"]
        total += sum(s["answers"] for k, s in held.items() if shards is None or int(k) in shards)
    return total


def run_ends(info: dict) -> dict[int, int]:
    """run -> answers seen at its end, for the runs of KINDS, from training.json's chain
    (``init_drafter``, each run's ``prior``) and the last run's own steps."""
    chain, prior = [], info["init_drafter"]
    while prior:
        chain.insert(0, prior["answers_seen"])
        prior = prior.get("prior")
    cfg = info["config"]
    ends = chain + [chain[-1] + cfg["steps"] * cfg["batch_size"]]
    assert len(ends) == len(KINDS), "training.json's chain and KINDS disagree"
    return dict(zip(KINDS, ends))


def exact_command(info: dict) -> str:
    """The shipped drafter's training command as it ran: the folders it names at the shard
    ranges it read (RUN13_READ)."""
    return " ".join(RUN13_READ.get(w, w) for w in info["command"].split(" "))


def tau_by_run(curve: dict, info: dict) -> dict[int, dict[str, float]]:
    """run -> {suite: tau} at the run's end, from ``tau_curve_smollm2.json``."""
    at = {p["answers_seen"]: p["tau"] for p in curve["points"]}
    return {run: at[end] for run, end in run_ends(info).items()}


def plot_tau_by_kind(curve: dict, info: dict):
    """Tau at the end of each run (the tau curve's snapshots), the x axis named by the kind of
    answers the run added."""
    import matplotlib.pyplot as plt

    taus = tau_by_run(curve, info)
    fig, ax = plt.subplots(figsize=(9, 3.6))
    for i, s in enumerate(curve["suites"]):
        ax.plot(range(len(taus)), [t[s] for t in taus.values()], marker="o", color=f"C{i}", label=s)
    ax.set_xticks(range(len(taus)), [f"{run}: {KINDS[run][1]}" for run in taus], rotation=35,
                  ha="right", fontsize=8)
    ax.set(ylabel="tau", ylim=(1, 3.4), xlabel="run: the kind of answers it added",
           title=f"tau at the end of each run, first {curve['n']} prompts of each suite")
    ax.legend(ncol=4, fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------------------
# Speed per suite
# ------------------------------------------------------------------------------------------------
def rerun_spread(names=("tree_dev_smollm2.json", "trust_dev_smollm2.json"), method="dflash"):
    """The same decodes measured twice (one method, the same command but for its other methods):
    {suite: (tau, tau, speedup, speedup)} and the mean speedups."""
    a, b = (read(n)["suites"] for n in names)
    rows = {s: (a[s]["methods"][method]["tau"], b[s]["methods"][method]["tau"],
                a[s]["methods"][method]["speedup"], b[s]["methods"][method]["speedup"]) for s in a}
    return rows, tuple(sum(r[i] for r in rows.values()) / len(rows) for i in (2, 3))


def _gap(gap) -> str:
    return "-" if gap is None else f"{gap:.3f}" if gap >= 1e-3 else "< 0.001"


def speed_table(name: str, method: str = "dflash") -> dict:
    """A ``bench --methods`` file per suite: tau, speedup over plain decoding in the same dtype
    and over the fastest plain decoding measured, outputs identical to plain, and the largest
    fp32 logit gap where an output parts from plain (a near-tie if small). Returns the rows."""
    run = read(name)
    print(header(name, run))
    short = {"bfloat16": "bf16", "float32": "fp32"}[run["dtype"]]
    print(f"{'suite':<10} | {'tau':>4} {'vs ' + short + ' plain':>14} {'vs the fastest plain':>26} | "
          f"identical | largest fp32 gap")
    rows = {}
    for s, r in run["suites"].items():
        x = rows[s] = r["methods"][method]
        assert x["max_fp32_gap"] is None or x["max_fp32_gap"] < 0.5, (name, s)   # near-ties only
        print(f"{s:<10} | {x['tau']:>4.2f} {x['speedup_same_dtype']:>13.2f}x "
              f"{x['speedup_vs_fastest_plain']:>7.2f}x ({r['fastest_plain']:<15}) | "
              f"{x['identical_count']:>5}/{r['prompts']:<3} | {_gap(x['max_fp32_gap'])}")
    return rows


def plot_verify_curves(names: dict[str, str]):
    """A target pass over k = 1..16 tokens in decode steps, one line per file and thread count
    (``budget curve``'s files); names: {label: file}."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.4))
    for i, (label, name) in enumerate(names.items()):
        for t, c in read(name)["threads"].items():
            y = c["in_decode_steps"]
            ax.plot(range(1, len(y) + 1), y, color=f"C{i}", ls="-" if t == "1" else "--",
                    marker=".", label=f"{label}, {t} thread{'s' if t != '1' else ''}")
    ax.axhline(1, color="grey", lw=0.5)
    ax.set(xlabel="k, tokens in one target pass", ylabel="cost, in decode steps", ylim=(0, 3),
           title="SmolLM2-135M: a pass over k tokens (after 256 cached tokens)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------------------
# One decode, step by step; what the drafter misses
# ------------------------------------------------------------------------------------------------
def steps_text(tokenizer, result, n: int = 8) -> list[str]:
    """The first ``n`` verify steps of a decode: drafted tokens verified, how many the target
    accepted, and the text the step committed (those plus the target's own next token; the
    decode's first token comes from the prefill). 0 verified: a plain step, no draft paid."""
    ids, at, lines = result.new_ids.tolist(), 1, []
    verified = result.verified or [None] * len(result.acceptance_lengths)
    for i, (m, a) in enumerate(zip(verified, result.acceptance_lengths[:n])):
        what = ("plain step" if m == 0 else f"{a - 1} drafts accepted" if m is None
                else f"{a - 1} of {m:>2} drafts accepted")
        lines.append(f"step {i + 1:>2}: {what:<24} + the target's token -> "
                     f"{tokenizer.decode(ids[at:at + a])!r}")
        at += a
    return lines


def decode_html(tokenizer, result, title: str, render) -> str:
    """A decode as HTML: ``title``, then its text with the drafted-and-accepted tokens marked
    (``render``: render.render)."""
    return (f"<b>{title}</b>: {result.num_new_tokens} tokens in {len(result.acceptance_lengths)} "
            f"verify steps, tau {result.tau:.2f}<div style='font-family:monospace;"
            f"white-space:pre-wrap;font-size:12px;line-height:1.5;border:1px solid #ddd;"
            f"padding:6px'>{render(tokenizer, result.new_ids.tolist(), result.drafted, 'html')}</div>")


def print_misses(name: str = "misses_smollm2.json", suite: str = "gsm8k") -> None:
    """``misses``' count: each verify step by the target's token at the first drafted slot."""
    saved = read(name)
    r = saved["suites"][suite]
    print(header(name, saved))
    print(f"{suite}: tau {r['tau']:.2f}, {r['steps']} steps, the first drafted token rejected in "
          f"{r['first_slot_rejected']} ({100 * r['first_slot_rejected'] / r['steps']:.0f}%)")
    print(f"  {'the target token is':<21}{'steps':>6}{'rejected at slot 1':>20}")
    for kind, x in r["kinds"].items():
        print(f"  {kind:<21}{x['steps']:>6}{x['missed']:>12} ({100 * x['missed'] / x['steps']:3.0f}%)")
    print("  missed most: " + ", ".join(f"{w} {k}" for w, k in r["missed_words"][:8]))


# ------------------------------------------------------------------------------------------------
# What is left: the runs beside the chain, the suite overlap, llama.cpp
# ------------------------------------------------------------------------------------------------
def taus(name: str, methods: dict[str, str]) -> None:
    """One line per suite: tau of each method of a file (methods: {method: label})."""
    r = read(name)
    print(header(name, r))
    print(f"  {'suite':<10}" + "".join(f"{label:>16}" for label in methods.values()))
    for s, x in r["suites"].items():
        print(f"  {s:<10}" + "".join(f"{x['methods'][m]['tau']:16.2f}" for m in methods))


def overlapping_items(tokenizer, specs=CHAIN_FOLDERS) -> dict[str, dict[str, int]]:
    """{suite item ("gsm8k:4", 0-based line of its file): {folder: training rows}} for every
    row of the folders whose prompt shares a run of eight words with that item (overlap.py)."""
    suites, found = SuiteOverlap(), {}
    for spec in specs:
        folder, shards = answer_spec(spec, error=ValueError)
        held = json.loads((DATA_DIR / folder / "answers.json").read_text())["shards"]
        for s in sorted(int(k) for k in held if shards is None or int(k) in shards):
            for row in load_shard(shard_path(DATA_DIR / folder, s)):
                text = tokenizer.decode(row["ids"][:row["response_start"]])
                text = text.rsplit("user\n", 1)[-1].split("<|im_end|>", 1)[0]
                for item in suites.overlaps(text):
                    found.setdefault(item, {}).setdefault(folder, 0)
                    found[item][folder] += 1
    return dict(sorted(found.items()))


def tau_without(name: str, method: str, lines: dict[str, set[int]], first: int) -> dict:
    """{suite: (tau, tau without the prompts on ``lines``, prompts dropped)} from a file's
    per-prompt tau; ``first``: the 0-based line of the file's first prompt (10 for the test
    part, 0 for the dev part)."""
    out = {}
    for s, r in read(name)["suites"].items():
        per = r["methods"][method]["per_prompt"]["tau"]
        kept = [t for i, t in enumerate(per) if first + i not in lines.get(s, ())]
        out[s] = (sum(per) / len(per), sum(kept) / len(kept), len(per) - len(kept))
    return out


def llama_cpp_best(names=("llama_cpp_1thread.json", "llama_cpp_2threads.json")) -> None:
    """The fastest setting of each llama.cpp file, against llama.cpp's own plain decoding."""
    for name in names:
        r = read(name)
        x, s, k = max((v["speedup"], s, k) for s, suite in r["suites"].items()
                      for k, v in suite["summary"]["n_max"].items())
        print(header(name, r))
        print(f"  the best of {len(r['settings'])} settings x {len(r['suites'])} suites: "
              f"{x:.2f}x of llama.cpp's plain speed ({s}, n-max {k})")
        assert x < 1


def llama_cpp_steps(types=("packaged", "q8_0", "bf16", "f32", "Q4_0")) -> dict[str, float]:
    """{llama.cpp type: its decode step in ms} (one thread, ``llama_cpp_type_*.json``)."""
    return {t: read(f"llama_cpp_type_{t}.json")["llama_bench"]["step_costs"]["1"]["decode_ms"]
            for t in types}


def step_split(name: str = "step_profile_smollm2_bfloat16.json"):
    """transformers' target pass against lean.py's, split by kind (``step-profile``): the lean
    speedup at each thread and token count printed, the split drawn (a matplotlib Figure)."""
    from .step_profile import figure
    results = read(name)
    print(header(name, results))
    torch_pass, lean = results["split"]["torch"], results["split"]["lean"]
    for t, by in lean.items():
        print(f"  {t} thread(s): " + "; ".join(
            f"{n} token(s) {torch_pass[t][n]['wall']:.1f} -> {s['wall']:.1f} ms "
            f"({torch_pass[t][n]['wall'] / s['wall']:.2f}x)" for n, s in by.items()))
    return figure(results)


ENGINES = ("llamacpp-plain/bf16", "llamacpp-plain/q4_1")
OURS = ("plain/nolean", "plain", "dflash")


def speeds(name: str, methods=OURS + ENGINES) -> dict[str, dict[str, float]]:
    """{suite: {method: tokens per second}} of a ``bench --methods`` file."""
    run = read(name)
    return {s: {m: r["methods"][m]["tokens_per_s"] for m in methods}
            for s, r in run["suites"].items()}


def against_llama_cpp(names: dict[str, str], methods=OURS) -> dict:
    """Tokens per second per suite: each of ``methods`` and llama.cpp's plain decoding (bf16,
    Q4_1), measured in the same ``bench --methods`` run, one file per thread count
    ({label: file}), and the default's ratio over llama.cpp's. Returns {label: {suite: row}}."""
    short = {"plain/nolean": "transformers", "plain": "lean", "dflash": "dflash",
             ENGINES[0]: "llama.cpp bf16", ENGINES[1]: "llama.cpp Q4_1"}
    out = {}
    for label, name in names.items():
        print(header(name))
        print(f"  {label}, tokens/s:")
        print(f"  {'suite':<10}" + "".join(f"{short.get(m, m):>15}" for m in (*methods, *ENGINES))
              + "   dflash over")
        rows = out[label] = speeds(name, (*methods, *ENGINES))
        for s, tps in rows.items():
            print(f"  {s:<10}" + "".join(f"{v:>15.1f}" for v in tps.values())
                  + f"   {tps['dflash'] / tps[ENGINES[0]]:.2f}x, {tps['dflash'] / tps[ENGINES[1]]:.2f}x")
        print("  (dflash over: its tokens/s over llama.cpp's in bf16, in Q4_1)")
    return out


def speeds_markdown(names: dict[str, str]) -> str:
    """``against_llama_cpp`` as a markdown table: a row per suite and thread count."""
    heads = ["plain, transformers", "plain, lean", "DFlash default", "llama.cpp bf16",
             "llama.cpp Q4_1"]
    lines = ["| suite | threads | " + " | ".join(heads) + " | DFlash over llama.cpp bf16 / Q4_1 |",
             "|---" * (len(heads) + 3) + "|"]
    for label, name in names.items():
        for s, tps in speeds(name).items():
            v = list(tps.values())
            lines.append(f"| {s} | {label} | " + " | ".join(f"{x:.1f}" for x in v)
                         + f" | {v[2] / v[3]:.2f}x / {v[2] / v[4]:.2f}x |")
    return "\n".join(lines)


def headline_markdown(one: str, two: str) -> str:
    """The README's SmolLM2 table from a ``bench --methods plain/nolean plain dflash
    llamacpp-plain/...`` file at one thread and one at two: per suite the tokens per second of
    the three plain decodings (transformers' forward, the lean pass, llama.cpp) and of the
    default, tau, the speedup over the lean plain, and the answers identical to it."""
    runs = [read(one)["suites"], read(two)["suites"]]
    cols = {"plain/nolean": "plain, transformers", "plain": "plain, lean pass",
            ENGINES[0]: "llama.cpp bf16", ENGINES[1]: "llama.cpp Q4_1", "dflash": "DFlash default"}
    lines = ["| suite, 1 / 2 threads | " + " | ".join(f"{c}, tokens/s" for c in cols.values())
             + " | tau | DFlash over the lean plain | answers identical to the lean plain "
             "| largest fp32 gap where not |", "|---" * (len(cols) + 5) + "|"]
    for s in runs[0]:
        rs = [r[s]["methods"] for r in runs]
        both = lambda f: " / ".join(f(r) for r in rs)
        gap = max(r["dflash"]["max_fp32_gap"] or 0 for r in rs)
        lines.append(f"| {s} | " + " | ".join(both(lambda r: f"{r[m]['tokens_per_s']:.0f}") for m in cols)
                     + f" | {both(lambda r: format(r['dflash']['tau'], '.2f'))}"
                     + f" | {both(lambda r: format(r['dflash']['speedup'], '.2f') + 'x')}"
                     + " | " + " / ".join(f"{r['dflash']['identical_count']}/{x[s]['prompts']}"
                                          for r, x in zip(rs, runs))
                     + f" | {gap:.2f} |")
    return "\n".join(lines)


SUITE_NAMES = {"gsm8k": "GSM8K", "math500": "MATH-500", "humaneval": "HumanEval", "mtbench": "MT-Bench"}


def new_kinds_markdown(two: str, one: str, before: str) -> str:
    """docs/results.md's bf16 table: the default at two threads and at one over plain bf16
    through transformers' forward, the answers identical, the largest fp32 gap at a parting, and
    the whole block's tau (one thread) of the drafter before the new kinds and of the shipped one."""
    runs = [read(two)["suites"], read(one)["suites"]]
    old = read(before)["suites"]
    lines = ["| suite | tau, 2 / 1 threads | speedup over plain bf16 (transformers' forward), 2 / 1 "
             "threads | answers identical to plain bf16 (2 / 1 threads) | largest fp32 gap at a "
             "parting | tau of the whole block (1 thread), before -> now |", "|---" * 6 + "|"]
    for s in runs[0]:
        d = [r[s]["methods"]["dflash"] for r in runs]
        lines.append(f"| {SUITE_NAMES.get(s, s)} | " + " / ".join(f"{x['tau']:.2f}" for x in d)
                     + " | " + " / ".join(f"{x['speedup']:.2f}x" for x in d) + " | "
                     + " / ".join(f"{x['identical_count']}/{r[s]['prompts']}" for x, r in zip(d, runs))
                     + f" | {max(x['max_fp32_gap'] or 0 for x in d):.2f}"
                     + f" | {old[s]['methods']['dflash:8']['tau']:.2f} -> "
                     f"{runs[1][s]['methods']['dflash:8']['tau']:.2f} |")
    return "\n".join(lines)


def fp32_markdown(two: str, one: str) -> str:
    """docs/results.md's fp32 table: the default at two threads and at one over plain fp32 and
    over the fastest plain (bf16), both plains' tokens per second, the answers identical to
    plain fp32 and the largest gap at a parting (a fresh fp32 pass)."""
    runs = [read(two)["suites"], read(one)["suites"]]
    lines = ["| suite (fp32) | tau, 2 / 1 threads | over plain fp32, 2 / 1 threads | over plain bf16 "
             "(the fastest), 2 / 1 threads | plain fp32, tokens/s | plain bf16, tokens/s | answers "
             "identical to plain fp32 | largest gap at a parting (a fresh fp32 pass) |", "|---" * 8 + "|"]
    for s in runs[0]:
        m = [r[s]["methods"] for r in runs]
        both = lambda f: " / ".join(f(x) for x in m)
        gaps = [x["dflash"]["max_fp32_gap"] for x in m if x["dflash"]["max_fp32_gap"] is not None]
        lines.append(f"| {SUITE_NAMES.get(s, s)} | {both(lambda x: format(x['dflash']['tau'], '.2f'))}"
                     f" | {both(lambda x: format(x['dflash']['speedup'], '.2f') + 'x')}"
                     f" | {both(lambda x: format(x['dflash']['speedup_vs_fastest_plain'], '.2f') + 'x')}"
                     f" | {both(lambda x: format(x['plain']['tokens_per_s'], '.1f'))}"
                     f" | {both(lambda x: format(x['plain/bf16']['tokens_per_s'], '.1f'))}"
                     " | " + " / ".join(f"{x['dflash']['identical_count']}/{r[s]['prompts']}"
                                        for x, r in zip(m, runs))
                     + f" | {format(max(gaps), '.0e') if gaps else '-'} |")
    return "\n".join(lines)

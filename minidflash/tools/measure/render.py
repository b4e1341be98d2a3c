"""Showing a decode: which tokens the drafter got right, with token boundaries you can see.

One renderer for the demo (terminal), and the notebooks (HTML); below it, the one line that
says where a results file was measured (``provenance``), and the pictures and tables notebook 13
draws (trees of drafts, the methods' speed by suite). Spaces are shown as ``␣``,
newlines as ``↵`` (followed by a real line break), tabs as ``⇥``, other control characters as
their Unicode control pictures (form feed ``␌``, ...), so a reader sees exactly where one
token ends and the next begins. Tokens that were drafted and accepted are marked;
the others are the target's own tokens (the first token, and the bonus token that ends each
verify step).
"""

from __future__ import annotations

import html
import json

ACCEPTED = ("#a8e6a1", "#cdf2c8")          # two greens, alternating, so boundaries show
ANSI_ACCEPTED = ("\033[42;30m", "\033[102;30m")
ANSI_RESET = "\033[0m"
OPEN, SEP, CLOSE = "\u27e6", "\u2502", "\u27e7"   # ⟦ │ ⟧ : never confused with code brackets


def visible(text: str) -> str:
    """Text with its whitespace and control characters made visible: ␣ space, ⇥ tab, ↵ newline
    (kept as a line break after it), and U+2400 + code for the other control characters."""
    text = text.replace(" ", "\u2423").replace("\t", "\u21e5").replace("\n", "\u21b5\n")
    return "".join(chr(0x2400 + ord(c)) if ord(c) < 32 and c != "\n" else
                   "\u2421" if c == "\x7f" else c for c in text)


def token_text(tokenizer, token_id: int) -> str:
    """One token's text with its whitespace made visible."""
    return visible(tokenizer.decode([int(token_id)]))


def render(tokenizer, ids: list[int], drafted: list[bool], mode: str = "plain") -> str:
    """The answer with drafted-and-accepted tokens marked.

    mode "plain": each run of accepted tokens in ⟦ ⟧, tokens inside a run split by │;
    "ansi": accepted tokens on alternating green backgrounds (a terminal);
    "html": the same as spans, the target's own tokens ending in a thin grey bar.
    """
    if mode not in ("plain", "ansi", "html"):
        raise ValueError(f"mode {mode!r} is not 'plain', 'ansi' or 'html'")
    out, in_run, k = [], False, 0
    for t, good in zip(ids, list(drafted) + [False] * (len(ids) - len(drafted))):
        text = token_text(tokenizer, t)
        if mode == "html":
            style = (f"background:{ACCEPTED[k % 2]}" if good else "border-right:2px solid #888")
            out.append(f'<span style="{style}">{html.escape(text)}</span>')
        elif mode == "ansi":
            out.append(f"{ANSI_ACCEPTED[k % 2]}{text}{ANSI_RESET}" if good else text)
        else:
            if good:
                out.append((SEP if in_run else OPEN) + text)
            else:
                out.append((CLOSE if in_run else "") + text)
        k += good
        in_run = good
    if in_run and mode == "plain":
        out.append(CLOSE)
    return "".join(out)


def legend(mode: str = "plain") -> str:
    """What the marks of :func:`render` mean, in the same mode."""
    if mode == "html":
        return (f'<span style="background:{ACCEPTED[0]}">drafted</span><span style="background:'
                f'{ACCEPTED[1]}">and</span><span style="background:{ACCEPTED[0]}">accepted</span>'
                ' &nbsp; <span style="border-right:2px solid #888">the target\'s own token</span> '
                '(the first token, and the bonus token that ends each verify step); '
                '\u2423 space, \u21b5 newline')
    marked = (f"{ANSI_ACCEPTED[0]}drafted{ANSI_RESET}{ANSI_ACCEPTED[1]}and{ANSI_RESET}"
              f"{ANSI_ACCEPTED[0]}accepted{ANSI_RESET} (greens alternate per token)"
              if mode == "ansi" else f"{OPEN}drafted{SEP}and{SEP}accepted{CLOSE} (│ between tokens)")
    return (f"{marked}; unmarked: the target's own token\n(the first one, and the bonus token "
            f"that ends each verify step); \u2423 space, \u21b5 newline")


# ------------------------------------------------------------------------------------------------
# Where a results file was measured: one line, printed wherever a notebook or the README reads one
# ------------------------------------------------------------------------------------------------
NOT_RECORDED = "not recorded"
LOADS = {"alone": "alone", "shared": "beside another process"}


def _machine(results: dict) -> str:
    m = results.get("machine")
    device = results.get("device")
    gpu = f" (device {device})" if device and device != "cpu" else ""
    if not isinstance(m, dict):
        return NOT_RECORDED + gpu
    bf16 = {True: "native bf16", False: "no native bf16"}.get(m.get("native_bf16"),
                                                               "bf16 units " + NOT_RECORDED)
    held = m.get("held_by")
    isa = (f", held to {m.get('isa', '?')} ({' '.join(f'{k}={v}' for k, v in held.items())})"
           if held else "")
    return f"{m.get('cpu', 'CPU ' + NOT_RECORDED)}, {m.get('cores', '?')} cores, {bf16}{isa}{gpu}"


def _drafters(results: dict) -> str:
    shas = results.get("drafter_sha256")
    if not isinstance(shas, dict):
        return NOT_RECORDED
    if not shas:
        return "none"
    return ", ".join(f"{folder} ({'sha256 ' + sha[:12] if sha != NOT_RECORDED else 'weights ' + sha})"
                     for folder, sha in shas.items())


def _threads(results: dict) -> str:
    t = results.get("threads")
    if isinstance(t, bool) or t is None:
        return NOT_RECORDED
    if isinstance(t, (dict, list, tuple)):           # a sweep: the counts taking turns
        return " and ".join(map(str, t)) or NOT_RECORDED
    return str(t)


def provenance(results: dict) -> str:
    """One line saying where and how a results file was measured: the machine (CPU model, cores,
    native bf16 or not), the dtype, the drafter (its folder and the first 12 hex digits of its
    weights' sha256), the torch threads and the load (alone, or beside another process). What a
    file does not record is said as "not recorded", never guessed. Timings compare only between
    files whose lines agree."""
    return (f"machine {_machine(results)}; dtype {results.get('dtype') or NOT_RECORDED}; "
            f"drafter {_drafters(results)}; threads {_threads(results)}; "
            f"load {LOADS.get(results.get('load'), NOT_RECORDED)}")


# ------------------------------------------------------------------------------------------------
# Notebook 13's pictures and tables (matplotlib's pyplot, imported when one is drawn)
# ------------------------------------------------------------------------------------------------
def tree_rows(step: dict) -> tuple[dict, dict]:
    """A recorded tree step's layout: node -> row (a node takes its parent's row if it is the
    parent's first child, else a new row) and node -> depth; node 0 is the root."""
    rows, taken = {0: 0}, set()
    for i, p in enumerate(step["parents"]):
        rows[i + 1] = rows[p + 1] if p + 1 not in taken else max(rows.values()) + 1
        taken.add(p + 1)
    return rows, {0: 0, **{i + 1: d for i, d in enumerate(step["depths"])}}


def draw_tree(ax, step: dict, title: str, label, block_size: int) -> None:
    """One verified tree on ``ax``: its nodes' tokens (``label(token_id)``), the path the target
    took in green, its bonus token dashed blue. step: {"root", "tokens", "parents", "depths",
    "path", "bonus"}."""
    rows, depth = tree_rows(step)
    on_path = {0, *step["path"]}
    for i, p in enumerate(step["parents"]):
        a, b = p + 1, i + 1
        ax.plot([depth[a], depth[b]], [-rows[a], -rows[b]], zorder=1,
                color="tab:green" if b in on_path else "grey", lw=2 if b in on_path else 0.8)
    texts = {0: label(step["root"]), **{i + 1: label(t) for i, t in enumerate(step["tokens"])}}
    for node, text in texts.items():
        style = dict(boxstyle="round,pad=0.25", fc="#cdf2c8" if node in on_path else "white",
                     ec="tab:green" if node in on_path else "grey")
        ax.text(depth[node], -rows[node], text, ha="center", va="center", fontsize=9, bbox=style,
                zorder=2)
    last = step["path"][-1] if step["path"] else 0
    ax.plot([depth[last], depth[last] + 1], [-rows[last]] * 2, color="tab:blue", ls="--", lw=1)
    ax.text(depth[last] + 1, -rows[last], label(step["bonus"]), ha="center", va="center",
            fontsize=9, bbox=dict(boxstyle="round,pad=0.25", fc="#dbe9f6", ec="tab:blue", ls="--"),
            zorder=2)
    top = max(rows.values())
    ax.set(title=title, xlim=(-0.6, block_size + 0.6), ylim=(-top - 0.6, 0.6), yticks=[],
           xticks=range(0, block_size + 1))
    ax.set_xlabel("depth (slot j; 0 is the root, the last committed token)", fontsize=8)
    for spine in ("left", "right", "top"):
        ax.spines[spine].set_visible(False)


def tree_figure(steps: list[dict], shown: list[int], label, block_size: int):
    """The trees of the steps ``shown``, one above the other."""
    import matplotlib.pyplot as plt

    heights = [max(tree_rows(steps[k])[0].values()) + 1.5 for k in shown]
    fig, axes = plt.subplots(len(shown), 1, figsize=(12, 1.4 + 0.85 * sum(heights)),
                             gridspec_kw={"height_ratios": heights})
    for ax, k in zip(axes, shown):
        s = steps[k]
        draw_tree(ax, s, f"step {k + 1}: {len(s['tokens'])} nodes; green: the path the target "
                         f"took ({len(s['path'])} accepted), dashed blue: its bonus token",
                  label, block_size)
    fig.tight_layout()
    return fig


def short(method: str) -> str:
    """A method's name without the data/ of its drafter's path."""
    return method.replace("@data/", "@")


def verified(method: str, r: dict):
    """Drafts sent to the target per step (older tree runs left it out: their whole budget)."""
    from .methods import parse

    m, v = parse(method), r.get("verified_per_step")
    return float(m.nodes) if m.kind == "tree" and not v else v


def methods_table(one: dict, two: dict | None, title: str) -> None:
    """Print a ``bench --methods`` run (one thread) beside another (two threads): per suite and
    method, tau, drafts verified a step, both speedups and whether the output is identical."""
    import textwrap

    print(title)
    for command in one["commands"] if "commands" in one else [one["command"]]:
        print(textwrap.fill(command, 98, subsequent_indent="    ", break_on_hyphens=False))
    for suite, s in one["suites"].items():
        names = [m for m, r in s["methods"].items() if r.get("tau") is not None]
        other = two["suites"].get(suite, {}).get("methods", {}) if two else {}
        w = max(map(len, ["method"] + [short(m) for m in names])) + 2
        print(f"\n{suite}: {s.get('prompts_used') or str(s.get('prompts')) + ' prompts'}")
        print(f"  {'method':<{w}}{'tau':>6}{'verified/step':>15}{'speedup 1 thr':>15}{'2 thr':>8}"
              "  identical")
        for m in names:
            r, v = s["methods"][m], verified(m, s["methods"][m])
            r2 = other.get(m, {}).get("speedup")
            same = r.get("identical") and other.get(m, {}).get("identical", True)
            v = "-" if v is None else f"{v:.1f}"
            r2 = "-" if r2 is None else f"{r2:.2f}x"
            print(f"  {short(m):<{w}}{r['tau']:>6.2f}{v:>15}{r['speedup']:>14.2f}x{r2:>8}  "
                  f"{'yes' if same else 'NO'}")


def _bars(suites, height):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(suites), figsize=(12, height), sharey=True, squeeze=False)
    return fig, axes[0]


def _finish(fig, axes, height, title=None):
    axes[0].invert_yaxis()                        # shared: once, the first method on top
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.35 / height, 1, 1))


def speed_figure(one: dict, two: dict | None, title: str):
    """Speedup over plain by method, a panel per suite, one thread and two side by side."""
    import matplotlib.pyplot as plt

    suites = list(one["suites"])
    height = 2.2 + 0.3 * max(len(s["methods"]) for s in one["suites"].values())
    fig, axes = _bars(suites, height)
    for ax, suite in zip(axes, suites):
        names = [m for m, r in one["suites"][suite]["methods"].items() if r.get("tau") is not None]
        ys = range(len(names))
        got = one["suites"][suite]["methods"]
        ax.barh([y - 0.2 for y in ys], [got[m]["speedup"] for m in names], 0.4, color="C0",
                label="1 thread")
        if two:
            got = two["suites"].get(suite, {}).get("methods", {})
            ax.barh([y + 0.2 for y in ys], [got.get(m, {}).get("speedup", 0) for m in names], 0.4,
                    color="C1", label="2 threads")
        ax.axvline(1, color="k", lw=0.8)
        ax.set(title=suite, xlabel="speedup over plain")
        ax.xaxis.set_major_locator(plt.MaxNLocator(4))
        ax.set_yticks(list(ys), [short(m) for m in names], fontsize=8)
    _finish(fig, axes, height, title)
    return fig


def projection_figure(proj: dict):
    """proj: suite -> {method: (tau, CPU projection, GPU projection)} (cost.project): the same
    tau priced on this CPU and on the paper's GPU, a panel per suite."""
    height = 2.2 + 0.3 * max(len(per) for per in proj.values())
    fig, axes = _bars(list(proj), height)
    for ax, (suite, per) in zip(axes, proj.items()):
        names = [m for m in per if m != "plain"]
        ys = range(len(names))
        ax.barh([y - 0.2 for y in ys], [per[m][1]["speedup"] for m in names], 0.4, color="C0",
                label="this CPU (measured costs)")
        ax.barh([y + 0.2 for y in ys], [per[m][2]["speedup"] for m in names], 0.4, color="C2",
                label="the paper's GPU (verify = 1 step)")
        ax.axvline(1, color="k", lw=0.8)
        ax.set_yticks(list(ys), [short(m) for m in names], fontsize=8)
        ax.set(title=f"{suite}: the same tau, two price lists",
               xlabel="projected speedup over plain")
    _finish(fig, axes, height)
    return fig


def curves_figure(curves: list, title: str, flat_label: str | None = None, figsize=(8, 3.4)):
    """Verify curves, t(k) / t(1) against k: curves [(label, steps, style)], style a dict of
    matplotlib's plot keywords (``fmt`` the format string); a dotted line at one decode step."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=figsize)
    for label, steps, style in curves:
        style = dict(style)
        ax.plot(range(1, len(steps) + 1), steps, style.pop("fmt", "o-"), label=label, **style)
    ax.axhline(1.0, color="k", lw=0.8, ls=":", label=flat_label)
    ax.set(xlabel="tokens in the target pass (k)", ylabel="t(k) / t(1)  (decode steps)",
           title=title, ylim=(0, None))
    ax.legend(fontsize=8, ncol=1 + (len(curves) > 4))
    fig.tight_layout()
    return fig


def ratio_figure(table: dict, suites, cuts):
    """Notebook 13, section 2: tau, drafts verified a step and llama.cpp's accepted / verified
    against the cut p_min; table[(suite, p_min)] = (tau, verified, ratio)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    titles = ["tau: tokens per verify step", "drafts verified per step",
              "accepted / verified (llama.cpp)"]
    for k, (ax, title) in enumerate(zip(axes, titles)):
        for i, suite in enumerate(suites):
            ax.plot(cuts, [table[suite, p][k] for p in cuts], "o-", color=f"C{i}", label=suite)
        ax.set(xlabel="confidence cut p_min", title=title, xticks=cuts)
        ax.set_ylim(0, 1.05 if k == 2 else None)
    axes[0].legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    return fig


def cut_figure(steps: list[dict], p_min: float, block_size: int):
    """Each step's q_j by slot: accepted green, rejected red, cut grey, the cut after slot m.
    steps: [{"q": (B-1,), "m", "accepted"}]."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    fig, axes = plt.subplots(1, len(steps), figsize=(12, 3.3), sharey=True)
    slots = range(1, block_size)
    for ax, (k, s) in zip(axes, enumerate(steps, 1)):
        m, a = s["m"], s["accepted"]
        ax.bar(slots, s["q"].tolist(), edgecolor=["k" if j <= m else "grey" for j in slots],
               color=["tab:green" if j <= a else "tab:red" if j <= m else "lightgrey" for j in slots])
        ax.axhline(p_min, color="k", ls="--", lw=1)
        ax.axvline(m + 0.5, color="C0", lw=2)
        ax.set(title=f"step {k}: cut m = {m}, accepted a = {a}", xlabel="slot j",
               xticks=[1, 4, 8, 12, 15])
    axes[0].set_ylabel("q_j: the drafter's probability of d_j")
    fig.legend(handles=[Patch(color="tab:green", label="accepted"),
                        Patch(color="tab:red", label="rejected"),
                        Patch(color="lightgrey", label="cut: never verified"),
                        Line2D([], [], color="k", ls="--", lw=1, label=f"p_min = {p_min}"),
                        Line2D([], [], color="C0", lw=2, label="the cut (after slot m)")],
               loc="lower center", ncol=5, fontsize=8)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def mask_figure(mask, names: list[str], depths: list[int], title: str):
    """A tree attention mask over [root, nodes] (query rows, key columns), tokens as labels."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.6, 5.2))
    ax.imshow(mask.float(), cmap="Greens", vmin=0, vmax=1.3)
    ax.set_xticks(range(len(names)), names, rotation=90, fontsize=7)
    ax.set_yticks(range(len(names)), [f"{n} (d{d})" for n, d in zip(names, depths)], fontsize=7)
    ax.set(title=title, xlabel="key (root, then nodes)", ylabel="query (depth)")
    fig.tight_layout()
    return fig


def calibration_table(runs: dict, min_reached: int) -> None:
    """Per suite: reached slots and the share accepted, per bin of q (thin bins: '-')."""
    bins = next(iter(runs.values()))["bins"]
    print(f"{'bin of q':<22}" + "".join(f"{lo:>6.1f}" for lo in bins[:-1]))
    for suite, c in runs.items():
        print(f"{suite + ': reached':<22}" + "".join(f"{r:>6d}" for r in c["reached"]))
        shares = [f"{o:>6.2f}" if o is not None and r >= min_reached else f"{'-':>6}"
                  for o, r in zip(c["observed"], c["reached"])]
        print(f"{'  share accepted':<22}" + "".join(shares))


def calibration_figure(runs: dict, min_reached: int, title: str):
    """Left: the share of reached slots accepted per bin of q. Right: P(slots 1..j all
    accepted) against the mean product of q over slots 1..j (``budget.calibration``'s runs)."""
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 3.8))
    ax.plot([0, 1], [0, 1], color="k", lw=0.8, ls=":", label="calibrated")
    for i, (suite, c) in enumerate(runs.items()):
        mids = [(lo + hi) / 2 for lo, hi in zip(c["bins"], c["bins"][1:])]
        pts = [(x, o) for x, o, r in zip(mids, c["observed"], c["reached"])
               if o is not None and r >= min_reached]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=f"C{i}", label=suite)
        js = [x["slot"] for x in c["slots"]]
        ax2.plot(js, [x["all_accepted"] for x in c["slots"]], "o-", color=f"C{i}",
                 label=f"{suite}: observed")
        ax2.plot(js, [x["q_product"] for x in c["slots"]], "s--", color=f"C{i}", alpha=0.6,
                 label=f"{suite}: product of q")
    ax.set(xlabel="drafter's q of its own token (bin middle)", ylabel="share the target accepted",
           title=f"{title}: reached slots (bins with >= {min_reached})", xlim=(0, 1), ylim=(0, 1.05))
    ax.legend(fontsize=7, loc="upper left")
    ax2.set(xlabel="slot j", ylabel="P(slots 1..j all accepted)", ylim=(0, 1.05),
            title="a prefix: observed vs predicted")
    ax2.legend(fontsize=7, loc="upper right", ncol=2)
    fig.tight_layout()
    return fig


def near_tie_figure(names: list[str], bf16: list[float], fp32: list[float], step: float):
    """One near-tie on a number line: the bf16 grid (a line every ``step``), the window within
    two steps of the top that ``greedy_choice`` recomputes, each token's logit as the bf16 head
    gave it (circles) and recomputed in fp32 (crosses)."""
    import math

    import matplotlib.pyplot as plt

    lo = math.floor(min(bf16 + fp32) / step) * step - step
    hi = math.ceil(max(bf16 + fp32) / step) * step + step
    fig, ax = plt.subplots(figsize=(8, 2.8))
    for k in range(round((hi - lo) / step) + 1):
        ax.axvline(lo + k * step, color="#b0b0b0", lw=1.2, zorder=1)
    ax.axvspan(max(bf16) - 2 * step, max(bf16), color="C2", alpha=0.1, zorder=0,
               label="within two steps of the top: recomputed in fp32")
    for i, (name, b, f) in enumerate(zip(names, bf16, fp32)):
        y = 0.6 - 0.4 * i
        ax.plot([b], [y], "o", ms=11, mfc="none", color=f"C{i}", zorder=3,
                label=f"{name}: bf16 {b:.4f}")
        ax.plot([f], [y], "x", ms=9, color=f"C{i}", zorder=3, label=f"{name}: fp32 {f:.4f}")
    ax.set(xlim=(lo, hi), ylim=(-0.2, 1.5), yticks=[], xlabel=f"logit (grey: the bf16 grid, a "
           f"step of {step:g})", title="one near-tie: the bf16 head's logits and fp32's")
    ax.legend(fontsize=7, ncol=3, loc="upper center")
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------
# The tables of README.md and docs/results.md, rendered from their files (tests/test_claims.py)
# --------------------------------------------------------------------------------------------

DEFAULT_DRAFTERS = {"dflash": "data/drafter", "tree": "data/drafter", "ar": "data/ar_drafter"}


def _read(name: str) -> dict:
    from ...paths import RESULTS_DIR
    return json.loads((RESULTS_DIR / name).read_text())


def methods_markdown(one: str, two: str, methods=None, notes=None) -> str:
    """A ``bench --methods`` file at one thread and one at two (names in data/results) as a
    markdown table: per method its drafter, tau and speedup over plain on each suite, and
    whether every output was identical. ``notes`` adds words after a drafter's path."""
    a, b = _read(one)["suites"], _read(two)["suites"]
    methods = methods or [m for m in next(iter(a.values()))["methods"] if m != "plain"]
    num = lambda v, f: "-" if v is None else f.format(v)
    lines = ["| method | drafter | tau, " + " / ".join(a) + " | speedup over plain, 1 thread | "
             "speedup over plain, 2 threads | output identical |", "|---" * 6 + "|"]
    for m in methods:
        name, _, drafter = m.partition("@")
        drafter = drafter or DEFAULT_DRAFTERS.get(name.split(":")[0], "")
        rows = [s["methods"][m] for s in a.values()], [s["methods"][m] for s in b.values()]
        same = all(r["identical"] for r in rows[0] + rows[1])
        label = f"`{drafter}`{(notes or {}).get(drafter, '')}" if drafter else "none"
        lines.append(f"| `{name}` | {label} | "
                     + " / ".join(num(r["tau"], "{:.2f}") for r in rows[0]) + " | "
                     + " | ".join(" / ".join(num(r["speedup"], "{:.2f}x") for r in rs) for rs in rows)
                     + f" | {'yes' if same else 'no'} |")
    return "\n".join(lines)


def headline_methods_markdown(one: str, two: str) -> str:
    """The README's rows of ``methods_markdown``: each drafter at its block of 16 (the AR one at 8)."""
    return methods_markdown(one, two, ("dflash:16", "dflash:16@data/drafter_3l", "ar:8"),
                            {"data/drafter": " (1 layer)", "data/drafter_3l": " (3 layers)",
                             "data/ar_drafter": " (EAGLE-3-style)"})


def batch_markdown(name: str) -> str:
    """``bench --batch-sizes``: DFlash's throughput over batched plain decoding's, a row per
    batch size, each suite at each thread count."""
    suites = _read(name)["suites"]
    threads = list(next(iter(suites.values())))
    lines = ["| requests at once | " + " | ".join(f"{s}, {' / '.join(threads)} threads"
                                                  for s in suites) + " |", "|---" * (len(suites) + 1) + "|"]
    for n in next(iter(suites.values()))[threads[0]]:
        lines.append(f"| {n} | " + " | ".join(" / ".join(f"{s[t][n]['ratio']:.2f}x" for t in threads)
                                                for s in suites.values()) + " |")
    return "\n".join(lines)

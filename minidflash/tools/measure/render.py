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
    return f"{m.get('cpu', 'CPU ' + NOT_RECORDED)}, {m.get('cores', '?')} cores, {bf16}{gpu}"


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

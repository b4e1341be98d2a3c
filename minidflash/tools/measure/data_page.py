"""The measured numbers of data/README.md, rendered from the files the shipped models carry
(``training.json``) and the results files (``regions.py`` puts them on the page)."""

from __future__ import annotations

from .regions import read

STEPS = (200, 1000, 3000)       # the points of a drafter's training the page quotes


def _at(history: dict, key: str, step: int, window: int = 20) -> float:
    """The mean of ``key`` over the ``window`` steps that end at ``step`` (counted from 1)."""
    i = history["step"].index(step - 1)
    xs = history[key][max(0, i - window + 1):i + 1]
    return sum(xs) / len(xs)


def _curve(history: dict, key: str) -> str:
    return " / ".join(f"{_at(history, key, s):.2f}" for s in STEPS)


def target_run(training: str) -> str:
    """The tiny target's training run: wall time, tokens, epochs and the validation loss."""
    info, h = read(training)["info"], read(training)["history"]
    per_step = info["batch_size"] * info["seq_len"]
    shown = [i for i, s in enumerate(h["val_step"]) if s in (0, 200, 800) or i == len(h["val_step"]) - 1]
    loss = " -> ".join(f"{h['val_loss'][i]:.2f}" + (f" (step {h['val_step'][i] + (i == shown[-1]):,})"
                                                    if h["val_step"][i] else "") for i in shown)
    threads = {1: "one CPU thread", 2: "two CPU threads"}.get(info["torch_threads"],
                                                              f"{info['torch_threads']} CPU threads")
    return (f"- **Run** (`{training}`): {info['wall_s']:,.0f} s wall on {threads}; "
            f"{info['train_tokens'] / 1e6:.2f}M training tokens ({info['steps']:,} steps x "
            f"{per_step:,} tokens = {info['steps'] * per_step / info['train_tokens']:.2f} epochs); "
            f"validation loss ({info['val_tokens'] / 1e3:.0f}K held-out tokens of both domains) {loss}.")


def target_answers(bench: str) -> str:
    """The tiny target's plain greedy answers on the test prompts: accuracy, loops, length."""
    rows = read(bench)["suites"]
    lines = ["| domain | arithmetic accuracy | repeated 4-gram share | mean answer tokens |",
             "|---|---|---|---|"]
    for domain, r in rows.items():
        acc = r.get("plain_accuracy")
        right = "—" if acc is None else f"{acc:.2f} ({round(acc * r['prompts'])}/{r['prompts']})"
        lines.append(f"| {domain} | {right} | {100 * r['repeated_4gram_share']:.1f}% | "
                     f"{r['mean_new_tokens']:.0f} |")
    counts = " and ".join(sorted({str(r["prompts"]) for r in rows.values()}))
    return (f"- **Greedy answers on the {counts} test prompts of each domain** (plain decoding in "
            f"`{bench}`):\n\n"
            + "\n".join("  " + line for line in lines))


def drafter_run(training: str, bench: str) -> str:
    """The shipped tiny drafter's run: wall time, loss and tau at the training anchors, and the
    tau it decodes on the test prompts."""
    info, h = read(training)["info"], read(training)["history"]
    taus = {s: r["block_sizes"]["16"]["tau"] for s, r in read(bench)["suites"].items()}
    return (f"- **Run**: {info['wall_s']:,.0f} s on one CPU thread. Loss (weighted CE, mean of 20 "
            f"steps) at steps 200 / 1,000 / 3,000: {_curve(h, 'loss')}; tau at the training anchors "
            f"{_curve(h, 'tau')} (`{training}`, `loss.png`). On the test prompts of each suite "
            f"(`{bench}`, block 16) it decodes "
            + " and ".join(f"{s} at tau {t:.2f}" for s, t in taus.items()) + ".")


def drafters_table(one: str, three: str) -> str:
    """The 1-layer and 3-layer DFlash drafters, trained at the same budget: wall time,
    processes, loss and tau at the training anchors."""
    lines = ["| drafter | wall | processes | loss (mean of 20 steps) at 200 / 1,000 / 3,000 | tau at "
             "the training anchors |", "|---|---|---|---|---|"]
    for name, label in ((one, "1 layer (`drafter/`)"), (three, "3 layers (`drafter_3l/`)")):
        info, h = read(name)["info"], read(name)["history"]
        lines.append(f"| {label} | {info['wall_s']:,.0f} s | {info.get('world_size', 1)} | "
                     f"{_curve(h, 'loss')} | {_curve(h, 'tau')} |")
    return "\n".join(lines)


def ar_run(ar: str, dflash: str) -> str:
    """The autoregressive rival's run, beside the DFlash drafter's wall time."""
    a, d = read(ar), read(dflash)
    return (f"- **Run**: {a['info']['wall_s']:,.0f} s on one CPU thread (the DFlash drafter: "
            f"{d['info']['wall_s']:,.0f} s; the AR step supervises every response position four "
            f"times, DFlash 32 anchors). Loss (mean of 20 steps) at steps 200 / 1,000 / 3,000: "
            f"{_curve(a['history'], 'loss')}; tau at the training rows (at most 5 with 4 unrolled "
            f"steps) {_curve(a['history'], 'tau')} (`{ar}`).")


def deeper_drafter(methods: str) -> str:
    """Why the 3-layer drafter is shipped: its chain against the 1-layer one and the best AR
    drafter, per suite at one thread (``bench --methods``)."""
    parts = []
    for suite, r in read(methods)["suites"].items():
        m = {k: v["speedup"] for k, v in r["methods"].items()}
        three, one = m["dflash:16@data/drafter_3l"], m["dflash:16"]
        ar = max((v, k) for k, v in m.items() if k.startswith("ar:"))
        parts.append(f"{suite} {three:.2f}x against {one:.2f}x for the 1-layer drafter and "
                     f"{ar[0]:.2f}x for the best AR setting (`{ar[1]}`): "
                     f"{'ahead of both' if three > max(one, ar[0]) else 'not ahead of both'}")
    return (f"The 3-layer drafter is shipped beside the 1-layer one: on the test prompts of "
            f"`{methods}` at one thread, its `dflash:16` ran " + "; ".join(parts) + ".")


def chat_folders(*manifests: str) -> str:
    """More chat answers: per folder (its ``answers.json``) the prompt file it answered (that
    file's ``.json``: requests kept of those sampled, and the seconds), the answers, their tokens
    and the seconds the shards took."""
    lines = [("| folder | requests kept / sampled (seed) | requests, s | answers | answer tokens | "
              "answers, s (tokens/s) |"), "|---|---|---|---|---|---|"]
    for name in manifests:
        manifest = read(name)
        shards = manifest["shards"].values()
        (prompts,) = manifest["recipe"]["prompts"]
        made = read(f"data/train_prompts/{prompts.removesuffix('.jsonl')}.json")
        tokens, seconds = sum(s["answer_tokens"] for s in shards), sum(s["seconds"] for s in shards)
        lines.append(f"| `{name.rsplit('/', 2)[-2]}/` | {made['kept']:,} / {made['sampled']:,} "
                     f"({made['seed']}) | {made['seconds']:,.0f} | "
                     f"{sum(s['answers'] for s in shards):,} | {tokens:,} | "
                     f"{seconds:,.0f} ({tokens / seconds:.0f}) |")
    return "\n".join(lines)


def chat_trial(dev_tau: str, dev_speed: str, rerun: str) -> str:
    """A trial drafter against the shipped one on the dev part: tau of the whole block
    (``dflash:8`` and ``dflash:8@TRIAL``) and the default decoding's speedup over the fastest
    plain (``dflash`` and ``dflash@TRIAL``), per suite, in a run and its rerun; each gain beside
    how far a method's own speedup moved between the two runs."""
    tau, runs = read(dev_tau), [read(dev_speed), read(rerun)]
    trial = next(m.partition("@")[2] for m in tau["methods"] if "@" in m)
    ours = ("dflash", f"dflash@{trial}")
    x = lambda run, suite, m: run["suites"][suite]["methods"][m]["speedup_vs_fastest_plain"]
    lines = [("| suite | tau, B = 8: shipped / trial | the default over the fastest plain: shipped / "
              "trial (tau), run and rerun |"), "|---|---|---|"]
    for suite, r in tau["suites"].items():
        t = r["methods"]
        both = "; ".join(" / ".join(f"{x(run, suite, m):.2f}x ({run['suites'][suite]['methods'][m]['tau']:.2f})"
                                    for m in ours) for run in runs)
        lines.append(f"| {suite} | {t['dflash:8']['tau']:.2f} / {t[f'dflash:8@{trial}']['tau']:.2f} | {both} |")
    gain = lambda suite: " and ".join(f"{x(run, suite, ours[1]) - x(run, suite, ours[0]):+.2f}x" for run in runs)
    spread = max(abs(x(runs[0], s, m) - x(runs[1], s, m)) for s in tau["suites"] for m in ours)
    chat = tau["suites"]["mtbench"]["methods"]
    return "\n".join(lines) + (
        f"\n\nFour times the chat raised MT-Bench's tau by {chat[f'dflash:8@{trial}']['tau'] - chat['dflash:8']['tau']:+.2f} "
        f"and the default's speedup there by {gain('mtbench')} (run, rerun; the other suites "
        + ", ".join(f"{s} {gain(s)}" for s in tau["suites"] if s != "mtbench")
        + f"), where a method's own speedup moved by up to {spread:.2f}x between the two runs: more "
          "chat of this kind moves MT-Bench little on a CPU without bf16 units, so run 15 was not "
          "shipped.")

"""The sentences of docs/results.md that state a measured number, rendered from the files they
quote (``prose.py`` holds the README's and the helpers: a range, a comparative, a machine).
Every comparative here (faster, slower, a tie, identical, every suite) is computed from the files.
"""

from __future__ import annotations

from .prose import NEAR_TIE, SUITES, code, gaps, identical, machine, method, span, suites, than
from .regions import read


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs)


def threads(t) -> str:
    """A thread count in words: "one thread", "two threads"."""
    return {1: "one thread", 2: "two threads"}.get(int(t), f"{t} threads")


def _gap(x: float) -> str:
    """A difference of two speedups, to two significant digits (0.055, 0.19)."""
    return f"{abs(x):.2g}"


def rerun(first: str, second: str, m: str = "dflash") -> str:
    """The one rerun there is: the same decodes timed twice, and the regime it was measured in."""
    a, b = method(first, m), method(second, m)
    same_tau = all(x["tau"] == y["tau"] for x, y in zip(a, b))
    mean = _mean(y["speedup"] for y in b) - _mean(x["speedup"] for x in a)
    gsm = b[0]["speedup"] - a[0]["speedup"]
    r = read(first)
    return (f"**How far apart two numbers must be.** Only one set of decodes was timed twice: "
            f"`{m}` in {'fp32' if r['dtype'] == 'float32' else r['dtype']} on the dev part at "
            f"{threads(r['threads'])} ({code(first)} against {code(second)}, "
            f"{'identical tau on every suite' if same_tau else 'tau not identical'}; on "
            f"{machine(r)}, load {r.get('load', 'not recorded')}; notebook 13, section 6). Its "
            f"speedups moved {_gap(mean)}x on the mean of the four SmolLM2 suites and {_gap(gsm)}x "
            f"on GSM8K. That is the spread of that regime only: no run in bf16, through the lean "
            f"pass or of the tiny target was timed twice, so this page calls no difference there a "
            f"tie or a win by it.")


def tiny_tree(one: str, two: str) -> str:
    """The tiny target's tree against the 3-layer chain, per suite at one and two threads."""
    tree, chain = "tree:16/n24/top4@data/drafter_3l", "dflash:16@data/drafter_3l"
    parts = []
    for name, label in ((one, "one thread"), (two, "two threads")):
        for s, r in suites(name).items():
            t, c = r["methods"][tree]["speedup"], r["methods"][chain]["speedup"]
            lead = "the tree" if t > c else "the chain"
            parts.append(f"{s} at {label} {t:.2f}x against {c:.2f}x ({lead} ahead by {_gap(t - c)}x)")
    return (f"The tree (`tree:16/n24/top4`) against the 3-layer chain (`dflash:16`, both "
            f"`data/drafter_3l`): {'; '.join(parts)}. These files were not timed twice, so whether "
            f"a gap is more than a rerun moves is not measured.")


def bf16_intro(bf16: str, fp32: str) -> str:
    """The bf16 section's opening: the drafter, and what a verify pass costs in each dtype."""
    b = [c["in_decode_steps"][15] for c in read(bf16)["threads"].values()]
    f = [c["in_decode_steps"][15] for c in read(fp32)["threads"].values()]
    return (f"SmolLM2-135M-Instruct and its drafter (`data/smollm2_drafter`, run 13: the fourteen "
            f"training runs and the twelve in its line are in [training_runs.md](training_runs.md), "
            f"their commands in [smollm2.md](smollm2.md)), up to 128 new tokens. On a CPU with bf16 "
            f"matrix units (AVX512-BF16, AMX) `load_target` runs it in **bf16** (these files' "
            f"commands name no `--dtype`: `auto` chose bf16, which it does only on such a CPU): a "
            f"verify pass over 16 tokens costs {span(b, unit='')} decode steps there, "
            f"{span(f, unit='')} in fp32 ({code(bf16, fp32)}; {machine(read(bf16))}).")


def bf16_default(dev: str) -> str:
    """How the bf16 default was chosen on the dev part, and why its node budget did not matter."""
    means = {m: _mean(r["speedup"] for r in method(dev, m)) for m in
             ("tree:8/n63/top8/cost", "tree:8/n31/top4/cost", "dflash:8/cost", "dflash")}
    verified = [r["verified_per_step"] for m in ("tree:8/n63/top8/cost", "tree:8/n31/top4/cost")
                for r in method(dev, m)]
    lead = means["tree:8/n63/top8/cost"] - means["tree:8/n31/top4/cost"]
    x = [f"{v:.2f}x" for v in means.values()]
    r = read(dev)
    return (f"**The default** (`speculative_generate` with the drafter's `decoding.json`; notebook "
            f"13) is a tree of drafts, `tree:8/n15/top8/cost`: the best paths over each slot's eight "
            f"likeliest tokens, as many nodes as pay on the measured bf16 curve, the drafter skipped "
            f"where none pays. It was chosen on the dev prompts in bf16 with the drafter before "
            f"({code(dev)}, at {threads(r['threads'])}, "
            f"{'beside another process' if r.get('load') == 'shared' else 'load ' + str(r.get('load'))}) "
            f"among `tree:8/n63/top8/cost` ({x[0]} on the mean of the four suites), "
            f"`tree:8/n31/top4/cost` ({x[1]}), the chain priced the same way ({x[2]}) and the old "
            f"top-2 default ({x[3]}). Top 8 {'led' if lead > 0 else 'trailed'} top 4 by "
            f"{_gap(lead)}x; no bf16 run was timed twice, so whether that is more than a rerun moves "
            f"is not measured, and top 8 is the one `decoding.json` names. Their node budgets did not "
            f"matter: the cost model prices a node only where the measured curve has an entry, and a "
            f"curve to 16 tokens caps a tree at 15 nodes, so `n63` and `n31` both ran as at most 15 "
            f"nodes ({span(verified, '{:.1f}', '')} drafts verified a step); `n15/top8`, what "
            f"`decoding.json` names, is that tree as it ran. A curve to more tokens would make them "
            f"differ.")


def new_kinds_intro(one: str, two: str) -> str:
    """Above the bf16 table: its plain is transformers' forward, which the lean pass outruns."""
    x = [s["methods"]["plain"]["tokens_per_s"] / s["methods"]["plain/nolean"]["tokens_per_s"]
         for n in (one, two) for s in suites(n).values()]
    return (f"On the 40 test prompts (11-50) of each suite, against plain bf16 decoding through "
            f"transformers' forward (these runs predate the lean pass, which makes that plain "
            f"{span(x)} {than(x)} in {code(one, two)}: the speedups over the lean plain are in the "
            f"README and under \"The step itself\" below); the last column is the whole block of 8 "
            f"verified every step, the drafter before the new kinds against the shipped one:")


def shared_one_thread(one: str, two: str) -> str:
    """Why the one-thread column's tokens per second do not compare: two processes side by side."""
    plain = {s: r["methods"]["plain"]["tokens_per_s"] for s, r in suites(one).items()}
    lo, hi = min(plain, key=plain.get), max(plain, key=plain.get)
    return (f"**The one-thread column came from two processes side by side** (GSM8K and MATH-500 "
            f"in one, HumanEval and MT-Bench in the other, both commands in the file; load "
            f"{read(one).get('load')}), so the machine's load changed under it: plain bf16 decoding "
            f"read {plain[lo]:.1f} tokens/s on {SUITES[lo]} and {plain[hi]:.1f} on {SUITES[hi]} "
            f"within the one file. Each of its speedups holds (plain and DFlash took turns prompt by "
            f"prompt under the same load); its tokens per second, and the step from one thread to "
            f"two, do not. The two-thread column ran {read(two).get('load')}.")


def new_kinds_tau(before: str, now: str, m: str = "dflash:8") -> str:
    """What the new kinds of answers bought and cost, in the whole block's tau."""
    b = {s: r["methods"][m]["tau"] for s, r in suites(before).items()}
    n = {s: r["methods"][m]["tau"] for s, r in suites(now).items()}
    up = [s for s in n if n[s] > b[s]]
    down = [s for s in n if n[s] <= b[s]]
    def names(ss):
        return " and ".join([", ".join(SUITES[s] for s in ss[:-1])] * (len(ss) > 1) + [SUITES[ss[-1]]])
    cost = f" and cost {names(down)} {span([b[s] - n[s] for s in down], unit='')}" if down else ""
    return (f"GSM8K without the three test prompts GSM-Symbolic's templates were made from (never "
            f"in training): notebook 11 prints its speedups. The drafter before read almost only "
            f"word problems; the new kinds bought {names(up)} {span([n[s] - b[s] for s in up], unit='')} "
            f"of tau{cost} (the whole block, one thread, {code(before, now)}; notebook 11). Tau has "
            f"no timing noise: the same decodes on the same machine give the same tau on every rerun.")


def bf16_partings(two: str, one: str, bf16_two: str, bf16_one: str) -> str:
    """Where bf16 answers part from plain bf16: near-ties, transformers' own generate, the fp32
    tie-break, and the time outside the two passes."""
    g = gaps((two, one))
    parted = [s["prompts"] - s["methods"]["generate/bf16"]["identical_count"]
              for s in suites(bf16_two).values()]
    n = next(iter(suites(bf16_two).values()))["prompts"]
    with_fp32, total = identical((bf16_one,), "dflash")
    without, _ = identical((bf16_one,), "dflash/argmax")
    change = ("does not change how many answers part" if with_fp32 == without else
              f"changes how many answers part by {abs(with_fp32 - without)}")
    rows = [s["methods"]["dflash"] for s in suites(bf16_two).values()]
    other = [r["other_ms_per_step"] for r in rows]
    share = [r["other_ms_per_step"] / (r["tpot_ms"] * r["tau"]) * 100 for r in rows]
    below = [(r["passes_only_speedup"] - r["speedup"]) / r["passes_only_speedup"] * 100 for r in rows]
    every = "Every" if max(g) < NEAR_TIE else "Not every"
    return (f"**Where bf16 answers part from plain bf16.** {every} answer that parts does so where "
            f"the two tokens are a near-tie (an fp32 gap below {NEAR_TIE}; {max(g):.2f} at most, "
            f"located by the bench): bf16 rounds a 16-token pass and a 1-token pass differently, "
            f"and transformers' own bf16 `generate` parts from our plain bf16 loop on {min(parted)} "
            f"to {max(parted)} of "
            f"{n} answers the same way ({code(bf16_two)}; notebook 13, section 8). Deciding bf16 ties "
            f"in fp32 {change} ({with_fp32} of {total} identical with it, {without} without, one "
            f"thread, {code(bf16_one)}): the hidden states' own rounding decides. Each step's time "
            f"outside the two passes was {span(other, '{:.1f}', ' ms')} at two threads "
            f"({span(share, '{:.0f}', '%')} of a step, {code(bf16_two)}): the measured speedup is "
            f"{span(below, '{:.0f}', '%')} below the speedup of the two passes alone.")


def fp32_identity(two: str, one: str) -> str:
    """fp32: what the tests assert (the tiny target) against what SmolLM2's answers show."""
    same, n = identical((two, one))
    over = [r["speedup"] for f in (two, one) for r in method(f, "dflash")]
    parts = [f"{SUITES[s]}, {threads(read(f)['threads'])}: the plain pass's two best logits "
             f"{abs(d['gap']):.0e} apart, {abs(d['gap_fp32']):.0e} in a fresh fp32 pass over the "
             f"same prefix" for f in (two, one) for s, r in suites(f).items()
             for d in r["methods"]["dflash"]["divergences"]]
    return (f"In **fp32** (`dtype=torch.float32`) the tests assert token identity with plain "
            f"decoding on the tiny target; SmolLM2 is not held to it: on its test prompts {same} of "
            f"{n} answers are identical, and where one parts ({'; '.join(parts)}) it is a float "
            f"near-tie, which a 16-token pass and a 1-token pass may round either way in fp32 as in "
            f"bf16. The same default, priced on the fp32 curve, pays less there ({span(over)} over "
            f"plain fp32, {code(two, one)}).")


def other_cpus(epyc: str, bf16: str, fp32_one: str, fp32_two: str) -> str:
    """The fp32 runs' machine: bf16 emulated, so a wide pass is dear and plain bf16 still wins."""
    e = [c["in_decode_steps"][15] for c in read(epyc)["threads"].values()]
    b = [c["in_decode_steps"][15] for c in read(bf16)["threads"].values()]
    step = {f: [s["methods"]["plain/bf16"]["speedup"] for s in suites(f).values()]
            for f in (fp32_one, fp32_two)}
    vs = [r["speedup_vs_fastest_plain"] for r in method(fp32_two, "dflash")]
    every = "on every suite" if max(vs) < 1 else f"on {sum(v < 1 for v in vs)} of {len(vs)} suites"
    return (f"**Other CPUs.** These fp32 runs were measured on another machine (each file's "
            f"`machine`), {machine(read(fp32_two))}, where `load_target` picks fp32 on its own: "
            f"there a bf16 pass over 16 tokens costs {e[0]:.1f} decode steps at one thread "
            f"and {e[1]:.1f} at two ({code(epyc)}, against {b[0]:.2f} and {b[1]:.2f} in "
            f"{code(bf16)}, on {machine(read(bf16))}), so speculation in bf16 would need a tau above "
            f"that to pay, while a plain bf16 step, which reads half the bytes, is still "
            f"{span(step[fp32_one])} {than(step[fp32_one])} than fp32's at one thread and "
            f"{span(step[fp32_two])} at two. So on that machine plain bf16 decoding beats the fp32 "
            f"default {every} at two threads. A timing holds on the machine its file names; the "
            f"verify curve (`python -m minidflash budget curve`) is what to measure first on another.")


def fp32_tree_choice(tree_dev: str, trust_dev: str) -> str:
    """When fp32 was the default: the top-2 tree against the chain, and the rerun of the chain."""
    tree = _mean(r["speedup"] for r in method(tree_dev, "tree:8/n15/top2/cost"))
    chain = _mean(r["speedup"] for r in method(tree_dev, "dflash"))
    again = _mean(r["speedup"] for r in method(trust_dev, "dflash"))
    margin, moved = tree - chain, again - chain
    verdict = ("the tree and the chain tie" if abs(margin) < abs(moved) else
               "the tree's margin is more than the chain moved")
    return (f"When fp32 was the default (run 12's drafter, the top-2 tree), it was chosen on the "
            f"dev prompts over one chain priced the same way: {tree:.2f}x against {chain:.2f}x on the "
            f"mean at two threads ({code(tree_dev)}), a margin of {_gap(margin)}x, "
            f"{'smaller' if abs(margin) < abs(moved) else 'larger'} than the {_gap(moved)}x by which "
            f"the chain itself moved between two dev runs of the same decodes ({chain:.2f}x there, "
            f"{again:.2f}x in {code(trust_dev)}): in that regime {verdict}.")


def fp32_short_pass(fp32: str, bf16: str) -> str:
    """A pass over 2 tokens in fp32 and in bf16, one thread."""
    f, b = (read(n)["threads"]["1"]["in_decode_steps"][1] for n in (fp32, bf16))
    return (f"In fp32 a pass over 2 tokens costs {f:.2f} decode steps at one thread ({code(fp32)}), "
            f"so a draft pays only where the drafter is sure of several tokens; in bf16 the same pass "
            f"costs {b:.2f} ({code(bf16)}).")


def exact_scope(*names: str) -> str:
    """Where exact mode's identity was measured (machines, dtypes, threads, suites) and what it
    found: every /exact answer against plain exact decoding's, every batch row against its
    prompt alone."""
    runs = [(n, read(n)) for n in names]
    machines = sorted({machine(r) for _, r in runs})
    scope = {}
    for n, r in runs:
        counts = r["threads"] if isinstance(r["threads"], list) else [r["threads"]]
        key = "fp32" if r["dtype"] == "float32" else "bf16"
        for t in counts:
            scope.setdefault(key, {}).setdefault(t, set()).update(r["suites"])
    where = "; ".join(f"{d} at {threads(t)} on "
                      + ", ".join(SUITES[s] for s in SUITES if s in ss)
                      for d, by in scope.items() for t, ss in sorted(by.items()))
    single = [(n, r) for n, r in runs if "batch_sizes" not in r]
    exact = sorted({m for _, r in single for s in r["suites"].values() for m in s["methods"]
                    if m.endswith("/exact") and m != "plain/exact"})
    same = all(x["identical"] for _, r in single for s in r["suites"].values()
               for m, x in s["methods"].items() if m.endswith("/exact"))
    batches = [(n, r) for n, r in runs if "batch_sizes" in r]
    rows = all(b["rows_as_batch_of_1"] for _, r in batches for s in r["suites"].values()
               for by in s.values() for k, b in by.items() if k != "1")
    sizes = sorted({int(k) for _, r in batches for s in r["suites"].values() for by in s.values()
                    for k in by if k != "1"})
    return (f"With `/exact` (notebook 14) every pass after the prefill has W rows and attention "
            f"adds its keys in fixed blocks in index order, so a token's logits are the same bits "
            f"whichever pass computes them; in these runs every pass had 16 rows (before W "
            f"followed the drafting). Where that was measured: {' and '.join(machines)}; "
            f"{where}; {' or '.join(sorted({str(r['n']) for _, r in runs}))} test prompts a suite. "
            f"{'Every' if same else 'Not every'} answer of {', '.join(f'`{m}`' for m in exact)} was "
            f"identical to plain exact decoding's ({code(*(n for n, _ in single))}); "
            f"{'so was' if rows else 'not so'} every row of batches of "
            f"{', '.join(map(str, sizes))} (plain decoding and a chain of 8) against its prompt's "
            f"answer alone ({code(*(n for n, _ in batches))}). Whether plain exact decoding at one "
            f"thread gives the same tokens as at two is not in these files, which keep no tokens.")


def exact_price(p1: str, p2: str, v1: str, v2: str) -> str:
    """Exact mode's price on GSM8K over two pairs of runs, and why it is a range."""
    runs = {n: suites(n)["gsm8k"]["methods"] for n in (p1, p2, v1, v2)}
    price = [r["plain"]["tokens_per_s"] / r["plain/exact"]["tokens_per_s"] for r in runs.values()]
    over = {m: [r[m]["speedup_same_dtype"] for r in runs.values()]
            for m in ("dflash/exact", "dflash:8/exact")}
    plain = {m: [r[m]["speedup_vs_fastest_plain"] for r in runs.values()] for m in over}
    faster = all(runs[n]["plain"]["tokens_per_s"] > runs[n]["plain/fp32"]["tokens_per_s"] for n in (v1, v2))
    default = [runs[n]["dflash"]["speedup"] for n in (p1, p2)]
    tps = [f"{runs[a]['plain']['tokens_per_s']:.1f} and {runs[b]['plain']['tokens_per_s']:.1f}"
           for a, b in ((p1, p2), (v1, v2))]
    return (f"The price on GSM8K in bf16, on {machine(read(p1))}, alone on the machine, over two "
            f"pairs of runs at one and two threads ({code(p1, p2)}; {code(v1, v2)}, with plain fp32 "
            f"beside plain bf16, plain bf16 {'' if faster else 'not '}the faster plain in both): "
            f"plain decoding ran {span(price)} slower in exact mode; over plain exact decoding the "
            f"default tree ran {span(over['dflash/exact'])} {than(over['dflash/exact'])} and "
            f"`dflash:8/exact` {span(over['dflash:8/exact'])} {than(over['dflash:8/exact'])}; "
            f"against plain decoding without exact mode the default tree ran at "
            f"{span(plain['dflash/exact'])} ({than(plain['dflash/exact'])}) and `dflash:8/exact` at "
            f"{span(plain['dflash:8/exact'])} ({than(plain['dflash:8/exact'])}). Without exact mode "
            f"the default ran {' and '.join(f'{x:.2f}x' for x in default)} faster than plain "
            f"decoding (the first pair). Plain bf16 read {tps[0]} tokens/s at one and two threads in "
            f"the first pair, {tps[1]} in the second: the machine's speed moved between the runs, "
            f"which is why the price is a range over both pairs.")


def lean_pass(split_bf16: str, split_fp32: str, one: str, fp32: str) -> str:
    """What the lean pass changes, what it keeps bit for bit, and where it parts."""
    a, b = (read(n)["split"] for n in (split_bf16, split_fp32))
    att = [a[p]["1"]["1"]["attention"] for p in ("torch", "lean")]
    wall = [b[p]["1"]["1"]["wall"] for p in ("torch", "lean")]
    per = [s["methods"]["plain/nolean"]["identical_count"] for s in suites(one).values()]
    n = next(iter(suites(one).values()))["prompts"]
    bf16_gap = max(abs(d["gap"]) for s in suites(one).values()
                   for d in s["methods"]["plain/nolean"]["divergences"])
    g = max(gaps((one,), "plain/nolean") + gaps((one,), "dflash"))
    parted = sum(s["prompts"] - s["methods"][m]["identical_count"] for s in suites(fp32).values()
                 for m in ("plain/nolean", "dflash"))
    total = sum(s["prompts"] for s in suites(fp32).values())
    lean32 = [s["methods"]["plain"]["tokens_per_s"] for s in suites(fp32).values()]
    lean16 = [s["methods"]["plain"]["tokens_per_s"] for s in suites(one).values()]
    slower = "the slower" if max(lean32) < min(lean16) else "not always the slower"
    return (f"The lean pass calls the same products differently and changes no weight: q, k, v and "
            f"gate, up as one matrix each, packed once in oneDNN's layout; the query heads that share "
            f"a key head stacked into one query (attention {att[0]:.1f} -> {att[1]:.1f} ms a token "
            f"at one thread, where torch's grouped kernel ran). In fp32 it keeps transformers' "
            f"products and attention and gains only the framework around them ({wall[0]:.1f} -> "
            f"{wall[1]:.1f} ms a token at one thread, {code(split_fp32)}). Its logits and hidden "
            f"states are transformers' bit for bit on every kind of pass (tests/test_lean.py) but for "
            f"the stacked query, which at some context lengths sums in another order: over whole "
            f"answers plain decoding through the two parts only where the two tokens' bf16 logits "
            f"are at most {bf16_gap:g} apart ({' / '.join(map(str, per))} of {n} answers identical "
            f"per suite at one thread; the largest fp32 gap at any parting, of plain decoding or of "
            f"the default, {g:.3f}). In fp32 "
            f"{'nothing parts' if parted == 0 else f'{parted} answers part'}: plain decoding through "
            f"transformers and the default give the lean plain decoding's tokens on "
            f"{total - parted if parted else 'all'} {total} test prompts of {code(fp32)} "
            f"({read(fp32)['n']} a suite, {threads(read(fp32)['threads'])}, `--dtype float32 "
            f"--methods plain/nolean plain dflash`). Plain fp32 through the lean pass, "
            f"{span(lean32, '{:.1f}', ' tokens/s')} there (load {read(fp32).get('load')}), is {slower} "
            f"plain decoding on this machine (plain bf16: {span(lean16, '{:.1f}', '')} at one thread "
            f"in the table below, load {read(one).get('load')}), so the fastest plain there is plain "
            f"bf16 through the lean pass.")


def lean_curves(bf16: str, fp32: str, dev: str) -> str:
    """The verify curves through the lean pass, and the tree default kept on them."""
    def point(c, count):
        t = c[count]
        return (t["verify_ms"][0], t["in_decode_steps"][7], t["in_decode_steps"][15],
                t["draft_ms"] / t["verify_ms"][0])
    b, f = read(bf16)["threads"], read(fp32)["threads"]
    one, two, f1 = point(b, "1"), point(b, "2"), point(f, "1")
    trees = ("tree:8/n7/top4/cost", "tree:8/n15/top8/cost", "tree:8/n31/top8/cost")
    means = {m: _mean(r["speedup"] for r in method(dev, m)) for m in trees}
    best_tau = all(s["methods"][trees[1]]["tau"] >= max(x["tau"] for x in s["methods"].values())
                   for s in suites(dev).values())
    same_tau = all(s["methods"][trees[1]]["tau"] == s["methods"][trees[2]]["tau"]
                   for s in suites(dev).values())
    r = read(dev)
    plain = {s: x["methods"]["plain"]["tokens_per_s"] for s, x in suites(dev).items()}
    slow = min(plain, key=plain.get)
    rest = [v for k, v in plain.items() if k != slow]
    return (f"The verify curve through the lean pass (`budget curve`, {code(bf16, fp32)}, both "
            f"written into the drafter's `decoding.json` as its cost model): in bf16 t(1) = "
            f"{one[0]:.1f} ms at one thread, t(8)/t(1) = {one[1]:.2f}, t(16)/t(1) = {one[2]:.2f}, a "
            f"draft {one[3]:.2f} of a step; at two threads {two[0]:.1f} ms, {two[1]:.2f}, "
            f"{two[2]:.2f}, {two[3]:.2f}. In fp32 {f1[0]:.1f} ms, {f1[1]:.2f}, {f1[2]:.2f} at one "
            f"thread. The tree default stayed n15/top8 on tau: on the dev part at "
            f"{threads(r['threads'])} ({code(dev)}) n15 had "
            f"{'the highest tau on every suite' if best_tau else 'not the highest tau on every suite'}"
            f" (n31/top8, the same tree under the 15-node cap of the curve, "
            f"{'the same tau' if same_tau else 'another tau'}). Its speedups rank nothing: the run had "
            f"load {r.get('load')}, and plain decoding read {plain[slow]:.1f} tokens/s on "
            f"{SUITES[slow]} against {span(rest, '{:.1f}', '')} on the other suites, so the mean "
            f"speedups ("
            + ", ".join(f"{m.split('/', 1)[1].rsplit('/', 1)[0]} {x:.2f}x" for m, x in means.items())
            + ") are not a measure of the trees.")


def lean_summary(one: str, two: str, split: str) -> str:
    """The lean pass's gain, the default over it, and how far both stay from llama.cpp."""
    def by(name, a, b):
        return [s["methods"][a]["tokens_per_s"] / s["methods"][b]["tokens_per_s"]
                for s in suites(name).values()]
    lean = [by(n, "plain", "plain/nolean") for n in (one, two)]
    dflash = [by(n, "dflash", "plain") for n in (one, two)]
    bf16 = [by(n, "dflash", "llamacpp-plain/bf16") for n in (one, two)]
    q41 = [by(n, "dflash", "llamacpp-plain/q4_1") for n in (one, two)]
    ms = [1000 / s["methods"]["llamacpp-plain/bf16"]["tokens_per_s"] for s in suites(one).values()]
    products = read(split)["split"]["lean"]["1"]["1"]["matmul"]
    gsm = [suites(n)["gsm8k"]["methods"] for n in (one, two)]
    fewer = all(r["dflash"]["tokens_per_s"] < r["llamacpp-plain/bf16"]["tokens_per_s"] for r in gsm)
    short = "falls short" if max(bf16[0] + bf16[1] + q41[0] + q41[1]) < 1 else "does not always fall short"
    return (f"The lean pass makes plain decoding {span(lean[0])} {than(lean[0])} at one thread and "
            f"{span(lean[1])} at two; over that plain decoding the default gains {span(dflash[0])} at "
            f"one thread and {span(dflash[1])} at two. Against llama.cpp it {short}: "
            f"{span(bf16[0])} of llama.cpp's bf16 speed and {span(q41[0])} of its Q4_1 speed at one "
            f"thread, {span(bf16[1])} and {span(q41[1])} at two. What separates them is the product "
            f"itself: llama.cpp's plain bf16 decoding spends {span(ms, '{:.1f}', ' ms')} a token at "
            f"one thread (a thousand over its tokens per second), the lean pass's products alone "
            f"{products:.1f} ms (the split above, {code(split)}), so even on GSM8K, where the default "
            f"commits {gsm[0]['dflash']['tau']:.2f} tokens a step at one thread "
            f"({gsm[1]['dflash']['tau']:.2f} at two), it decodes "
            f"{'fewer' if fewer else 'not always fewer'} tokens per second than llama.cpp's plain "
            f"decoding; in llama.cpp itself the drafter does not pay either (below).")


def llama_cpp_verdict(*names: str) -> str:
    """Speculation inside llama.cpp: every setting of every file against its own plain decoding."""
    x = [v["speedup"] for n in names for s in suites(n).values() for v in s["summary"]["n_max"].values()]
    types = [n for n in names if "type" in n]
    calls = [v["draft_ms"] for n in types for s in suites(n).values()
             for k, v in s["summary"]["n_max"].items() if k.split("/")[0] == "3"]
    below = "stays below" if max(x) < 1 else "does not stay below"
    return (f"In llama.cpp ({code(*names)}; machine not recorded) speculation with the shipped "
            f"drafter (its draft vocabulary carried as llama.cpp's `d2t`) {below} llama.cpp's own "
            f"plain speed in all {len(x)} settings measured (suites, block sizes, cuts, thread counts "
            f"and {len(types)} types of the target), at best {max(x):.2f}x: the drafter's call at "
            f"n-max 3 costs {span(calls, '{:.1f}', ' ms')} whatever the target's type, so the cheaper "
            f"the target's step, the dearer the draft. [llama_cpp.md](llama_cpp.md) is the dated "
            f"record of those runs, with the pass costs behind them (notebook 11).")

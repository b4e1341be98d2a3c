"""docs/results.md's section on a CPU without bf16 units, rendered from its files (``regions.py``
puts them on the page; tests/test_claims.py renders them again): the verify curve and the step
before and after the packed fp32 products, and the default against every plain decoding there.
"""

from __future__ import annotations

from .prose import SUITES, cpu_kind, identical, read, span, suites, than

FP32_DRAFTS = "dflash/noint8"     # the default with the drafter's products in fp32


def _steps(name: str, k: int) -> list[float]:
    """t(k)/t(1) of a curve file, per thread count."""
    return [c["in_decode_steps"][k - 1] for c in read(name)["threads"].values()]


def curves(before: str, after: str) -> str:
    """What a pass over 2 and over 16 tokens costs in one-token passes, before and after."""
    threads = " and ".join(read(after)["threads"])
    return (f"On {cpu_kind(read(after))}, in fp32, a target pass over 2 tokens cost "
            f"{span(_steps(before, 2), unit='')} one-token passes and one over 16 tokens "
            f"{span(_steps(before, 16), unit='')} with `F.linear`'s products "
            f"(`{before.split('/')[-1]}`); with the lean pass's (MKL-packed products, key heads "
            f"shared in SDPA's kernel) {span(_steps(after, 2), unit='')} and "
            f"{span(_steps(after, 16), unit='')} (`{after.split('/')[-1]}`), at {threads} "
            f"thread(s). A draft cost {span(_draft(before), unit='')} one-token passes before and "
            f"{span(_draft(after), unit='')} after (the drafter's products packed too).")


def rows_curves(mkl: str, rows: str) -> str:
    """What passes over 2, 4 and 8 tokens cost in one-token passes with MKL's products for more
    than one row and with row_product.py's kernel for 1..8 rows."""
    at = lambda name: ", ".join(span(_steps(name, k), unit="") for k in (2, 4, 8))
    threads = " and ".join(read(rows)["threads"])
    return (f"On {cpu_kind(read(rows))}, in fp32, passes over 2, 4 and 8 tokens cost {at(mkl)} "
            f"one-token passes with MKL's packed products (`{mkl.split('/')[-1]}`), and {at(rows)} "
            f"with the kernel's (`{rows.split('/')[-1]}`), at {threads} thread(s).")


def _draft(name: str) -> list[float]:
    """A drafter call in one-token passes, per thread count of a curve file."""
    return [c["draft_ms"] / c["verify_ms"][0] for c in read(name)["threads"].values()]


def profile(before: str, after: str) -> str:
    """The lean pass's split, before and after, as a table: a row per thread count and pass."""
    rows = ["| threads | tokens | wall ms, before / after | products ms | attention ms | the rest ms |",
            "|---|---|---|---|---|---|"]
    b, a = read(before)["split"]["lean"], read(after)["split"]["lean"]
    for t in a:
        for k in a[t]:
            x, y = b[t][k], a[t][k]
            rest = lambda s: s["wall"] - s["matmul"] - s["attention"]
            rows.append(f"| {t} | {k} | {x['wall']:.1f} / {y['wall']:.1f} | {x['matmul']:.1f} / "
                        f"{y['matmul']:.1f} | {x['attention']:.1f} / {y['attention']:.1f} | "
                        f"{rest(x):.1f} / {rest(y):.1f} |")
    return "\n".join(rows)


F_LINEAR = "with `F.linear`'s products and the drafter's shipped curves"
MKL = "with MKL's packed products for every pass of more than one token, as before row_product.py"


def rows_table(two: str, before: str, rerun: str | None = None) -> str:
    """``table`` after row_product.py's kernel, ``before`` the same command with MKL's products."""
    return table(two, before, rerun, before_is=MKL)


def table(two: str, before: str, rerun: str | None = None, before_is: str = F_LINEAR) -> str:
    """The default against plain decoding on that CPU, per suite: tau, the speedup over the
    fastest plain (of the lean pass, transformers' forward in our loop and transformers'
    ``generate``; and in the same command run again, ``rerun``) and over ``generate``, tokens per
    second, the default before (``F.linear``, the shipped curves) and answers identical to plain
    decoding; where the run has it, the default with its drafts in fp32 (``dflash/noint8``)."""
    s2, sb, run = suites(two), suites(before), read(two)
    fp32 = any(FP32_DRAFTS in x["methods"] for x in s2.values())
    rows = ["| suite | tau | over the fastest plain" + (", run again" if rerun else "")
            + (" | drafts in fp32: tau, over plain" if fp32 else "")
            + " | over `generate` | the fastest plain, tokens/s "
            "| the default, tokens/s | before: over plain | identical |",
            "|---" * (9 if fp32 else 8) + "|"]
    sr = suites(rerun) if rerun else {}
    again = lambda s, m="dflash": (f" / {sr[s]['methods'][m]['speedup_vs_fastest_plain']:.2f}x"
                                   if s in sr and m in sr[s]["methods"] else "")
    for s, label in SUITES.items():
        if s not in s2:
            continue
        x, m = s2[s], s2[s]["methods"]
        prior = (f"{sb[s]['methods']['dflash']['speedup_vs_fastest_plain']:.2f}x"
                 if s in sb else "-")
        rows.append(
            f"| {label} | {m['dflash']['tau']:.2f} | {m['dflash']['speedup_vs_fastest_plain']:.2f}x"
            f"{again(s)} "
            + (f"| {m[FP32_DRAFTS]['tau']:.2f}, {m[FP32_DRAFTS]['speedup_vs_fastest_plain']:.2f}x"
               f"{again(s, FP32_DRAFTS)} " if fp32 else "")
            + f"| {m['dflash']['tokens_per_s'] / m['generate']['tokens_per_s']:.2f}x | "
            f"{m[x['fastest_plain']]['tokens_per_s']:.1f} ({x['fastest_plain']}) | "
            f"{m['dflash']['tokens_per_s']:.1f} | {prior} | "
            f"{m['dflash']['identical_count']}/{x['prompts']} |")
    same, n = identical((two, rerun) if rerun else (two,))
    rows.append("")
    rows.append(f"{run.get('threads')} threads; "
                + (f"run again: the same command, `{rerun.split('/')[-1]}`; " if rerun else "")
                + (f"drafts in fp32: `{FP32_DRAFTS}` in the same run, the drafter's products "
                   f"packed in fp32 as before its int8 drafts; " if fp32 else "")
                + f"before: the same CPU and threads {before_is} (`{before.split('/')[-1]}`). "
                f"{same} of {n} answers identical to plain decoding's.")
    return "\n".join(rows)


def threads(one: str, two: str) -> str:
    """The default at one thread against two on that CPU: its speedup over the fastest plain at
    each, and what the second thread buys it, per suite."""
    s1, s2 = suites(one), suites(two)
    both = [s for s in SUITES if s in s1 and s in s2]
    sp = lambda by: [by[s]["methods"]["dflash"]["speedup_vs_fastest_plain"] for s in both]
    tps = lambda by: [by[s]["methods"]["dflash"]["tokens_per_s"] for s in both]
    gain = [b / a for a, b in zip(tps(s1), tps(s2))]
    same, n = identical((one,))
    return (f"At one thread (`{one.split('/')[-1]}`) the default ran at {span(sp(s1))} the "
            f"fastest plain decoding, {span(tps(s1), '{:.1f}', '')} tokens/s; at two, "
            f"{span(sp(s2))} and {span(tps(s2), '{:.1f}', '')} tokens/s: two threads "
            f"{than(gain)} than one, {span(gain)} its tokens/s. {same} of {n} answers at one "
            f"thread identical to plain decoding's.")


def dev_chat(name: str) -> str:
    """MT-Bench's dev prompts on that CPU: the default and the other drafting shapes of a file,
    their tau and their speedup over the fastest plain decoding."""
    ms = suites(name)["mtbench"]["methods"]
    others = [m for m in ms if m not in ("plain", "dflash")]
    return (f"On MT-Bench's dev prompts (`{name.split('/')[-1]}`) the default drafted at tau "
            f"{ms['dflash']['tau']:.2f}, {ms['dflash']['speedup_vs_fastest_plain']:.2f}x the "
            f"fastest plain decoding; " + ", ".join(
                f"`{m}` at tau {ms[m]['tau']:.2f}, {ms[m]['speedup_vs_fastest_plain']:.2f}x"
                for m in others) + ".")


def int8_drafts(name: str) -> str:
    """The default with int8 drafts against the same with fp32 drafts (``dflash/noint8``), one
    run: per suite tau, a draft's ms and the speedup over the fastest plain, each way."""
    rows = ["| suite | tau, fp32 / int8 drafts | a draft, ms | over the fastest plain |",
            "|---|---|---|---|"]
    by = suites(name)
    for s, label in SUITES.items():
        if s not in by:
            continue
        a, b = by[s]["methods"][FP32_DRAFTS], by[s]["methods"]["dflash"]
        rows.append(f"| {label} | {a['tau']:.2f} / {b['tau']:.2f} | {a['draft_ms_per_step']:.1f}"
                    f" / {b['draft_ms_per_step']:.1f} | {a['speedup_vs_fastest_plain']:.2f}x / "
                    f"{b['speedup_vs_fastest_plain']:.2f}x |")
    same, n = identical((name,))
    rows += ["", f"{cpu_kind(read(name))}, {read(name).get('threads')} threads, "
             f"`{name.split('/')[-1]}`; {same} of {n} answers with int8 drafts identical to "
             f"plain decoding's."]
    return "\n".join(rows)


def exact_held(name: str) -> str:
    """Exact mode on a CPU held to AVX2 (``exact.row_product``, ``exact.each_row``): its answers
    against plain exact decoding's at the same W, and both against plain decoding, per suite."""
    by, run = suites(name), read(name)
    methods = list(next(iter(by.values()))["methods"])
    exact = next(m for m in methods if m.startswith("dflash"))
    plain_exact = next(m for m in methods if m.startswith("plain/exact"))
    over = [s["methods"][plain_exact]["tpot_ms"] / s["methods"][exact]["tpot_ms"] for s in by.values()]
    price = [s["methods"][plain_exact]["speedup"] for s in by.values()]
    same, n = identical((name,), exact)
    return (f"On {cpu_kind(run)}, in {run['dtype']} at {run['threads']} threads "
            f"(`{name.split('/')[-1]}`, {run['n']} test prompts in each of {len(by)} suites): "
            f"{same} of {n} answers of `{exact}` identical to `{plain_exact}`'s, "
            f"{span(over)} its speed; plain exact decoding ran at {span(price)} the speed of "
            f"plain decoding.")


LLAMA = "llamacpp-plain/bf16"     # llama.cpp's plain decoding of the target in bf16


def llama_held(*names: str) -> str:
    """The default's tokens per second against llama.cpp's plain bf16 decoding in the same runs
    (``bench --methods ... llamacpp-plain/bf16``): per file its thread count, llama.cpp's tokens
    per second and the default's share of them over the suites; how many of llama.cpp's answers
    were this package's fp32 plain decoding's tokens."""
    parts, same, n = [], 0, 0
    for name in names:
        by = [s["methods"] for s in suites(name).values()]
        llama = [m[LLAMA]["tokens_per_s"] for m in by]
        share = [m["dflash"]["tokens_per_s"] / m[LLAMA]["tokens_per_s"] for m in by]
        same += sum(m[LLAMA]["identical_count"] for m in by)
        n += sum(s["prompts"] for s in suites(name).values())
        parts.append(f"{span(llama, '{:.1f}', '')} tokens/s at {read(name)['threads']} thread(s) "
                     f"(`{name.split('/')[-1]}`), the default {span(share)} of it")
    return (f"In the same runs llama.cpp decoded at " + "; ".join(parts) + f". {same} of {n} of "
            f"llama.cpp's answers were the tokens of this package's fp32 plain decoding (bf16 "
            f"rounds otherwise).")

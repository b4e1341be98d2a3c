"""docs/results.md's section on a CPU without bf16 units, rendered from its files (``regions.py``
puts them on the page; tests/test_claims.py renders them again): the verify curve and the step
before and after the packed fp32 products, and the default against every plain decoding there.
"""

from __future__ import annotations

from .prose import SUITES, cpu_kind, identical, read, span, suites


def _steps(name: str, k: int) -> list[float]:
    """t(k)/t(1) of a curve file, per thread count."""
    return [c["in_decode_steps"][k - 1] for c in read(name)["threads"].values()]


def curves(before: str, after: str) -> str:
    """What a pass over 2 and over 16 tokens costs in one-token passes, before and after."""
    threads = " and ".join(read(after)["threads"])
    return (f"On {cpu_kind(read(after))}, in fp32, a target pass over 2 tokens cost "
            f"{span(_steps(before, 2), unit='')} one-token passes and one over 16 tokens "
            f"{span(_steps(before, 16), unit='')} with `F.linear`'s products "
            f"(`{before.split('/')[-1]}`); with the lean pass's MKL-packed products "
            f"{span(_steps(after, 2), unit='')} and {span(_steps(after, 16), unit='')} "
            f"(`{after.split('/')[-1]}`), at {threads} thread(s).")


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


def table(two: str, one: str, before: str) -> str:
    """The default against plain decoding on that CPU, per suite, two / one thread(s): tau, the
    speedup over the fastest plain and over transformers' ``generate``, tokens per second, the
    default before (F.linear, the shipped curves) and answers identical to plain decoding."""
    rows = ["| suite | tau | over the fastest plain | over `generate` | plain, lean, tokens/s | "
            "the default, tokens/s | before: over plain | identical |",
            "|---|---|---|---|---|---|---|---|"]
    s2, s1, sb = suites(two), suites(one), suites(before)
    for s, label in SUITES.items():
        if s not in s2:
            continue
        m2, m1 = s2[s]["methods"], s1[s]["methods"]
        both = lambda f: f"{f(m2)} / {f(m1)}"
        over_gen = lambda m: f"{m['dflash']['tokens_per_s'] / m['generate']['tokens_per_s']:.2f}x"
        prior = (f"{sb[s]['methods']['dflash']['speedup_vs_fastest_plain']:.2f}x"
                 if s in sb else "-")
        rows.append(
            f"| {label} | {both(lambda m: format(m['dflash']['tau'], '.2f'))} | "
            f"{both(lambda m: format(m['dflash']['speedup_vs_fastest_plain'], '.2f') + 'x')} | "
            f"{both(over_gen)} | {both(lambda m: format(m['plain']['tokens_per_s'], '.1f'))} | "
            f"{both(lambda m: format(m['dflash']['tokens_per_s'], '.1f'))} | {prior} | "
            f"{m2['dflash']['identical_count']}/{s2[s]['prompts']} / "
            f"{m1['dflash']['identical_count']}/{s1[s]['prompts']} |")
    same, n = identical((two, one))
    rows.append("")
    rows.append(f"Two threads / one; before: the same CPU and two threads with `F.linear`'s "
                f"products and the drafter's shipped curves (`{before.split('/')[-1]}`). "
                f"{same} of {n} answers identical to plain decoding's.")
    return "\n".join(rows)

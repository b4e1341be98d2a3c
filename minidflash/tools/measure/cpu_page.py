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


def table(two: str, before: str) -> str:
    """The default against plain decoding on that CPU, per suite: tau, the speedup over the
    fastest plain (of the lean pass, transformers' forward in our loop and transformers'
    ``generate``) and over ``generate``, tokens per second, the default before (``F.linear``,
    the shipped curves) and answers identical to plain decoding."""
    rows = ["| suite | tau | over the fastest plain | over `generate` | the fastest plain, tokens/s "
            "| the default, tokens/s | before: over plain | identical |",
            "|---|---|---|---|---|---|---|---|"]
    s2, sb, run = suites(two), suites(before), read(two)
    for s, label in SUITES.items():
        if s not in s2:
            continue
        x, m = s2[s], s2[s]["methods"]
        prior = (f"{sb[s]['methods']['dflash']['speedup_vs_fastest_plain']:.2f}x"
                 if s in sb else "-")
        rows.append(
            f"| {label} | {m['dflash']['tau']:.2f} | {m['dflash']['speedup_vs_fastest_plain']:.2f}x "
            f"| {m['dflash']['tokens_per_s'] / m['generate']['tokens_per_s']:.2f}x | "
            f"{m[x['fastest_plain']]['tokens_per_s']:.1f} ({x['fastest_plain']}) | "
            f"{m['dflash']['tokens_per_s']:.1f} | {prior} | "
            f"{m['dflash']['identical_count']}/{x['prompts']} |")
    same, n = identical((two,))
    rows.append("")
    rows.append(f"{run.get('threads')} threads; before: the same CPU and threads with `F.linear`'s "
                f"products and the drafter's shipped curves (`{before.split('/')[-1]}`). "
                f"{same} of {n} answers identical to plain decoding's.")
    return "\n".join(rows)

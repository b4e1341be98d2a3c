"""The sentences of README.md and docs/results.md that state a measured number, rendered from
the results files they quote (``regions.py`` puts them on the page; tests/test_claims.py renders
them again). Each function takes results files by name and returns the words as the page holds
them: the numbers, the machine each file names, and every comparative the files decide (faster,
slower, identical, a range's ends) computed here, never typed.
"""

from __future__ import annotations

from .regions import read

NEAR_TIE = 0.5            # an fp32 logit gap below this at a parting: a near-tie (bench's check)
SUITES = {"gsm8k": "GSM8K", "math500": "MATH-500", "humaneval": "HumanEval", "mtbench": "MT-Bench"}


# --------------------------------------------------------------------------------------------
# Helpers: a range, a comparative, a machine, a count
# --------------------------------------------------------------------------------------------

def span(values, fmt: str = "{:.2f}", unit: str = "x") -> str:
    """The range of ``values`` as a page writes it: ``1.17-1.83x``, or one value if both ends
    print the same."""
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return f"{lo}{unit}" if lo == hi else f"{lo}-{hi}{unit}"


def than(values, up: str = "faster", down: str = "slower") -> str:
    """The comparative a set of ratios decides: ``up`` if every one is above 1, ``down`` if every
    one is below, else both ("slower or faster")."""
    return up if min(values) > 1 else down if max(values) < 1 else f"{down} or {up}"


def machine(results: dict) -> str:
    """A file's machine in words ("an AMD EPYC (2 cores, with bf16 units)"), or that the file
    does not record it."""
    m = results.get("machine")
    if not isinstance(m, dict):
        return "a machine its file does not record"
    cpu = m.get("cpu", "an unrecorded CPU").replace("(R)", "").replace(" Processor", "")
    units = {True: "with", False: "without"}.get(m.get("native_bf16"), "bf16 units not recorded:")
    return f"{'an' if cpu[0] in 'AEIOU' else 'a'} {cpu} ({m.get('cores', '?')} cores, {units} bf16 units)"


def suites(name: str) -> dict:
    return read(name)["suites"]


def method(name: str, m: str) -> list[dict]:
    """One method's results in every suite of a file."""
    return [s["methods"][m] for s in suites(name).values()]


def identical(names, m: str = "dflash") -> tuple[int, int]:
    """(answers identical to the file's reference, answers) of one method over files."""
    return (sum(r["identical_count"] for n in names for r in method(n, m)),
            sum(s["prompts"] for n in names for s in suites(n).values()))


def gaps(names, m: str = "dflash") -> list[float]:
    """The largest fp32 logit gap at a parting, per suite and file, where an answer parted."""
    return [r["max_fp32_gap"] for n in names for r in method(n, m) if r["max_fp32_gap"] is not None]


def ratio(name: str, a: str, b: str) -> list[float]:
    """Tokens per second of method ``a`` over method ``b``, per suite of a file."""
    return [s["methods"][a]["tokens_per_s"] / s["methods"][b]["tokens_per_s"]
            for s in suites(name).values()]


def near_ties(values) -> str:
    return "every parting a near-tie" if max(values) < NEAR_TIE else "not every parting a near-tie"


def code(*names: str) -> str:
    return ", ".join(f"`{n}`" for n in names)


# --------------------------------------------------------------------------------------------
# README.md
# --------------------------------------------------------------------------------------------

def headline(one: str, two: str) -> str:
    """The README's first claim: the default over the lean plain at one and two threads, on the
    machine the files name, and whether llama.cpp's plain decoding is faster still."""
    x = [r["speedup"] for n in (one, two) for r in method(n, "dflash")]
    llama = [s["methods"][e]["tokens_per_s"] / s["methods"]["dflash"]["tokens_per_s"]
             for n in (one, two) for s in suites(n).values()
             for e in ("llamacpp-plain/bf16", "llamacpp-plain/q4_1")]
    still = {"faster": "faster still", "slower": "slower", "slower or faster": "not faster everywhere"}
    return (f"**On {machine(read(one))}, DFlash decodes SmolLM2-135M-Instruct {span(x)} "
            f"{than(x)} than this package's fastest plain decoding (its lean pass), and llama.cpp's "
            f"plain decoding is {still[than(llama)]} ([Results](#results)).**")


def rounding(fp32_two: str, fp32_one: str, bf16_two: str, bf16_one: str) -> str:
    """How often SmolLM2's answers equal plain decoding's: fp32 and bf16 (the new-kinds runs)."""
    same, n = identical((fp32_two, fp32_one))
    b_same, b_n = identical((bf16_two, bf16_one))
    other = "the other parting" if n - same == 1 else f"the {n - same} others parting"
    return (f"A 16-token pass and a 1-token pass still round differently, so a near-tie may go the "
            f"other way: SmolLM2 in fp32 matched plain decoding on {same} of {n} test answers "
            f"({other} at an fp32 logit gap of at most {max(gaps((fp32_two, fp32_one))):.0e}), in "
            f"bf16 on {b_same} of {b_n} (notebook 13).")


def _exact_partner(methods: dict) -> str:
    """The plain exact method of a run: ``plain/exact:W``, the default's partner."""
    return next(m for m in methods if m.startswith("plain/exact"))


def exact_default(one: str, two: str, fp32: str) -> str:
    """The README's paragraph on exact mode: its own default (decoding.json's "exact") against
    plain exact decoding at the same W and against plain decoding, per suite of the test part at
    one and two threads, and the answers identical to plain exact decoding's, bf16 and fp32."""
    runs = [s["methods"] for n in (one, two) for s in suites(n).values()]
    partner = _exact_partner(runs[0])
    over_exact = [r["dflash/exact"]["tokens_per_s"] / r[partner]["tokens_per_s"] for r in runs]
    over_plain = [r["dflash/exact"]["tokens_per_s"] / r["plain"]["tokens_per_s"] for r in runs]
    gsm = [s["methods"] for n in (one, two) for k, s in suites(n).items() if k == "gsm8k"]
    gsm_plain = [r["dflash/exact"]["tokens_per_s"] / r["plain"]["tokens_per_s"] for r in gsm]
    same, n = identical((one, two), "dflash/exact")
    f_same, f_n = identical((fp32,), "dflash/exact")
    alone = {read(x).get("load") for x in (one, two)} == {"alone"}
    return (f"**Exact mode** (`exact=True`, `/exact`; notebook 14) gives every pass after the "
            f"prefill one shape, W rows, and sums attention in index order, so the output is "
            f"plain exact decoding's at the same W, bf16 too. Its default drafting was chosen on "
            f"the dev prompts with every pass priced at W rows (`budget exact`), W = "
            f"{partner.split(':')[-1]} here. On {machine(read(one))}, the test part of "
            f"{len(suites(one))} suites in bf16{', alone on the machine' if alone else ''}, "
            f"one and two threads: {span(over_exact)} the speed of plain exact decoding "
            f"(`{partner}`), {span(over_plain)} that of plain decoding without exact mode "
            f"({than(over_plain)}; GSM8K {span(gsm_plain)}); {same} of {n} answers identical to "
            f"plain exact decoding's, and {f_same} of {f_n} in fp32.")


def smollm2_intro(one: str, two: str) -> str:
    """The README's paragraph above the SmolLM2 table: the three plain decodings, and what the
    lean pass is against transformers' forward in bf16 (faster, and not bit-equal)."""
    x = ratio(one, "plain", "plain/nolean") + ratio(two, "plain", "plain/nolean")
    same, n = identical((one, two), "plain/nolean")
    return (f"**SmolLM2-135M-Instruct** in bf16 (`load_target`'s choice on a CPU with bf16 matrix "
            f"units), up to {read(one)['max_new_tokens']} new tokens: the default "
            f"(`speculative_generate` with `data/smollm2_drafter` and its `decoding.json`, a tree) "
            f"beside the three plain decodings, each prompt in turn: transformers' forward, the "
            f"lean pass (`minidflash/lean.py`: the same weights with less around them, {span(x)} "
            f"{than(x)}; its tokens equal transformers' on {same} of {n} answers, "
            f"{near_ties(gaps((one, two), 'plain/nolean'))}) and llama.cpp's (bf16, Q4_1); a "
            f"speedup is over this package's fastest, the lean pass:")


def readme_bullets(one: str, two: str) -> str:
    """The README's bullet under the SmolLM2 table: the default against llama.cpp's plain bf16."""
    llama = [s["methods"]["dflash"]["tokens_per_s"] / s["methods"]["llamacpp-plain/bf16"]["tokens_per_s"]
             for f in (one, two) for s in suites(f).values()]
    return (f"- **llama.cpp**: the default reaches {span(llama)} of llama.cpp's plain bf16 tokens "
            f"per second on the machine of the table ([docs/llama_cpp.md](docs/llama_cpp.md)).")


def cpu_kind(results: dict) -> str:
    """A file's CPU kind in a table's words: its model, bf16 units or not, and what held its
    kernels to an older instruction set (``target.HOLDS``), where something did."""
    m = results.get("machine") or {}
    cpu = m.get("cpu", "CPU not recorded").replace("(R)", "").replace(" Processor", "")
    if m.get("held_by"):
        return f"{cpu} held to {m.get('isa', '?')} (no bf16 units in use)"
    return f"{cpu}, " + {True: "bf16 units", False: "no bf16 units"}.get(m.get("native_bf16"), "?")


def cpu_kinds(*names: str) -> str:
    """The README's table of the default against the fastest plain decoding per CPU kind: one
    row a results file (each names its machine, dtype and threads), the speedup per suite."""
    head = ("| CPU | dtype | threads | " + " | ".join(SUITES.values())
            + " | the default, tokens/s |\n|---|---|---|" + "---|" * (len(SUITES) + 1))
    rows = []
    for n in names:
        r, by = read(n), suites(n)
        x = [f"{by[s]['methods']['dflash']['speedup_vs_fastest_plain']:.2f}x" if s in by else "-"
             for s in SUITES]
        tps = [by[s]["methods"]["dflash"]["tokens_per_s"] for s in SUITES if s in by]
        rows.append(f"| {cpu_kind(r)} | {r.get('dtype')} | {r.get('threads')} | "
                    + " | ".join(x) + f" | {span(tps, '{:.0f}', '')} |")
    return "\n".join([head, *rows])


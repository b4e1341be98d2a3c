"""The cost calculator: what a speculative step buys (tau) against what it costs (time).

Paper section 3 and notebook 00. Plain decoding emits one token per decode step of T_step; a
speculative step spends one draft and one verify pass and emits tau tokens on average, so

    speedup = tau * T_step / (T_draft + T_verify(B)),      break-even tau = (T_draft + T_verify) / T_step

The two factors have different owners. **tau is the drafter's**: how often the target agrees
with it, measured by decoding, the same on any hardware. **The costs are the hardware's**: the
same drafter costs a different share of a step on a 2-core CPU than on an H200. So the calculator
takes taus measured once and projects them onto cost *regimes*:

* ``measured_regime``: the per-step draft and verify times of ``bench --methods`` on this CPU;
* ``paper_gpu_regime``: a verify pass costs one decode step (a memory-bound 8B target, notebook
  00) and a drafter pass costs what the paper's figure 3 reports on an H200 for Qwen3-8B:
  an autoregressive 1-layer drafter about 7 / 12 / 25 ms for 4 / 8 / 16 tokens, a 5-layer DFlash
  drafter about 5-6 ms whatever the block.

Every regime carries its assumptions as sentences; ``report`` prints them above the table.
Method names are ``bench --methods``'s: ``plain``, ``dflash:B[@path]``, ``ar:k[@path]``.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

# The paper's figure 3 (H200, Qwen3-8B), read off the plot: ms per drafter call.
PAPER_AR_DRAFT_MS = {4: 7.0, 8: 12.0, 16: 25.0}       # 1-layer autoregressive drafter, k tokens
PAPER_DFLASH_DRAFT_MS = 5.5                            # 5-layer DFlash drafter, any block (5-6 ms)
# The paper's averages over its benchmarks (Qwen3-8B, temperature 0): (speedup, tau).
PAPER_DFLASH_AVERAGE = (4.86, 6.49)
PAPER_EAGLE3_AVERAGE = (1.76, 2.96)


def speedup(tau: float, draft_ms: float, verify_ms: float, step_ms: float) -> float:
    """tau tokens per step, for a draft + a verify, against one token per decode step."""
    return tau * step_ms / (draft_ms + verify_ms)


def break_even_tau(draft_ms: float, verify_ms: float, step_ms: float) -> float:
    """The tau at which speculation only matches plain decoding."""
    return (draft_ms + verify_ms) / step_ms


def kind_of(method: str) -> tuple[str, int]:
    """'dflash:16/p0.3@data/x' -> ('dflash', 16); 'ar:8' -> ('ar', 8); 'plain' -> ('plain', 1).
    A tree drafts with one DFlash pass: ('dflash', B)."""
    from .methods import parse

    m = parse(method)
    if m.kind not in ("plain", "dflash", "ar", "tree") or m.k is None:
        raise ValueError(f"the calculator takes plain, dflash:B[/pP], ar:k[/pP] or tree:B/nN/topK, "
                         f"not {method!r}")
    return ("dflash" if m.kind == "tree" else m.kind), m.k


@dataclass(frozen=True)
class Regime:
    """Per-step costs (ms) of one hardware setting: a decode step, and per method a draft and a
    verify pass. ``assumptions`` are printed with every projection."""
    name: str
    step_ms: float
    draft_ms: dict[str, float]
    verify_ms: dict[str, float]
    assumptions: tuple[str, ...] = field(default=())

    def project(self, method: str, tau: float) -> dict:
        d, v = self.draft_ms[method], self.verify_ms[method]
        return {"tau": tau, "draft_steps": d / self.step_ms, "verify_steps": v / self.step_ms,
                "break_even_tau": break_even_tau(d, v, self.step_ms),
                "speedup": speedup(tau, d, v, self.step_ms)}


def measured_regime(suite: dict, name: str = "this CPU, as measured") -> Regime:
    """The costs ``bench --methods`` measured: ``suite`` is one ``suites[...]`` entry of its JSON
    (per method ``draft_ms_per_step`` and ``verify_ms_per_step``; plain's verify is the step)."""
    methods = {m: s for m, s in suite["methods"].items() if s.get("verify_ms_per_step") is not None}
    step = methods["plain"]["verify_ms_per_step"]
    return Regime(name, step, {m: s["draft_ms_per_step"] for m, s in methods.items()},
                  {m: s["verify_ms_per_step"] for m, s in methods.items()},
                  (f"decode step {step:.1f} ms, the plain decoding of the same run",
                   "draft and verify ms per step as measured, method by method",
                   "the loop's own overhead (sampling, cache crops) left out: measured speedups "
                   "are a little lower"))


def ratio_regime(name: str, verify_steps: dict[int, float], draft_steps: dict[int, float],
                 assumptions=()) -> Regime:
    """A regime given in decode steps, for when only ratios are known (llama-bench's tokens/s, or
    timings on a machine too loaded for milliseconds to mean much): ``verify_steps[B]`` is a
    target pass over B tokens and ``draft_steps[B]`` a drafter call for a block of B, each
    divided by one decode step. Methods ``plain`` and ``dflash:B``; the step is 1 (unit)."""
    if set(draft_steps) != set(verify_steps):
        raise ValueError(f"give a draft and a verify cost for the same block sizes, got "
                         f"{sorted(draft_steps)} and {sorted(verify_steps)}")
    draft = {"plain": 0.0, **{f"dflash:{b}": float(d) for b, d in draft_steps.items()}}
    verify = {"plain": 1.0, **{f"dflash:{b}": float(v) for b, v in verify_steps.items()}}
    return Regime(name, 1.0, draft, verify, tuple(assumptions) + (
        "costs in decode steps (the step is the unit), as measured ratios",))


def paper_ar_draft_ms(k: int) -> float:
    """Figure 3's autoregressive draft cost for k tokens, linear between (and beyond) its points."""
    pts = sorted(PAPER_AR_DRAFT_MS.items())
    lo, hi = (pts[0], pts[1]) if k <= pts[1][0] else (pts[1], pts[2])
    return lo[1] + (k - lo[0]) * (hi[1] - lo[1]) / (hi[0] - lo[0])


def paper_step_ms() -> float:
    """The decode step implied by the paper's own DFlash average: 4.86x at tau 6.49 with a
    5.5 ms draft and a verify of one step, 4.86 = 6.49 T / (5.5 + T)."""
    s, tau = PAPER_DFLASH_AVERAGE
    return s * PAPER_DFLASH_DRAFT_MS / (tau - s)


def paper_gpu_regime(methods, step_ms: float | None = None) -> Regime:
    """Verify = one decode step; drafts as the paper's figure 3 (H200, Qwen3-8B)."""
    step = paper_step_ms() if step_ms is None else step_ms
    draft, verify = {}, {}
    for m in methods:
        kind, k = kind_of(m)
        draft[m] = (0.0 if kind == "plain" else PAPER_DFLASH_DRAFT_MS if kind == "dflash"
                    else paper_ar_draft_ms(k))
        verify[m] = step
    return Regime("H200 + Qwen3-8B, as the paper reports", step, draft, verify, (
        f"decode step {step:.1f} ms: implied by the paper's DFlash average "
        f"({PAPER_DFLASH_AVERAGE[0]}x at tau {PAPER_DFLASH_AVERAGE[1]} with a "
        f"{PAPER_DFLASH_DRAFT_MS} ms draft)",
        "a verify pass of up to 16 tokens costs one decode step (memory-bound, notebook 00)",
        "autoregressive drafts: figure 3's 7 / 12 / 25 ms for 4 / 8 / 16 tokens, linear between",
        f"every DFlash drafter charged figure 3's 5-layer cost, {PAPER_DFLASH_DRAFT_MS} ms "
        "(an upper bound for shallower ones)"))


def project(taus: dict[str, float], regime: Regime) -> dict[str, dict]:
    """Each method's tau (measured by decoding) under the regime's costs."""
    return {m: regime.project(m, tau) for m, tau in taus.items()}


def report(taus: dict[str, float], regime: Regime, measured: dict[str, float] | None = None) -> str:
    """The regime's assumptions, then per method: tau, draft and verify cost in decode steps,
    break-even tau and projected speedup (and the measured speedup beside it when given)."""
    lines = [f"{regime.name}:"] + [textwrap.fill(a, 96, initial_indent="  - ", subsequent_indent="    ")
                                   for a in regime.assumptions]
    w = max(len("method"), *map(len, taus)) + 1
    lines.append(f"  {'method':<{w}}{'tau':>6}{'draft':>8}{'verify':>8}{'break-even':>12}{'speedup':>9}"
                 + ("  measured" if measured else ""))
    for m, p in project(taus, regime).items():
        row = (f"  {m:<{w}}{p['tau']:>6.2f}{p['draft_steps']:>8.2f}{p['verify_steps']:>8.2f}"
               f"{p['break_even_tau']:>12.2f}{p['speedup']:>8.2f}x")
        lines.append(row + (f"  {measured[m]:>7.2f}x" if measured and m in measured else ""))
    lines.append("  (draft, verify: in decode steps; break-even: the tau that pays for both)")
    return "\n".join(lines)

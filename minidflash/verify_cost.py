"""How many drafted tokens a step should verify, from what a verify pass costs on this machine.

On a GPU a target pass over 16 tokens costs about one over 1, so the whole block is verified.
On a CPU it does not: t(k), the time of a pass over k tokens, grows with k (``python -m
minidflash budget curve`` measures it). With q_j the drafter's probability of its own token at
slot j, and the slots treated as independent, verifying d_1..d_m commits on average

    E(m) = 1 + q_1 + q_1 q_2 + ... + q_1 q_2 ... q_m            tokens (the 1: the target's own)

for a step that costs  draft + t(m + 1),  all in units of one plain decode step t(1). The step
verifies the m with the most expected tokens per unit of time (``best_count`` does the same for
a tree's nodes, tree.py: the sum runs over their paths' products of q, best first). Plain
decoding makes 1 token per unit; when no m beats that, drafting did not pay here, so the next
steps skip the drafter and are plain decode steps (m = 0, no draft), one step after the first
loss, then 2, 4, ... up to ``max_skip`` while the losses go on, back to drafting every step after
a step that pays.

The q_j are only as good as the drafter's calibration, which differs by kind of text (notebook
13's figure: under-confident on arithmetic, over-confident on chat). ``trust_weight`` > 0 corrects
them as the decode goes (``Trust``): the expected accepted drafts q_1 + q_1 q_2 + ... are scaled
by the running ratio of drafts accepted to drafts expected in the steps before.

Like the confidence cut, this reads the drafter's outputs, the clock and what earlier steps
committed, never the current step's target choices, so it changes how many tokens a step can
certify, not which ones: greedy output stays identical to plain decoding and sampling stays
exact. The curve is a property of the machine, the dtype and the thread count (a bf16 pass over
16 tokens costs fewer one-token passes than an fp32 one: data/results/verify_curve_*.json). A
drafter's ``decoding.json`` may carry curves measured where it ships, one per dtype and thread
count (``costs_from_dict``); a call uses the target's dtype and the thread count nearest torch's.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, replace
from numbers import Integral, Real

import torch

from .core.verifier import Draft


def finite_number(x) -> bool:
    """A real number (numpy's too), not a bool, neither NaN nor infinite: a cost, a weight. A NaN
    compares False with everything, so a check such as ``x < 0`` lets it through unless this
    asks first (a NaN draft cost made every step's rate NaN, and decoding almost plain)."""
    return isinstance(x, Real) and not isinstance(x, bool) and math.isfinite(x)


def whole_number(x) -> bool:
    """An integer (numpy's too), not a bool (True would read as 1)."""
    return isinstance(x, Integral) and not isinstance(x, bool)


def confident_prefix(q: torch.Tensor, p_min: float) -> torch.Tensor:
    """The confidence cut (llama.cpp's p-min): m per row, how many leading drafted slots the
    drafter gives probability >= p_min. q (N, k) -> (N,), 0..k."""
    return (q >= p_min).long().cumprod(1).sum(1)


@dataclass(frozen=True)
class VerifyCost:
    verify: tuple[float, ...]   # verify[k - 1] = t(k) / t(1): a pass over k tokens, k = 1, 2, ...
    draft: float                # one drafter pass, in plain decode steps
    max_skip: int = 8           # the most plain steps in a row after steps that did not pay
    trust_weight: float = 0.0   # weight of the newest step in ``Trust`` (0: q taken as it is)

    def __post_init__(self):
        v = self.verify
        if isinstance(v, list):                 # a list reads as the tuple it holds
            v = tuple(v)
        if (not isinstance(v, tuple) or len(v) < 2
                or not all(finite_number(x) and x > 0 for x in v)):
            bad = ("" if not isinstance(v, tuple) or len(v) < 2 else next(
                f" (verify[{i}] = {x!r}{'' if finite_number(x) else ': not a finite number'})"
                for i, x in enumerate(v) if not (finite_number(x) and x > 0)))
            raise ValueError(f"verify cost must be t(k)/t(1) for k = 1, 2, ... (at least two "
                             f"positive finite numbers), got {self.verify!r}{bad}; `python -m "
                             f"minidflash budget curve` measures it.")
        v = tuple(float(x) for x in v)          # numpy's numbers as Python's: JSON keeps them
        if abs(v[0] - 1) > 1e-6:
            raise ValueError(f"verify cost is in units of one plain step, so t(1)/t(1) = 1; got "
                             f"{v[0]!r} first. Divide the curve by its first entry.")
        if not finite_number(self.draft) or self.draft < 0:
            raise ValueError(f"draft cost must be a finite number >= 0 (a drafter pass in plain "
                             f"decode steps), got {self.draft!r}.")
        if not whole_number(self.max_skip) or self.max_skip < 0:
            raise ValueError(f"max_skip must be an integer >= 0, got {self.max_skip!r}.")
        if not finite_number(self.trust_weight) or not 0 <= self.trust_weight < 1:
            raise ValueError(f"trust_weight must be in [0, 1) (0: no correction), got "
                             f"{self.trust_weight!r}.")
        object.__setattr__(self, "verify", v)
        object.__setattr__(self, "draft", float(self.draft))
        object.__setattr__(self, "max_skip", int(self.max_skip))
        object.__setattr__(self, "trust_weight", float(self.trust_weight))

    @classmethod
    def from_dict(cls, d: dict) -> "VerifyCost":
        """{"verify": [...], "draft": x[, "max_skip": n, "trust_weight": w]} (decoding.json's
        "cost")."""
        if not isinstance(d, dict) or not {"verify", "draft"} <= set(d):
            raise ValueError(f"a verify cost is {{'verify': [t(k)/t(1) for k = 1..K], 'draft': "
                             f"drafter pass / t(1)}}, got {d!r}.")
        extra = set(d) - {"verify", "draft", "max_skip", "trust_weight", "measured"}
        if extra:
            raise ValueError(f"unknown keys {sorted(extra)} in a verify cost (verify, draft, "
                             f"max_skip, trust_weight, measured).")
        verify = d["verify"]
        if not isinstance(verify, (list, tuple)):
            raise ValueError(f"verify cost must be a list of t(k)/t(1), got {verify!r}.")
        return cls(tuple(verify), d["draft"], d.get("max_skip", 8), d.get("trust_weight", 0.0))

    def to_dict(self) -> dict:
        return {"verify": list(self.verify), "draft": self.draft, "max_skip": self.max_skip,
                **({"trust_weight": self.trust_weight} if self.trust_weight else {})}

    @staticmethod
    def expected_tokens(q: torch.Tensor) -> torch.Tensor:
        """E(0..k) for q (k,) the drafter's probabilities of d_1..d_k: (k + 1,)."""
        return torch.cat([q.new_ones(1), 1 + q.double().cumprod(0).cumsum(0)])

    def best_length(self, q: torch.Tensor, trust: float = 1.0) -> tuple[int, float]:
        """(m, rate): the m in 0..k verifying d_1..d_m with the most expected tokens per unit of
        time, and that rate counting the draft (plain decoding: 1.0). q (k,); ``trust`` scales
        the expected accepted drafts (``Trust.value``)."""
        return self.best_count(q.cpu().double().cumprod(0), trust)

    def best_count(self, p: torch.Tensor, trust: float = 1.0) -> tuple[int, float]:
        """(n, rate) as ``best_length``, for drafted tokens whose chances of being accepted are
        p (n,), non-increasing, every prefix verifiable on its own: a chain's q_1, q_1 q_2, ...,
        or a tree's nodes best first (a node's chance is its path's product, tree.py)."""
        k = min(p.shape[0], len(self.verify) - 1)
        got = torch.cat([p.new_zeros(1), p[:k].cpu().double().cumsum(0)])
        rate = (1 + trust * got) / (self.draft + torch.tensor(self.verify[:k + 1],
                                                              dtype=torch.float64))
        m = k - int(rate.flip(0).argmax())             # the longest of equal best rates
        return m, float(rate[m])

    def next_skip(self, rate: float, skip: int) -> int:
        """After a drafted step with expected rate ``rate``: how many plain steps follow (0 when
        it paid; 1, 2, 4, ... up to max_skip after each step in a row that did not)."""
        if rate >= 1.0:
            return 0
        return min(max(1, 2 * skip), self.max_skip)


class Trust:
    """How far the drafter's q can be taken at its word in this decode: a running ratio of drafts
    accepted to drafts expected, starting at 1. A drafted step checks slots 1..m (verified) and,
    when all m were accepted, slot m + 1 too (the target's own token shows whether d_(m+1) would
    have been); expected: q_1 + q_1 q_2 + ... over the same slots. Each step moves both running
    sums by weight w."""

    def __init__(self, weight: float):
        self.weight, self.got, self.meant = weight, 1.0, 1.0

    @property
    def value(self) -> float:
        return self.got / self.meant

    def update(self, q: torch.Tensor, m: int, accepted: int, block: torch.Tensor,
               choice: torch.Tensor) -> None:
        """After a drafted step: q (B-1,) the drafter's probabilities of d_1..d_(B-1), m of them
        verified and ``accepted`` accepted; block (B,) = [t, d_1..d_(B-1)] before the cut;
        choice (m+1,) the target's tokens at the verified positions."""
        expected = float(VerifyCost.expected_tokens(q[:m + 1])[-1]) - 1     # slots 1..m+1
        observed = accepted + int(accepted == m < q.shape[0]                 # d_(m+1) right too?
                                  and int(block[m + 1]) == int(choice[m]))
        w = self.weight
        self.got, self.meant = (1 - w) * self.got + w * observed, (1 - w) * self.meant + w * expected


def verify_lengths(q: torch.Tensor, cfg, trust: Trust | None = None):
    """m per row, how many leading drafts the target verifies: those before the cut (q < p_min),
    then as many of them as pay on the cost curve. q (N, k) -> (m (N,), the first row's expected
    tokens per unit of time, or None without a cost model). cfg: a resolved DecodingConfig."""
    m = (confident_prefix(q, cfg.p_min) if cfg.p_min > 0
         else torch.full((q.shape[0],), q.shape[1], dtype=torch.long, device=q.device))
    if not cfg.cost:
        return m, None
    picks = [cfg.cost.best_length(q[i, :int(m[i])], trust.value if trust else 1.0)
             for i in range(q.shape[0])]
    return torch.tensor([n for n, _ in picks], device=q.device), picks[0][1]


class Budgeted:
    """The confidence cut and the cost model, as a proposer around a chain's (the core's
    ``BlockProposer`` asked for q, or the AR drafter's): the drafter's block comes back whole and
    the target verifies only the m leading drafts that ``verify_lengths`` allows. In a batch each
    row has its own m (the pass as wide as the widest row, a row accepting at most its own) and
    the drafter is never skipped (the rows would disagree on when); one sequence skips it for
    ``next_skip`` steps after a draft that did not pay. ``learn`` feeds the trust after a step."""

    def __init__(self, inner, cfg, batch: bool = False):
        self.inner, self.cfg, self.batch = inner, cfg, batch
        self.trust = Trust(cfg.cost.trust_weight) if cfg.cost and cfg.cost.trust_weight and not batch else None
        self.skip = self.wait = 0
        self.last = None                 # (q, the uncut block) of this step's draft; None: skipped
        draft = getattr(inner.drafter, "draft", None)   # a chain drafter that can stop at a doubt
        self.kwargs = {"p_min": cfg.p_min} if draft and "p_min" in inspect.signature(draft).parameters else {}

    def __call__(self, state):
        if self.wait:                    # a plain step: t alone
            self.wait, self.last = self.wait - 1, None
            return Draft(state.token[:, None])
        draft = self.inner(state, **self.kwargs)
        m, rate = verify_lengths(draft.q, self.cfg, self.trust)
        if rate is not None and not self.batch:
            self.skip = self.wait = self.cfg.cost.next_skip(rate, self.skip)
        self.last = (draft.q, draft.ids)
        return Draft(draft.ids[:, :1 + int(m.max())], draft.q, m if self.batch else None)

    def learn(self, draft, outcome) -> None:
        """After a drafted step of one sequence: how its accepted drafts compare with q."""
        if self.trust and self.last:
            q, uncut = self.last
            self.trust.update(q[0], draft.ids.shape[1] - 1, len(outcome.kept[0]) - 1, uncut[0],
                              outcome.choices[0])


def at_rows(cost: VerifyCost, rows: int) -> VerifyCost:
    """Exact mode's prices (exact.py): every target pass after the prefill has W = ``rows`` rows,
    plain decoding's included, so a pass costs t(W) whatever it verifies. In units of that pass
    every verify length costs 1 (verifying fewer drafts saves nothing) and the drafter d / t(W):
    the model then verifies every draft, and skips the drafter only where drafting does not pay
    even so."""
    t_w = cost.verify[min(rows, len(cost.verify)) - 1]
    return replace(cost, verify=(1.0,) * len(cost.verify), draft=round(cost.draft / t_w, 3))


def costs_from_dict(d: dict) -> dict[tuple[str | None, int], VerifyCost]:
    """decoding.json's "cost" as {(dtype, threads): curve}: one curve ((None, 0): any dtype and
    thread count), {"by_threads": {"1": curve, "2": curve, ...}} (dtype None), or
    {"by_dtype": {"bfloat16": <either of those>, "float32": ...}}."""
    if isinstance(d, dict) and "by_dtype" in d:
        by = d["by_dtype"]
        if not isinstance(by, dict) or not by or not set(by) <= {"float32", "bfloat16", "float16"}:
            raise ValueError(f"by_dtype maps dtype names (float32, bfloat16, float16) to cost "
                             f"curves, e.g. {{'bfloat16': {{'by_threads': ...}}}}, got {by!r}.")
        return {(name, t): c for name, sub in by.items()
                for (_, t), c in costs_from_dict(sub).items()}
    if isinstance(d, dict) and "by_threads" in d:
        by = d["by_threads"]
        counts = lambda k: str(k).isascii() and str(k).isdigit() and int(k) > 0
        if not isinstance(by, dict) or not by or not all(counts(k) for k in by):
            raise ValueError(f"by_threads maps thread counts to cost curves, e.g. "
                             f"{{'1': {{...}}, '2': {{...}}}}, got {by!r}.")
        out = {}
        for k, v in by.items():
            try:
                out[None, int(k)] = VerifyCost.from_dict(v)
            except ValueError as e:
                raise ValueError(f"by_threads[{str(k)!r}]: {e}") from None
        return out
    return {(None, 0): VerifyCost.from_dict(d)}


def costs_to_dict(costs: dict[tuple[str | None, int], VerifyCost]) -> dict:
    """The inverse of ``costs_from_dict``. What that could not read back is refused: no curve,
    a thread count that is not a whole number >= 1 (0, "any", only alone), a dtype it does not
    name, something other than a VerifyCost."""
    if not isinstance(costs, dict) or not costs:
        raise ValueError(f"cost curves are {{(dtype, threads): VerifyCost}} with one curve at "
                         f"least, got {costs!r}.")
    for key, c in costs.items():
        if (not isinstance(key, tuple) or len(key) != 2
                or key[0] not in (None, "float32", "bfloat16", "float16")
                or not whole_number(key[1]) or key[1] < 0 or not isinstance(c, VerifyCost)):
            raise ValueError(f"cost curves are {{(dtype, threads): VerifyCost}}, dtype None, "
                             f"'float32', 'bfloat16' or 'float16' and threads an integer >= 1 "
                             f"(0: any, alone); got {key!r}: {c!r}.")
    def threads(group: dict) -> dict:
        if 0 in group and len(group) > 1:
            raise ValueError(f"a curve for any thread count (0) cannot sit beside curves for "
                             f"{sorted(t for t in group if t)} threads: give each its count.")
        if list(group) == [0]:
            return group[0].to_dict()
        return {"by_threads": {str(k): c.to_dict() for k, c in sorted(group.items())}}
    dtypes = {d for d, _ in costs}
    if None in dtypes and len(dtypes) > 1:
        raise ValueError("cost curves of a named dtype and of none cannot be kept together: "
                         "name the dtype of every curve.")
    groups = {d: {t: c for (dd, t), c in costs.items() if dd == d} for d in dtypes}
    if dtypes == {None}:
        return threads(groups[None])
    return {"by_dtype": {d: threads(g) for d, g in sorted(groups.items())}}


def for_threads(costs: dict[tuple[str | None, int], VerifyCost], threads: int | None = None,
                dtype=None, key: bool = False):
    """The curve measured in ``dtype`` (a torch dtype or its name; else a curve of no named
    dtype; dtype None: any) at the thread count nearest ``threads`` (torch's, by default).
    key: return its (dtype, threads) key instead. A dtype no curve was measured in is refused:
    another dtype's curve would price its verify passes wrongly."""
    threads = torch.get_num_threads() if threads is None else threads
    name = None if dtype is None else str(dtype).replace("torch.", "")
    keys = list(costs)
    if name is not None:
        keys = [k for k in costs if k[0] == name] or [k for k in costs if k[0] is None]
    if not keys:
        raise ValueError(f"the drafter's cost curves were measured in "
                         f"{sorted({k[0] for k in costs})}, not in {name}: measure one "
                         f"(`python -m minidflash budget curve --dtype {name}`, then `budget "
                         f"cost`), or decode with cost=False.")
    best = min(keys, key=lambda k: (abs(k[1] - threads), k[1]))
    return best if key else costs[best]
"""How a decode spends its verify passes, as one object: ``DecodingConfig``.

transformers keeps generation's options in a ``GenerationConfig``; ours are the few DFlash adds.
A drafter's ``decoding.json`` loads into one (``DecodingConfig.of(drafter)``: what a plain
``speculative_generate(target, drafter, ids, n)`` runs), a call overrides it field by field
(``speculative_generate(..., block_size=4)`` or ``config=DecodingConfig(...)``), and
``describe`` says what a step will do. The fields:

    block_size   B: slot 0 and B-1 drafted slots (None: the drafter's; 1: plain decoding)
    p_min        the confidence cut: verify the leading drafts with q >= p_min (0: all)
    cost         price each step's verify length on the measured curve (True: the drafter's, for
                 the target's dtype and torch's thread count; or a VerifyCost)
    tree         verify a tree {"node_budget": n, "top_k": k} instead of a chain (None: a chain)
    temperature  0: greedy; T > 0: the target samples (the drafter always drafts greedily)
    fp32_ties    a bf16 target's greedy near-ties decided in fp32 (decoding.greedy_choice)
    record_steps keep every step's drafts and the target's choices (a chain's)

No field switches another off: a tree is verified at any block size > 1 (its depth is B - 1),
the cut and recorded steps belong to a chain and ask for ``tree=None`` (an error says so), and
block size 1 is plain decoding, which drafts nothing, so a tree is dropped there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from .verify_cost import VerifyCost


def check_tree(tree) -> dict:
    """A tree setting as decoding.json holds it: {"node_budget": n >= 1, "top_k": k >= 1}."""
    if (not isinstance(tree, dict) or set(tree) != {"node_budget", "top_k"}
            or not all(type(v) is int and v >= 1 for v in tree.values())):
        raise ValueError(f'a default tree is {{"node_budget": n, "top_k": k}} with integers >= 1 '
                         f"(tree.py: the n best paths over the per-slot top-k), got {tree!r}.")
    return dict(tree)


@dataclass(frozen=True)
class DecodingConfig:
    block_size: int | None = None
    p_min: float = 0.0
    cost: bool | VerifyCost = False
    tree: dict | bool | None = None
    temperature: float = 0.0
    fp32_ties: bool = True
    record_steps: bool = False

    def __post_init__(self):
        b, p, t = self.block_size, self.p_min, self.temperature
        if b is not None and (type(b) is not int or b < 1):
            raise ValueError(f"block_size must be an integer >= 1 (1 is plain decoding) or None "
                             f"(the drafter's), got {b!r}.")
        if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0 <= p < 1:
            raise ValueError(f"p_min must be in [0, 1) (0 verifies every drafted token), got {p!r}.")
        if not isinstance(self.cost, (bool, VerifyCost)):
            raise ValueError(f"cost must be True (the drafter's measured curve), False (none) or "
                             f"a VerifyCost, got {self.cost!r}.")
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not 0 <= t < math.inf:
            raise ValueError(f"temperature must be a finite number >= 0 (0 is greedy), got {t!r}.")
        for name in ("fp32_ties", "record_steps"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}.")
        if self.tree is not None:                  # True: the drafter's, taken by resolve
            if self.tree is not True:
                object.__setattr__(self, "tree", check_tree(self.tree))
            if p or self.record_steps:
                raise ValueError("p_min and record_steps are a chain's: a tree has no cut and "
                                 "records no steps. Pass tree=False with them.")

    @classmethod
    def of(cls, drafter) -> "DecodingConfig":
        """What a drafter's files ask for (decoding.json: a cut, a cost curve, a tree); the
        defaults without a drafter or without the file."""
        if drafter is None:
            return cls(block_size=1)
        return cls(p_min=getattr(drafter, "p_min", 0.0),
                   cost=bool(getattr(drafter, "costs", None)), tree=getattr(drafter, "tree", None))

    def override(self, **given) -> "DecodingConfig":
        """This config with each given field that is not None replaced; tree=False drops the
        tree, tree=True takes the drafter's (``resolve``). Block size 1 drops the tree."""
        unknown = set(given) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"unknown decoding settings {sorted(unknown)}: the fields are "
                             f"{[f.name for f in fields(self)]}.")
        given = {k: v for k, v in given.items() if v is not None}
        if given.get("tree") is False:
            given["tree"] = None
        if given.get("block_size") == 1:
            given["tree"] = None                    # plain decoding drafts nothing
        return replace(self, **given)

    def resolve(self, drafter) -> "DecodingConfig":
        """block_size None -> the drafter's, tree=True -> the drafter's (an error if it has none)."""
        out = self
        if out.block_size is None:
            out = replace(out, block_size=drafter.block_size if drafter is not None else 1)
        if out.tree is True:
            tree = getattr(drafter, "tree", None)
            if not tree:
                raise ValueError("tree=True takes the drafter's default tree, and its "
                                 "decoding.json has none: pass {'node_budget': n, 'top_k': k}.")
            out = replace(out, tree=tree)
        if out.block_size == 1 and out.tree:
            out = replace(out, tree=None)
        return out

    def describe(self) -> str:
        """What one step does, in words."""
        B = self.block_size
        drafts = "a block of the drafter's size" if B is None else f"{B - 1} tokens"
        if B == 1:
            what = "plain decoding: one target pass a token, no drafter"
        elif self.tree:
            what = (f"draft {drafts}; verify a tree of up to {self.tree['node_budget']} nodes, "
                    f"the best paths over each slot's top {self.tree['top_k']}")
        else:
            what = f"draft {drafts}; verify them as a chain"
            if self.p_min:
                what += f" up to the first with q < {self.p_min}"
        if self.cost and self.block_size != 1:
            what += ("; keep as many drafts as pay on the measured verify curve, and skip the "
                     "drafter after steps where none pays")
        pick = ("greedy" + (" (bf16 near-ties decided in fp32)" if self.fp32_ties else "")
                if self.temperature == 0 else f"sampled at temperature {self.temperature}")
        return f"{what}; the target's choice {pick}."

"""How a decode runs, as one object: ``DecodingConfig`` (the front door's settings).

transformers keeps ``generate()``'s options in a ``GenerationConfig``: one object, loaded from a
file, overridden per call, printed. Ours holds the few DFlash adds, and the call's length and
stops. A drafter's ``decoding.json`` loads into one (``DecodingConfig.of(drafter)``: what a plain
``speculative_generate(target, drafter, ids)`` runs), a call overrides it field by field, once
(``prepare.prepare``), and ``describe`` says what a step will do. The fields:

    max_new_tokens  tokens to generate at most
    stop_token_ids  generation stops after the first of these (kept); an int or a list of ints
    block_size      B: slot 0 and B-1 drafted slots (None: the drafter's; 1: plain decoding)
    p_min           the confidence cut: verify the leading drafts with q >= p_min (0: all)
    cost            price each step's verify length on the measured curve (True: the drafter's,
                    for the target's dtype and torch's thread count; or a VerifyCost)
    trust           with cost: q corrected as the decode goes, with this weight (None: the
                    curve's own); it needs cost
    tree            verify a tree {"node_budget": n, "top_k": k} instead of a chain (None or
                    False: a chain; True: the drafter's tree)
    temperature     0: greedy; T >= MIN_TEMPERATURE: the target samples (the drafter always
                    drafts greedily)
    fp32_ties       a bf16 target's greedy near-ties decided in fp32 (decoding.greedy_choice)
    record_steps    keep every step's drafts and the target's choices (a chain's)
    lean            the target's passes through lean.py (packed weights, one loop over the
                    layers; the same numbers): None where the target supports it, else off
    draft_int8      in a lean decode, the drafter's products in int8 (lean_drafter.int8_product; a draft
                    is a proposal, so the output is the same): None where it would multiply
                    fp32 weights on a CPU without bf16 units (lean_drafter.int8_by_default)
    exact           exact mode (exact.py): every target pass after the prefill W rows and an
                    attention reduced in index order, so a token's logits are the same bits
                    whichever pass computes it: greedy output equals plain decoding's at the
                    same W. True: W from the drafting (a chain's block B, a tree's nodes and
                    root; EXACT_ROWS for plain decoding); an integer: W itself (``rows``)

Two rules hold between fields. A tree has no cut and records no steps, so a call that asks for
``p_min`` or ``record_steps`` over a drafter's default tree gets a chain (``describe`` says so);
only a config that names a tree *and* a cut is refused. ``trust`` corrects a cost model, so it
needs ``cost`` (a call that turns the cost off drops the trust with it). Block size 1 is plain
decoding, which drafts nothing: a tree is dropped there.

The text of a config (``str(config)``, ``DecodingConfig.parse``; decoding_text.py) is the bench's
method names and the results files' keys: ``plain``, ``dflash[:B]``, ``tree[:B]/nN/topK``, then
any of ``/pP`` (the cut), ``/cost``, ``/trustW``, ``/T0.7`` (temperature), ``/argmax`` (fp32_ties
off), ``/steps`` (record_steps), ``/nolean`` (``/lean`` asks for it where a target could refuse;
a config prints nothing for it on), ``/int8`` or ``/noint8`` (draft_int8), ``/exact`` or
``/exact:W``. The length and the stops belong
to the call and are not in the text.

Exact mode's W. Two decodes give the same tokens only at the same W, so a decode keeps one W
for every pass after the prefill, plain and speculative alike. ``exact=True`` takes it from the
drafting: a chain of block B pays B rows, a tree of n nodes n + 1 (its root), plain decoding
EXACT_ROWS; ``exact=W`` names it (``plain/exact:8`` is ``dflash:8/exact``'s partner), and a W
smaller than the drafting's passes is refused. ``rows`` is the W a config gets.
"""

from __future__ import annotations

import json
import weakref
from dataclasses import asdict, dataclass, fields, replace

import numpy as np
import torch

from . import decoding_text
from .verify_cost import VerifyCost, finite_number, whole_number

# The smallest temperature sampled: logits / T must stay finite in fp32 (3.4e38) for any logit a
# model gives (|logit| < 1e30 here), and 1e-4 is far below any temperature that samples usefully;
# a smaller T is refused with "use temperature=0" (greedy, the limit T -> 0).
MIN_TEMPERATURE = 1e-4
MAX_TREE_NODES = 128       # a verify pass over more nodes costs more than any path can repay
EXACT_ROWS = 16            # W of plain decoding in exact mode when none is named (the paper's B)
TEXT_FIELDS = ("block_size", "p_min", "cost", "trust", "tree", "temperature", "fp32_ties",
               "record_steps", "lean", "draft_int8", "exact")   # a method's text names these
FILE_FIELDS = ("block_size", "p_min", "cost", "trust", "tree", "temperature", "fp32_ties")


def _whole(v) -> bool:
    """An integer (numpy's too) that is not a bool (True is an int to isinstance, and would read
    as 1)."""
    return whole_number(v)


def _number(v) -> bool:
    """A finite real number (numpy's too), not a bool."""
    return finite_number(v)


def check_tree(tree) -> dict:
    """A tree setting as decoding.json holds it: {"node_budget": n, "top_k": k}, integers >= 1,
    n at most MAX_TREE_NODES."""
    if (not isinstance(tree, dict) or set(tree) != {"node_budget", "top_k"}
            or not all(_whole(v) and v >= 1 for v in tree.values())):
        raise ValueError(f'a tree is {{"node_budget": n, "top_k": k}} with integers >= 1 '
                         f"(tree.py: the n best paths over the per-slot top-k), and tree= also "
                         f"takes None or False (a chain) and True (the drafter's tree); got "
                         f"{tree!r}.")
    if tree["node_budget"] > MAX_TREE_NODES:
        raise ValueError(f"node_budget {tree['node_budget']} is over {MAX_TREE_NODES}: every node "
                         f"is paid for in the verify pass, and the measured curves (16 tokens) "
                         f"make a step pay for at most 15; use a budget of 15-63.")
    return {k: int(v) for k, v in tree.items()}


def as_stop_ids(stops) -> tuple[int, ...]:
    """stop_token_ids as a tuple of ints: an int, or a list, tuple or 1-D tensor of them."""
    if isinstance(stops, np.ndarray):            # numpy's array: as a tensor of the same ids
        if stops.ndim > 1 or stops.dtype.kind not in "iu":
            raise ValueError(f"stop_token_ids must be token ids: an int, or a list or 1-D integer "
                             f"tensor or array of them, got a numpy {stops.dtype} array of shape "
                             f"{tuple(stops.shape)}.")
        stops = stops.tolist()
    if isinstance(stops, torch.Tensor):
        if stops.dim() > 1 or stops.is_floating_point() or stops.dtype == torch.bool:
            raise ValueError(f"stop_token_ids must be token ids: an int, or a list or 1-D integer "
                             f"tensor of them, got a {stops.dtype} tensor of shape "
                             f"{tuple(stops.shape)}.")
        if stops.device.type == "meta":
            raise ValueError("stop_token_ids is a tensor on the meta device, which holds no "
                             "values: give the ids (a list, or a tensor on the CPU).")
        stops = stops.tolist()
    if stops is None:
        return ()
    if _whole(stops):
        stops = [stops]
    if not isinstance(stops, (list, tuple, set, frozenset)) or not all(
            _whole(t) and t >= 0 for t in stops):
        raise ValueError(f"stop_token_ids must be token ids >= 0: an int, or a list or 1-D "
                         f"tensor of them (e.g. minidflash.target.stop_ids(tokenizer)), got "
                         f"{stops!r}.")
    return tuple(int(t) for t in stops)


@dataclass(frozen=True)
class DecodingConfig:
    max_new_tokens: int = 256
    stop_token_ids: tuple[int, ...] = ()
    block_size: int | None = None
    p_min: float = 0.0
    cost: bool | VerifyCost = False
    trust: float | None = None
    tree: dict | bool | None = None
    temperature: float = 0.0
    fp32_ties: bool = True
    record_steps: bool = False
    lean: bool | None = None
    draft_int8: bool | None = None
    exact: bool | int = False

    def __post_init__(self):
        object.__setattr__(self, "stop_token_ids", as_stop_ids(self.stop_token_ids))
        if self.tree is False:                  # by identity: 1 and 1.0 equal True, and are no tree
            object.__setattr__(self, "tree", None)
        elif self.tree is not None and self.tree is not True:
            object.__setattr__(self, "tree", check_tree(self.tree))
        self.validate()
        for name, kind in (("max_new_tokens", int), ("block_size", int), ("p_min", float),
                           ("trust", float), ("temperature", float),
                           ("exact", bool if isinstance(self.exact, bool) else int)):
            value = getattr(self, name)         # numpy's numbers as Python's: JSON, str, ==
            if value is not None and type(value) is not kind:
                object.__setattr__(self, name, kind(value))

    def validate(self) -> None:
        """Every field checked on its own, and the one rule between fields."""
        b, n, p, t = self.block_size, self.max_new_tokens, self.p_min, self.temperature
        if not _whole(n) or n < 1:
            raise ValueError(f"max_new_tokens must be an integer >= 1, got {n!r}.")
        if b is not None and (not _whole(b) or b < 1):
            raise ValueError(f"block_size must be an integer >= 1 (1 is plain decoding) or None "
                             f"(the drafter's), got {b!r}.")
        if not _number(p) or not 0 <= p < 1:
            raise ValueError(f"p_min must be in [0, 1) (0 verifies every drafted token), got {p!r}.")
        if not isinstance(self.cost, (bool, VerifyCost)):
            raise ValueError(f"cost must be True (the drafter's measured curve), False (none) or "
                             f"a VerifyCost, got {self.cost!r}.")
        if self.trust is not None and (not _number(self.trust) or not 0 <= self.trust < 1):
            raise ValueError(f"trust must be a weight in [0, 1) (0: q as drafted) or None (the "
                             f"cost curve's own), got {self.trust!r}.")
        if self.trust is not None and self.cost is False:
            raise ValueError(f"trust={self.trust!r} corrects the cost model's q, and cost is off: "
                             f"trust needs cost (cost=True, /cost/trust{self.trust:g}, "
                             f"--cost --trust {self.trust:g}), or leave trust out.")
        if not _number(t) or t < 0:
            raise ValueError(f"temperature must be a finite number >= 0 (0 is greedy), got {t!r}.")
        if 0 < t < MIN_TEMPERATURE:
            raise ValueError(f"temperature {t!r} is below {MIN_TEMPERATURE:g}, where logits / T "
                             f"overflow: use temperature=0 for greedy (the limit as T -> 0).")
        for name in ("fp32_ties", "record_steps"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}.")
        if not (isinstance(self.exact, bool) or _whole(self.exact) and self.exact >= 1):
            raise ValueError(f"exact must be False, True (W from the drafting) or W, the rows of "
                             f"every pass (an integer >= 1), got {self.exact!r}.")
        if not (self.lean is None or isinstance(self.lean, bool)):
            raise ValueError(f"lean must be True, False or None (where the target supports it), "
                             f"got {self.lean!r}.")
        if not (self.draft_int8 is None or isinstance(self.draft_int8, bool)):
            raise ValueError(f"draft_int8 must be True, False or None (int8 drafts where the "
                             f"drafter would multiply fp32 on a CPU without bf16 units), got "
                             f"{self.draft_int8!r}.")
        if self.tree is not None and (p or self.record_steps):
            which = f"p_min={p!r}" if p else "record_steps=True"
            raise ValueError(f"{which} with tree={self.tree!r}: p_min and record_steps are a "
                             f"chain's: a tree has no cut and records no steps. Pass tree=False "
                             f"with them (a drafter's default tree gives way to them by itself).")
        need, what = self.drafting() or (1, "")
        if self.exact is not True and self.exact and self.exact < need:
            raise ValueError(f"exact mode on W = {self.exact} rows a pass: {what} takes {need}; "
                             f"use exact={need} or more (/exact:{need}), or exact=True (W from "
                             f"the drafting).")

    def __eq__(self, other) -> bool:        # exact=True (W from the drafting) is not exact=1
        return (type(other) is type(self) and type(self.exact) is type(other.exact)
                and all(getattr(self, f.name) == getattr(other, f.name) for f in fields(self)))

    def drafting(self) -> tuple[int, str] | None:
        """(rows, in words) of a verify pass of this drafting: a chain's block, a tree's nodes
        and root, plain decoding's token; None while the block or tree is the drafter's."""
        B, tree = self.block_size, self.tree
        if B == 1:
            return 1, "plain decoding's token"
        if isinstance(tree, dict):
            return tree["node_budget"] + 1, f"a tree of {tree['node_budget']} nodes and its root"
        return None if B is None or tree is True else (B, f"the chain's block of {B}")

    @property
    def rows(self) -> int | None:
        """W: the rows of every target pass after the prefill in exact mode, else 0 (each pass
        its own). The W named, or the drafting's (``drafting``; plain decoding: EXACT_ROWS); None
        while the drafter decides it (``resolve`` first)."""
        if self.exact is not True:
            return int(self.exact)
        need = self.drafting()
        return None if need is None else EXACT_ROWS if self.block_size == 1 else need[0]

    # -- where a config comes from ------------------------------------------------------------
    @classmethod
    def of(cls, drafter, **given) -> "DecodingConfig":
        """What a drafter's files ask for (its decoding.json, which load_drafter keeps for it:
        ``decoding_of``); the defaults without one; plain decoding without a drafter. Where
        ``given`` (a call's fields) asks for exact mode and names no block size or tree: with
        the drafting the file chose for exact mode (its "exact", ``exact_of_file``), if any."""
        base, drafting = decoding_of(drafter)[0], exact_default_of(drafter)
        if not given.get("exact") or drafting is None or {"block_size", "tree"} & set(given):
            return base
        tree = drafting.get("tree")
        return replace(base, block_size=drafting.get("block_size", base.block_size), tree=tree,
                       p_min=0.0 if tree else base.p_min)

    def override(self, **given) -> "DecodingConfig":
        """This config with each given field replaced (None: keep it). tree=False drops the tree;
        p_min > 0 or record_steps over a tree this call did not name selects a chain."""
        names = [f.name for f in fields(self)]
        unknown = set(given) - set(names)
        if unknown:
            raise ValueError(f"unknown decoding settings {sorted(unknown)}: the fields are {names}.")
        given = {k: v for k, v in given.items() if v is not None}
        if given.get("cost") is False and "trust" not in given:
            given["trust"] = None                   # no cost: nothing for a trust to correct
        if "tree" not in given and (given.get("p_min") or given.get("record_steps")):
            given["tree"] = None                    # a chain's settings: the call wants a chain
        if given.get("block_size") == 1:
            given["tree"] = None                    # plain decoding drafts nothing
        return replace(self, **given)

    def resolve(self, drafter, batch: bool = False) -> "DecodingConfig":
        """block_size None -> the drafter's, tree=True -> the drafter's (an error if it has none);
        a batch verifies chains."""
        out = self
        if out.block_size is None:
            out = replace(out, block_size=drafter.block_size if drafter is not None else 1)
        if out.tree is True:
            tree = getattr(DecodingConfig.of(drafter), "tree", None)
            if not isinstance(tree, dict):
                raise ValueError("tree=True takes the drafter's default tree, and its "
                                 "decoding.json has none: pass {'node_budget': n, 'top_k': k}.")
            out = replace(out, tree=tree)
        if out.tree and (out.block_size == 1 or batch):
            out = replace(out, tree=None)
        return out

    # -- the text: bench methods, results files (decoding_text.py) ------------------------------
    def __str__(self) -> str:
        return decoding_text.text_of(self)

    @classmethod
    def parse(cls, text: str, **call) -> "DecodingConfig":
        """``str(config)`` back into a config: 'dflash:16/p0.3' -> block_size 16, p_min 0.3.
        ``call``: fields over the text's: those it does not name are applied (max_new_tokens,
        stop_token_ids, a block size for 'dflash'), one it names with another value is an error,
        and so is an option named twice (``decoding_text.parse``)."""
        return decoding_text.parse(cls, text, **call)

    # -- decoding.json -------------------------------------------------------------------------
    def to_file(self, costs: dict | None = None, exact: dict | None = None) -> dict:
        """What decoding.json holds: the fields that differ from the defaults, the tree, and the
        drafter's cost curves under "cost" (verify_cost.costs_to_dict) when ``cost`` is on. A
        field the file does not hold (FILE_FIELDS lists what it does) set away from its default
        is refused by name, never dropped: a call's length and stops, exact, lean and
        record_steps are the call's to give."""
        from .verify_cost import costs_to_dict
        default, out = DecodingConfig(), {}
        dropped = [f"{x.name}={getattr(self, x.name)!r}" for x in fields(self)
                   if x.name not in FILE_FIELDS and getattr(self, x.name) != getattr(default, x.name)]
        if dropped:
            raise ValueError(f"decoding.json does not hold {', '.join(dropped)}: it keeps a "
                             f"drafter's defaults ({', '.join(FILE_FIELDS)}); give "
                             f"{', '.join(d.split('=')[0] for d in dropped)} to each call "
                             f"(speculative_generate(..., {dropped[0]})), and write the config "
                             f"without.")
        if isinstance(self.cost, VerifyCost):   # one curve: for any dtype and thread count
            if costs:
                raise ValueError(f"cost={self.cost!r} and costs={costs!r} both name the curves: "
                                 f"give cost=True with costs, or the one VerifyCost alone.")
            costs = {(None, 0): self.cost}
        elif costs and not self.cost:
            raise ValueError(f"costs={costs!r} with cost=False: decoding.json would drop them; "
                             f"give cost=True to write them, or no costs.")
        if self.tree is True:
            raise ValueError("tree=True names the drafter's default tree, which decoding.json is "
                             "where it is kept: write the tree itself, {'node_budget': n, "
                             "'top_k': k}, or tree=None for a chain.")
        for name in FILE_FIELDS:
            value = getattr(self, name)
            if name != "cost" and value != getattr(default, name):
                out[name] = value
        if self.cost:
            if not costs:
                raise ValueError("cost=True names the drafter's curves: give them (costs=...).")
            out["cost"] = costs_to_dict(costs)
        if exact:
            out["exact"] = exact_of_file({"exact": exact}, "the exact default given")
        try:                                    # what is written loads back, or is not written
            back = type(self).from_file(json.loads(json.dumps(out, allow_nan=False)))
        except (ValueError, TypeError) as e:
            raise ValueError(f"decoding.json would hold {out!r}, which does not load back: "
                             f"{e}") from None
        assert back[0] == replace(self, cost=bool(self.cost)), (back, self)
        return out

    @classmethod
    def from_file(cls, data, where: str = "decoding.json") -> tuple["DecodingConfig", dict | None]:
        """decoding.json's content (a dict) -> (config, the cost curves or None). Errors name
        ``where`` and say what the file may hold."""
        from .verify_cost import costs_from_dict
        if not isinstance(data, dict):
            raise ValueError(f"{where} must hold a JSON object such as {{\"p_min\": 0.3}} or "
                             f"{{\"tree\": {{\"node_budget\": 15, \"top_k\": 8}}}}, got a "
                             f"{type(data).__name__}. Delete the file for the defaults.")
        unknown = set(data) - set(FILE_FIELDS) - {"exact"}
        exact_of_file(data, where)                  # checked here, read by exact_of_file
        if data.get("tree", None) is True or data.get("tree", None) is False:
            raise ValueError(f'{where}: "tree": {str(data["tree"]).lower()} names no tree; the file '
                             f'holds the drafter\'s tree itself, {{"node_budget": n, "top_k": k}} '
                             f"(e.g. 15 and 8), or no \"tree\" key for a chain.")
        if unknown:
            raise ValueError(f"{where}: unknown keys {sorted(unknown)}; it may hold "
                             f"{list(FILE_FIELDS)}.")
        try:
            costs = costs_from_dict(data["cost"]) if "cost" in data else None
            config = cls(**{k: v for k, v in data.items() if k not in ("cost", "exact")},
                         cost=costs is not None)
        except (ValueError, TypeError, KeyError) as e:
            raise ValueError(f"{where}: {e}") from e
        return config, costs

    def as_dict(self) -> dict:
        """Every field as JSON can hold it (a VerifyCost as its dict): for results files."""
        out = asdict(self)
        out["cost"] = self.cost.to_dict() if isinstance(self.cost, VerifyCost) else self.cost
        out["stop_token_ids"] = list(self.stop_token_ids)
        return out

    # -- in words ------------------------------------------------------------------------------
    def describe(self, target=None, drafter=None, batch: bool = False) -> str:
        """What one step does, in words; with the target and drafter, what this call runs:
        their block size and tree, the cost curve it prices on, whether ties are decided
        (``decoding_text.words_of``)."""
        shipped = decoding_of(drafter)[1] if drafter is not None else None
        return decoding_text.words_of(self, target, drafter, batch, shipped)


# -- a drafter's decoding.json, kept beside it: the model (core.drafter) holds no settings -------
_DECODING = weakref.WeakKeyDictionary()     # drafter -> (DecodingConfig, cost curves or None)


def decoding_of(drafter) -> tuple[DecodingConfig, dict | None]:
    """A drafter's decoding settings and cost curves (``verify_cost.costs_from_dict``'s
    {(dtype, threads): VerifyCost}): what its decoding.json held when load_drafter read it, or
    what ``set_decoding`` gave it; (DecodingConfig(), None) for a drafter without, and plain
    decoding (block_size 1) for None."""
    if drafter is None:
        return DecodingConfig(block_size=1), None
    return _DECODING.get(drafter) or (DecodingConfig(), None)


_EXACT = weakref.WeakKeyDictionary()        # drafter -> exact mode's default drafting
EXACT_KEYS = ("block_size", "tree")


def exact_of_file(data: dict, where: str = "decoding.json") -> dict | None:
    """decoding.json's "exact": the drafting exact mode takes when a call names none, chosen on
    dev prompts with every pass priced at W rows (``budget exact``): {"block_size": B} for a
    chain, or {"tree": {"node_budget": n, "top_k": k}} (with a block size, or the drafter's).
    None where the file has none (exact mode then drafts as the file's other settings say)."""
    if "exact" not in data:
        return None
    d = data["exact"]
    if not isinstance(d, dict) or not d or set(d) - set(EXACT_KEYS):
        raise ValueError(f'{where}: "exact" is {d!r}; it names exact mode\'s default drafting, '
                         f'{{"block_size": 8}} or {{"tree": {{"node_budget": 7, "top_k": 8}}}}.')
    try:
        DecodingConfig(block_size=d.get("block_size"), tree=d.get("tree"), exact=True)
        out = dict(d)
        if "tree" in out:
            out["tree"] = check_tree(out["tree"])
    except (ValueError, TypeError) as e:
        raise ValueError(f'{where}: "exact": {e}') from None
    return out


def exact_default_of(drafter) -> dict | None:
    """The drafter's exact-mode drafting (its decoding.json's "exact"), or None."""
    return None if drafter is None else _EXACT.get(drafter)


def set_exact_default(drafter, drafting: dict | None) -> None:
    """Give a drafter its exact-mode drafting ({"block_size": B} or {"tree": {...}}; None: none),
    what ``checkpoints.save_drafter`` writes as decoding.json's "exact"."""
    drafting = exact_of_file({"exact": drafting}) if drafting else None
    if drafting is None:
        _EXACT.pop(drafter, None)
    else:
        _EXACT[drafter] = drafting


def set_decoding(drafter, config: DecodingConfig | None = None, costs: dict | None = None) -> None:
    """Give a drafter its decoding settings and cost curves (what ``checkpoints.save_drafter``
    writes to decoding.json, and ``DecodingConfig.of`` reads); None and no curves: the defaults.
    Kept while the drafter lives, not on it: a copy of the module has none of its own."""
    if config is not None and not isinstance(config, DecodingConfig):
        raise TypeError(f"set_decoding takes a DecodingConfig, got {type(config).__name__}.")
    if config is None and not costs:
        _DECODING.pop(drafter, None)
    else:
        _DECODING[drafter] = (config or DecodingConfig(), costs or None)

"""A ``DecodingConfig`` as text, and back: the bench's method names and the results files' keys;
and in words (``words_of``: ``describe``).

    plain | dflash[:B] | tree[:B]/nN/topK      the drafting: plain decoding, a chain, a tree
    /pP                                        the confidence cut
    /cost, /trustW                             the cost model, and its trust
    /T0.7                                      the temperature
    /argmax                                    fp32_ties off
    /steps                                     record_steps
    /nolean, /lean                             the lean pass off, or asked for where a target
                                               could refuse (a config prints nothing for it on)
    /int8, /noint8                             draft_int8 on or off (unsaid: where it pays)
    /exact, /exact:W                           exact mode: W from the drafting, or W rows

``text_of(config)`` is ``str(config)``; ``parse(DecodingConfig, text)`` is
``DecodingConfig.parse``, and the two round-trip. The length and the stops belong to the call and
are not in the text. This module knows the config only through the class it is given.
"""

from __future__ import annotations

from dataclasses import fields

import torch

from . import lean, lean_drafter, prices
from .verify_cost import VerifyCost, for_threads


def text_of(c) -> str:
    """A config's text: 'dflash:16/p0.3', 'plain/exact:8'."""
    B = "" if c.block_size is None else f":{c.block_size}"
    if c.block_size == 1:
        text = "plain"
    elif c.tree is True:
        text = f"tree{B}"
    elif c.tree:
        text = f"tree{B}/n{c.tree['node_budget']}/top{c.tree['top_k']}"
    else:
        text = f"dflash{B}"
    text += f"/p{c.p_min:g}" if c.p_min else ""
    text += "/cost" if c.cost else ""
    text += f"/trust{c.trust:g}" if c.trust is not None else ""
    text += f"/T{c.temperature:g}" if c.temperature else ""
    text += "" if c.fp32_ties else "/argmax"
    text += "/steps" if c.record_steps else ""
    text += "/nolean" if c.lean is False else ""           # lean on: the default, unsaid
    text += {True: "/int8", False: "/noint8"}.get(c.draft_int8, "")
    return text + ("/exact" if c.exact is True else f"/exact:{c.exact}" if c.exact else "")


def parse(cls, text: str, **call):
    """``text_of`` back into a ``cls`` (DecodingConfig): 'dflash:16/p0.3' -> block_size 16,
    p_min 0.3. ``call``: fields over the text's: those it does not name are applied
    (max_new_tokens, stop_token_ids, a block size for 'dflash'), one it names with another value
    is an error, and so is an option named twice."""
    if not isinstance(text, str):
        raise TypeError(f"parse takes a decoding's text such as 'dflash:16/p0.3', got "
                        f"{type(text).__name__} {text!r}.")
    head, *opts = text.split("/")
    kind, colon, B = head.partition(":")
    why = ("" if kind not in ("dflash", "tree") or not colon
           else f" (no block size after {kind + ':'!r}: {kind}:16, or {kind} for the "
                f"drafter's)" if not B
           else f" ({B!r} is not a block size: ASCII digits, e.g. {kind}:16)"
           if not (B.isascii() and B.isdigit()) else "")
    if kind not in ("plain", "dflash", "tree") or why or (kind == "plain" and colon):
        raise ValueError(f"{text!r} is not a decoding{why}: plain, dflash[:B] or "
                         f"tree[:B]/nN/topK, then /pP /cost /trustW /T<temperature> /argmax "
                         f"/steps /lean /nolean /int8 /noint8 /exact /exact:W as wanted.")
    f = {"block_size": 1} if kind == "plain" else {"block_size": int(B)} if B else {}
    if kind == "dflash":
        f["tree"] = None                            # a chain
    tree, named = {}, {}
    for opt in opts:
        key = next((k for k in ("cost", "argmax", "steps", "trust", "top", "p", "nolean",
                                "noint8", "n", "lean", "int8", "exact", "T")
                    if opt.startswith(k)), None)
        value = opt[len(key or ""):]
        try:
            if not value.isascii():          # float() reads other scripts' digits too
                raise ValueError(value)
            if key in ("lean", "nolean") and not value:
                name, v = "lean", key == "lean"
            elif key in ("int8", "noint8") and not value:
                name, v = "draft_int8", key == "int8"
            elif key == "exact" and value[:1] == ":" and value[1:].isdigit():
                name, v = "exact", int(value[1:])     # W rows
            elif key in ("cost", "argmax", "steps", "exact") and not value:
                name = {"cost": "cost", "argmax": "fp32_ties", "steps": "record_steps",
                        "exact": "exact"}[key]
                v = key != "argmax"
            elif key in ("n", "top"):
                name, v = "node_budget" if key == "n" else "top_k", int(value)
            else:
                name = {"trust": "trust", "p": "p_min", "T": "temperature"}[key]
                v = float(value)
        except (KeyError, ValueError):
            raise ValueError(f"{text!r}: option {opt!r} is not one of pP (the cut), cost, "
                             f"trustW, nN and topK (a tree), T<temperature>, argmax, "
                             f"steps, lean, nolean, int8, noint8, exact, exact:W (W rows, ASCII "
                             f"digits).") from None
        if name in named:
            raise ValueError(f"{text!r}: options {named[name]!r} and {opt!r} both set "
                             f"{name}: give each option once.")
        named[name] = opt
        (tree if name in ("node_budget", "top_k") else f)[name] = v
    if tree and kind != "tree":
        raise ValueError(f"{text!r}: /nN and /topK are a tree's: tree:B/nN/topK.")
    if kind == "tree":
        if tree and set(tree) != {"node_budget", "top_k"}:
            raise ValueError(f"{text!r}: a tree names both its nodes and its candidates, "
                             f"e.g. tree:8/n15/top8 (or neither: the drafter's tree).")
        f["tree"] = tree or True
    unknown = set(call) - {x.name for x in fields(cls)}
    if unknown:
        raise TypeError(f"unknown decoding settings {sorted(unknown)}: the fields of "
                        f"DecodingConfig are {[x.name for x in fields(cls)]}.")
    same = lambda k, v: (v is f[k] or (v is False and f[k] is None) if k == "tree"
                         and not isinstance(v, dict) else v == f[k]
                         and (k != "exact" or isinstance(v, bool) == isinstance(f[k], bool)))
    clash = {k: v for k, v in call.items() if k in f and v is not None and not same(k, v)}
    if clash:
        raise ValueError(f"{text!r} sets {', '.join(f'{k}={f[k]!r}' for k in clash)}, and the "
                         f"call gives {', '.join(f'{k}={v!r}' for k, v in clash.items())}: "
                         f"say it once (in the text, or as a keyword over a text without it).")
    try:
        return cls(**{**call, **f})
    except ValueError as e:
        raise ValueError(f"{text!r}: {e}") from None


def words_of(config, target, drafter, batch: bool, shipped: dict | None) -> str:
    """``DecodingConfig.describe``: what one step of ``config`` does, in words; with the
    target and drafter, what the call runs: their block size and tree, the cost curve it prices
    on (this machine's, else ``shipped``, the drafter's), whether ties are decided."""
    c = config.resolve(drafter, batch) if drafter is not None else config
    B, default = c.block_size, type(config).of(drafter) if drafter is not None else None
    drafts = "a block of the drafter's size" if B is None else f"{B - 1} tokens"
    if B == 1:
        what = "plain decoding: one target pass a token, no drafter"
    elif isinstance(c.tree, dict):
        what = (f"draft {drafts}; verify a tree of up to {c.tree['node_budget']} nodes, "
                f"the best paths over each slot's top {c.tree['top_k']}")
    elif c.tree is True:
        what = f"draft {drafts}; verify the drafter's default tree"
    else:
        what = f"draft {drafts}; verify them as a chain"
        if c.p_min:
            what += f" up to the first with q < {c.p_min:g}"
        if default is not None and isinstance(default.tree, dict) and B != 1:
            why = ("a batch verifies chains" if batch else
                   "p_min and record_steps are a chain's" if c.p_min or c.record_steps
                   else "this call asked for a chain")
            what += f" (the drafter's default tree is not used: {why})"
    if c.cost and B != 1:
        curve = ""
        if isinstance(c.cost, VerifyCost):
            curve = " (the curve given)"
        elif target is not None:
            costs, where = prices.costs_for(target, drafter, shipped)
            if costs:
                key = for_threads(costs, dtype=target.dtype, key=True)
                curve = (f" (the {key[0] or 'dtype-free'} curve at {key[1] or 'any'} "
                         f"thread(s), {where})")
        if c.exact:
            what += (f"; priced on the measured verify curve{curve} at W rows a pass (exact "
                     f"mode: every pass costs t(W), so every draft is verified), skipping the "
                     f"drafter after steps where drafting does not pay")
        else:
            what += (f"; keep as many drafts as pay on the measured verify curve{curve}, and "
                     f"skip the drafter after steps where none pays")
    if (B != 1 and drafter is not None and target is not None and lean.runs_lean(target, c.lean)
            and lean_drafter.drafts_in_int8(drafter, c.draft_int8)):
        what += ("; the drafter multiplies in int8 (its projection of the target's states in its "
                 "own dtype)")
    if c.temperature:
        pick = f"sampled at temperature {c.temperature:g}"
    else:
        head = None if target is None else target.get_output_embeddings().weight.dtype
        pick = "greedy" + (f" ({str(head).replace('torch.', '')} near-ties decided in fp32)"
                           if c.fp32_ties and head not in (None, torch.float32) else
                           " (fp32 logits: no ties to decide)" if head == torch.float32 else
                           "" if c.fp32_ties or head is None else " (argmax as rounded)")
    if c.exact:
        W, (need, why) = c.rows, c.drafting() or (None, "")
        why = ("the W named" + (f" ({why} takes {need})" if (need or 1) > 1 else "")
               if c.exact is not True else "plain decoding's default W, EXACT_ROWS "
               "(/exact:W names another)" if need == 1 else why)
        rows = f"{W} rows: {why}" if W else "W rows, as the drafter's block or tree takes"
        what += (f"; exact mode: every pass after the prefill {rows}; attention summed in "
                 f"index order (the output is plain decoding's at the same W"
                 f"{f', plain/exact:{W}' if W else ''})")
    return (f"{what}; the target's choice {pick}; at most {c.max_new_tokens} new tokens"
            f"{', stopping at ' + str(list(c.stop_token_ids)) if c.stop_token_ids else ''}.")

"""A ``DecodingConfig`` as text, and back: the bench's method names and the results files' keys.

    plain | dflash[:B] | tree[:B]/nN/topK      the drafting: plain decoding, a chain, a tree
    /pP                                        the confidence cut
    /cost, /trustW                             the cost model, and its trust
    /T0.7                                      the temperature
    /argmax                                    fp32_ties off
    /steps                                     record_steps
    /nolean, /lean                             the lean pass off, or asked for where a target
                                               could refuse (a config prints nothing for it on)
    /exact, /exact:W                           exact mode: W from the drafting, or W rows

``text_of(config)`` is ``str(config)``; ``parse(DecodingConfig, text)`` is
``DecodingConfig.parse``, and the two round-trip. The length and the stops belong to the call and
are not in the text. This module knows the config only through the class it is given.
"""

from __future__ import annotations

from dataclasses import fields


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
                         f"/steps /lean /nolean /exact /exact:W as wanted.")
    f = {"block_size": 1} if kind == "plain" else {"block_size": int(B)} if B else {}
    if kind == "dflash":
        f["tree"] = None                            # a chain
    tree, named = {}, {}
    for opt in opts:
        key = next((k for k in ("cost", "argmax", "steps", "trust", "top", "p", "nolean",
                                "n", "lean", "exact", "T") if opt.startswith(k)), None)
        value = opt[len(key or ""):]
        try:
            if not value.isascii():          # float() reads other scripts' digits too
                raise ValueError(value)
            if key in ("lean", "nolean") and not value:
                name, v = "lean", key == "lean"
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
                             f"steps, lean, nolean, exact, exact:W (W rows, ASCII "
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

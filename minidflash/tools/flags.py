"""The command line's decoding flags: one option per DecodingConfig field (``add_flags``), read
back into keywords over a config (``flag_fields``), as ``train`` derives its flags from TrainConfig.

Every command that decodes (bench, demo, budget, misses, ...) takes them; the config itself
(decoding_config.py) knows nothing of argparse."""

from __future__ import annotations

import argparse
from dataclasses import fields

from ..decoding_config import DecodingConfig, check_tree

FLAG_HELP = {   # a field's help on every command that decodes (add_flags); the defaults are added
    "max_new_tokens": "tokens to generate at most",
    "block_size": "B: slot 0 and B-1 drafted slots, at most the drafter's; 1 is plain decoding",
    "p_min": "the confidence cut: verify the leading drafts with q >= P, P in [0, 1)",
    "cost": "price each step's verify length on the drafter's measured curve (--no-cost: don't)",
    "trust": "with --cost: correct q as the decode goes, with this weight in [0, 1)",
    "tree": "verify a tree of N nodes over each slot's top K, written N,K (off: a chain)",
    "temperature": "0: greedy; T > 0: the target samples",
    "fp32_ties": "a bf16 target's greedy near-ties decided in fp32 (--no-fp32-ties: argmax)",
    "record_steps": "keep every step's drafts and the target's choices",
    "lean": "the target's passes through lean.py (--no-lean: transformers' forward)",
    "draft_int8": "in a lean decode, the drafter's products in int8 (--no-draft-int8: as packed)",
    "exact": "exact mode (exact.py): every pass on W rows, W the block's or the tree's (plain "
             "decoding: 16), so a bf16 target's greedy output is plain decoding's at that W",
}
METAVARS = {"max_new_tokens": "N", "block_size": "B", "p_min": "P", "trust": "W", "tree": "N,K",
            "temperature": "T"}
FLAG_DEFAULT = {"max_new_tokens": "256", "temperature": "0", "fp32_ties": "on",
                "record_steps": "off", "lean": "where the target supports it",
                "draft_int8": "where the drafter would multiply fp32 on a CPU without bf16 units",
                "exact": "off"}


def tree_flag(text: str):
    """--tree N,K -> {"node_budget": N, "top_k": K}; off -> False (a chain)."""
    if text == "off":
        return False
    n, _, k = text.partition(",")
    if not (n.isdigit() and k.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r}: a tree is N,K (nodes, candidates per "
                                         f"slot), e.g. 15,8, or off")
    try:
        return check_tree({"node_budget": int(n), "top_k": int(k)})
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def field_flag(name: str):
    """The argparse type of a field's flag: the text read, then checked by the config on its own
    (trust with cost on, which it needs), so a bad value is argparse's one line naming the flag."""
    read = {"tree": tree_flag, "max_new_tokens": int, "block_size": int}.get(name, float)

    def flag(text: str):
        try:
            value = read(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {'an integer' if read is int else 'a number'}") from None
        try:
            DecodingConfig(**{name: value}, **({"cost": True} if name == "trust" else {}))
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"{text}: {e}") from None
        return value
    return flag


def add_flags(parser, skip=(), defaults=None, why: str = "", only=None) -> None:
    """An option per DecodingConfig field (--max-new-tokens, --block-size, --p-min, --cost,
    --trust, --tree N,K, --temperature, --fp32-ties, --record-steps, --lean), each None unless
    given (or ``defaults``: the command's own, for the call's fields), so that a command keeps
    the drafter's decoding.json for what the command line leaves out. The stops come from the
    tokenizer. ``skip``: fields the command sets itself, said in the group's text with ``why``
    (``only``: the fields it takes, skipping the rest)."""
    defaults, skip = defaults or {}, [n for n in FLAG_HELP if n not in only] if only else skip
    skipped = [f"--{n.replace('_', '-')}" for n in FLAG_HELP if n in skip]
    group = parser.add_argument_group(
        "decoding (decoding_config.DecodingConfig; unset: the drafter's decoding.json)",
        f"this command sets {', '.join(skipped)} itself{': ' + why if why else ''}"
        if skipped else None)
    for name, text in FLAG_HELP.items():
        if name in skip:
            continue
        said = defaults.get(name, FLAG_DEFAULT.get(name, "the drafter's"))
        kw = dict(default=defaults.get(name), help=f"{text} (default {said})")
        if name in ("cost", "fp32_ties", "record_steps", "lean", "draft_int8", "exact"):
            group.add_argument("--" + name.replace("_", "-"),
                               action=argparse.BooleanOptionalAction, **kw)
        else:
            group.add_argument("--" + name.replace("_", "-"), type=field_flag(name),
                               metavar=METAVARS[name], **kw)


def flag_fields(args, skip=()) -> dict:
    """The fields the command line set (``add_flags``), to pass as keywords over a config."""
    names = [f.name for f in fields(DecodingConfig) if f.name not in skip]
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}

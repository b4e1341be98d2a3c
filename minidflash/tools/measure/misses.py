"""What a drafter misses: each verify step sorted by the target's token at the first drafted slot.

tau says how many tokens a step commits, not which ones the drafter could not guess. A step
whose first drafted token is rejected commits one token (the target's own); this decodes the
first ``--n`` prompts of each suite with the drafter (lossless, whatever it drafts) and sorts
every step by that token of the target's:

* ``word in question``: a word (or the start of one) that the prompt itself contains, such as
  the things a GSM8K question names, which the answer repeats;
* ``other word``, ``digits``, ``symbols`` (``=``, ``$``, ``,`` ...), ``spaces and newlines``.

For each it reports the steps and the share of them that rejected the first drafted token,
and the words missed most often.

    python -m minidflash misses --target HuggingFaceTB/SmolLM2-135M-Instruct \\
        --drafter data/smollm2_drafter --suites gsm8k --n 10 --threads 2
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter

import torch

from ...paths import PROMPTS_DIR, TINY_DRAFTER_DIR
from ...checkpoints import load_drafter
from ...target import chat_ids, load_target, stop_ids
from ...verifier import speculative_generate
from ..common import (add_dtype, add_load, add_threads, check_decoding, check_suites, count,
                      or_error, out_file, read_jsonl, write)
from ..flags import add_flags, flag_fields

KINDS = ("word in question", "other word", "digits", "symbols", "spaces and newlines")


def kind(token_text: str, question_words: set[str]) -> str:
    """The class of one token's text; a word is "in question" when the prompt has a word that
    starts with it (a long word is split into several tokens; its first is what is drafted)."""
    t = token_text.strip()
    if not t:
        return "spaces and newlines"
    if t.isdigit():
        return "digits"
    if t.isalpha():
        w = t.lower()
        return "word in question" if any(q.startswith(w) for q in question_words) else "other word"
    return "symbols"


def words_of(messages: list[dict]) -> set[str]:
    return {w for m in messages if m["role"] == "user" for w in re.findall(r"[a-z]+", m["content"].lower())}


@torch.no_grad()
def misses(target, tokenizer, drafter, rows: list[dict], max_new_tokens: int,
           block_size: int | None = None, **fields) -> dict:
    """{kind: {"steps", "missed"}}, the missed words, tau and the steps' count for ``rows``
    (``fields``: other DecodingConfig fields over the drafter's decoding.json; a chain)."""
    steps, missed, words, lengths = Counter(), Counter(), Counter(), []
    for row in rows:
        question = words_of(row["messages"])
        out = speculative_generate(target, drafter, chat_ids(tokenizer, row["messages"]),
                                   max_new_tokens=max_new_tokens, block_size=block_size,
                                   stop_token_ids=stop_ids(tokenizer), record_steps=True,
                                   **fields)
        lengths += out.acceptance_lengths
        for step in out.steps:
            text = tokenizer.decode([step["target"][0]])
            k = kind(text, question)
            steps[k] += 1
            if step["accepted"] == 0:
                missed[k] += 1
                if k in ("word in question", "other word"):
                    words[text.strip().lower()] += 1
    return {"tau": sum(lengths) / max(1, len(lengths)), "steps": sum(steps.values()),
            "first_slot_rejected": sum(missed.values()),
            "kinds": {k: {"steps": steps[k], "missed": missed[k]} for k in KINDS},
            "missed_words": words.most_common()}


def report(suite: str, r: dict) -> str:
    lines = [f"{suite}: tau {r['tau']:.2f}, {r['steps']} steps, the first drafted token rejected "
             f"in {r['first_slot_rejected']} ({100 * r['first_slot_rejected'] / max(1, r['steps']):.0f}%)"]
    for k, c in r["kinds"].items():
        share = f"{100 * c['missed'] / c['steps']:.0f}%" if c["steps"] else "-"
        lines.append(f"  {k:<20} {c['steps']:>5} steps, rejected at the first slot in "
                     f"{c['missed']:>4} ({share}; {100 * c['missed'] / max(1, r['first_slot_rejected']):.0f}% of all such steps)")
    lines.append("  missed most: " + ", ".join(f"{w} {n}" for w, n in r["missed_words"][:12]))
    return "\n".join(lines)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m minidflash misses", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default=None, help="a hub id or folder (default: the tiny target)")
    p.add_argument("--drafter", default=None, help="a DFlash drafter folder (default: the tiny one)")
    p.add_argument("--suites", nargs="+", default=["gsm8k"],
                   help="files in data/prompts, without .jsonl (default gsm8k)")
    p.add_argument("--n", type=count, default=10, help="the first n prompts of each suite (default 10)")
    add_threads(p)
    add_dtype(p)
    p.add_argument("--out", type=out_file, default=None, help="write the result here too, as JSON")
    add_flags(p, skip=("tree", "record_steps"), defaults={"max_new_tokens": 128},
              why="it records every step, which only a chain has")
    add_load(p)
    a = p.parse_args(argv)
    check_suites(p.error, a.suites)
    given = flag_fields(a)
    torch.set_num_threads(a.threads)
    target, tokenizer = or_error(p.error, f"--target {a.target}", load_target, a.target,
                                 dtype=a.dtype)
    drafter = or_error(p.error, f"--drafter {a.drafter}", load_drafter, a.drafter, target=target)
    rows = {suite: read_jsonl(PROMPTS_DIR / f"{suite}.jsonl")[:a.n] for suite in a.suites}
    check_decoding(p.error, target, drafter, given, [chat_ids(tokenizer, r["messages"])
                   for rs in rows.values() for r in rs], record_steps=True,
                   stop_token_ids=stop_ids(tokenizer))
    fields = {k: v for k, v in given.items() if k not in ("max_new_tokens", "block_size")}
    result = {"command": "python -m minidflash misses " + " ".join(sys.argv[1:] if argv is None else argv), "n": a.n,
              "max_new_tokens": a.max_new_tokens, "block_size": a.block_size,
              "threads": a.threads, "suites": {}}
    for suite in a.suites:
        result["suites"][suite] = misses(target, tokenizer, drafter, rows[suite], a.max_new_tokens,
                                         a.block_size, **fields)
        print(report(suite, result["suites"][suite]), flush=True)
    write(result, a.out, None, dtype=target.dtype, drafters=[a.drafter or TINY_DRAFTER_DIR],
          load=a.load)
    return result

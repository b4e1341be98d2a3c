"""Magpie: the target writes its own training requests (Xu et al., 2024, arXiv 2406.08464).

An aligned chat model, given its chat template up to the start of a user turn
(``<|im_start|>user\\n``) and nothing after it, goes on as the user would: it writes a request.
Answered by the same model, the request becomes a training pair that no data set had to hold.
A system prompt before the user turn steers which kind of request comes: here one of MT-Bench's
eight categories (writing, roleplay, reasoning, math, coding, extraction, STEM, humanities),
named in words of our own; MT-Bench's questions are never shown to the model, and any request
that shares an 8-word run with a prompt of the four suites is dropped (``overlap.py``).

    requests = magpie_requests(target, tokenizer, n=4000, seed=0)   # sampled, T = 1
    write_prompts(requests, "data/train_prompts/magpie.jsonl")

or ``python -m minidflash prompts --kind magpie --n 4000 --out data/train_prompts/magpie.jsonl``.
The requests are then answered like any prompts (``answers --prompts FILE``), with the default
system prompt of the template, as a user's request would be.

A small model writes many near-copies ("Write a story about a ..."), unfinished requests and
requests that answer themselves, so the raw samples are filtered: a request must end its turn
(the stop token, not the length cap), hold 5 to 150 words, carry no template token, differ from
every kept request once lower-cased and stripped of punctuation, and share its first five words
with at most ``max_same_start`` kept requests. What was dropped, and why, is counted.
"""

from __future__ import annotations

import random
import re
from collections import Counter

import torch
from tqdm.auto import tqdm

# kind -> system prompts that steer the request toward it (our words; MT-Bench's categories)
SYSTEMS = {
    "writing": [
        "You are a writing assistant. Users ask you to write stories, poems, essays, emails, "
        "blog posts, speeches and letters, or to improve their own drafts.",
        "You help people write: cover letters, product descriptions, social media posts, "
        "toasts, reviews and short fiction.",
    ],
    "roleplay": [
        "You are an actor who plays any character the user asks for: a famous person, a "
        "fictional hero, a teacher, a detective, a chef. Users set the scene for you.",
        "Users ask you to pretend to be someone and answer in that person's voice.",
    ],
    "reasoning": [
        "You solve puzzles and logic problems. Users give you riddles, ordering problems, "
        "questions about relatives, and tricky everyday reasoning questions.",
        "Users ask you questions that need careful step-by-step thinking to answer.",
    ],
    "math": [
        "You are a math tutor. Students ask you about algebra, geometry, probability, number "
        "theory and calculus problems.",
        "Users ask you to solve equations, compute areas and volumes, count possibilities and "
        "prove small results.",
    ],
    "coding": [
        "You are a programming assistant. Users ask you to write functions, fix bugs, explain "
        "code and design small programs in Python, JavaScript, C++ or SQL.",
        "Users ask you coding questions: algorithms, data structures, regular expressions and "
        "how to use libraries.",
    ],
    "extraction": [
        "You extract information. Users paste a text (an article, a review, a table, a list of "
        "records) and ask you to pull out names, dates, numbers or a summary, often as JSON.",
        "Users give you a passage and ask you to find, sort or reformat what it contains.",
    ],
    "stem": [
        "You are a science teacher. Users ask about physics, chemistry, biology, engineering, "
        "medicine and computer science.",
        "Users ask you to explain how things work in nature and technology.",
    ],
    "humanities": [
        "You are a knowledgeable guide to history, economics, philosophy, law, art and "
        "culture. Users ask you to explain ideas and events.",
        "Users ask you questions about society, politics, literature, ethics and world history.",
    ],
}
KINDS = tuple(SYSTEMS)
USER_TURN = "<|im_start|>user\n"   # ChatML (SmolLM2, Qwen3): where a user's words begin


def pre_query(tokenizer, system: str) -> str:
    """The template up to a user's first word: the system turn, then ``USER_TURN``."""
    from ...target import token_id

    if token_id(tokenizer, "<|im_start|>") is None:
        raise ValueError("magpie needs a ChatML chat template (<|im_start|>user ...), as "
                         "SmolLM2's and Qwen3's are; this tokenizer has no <|im_start|> token")
    head = tokenizer.apply_chat_template([{"role": "system", "content": system}], tokenize=False)
    return head + USER_TURN


def normalized(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def keep_or_why(text: str, finished: bool, seen: set, starts: Counter,
                max_same_start: int) -> str | None:
    """None if the request is kept (and ``seen``/``starts`` learn it), else why it is dropped."""
    words = text.split()
    key = normalized(text)
    if not finished:
        return "unfinished"
    if not 5 <= len(words) <= 150:
        return "length"
    if "<|" in text or "|>" in text or re.match(r"(?i)\s*(assistant|user|system)\b", text):
        return "template token"
    if key in seen:
        return "duplicate"
    start = " ".join(key.split()[:5])
    if starts[start] >= max_same_start:
        return "same start"
    seen.add(key)
    starts[start] += 1
    return None


def magpie_requests(target, tokenizer, n: int, seed: int = 0, temperature: float = 1.0,
                    max_new_tokens: int = 128, batch_size: int = 64, max_same_start: int = 3,
                    progress: bool = True) -> tuple[list[dict], dict]:
    """n requests written by ``target`` (round-robin over KINDS, each batch one system prompt),
    filtered as the module says and free of suite overlap. Returns (prompts, counts): prompts
    as ``{"messages": [{"role": "user", ...}], "kind": "magpie-<kind>"}``, counts of what was
    sampled and dropped. Seeded: the same arguments on the same machine give the same list."""
    from ...target import stop_ids
    from ...verifier import speculative_generate_batch
    from .overlap import SuiteOverlap

    suites = SuiteOverlap()
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    stops = stop_ids(tokenizer)
    kept, seen, starts, dropped = [], set(), Counter(), Counter()
    per_kind = {k: 0 for k in KINDS}
    sampled, round_ = 0, 0
    bar = tqdm(total=n, desc="magpie requests", disable=not progress)
    while len(kept) < n:
        kind = min(KINDS, key=lambda k: (per_kind[k], KINDS.index(k)))   # the kind furthest behind
        system = rng.choice(SYSTEMS[kind])
        ids = tokenizer(pre_query(tokenizer, system), add_special_tokens=False,
                        return_tensors="pt")["input_ids"].to(target.device)
        rows = speculative_generate_batch(target, None, ids.expand(batch_size, -1).contiguous(),
                                          max_new_tokens=max_new_tokens, block_size=1,
                                          temperature=temperature, stop_token_ids=stops,
                                          generator=gen)
        for r in rows:
            sampled += 1
            toks = r.new_ids.tolist()
            finished = bool(toks) and toks[-1] in stops
            text = tokenizer.decode(toks[:-1] if finished else toks).strip()
            why = keep_or_why(text, finished, seen, starts, max_same_start)
            if why is None and suites.overlaps(text):
                why = "suite overlap"
            if why is not None:
                dropped[why] += 1
                continue
            if len(kept) == n or per_kind[kind] == -(-n // len(KINDS)):
                dropped["over quota"] += 1          # a good request of a kind already full
                continue
            kept.append({"messages": [{"role": "user", "content": text}], "kind": f"magpie-{kind}"})
            per_kind[kind] += 1
            bar.update(1)
        round_ += 1
        if round_ > 40 * (n // batch_size + len(KINDS)):
            raise RuntimeError(f"magpie: {len(kept)} of {n} requests kept after {sampled} samples "
                               f"({dict(dropped)}): the model does not write requests here")
    bar.close()
    return kept, {"sampled": sampled, "kept": len(kept), "dropped": dict(dropped),
                  "per_kind": per_kind, "temperature": temperature,
                  "max_new_tokens": max_new_tokens, "seed": seed}

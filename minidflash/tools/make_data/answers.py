"""The target's answers as token ids: made several at a time, kept in data/, read by ``train``.

A drafter learns from its target's own greedy answers, and on a CPU making them is the slow part.
``train_data.regenerate`` runs transformers' ``generate()`` in fp32 and captures features on the
way (SmolLM2-135M on a 2-core CPU: 108 answer tokens/s; the bf16 decode below makes the text at
229, data/README.md has the table). Here the job is split in two:

1. **Text.** An engine answers the prompts greedily, one shard at a time:
   - ``--engine torch`` (default): ``speculative_generate_batch`` with no drafter, a plain
     batched decode whose finished rows leave the batch, on a bf16 copy of the target
     (``--dtype``; a CPU with AMX or AVX-512 bf16 runs its matmuls several times faster than
     fp32). bf16 rounds differently from the fp32 target, so a near-tie can go the other way:
     ``--check`` measures how often the fp32 target agrees with each answer token;
   - ``--engine llama-cpp``: llama.cpp's server (``llama-server``, optional, found like
     ``llama-cpp`` finds it) with ``--parallel`` slots decoding together (continuous batching),
     on the loopback, from the target's GGUF. For SmolLM2 that GGUF is the very file our fp32
     copy is dequantised from (``hub.PACKAGED``): the same weights, other rounding;
   - ``--engine torch-features``: ``train_data.regenerate``, transformers' ``generate()`` in fp32
     capturing the features as it goes (the reference, and the throughput to beat).
2. **Kept.** Each shard is a safetensors file of token ids (prompt and answer, int32) written
   whole or not at all, listed in ``answers.json`` with the prompts' recipe, the command and the
   shard's tokens per second. A few MB: committed, so a new machine resumes from them (a shard
   on disk is never made again) and trains without regenerating.
3. **Features** are not kept: ``train_data.feature_pass`` computes them in one teacher-forced
   pass (batched, stopping after the deepest layer the drafter reads), cached in cache/.

``python -m minidflash answers --target HuggingFaceTB/SmolLM2-135M-Instruct --out DIR ...``
then ``python -m minidflash train --target ... --answers DIR ...``.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from ...files import write_json, write_with
from ..common import (a_file, add_dtype, add_threads, at_least, count, layer_ids, layers_within,
                      out_dir, out_file, resolved_dtype)
from ..flags import add_flags
from ..engines.llama_cpp_binaries import llama_server, server_answer

MANIFEST = "answers.json"


# --------------------------------------------------------------------------------------------
# Shards on disk
# --------------------------------------------------------------------------------------------

def prompts_key(prompts: list[dict]) -> str:
    """A short hash of a shard's prompts: a resumed run checks it made the same ones."""
    return hashlib.sha1(json.dumps([p["messages"] for p in prompts]).encode()).hexdigest()[:12]


def shard_path(folder: Path, s: int) -> Path:
    return Path(folder) / f"shard-{s:03d}.safetensors"


def save_shard(path: Path, rows: list[dict], key: str) -> None:
    """rows [{"ids": LongTensor (S,), "response_start": int}] -> one safetensors file, written
    to a temporary name and renamed: a killed run leaves no half-written shard."""
    ids = torch.cat([r["ids"] for r in rows]).to(torch.int32)
    tensors = {"ids": ids,
               "lengths": torch.tensor([len(r["ids"]) for r in rows], dtype=torch.int32),
               "response_start": torch.tensor([r["response_start"] for r in rows], dtype=torch.int32)}
    write_with(path, lambda tmp: save_file(tensors, str(tmp), metadata={"prompts_key": key}))


def load_shard(path: Path) -> list[dict]:
    t = load_file(str(path))
    rows, at = [], 0
    for n, start in zip(t["lengths"].tolist(), t["response_start"].tolist()):
        rows.append({"ids": t["ids"][at:at + n].long(), "response_start": start})
        at += n
    return rows


def load_answers(folder, use_shards: int | None = None) -> list[dict]:
    """All answers of a folder written by this command (the first ``use_shards`` shards)."""
    folder = Path(folder)
    if not (folder / MANIFEST).is_file():
        raise FileNotFoundError(f"{folder} has no {MANIFEST}: make the answers with "
                                f"`python -m minidflash answers --out {folder} ...` first.")
    manifest = json.loads((folder / MANIFEST).read_text())
    done = sorted(int(s) for s in manifest["shards"])
    n = len(done) if use_shards is None else use_shards
    if done[:n] != list(range(n)):
        raise ValueError(f"{folder} holds shards {done}; the first {n} are not all there: run "
                         f"`python -m minidflash answers` again with the same options to finish.")
    return [r for s in range(n) for r in load_shard(shard_path(folder, s))]


def answers_digest_of(path: Path, layer_ids: list[int], dtype: str = "float32") -> str:
    """The cache key of one shard's features: its bytes, the layers read and the dtype (the
    top-k kept beside them is in the file's name: ``train_drafter.answer_features``)."""
    h = hashlib.sha1(Path(path).read_bytes())
    h.update(json.dumps([list(layer_ids)] + ([dtype] if dtype != "float32" else [])).encode())
    return h.hexdigest()[:12]


# --------------------------------------------------------------------------------------------
# The engines
# --------------------------------------------------------------------------------------------

def llama_cpp_answers(port: int, rows: list[torch.Tensor], max_new_tokens: int, stops: list[int],
                      parallel: int) -> list[dict]:
    """Every prompt of ``rows`` answered by the server, ``parallel`` requests in flight."""
    def one(row):
        answer = server_answer(port, row.tolist(), max_new_tokens, stops)
        return {"ids": torch.cat([row, torch.tensor(answer, dtype=torch.long)]),
                "response_start": len(row)}
    with ThreadPoolExecutor(parallel) as pool:
        return list(pool.map(one, rows))


def torch_answers(target, rows: list[torch.Tensor], max_new_tokens: int, stops: list[int],
                  batch_size: int, temperature: float = 0.0,
                  generator: torch.Generator | None = None) -> list[dict]:
    """Every prompt of ``rows`` answered greedily by ``target`` (any dtype), ``batch_size`` at a
    time in length order: ``speculative_generate_batch`` with no drafter (block size 1) is a
    plain batched decode whose finished rows leave the batch, so no step is spent on them
    (``generate()`` keeps a finished row in until the whole batch ends). A temperature above 0
    samples instead, from ``generator``."""
    from ...batch import left_pad
    from ...verifier import speculative_generate_batch

    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    out = [None] * len(rows)
    for s in range(0, len(order), batch_size):
        idx = order[s:s + batch_size]
        ids, mask = left_pad([rows[i] for i in idx])
        done = speculative_generate_batch(target, None, ids, max_new_tokens=max_new_tokens,
                                          attention_mask=mask, block_size=1, stop_token_ids=stops,
                                          temperature=temperature, generator=generator)
        for i, r in zip(idx, done):
            out[i] = {"ids": torch.cat([rows[i], r.new_ids]), "response_start": len(rows[i])}
    return out


def make_shard(engine: str, target, tokenizer, prompts: list[dict], args, port=None,
               shard: int = 0) -> list[dict]:
    from ...target import chat_ids, stop_ids
    from ...train_data import regenerate

    if engine == "torch-features":   # the previous way: generate(), features as it goes
        return [{"ids": r["ids"], "response_start": r["response_start"]}
                for r in regenerate(target, tokenizer, prompts, args.max_new_tokens,
                                    batch_size=args.regen_batch, progress=False,
                                    layer_ids=args.layer_ids)]
    rows = [chat_ids(tokenizer, p["messages"])[0] for p in prompts]
    if engine == "torch":
        gen = torch.Generator().manual_seed(args.seed * 1000 + shard)   # resumable: per shard
        return torch_answers(target, rows, args.max_new_tokens, stop_ids(tokenizer),
                             args.regen_batch, getattr(args, "temperature", 0.0), gen)
    return llama_cpp_answers(port, rows, args.max_new_tokens, stop_ids(tokenizer), args.parallel)


# --------------------------------------------------------------------------------------------
# What the answers are worth: agreement with the fp32 target, coverage
# --------------------------------------------------------------------------------------------

def agreement(target, data: list[dict], batch_tokens: int = 4096) -> dict:
    """How often the fp32 torch target, fed each answer teacher-forced, picks the answer's own
    next token: 1.0 for answers made by this copy in exact arithmetic, a little less for another
    engine's (near-ties decided differently), and where the first disagreement falls."""
    from ...train_data import right_padded

    same = total = 0
    first = []
    with torch.no_grad():
        for idx, ids in right_padded(data, batch_tokens):
            pred = target(input_ids=ids).logits.argmax(-1)
            for r, i in enumerate(idx):
                d = data[i]
                lo, n = d["response_start"], len(d["ids"])
                hit = pred[r, lo - 1:n - 1] == d["ids"][lo:n]
                same += int(hit.sum())
                total += n - lo
                miss = (~hit).nonzero()
                first.append(int(miss[0]) if len(miss) else None)
    return {"answers": len(data), "token_agreement": same / max(total, 1),
            "identical_answers": sum(f is None for f in first) / max(len(first), 1)}


def coverage(data: list[dict], held_out: list[dict], ks=(4096, 8192, 16384),
             vocab_size: int | None = None) -> dict:
    """Per K: the share of answer tokens covered by the K most frequent tokens of ``data``'s
    answers (a draft vocabulary, ``train_data.draft_vocabulary``), in ``data`` itself and in the
    answers of ``held_out`` (what a drafter meets on prompts it did not train on)."""
    from ...train_data import draft_vocabulary

    vocab_size = vocab_size or 1 + max(int(d["ids"].max()) for d in data + held_out)
    held = torch.cat([d["ids"][d["response_start"]:] for d in held_out]).long()
    out = {}
    for k in ks:
        vocab, seen = draft_vocabulary(data, min(k, vocab_size), vocab_size)
        out[str(k)] = {"in_sample": round(seen, 5),
                       "held_out": round(float(torch.isin(held, vocab).float().mean()), 5)}
    return out


# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------

def shard_range(text: str) -> set[int]:
    """"6-11" -> {6, ..., 11}; "3" -> {3}."""
    lo, _, hi = text.partition("-")
    if not (lo.isdigit() and (hi.isdigit() or not hi)) or int(hi or lo) < int(lo):
        raise argparse.ArgumentTypeError(f"--only-shards takes A-B or A (shard numbers), got {text!r}")
    return set(range(int(lo), int(hi or lo) + 1))


def arguments(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m minidflash answers", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="HuggingFaceTB/SmolLM2-135M-Instruct",
                   help="hub id or folder (default HuggingFaceTB/SmolLM2-135M-Instruct)")
    p.add_argument("--out", type=out_dir, required=True,
                   help="the folder of shards (e.g. data/smollm2_answers)")
    p.add_argument("--prompts", type=a_file, nargs="+", default=None, metavar="FILE",
                   help="answer the prompts of these JSON-lines files (``prompts`` makes them) "
                        "instead of the builder's kinds (whose counts then default to 0)")
    for kind, n in (("math", 3000), ("code", 1500), ("prose", 1500)):
        p.add_argument(f"--n-{kind}", type=at_least(0), help=f"default {n} (0 with --prompts)")
    p.add_argument("--n-story", type=at_least(0), default=0,
                   help="multi-step story problems (word_problems.STORIES), e.g. a second folder "
                        "made with --n-math 0 --n-code 0 --n-prose 0 --n-story 3000")
    p.add_argument("--n-task", type=at_least(0), default=0,
                   help="small function tasks in HumanEval's shape (function_tasks.TASKS), e.g. a "
                        "folder made with --n-math 0 --n-code 0 --n-prose 0 --n-task 3000")
    p.add_argument("--n-chain", type=at_least(0), default=0,
                   help="chained word problems closer to GSM8K's (word_problems.CHAINS), e.g. a "
                        "folder made with --n-math 0 --n-code 0 --n-prose 0 --n-chain 3000")
    p.add_argument("--n-symbolic", type=at_least(0), default=0,
                   help="GSM-Symbolic problems, GSM8K's wording with names and numbers redrawn "
                        "(chat_prompts.symbolic_prompts; reads reasoning-gym's sdist)")
    p.add_argument("--n-wide", type=at_least(0), default=0,
                   help="the story and chain templates with their things and names drawn from "
                        "long lists (chat_prompts.wide_prompts)")
    p.add_argument("--prose-source", choices=["texts", "docstrings"], default="texts",
                   help="prose passages: Shakespeare + KJV sdists, or stdlib docstrings")
    p.add_argument("--seed", type=int, default=0, help="the prompts' draw (default 0)")
    p.add_argument("--shards", type=count, default=24, help="interleaved shards (default 24)")
    p.add_argument("--make-shards", type=at_least(0), default=None,
                   help="make only the first K shards now (the rest: a later run; 0: none, "
                        "only --coverage or --check on what is there)")
    p.add_argument("--only-shards", type=shard_range, default=None, metavar="A-B",
                   help="make only these shards (e.g. 6-11): two processes, each with its own "
                        "range, fill one folder together (answers.json is updated under a lock)")
    p.add_argument("--engine", choices=["torch", "llama-cpp", "torch-features"],
                   default="torch", help="torch: our batched decode, finished rows leaving; "
                   "llama-cpp: llama-server's parallel slots; torch-features: transformers' "
                   "generate() in fp32 capturing the features as it goes (train_data.regenerate, "
                   "the reference to beat)")
    add_dtype(p, default="bfloat16",
              what="torch: the weights the answers are decoded with (bf16 matmuls run on a CPU's "
                   "AMX/AVX-512 bf16 units; features and --check stay fp32)")
    p.add_argument("--parallel", type=count, default=8, help="llama-server's slots (default 8)")
    add_threads(p, what="torch threads, and llama-server's with --engine llama-cpp")
    p.add_argument("--regen-batch", type=count, default=64, help="torch: a batch (default 64)")
    p.add_argument("--target-gguf", help="llama-cpp: the target's GGUF (default: the offline source's)")
    p.add_argument("--no-repack", action="store_true", help="llama-cpp: llama.cpp's -nr")
    p.add_argument("--check", type=at_least(0), default=0,
                   help="after making, feed the first N answers to the fp32 torch target and "
                        "report how often it picks the same next token")
    p.add_argument("--layer-ids", type=layer_ids, default=None,
                   help="the layers whose features torch-features and --time-features take "
                        "(default: a 1-layer drafter's three, drafter.default_target_layer_ids)")
    p.add_argument("--time-features", action="store_true",
                   help="time train_data.feature_pass over the shards made in this run (none "
                        "made: over the last shard there) and report text + features end to end")
    add_dtype(p, "--feature-dtype", default="float32", what="--time-features: the dtype of the "
              "pass (bfloat16 also reports how far its features are from fp32's)")
    p.add_argument("--coverage", type=at_least(1), nargs="*", default=None, metavar="K",
                   help="report the share of answer tokens the K most frequent cover (a draft "
                        "vocabulary; default K 4096 8192 16384), counted on all shards but the "
                        "last and measured on them and on the last")
    p.add_argument("--results", type=out_file, help="write the result here too, as JSON")
    add_flags(p, only=("max_new_tokens", "temperature"), why="the target answers alone (plain "
              "decoding); --temperature samples with --engine torch, seeded per shard from --seed",
              defaults={"max_new_tokens": 256, "temperature": 0.0})
    args = p.parse_args(argv)
    for kind, default in (("n_math", 3000), ("n_code", 1500), ("n_prose", 1500)):
        if getattr(args, kind) is None:
            setattr(args, kind, 0 if args.prompts else default)
    if args.temperature and args.engine != "torch":
        p.error("--temperature samples with --engine torch only")
    return args


def file_prompts(files: list[str]) -> list[dict]:
    """The prompts of JSON-lines files, in order; each row needs user ``messages``."""
    from ..common import read_jsonl

    rows = []
    for f in files:
        if not Path(f).is_file():
            raise FileNotFoundError(f"{f}: no such prompt file (make one with `python -m "
                                    f"minidflash prompts --kind ... --out {f}`)")
        for i, r in enumerate(read_jsonl(f)):
            if not r.get("messages") or r["messages"][-1]["role"] != "user":
                raise ValueError(f"{f} line {i + 1}: a prompt is {{\"messages\": [..., "
                                 f"{{\"role\": \"user\", ...}}]}}")
            rows.append(r)
    return rows


def open_manifest(args) -> dict:
    """The folder's answers.json, or a fresh one; refused if it holds another recipe (the prompt
    counts, the seed, the shards, the answer length: what decides which answers are made)."""
    recipe = {"target": args.target, "n_math": args.n_math, "n_code": args.n_code,
              "n_prose": args.n_prose, "prose_source": args.prose_source, "seed": args.seed,
              "shards": args.shards, "max_new_tokens": args.max_new_tokens}
    for kind in ("n_story", "n_task", "n_chain", "n_symbolic", "n_wide", "temperature"):
        if getattr(args, kind):   # only when asked for: a folder made without them keeps its recipe
            recipe[kind] = getattr(args, kind)
    if args.prompts:              # the files by name and content
        recipe["prompts"] = {Path(f).name: hashlib.sha1(Path(f).read_bytes()).hexdigest()[:12]
                             for f in args.prompts}
    path = Path(args.out) / MANIFEST
    if not path.is_file():
        return {"recipe": recipe, "shards": {}}
    manifest = json.loads(path.read_text())
    if manifest["recipe"] != recipe:
        raise ValueError(f"{args.out} holds answers of another recipe {manifest['recipe']}; "
                         f"use those options or another --out.")
    return manifest


@contextmanager
def llama_port(args, target, tokenizer, prompts: list[dict], todo: list[int]):
    """The llama.cpp server's port while shards are made with ``--engine llama-cpp`` (None for
    the torch engines, or when nothing is to be made), its slots wide enough for every prompt."""
    from ..engines.llama_cpp import target_files

    if args.engine != "llama-cpp" or not todo:
        yield None
        return
    gguf = Path(args.target_gguf) if args.target_gguf else target_files(args.target, target)[1]
    if gguf is None:
        raise ValueError(f"no GGUF known for {args.target}: pass --target-gguf (llama.cpp's "
                         f"converter makes one from the HF folder).")
    width = max(len(tokenizer.apply_chat_template(q["messages"], add_generation_prompt=True))
                for q in prompts)
    with llama_server(gguf, args.parallel, args.threads, width + args.max_new_tokens + 8,
                      args.no_repack) as port:
        yield port


@contextmanager
def locked(folder: Path):
    """An exclusive lock on ``folder`` (flock on the directory itself: no lock file is left)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)                                   # closing releases the lock


def make_shards(args, decoder, tokenizer, prompts: list[dict], todo: list[int], manifest: dict,
                port, command: str) -> None:
    """Shard s of ``todo`` is ``prompts[s::shards]``, answered by the engine and saved whole;
    answers.json is rewritten after each, so a killed run resumes at the next."""
    out = Path(args.out)
    bar = tqdm(todo, desc=f"answers ({args.engine})", unit="shard")
    for s in bar:
        shard = prompts[s::args.shards]
        t0 = time.perf_counter()
        rows = make_shard(args.engine, decoder, tokenizer, shard, args, port, s)
        seconds = time.perf_counter() - t0
        save_shard(shard_path(out, s), rows, prompts_key(shard))
        tokens = sum(len(r["ids"]) - r["response_start"] for r in rows)
        entry = {
            "prompts_key": prompts_key(shard), "answers": len(rows), "answer_tokens": tokens,
            "seconds": round(seconds, 1), "tokens_per_s": round(tokens / seconds, 1),
            "engine": args.engine, "dtype": args.dtype if args.engine == "torch" else None,
            "batch": args.regen_batch if args.engine != "llama-cpp" else args.parallel,
            "threads": args.threads, "command": command}
        with locked(out):        # another process may be making other shards of this folder
            path = out / MANIFEST
            if path.is_file():
                manifest["shards"] = json.loads(path.read_text())["shards"]
            manifest["shards"][str(s)] = entry
            write_json(path, manifest, indent=1)
        bar.set_postfix(answer_tokens_per_s=round(tokens / seconds))
        bar.write(f"shard {s}: {len(rows)} answers, {tokens} tokens, {seconds:.0f} s, "
                  f"{tokens / seconds:.0f} answer tokens/s")


def made_figures(manifest: dict, todo: list[int], engine_name: str) -> dict:
    """The folder's shards, answers and answer tokens; and this run's, with their speed."""
    shards = manifest["shards"]
    result = {"shards": len(shards), "answers": sum(v["answers"] for v in shards.values()),
              "answer_tokens": sum(v["answer_tokens"] for v in shards.values())}
    if todo:
        made = sum(shards[str(s)]["answer_tokens"] for s in todo)
        text_s = sum(shards[str(s)]["seconds"] for s in todo)
        result["this_run"] = {"engine": engine_name, "shards": todo, "answer_tokens": made,
                              "seconds": round(text_s, 1),
                              "answer_tokens_per_s": round(made / text_s, 1) if text_s else None}
    return result


def time_features(args, target, decoder, manifest: dict, todo: list[int], result: dict) -> None:
    """--time-features: ``train_data.feature_pass`` over this run's shards (none made: the last
    there) in --feature-dtype, its speed, text and features end to end, and (not fp32) how far
    its features are from the fp32 target's; into ``result``."""
    from ...train_data import feature_pass, in_dtype

    timed = todo or [max(int(s) for s in manifest["shards"])]   # none made: the last there
    data = [r for s in timed for r in load_shard(shard_path(Path(args.out), s))]
    made = sum(manifest["shards"][str(s)]["answer_tokens"] for s in timed)
    text_s = sum(manifest["shards"][str(s)]["seconds"] for s in timed)
    model = (decoder if decoder.dtype == getattr(torch, args.feature_dtype)
             else in_dtype(target, args.feature_dtype))
    t0 = time.perf_counter()
    feats = feature_pass(model, data, args.layer_ids, progress=False)
    seconds = time.perf_counter() - t0
    timing = result["feature_pass"] = {
        "shards": timed, "layer_ids": args.layer_ids, "dtype": args.feature_dtype,
        "seconds": round(seconds, 1),
        "tokens_per_s": round(sum(len(r["ids"]) for r in data) / seconds, 1),
        "answer_tokens_per_s": round(made / seconds, 1)}
    if model is not target:   # how far the cheaper features are from the fp32 target's
        exact = feature_pass(target, data, args.layer_ids, progress=False)
        err = torch.cat([(a["features"].float() - b["features"].float()).norm(dim=-1)
                         / b["features"].float().norm(dim=-1) for a, b in zip(feats, exact)])
        timing["relative_error_mean"] = round(float(err.mean()), 4)
        timing["relative_error_max"] = round(float(err.max()), 4)
    timing["text_answer_tokens_per_s"] = round(made / text_s, 1)
    timing["end_to_end_answer_tokens_per_s"] = round(made / (text_s + seconds), 1)
    if todo:
        result["this_run"]["end_to_end_answer_tokens_per_s"] = round(made / (text_s + seconds), 1)


def main(argv=None) -> dict:
    """Make the shards not made yet (``--make-shards``: the first K only), then what was asked
    for on them: --time-features, --coverage, --check."""
    from ...core.drafter import default_target_layer_ids
    from ...target import load_target
    from ...train_data import in_dtype
    from . import chat_prompts

    args = arguments(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    manifest = open_manifest(args)
    prompts = chat_prompts.chat_training_prompts(args.n_math, args.n_code, args.n_prose,
                                                 args.seed, args.prose_source, args.n_story,
                                                 args.n_task, args.n_chain, args.n_symbolic,
                                                 args.n_wide)
    if args.prompts:
        prompts += file_prompts(args.prompts)
    target, tokenizer = load_target(args.target, dtype=torch.float32)   # features: fp32
    layers = target.config.num_hidden_layers                          # --layer-ids inside them
    args.layer_ids = layers_within(args.layer_ids, layers) or default_target_layer_ids(layers, 3)
    for dtype in ("dtype", "feature_dtype"):                          # auto: bf16 or fp32 here
        setattr(args, dtype, resolved_dtype(getattr(args, dtype), target))
    wanted = args.shards if args.make_shards is None else args.make_shards
    todo = [s for s in range(wanted) if str(s) not in manifest["shards"]
            and (args.only_shards is None or s in args.only_shards)]
    command = "python -m minidflash answers " + " ".join(sys.argv[1:] if argv is None else argv)
    # what makes the text; features and --check always read the fp32 target
    decoder = in_dtype(target, args.dtype) if args.engine == "torch" else target
    with llama_port(args, target, tokenizer, prompts, todo) as port:
        make_shards(args, decoder, tokenizer, prompts, todo, manifest, port, command)
    result = made_figures(manifest, todo, args.engine)
    if args.time_features and manifest["shards"]:
        time_features(args, target, decoder, manifest, todo, result)
    if args.coverage is not None:
        n = len(manifest["shards"])
        if n < 2:
            raise ValueError("--coverage needs two shards or more (the last one is held out)")
        result["coverage"] = coverage(load_answers(out, n - 1), load_shard(shard_path(out, n - 1)),
                                      args.coverage or (4096, 8192, 16384),
                                      target.config.vocab_size)
    if args.check:
        result["check"] = agreement(target, load_answers(out, len(manifest["shards"]))[:args.check])
    print(json.dumps(result, indent=1))
    if args.results:
        write_json(args.results, {"command": command, **result}, indent=1)
    return result


if __name__ == "__main__":
    main()

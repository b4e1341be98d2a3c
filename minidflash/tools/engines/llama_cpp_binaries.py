"""llama.cpp's programs as ``python -m minidflash llama-cpp`` (``llama_cpp.py``) and ``answers``
use them: finding them, their command lines, running them (``llama-server`` too, answering over
HTTP), reading what they print, and llama.cpp's own converter to GGUF.

Not a paper section: the engine people run on their own machines. llama.cpp is optional: only
those commands need it. It is found through ``LLAMA_CPP_DIR`` (a llama.cpp folder holding
``build/bin`` and ``convert_hf_to_gguf.py``) or ``PATH``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from ...files import atomic_path

ENV = "LLAMA_CPP_DIR"
CONVERTER = "convert_hf_to_gguf.py"
PLAIN, SPECULATIVE, BENCH, SERVER = ("llama-completion", "llama-speculative-simple",
                                     "llama-bench", "llama-server")
QUANTIZE = "llama-quantize"      # only for a Q4_0 target (``llama-cpp --target-type Q4_0``)
HOW_TO_GET = (
    "llama.cpp is optional: only `python -m minidflash llama-cpp` and the bench's "
    "llamacpp-plain methods need it. Get a llama.cpp with "
    "DFlash (speculative type draft-dflash): any build since DFlash support landed, e.g. "
    "`git clone https://github.com/ggml-org/llama.cpp`, or the copy vendored in the "
    "llama-cpp-python==0.3.36 source distribution (`pip download --no-deps --no-binary :all: "
    "llama-cpp-python==0.3.36`, unpack it, use vendor/llama.cpp). Build it with `cmake -B build "
    "-DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_EXAMPLES=ON && cmake --build build -j --target "
    f"{PLAIN} {SPECULATIVE} {BENCH} {SERVER}`, then `export {ENV}=<that folder>` (it holds "
    f"build/bin and {CONVERTER}), or put build/bin on PATH.")


class LlamaCppNotFound(FileNotFoundError):
    """A llama.cpp binary or its converter is missing; the message says how to get it."""


class IllegalInstruction(RuntimeError):
    """A llama.cpp program died of SIGILL: a CPU kernel it chose cannot run here (try -nr)."""


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
        statistics draft-dflash: #calls(b,g,a) = 1 20 20, ... dur(b,g,a) = 0.003, 283.161, 0.013 ms

    (the last with ``-lv 4``: the drafter's calls, and "g" their milliseconds).
    tau = n_predict / (n_predict - n_accept): tokens per kept target pass (why: llama_cpp.py)."""
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
    # with -lv 4 (trace) it also prints the drafter's calls and time (b: begin, g: draft, a: accept)
    st = re.search(r"#calls\(b,g,a\) =\s*\d+\s+(\d+)\s+\d+.*dur\(b,g,a\) = [\d.]+, ([\d.]+), ", log)
    out["draft_calls"], out["draft_ms"] = (int(st.group(1)), float(st.group(2))) if st else (None, None)
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
        raise (IllegalInstruction if hint else RuntimeError)(
            f"`{' '.join(cmd[:3])} ...` failed (exit {p.returncode}).{hint} Last lines: {tail}")
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
            pre: str | None = None, outtype: str = "f32") -> dict:
    """A Hugging Face folder (a target, or with ``target_dir`` a drafter in the published DFlash
    layout) -> GGUF (fp32, or the converter's ``outtype``), with llama.cpp's own converter."""
    converter = converter or find_converter()
    args = [model_dir, *(["--target-model-dir", target_dir] if target_dir else []),
            "--outfile", out, "--outtype", outtype]
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


def with_draft_vocab(drafter_gguf: Path, out: Path, token_ids, head_rows,
                     outtype: str = "f32") -> dict:
    """A converted drafter's GGUF, written again with its draft vocabulary in the two tensors
    llama.cpp's DFlash model already reads (its src/models/dflash.cpp): ``d2t`` (I64, the
    target's token id of each draft row) and ``output.weight`` (the drafter's own head: the
    target's lm_head rows for those ids, K x H). llama.cpp then scores K rows per drafted
    position and scatters them into the whole vocabulary (-inf elsewhere). Its converter writes
    these only for DSpark drafters, so they are added here with gguf-py; atomically. The rows
    are stored as ``outtype`` (f32, or q8_0 like the rest of a drafter converted as q8_0)."""
    import gguf
    import numpy as np

    reader = gguf.GGUFReader(drafter_gguf)
    if {"d2t", "output.weight"} & {t.name for t in reader.tensors}:
        raise ValueError(f"{drafter_gguf} already has a head or d2t: convert the drafter again")
    rows = np.ascontiguousarray(np.asarray(head_rows, dtype=np.float32))
    ids = np.asarray(token_ids, dtype=np.int64)
    if rows.ndim != 2 or rows.shape[0] != ids.size:
        raise ValueError(f"head rows {rows.shape} do not match {ids.size} draft token ids")
    with atomic_path(out) as partial:          # a failed write leaves no half file
        writer = gguf.GGUFWriter(partial, reader.fields["general.architecture"].contents())
        for field in reader.fields.values():
            if field.name == "general.architecture" or field.name.startswith("GGUF."):
                continue                                   # written by GGUFWriter itself
            vtype = field.types[0]
            sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
        tensors = [(t.name, t.data, t.tensor_type) for t in reader.tensors]
        head = {"f32": gguf.GGMLQuantizationType.F32,
                "q8_0": gguf.GGMLQuantizationType.Q8_0}[outtype]
        if head != gguf.GGMLQuantizationType.F32:
            rows = gguf.quants.quantize(rows, head)        # (K, bytes of a quantised row)
        tensors += [("output.weight", rows, head), ("d2t", ids, gguf.GGMLQuantizationType.I64)]
        for name, data, kind in tensors:
            writer.add_tensor_info(name, data.shape, data.dtype, data.nbytes, kind)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for _, data, _ in tensors:
            writer.write_tensor_data(data)
        writer.close()
    return {"tensors": len(tensors), "draft_vocab": int(ids.size),
            "mb": round(out.stat().st_size / 2**20, 1)}


def common_args(target_gguf, threads: int, ctx: int, no_repack: bool) -> list:
    """Greedy, no escape processing: the prompt goes as it is (not with -f, which drops the
    final newline of a file: the template's one after "assistant")."""
    return (["-m", target_gguf, "--temp", "0", "--seed", "0", "-t", threads, "-tb", threads,
             "-c", ctx, "--no-escape"] + (["-nr"] if no_repack else []))


def plain_command(tools, target_gguf, prompt, n, threads=1, ctx=2048, no_repack=False):
    return ([tools[PLAIN], *common_args(target_gguf, threads, ctx, no_repack), "-p", prompt,
             "-n", n, "-no-cnv", "--no-display-prompt", "--verbose-prompt"])


def speculative_command(tools, target_gguf, drafter_gguf, prompt, n, n_max, threads=1,
                        ctx=2048, no_repack=False, p_min=0.0):
    """``p_min`` > 0: llama.cpp's ``--spec-draft-p-min``, the block cut at the first drafted
    token whose drafter probability is below it (the same rule as ``verifier``'s ``p_min``)."""
    return ([tools[SPECULATIVE], *common_args(target_gguf, threads, ctx, no_repack),
             "-md", drafter_gguf, "--spec-type", "draft-dflash", "--spec-draft-n-max", n_max,
             *(["--spec-draft-p-min", p_min] if p_min else []),
             "-td", threads, "-tbd", threads, "-lv", 4, "-p", prompt, "-n", n])


def bench_command(tools, target_gguf, threads: list[int], repetitions=5, no_repack=False,
                  widths=(4, 8, 16)):
    return [tools[BENCH], "-m", target_gguf, "-p", ",".join(map(str, widths)), "-n", "32",
            "-t", ",".join(map(str, threads)), "-r", repetitions, "-o", "json",
            *(["--repack", "0"] if no_repack else [])]


# --------------------------------------------------------------------------------------------
# llama.cpp's server
# --------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port: int, path: str, body: dict, timeout: float = 600) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


@contextmanager
def llama_server(gguf: Path, parallel: int, threads: int, slot_ctx: int, no_repack: bool = False):
    """llama-server on the loopback with ``parallel`` slots of ``slot_ctx`` tokens each; yields
    its port and stops it on exit. Waits for /health (loading takes a few seconds)."""
    port = free_port()
    cmd = [find_binary(SERVER), "-m", gguf, "--host", "127.0.0.1", "--port", port,
           "-np", parallel, "-c", parallel * slot_ctx, "-t", threads, "-tb", threads,
           "--seed", "0", *(["-nr"] if no_repack else [])]
    proc = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, errors="replace")
    try:
        for _ in range(600):
            if proc.poll() is not None:
                hint = (" It died of an illegal instruction (a CPU kernel this machine cannot "
                        "run, e.g. AMX weight repacking): pass --no-repack."
                        if proc.returncode in (-signal.SIGILL, 128 + signal.SIGILL) else "")
                raise RuntimeError(f"llama-server exited ({proc.returncode}).{hint} Last lines: "
                                   f"{' | '.join(proc.stderr.read().strip().splitlines()[-4:])}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        else:
            raise RuntimeError("llama-server did not become healthy in 5 minutes")
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def server_answer(port: int, prompt: list[int], max_new_tokens: int, stops: list[int]) -> list[int]:
    """One greedy answer (token ids), ending with its stop token when it stopped on one.

    The server leaves the end-of-generation token out of ``tokens``; it stopped on one when
    ``stop_type`` is "eos", and the target's first stop id (<|im_end|>) is appended, as
    ``generate()`` would have emitted it (any other end token is kept by ``--check``'s count)."""
    r = post(port, "/completion", {
        "prompt": prompt, "n_predict": max_new_tokens, "temperature": 0.0, "top_k": 1,
        "cache_prompt": False, "return_tokens": True, "stream": False, "seed": 0})
    tokens = list(r["tokens"])
    if r.get("stop_type") == "eos" and (not tokens or tokens[-1] not in stops):
        tokens.append(stops[0])
    cut = next((k + 1 for k, t in enumerate(tokens) if t in stops), len(tokens))
    return tokens[:cut][:max_new_tokens]

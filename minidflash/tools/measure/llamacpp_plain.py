"""llama.cpp's plain greedy decoding as a bench method: ``bench --methods plain llamacpp-plain/bf16``.

Not a paper section: the engine people run on their own machines, as the yardstick of "fast".
``llamacpp-plain/T`` decodes every prompt of the run with ``llama-completion`` (greedy; the prompt
is our chat template as text, ``target.chat_text``; ``-n`` the run's new tokens) of the SAME
target as a GGUF of type T, in turn with the other methods, prompt by prompt:

    bf16, f32, q8_0  the target's HF folder converted by llama.cpp's converter
                     (``engines/llama_cpp.typed_target``: made once into the user cache's
                     llama_cpp folder, never left half written)
    q4_1             the packaged GGUF (``hub.PACKAGED``) the target is dequantised from:
                     SmolLM2's Q4_1; a target without one is refused

It runs at torch's thread count (``--threads``) and is timed by llama.cpp's own clock: TPOT is
its ``eval time / runs``, the generated tokens less the first (which the prompt pass gives), so
a decode step with its sampling left out (ours: decode time over every new token, sampling and
Python in). tau = 1. Its output is text: it is identical when it equals our plain decode's new
ids decoded by the tokenizer (special tokens skipped); where not, the text is tokenized again
for ``methods.divergence``. Its row also carries llama.cpp's tokens/s, the new tokens, whether
llama.cpp read our prompt ids, one prompt's command and the GGUF's name; every row, its speed
over each llamacpp-plain (``speedup_vs_llamacpp``).

llama.cpp is optional (found through ``LLAMA_CPP_DIR`` or PATH: ``llama_cpp_binaries``).
``setup`` runs when the bench loads its methods, before any prompt: it finds llama.cpp (missing:
``LlamaCppNotFound`` with how to get it), makes the GGUF and tries one short decode; where that
dies of an illegal instruction (weights repacked for a CPU kernel the machine does not grant,
e.g. AMX), the method runs with ``-nr`` and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..engines import llama_cpp_binaries as bins
from ..engines.llama_cpp import shown, target_files, typed_target

# spelling -> engines.llama_cpp.TARGET_TYPES ("packaged": the GGUF the target is read from)
TYPES = {"bf16": "bf16", "f32": "f32", "q8_0": "q8_0", "q4_1": "packaged"}
NAME = "llamacpp-plain"


def gguf_type(spec: str) -> str:
    """'llamacpp-plain/bf16' -> 'bf16' (a key of TYPES); anything else: ValueError."""
    name, _, kind = spec.partition("/")
    if name != NAME or kind not in TYPES:
        raise ValueError(f"method {spec!r}: llama.cpp's plain decoding is {NAME}/T, T one of "
                         f"{', '.join(TYPES)} (q4_1: the packaged GGUF the target is read from)")
    return kind


def gguf_dir() -> Path:
    from ...hub import user_cache_dir
    return user_cache_dir() / "llama_cpp"


@dataclass
class LlamaCppPlain:
    """One llamacpp-plain method, ready: the binary, the GGUF, how it was made, whether -nr."""
    kind: str                   # a key of TYPES
    binary: Path
    gguf: Path
    made: str                   # the conversion's command, or where the packaged file came from
    no_repack: bool = False
    why: str | None = None      # why -nr

    @property
    def name(self) -> str:      # the GGUF's file name, under its target's folder where made here
        under = self.gguf.parent.parent == gguf_dir()
        return f"{self.gguf.parent.name}/{self.gguf.name}" if under else self.gguf.name

    def __str__(self) -> str:   # what the bench records as the method's decoding
        return f"{NAME}/{self.kind}: llama-completion, greedy, {self.name}" + (
            ", -nr" if self.no_repack else "")

    def describe(self, target=None, drafter=None) -> str:
        return (f"llama.cpp's plain greedy decoding (llama-completion) of {self.name}, at "
                f"torch's thread count, timed by its eval time per run"
                + (f"; with -nr: {self.why}" if self.no_repack else ""))

    def command(self, prompt: str, n: int, threads: int, ctx: int = 2048) -> list:
        return bins.plain_command({bins.PLAIN: self.binary}, self.gguf, prompt, n,
                                  threads=threads, ctx=ctx, no_repack=self.no_repack)

    def decode(self, tokenizer, messages: list[dict], ids, max_new_tokens: int) -> dict:
        """One prompt (``ids``: our chat_ids of ``messages``): a record for ``run_methods``."""
        import torch

        from ...target import chat_text, stop_ids

        threads = torch.get_num_threads()
        cmd = self.command(chat_text(tokenizer, messages), max_new_tokens, threads,
                           ctx=max(2048, ids.shape[1] + max_new_tokens + 1))
        (speed, theirs, (text, stopped)), reruns = bins.decode(cmd, lambda q: (
            bins.parse_plain(q.stderr), bins.prompt_ids(q.stderr), bins.plain_text(q.stdout)))
        runs = speed["runs"]
        new = tokenizer(text, add_special_tokens=False)["input_ids"]
        if stopped:                      # it ended at an end-of-generation token: ours emits it
            new.append(stop_ids(tokenizer)[0])
        return {"text": text, "new": new, "tpot": speed["eval_ms"] / 1e3 / runs if runs else 0.0,
                "llama": {"eval_ms": speed["eval_ms"], "runs": runs, "new_tokens": runs + 1,
                          "tokens_per_s": speed["tokens_per_s"], "stopped": stopped,
                          "prompt_ids_match": theirs == ids[0].tolist(), "reruns": reruns,
                          "threads": threads, "gguf": self.name, "command": shown(cmd),
                          "conversion": self.made, "no_repack": self.no_repack, "why": self.why}}


def setup(kind: str, target, environ=None) -> LlamaCppPlain:
    """llamacpp-plain/``kind`` for ``target`` (as ``load_target`` gave it), before any prompt:
    llama.cpp found (else ``LlamaCppNotFound``), the GGUF made, one short decode tried."""
    binary = bins.find_binary(bins.PLAIN, environ)
    name = str(getattr(target, "load_source", None) or target.name_or_path)
    folder, packaged = target_files(name, target)
    if TYPES[kind] == "packaged":
        if packaged is None or kind.lower() not in packaged.name.lower():
            has = f"has {packaged.name}" if packaged else "has no packaged GGUF (hub.PACKAGED)"
            raise ValueError(f"{NAME}/{kind} runs the packaged {kind.upper()} GGUF the target is "
                             f"read from, and {name} {has}: use {NAME}/bf16 (converted here)")
        gguf, made = packaged, f"packaged: {packaged.name} (hub.PACKAGED)"
    else:
        converter = bins.find_converter(environ)
        out = gguf_dir() / Path(name).name      # a folder per target: a packaged one's is "fp32"
        out.mkdir(parents=True, exist_ok=True)
        # the tiny target's tokenizer (Qwen2's split regex) has no hash in the converter's table
        pre = "qwen2" if bins.split_regex(folder) == bins.PRE_TOKENIZER_REGEX["qwen2"] else None
        gguf, conversion = typed_target(folder, out, TYPES[kind], converter, pre)
        made = conversion["command"]
    method = LlamaCppPlain(kind, binary, gguf, made)
    try_decode(method)
    return method


def try_decode(method: LlamaCppPlain) -> None:
    """Two tokens of a short prompt: llama.cpp runs this GGUF here. Died of an illegal
    instruction: again with -nr (no weight repacking), kept if that runs."""
    import torch

    cmd = lambda: method.command("Hello", 2, torch.get_num_threads())
    try:
        bins.run(cmd())
    except bins.IllegalInstruction:
        method.no_repack, method.why = True, ("without it llama-completion died of an illegal "
                                              "instruction here (repacked weights' CPU kernel)")
        bins.run(cmd())


def record(p: dict, got: dict, ref: list[int], tokenizer) -> None:
    """A llama.cpp decode into its method's lists (``run_methods``' ``per``): its TPOT, tau 1,
    and whether its text is our plain decode's (``ref``: its new ids) decoded."""
    got["same"] = got["text"] == tokenizer.decode(ref, skip_special_tokens=True)
    got["llama"].update(text_equal=got["same"], plain_new_tokens=len(ref))
    p["tpot"].append(got["tpot"])
    p["tau"].append(1.0)
    p.setdefault("llama", []).append(got["llama"])


def summarise(out: dict, per: dict) -> dict:
    """``run_methods``' per-method figures with, for each llamacpp-plain row, llama.cpp's record
    (its GGUF, one prompt's command, its own tokens/s, the new tokens, prompt by prompt), and
    for every row its speed over each llamacpp-plain (its TPOT over the row's)."""
    ours = [s for s, p in per.items() if p.get("llama")]
    for spec in ours:
        rows = per[spec]["llama"]
        first = rows[0]
        keep = ("gguf", "conversion", "threads", "no_repack", "why")
        out[spec]["llamacpp"] = {
            **{k: first[k] for k in keep}, "command": first["command"],
            "tokens_per_s": 1e3 * sum(r["runs"] for r in rows) / sum(r["eval_ms"] for r in rows)
            if sum(r["eval_ms"] for r in rows) else None,
            "new_tokens": [r["new_tokens"] for r in rows],
            "texts_equal": sum(r["text_equal"] for r in rows),
            "prompt_ids_match": all(r["prompt_ids_match"] for r in rows),
            "reruns": sum(r["reruns"] for r in rows),
            "per_prompt": [{k: r[k] for k in ("eval_ms", "runs", "new_tokens", "plain_new_tokens",
                                              "stopped", "text_equal", "prompt_ids_match")}
                           for r in rows]}
        out[spec]["new_tokens"] = sum(r["new_tokens"] for r in rows)
    for s in out.values():
        if ours:
            s["speedup_vs_llamacpp"] = {spec: out[spec]["tpot_ms"] / s["tpot_ms"]
                                        if s["tpot_ms"] else None for spec in ours}
    return out


def versus(s: dict) -> str:
    """A row's speed over each llamacpp-plain, as the bench's table prints it ('' without)."""
    x = s.get("speedup_vs_llamacpp") or {}
    return ("  over llama.cpp " + ", ".join(f"{spec.split('/')[-1]} {v:.2f}x"
                                            for spec, v in x.items() if v)) if x else ""

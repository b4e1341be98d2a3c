"""The target: a frozen causal LM, loaded through transformers (paper section 3).

DFlash drafts for a *fixed, frozen* target. minidflash talks to it only through transformers'
``AutoModelForCausalLM`` and a tokenizer with a chat template, so the shipped tiny Qwen3
(``data/target``, built by ``minidflash.tools.tiny_target``) and ``Qwen/Qwen3-8B`` go through the
same three functions: ``load_target``, ``chat_ids`` (the prompt in non-thinking mode, as the
published drafters were trained) and ``stop_ids``.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from .config import TINY_TARGET_DIR
from .hub import not_found, offline

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


def load_target(name_or_path: str | os.PathLike | None = None, dtype=torch.float32,
                device: str | torch.device = "cpu"):
    """(model, tokenizer) of the target: None is the shipped tiny Qwen3, else a hub id or dir.

    The model is put in eval mode with gradients off: the target is frozen in DFlash.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = TINY_TARGET_DIR if name_or_path is None else name_or_path
    local = Path(path).is_dir()
    if local and not (Path(path) / "config.json").is_file():
        raise FileNotFoundError(f"{path} has no config.json: point load_target at a directory "
                                f"written by save_pretrained, or pass None for the tiny target.")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=offline())
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=offline())
    except OSError as e:
        if local:
            raise
        raise not_found(str(name_or_path), TINY_TARGET_DIR) from e
    model.to(device).eval().requires_grad_(False)
    return model, tokenizer


def chat_ids(tokenizer, messages: list[dict], device="cpu") -> torch.Tensor:
    """Token ids (1, S) of a conversation with the generation prompt, in non-thinking mode."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                         enable_thinking=False)
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    return ids.to(device)


def stop_ids(tokenizer) -> list[int]:
    """The tokens that end an assistant turn (<|im_end|>, and <|endoftext|> for safety)."""
    ids = [tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]
    return [i for i in ids if isinstance(i, int) and i >= 0 and i != tokenizer.unk_token_id]



"""Building the tiny target: its tokenizer, its training, its evaluation (a tool, not the core).

The tiny target (``data/target``) is what every notebook and test decodes with:

* tokenizer: a byte-level BPE in Qwen's style (the Qwen2/3 split regex, so every digit is its own
  token), Qwen3's chat special tokens, ``<|MASK|>`` for the drafter, and the Qwen3-style chat
  template of ``minidflash.target`` in non-thinking mode (the empty ``<think>`` block);
* model: transformers' ``Qwen3ForCausalLM`` with 6 layers, hidden 256, 4 query / 2 key-value heads;
* data: the two domains of ``corpus`` (arithmetic word problems and stdlib code).

``python -m minidflash train-target --steps 1500`` trains it; ``python -m minidflash eval-target``
evaluates the shipped one (data/README.md records time and loss).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ...core.paper import PAPER
from ...paths import PROMPTS_DIR, TINY_TARGET_DIR
from ...files import save_into
from ...target import CHAT_TEMPLATE, chat_ids, load_target, stop_ids
from ...verifier import speculative_generate
from ..make_data import corpus
from ..common import boxed, read_jsonl, repeated_4gram_share, write_jsonl

# The regex Qwen2 / Qwen3 split text with before byte-level BPE: digits one by one, words with
# their leading space, punctuation runs, newlines.
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
                  PAPER.mask_token]

TINY_CONFIG = dict(hidden_size=256, intermediate_size=768, num_hidden_layers=6,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                   max_position_embeddings=2048, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                   tie_word_embeddings=True)


def build_tokenizer(texts: list[str], vocab_size: int = 4096):
    """A Qwen-style byte-level BPE trained on texts, wrapped for transformers."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>",
                                   additional_special_tokens=SPECIAL_TOKENS[1:])
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = TINY_CONFIG["max_position_embeddings"]
    return fast


def _conversation_text(tokenizer, example: dict) -> str:
    return tokenizer.apply_chat_template(example["messages"], tokenize=False)


def make_splits(seed: int = 0, n_arith: int = 16000):
    """(train conversations, held-out prompts per domain) for the tiny target."""
    held_arith = corpus.held_out_arithmetic(seed)
    train_arith = corpus.arithmetic_examples(
        n_arith, seed=seed, exclude={e["messages"][0]["content"] for e in held_arith})
    train_code, held_code = corpus.code_examples()
    rng = random.Random(seed)
    rng.shuffle(held_code)
    return train_arith + train_code * 2, {"arithmetic": held_arith, "code": held_code[:128]}


def train_target(out_dir: str | os.PathLike = TINY_TARGET_DIR, steps: int = 1800,
                 batch_size: int = 8, seq_len: int = 256, lr: float = 3e-3, seed: int = 0,
                 threads: int | None = None) -> dict:
    """Train the tiny Qwen3 target from scratch and save it (tokenizer included) to out_dir.

    Conversations are packed into rows of seq_len tokens (separated by <|endoftext|>) and
    trained with next-token loss: AdamW, linear warmup, cosine decay.
    """
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    t0 = time.time()
    train, held = make_splits(seed)
    random.Random(seed).shuffle(train)
    texts = [_conversation_text_plain(e) for e in train]
    tokenizer = build_tokenizer(texts)
    eot = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    stream = []
    for e in tqdm(train, desc="tokenize", mininterval=5):
        stream += tokenizer(_conversation_text(tokenizer, e), add_special_tokens=False)["input_ids"]
        stream.append(eot)
    data = torch.tensor(stream[: len(stream) // seq_len * seq_len]).view(-1, seq_len)  # (N, S)
    n_val = max(8, len(data) // 50)
    val, data = data[:n_val], data[n_val:]

    config = Qwen3Config(vocab_size=len(tokenizer), bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, **TINY_CONFIG)
    model = Qwen3ForCausalLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps))))

    @torch.no_grad()
    def val_loss() -> float:
        model.eval()
        out = sum(model(input_ids=val[i:i + 16], labels=val[i:i + 16]).loss.item() * len(val[i:i + 16])
                  for i in range(0, len(val), 16)) / len(val)
        model.train()
        return out

    history = {"step": [], "train_loss": [], "val_step": [], "val_loss": []}
    gen = torch.Generator().manual_seed(seed)
    model.train()
    bar = tqdm(range(steps), desc="train target", mininterval=10)
    for step in bar:
        rows = data[torch.randint(len(data), (batch_size,), generator=gen)]  # (b, S)
        loss = model(input_ids=rows, labels=rows).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        history["step"].append(step)
        history["train_loss"].append(loss.item())
        if step % 200 == 0 or step == steps - 1:
            history["val_step"].append(step)
            history["val_loss"].append(val_loss())
            bar.set_postfix(loss=f"{loss.item():.3f}", val=f"{history['val_loss'][-1]:.3f}")

    model.eval()
    info = {"steps": steps, "batch_size": batch_size, "seq_len": seq_len, "lr": lr,
            "train_tokens": int(data.numel()), "val_tokens": int(val.numel()),
            "params": sum(p.numel() for p in model.parameters()),
            "final_val_loss": history["val_loss"][-1], "wall_s": round(time.time() - t0, 1),
            "torch_threads": torch.get_num_threads()}

    def save(tmp: Path) -> None:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "training.json").write_text(json.dumps({"info": info, "history": history}))

    save_into(out_dir, save)     # file by file, config.json last; other files in out_dir stay
    for domain, rows in held.items():
        write_jsonl([corpus.as_prompt(e) for e in rows], PROMPTS_DIR / f"{domain}.jsonl")
    return info


@torch.no_grad()
def evaluate_target(model=None, tokenizer=None, n: int = 64, max_new_tokens: int = 256) -> dict:
    """Greedy answers to n held-out prompts per domain: arithmetic accuracy and the share of
    repeated 4-grams (loops) per domain."""
    if model is None:
        model, tokenizer = load_target()
    out = {}
    for domain in ("arithmetic", "code"):
        rows = read_jsonl(PROMPTS_DIR / f"{domain}.jsonl")[:n]
        rep, right, lengths = [], [], []
        for row in rows:
            r = speculative_generate(model, None, chat_ids(tokenizer, row["messages"]),
                                     max_new_tokens=max_new_tokens, block_size=1,
                                     stop_token_ids=stop_ids(tokenizer))
            ids = r.new_ids.tolist()
            rep.append(repeated_4gram_share(ids))
            lengths.append(len(ids))
            if "answer" in row:
                right.append(boxed(tokenizer.decode(ids)) == row["answer"])
        out[domain] = {"prompts": len(rows), "repeated_4gram_share": sum(rep) / len(rep),
                       "mean_new_tokens": sum(lengths) / len(lengths),
                       "accuracy": sum(right) / len(right) if right else None}
    return out


def _conversation_text_plain(example: dict) -> str:
    """Conversation text for BPE training (the special tokens are added by the trainer)."""
    return "".join(f"{m['role']}\n{m['content']}\n" for m in example["messages"])


def main(argv=None, evaluate_only: bool = False) -> None:
    """``train-target`` (or ``eval-target``: evaluate_only), each with the flags it reads."""
    from ..flags import add_flags
    from ..common import (add_threads, at_least, check_decoding, count, or_error, out_dir,
                          positive)

    if evaluate_only:
        p = argparse.ArgumentParser(prog="python -m minidflash eval-target",
                                    description="The tiny target's greedy answers to held-out "
                                                "prompts: arithmetic accuracy, loops per domain.")
        p.add_argument("--target", default=None,
                       help="hub id or directory (default: the tiny target, data/target)")
        p.add_argument("--n", type=count, default=64,
                       help="held-out prompts per domain, the first n (default 64)")
        add_threads(p)
        add_flags(p, only=("max_new_tokens",), defaults={"max_new_tokens": 256},
                  why="plain greedy decoding, the target alone")
        a = p.parse_args(argv)
        torch.set_num_threads(a.threads)
        model, tokenizer = or_error(p.error, f"--target {a.target}", load_target, a.target)
        check_decoding(p.error, model, None, {"max_new_tokens": a.max_new_tokens},
                       [chat_ids(tokenizer, r["messages"]) for d in ("arithmetic", "code")
                        for r in read_jsonl(PROMPTS_DIR / f"{d}.jsonl")[:a.n]])
        print(json.dumps(evaluate_target(model, tokenizer, a.n, a.max_new_tokens), indent=1))
        return
    p = argparse.ArgumentParser(prog="python -m minidflash train-target",
                                description="Train the tiny Qwen3 target and its tokenizer.")
    p.add_argument("--out", type=out_dir, default=str(TINY_TARGET_DIR),
                   help="the target's folder (default data/target; other files there stay)")
    p.add_argument("--steps", type=at_least(0), default=1800, help="optimizer steps (default 1800)")
    p.add_argument("--batch-size", type=count, default=8, help="sequences a step (default 8)")
    p.add_argument("--seq-len", type=at_least(2), default=256,
                   help="tokens a training sequence (default 256)")
    p.add_argument("--lr", type=positive, default=3e-3, help="peak learning rate (default 3e-3)")
    p.add_argument("--seed", type=int, default=0, help="data order and weights (default 0)")
    a = p.parse_args(argv)
    print(json.dumps(train_target(a.out, a.steps, a.batch_size, a.seq_len, a.lr, a.seed), indent=1))


if __name__ == "__main__":
    main()

"""Small random targets and drafters shared by the tests."""

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from minidflash.drafter import DFlashDrafter, make_drafter_config


def tiny_target(seed=0, vocab=97, layers=4, hidden=64, heads=4, kv_heads=2, dtype=torch.float32):
    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, head_dim=hidden // heads,
                      max_position_embeddings=512, tie_word_embeddings=False)
    model = Qwen3ForCausalLM(cfg).to(dtype).eval()
    # Random init gives nearly uniform logits; sharpen them so greedy has clear winners and
    # sampling has a distribution worth testing.
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
    return model.requires_grad_(False)


def random_drafter(target, seed=0, layers=1, block_size=16, num_features=3, mask_token_id=None):
    torch.manual_seed(seed + 1000)
    cfg = make_drafter_config(target.config, num_hidden_layers=layers, block_size=block_size,
                              mask_token_id=target.config.vocab_size - 1 if mask_token_id is None
                              else mask_token_id, num_features=num_features)
    return DFlashDrafter(cfg).to(target.dtype).eval().requires_grad_(False)


class OracleDrafter(DFlashDrafter):
    """Drafts the target's known greedy continuation, corrupted at random.

    A random drafter is almost never accepted; this one is, partially, so the tests exercise
    every acceptance length, cache crop and bonus token. It still runs the real drafter
    forward (its draft is then overwritten) so the drafter's cache path is exercised too.
    """

    def __init__(self, base: DFlashDrafter, reference: torch.Tensor, p_wrong: float, seed: int):
        super().__init__(base.config)
        self.load_state_dict(base.state_dict())
        self.to(next(base.parameters()).dtype).eval().requires_grad_(False)
        self.reference, self.p_wrong = reference[0], p_wrong
        self.rng = torch.Generator().manual_seed(seed)

    def draft(self, target, last_token, target_hidden, start, cache, block_size=None, context_ids=None):
        guess = super().draft(target, last_token, target_hidden, start, cache, block_size)
        B = guess.shape[1] + 1
        truth = self.reference[start + 1:start + B]
        out = guess.clone()
        out[0, :len(truth)] = truth
        wrong = torch.rand(B - 1, generator=self.rng) < self.p_wrong
        out[0, wrong] = (out[0, wrong] + 1) % (self.config.vocab_size - 1)
        return out

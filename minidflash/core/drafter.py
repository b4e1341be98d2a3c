"""The DFlash drafter: a small block-diffusion model conditioned on the target (paper section 3).

Glossary used in every shape comment: N batch, B block size, n blocks, S context tokens,
C new context tokens, H hidden size, L_f target features, Hq / Hkv query / key-value heads,
D head dim, V vocabulary.

1. Target features. The hidden states of L_f target layers, evenly spaced, are concatenated and
   fused into one *context feature* per token:
       c_t = RMSNorm( W_fc [h_t^(l_1) ; ... ; h_t^(l_Lf)] )          W_fc: (H, L_f*H), no bias
   "Layer id l" is the output of decoder layer l, i.e. transformers' ``hidden_states[l + 1]``.
2. KV injection. Every drafter layer is a Qwen3 decoder layer whose queries come only from the
   block tokens x, while its keys and values are
       K = k_norm([k_proj(c) ; k_proj(x)]),   V = [v_proj(c) ; v_proj(x)]
   with the layer's own projections: the target's context enters *every* layer, not just the
   first one's input.
3. Positions are absolute (RoPE): context token t keeps position t, block slot j sits at
   anchor + j.
4. The block input is [last committed token, MASK, ..., MASK]; the drafter predicts slots
   1..B-1 in ONE forward pass, through the target's own frozen embedding and lm_head (the
   drafter owns neither).

The drafter's KV cache holds the K/V of context features only; block K/V are recomputed every
step, so there is nothing to crop after a draft.

The published format on disk (config.json + model.safetensors, read by SGLang and vLLM) is
the lab's: ``minidflash/checkpoints.py`` loads and saves it.

A draft vocabulary (optional; EAGLE-3's and FR-Spec's reduced vocabulary): the drafter may score
only K token ids ``draft_vocab``, a slice of the target's lm_head rows. Verification still scores
all V tokens, so decoding stays lossless; a token outside the slice is only emitted by the target.
"""

from __future__ import annotations

import weakref

import torch
from einops import rearrange
from torch import nn
from transformers import DynamicCache, Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import (Qwen3MLP, Qwen3RMSNorm,
                                                      Qwen3RotaryEmbedding, rotate_half)

from .attention import ATTENTION
from .paper import PAPER


def default_target_layer_ids(num_target_layers: int, num_features: int) -> list[int]:
    """L_f evenly spaced target layers from 1 to T-3 (T // 2 when L_f = 1); section 2."""
    if num_features == 1:
        return [num_target_layers // 2]
    span = num_target_layers - 4
    ids = [round(1 + i * span / (num_features - 1)) for i in range(num_features)]
    return [min(max(i, 0), num_target_layers - 1) for i in ids]  # only bites when T < 5


def target_features(hidden_states, target_layer_ids: list[int]) -> torch.Tensor:
    """Concatenate the chosen layers' outputs: tuple of (N, S, H) -> (N, S, L_f*H)."""
    return torch.cat([hidden_states[i + 1] for i in target_layer_ids], dim=-1)


def make_drafter_config(target_config, num_hidden_layers: int = 1,
                        block_size: int = PAPER.block_size,
                        mask_token_id: int | None = None,
                        target_layer_ids: list[int] | None = None,
                        num_features: int | None = None, **overrides) -> Qwen3Config:
    """A drafter config shaped after the target's (same hidden size, heads and RoPE).

    The L_f target layers: target_layer_ids if given, else num_features evenly spaced ones;
    with neither, L_f = num_hidden_layers, as in the published checkpoints (5 and 5).
    """
    t = target_config
    if target_layer_ids is None:
        target_layer_ids = default_target_layer_ids(t.num_hidden_layers,
                                                     num_features or num_hidden_layers)
    fields = {**target_shape(t), **overrides}
    config = Qwen3Config(num_hidden_layers=num_hidden_layers, **fields)
    config.architectures = ["DFlashDraftModel"]
    config.block_size = block_size
    config.num_target_layers = t.num_hidden_layers
    config.dflash_config = {"mask_token_id": mask_token_id, "target_layer_ids": list(target_layer_ids)}
    return config


def target_shape(t) -> dict:
    """The Qwen3Config fields a drafter copies from its target's config: hidden size, heads,
    head dim, norm eps, RoPE (``rope_parameters``, or ``rope_theta`` from older configs),
    positions and vocabulary. Shared by both drafters (DFlash and ``ar_drafter``)."""
    fields = dict(hidden_size=t.hidden_size, intermediate_size=t.intermediate_size,
                  num_attention_heads=t.num_attention_heads,
                  num_key_value_heads=t.num_key_value_heads,
                  head_dim=getattr(t, "head_dim", t.hidden_size // t.num_attention_heads),
                  rms_norm_eps=t.rms_norm_eps, max_position_embeddings=t.max_position_embeddings,
                  vocab_size=t.vocab_size, tie_word_embeddings=False)
    rope = getattr(t, "rope_parameters", None)
    fields.update({"rope_parameters": dict(rope)} if rope else {"rope_theta": getattr(t, "rope_theta", 1e6)})
    return fields


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of x (N, h, T, D) with cos/sin (N, T, D)."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return x * cos + rotate_half(x) * sin


class DrafterAttention(nn.Module):
    """Qwen3 attention whose keys/values are [context ; block] (KV injection)."""

    def __init__(self, config: Qwen3Config, layer_idx: int):
        super().__init__()
        H, D = config.hidden_size, config.head_dim
        self.layer_idx, self.head_dim = layer_idx, D
        self.n_heads, self.n_kv_heads = config.num_attention_heads, config.num_key_value_heads
        bias = getattr(config, "attention_bias", False)
        self.q_proj = nn.Linear(H, self.n_heads * D, bias=bias)
        self.k_proj = nn.Linear(H, self.n_kv_heads * D, bias=bias)
        self.v_proj = nn.Linear(H, self.n_kv_heads * D, bias=bias)
        self.o_proj = nn.Linear(self.n_heads * D, H, bias=bias)
        self.q_norm = Qwen3RMSNorm(D, eps=config.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(D, eps=config.rms_norm_eps)

    def forward(self, x, c, cos, sin, cache=None, anchors=None, block_size=None, backend="sdpa",
                key_mask=None):
        # x: (N, Q, H) block slots; c: (N, C, H) new context features; cos/sin: (N, C + Q, D)
        # key_mask: (N, S) context keys a ragged batch may see (cached + new), or None: all
        N, Q, _ = x.shape
        C, D = c.shape[1], self.head_dim
        heads = lambda t: rearrange(t, "n t (h d) -> n h t d", d=D)            # (N, h, T, D)
        q = self.q_norm(heads(self.q_proj(x)))                                 # (N, Hq, Q, D)
        k = self.k_norm(heads(self.k_proj(torch.cat([c, x], 1))))              # (N, Hkv, C+Q, D)
        v = heads(self.v_proj(torch.cat([c, x], 1)))                           # (N, Hkv, C+Q, D)
        q = apply_rope(q, cos[:, C:], sin[:, C:])
        k = apply_rope(k, cos, sin)
        k_ctx, k_blk = k[:, :, :C], k[:, :, C:]
        v_ctx, v_blk = v[:, :, :C], v[:, :, C:]
        if cache is not None:  # append the new context K/V; the block's are never stored
            k_ctx, v_ctx = cache.update(k_ctx, v_ctx, self.layer_idx)
        k = torch.cat([k_ctx, k_blk], dim=2)                                   # (N, Hkv, S+Q, D)
        v = torch.cat([v_ctx, v_blk], dim=2)
        if key_mask is not None:                   # the block's own slots are always visible
            key_mask = torch.cat([key_mask, key_mask.new_ones(N, Q)], 1)       # (N, S+Q)
        out = ATTENTION[backend](q, k, v, anchors, k_ctx.shape[2], block_size or Q,
                                 key_mask=key_mask)                                        # (N, Hq, Q, D)
        return self.o_proj(rearrange(out, "n h q d -> n q (h d)"))


class DrafterLayer(nn.Module):
    """A Qwen3 decoder layer (pre-RMSNorm, attention, SwiGLU MLP) with KV injection."""

    def __init__(self, config: Qwen3Config, layer_idx: int):
        super().__init__()
        self.self_attn = DrafterAttention(config, layer_idx)
        self.mlp = Qwen3MLP(config)
        self.input_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, x, c, cos, sin, **attn_kwargs):
        x = x + self.self_attn(self.input_layernorm(x), c, cos, sin, **attn_kwargs)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDrafter(nn.Module):
    """The drafter. Owns no embedding and no lm_head: those are the target's (frozen)."""

    def __init__(self, config: Qwen3Config):
        super().__init__()
        self.config = config
        assert all(t == "full_attention" for t in getattr(config, "layer_types", None) or []), \
            "full attention only (checkpoints.py refuses a sliding window, saying why)"
        dflash = getattr(config, "dflash_config", None) or {}
        B = getattr(config, "block_size", None)
        self.block_size = dflash.get("block_size", PAPER.block_size) if B is None else B
        assert isinstance(self.block_size, int) and self.block_size >= 2, "block_size >= 2"
        self.mask_token_id = dflash.get("mask_token_id")
        self.target_layer_ids = list(dflash.get("target_layer_ids") or default_target_layer_ids(
            config.num_target_layers, config.num_hidden_layers))
        H = config.hidden_size
        self.layers = nn.ModuleList(DrafterLayer(config, i) for i in range(config.num_hidden_layers))
        self.fc = nn.Linear(len(self.target_layer_ids) * H, H, bias=False)
        self.hidden_norm = Qwen3RMSNorm(H, eps=config.rms_norm_eps)
        self.norm = Qwen3RMSNorm(H, eps=config.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(config)
        self.backend = "sdpa"   # a key of ATTENTION: "sdpa", "triton" (the lab adds "flex")
        # (K,) sorted token ids the drafter scores, or None for all V; not in the state dict
        # (the published tensors stay exactly as they are): see set_draft_vocab
        self.register_buffer("draft_vocab", None, persistent=False)
        self._head_rows = None  # (weakref to lm_head weight, its version, vocab, rows): the slice
        self.head_product = nn.functional.linear   # the head's product (lean.drafting: packed)
        self.apply(self._init_weights)

    def set_draft_vocab(self, token_ids) -> None:
        """Draft over these token ids only (no repeats; checkpoints.check_draft_vocab says what
        is wrong with a list); None drafts over all V."""
        if token_ids is None:
            self.draft_vocab = None
            return
        ids = torch.as_tensor(token_ids).long().sort().values   # ascending: argmax ties as in V
        assert ids.dim() == 1 and ids.numel() and (ids[1:] != ids[:-1]).all(), "1-D, no repeats"
        assert 0 <= int(ids[0]) and int(ids[-1]) < self.config.vocab_size, "ids in the vocabulary"
        self.draft_vocab = ids.to(self.fc.weight.device)

    def logits(self, target, h: torch.Tensor) -> torch.Tensor:
        """The target's lm_head on drafter states h (..., H): (..., V), or (..., K) over the draft
        vocabulary when one is set (index i is token ``draft_vocab[i]``), by ``head_product`` on h
        as a matrix (a 3-D slice would be multiplied as a batch, copying the head every call)."""
        head = target.get_output_embeddings()
        flat = h.to(head.weight.dtype).reshape(-1, h.shape[-1])   # a drafter may run in another dtype
        if self.draft_vocab is None:
            return self.head_product(flat, head.weight, head.bias).view(*h.shape[:-1], -1)
        bias = None if head.bias is None else head.bias[self.draft_vocab]
        if head.weight.requires_grad:    # a head that trains is sliced afresh every call
            rows = head.weight[self.draft_vocab]
            return nn.functional.linear(flat, rows, bias).view(*h.shape[:-1], -1)
        w, version, vocab, rows = self._head_rows or (lambda: None, None, None, None)
        if (w() is not head.weight or version != head.weight._version or vocab is not self.draft_vocab
                or rows.dtype != head.weight.dtype or rows.device != head.weight.device
                or (rows.is_inference() and not torch.is_inference_mode_enabled())):
            rows = head.weight.detach().index_select(0, self.draft_vocab)     # (K, H), once
            self._head_rows = (weakref.ref(head.weight), head.weight._version, self.draft_vocab, rows)
        return self.head_product(flat, rows, bias).view(*h.shape[:-1], -1)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=getattr(self.config, "initializer_range", 0.02))
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, noise_embedding, target_hidden, position_ids, cache=None, anchors=None,
                key_mask=None):
        """Drafter hidden states for the block slots.

        noise_embedding: (N, Q, H) target embeddings of the block tokens (Q = n*B slots)
        target_hidden:   (N, C, L_f*H) concatenated target features of C new context tokens
        position_ids:    (N, C + Q) absolute positions of [new context ; block slots]
        cache:           a DynamicCache holding the K/V of earlier context (inference), or None
        anchors:         (N, n) anchor of each block when training n blocks at once, or None for
                         one block after all the context (inference)
        key_mask:        (N, S) bool over [cached ; new] context, False on a ragged batch's
                         holes (verifier.speculative_generate_batch), or None: all visible
        returns          (N, Q, H); apply the target's lm_head for logits.
        """
        dtype = self.fc.weight.dtype          # the target's features may come in another dtype
        noise_embedding, target_hidden = noise_embedding.to(dtype), target_hidden.to(dtype)
        c = self.hidden_norm(self.fc(target_hidden))                           # (N, C, H)
        cos, sin = self.rotary_emb(noise_embedding, position_ids)              # (N, C+Q, D)
        x = noise_embedding
        for layer in self.layers:
            x = layer(x, c, cos, sin, cache=cache, anchors=anchors,
                      block_size=self.block_size if anchors is not None else None,
                      backend=self.backend, key_mask=key_mask)
        return self.norm(x)

    @torch.inference_mode()
    def block_logits(self, target, last_token: torch.Tensor, target_hidden: torch.Tensor,
                     start, cache, block_size: int | None = None,
                     context_mask=None) -> torch.Tensor:
        """The drafter's logits at slots 1..B-1 after last_token (N,) at start: (N, B-1, V), or
        (N, B-1, K) over the draft vocabulary (index i is token ``draft_vocab[i]``, see
        ``token_ids``). One pass; what ``draft`` and a tree of drafts (tree.py) read.

        target_hidden (N, C, L_f*H) holds the features of the C committed tokens that the cache
        has not seen yet (positions start - C .. start - 1). A ragged batch (rows at different
        lengths) passes start as (N,) positions, one per row, and context_mask (N, S) bool over
        [cached ; new] context, False on holes (batch.py).
        """
        B = block_size or self.block_size
        N, C = target_hidden.shape[:2]
        block = torch.full((N, B), self.mask_token_id, dtype=torch.long, device=last_token.device)
        block[:, 0] = last_token
        pos = (torch.as_tensor(start, device=block.device).view(-1, 1)
               + torch.arange(-C, B, device=block.device)).expand(N, -1)        # (N, C+B)
        h = self(target.get_input_embeddings()(block), target_hidden, pos, cache=cache,
                 key_mask=context_mask)
        return self.logits(target, h[:, 1:])                                   # (N, B-1, V)

    def token_ids(self, index: torch.Tensor) -> torch.Tensor:
        """Full-vocabulary token ids of indices into the drafter's logits."""
        return index if self.draft_vocab is None else self.draft_vocab[index]

    def draft(self, target, last_token: torch.Tensor, target_hidden: torch.Tensor,
              start, cache, block_size: int | None = None, context_ids=None,
              context_mask=None, with_probs: bool = False):
        """Greedy block draft: ids (N, B-1) for slots 1..B-1 after last_token (N,) at start.

        context_ids (the tokens whose features target_hidden holds) is unused: the block
        drafter reads the context through its features only (an autoregressive drafter,
        ``ar_drafter.py``, also embeds them). with_probs: also return q (N, B-1), the drafter's
        probability of each drafted token (softmax over its vocabulary), which the confidence
        cut reads (verifier.confident_prefix). The slots are drafted in parallel, so q_j is the
        drafter's belief in slot j alone, not given the slots before it.
        """
        logits = self.block_logits(target, last_token, target_hidden, start, cache, block_size,
                                   context_mask)                               # (N, B-1, V)
        if not with_probs:
            return self.token_ids(logits.argmax(-1))                           # (N, B-1)
        q, best = torch.softmax(logits.float(), -1).max(-1)                     # (N, B-1) each
        return self.token_ids(best), q

    def new_cache(self) -> DynamicCache:
        return DynamicCache()

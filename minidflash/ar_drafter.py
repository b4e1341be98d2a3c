r"""The rival: an autoregressive drafter in the style of EAGLE-3 (Li et al., arXiv 2503.01840).

DFlash drafts a block in one pass. EAGLE-3 drafts ONE token per pass and feeds its own hidden
state forward, so k drafted tokens cost k drafter passes (the DFlash paper's figure 3 measures
exactly this). What is followed here, and what is simplified:

1. Features (EAGLE-3's multi-layer feature fusion). Three target layers, low / middle / high, concatenated and
   fused by one linear layer: ``g_t = W_fc [h_t^(l_1) ; h_t^(l_2) ; h_t^(l_3)]``, W_fc (H, 3H).
   Here the layers are the DFlash drafter's (``default_target_layer_ids``), so both drafters
   read the same features.
2. One decoder layer whose input at row t is ``[RMSNorm(embed(x_{t+1})) ; RMSNorm(g_t)]`` (2H):
   the q/k/v projections take 2H inputs, the residual stream is g_t, then the usual
   post-attention norm, SwiGLU MLP and residual. Its output ``h_t`` (before the final norm)
   stands for the target's feature at t+1; ``lm_head(norm(h_t))`` predicts x_{t+2}.
3. Chain drafting (simplified from EAGLE-3's dynamic tree): the first draft uses the target's
   features of the committed context; draft j+1 feeds ``(h, embed(d_j))`` back in, one pass per
   token, causal attention over the context rows and the chain so far.
4. Training-time test (EAGLE-3's name for it): during training the layer is unrolled for
   ``ttt_steps`` steps. Step 0 is row t = (g_t, x_{t+1}) -> x_{t+2}; step j feeds step j-1's
   output at row t with token x_{t+1+j} at position t+j and predicts x_{t+2+j}. A query of step
   j at row t sees the step-0 keys of rows <= t (the committed context) and its own row's keys
   of steps 1..j (its own chain): exactly what draft j+1 sees at inference. The loss sums the
   steps' cross-entropies with weights 0.8^j (EAGLE-3's code).

Simplified: a chain instead of a tree (both drafters are verified by the same chain verifier);
hard labels from target-regenerated text instead of the target's soft distribution (with
greedy regenerated data they agree on the argmax); the target's own lm_head instead of a
reduced draft vocabulary (the tiny target has 4,096 tokens). Like the DFlash drafter it owns no
embedding and no lm_head.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from einops import rearrange, repeat
from torch import nn
from transformers import DynamicCache, Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP, Qwen3RMSNorm, Qwen3RotaryEmbedding

from .core.drafter import apply_rope, default_target_layer_ids, target_shape
from .files import recover, write_together
from .checkpoints import check_fits
from .target import check_layer_ids, check_target, read_json, resolve_dtype
from .weights import check_config_values, check_finite, check_shapes, read_weights, whole

TTT_DECAY = 0.8          # EAGLE-3's per-step loss weight
MAX_DRAFT = 16           # longest chain the verifier may ask for (block size 17)


def make_ar_config(target_config, target_layer_ids=None, max_draft: int = MAX_DRAFT) -> Qwen3Config:
    """A one-layer config shaped after the target's (same hidden size, heads and RoPE)."""
    config = Qwen3Config(num_hidden_layers=1, **target_shape(target_config))
    config.architectures = ["ARDrafter"]
    config.block_size = max_draft + 1
    T = target_config.num_hidden_layers
    config.num_target_layers = T
    config.target_layer_ids = list(target_layer_ids or default_target_layer_ids(T, 3))
    return config


class ARLayer(nn.Module):
    """EAGLE-3's decoder layer: attention over [embedding ; feature] (2H in), residual on g."""

    def __init__(self, config: Qwen3Config):
        super().__init__()
        H, D = config.hidden_size, config.head_dim
        self.n_heads, self.n_kv_heads, self.head_dim = (config.num_attention_heads,
                                                        config.num_key_value_heads, D)
        self.q_proj = nn.Linear(2 * H, self.n_heads * D, bias=False)
        self.k_proj = nn.Linear(2 * H, self.n_kv_heads * D, bias=False)
        self.v_proj = nn.Linear(2 * H, self.n_kv_heads * D, bias=False)
        self.o_proj = nn.Linear(self.n_heads * D, H, bias=False)
        self.input_layernorm = Qwen3RMSNorm(H, eps=config.rms_norm_eps)   # on the embedding
        self.hidden_norm = Qwen3RMSNorm(H, eps=config.rms_norm_eps)       # on the feature g
        self.post_attention_layernorm = Qwen3RMSNorm(H, eps=config.rms_norm_eps)
        self.mlp = Qwen3MLP(config)

    def qkv(self, emb, g, cos, sin):
        """q (N, Hq, T, D), k and v (N, Hkv, T, D) of rows with embeddings emb and features g."""
        x = torch.cat([self.input_layernorm(emb), self.hidden_norm(g)], -1)   # (N, T, 2H)
        heads = lambda t: rearrange(t, "N T (h D) -> N h T D", D=self.head_dim)   # h: Hq or Hkv
        q = apply_rope(heads(self.q_proj(x)), cos, sin)
        k = apply_rope(heads(self.k_proj(x)), cos, sin)
        return q, k, heads(self.v_proj(x))

    def finish(self, attn, g):
        """attn (N, Hq, T, D) -> the layer's output h (N, T, H), residual stream g."""
        h = g + self.o_proj(rearrange(attn, "N Hq T D -> N T (Hq D)"))
        return h + self.mlp(self.post_attention_layernorm(h))


class ARDrafter(nn.Module):
    """EAGLE-3-style chain drafter with the verifier's drafter interface (``draft``, ``new_cache``)."""

    def __init__(self, config: Qwen3Config):
        super().__init__()
        self.config = config
        self.block_size = int(config.block_size)
        self.target_layer_ids = list(config.target_layer_ids)
        self.mask_token_id = None                     # an AR drafter has no mask token
        H = config.hidden_size
        self.fc = nn.Linear(len(self.target_layer_ids) * H, H, bias=False)
        self.midlayer = ARLayer(config)
        self.norm = Qwen3RMSNorm(H, eps=config.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(config)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=getattr(config, "initializer_range", 0.02))

    def rope(self, x, positions):
        return self.rotary_emb(x, positions)                                   # cos, sin (N, T, D)

    # ---------------------------------------------------------------------------------------
    # Training: the unrolled layer (training-time test)
    # ---------------------------------------------------------------------------------------
    def unrolled_logits(self, target, ids, features, ttt_steps: int) -> list[torch.Tensor]:
        """Logits of every unrolled step: a list of ttt_steps tensors (N, S - 2 - j, V)."""
        head = target.get_output_embeddings()
        return [head(h) for h in self.unrolled_hidden(target, ids, features, ttt_steps)]

    def unrolled_hidden(self, target, ids, features, ttt_steps: int) -> list[torch.Tensor]:
        """The final-normed hidden states of every unrolled step, (N, S - 2 - j, H) each; the
        target's lm_head turns them into logits (the trainer applies it to labelled rows only).

        ids (N, S) tokens; features (N, S, L_f*H) target features. Step j at row t reads token
        x_{t+1+j} and predicts x_{t+2+j}, so its labels are ``ids[:, 2 + j:]``; row t of step j
        exists while that label does (t + 2 + j < S).
        """
        N, S = ids.shape
        embed, layer = target.get_input_embeddings(), self.midlayer
        T = S - 2                                                   # rows t = 0..S-3
        g = self.fc(features[:, :T])                                # (N, T, H): step 0's stream
        pos = torch.arange(T, device=ids.device).expand(N, -1)
        causal = torch.ones(T, T, dtype=torch.bool, device=ids.device).tril()   # rows <= t
        keys, values, out = [], [], []
        group = layer.n_heads // layer.n_kv_heads
        for j in range(ttt_steps):
            tok = ids[:, 1 + j:S - 1]                               # x_{t+1+j}, (N, T - j)
            Tj = tok.shape[1]
            if Tj < 1:
                break
            g = g[:, :Tj]
            cos, sin = self.rope(g, pos[:, :Tj] + j)
            q, k, v = layer.qkv(embed(tok), g, cos, sin)            # (N, h, Tj, D)
            # each kv head serves `group` query heads: (N, Hkv, Tj, D) -> (N, Hq, Tj, D)
            keys.append(repeat(k, "N Hkv T D -> N (Hkv g) T D", g=group))
            values.append(repeat(v, "N Hkv T D -> N (Hkv g) T D", g=group))
            scale = layer.head_dim ** -0.5
            s0 = (q @ keys[0][:, :, :Tj].mT) * scale                # (N, Hq, Tj, Tj): context
            s0 = s0.masked_fill(~causal[:Tj, :Tj], float("-inf"))
            diag = [(q * kk[:, :, :Tj]).sum(-1, keepdim=True) * scale for kk in keys[1:]]  # own chain
            p = torch.softmax(torch.cat([s0, *diag], -1), -1)
            attn = p[..., :Tj] @ values[0][:, :, :Tj]
            for i, vv in enumerate(values[1:]):
                attn = attn + p[..., Tj + i:Tj + i + 1] * vv[:, :, :Tj]
            g = layer.finish(attn, g)                               # (N, Tj, H): fed to step j+1
            out.append(self.norm(g))                                # (N, Tj, H)
        return out

    # ---------------------------------------------------------------------------------------
    # Inference: chain drafting with a context-only KV cache
    # ---------------------------------------------------------------------------------------
    def new_cache(self) -> DynamicCache:
        return DynamicCache()

    def _attend(self, emb, g, positions, cache):
        """One pass over rows (emb, g) at positions, appending their K/V to the cache."""
        layer = self.midlayer
        cos, sin = self.rope(g, positions)
        q, k, v = layer.qkv(emb, g, cos, sin)
        k, v = cache.update(k, v, 0)
        T, L = q.shape[2], k.shape[2]
        mask = torch.ones(T, L, dtype=torch.bool, device=q.device).tril(L - T)  # causal
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                              enable_gqa=layer.n_heads != layer.n_kv_heads)
        return layer.finish(attn, g)

    @torch.inference_mode()
    def draft(self, target, last_token, target_hidden, start, cache, block_size=None,
              context_ids=None, with_probs: bool = False, p_min: float = 0.0):
        """Greedy chain draft of k = block_size - 1 tokens after last_token (N,) at ``start``.

        target_hidden (N, C, L_f*H): features of the C committed tokens the cache has not seen
        (positions start-C..start-1); context_ids (N, C): those tokens. Row t pairs g_t with
        x_{t+1}, so the new rows read tokens [context_ids[1:], last_token]. Costs k passes.
        with_probs: also return q (N, k), the drafter's probability of each drafted token. p_min:
        the confidence cut's threshold: the chain stops after the first token with q < p_min
        (returned, so the verifier's own rule cuts it), and the passes after it are not spent.
        """
        k = (block_size or self.block_size) - 1
        N, C = target_hidden.shape[:2]
        embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
        tokens = torch.cat([context_ids[:, 1:], last_token.view(N, 1)], 1)           # (N, C)
        positions = torch.arange(start - C, start, device=tokens.device).expand(N, -1)
        h = self._attend(embed(tokens), self.fc(target_hidden), positions, cache)[:, -1:]
        context = cache.get_seq_length()
        drafts, probs = [], []
        for j in range(k):
            logits = lm_head(self.norm(h))                                             # (N, 1, V)
            if with_probs:
                q, d = torch.softmax(logits.float(), -1).max(-1)                       # (N, 1)
                probs.append(q)
            else:
                d = logits.argmax(-1)                                                  # (N, 1)
            drafts.append(d)
            if j + 1 < k and not (with_probs and bool((q < p_min).all())):  # one more pass
                pos = torch.full((N, 1), start + j, device=d.device)
                h = self._attend(embed(d), h, pos, cache)
            else:
                break
        if cache.get_seq_length() > context:              # keep only the context rows
            cache.crop(context - cache.get_seq_length())
        ids = torch.cat(drafts, 1)                                                     # (N, <=k)
        return (ids, torch.cat(probs, 1)) if with_probs else ids

    # ---------------------------------------------------------------------------------------
    # On disk: config.json + model.safetensors (EAGLE-3's tensor names: fc, midlayer.*, norm)
    # ---------------------------------------------------------------------------------------
    def save_pretrained(self, save_directory: str | os.PathLike) -> None:
        """config.json + model.safetensors as one save, all or nothing whatever cuts it
        (``files.write_together``: a save that raises leaves the old drafter, one killed is
        finished or undone by ``load_ar_drafter``); other files in the folder are left alone (as
        ``checkpoints.save_drafter``)."""
        from safetensors.torch import save_file

        cfg = self.config.to_dict()
        cfg.update(architectures=["ARDrafter"], block_size=self.block_size,
                   target_layer_ids=self.target_layer_ids,
                   num_target_layers=self.config.num_target_layers)
        text = json.dumps(cfg, indent=2, sort_keys=True, default=str) + "\n"
        state = {k: v.detach().contiguous() for k, v in self.state_dict().items()
                 if not k.startswith("rotary_emb")}
        write_together(save_directory, {
            "model.safetensors": lambda tmp: save_file(state, str(tmp), {"format": "pt"}),
            "config.json": lambda tmp: tmp.write_text(text)})


def load_ar_drafter(path, target=None, dtype=None, device=None) -> ARDrafter:
    """Load an AR drafter written by ``ARDrafter.save_pretrained``; dtype and device: None takes
    the target's (fp32 and the CPU without a target), else as ``load_drafter`` spells them.

    Checked as ``load_drafter`` is, each error naming the file and what is wrong: config.json (a
    JSON object of an ARDrafter with num_target_layers and distinct target_layer_ids, sizes, the
    RoPE base and epsilon: ``weights.check_config_values``), model.safetensors (readable, float,
    exactly the ARDrafter's tensors, each of the config's shape, no NaN or inf) and, with a
    target, the fit (``checkpoints.check_fits``)."""
    recover(path)                            # a save that was cut: finished or undone, and said
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    check_target(target, "load_ar_drafter")
    like = next(target.parameters()) if target is not None else None
    device = device or (like.device if like is not None else "cpu")
    dtype = None if dtype in (None, "auto") else resolve_dtype(dtype, 0, device)  # load_target's
    dtype = dtype or (like.dtype if like is not None else torch.float32)         # spellings
    path = Path(path).expanduser()
    file, weights = path / "config.json", path / "model.safetensors"
    if path.is_file():
        raise FileNotFoundError(f"{str(path)!r} is a file, not a folder: load_ar_drafter takes the "
                                f"folder ARDrafter.save_pretrained wrote (config.json and "
                                f"model.safetensors).")
    lacking = [f.name for f in (file, weights) if not f.is_file()]
    if lacking:
        raise FileNotFoundError(f"{path} lacks {' and '.join(lacking)}: an AR drafter folder needs "
                                f"config.json and model.safetensors (write them with "
                                f"ARDrafter.save_pretrained).")
    raw = read_json(file, "an AR drafter's config (ARDrafter.save_pretrained writes one)")
    if not isinstance(raw, dict):
        raise ValueError(f"{file} must hold a JSON object (an AR drafter's config), got a "
                         f"{type(raw).__name__}.")
    if raw.get("architectures") != ["ARDrafter"]:
        raise ValueError(f"{file} names architectures {raw.get('architectures')}, not "
                         f"['ARDrafter']; load DFlash drafters with "
                         f"minidflash.checkpoints.load_drafter.")
    for key in ("architectures", "model_type", "transformers_version"):
        raw.pop(key, None)
    T, ids, B = raw.get("num_target_layers"), raw.get("target_layer_ids"), raw.get("block_size")
    if not whole(T) or ids is None:
        raise ValueError(f"{file} is not an AR drafter config: it needs num_target_layers (an "
                         f"integer >= 1, got {T!r}) and target_layer_ids (got {ids!r}), the "
                         f"target layers it reads; save it again with ARDrafter.save_pretrained.")
    check_layer_ids(ids, T, file, "target_layer_ids")
    if not whole(B, 2):
        raise ValueError(f"{file}: block_size must be an integer >= 2 (the longest chain + 1; "
                         f"{MAX_DRAFT + 1} by default), got {B!r}.")
    check_config_values(raw, file)
    try:
        drafter = ARDrafter(Qwen3Config(**raw))
    except Exception as e:            # transformers' validators raise their own kinds
        raise ValueError(f"{file} does not make an ARDrafter: {' '.join(str(e).split())}") from e
    read_weights([weights])           # readable, float tensors only (weights.py)
    try:
        state = load_file(str(weights))
    except (SafetensorError, OSError) as e:
        raise ValueError(f"{weights} is not a readable safetensors file ({e}); save it again "
                         f"with ARDrafter.save_pretrained.") from None
    expected = {k: v for k, v in drafter.state_dict().items() if not k.startswith("rotary_emb")}
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ValueError(f"{weights} does not hold the tensors of an ARDrafter: missing "
                         f"{missing[:5]}, unexpected {unexpected[:5]}; save it again with "
                         f"ARDrafter.save_pretrained.")
    check_shapes(state, expected, lambda name: weights, file, "transposed, or hidden_size, heads, "
                 "head_dim, intermediate_size or target_layer_ids changed")
    drafter.load_state_dict(state, strict=False)
    drafter.to(device=device, dtype=dtype).eval().requires_grad_(False)
    check_finite({k: v for k, v in drafter.state_dict().items() if k in state}, lambda k: weights)
    if target is not None:
        try:
            check_fits(drafter, target)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None
    return drafter

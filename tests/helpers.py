"""Small random targets and drafters shared by the tests."""

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from minidflash.core.drafter import DFlashDrafter, make_drafter_config


PUBLISHED_TENSORS = ["fc.weight", "hidden_norm.weight", "norm.weight"]      # + these per layer:
PUBLISHED_LAYER_TENSORS = [f"{n}.weight" for n in [
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "self_attn.q_norm", "self_attn.k_norm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
    "input_layernorm", "post_attention_layernorm"]]


def published_names(layers: int) -> set[str]:
    """The tensor names of a published DFlash drafter (z-lab/Qwen3-8B-DFlash-b16) with layers."""
    return set(PUBLISHED_TENSORS) | {f"layers.{i}.{n}" for i in range(layers)
                                     for n in PUBLISHED_LAYER_TENSORS}


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


def record_decoding(target, drafter, input_ids, max_new_tokens, **kwargs):
    """``speculative_generate`` through the real drafter and loop, with what it did recorded.

    Returns (result, calls, layer_outputs). ``calls[k]`` is step k's ``draft()`` call: ``start``,
    the features it received (``hidden``, (1, C, L_f*H)), the drafter cache's length before and
    after it, the ``positions`` and the ``block`` token ids the drafter forward was given, and the
    ``draft`` it returned. ``layer_outputs[f][l]`` is the output of target decoder layer l (for
    each l in the drafter's target_layer_ids) in target forward f: 0 the prefill, then verifies.
    The hooks see transformers' layer modules, so the target runs its own forward (lean=False);
    tests/test_lean.py holds the lean pass to the same states, bit for bit.
    """
    from minidflash.verifier import speculative_generate

    calls, layer_outputs, current = [], [], {}
    real_draft, real_forward = drafter.draft, drafter.forward
    embed = target.get_input_embeddings()

    def draft(target_, last_token, target_hidden, start, cache, block_size=None, context_ids=None):
        call = {"start": start, "hidden": target_hidden.clone(), "cache_before": cache.get_seq_length()}
        current["call"] = call
        def embedded(module, args, out):  # the drafter embeds the block once per draft
            call.setdefault("block", args[0].clone())
        hook = embed.register_forward_hook(embedded)
        try:
            out = real_draft(target_, last_token, target_hidden, start, cache, block_size,
                             context_ids=context_ids)
        finally:
            hook.remove()
        call.update(cache_after=cache.get_seq_length(), draft=out.clone())
        calls.append(call)
        return out

    def forward(noise_embedding, target_hidden, position_ids, *args, **kw):
        current["call"].setdefault("positions", position_ids.clone())
        return real_forward(noise_embedding, target_hidden, position_ids, *args, **kw)

    def keep(layer_id):
        def hook(module, args, out):
            layer_outputs[-1][layer_id] = (out[0] if isinstance(out, tuple) else out).clone()
        return hook

    hooks = [target.register_forward_pre_hook(lambda m, args: layer_outputs.append({}))]
    hooks += [target.model.layers[l].register_forward_hook(keep(l)) for l in drafter.target_layer_ids]
    drafter.draft, drafter.forward = draft, forward
    try:
        result = speculative_generate(target, drafter, input_ids, max_new_tokens=max_new_tokens,
                                      record_steps=True, **{"lean": False, **kwargs})
    finally:
        del drafter.draft, drafter.forward
        for h in hooks:
            h.remove()
    return result, calls, layer_outputs


# --------------------------------------------------------------------------------------------
# A shipped drafter's recorded tau (<drafter dir>/expected_tau.json)
# --------------------------------------------------------------------------------------------

TAU_MARGIN = 0.05        # float noise across machines, not a bug: one step more or less is ~0.15


from minidflash.tools.common import weights_sha256  # noqa: E402  (one definition: the results files' too)


def check_recorded_tau(drafter_dir, taus: dict, record_command: str) -> None:
    """taus {prompt name: tau} agree with expected_tau.json, recorded for these very weights."""
    import json

    expected_path = drafter_dir / "expected_tau.json"
    expected = json.loads(expected_path.read_text())
    assert expected["drafter_sha256"] == weights_sha256(drafter_dir), (
        f"{drafter_dir.parent.name}/{drafter_dir.name}/model.safetensors changed since "
        f"{expected_path.name} was recorded: record it again with `{record_command}`")
    for name, tau in expected["tau"].items():
        assert abs(taus[name] - tau) <= TAU_MARGIN, (
            f"{name}: tau {taus[name]:.3f}, recorded {tau:.3f} (margin {TAU_MARGIN}): the draft "
            f"path changed; if on purpose, record again with `{record_command}`")


def record_tau(drafter_dir, taus: dict, record_command: str, **about) -> dict:
    """Write expected_tau.json for the drafter's current weights; ``about``: how it was measured."""
    import json

    out = {"command": record_command, **about, "drafter_sha256": weights_sha256(drafter_dir),
           "tau": {name: round(t, 4) for name, t in taus.items()}}
    (drafter_dir / "expected_tau.json").write_text(json.dumps(out, indent=1) + "\n")
    return out


def exact_stopped_distribution(target, ids, vocab: int, n_new: int, stop: int, temperature: float) -> dict:
    """P(output | prompt) of every output of up to n_new tokens that ends at its first ``stop``
    (or has n_new tokens), summed from the target's own softmax over all vocab**n_new
    continuations. Only for tiny vocabularies: the exact distribution sampling tests compare with."""
    import itertools

    seqs = torch.tensor(list(itertools.product(range(vocab), repeat=n_new)))  # (V**n, n)
    with torch.no_grad():
        logits = target(torch.cat([ids.expand(len(seqs), -1), seqs], 1)).logits
    logp = torch.log_softmax(logits.double() / temperature, -1)[:, ids.shape[1] - 1:-1]  # (V**n, n, V)
    p_seq = logp.gather(-1, seqs[:, :, None])[..., 0].sum(-1).exp()
    probs = {}
    for seq, p in zip(seqs.tolist(), p_seq.tolist()):
        out = tuple(seq[:seq.index(stop) + 1] if stop in seq else seq)
        probs[out] = probs.get(out, 0.0) + p
    return probs


LOOPS = ["plain", "chain", "tree", "batch"]


def decode_on(loop, target, drafter, ids, **fields):
    """One decode of ids (1, S) by one of the loops (LOOPS): plain decoding, the chain, a small
    tree, or a batch of the prompt twice (row 0 returned)."""
    from minidflash.verifier import speculative_generate, speculative_generate_batch
    extra = {"plain": dict(block_size=1), "chain": {}, "tree": dict(
        tree={"node_budget": 6, "top_k": 2}), "batch": {}}[loop]
    if loop == "batch":
        return speculative_generate_batch(target, drafter, ids.repeat(2, 1), **extra, **fields)[0]
    return speculative_generate(target, drafter, ids, **extra, **fields)

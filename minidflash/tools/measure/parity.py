"""Numerical parity of our drafter and decode loop with the authors' reference implementation.

    python -m minidflash parity --reference /path/to/checkout   # a folder holding dflash/

A random fp32 Qwen3 target and a drafter with random weights (RMSNorm gains too, so a misplaced
norm cannot hide behind a gain of 1) are shared: our ``save_drafter`` writes the drafter in
the published format and the reference ``DFlashDraftModel`` loads that same file. A random
drafter is never accepted, so it is first fitted for a few Adam steps to the target's greedy
text, and (c) also decodes prefixes of that text: acceptance lengths from 1 to B then occur.

(a) one block after a prompt, no cache: drafter hidden states (N, B, H) and logits (N, B, V);
(b) the same through the KV caches: a prefill, then new context chunks of several sizes;
(c) greedy decoding, reference ``dflash_generate`` against ``speculative_generate``, several
    prompts and block sizes: output ids, acceptance lengths, and every draft step's hidden states.
Each side extracts its own target features. Pass: max abs diff <= 1e-5, ids and lengths equal.
The figures go to ``data/results/parity.json`` (``--out``), with the reference's commit.

Adapted in the reference, the math untouched: its ``cache.crop(length)`` (keep ``length``
positions) raises on transformers 5, which takes minus the number to drop, so its
``DynamicCache`` is swapped for a subclass that accepts the old call; its timer synchronises
CUDA, replaced by a CPU clock without a GPU. It also decodes while ``start < prompt +
max_new_tokens``, so once exactly max_new_tokens tokens exist it runs one more verify pass whose
tokens are all cut away; ``speculative_generate`` skips that pass, which is not compared.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import DynamicCache, Qwen3Config, Qwen3ForCausalLM

from ...paths import RESULTS_DIR
from ...core.drafter import DFlashDrafter, make_drafter_config, target_features
from ...checkpoints import load_drafter, save_drafter
from ...files import write_json
from ...verifier import speculative_generate
from ..common import at_least, out_file
from ..flags import add_flags

TOLERANCE = 1e-5


def build_models(vocab=4096, block_size=8, drafter_layers=2, seed=0):
    """A random 6-layer Qwen3 target (hidden 256, 4 q / 2 kv heads, head_dim 64) and a drafter."""
    torch.manual_seed(seed)
    target = Qwen3ForCausalLM(Qwen3Config(
        vocab_size=vocab, hidden_size=256, intermediate_size=768, num_hidden_layers=6,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=2048,
        rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=True)).eval().requires_grad_(False)
    config = make_drafter_config(target.config, num_hidden_layers=drafter_layers,
                                 block_size=block_size, mask_token_id=vocab - 1, num_features=3)
    drafter = DFlashDrafter(config)
    with torch.no_grad():
        for name, p in drafter.named_parameters():
            gain = name.endswith("norm.weight")
            p.copy_(1 + 0.3 * torch.randn_like(p) if gain else 0.05 * torch.randn_like(p))
    return target, drafter


class LegacyCropCache(DynamicCache):
    """A DynamicCache whose crop(length) keeps the first length positions (transformers 4)."""

    def crop(self, max_length: int) -> None:
        if max_length > 0:  # the old meaning, as "drop the last k" (0: nothing to drop)
            max_length = min(0, max_length - self.get_seq_length())
        super().crop(max_length)


def fit(target, drafter, steps: int, seed: int = 0) -> torch.Tensor:
    """A few Adam steps of the drafter's loss on the target's greedy text (8, 40), returned."""
    g = torch.Generator().manual_seed(seed)
    B, vocab = drafter.block_size, target.config.vocab_size - 1
    prompts = torch.randint(vocab, (8, 8), generator=g)                         # (8, 8)
    seqs = target.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=False,
                           max_new_tokens=32, min_new_tokens=32, pad_token_id=0)  # (8, 40)
    feats = target_features(target(seqs, output_hidden_states=True).hidden_states,
                            drafter.target_layer_ids)                           # (8, 40, L_f*H)
    embed, head = target.get_input_embeddings(), target.get_output_embeddings()
    opt = torch.optim.Adam(drafter.parameters(), lr=3e-3)
    with torch.enable_grad():
        for _ in range(steps):
            a = int(torch.randint(8, seqs.shape[1] - B + 1, (1,), generator=g))  # the anchor
            block = torch.full((len(seqs), B), drafter.mask_token_id)           # (8, B)
            block[:, 0] = seqs[:, a]
            h = drafter(embed(block), feats[:, :a], torch.arange(a + B).expand(len(seqs), -1))
            loss = F.cross_entropy(head(h[:, 1:]).flatten(0, 1), seqs[:, a + 1:a + B].flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
    drafter.eval().requires_grad_(False)
    return seqs


def load_reference(reference_dir: Path, drafter_dir: Path, attention: str = "sdpa"):
    """The reference DFlashDraftModel holding the weights that our save_drafter wrote."""
    from safetensors.torch import load_file
    sys.path.insert(0, str(reference_dir))
    import dflash.model as ref
    ref.DynamicCache = LegacyCropCache
    if not torch.cuda.is_available():  # its timer synchronises CUDA; timing only
        ref._cuda_time = time.perf_counter
    raw = json.loads((drafter_dir / "config.json").read_text())
    for key in ("architectures", "auto_map", "model_type"):
        raw.pop(key, None)
    model = ref.DFlashDraftModel(Qwen3Config(**raw))
    model.load_state_dict(load_file(str(drafter_dir / "model.safetensors")), strict=True)
    model.config._attn_implementation = attention      # its attention kernel; ours is SDPA
    return ref, model.float().eval().requires_grad_(False)


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


@torch.no_grad()
def compare_drafter(ref, target, ours, theirs, ids: torch.Tensor, chunks: list[int], cached: bool):
    """Draft a block after each context chunk of ids (N, S): max diffs (hidden, logits).

    The block after chunk k holds [ids at its position, MASK, ...]; without cache, pass one chunk.
    """
    N, B = ids.shape[0], ours.block_size
    hidden = target(ids, output_hidden_states=True).hidden_states
    f_ours = target_features(hidden, ours.target_layer_ids)                       # (N, S, L_f*H)
    f_ref = ref.extract_context_feature(hidden, theirs.target_layer_ids)          # (N, S, L_f*H)
    c_ours, c_ref = (ours.new_cache(), LegacyCropCache()) if cached else (None, None)
    dh = dl = 0.0
    start = 0
    for C in chunks:
        start += C                                   # the block's slot 0 sits at `start`
        block = torch.full((N, B), ours.mask_token_id)
        block[:, 0] = ids[:, start]
        emb = target.get_input_embeddings()(block)                                # (N, B, H)
        new = slice(start - C, start)                # the chunk's context features (N, C, L_f*H)
        pos = torch.arange(start - C, start + B).expand(N, -1)                    # (N, C + B)
        h_ours = ours(emb, f_ours[:, new], pos, cache=c_ours)                     # (N, B, H)
        h_ref = theirs(position_ids=pos, noise_embedding=emb, target_hidden=f_ref[:, new],
                       past_key_values=c_ref, use_cache=cached, is_causal=False)  # (N, B, H)
        if cached:
            c_ref.crop(start)                        # as dflash_generate: drop the block's K/V
        dh = max(dh, max_diff(h_ours, h_ref))
        dl = max(dl, max_diff(target.lm_head(h_ours), target.lm_head(h_ref)))
    return dh, dl


def compare_generate(ref, target, ours, theirs, prompt, max_new_tokens, block_size):
    """(c) Greedy decoding of prompt (1, S): (ids equal, acceptance lengths equal, max diff of
    the drafters' hidden states over all draft steps, our acceptance lengths)."""
    calls = {ours: [], theirs: []}                  # every draft step's output (1, B, H)
    hooks = [m.register_forward_hook(lambda m, args, out: calls[m].append(out)) for m in calls]
    try:
        mine = speculative_generate(target, ours, prompt, max_new_tokens=max_new_tokens,
                                    block_size=block_size)
        other = ref.dflash_generate(theirs, target, prompt, max_new_tokens, stop_token_ids=None,
                                    temperature=0.0, block_size=block_size, return_stats=True)
    finally:
        for h in hooks:
            h.remove()
    lengths = list(other.acceptance_lengths)
    if sum(lengths[:-1]) == max_new_tokens - 1:     # its extra verify pass, see the docstring
        lengths = lengths[:-1]
    dh = max(max_diff(a, b) for a, b in zip(calls[ours], calls[theirs]))
    return (torch.equal(mine.output_ids, other.output_ids), mine.acceptance_lengths == lengths,
            dh, mine.acceptance_lengths)


def reference_commit(reference_dir: Path, given: str | None) -> str | None:
    """The reference's commit: as given, else read from its git checkout (None if neither)."""
    if given:
        return given
    run = subprocess.run(["git", "-C", str(reference_dir), "rev-parse", "HEAD"],
                         capture_output=True, text=True)
    return run.stdout.strip() if run.returncode == 0 else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minidflash parity",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--reference", type=Path, required=True,
                        help="a checkout of the reference implementation (holds dflash/)")
    parser.add_argument("--attention", choices=("sdpa", "eager"), default="sdpa",
                        help="the reference's attention kernel (ours is always SDPA)")
    parser.add_argument("--fit-steps", type=at_least(0), default=100,
                        help="Adam steps fitting the drafter to the target first (0: stay random)")
    parser.add_argument("--reference-commit", default=None,
                        help="the reference's commit, recorded in the JSON (default: read from "
                             "its git checkout; give it for an exported copy)")
    parser.add_argument("--out", type=out_file, default=str(RESULTS_DIR / "parity.json"),
                        help="where the figures are written (default data/results/parity.json)")
    add_flags(parser, only=("max_new_tokens",), defaults={"max_new_tokens": 48},
              why="both decode greedily in fp32 at block sizes 2, 4 and 8")
    args = parser.parse_args(argv)
    if not (args.reference / "dflash").is_dir():
        parser.error(f"--reference {args.reference}: no dflash/ folder there; give a checkout of "
                     f"the reference implementation (github.com/z-lab/dflash)")
    argv = sys.argv[1:] if argv is None else list(argv)
    shown = ["DIR" if i and argv[i - 1] == "--reference" else a for i, a in enumerate(argv)]
    torch.set_grad_enabled(False)
    target, drafter = build_models()
    text = fit(target, drafter, args.fit_steps)                                 # (8, 40)
    with tempfile.TemporaryDirectory() as tmp:
        save_drafter(drafter, Path(tmp) / "drafter")
        ours = load_drafter(Path(tmp) / "drafter", target=target)
        ref, theirs = load_reference(args.reference.resolve(), Path(tmp) / "drafter",
                                     args.attention)
    print(f"reference attention: {theirs.config._attn_implementation}; ours: sdpa; fp32")
    gen = torch.Generator().manual_seed(1)
    vocab = target.config.vocab_size - 1            # never the MASK token in a prompt
    ids = torch.randint(vocab, (2, 24), generator=gen)
    dh_a, dl_a = compare_drafter(ref, target, ours, theirs, ids, [23], cached=False)
    ids = torch.randint(vocab, (1, 64), generator=gen)
    dh_b, dl_b = compare_drafter(ref, target, ours, theirs, ids, [17, 1, 3, 8, 2, 5, 1, 7], True)
    print(f"(a) one block, no cache:   hidden {dh_a:.2e}  logits {dl_a:.2e}")
    print(f"(b) 8 steps through cache: hidden {dh_b:.2e}  logits {dl_b:.2e}")
    ok = max(dh_a, dl_a, dh_b, dl_b) <= TOLERANCE
    decodes = []
    prompts = [torch.randint(vocab, (1, 5), generator=gen)]  # one fresh, three of the fitted text
    prompts += [text[i:i + 1, :S] for i, S in ((0, 8), (1, 11), (2, 20))]
    for prompt in prompts:
        S = prompt.shape[1]
        for B in (2, 4, 8):
            same_ids, same_acc, dh, acc = compare_generate(ref, target, ours, theirs, prompt,
                                                           args.max_new_tokens, B)
            ok &= same_ids and same_acc and dh <= TOLERANCE
            decodes.append({"prompt_tokens": S, "block_size": B, "ids_equal": same_ids,
                            "acceptance_equal": same_acc, "max_abs_diff_hidden": dh,
                            "acceptance_lengths": acc})
            print(f"(c) prompt {S:2d} block {B}: ids {'equal' if same_ids else 'DIFFER'}, "
                  f"acceptance {'equal' if same_acc else 'DIFFER'}, hidden {dh:.2e}, "
                  f"lengths {acc[:12]}{' ...' if len(acc) > 12 else ''}")
    print("PASS" if ok else "FAIL")
    result = {
        "command": " ".join(["python -m minidflash parity", *shown]),
        "reference": "z-lab/dflash", "reference_commit": reference_commit(args.reference,
                                                                         args.reference_commit),
        "dtype": "float32", "attention": {"reference": theirs.config._attn_implementation,
                                          "ours": "sdpa"},
        "tolerance": TOLERANCE, "passed": bool(ok),
        "max_abs_diff": max([dh_a, dl_a, dh_b, dl_b] + [d["max_abs_diff_hidden"] for d in decodes]),
        "one_block_no_cache": {"hidden": dh_a, "logits": dl_a},
        "through_cache": {"hidden": dh_b, "logits": dl_b},
        "decodes": decodes}
    write_json(args.out, result, indent=1)
    print(f"written: {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""The EAGLE-3-style autoregressive drafter: lossless through the same verifier, its training
pass (training-time test) equals its inference chain, and its format round-trips."""

import pytest
import torch

from minidflash.ar_drafter import ARDrafter, load_ar_drafter, make_ar_config
from minidflash.core.drafter import target_features
from minidflash.verifier import speculative_generate
from tests.helpers import tiny_target


def random_ar(target, seed=0):
    torch.manual_seed(seed + 2000)
    return ARDrafter(make_ar_config(target.config)).eval().requires_grad_(False)


def greedy(target, ids, n):
    return target.generate(ids, do_sample=False, max_new_tokens=n, min_new_tokens=n,
                           pad_token_id=0, attention_mask=torch.ones_like(ids))


@pytest.mark.parametrize("seed", range(4))
def test_ar_drafter_is_lossless(seed):
    target = tiny_target(seed)
    drafter = random_ar(target, seed)
    ids = torch.randint(0, 96, (1, 5 + seed * 3), generator=torch.Generator().manual_seed(seed))
    want = greedy(target, ids, 40)
    for k in (1, 3, 8, 16):
        got = speculative_generate(target, drafter, ids, max_new_tokens=40, block_size=k + 1)
        assert torch.equal(got.output_ids, want), k


def test_ar_drafter_lossless_when_it_drafts_well():
    """A drafter trained to agree is accepted often: lossless across every acceptance length."""
    target = tiny_target(3, vocab=61, layers=4)
    drafter = random_ar(target)
    seqs = [greedy(target, torch.randint(1, 59, (1, 6), generator=torch.Generator().manual_seed(i)), 40)
            for i in range(12)]
    drafter.train().requires_grad_(True)
    opt = torch.optim.Adam(drafter.parameters(), lr=3e-3)
    for step in range(150):
        ids = torch.cat(seqs[step % 3 * 4:(step % 3 + 1) * 4])
        with torch.no_grad():
            feats = target_features(target(ids, output_hidden_states=True).hidden_states,
                                    drafter.target_layer_ids)
        logits = drafter.unrolled_logits(target, ids, feats, 3)
        loss = sum(0.8 ** j * torch.nn.functional.cross_entropy(
            l.flatten(0, 1), ids[:, 2 + j:2 + j + l.shape[1]].flatten()) for j, l in enumerate(logits))
        opt.zero_grad()
        loss.backward()
        opt.step()
    drafter.eval().requires_grad_(False)
    taus = []
    for i in range(12):
        prompt = seqs[i][:, :10]
        got = speculative_generate(target, drafter, prompt, max_new_tokens=30, block_size=5)
        assert torch.equal(got.output_ids, greedy(target, prompt, 30))
        taus.append(got.tau)
    assert sum(taus) / len(taus) > 1.5, taus       # it drafts: more than one token per pass


def test_training_time_test_equals_the_inference_chain():
    """Step j of the unrolled training pass at row t == draft j+1 of a chain rooted at row t,
    fed the same tokens, through the KV cache (fp32)."""
    target = tiny_target(1)
    drafter = random_ar(target)
    ids = torch.randint(0, 96, (1, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        feats = target_features(target(ids, output_hidden_states=True).hidden_states,
                                drafter.target_layer_ids)
        unrolled = drafter.unrolled_logits(target, ids, feats, 4)
        embed, head = target.get_input_embeddings(), target.get_output_embeddings()
        for t in (0, 5, 11):
            cache = drafter.new_cache()
            rows = torch.arange(t + 1)[None]
            h = drafter._attend(embed(ids[:, 1:t + 2]), drafter.fc(feats[:, :t + 1]), rows, cache)[:, -1:]
            for j in range(4):
                torch.testing.assert_close(head(drafter.norm(h))[0, 0], unrolled[j][0, t],
                                           rtol=1e-5, atol=1e-5)
                h = drafter._attend(embed(ids[:, t + 2 + j:t + 3 + j]), h,
                                    torch.tensor([[t + 1 + j]]), cache)


def test_drafts_equal_the_training_pass_fed_the_same_tokens():
    """draft() (real cache, positions and token shift) proposes exactly the argmax of the
    unrolled training pass at the chain's root row, fed the drafts themselves as tokens."""
    target = tiny_target(4)
    drafter = random_ar(target, 4)
    with torch.no_grad():      # sharp attention and a strong layer: positions and tokens matter
        for w in (drafter.midlayer.q_proj.weight, drafter.midlayer.k_proj.weight,
                  drafter.midlayer.v_proj.weight, drafter.midlayer.o_proj.weight):
            w.mul_(25)
    k = 4
    for s in (3, 11):                                    # position of the last committed token
        ids = torch.randint(0, 96, (1, s + 1), generator=torch.Generator().manual_seed(s))
        with torch.no_grad():
            feats = target_features(target(ids, output_hidden_states=True).hidden_states,
                                    drafter.target_layer_ids)
        cache = drafter.new_cache()
        drafts = drafter.draft(target, ids[:, s], feats[:, :s], s, cache, k + 1, context_ids=ids[:, :s])
        seq = torch.cat([ids, drafts], 1)                                    # (1, s + 1 + k)
        with torch.no_grad():
            feats = target_features(target(seq, output_hidden_states=True).hidden_states,
                                    drafter.target_layer_ids)
            unrolled = drafter.unrolled_logits(target, seq, feats, k)
        want = [int(unrolled[j][0, s - 1].argmax()) for j in range(k)]
        assert drafts[0].tolist() == want, (s, drafts[0].tolist(), want)


def test_draft_keeps_only_the_context_in_its_cache():
    target = tiny_target(2)
    drafter = random_ar(target)
    ids = torch.randint(0, 96, (1, 9))
    feats = target_features(target(ids, output_hidden_states=True).hidden_states, drafter.target_layer_ids)
    cache = drafter.new_cache()
    out = drafter.draft(target, ids[:, -1], feats[:, :-1], 8, cache, 9, context_ids=ids[:, :-1])
    assert out.shape == (1, 8) and cache.get_seq_length() == 8


def test_save_and_load_round_trip(tmp_path):
    target = tiny_target(0)
    drafter = random_ar(target)
    drafter.save_pretrained(tmp_path / "ar")
    again = load_ar_drafter(tmp_path / "ar", target=target)
    ids = torch.randint(0, 96, (1, 7))
    a = speculative_generate(target, drafter, ids, max_new_tokens=12, block_size=5)
    b = speculative_generate(target, again, ids, max_new_tokens=12, block_size=5)
    assert a.acceptance_lengths == b.acceptance_lengths and torch.equal(a.output_ids, b.output_ids)
    for k, v in drafter.state_dict().items():
        assert torch.equal(v, again.state_dict()[k]), k
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_ar_drafter(tmp_path / "nothing")


def test_ar_drafter_sampling_matches_target_distribution():
    """At T = 1 the AR drafter's decode is distributed as the target's own sampling (the same
    exact-distribution chi-square test as for DFlash, tests/test_lossless.py)."""
    from tests.test_lossless import N_NEW, TEMP, V, chi_square_pvalue, exact_distribution

    target = tiny_target(7, vocab=V, layers=2, hidden=32, heads=2, kv_heads=1)
    with torch.no_grad():
        target.lm_head.weight.mul_(0.1)
    drafter = random_ar(target, 7)
    ids = torch.tensor([[1, 2, 0]])
    probs = exact_distribution(target, ids)
    gen, counts, n = torch.Generator().manual_seed(0), {}, 1500
    for _ in range(n):
        out = speculative_generate(target, drafter, ids, max_new_tokens=N_NEW, block_size=3,
                                   temperature=TEMP, generator=gen)
        key = tuple(out.new_ids.tolist())
        counts[key] = counts.get(key, 0) + 1
    assert chi_square_pvalue(counts, probs, n) > 1e-3


# --------------------------------------------------------------------------------------------
# The shipped AR drafter reaches the tau recorded with it (a drafting bug lowers it; losslessness
# alone would not notice). ``python -m tests.test_ar_drafter`` records it again after retraining.
# --------------------------------------------------------------------------------------------

AR_PROMPTS = [("arithmetic", 2), ("code", 1)]          # held out
AR_K, AR_MAX_NEW = 8, 128


def shipped_ar_taus() -> dict:
    import json

    from minidflash.paths import PROMPTS_DIR, TINY_AR_DRAFTER_DIR
    from minidflash.target import chat_ids, load_target, stop_ids

    target, tokenizer = load_target()
    drafter = load_ar_drafter(TINY_AR_DRAFTER_DIR, target=target)
    taus = {}
    for suite, i in AR_PROMPTS:
        with open(PROMPTS_DIR / f"{suite}.jsonl") as f:
            ids = chat_ids(tokenizer, json.loads(f.readlines()[i])["messages"])
        plain = speculative_generate(target, None, ids, max_new_tokens=AR_MAX_NEW, block_size=1,
                                     stop_token_ids=stop_ids(tokenizer))
        got = speculative_generate(target, drafter, ids, max_new_tokens=AR_MAX_NEW,
                                   block_size=AR_K + 1, stop_token_ids=stop_ids(tokenizer))
        assert torch.equal(got.output_ids, plain.output_ids)
        taus[f"{suite}[{i}]"] = round(got.tau, 4)
    return taus


def test_shipped_ar_drafter_reaches_its_recorded_tau():
    import json

    from minidflash.paths import TINY_AR_DRAFTER_DIR

    recorded = json.loads((TINY_AR_DRAFTER_DIR / "expected_tau.json").read_text())
    for name, tau in shipped_ar_taus().items():
        assert tau >= recorded["tau"][name] - 0.05, (name, tau, recorded["tau"][name])


if __name__ == "__main__":
    import json

    from minidflash.paths import TINY_AR_DRAFTER_DIR

    torch.set_num_threads(1)
    out = {"command": "PYTHONPATH=. python -m tests.test_ar_drafter", "k": AR_K,
           "max_new_tokens": AR_MAX_NEW, "dtype": "float32", "threads": 1, "tau": shipped_ar_taus()}
    (TINY_AR_DRAFTER_DIR / "expected_tau.json").write_text(json.dumps(out, indent=1) + "\n")
    print(out)

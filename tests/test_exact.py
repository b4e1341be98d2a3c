"""Exact mode's attention (minidflash/exact.py): the attention it computes, and the property it
exists for: row j of a W-row pass is the same bits as row 0 of a W-row pass (the token, then
padding) that computes the same token after the same cache, in fp32 and bf16, through
transformers' forward and the lean pass; with SDPA in its place the rows part. Then the decode
loops: W follows the drafting (a chain's block, a tree's nodes and root, 16 for plain decoding,
or the W named), every pass after the prefill has W rows, and every decoding equals plain
decoding at its W, token for token."""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from minidflash import exact, lean
from minidflash.decoding import cache_kwargs, crop_cache
from minidflash.exact import invariant_attention
from tests.helpers import tiny_target

W = 16


def sdpa(q, k, v, mask, scaling):
    G = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)
    out = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask,
                                         scale=scaling, is_causal=mask is None)
    return out.transpose(1, 2).to(q.dtype)


def library_attention(q, k, v, mask, scaling, seen=None):
    """The planted bug: what the lean pass calls without exact mode, in the invariant one's place
    (its packed SDPA call in bf16, SDPA in fp32)."""
    return (lean.attend(q, k, v, mask, scaling) if q.dtype == torch.bfloat16
            else sdpa(q, k, v, mask, scaling))


@pytest.mark.parametrize("T, L", [(1, 1), (1, 70), (5, 5), (16, 16), (16, 200), (3, 129)])
def test_it_is_attention(T, L):
    """The causal attention (mask None) and a bool mask, GQA, keys across block boundaries."""
    g = torch.Generator().manual_seed(T * 1000 + L)
    q, k, v = (torch.randn(2, 4, n, 8, generator=g) for n in (T, L, L))
    k, v = k[:, :2], v[:, :2]                                            # 2 key heads for 4
    causal = torch.ones(T, L, dtype=torch.bool).tril(L - T)[None, None].expand(2, 1, T, L)
    want = sdpa(q, k, v, None if T == L else causal, 0.3)
    torch.testing.assert_close(invariant_attention(q, k, v, None, 0.3), want)
    torch.testing.assert_close(invariant_attention(q, k, v, causal, 0.3), want)
    additive = torch.zeros(causal.shape).masked_fill(~causal, float("-inf"))
    torch.testing.assert_close(invariant_attention(q, k, v, additive, 0.3), want)


@pytest.mark.parametrize("L", [40, 64, 128])
def test_a_tree_mask_and_bf16(L):
    """Rows that see scattered keys (a tree's), the last row's own key in a block's last column
    (L a multiple of KEY_BLOCK) or not."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 4, n, 16, generator=g) for n in (6, L, L))
    see = torch.rand(1, 1, 6, L, generator=g) > 0.4
    see[..., L - 6:] = torch.eye(6, dtype=torch.bool)                    # each row sees itself
    want = sdpa(q, k, v, see, 0.25)
    torch.testing.assert_close(invariant_attention(q, k, v, see, 0.25), want)
    got = invariant_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), see, 0.25)
    torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("T, L", [(1, 64), (16, 16), (16, 200), (5, 129)])
def test_one_seen_a_pass_is_each_calls(T, L):
    """The mask worked out once for a pass's layers (the lean pass) gives the bits a call that
    works it out itself gives, for a chain's and a tree's mask; one from another pass refused."""
    g = torch.Generator().manual_seed(T + L)
    q, k, v = (torch.randn(1, 4, n, 8, generator=g).bfloat16() for n in (T, L, L))
    k, v = k[:, :2], v[:, :2]
    tree = torch.ones(1, 1, T, L, dtype=torch.bool).tril(L - T)
    tree[..., L - T:] &= (torch.rand(T, T, generator=g) > 0.5) | torch.eye(T, dtype=torch.bool)
    for mask in (None, tree):
        seen = exact.Seen(mask, 1, T, L, "cpu")
        assert torch.equal(invariant_attention(q, k, v, mask, 0.3, seen=seen),
                           invariant_attention(q, k, v, mask, 0.3))
    with pytest.raises(ValueError, match="one Seen a pass"):
        invariant_attention(q, k[:, :, 1:], v[:, :, 1:], None, 0.3, seen=seen)


def rows_identical(target, run, prompt_len=13, W=W):
    """How many of W rows of one W-row pass equal row 0 of a padded W-row pass at the same
    position after the same cache (cropped from the first pass's), bit for bit."""
    from transformers import DynamicCache
    g = torch.Generator().manual_seed(0)
    vocab = target.config.vocab_size
    ids = torch.randint(0, vocab, (1, prompt_len + W), generator=g)
    prompt, block = ids[:, :prompt_len], ids[:, prompt_len:]
    cache = DynamicCache()
    run(prompt, cache)
    full = run(block, cache)                                              # (1, W, V)
    same = 0
    for j in range(W):
        c = copy.deepcopy(cache)
        crop_cache(c, prompt_len + j)
        rows = torch.cat([block[:, j:j + 1], torch.zeros(1, W - 1, dtype=torch.long)], 1)
        same += torch.equal(run(rows, c)[0, 0], full[0, j])
    return same


def through_transformers(target):
    """transformers' forward as exact mode runs it: its attention and products (exact.invariant)."""
    def run(ids, cache):
        pos = torch.arange(ids.shape[1])[None] + cache.get_seq_length()
        with exact.invariant(target), torch.no_grad():
            return target(input_ids=ids, **cache_kwargs(target, cache), position_ids=pos).logits
    return run


def lean_with(target, exact_attention):
    def run(ids, cache):
        pos = torch.arange(ids.shape[1])[None] + cache.get_seq_length()
        return lean.of(target)(ids, cache, False, False, position_ids=pos, exact=exact_attention)[0]
    return run


@pytest.fixture(scope="module", params=[torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def target(request):
    # hidden 256 and 8 heads over 2 key heads: products big enough to be blocked
    return tiny_target(seed=3, vocab=211, layers=2, hidden=256, heads=8, kv_heads=2,
                       dtype=request.param)


def test_rows_are_the_same_bits_through_transformers_forward(target):
    assert rows_identical(target, through_transformers(target)) == W


def test_rows_are_the_same_bits_through_the_lean_pass(target):
    assert rows_identical(target, lean_with(target, True)) == W


@pytest.mark.parametrize("w", [4, 8])
def test_rows_are_the_same_bits_at_other_ws(target, w):
    """The property at the W of a chain of 4 and of 8 (padding to w rows, not to 16)."""
    assert rows_identical(target, lean_with(target, True), W=w) == w
    assert rows_identical(target, through_transformers(target), W=w) == w


@pytest.mark.parametrize("w", [4, 8])
def test_rows_stand_alone_a_row_at_a_time(target, w, monkeypatch):
    """Where a CPU's products do not keep a row's bits wherever it sits (MKL's fp32 product on a
    CPU with AVX2 only), exact mode takes them a row of the pass at a time: forced here on any
    CPU, the rows are the same bits still, and the logits those of the products as they are."""
    before = lean_with(target, True)(*second_pass(target, w))
    monkeypatch.setattr(exact, "rows_stand_alone", lambda a, b: False)
    monkeypatch.setattr(exact, "projection_rows_stand_alone", lambda product, x, key: False)
    assert rows_identical(target, lean_with(target, True), W=w) == w
    assert rows_identical(target, through_transformers(target), W=w) == w
    after = lean_with(target, True)(*second_pass(target, w))
    atol = 1e-4 if target.dtype == torch.float32 else 0.1
    torch.testing.assert_close(after, before, atol=atol, rtol=0)


def second_pass(target, w):
    """(ids, cache): a w-row pass after a 13-token prompt's."""
    from transformers import DynamicCache
    g = torch.Generator().manual_seed(w)
    ids = torch.randint(0, target.config.vocab_size, (1, 13 + w), generator=g)
    cache = DynamicCache()
    lean_with(target, True)(ids[:, :13], cache)
    return ids[:, 13:], cache


def test_the_probe_finds_a_product_that_takes_rows_by_place():
    """``rows_stand_alone`` and ``projection_rows_stand_alone`` say no to a product whose last
    row is summed another way, yes to torch's own where it keeps rows alone (one row: always)."""
    def by_place(a, b):                               # the last row in another order
        out = a @ b
        out[..., -1, :] = (a[..., -1:, :].flip(-1) @ b.flip(-2))[..., 0, :]
        return out
    a, b = torch.randn(2, 8, 64), torch.randn(2, 64, 48)
    assert by_place(a, b)[..., :-1, :].equal((a @ b)[..., :-1, :])
    assert not exact.rows_stand_alone(a, b, by_place)
    assert exact.rows_stand_alone(a[:, :1], b)
    w = torch.randn(48, 64)
    taken, one = (lambda x: by_place(x, w.t())), (lambda x: x @ w.t())
    assert not exact.projection_rows_stand_alone(taken, a[:1], taken)
    assert exact.projection_rows_stand_alone(one, a[:1, :1], one)


def test_sdpa_in_its_place_parts_them(target, monkeypatch):
    """The planted bug: the library's attention swapped back in, the identity goes."""
    assert rows_identical(target, lean_with(target, False)) < W
    monkeypatch.setattr(lean, "invariant_attention", library_attention)
    assert rows_identical(target, lean_with(target, True)) < W


def plain_rows(target, run, cache, tokens, start):
    """Plain decoding's passes in exact mode: each token as row 0 of a W-row pass (padding after
    it), the padding's keys cropped; the logits of the last."""
    for i, t in enumerate(tokens):
        rows = torch.cat([torch.tensor([[t]]), torch.zeros(1, W - 1, dtype=torch.long)], 1)
        out = run(rows, cache, torch.arange(start + i, start + i + W)[None], None)
        crop_cache(cache, start + i + 1)
    return out[0, 0]


@pytest.mark.parametrize("prompt_len", [13, 60, 127])
def test_a_tree_row_is_plain_decodings_row(target, prompt_len):
    """Every node of a 16-row tree pass (a node's keys: the cache, its ancestors, itself) is the
    bits plain decoding gets for it, one token a pass after the same prompt; prompts put the
    tree across a block boundary (60: 60 + 15 > 64) and not (13, 127)."""
    from transformers import DynamicCache
    from minidflash.tree import tree_attention_mask

    def run(ids, cache, pos, mask):
        return lean.of(target)(ids, cache, False, False, position_ids=pos, attention_mask=mask,
                               exact=True)[0]

    g = torch.Generator().manual_seed(prompt_len)
    prompt = torch.randint(0, target.config.vocab_size, (1, prompt_len), generator=g)
    parents = torch.tensor([-1, -1, 0, 0, 1, 2, 2, 3, 4, 6, 6, 7, 8, 9, 13])   # 15 nodes
    depths = [0] * 15
    for i, p in enumerate(parents.tolist()):
        depths[i] = 0 if p < 0 else depths[p] + 1
    tokens = torch.randint(0, target.config.vocab_size, (1, 16), generator=g)  # root + nodes
    cache = DynamicCache()
    run(prompt, cache, torch.arange(prompt_len)[None], None)
    pos = prompt_len + torch.tensor([0] + [d + 1 for d in depths])[None]
    mask = tree_attention_mask(parents, prompt_len, torch.bool)
    tree = run(tokens, copy.deepcopy(cache), pos, mask)                  # (1, 16, V)
    for node in range(15):
        path, p = [], node
        while p >= 0:
            path.append(p)
            p = parents[p].item()
        seq = [tokens[0, 0].item()] + [tokens[0, 1 + q].item() for q in reversed(path)]
        want = plain_rows(target, run, copy.deepcopy(cache), seq, prompt_len)
        assert torch.equal(tree[0, 1 + node], want), node


# -- exact mode in the decode loops: the shipped tiny target and drafter --------------------------

@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def shipped(request):
    from minidflash.checkpoints import load_drafter
    from minidflash.target import chat_ids, load_target
    from minidflash.tools.common import suite_prompts
    target, tok = load_target(dtype=request.param)
    prompts = [chat_ids(tok, p["messages"]) for s, i in (("arithmetic", 1), ("arithmetic", 3),
                                                         ("code", 2))
               for p in [suite_prompts(s, "dev")[i]]]
    return target, load_drafter(target=target), prompts


# name: (the decoding's fields, its W); exact=True unless a W is named
METHODS = {"dflash": ({}, 16), "dflash:4": ({"block_size": 4}, 4),
           "dflash:8": ({"block_size": 8}, 8),
           "dflash:4 at W 16": ({"block_size": 4, "exact": 16}, 16),
           "dflash:4 at W 8": ({"block_size": 4, "exact": 8}, 8),
           "tree n15/top8": ({"tree": {"node_budget": 15, "top_k": 8}}, 16),
           "dflash, transformers' forward": ({"lean": False}, 16),
           "tree n7/top4, transformers' forward": ({"lean": False,
                                                    "tree": {"node_budget": 7, "top_k": 4}}, 8)}


def test_every_decoding_is_plain_decoding_token_for_token(shipped):
    """Greedy: chains of 16, 4 and 8, trees, the lean pass and transformers' forward, all the
    same tokens as plain decoding in exact mode at the same W (a chain of 4: W 4, or the W
    named; a tree of 7 nodes: 8), in bf16 as in fp32 (the lossless tests' bf16 twin: there the
    arithmetic is not exact, and exact mode makes it agree)."""
    from minidflash.verifier import speculative_generate
    target, drafter, prompts = shipped
    for ids in prompts:
        plain = {w: speculative_generate(target, None, ids, max_new_tokens=64, exact=w).new_ids
                 for w in {w for _, w in METHODS.values()}}
        assert torch.equal(plain[16], speculative_generate(
            target, None, ids, max_new_tokens=64, exact=True).new_ids)      # plain's own W: 16
        for name, (kw, w) in METHODS.items():
            got = speculative_generate(target, drafter, ids, max_new_tokens=64,
                                       **{"exact": True, **kw})
            assert got.config.rows == w, name
            assert torch.equal(got.new_ids, plain[w]), name


def test_a_batch_row_is_its_batch_of_one(shipped):
    from minidflash.batch import left_pad
    from minidflash.verifier import speculative_generate, speculative_generate_batch
    target, drafter, prompts = shipped
    ids, mask = left_pad([p[0].tolist() for p in prompts])
    rows = speculative_generate_batch(target, drafter, ids, attention_mask=mask,
                                      max_new_tokens=64, exact=True)
    for p, row in zip(prompts, rows):
        want = speculative_generate(target, None, p, max_new_tokens=64, exact=True).new_ids
        assert torch.equal(row.new_ids, want)


@pytest.mark.parametrize("shipped", ["bfloat16"], indirect=True)
def test_sdpa_in_exact_modes_place_parts_a_decode(shipped, monkeypatch):
    """The planted bug at the loop's level: the library's attention back in exact mode's passes,
    and a bf16 decode parts from plain decoding (in fp32 the rows part too, test_sdpa_in_its_
    place_parts_them, but on these prompts no greedy choice turns)."""
    from minidflash.verifier import speculative_generate
    target, drafter, prompts = shipped
    want = [speculative_generate(target, None, p, max_new_tokens=64, exact=True).new_ids
            for p in prompts]
    monkeypatch.setattr(lean, "invariant_attention", library_attention)
    got = [speculative_generate(target, drafter, p, max_new_tokens=64, exact=True).new_ids
           for p in prompts]
    assert not all(torch.equal(g, w) for g, w in zip(got, want))


# exact=True: W from the drafting (plain decoding 16, the drafter's block of 4, a tree of 6
# nodes and its root, a batch's chains of 4); a W named: that W in every loop
DRAFTING_W = {"plain": 16, "chain": 4, "tree": 7, "batch": 4}


@pytest.mark.parametrize("exact_w", [True, 9], ids=["W from the drafting", "W named"])
@pytest.mark.parametrize("path", ["plain", "chain", "tree", "batch"])
def test_every_loop_runs_fixed_passes_when_on_and_only_then(path, exact_w, monkeypatch):
    """Exact mode reaches every loop: each pass after the prefill has exactly W rows (the
    config's ``rows``: the drafting's, or the W named) and the invariant attention; off, none
    has (the lean pass is where both show: its rows and its flag)."""
    from tests.helpers import decode_on, random_drafter
    target = tiny_target(5, vocab=89, layers=3)
    drafter = random_drafter(target, 5, block_size=4)
    ids = torch.randint(0, 88, (1, 9), generator=torch.Generator().manual_seed(2))
    seen, real = [], lean.LeanTarget.__call__
    monkeypatch.setattr(lean.LeanTarget, "__call__", lambda self, ids, *a, **k: seen.append(
        (ids.shape[1], k.get("exact", False))) or real(self, ids, *a, **k))
    decode = lambda **fields: decode_on(path, target, drafter, ids, **fields)
    on = decode(max_new_tokens=12, exact=exact_w)
    w = DRAFTING_W[path] if exact_w is True else exact_w
    assert on.config.exact is exact_w and on.config.rows == w and seen and all(e for _, e in seen)
    after = seen[(2 if path == "batch" else 1):]                          # after the prefill
    assert len(after) > 1 and all(rows == w for rows, _ in after), (w, after)
    seen.clear()
    off = decode(max_new_tokens=12)
    assert off.config.exact is False and seen and not any(e for _, e in seen)
    assert any(rows < W for rows, _ in seen)


def test_step_profile_counts_exact_modes_attention_as_attention():
    """step-profile --passes exact: every op inside invariant_attention (its products too) is
    counted as attention, none of them as a matrix product; the lean pass's attention is SDPA's."""
    from minidflash.target import load_target
    from minidflash.tools.measure import step_profile
    target, _ = load_target()
    lean_split = step_profile.split_pass(target, 16, 64, 2, lean=True)
    exact_split = step_profile.split_pass(target, 16, 64, 2, lean=True, exact=W)
    assert exact_split["attention"] > 0 and lean_split["attention"] > 0    # ops found, not speed
    with torch.profiler.profile() as prof:
        invariant_attention(*(torch.randn(1, 2, n, 8) for n in (4, 9, 9)), None, 0.3)
    events = [e for e in prof.events() if e.name == "aten::bmm"]
    assert events and all(step_profile.inside(e, exact.ATTENTION) for e in events)


# -- W: named in the text, refused where the drafting does not fit, the bench's partners ----------

@pytest.mark.parametrize("text, w", [
    ("plain/exact", 16), ("plain/exact:8", 8), ("plain/exact:1", 1), ("dflash:8/exact", 8),
    ("dflash:16/exact", 16), ("dflash:4/exact:8", 8), ("tree:8/n15/top4/exact", 16),
    ("tree/n7/top4/exact:12", 12), ("dflash:8/nolean/exact:8", 8), ("dflash/exact", None),
    ("dflash:8", 0)])
def test_the_text_names_w_and_round_trips(text, w):
    from minidflash.decoding_config import DecodingConfig
    config = DecodingConfig.parse(text)
    assert str(config) == text and DecodingConfig.parse(str(config)) == config
    assert config.rows == w                        # None: the drafter's block or tree decides
    if w:
        assert config.describe().count(f"every pass after the prefill {w} rows") == 1


def test_w_from_the_drafting_and_w_named_are_two_configs():
    """exact=True keeps W with the drafting; an integer is a W (True == 1 to Python, not here)."""
    from minidflash.decoding_config import DecodingConfig as C
    assert C.parse("dflash:8/exact").rows == C.parse("dflash:8/exact:8").rows == 8
    assert C.parse("dflash:8/exact") != C.parse("dflash:8/exact:8")
    assert C(block_size=1, exact=True) != C(block_size=1, exact=1)
    assert C(exact=True).rows is None and C(block_size=1, exact=True).rows == 16
    assert C(block_size=1, exact=1).rows == 1 and C(exact=np.int64(9)).exact == 9
    assert type(C(exact=np.int64(9)).exact) is int
    said = C.parse("dflash:8/exact").describe()
    assert "every pass after the prefill 8 rows: the chain's block of 8" in said
    assert "plain/exact:8" in said
    assert "a tree of 15 nodes and its root" in C.parse("tree:8/n15/top4/exact").describe()
    assert "the W named (the chain's block of 4 takes 4)" in C.parse("dflash:4/exact:8").describe()
    with pytest.raises(ValueError, match="sets exact=True, and the call gives exact=1"):
        C.parse("plain/exact", exact=1)


@pytest.mark.parametrize("text, match", [
    ("dflash:8/exact:7", r"W = 7 rows a pass: the chain's block of 8 takes 8; use exact=8"),
    ("tree:8/n15/top4/exact:15", r"a tree of 15 nodes and its root takes 16; use exact=16"),
    ("plain/exact:0", r"exact must be False, True .* or W"),
    ("dflash/exact:x", r"option 'exact:x'"), ("dflash/exact:", r"option 'exact:'"),
    ("dflash:8/exact/exact:8", r"both set exact")])
def test_a_w_that_does_not_fit_is_refused_in_one_line(text, match):
    from minidflash.decoding_config import DecodingConfig
    with pytest.raises(ValueError, match=match) as err:
        DecodingConfig.parse(text)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="exact must be"):
        DecodingConfig(exact=-2)


def test_a_w_is_checked_against_the_drafting_the_drafter_gives():
    """Where the block or the tree is the drafter's, the W named is checked once they are known
    (prepare), in every loop; a pass over more than W rows is refused by the pass itself."""
    from transformers import DynamicCache
    from minidflash.decoding import TargetPass, exact_pass
    from minidflash.decoding_config import DecodingConfig
    from minidflash.verifier import speculative_generate, speculative_generate_batch
    from tests.helpers import random_drafter
    target = tiny_target(5, vocab=89, layers=2)
    drafter = random_drafter(target, 5, block_size=8)
    ids = torch.randint(0, 88, (1, 9), generator=torch.Generator().manual_seed(2))
    with pytest.raises(ValueError, match="the chain's block of 8 takes 8; use exact=8"):
        speculative_generate(target, drafter, ids, max_new_tokens=4, exact=7)
    with pytest.raises(ValueError, match="the chain's block of 8 takes 8"):
        speculative_generate_batch(target, drafter, ids.repeat(2, 1), max_new_tokens=4, exact=7)
    with pytest.raises(ValueError, match="a tree of 9 nodes and its root takes 10"):
        speculative_generate(target, drafter, ids, max_new_tokens=4, exact=8, block_size=4,
                             tree={"node_budget": 9, "top_k": 2})
    out = speculative_generate(target, drafter, ids, max_new_tokens=4, exact=True)
    assert out.config.rows == 8 and out.config.exact is True
    with pytest.raises(ValueError, match="resolve the config first"):
        TargetPass(target, True, False, exact=DecodingConfig(exact=True).rows)
    cache = DynamicCache()
    exact_pass(target, ids, cache, False, False, 0, True, 4)              # the prefill: any rows
    with pytest.raises(ValueError, match="on W = 4 rows, and this one has 5: use W >= 5"):
        exact_pass(target, ids[:, :5], cache, False, False, 0, True, 4)


def test_the_bench_holds_an_exact_method_against_plain_at_its_w(capsys, monkeypatch):
    """dflash:8/exact's partner is plain/exact:8, a tree of 7 nodes' too, dflash:16/exact's and
    the drafter's own (block 16) plain/exact; with none at a method's W the bench says so."""
    from minidflash.checkpoints import load_drafter
    from minidflash.target import load_target
    from minidflash.tools.measure import bench, methods
    specs = ["plain", "plain/exact", "plain/exact:8", "plain/bf16/exact:8", "dflash:8/exact",
             "tree:16/n7/top4/exact", "dflash:16/exact", "dflash:8/exact:16", "dflash/exact",
             "dflash:4/exact", "dflash:8/bf16/exact", "dflash:8"]
    drafter = load_drafter(target=load_target()[0])
    refs = [methods.reference(s, specs, {s: drafter for s in specs}) for s in specs]
    assert refs == ["plain", "plain/exact", "plain/exact:8", "plain/bf16/exact:8",
                    "plain/exact:8", "plain/exact:8", "plain/exact", "plain/exact",
                    "plain/exact", "plain", "plain/bf16/exact:8", "plain"]

    class Stop(Exception):
        pass

    monkeypatch.setattr(methods, "run_methods", lambda *a, **k: (_ for _ in ()).throw(Stop()))
    with pytest.raises(Stop):                                # stopped at the warm-up
        bench.main(["--methods", "plain", "plain/exact:8", "dflash:8/exact", "dflash:4/exact",
                    "--n", "1", "--max-new-tokens", "4"])
    err = capsys.readouterr().err
    assert "dflash:4/exact: no plain decoding at its W = 4 in this run" in err
    assert "add plain/exact:4 to --methods" in err
    assert "dflash:8/exact: no plain" not in err
    assert "every pass after the prefill 8 rows: the chain's block of 8" in err
    with pytest.raises(SystemExit, match="dflash/exact:8: .*the chain's block of 16 takes 16"):
        bench.main(["--methods", "plain", "dflash/exact:8", "--n", "1"])  # the drafter's block


def test_step_profile_takes_the_w_of_its_exact_pass(monkeypatch):
    """--rows W: the exact pass's W (16 unless given), at least --tokens."""
    from minidflash.tools.measure import step_profile
    calls = []
    monkeypatch.setattr(step_profile, "split_pass", lambda *a, **k: calls.append(k["exact"]) or {
        k: 1.0 for k in [*step_profile.KINDS, "other ops", "overhead", "wall"]})
    out = step_profile.main(["--passes", "exact", "--threads", "1", "--tokens", "4", "--rows",
                             "8", "--repeats", "1"])
    assert calls == [8, 8] and out["rows"] == 8
    calls.clear()
    step_profile.main(["--passes", "exact", "lean", "--threads", "1", "--repeats", "1"])
    assert calls == [16, 0, 16, 0]
    with pytest.raises(SystemExit):
        step_profile.main(["--passes", "exact", "--tokens", "16", "--rows", "8"])

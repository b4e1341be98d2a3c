"""Exact mode's attention at the level of its arithmetic (minidflash/exact.py): every row's output
is the bits of an obvious per-row reference (its keys in dense order, whole blocks of C, each
block through the pass's product shape, the blocks added in order), for chains, trees and any
mask; so a row's bits do not depend on the other rows, on padding rows or on keys after its own.
Planted bugs (blocks whose size follows the key count, another order of the block sums, a tree's
nodes summed by column) break it. Then ``python -m minidflash exact-attention``, the per-layer timing."""

import json

import pytest
import torch
import torch.nn.functional as F

from minidflash import exact
from minidflash.exact import KEY_BLOCK as C
from minidflash.exact import invariant_attention

SHAPES = [(T, L) for T in (1, 4, 16) for L in (1, 63, 64, 65, 300) if L >= T]


def reference(q, k, v, see, scaling):
    """Each row alone, as its arithmetic is defined: its keys (the columns it sees, in order)
    padded to whole blocks of C; every block's scores and partial sums through the products the
    pass uses, (G*T, D) x (D, C) and (G*T, C) x (C, D), with only the row's G query rows filled;
    the blocks added one after the other. q (N, H, T, D), k, v (N, Hk, L, D), see (N, T, L)."""
    N, H, T, D = q.shape
    Hk = k.shape[1]
    G = H // Hk
    out = torch.empty(N, T, H, D, dtype=q.dtype)
    for n in range(N):
        for t in range(T):
            cols = see[n, t].nonzero()[:, 0]
            count, nb = len(cols), -(-len(cols) // C)
            kk, vv = (F.pad(x[n][:, cols].float(), (0, 0, 0, nb * C - count)).view(Hk, nb, C, D)
                      for x in (k, v))                                    # (Hk, nb, C, D)
            qq = q[n].float().reshape(Hk, 1, G * T, D).expand(Hk, nb, G * T, D)
            s = (qq @ kk.transpose(-1, -2)).mul_(scaling).view(Hk, nb, G, T, C)[:, :, :, t]
            s = s.masked_fill((torch.arange(nb * C) >= count).view(nb, 1, C), float("-inf"))
            a = torch.zeros(Hk, nb, G, T, C)
            a[:, :, :, t] = (s - s.amax((1, -1), keepdim=True)).exp()    # the row's G rows
            a = a.view(Hk, nb, G * T, C)
            l_b = a.sum(-1).view(Hk, nb, G, T)[..., t]                     # (Hk, nb, G)
            o_b = (a @ vv).view(Hk, nb, G, T, D)[..., t, :]                # (Hk, nb, G, D)
            l, o = l_b[:, 0], o_b[:, 0]
            for b in range(1, nb):
                l, o = l + l_b[:, b], o + o_b[:, b]
            out[n, t] = (o / l[..., None]).reshape(H, D).to(q.dtype)
    return out


def tree_mask(T, L, g):
    """(1, 1, T, L): a random tree's rows after L - T cached keys (each node: the cache, its
    ancestors, itself), and its parents (node 0 the root)."""
    parents = [-1] + [int(torch.randint(0, i, (1,), generator=g)) for i in range(1, T)]
    seen = torch.eye(T, dtype=torch.bool)
    for i in range(1, T):
        seen[i] |= seen[parents[i]]
    return torch.cat([torch.ones(T, L - T, dtype=torch.bool), seen], 1)[None, None], parents


def masks(kind, N, T, L, g):
    if kind == "chain":
        return torch.ones(T, L, dtype=torch.bool).tril(L - T)[None, None].expand(N, 1, T, L)
    if kind == "tree":
        return torch.cat([tree_mask(T, L, g)[0] for _ in range(N)])
    see = torch.rand(N, 1, T, L, generator=g) > 0.5                      # any mask at all
    see[..., L - T:] |= torch.eye(T, dtype=torch.bool)
    return see


def tensors(N, T, L, dtype, g, H=6, Hk=2, D=16):
    q = torch.randn(N, H, T, D, generator=g).to(dtype)
    k, v = (torch.randn(N, Hk, L, D, generator=g).to(dtype) for _ in range(2))
    return q, k, v


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("T, L", SHAPES)
def test_every_row_is_the_reference_bit_for_bit(T, L, dtype):
    """Chains, trees and random masks, a batch of 2, keys across and on block boundaries."""
    g = torch.Generator().manual_seed(T * 1000 + L)
    q, k, v = tensors(2, T, L, dtype, g)
    for kind in ("chain", "tree", "random"):
        mask = masks(kind, 2, T, L, g)
        want = reference(q, k, v, mask[:, 0], 0.3)
        assert torch.equal(invariant_attention(q, k, v, mask, 0.3), want), kind


def same_rows(attention, T, past, dtype, kind, seed=0):
    """How many rows of one T-row pass (a chain's or a tree's, over ``past`` cached keys, a batch
    of 2) equal, bit for bit, row 0 of the T-row pass plain decoding makes for the same token in
    exact mode: its keys in order (for a tree's node: the cache, its ancestors, itself), then
    T - 1 padding rows and their keys (random) after it. SmolLM2's heads: 9 over 3, of 64."""
    g = torch.Generator().manual_seed(seed)
    L = past + T
    q, k, v = tensors(2, T, L, dtype, g, H=9, Hk=3, D=64)
    trees = [tree_mask(T, L, g) for _ in range(2)]
    mask = (masks("chain", 2, T, L, g) if kind == "chain"
            else torch.cat([m for m, _ in trees]))
    full = attention(q, k, v, mask, 0.125)                                 # (2, T, H, D)
    same = 0
    for n in range(2):
        for j in range(T):
            path, p = [], j                                # the row's own keys in the pass
            while p >= 0:
                path.append(past + p)
                p = trees[n][1][p] if kind == "tree" else p - 1
            cols = torch.cat([torch.arange(past), torch.tensor(path[::-1], dtype=torch.long)])
            pq, pk, pv = tensors(1, T, T - 1, dtype, g, H=9, Hk=3, D=64)   # the padding
            rows = torch.cat([q[n:n + 1, :, j:j + 1], pq[:, :, 1:]], 2)
            keys = [torch.cat([x[n:n + 1, :, cols], pad], 2) for x, pad in ((k, pk), (v, pv))]
            alone = attention(rows, *keys, None, 0.125)                   # causal, padding after
            same += torch.equal(alone[0, 0], full[n, j])
    return same


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("kind", ["chain", "tree"])
@pytest.mark.parametrize("T, past", [(1, 0), (1, 63), (1, 64), (4, 60), (4, 61), (16, 0),
                                     (16, 48), (16, 49), (16, 284)])
def test_a_row_is_the_row_plain_decoding_makes(T, past, kind, dtype):
    """The property exact mode exists for, at the attention: row j of a pass is row 0 of plain
    decoding's pass over the same keys, whatever follows the row's own key."""
    assert same_rows(invariant_attention, T, past, dtype, kind) == 2 * T


def pass_shaped(q, k, v, mask, scaling, seen=None):
    """Planted: the keys cut into 4 blocks whatever their count, as a kernel that splits its work
    evenly does, so that where a block ends depends on how many keys follow a row."""
    return invariant_attention(q, k, v, mask, scaling, block=-(-k.shape[2] // 4))


def pairs_from_the_end(x):
    """Planted: the blocks added in pairs counted from the last block, which moves with the
    number of blocks (zero blocks after a row's last one regroup the sums before)."""
    xs = list(x.unbind(2))
    while len(xs) > 1:
        head = xs[:len(xs) % 2]
        xs = head + [a + b for a, b in zip(xs[len(head)::2], xs[len(head) + 1::2])]
    return xs[0]


def test_planted_bugs_break_it(monkeypatch):
    """Each planted bug parts some row from plain decoding's, for a chain and for a tree; a block
    boundary moved by one everywhere keeps the property (the positions are still fixed) and
    parts from the reference. In fp32, where the last bits show (a bf16 output rounds most of
    them away). 175 cached keys: a row's keys end in block 2 of 3, the padding's reach block 3."""
    dtype = torch.float32
    for kind in ("chain", "tree"):
        assert same_rows(pass_shaped, 16, 175, dtype, kind) < 32, kind
    with monkeypatch.context() as m:
        m.setattr(exact, "in_order", pairs_from_the_end)
        for kind in ("chain", "tree"):
            assert same_rows(invariant_attention, 16, 175, dtype, kind) < 32, kind
    with monkeypatch.context() as m:                      # a tree's nodes summed by column
        m.setattr(exact.Seen, "gathers", lambda self, G, Hk: None)
        assert same_rows(invariant_attention, 16, 175, dtype, "tree") < 32
    shifted = lambda q, k, v, mask, scaling, seen=None: invariant_attention(
        q, k, v, mask, scaling, block=C - 1)
    assert same_rows(shifted, 16, 175, dtype, "tree") == 32
    g = torch.Generator().manual_seed(0)
    q, k, v = tensors(2, 16, 300, dtype, g)
    mask = masks("tree", 2, 16, 300, g)
    assert not torch.equal(shifted(q, k, v, mask, 0.3), reference(q, k, v, mask[:, 0], 0.3))


# -- python -m minidflash exact-attention --------------------------------------------------------

def test_the_timing_command_writes_every_point_with_its_provenance(tmp_path):
    """Small and fast: every thread count, dtype, pass and key count asked for is in the file,
    each with both methods and the pass's Seen, and the file says where it was measured."""
    from minidflash.__main__ import main
    from minidflash.tools.measure import exact_attention
    from minidflash.tools.measure.render import provenance

    out = tmp_path / "exact_attention.json"
    main(["exact-attention", "--keys", "20", "70", "--rows", "4", "--heads", "4", "2",
          "--head-dim", "16", "--threads", "1", "--repeats", "2", "--load", "shared",
          "--out", str(out)])
    saved = json.loads(out.read_text())
    assert list(saved["ms"]) == ["1"]
    assert list(saved["ms"]["1"]) == ["bfloat16", "float32"]
    for by_pass in saved["ms"]["1"].values():
        assert list(by_pass) == ["chain", "tree"]
        for by_keys in by_pass.values():
            assert list(by_keys) == ["20", "70"]
            assert all(set(x) == {"sdpa", "invariant", "seen"} and min(x.values()) > 0
                       for x in by_keys.values())
    assert (saved["rows"], saved["heads"], saved["kv_heads"], saved["head_dim"]) == (4, 4, 2, 16)
    line = provenance(saved)
    assert "dtype bfloat16 and float32" in line and "threads 1;" in line and "beside" in line
    assert exact_attention.markdown(saved).count("\n") == 2 + 8 - 1


@pytest.mark.parametrize("argv, message", [
    (["--keys", "8"], "--keys 8: a pass's keys count its 16 rows"),
    (["--heads", "9", "2"], "--heads 9 2: the query heads are a multiple of the key heads"),
    (["--rows", "1"], "--rows: 1: give 2 or more"),
    (["--dtypes", "fp16"], "--dtypes: invalid choice"),
])
def test_the_timing_command_refuses_in_one_line(argv, message, capsys):
    from minidflash.tools.measure import exact_attention
    with pytest.raises(SystemExit) as e:
        exact_attention.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and message in err[-1]


def test_the_tree_pass_is_a_tree():
    """The command's tree: row r under row (r - 1) // 2, each row seeing the cache, its
    ancestors and itself (tree.py's mask of a drafted tree)."""
    from minidflash.tools.measure.exact_attention import pass_mask
    see = pass_mask("tree", 7, 10)[0, 0, :, 3:]                            # 3 cached keys
    parents = [-1, 0, 0, 1, 1, 2, 2]                                       # row -> its parent row
    for row, parent in enumerate(parents):
        want = torch.zeros(7, dtype=torch.bool)
        p = row
        while p >= 0:
            want[p], p = True, parents[p]
        assert torch.equal(see[row], want), row
    assert pass_mask("tree", 7, 10)[..., :3].all() and not exact.Seen(
        pass_mask("tree", 7, 10), 1, 7, 10, "cpu").chain

"""The core (minidflash/core/) is the method and nothing else, and its one loop is the package's.

* The boundary: a core file imports the standard library, torch, transformers, einops, triton
  and the core only; importing the core loads no package module outside it.
* The budget: every core file but the kernel at most ``CORE_FILE_LINES``, the core without the
  kernel at most ``CORE_LINES``.
* One decode loop: ``core.verifier.generate`` is the only loop in the package that commits
  verified steps; the front door's tokens are the core loop's, token for token.
* Planted bugs in the loop (a position off by one, a wrong cache crop after a partial accept, a
  tree walk that takes the first child, a sample drawn from the drafter) each turn a check red.
"""

import ast
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import minidflash.core.verifier as core_verifier
from minidflash import tree as tree_mod
from minidflash.core.verifier import BlockProposer, Sequence, TargetForward, generate, greedy
from minidflash.verifier import speculative_generate
from tests.helpers import OracleDrafter, random_drafter, tiny_target
from tests.test_lossless import (chi_square_pvalue, exact_distribution, plain_greedy,  # noqa: F401
                                 sample_counts, sampling_setup)

CORE = Path(__file__).resolve().parent.parent / "minidflash" / "core"
ALLOWED = {"torch", "transformers", "einops", "triton"}
CORE_FILE_LINES, CORE_LINES = 300, 1500


def outside_imports(path: Path) -> list[str]:
    """The modules a core file imports that are neither the standard library, the allowed
    libraries, nor the core itself (relative imports inside the core)."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            names = [] if node.level == 1 else [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        bad += [n for n in names if n.split(".")[0] not in ALLOWED | set(sys.stdlib_module_names)
                and not n.startswith("minidflash.core")]
    return bad


def test_core_files_import_only_the_core_and_its_libraries():
    files = sorted(CORE.glob("*.py"))
    assert len(files) >= 6
    found = {f.name: outside_imports(f) for f in files}
    assert not any(found.values()), {k: v for k, v in found.items() if v}


def test_the_boundary_check_sees_a_planted_import(tmp_path):
    planted = tmp_path / "drafter.py"
    planted.write_text((CORE / "drafter.py").read_text() + "\nfrom ..decoding_config import DecodingConfig\n")
    assert outside_imports(planted) == ["decoding_config"]      # a relative import leaving it
    planted.write_text((CORE / "drafter.py").read_text() + "\nfrom minidflash import checkpoints\n")
    assert outside_imports(planted) == ["minidflash"]
    planted.write_text("from .. import paths\nimport numpy\n")
    assert "numpy" in outside_imports(planted)


def test_relative_imports_stay_inside_the_core():
    """``from ..x import`` leaves the core: none in a core file."""
    for f in CORE.glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            assert not (isinstance(node, ast.ImportFrom) and node.level > 1), f"{f.name}: {ast.dump(node)}"


def test_importing_the_core_loads_no_module_outside_it():
    code = ("import sys, minidflash.core.verifier, minidflash.core.trainer, minidflash.core.attention\n"
            "mods = sorted(m for m in sys.modules if m.startswith('minidflash'))\n"
            "print(len(mods), ' '.join(mods))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=CORE.parent.parent)
    assert out.returncode == 0, out.stderr[-2000:]
    count, *mods = out.stdout.split()
    outside = [m for m in mods if m != "minidflash" and not m.startswith("minidflash.core")]
    print(f"import minidflash.core loads {count} package modules: {' '.join(mods)}")
    assert not outside, outside


def test_core_line_budget():
    lines = {f.name: len(f.read_text().splitlines()) for f in CORE.glob("*.py")}
    assert all(n <= CORE_FILE_LINES for name, n in lines.items() if name != "kernel.py"), lines
    assert sum(n for name, n in lines.items() if name != "kernel.py") <= CORE_LINES, lines


def loops_that_commit(root: Path) -> list[str]:
    """Every ``while``/``for`` loop in the package whose body calls ``.commit(``: a decode loop."""
    found = []
    for f in sorted(root.rglob("*.py")):
        for fn in ast.walk(ast.parse(f.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for loop in ast.walk(fn):
                if isinstance(loop, (ast.While, ast.For)) and any(
                        isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                        and c.func.attr == "commit" for c in ast.walk(loop)):
                    found.append(f"{f.relative_to(root.parent).as_posix()}:{fn.name}")
                    break
    return found


def test_exactly_one_decode_loop_in_the_package():
    assert loops_that_commit(CORE.parent) == ["minidflash/core/verifier.py:generate"]


def core_decode(target, drafter, ids, n, B):
    """The core's loop with its plainest seams: the paper's block, transformers' forward, argmax."""
    layers = drafter.target_layer_ids if drafter is not None and B > 1 else None
    state = Sequence(ids, n, (), layers, drafter.new_cache() if layers else None)
    with torch.inference_mode():
        generate(state, BlockProposer(target, drafter, B), TargetForward(target, layers is not None),
                 greedy)
    return state


@pytest.mark.parametrize("seed", range(4))
def test_the_core_loop_gives_the_front_doors_tokens(seed):
    rng = random.Random(seed)
    target = tiny_target(seed, vocab=89, layers=3)
    ids = torch.randint(0, 88, (1, rng.randint(2, 12)))
    n = rng.randint(20, 60)
    ref = plain_greedy(target, ids, n)
    oracle = lambda: OracleDrafter(random_drafter(target, seed), torch.cat([ref, ref[:, :32] * 0], 1),
                                   p_wrong=0.2, seed=seed)           # the same guesses each time
    for B in (1, 4, 16):
        state = core_decode(target, oracle(), ids, n, B)
        out = speculative_generate(target, oracle(), ids, max_new_tokens=n, block_size=B)
        assert state.tokens() == out.new_ids.tolist() == ref[0, ids.shape[1]:].tolist(), B
        assert state.accepted[:-1] == out.acceptance_lengths[:-1]


# -- planted bugs in the one loop: each turns the identity (or the distribution) check red ---------
def greedy_parts(n_cases=6) -> bool:
    """Whether any chain or tree decode parts from plain greedy decoding on oracle drafters."""
    for seed in range(n_cases):
        target = tiny_target(seed, vocab=89, layers=3)
        ids = torch.randint(0, 88, (1, 4 + seed))
        ref = plain_greedy(target, ids, 40)
        drafter = OracleDrafter(random_drafter(target, seed), torch.cat([ref, ref[:, :32] * 0], 1),
                                p_wrong=0.3, seed=seed)
        for settings in ({"block_size": 6}, {"block_size": 16}):
            out = speculative_generate(target, drafter, ids, max_new_tokens=40, **settings)
            if not torch.equal(out.output_ids, ref):
                return True
    return False


def test_the_identity_check_passes_unplanted():
    assert not greedy_parts()


def test_a_position_off_by_one_goes_red(monkeypatch):
    real = core_verifier.Draft.inputs

    def shifted(self, state):
        inputs = real(self, state)
        return {**inputs, "position_ids": inputs["position_ids"] + 1}
    monkeypatch.setattr(core_verifier.Draft, "inputs", shifted)
    assert greedy_parts()


def test_a_wrong_crop_after_a_partial_accept_goes_red(monkeypatch):
    real = core_verifier.keep_columns

    def one_too_many(cache, start, keep):      # keeps the first rejected draft's column too
        return real(cache, start, keep + [keep[-1] + 1] if keep == list(range(len(keep))) else keep)
    monkeypatch.setattr(core_verifier, "keep_columns", one_too_many)
    assert greedy_parts()


def tree_parts(n_cases=6) -> bool:
    for seed in range(n_cases):
        target = tiny_target(seed, vocab=61, layers=2)
        ids = torch.randint(0, 60, (1, 3 + seed))
        ref = plain_greedy(target, ids, 30)
        drafter = random_drafter(target, seed, block_size=4)
        out = speculative_generate(target, drafter, ids, max_new_tokens=30, block_size=4,
                                   tree={"node_budget": 12, "top_k": 4})
        if not torch.equal(out.output_ids, ref):
            return True
    return False


def test_a_tree_walk_that_takes_the_first_child_goes_red(monkeypatch):
    assert not tree_parts()

    def first_child(self, logits, final, pick):
        y = pick(logits, final)[0].tolist()
        parents, path, node = self.parents.tolist(), [], 0
        while True:
            kids = [i + 1 for i, p in enumerate(parents) if p + 1 == node]
            if not kids or y[node] not in [int(self.ids[0, k]) for k in kids]:
                return core_verifier.Outcome([[0] + path], torch.tensor([y[node]]))
            node = kids[0]
            path.append(node)
    monkeypatch.setattr(tree_mod.TreeDraft, "walk", first_child)
    assert tree_parts()


def test_a_sample_drawn_from_the_drafter_goes_red(sampling_setup, monkeypatch):
    """After a rejection the bonus is the drafter's next token instead of the target's sample:
    the distribution test (same seed and size as the passing one) rejects it."""
    target, drafter, ids, probs = sampling_setup
    real = core_verifier.Draft.walk

    def drafters_token(self, logits, final, pick):
        out = real(self, logits, final, pick)
        a, W = len(out.kept[0]) - 1, self.ids.shape[1]
        bonus = self.ids[:, a + 1] if a + 1 < W else out.bonus
        return core_verifier.Outcome(out.kept, bonus, out.choices)
    monkeypatch.setattr(core_verifier.Draft, "walk", drafters_token)
    counts = sample_counts(target, drafter, ids, 1500, seed=0)
    assert chi_square_pvalue(counts, probs, 1500) < 1e-6

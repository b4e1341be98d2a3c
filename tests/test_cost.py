"""The cost calculator: the formula, the paper regime's assumptions, the measured regime."""

import json

import pytest

from minidflash.paths import RESULTS_DIR
from minidflash.tools.measure import cost


def test_speedup_and_break_even_by_hand():
    # tau 4 for a 1 ms draft and a 3 ms verify, against a 2 ms step: 4 * 2 / 4 = 2x
    assert cost.speedup(4.0, 1.0, 3.0, 2.0) == pytest.approx(2.0)
    assert cost.break_even_tau(1.0, 3.0, 2.0) == pytest.approx(2.0)
    assert cost.speedup(cost.break_even_tau(0.7, 2.2, 1.3), 0.7, 2.2, 1.3) == pytest.approx(1.0)


def test_the_paper_regime_reproduces_the_paper():
    # The step is derived from the DFlash average, so that one is exact by construction ...
    gpu = cost.paper_gpu_regime(["plain", "dflash:16", "ar:8"])
    s, tau = cost.PAPER_DFLASH_AVERAGE
    assert gpu.project("dflash:16", tau)["speedup"] == pytest.approx(s)
    assert gpu.project("plain", 1.0)["speedup"] == pytest.approx(1.0)
    # ... EAGLE-3's is a check of the assumptions: its tau at figure 3's 8-token cost lands
    # within 5% of its reported average speedup.
    s3, tau3 = cost.PAPER_EAGLE3_AVERAGE
    assert gpu.project("ar:8", tau3)["speedup"] == pytest.approx(s3, rel=0.05)


def test_figure_3_costs_are_interpolated_through_its_points():
    for k, ms in cost.PAPER_AR_DRAFT_MS.items():
        assert cost.paper_ar_draft_ms(k) == pytest.approx(ms)
    assert cost.paper_ar_draft_ms(4) < cost.paper_ar_draft_ms(6) < cost.paper_ar_draft_ms(8)
    gpu = cost.paper_gpu_regime(["dflash:8@somewhere", "dflash:16", "ar:16"])
    assert gpu.draft_ms["dflash:8@somewhere"] == gpu.draft_ms["dflash:16"]   # flat in the block
    assert gpu.draft_ms["ar:16"] > gpu.draft_ms["dflash:16"]


def test_the_measured_regime_explains_the_measured_speedups():
    # Projection from measured per-step costs and tau matches the bench's own speedup up to
    # the loop's overhead (left out: the projection is a little higher, never far off). A step
    # that verifies a fixed block only: with the confidence cut steps are uneven and more of
    # them commit few tokens, so a mean step's price no longer stands for them (notebook 13).
    bench = json.loads((RESULTS_DIR / "methods.json").read_text())
    for suite in bench["suites"].values():
        regime = cost.measured_regime(suite)
        for m, s in suite["methods"].items():
            if m in regime.draft_ms and "/p" not in m and "/cost" not in m:
                projected = regime.project(m, s["tau"])["speedup"]
                assert s["speedup"] * 0.95 <= projected <= s["speedup"] * 1.25, m


def test_report_prints_the_assumptions_and_every_method():
    gpu = cost.paper_gpu_regime(["plain", "ar:4"])
    text = cost.report({"plain": 1.0, "ar:4": 3.0}, gpu, measured={"ar:4": 1.5})
    flat = " ".join(text.split())                       # assumptions are wrapped at 96 columns
    assert all(" ".join(a.split()) in flat for a in gpu.assumptions)
    assert max(map(len, text.splitlines())) <= 100
    assert "ar:4" in text and "1.50x" in text


def test_unknown_methods_are_refused():
    with pytest.raises(ValueError, match="plain, dflash:B"):
        cost.paper_gpu_regime(["lookup:10"])
    assert cost.kind_of("dflash:16/p0.3@d") == ("dflash", 16) and cost.kind_of("ar:8/p0.3") == ("ar", 8)
    assert cost.kind_of("tree:16/n24/top4") == ("dflash", 16)


def test_a_regime_of_ratios_projects_like_one_of_milliseconds():
    # the same costs, once in ms (step 2 ms) and once divided by the step: the same projections
    ms = cost.Regime("ms", 2.0, {"plain": 0.0, "dflash:16": 1.0}, {"plain": 2.0, "dflash:16": 6.0})
    ratios = cost.ratio_regime("ratios", {16: 3.0}, {16: 0.5})
    for tau in (1.0, 2.5, 6.0):
        assert ratios.project("dflash:16", tau) == pytest.approx(ms.project("dflash:16", tau))
    assert ratios.project("plain", 1.0)["speedup"] == pytest.approx(1.0)
    assert ratios.project("dflash:16", 1.0)["break_even_tau"] == pytest.approx(3.5)
    assert "decode steps" in cost.report({"dflash:16": 2.0}, ratios)


def test_a_regime_of_ratios_needs_both_costs_per_block():
    with pytest.raises(ValueError, match="same block sizes"):
        cost.ratio_regime("x", {4: 1.5, 16: 3.0}, {16: 0.5})

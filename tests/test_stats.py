"""Estimates, tests and power of the verdicts, checked by hand and against scipy and statsmodels: the interval over
seeds and test images, Welch's for unpaired arms, the one-sided tests and TOST, Holm, and power as a plan."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower
from statsmodels.stats.weightstats import ttost_paired

from pipeline.analysis.runs import per_seed_scores
from pipeline.analysis.stats import (
    PAIRED,
    SEEDS,
    WELCH,
    Criterion,
    Estimate,
    detectable_effect,
    holm,
    paired_contrast,
    paired_difference,
    seeds_for,
    unpaired_difference,
)
from pipeline.errors import PipelineError


def estimate(mean: float, se: float, df: float = 4.0, images: int = 0) -> Estimate:
    """An Estimate with this mean, standard error and degrees of freedom (its 95% t interval)."""
    half = sps.t.ppf(0.975, df) * se
    return Estimate("a", "b", SEEDS, 5, 5, images, mean, se, df, mean - half, mean + half, 0.95,
                    (se * math.sqrt(5),), 0.0, (0.0,), tuple(range(5)))


# --- intervals ---------------------------------------------------------------------------------------------------

def test_per_seed_values_give_scipys_paired_t_interval():
    a, b = {0: 84.5, 1: 85.2, 2: 84.9, 3: 85.6}, {0: 82.1, 1: 82.5, 2: 83.0, 3: 82.2, 4: 90.0}
    e = paired_difference(a, b, confidence=0.9, labels=("impulse", "mimetic"))
    ref = sps.ttest_rel([a[s] for s in range(4)], [b[s] for s in range(4)]).confidence_interval(0.9)
    assert e.kind == SEEDS and e.n == 4 and e.seeds == (0, 1, 2, 3)  # seed 4 has no partner
    assert (e.low, e.high) == pytest.approx((ref.low, ref.high)) and e.df == 3


def test_crossed_interval_by_hand():
    """Two seeds × four images, differences (points) x = [[100, 0, 0, 0], [100, 100, 0, 0]].

    d = (25, 50): var 312.5, over n = 2: 156.25. z = (100, 50, 0, 0): var 2291.67, over N = 4: 572.92.
    se = √729.17 = 27.00 with the seeds' n − 1 = 1 degree of freedom; D = 37.5.
    """
    a = {0: np.array([1, 1, 0, 1], bool), 1: np.array([1, 1, 1, 0], bool)}
    b = {0: np.array([0, 1, 0, 1], bool), 1: np.array([0, 0, 1, 0], bool)}
    e = paired_difference(a, b, confidence=0.95)
    assert e.kind == PAIRED and e.images == 4 and e.mean == pytest.approx(37.5)
    se2 = 312.5 / 2 + (2291.0 + 2 / 3) / 4
    assert e.se == pytest.approx(math.sqrt(se2)) and math.sqrt(se2) == pytest.approx(27.00, abs=0.01) and e.df == 1
    assert e.high - e.mean == pytest.approx(sps.t.ppf(0.975, 1) * math.sqrt(se2))


def test_without_an_image_term_the_crossed_interval_is_scipys_paired_t():
    """Every image has the same seed-averaged difference (z_i = 50 for all i), so only the seeds remain:
    d = (75, 25, 25, 75) points, and the interval is scipy's paired t with 3 degrees of freedom."""
    rows = [[1, 1, 1, 0], [0, 0, 0, 1], [1, 0, 0, 0], [0, 1, 1, 1]]
    a = {s: np.array(r, bool) for s, r in enumerate(rows)}
    b = {s: np.zeros(4, bool) for s in range(4)}
    e = paired_difference(a, b, confidence=0.95)
    ref = sps.ttest_rel([75.0, 25.0, 25.0, 75.0], [0.0] * 4).confidence_interval(0.95)
    assert e.kind == PAIRED and e.images == 4 and e.df == pytest.approx(3)
    assert (e.low, e.high) == pytest.approx((ref.low, ref.high))


def test_the_image_term_widens_the_seed_interval():
    rng = np.random.default_rng(1)
    hard = rng.random(500) < 0.3  # images that arm a gets right and b wrong, on every seed
    a = {s: (rng.random(500) < 0.8) | hard for s in range(5)}
    b = {s: (rng.random(500) < 0.8) & ~hard for s in range(5)}
    crossed = paired_difference(a, b, confidence=0.95)
    seeds = paired_difference(a, b, confidence=0.95, images=False)
    assert seeds.kind == SEEDS and crossed.kind == PAIRED and crossed.mean == pytest.approx(seeds.mean)
    assert crossed.high - crossed.low > seeds.high - seeds.low and crossed.image_sd > 10


def test_welch_uses_every_run_and_is_scipys_without_images():
    vit, conv = {0: 80.1, 1: 81.0, 2: 79.5, 3: 80.7, 4: 80.2}, {0: 81.5, 1: 82.4, 2: 81.9, 3: 82.0}
    e = unpaired_difference(vit, conv, confidence=0.95)
    ref = sps.ttest_ind(list(vit.values()), list(conv.values()), equal_var=False).confidence_interval(0.95)
    assert e.kind == WELCH and (e.n, e.n_b) == (5, 4)  # no seed dropped
    assert (e.low, e.high) == pytest.approx((ref.low, ref.high))


def test_welch_with_images_adds_the_image_term_by_hand():
    """Runs of a: [[1,1,0,0], [1,1,1,0]] (accuracy 50, 75), of b: [[1,0,0,0], [0,1,0,0], [1,1,0,0]] (25, 25, 50).

    s_a² = 312.5, s_b² = 208.33; per image, a's mean (100, 100, 50, 0) minus b's (66.7, 66.7, 0, 0) is
    (33.3, 33.3, 50, 0), var 439.8. se² = 312.5/2 + 208.33/3 + 439.8/4, with Welch's degrees of freedom of the two
    seed terms.
    """
    a = {0: np.array([1, 1, 0, 0], bool), 1: np.array([1, 1, 1, 0], bool)}
    b = {0: np.array([1, 0, 0, 0], bool), 5: np.array([0, 1, 0, 0], bool), 7: np.array([1, 1, 0, 0], bool)}
    e = unpaired_difference(a, b, confidence=0.95)
    terms = [312.5 / 2, (625 / 3) / 3, np.var([100 / 3, 100 / 3, 50, 0], ddof=1) / 4]
    assert np.var([100 / 3, 100 / 3, 50, 0], ddof=1) == pytest.approx(439.81, abs=0.01)
    assert e.mean == pytest.approx(62.5 - 100 / 3) and e.se == pytest.approx(math.sqrt(sum(terms)))
    df = (terms[0] + terms[1]) ** 2 / (terms[0] ** 2 / 1 + terms[1] ** 2 / 2)
    assert e.df == pytest.approx(df) and e.images == 4


def test_a_contrast_of_four_arms_is_the_difference_of_gains_seed_by_seed():
    big_i, big_b = {0: 90.0, 1: 91.0, 2: 90.5}, {0: 85.0, 1: 85.5, 2: 85.0}
    small_i, small_b = {0: 88.0, 1: 88.0, 2: 88.5}, {0: 85.0, 1: 84.0, 2: 85.5}
    e = paired_contrast([big_i, big_b, small_i, small_b], [1, -1, -1, 1], confidence=0.95, labels=("big", "small"))
    gains = [(big_i[s] - big_b[s]) - (small_i[s] - small_b[s]) for s in range(3)]  # 2, 1.5, 2.5
    ref = sps.ttest_1samp(gains, 0.0).confidence_interval(0.95)
    assert e.mean == pytest.approx(2.0) and (e.low, e.high) == pytest.approx((ref.low, ref.high))


def test_one_pair_has_no_interval_and_identical_differences_a_point():
    one = paired_difference({0: 90.0}, {0: 80.0}, confidence=0.95)
    assert one.n == 1 and math.isnan(one.low) and not one.enough and math.isnan(Criterion("greater").p_supported(one))
    same = paired_difference({0: 3.0, 1: 4.0}, {0: 1.0, 1: 2.0}, confidence=0.95)
    assert (same.mean, same.se, same.low, same.high) == (2.0, 0.0, 2.0, 2.0)
    assert Criterion("greater").p_supported(same) == 0.0


def test_a_confidence_outside_0_1_is_a_user_error():
    with pytest.raises(PipelineError, match="confidence 95"):
        paired_difference({0: 1.0, 1: 2.0}, {0: 0.0, 1: 0.5}, confidence=95)


# --- tests -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("criterion, mean, se, supported, reversed_", [
    (Criterion("greater"), 2.0, 0.5, True, False),
    (Criterion("greater"), -2.0, 0.5, False, True),
    (Criterion("greater"), 0.5, 0.5, False, False),
    (Criterion("less"), -2.0, 0.5, True, False),
    (Criterion("less", 2.0), -1.0, 0.2, False, True),  # "clearly worse": more than 2 below
    (Criterion("not_worse", 2.0), -0.5, 0.4, True, False),
    (Criterion("not_worse", 2.0), -3.5, 0.4, False, True),
    (Criterion("not_better", 0.5), -1.0, 0.4, True, False),
    (Criterion("not_better", 0.5), 2.0, 0.4, False, True),
    (Criterion("equivalent", 2.0), 0.3, 0.4, True, False),
    (Criterion("equivalent", 2.0), 3.5, 0.4, False, True),
    (Criterion("equivalent", 2.0), -3.5, 0.4, False, True),
    (Criterion("equivalent", 2.0), 1.5, 0.4, False, False),
])
def test_one_sided_tests_read_the_printed_interval(criterion, mean, se, supported, reversed_):
    """At α = 0.025 a test rejects exactly when the 95% interval clears its boundary."""
    e = estimate(mean, se)
    assert (criterion.p_supported(e) < 0.025) == supported
    assert (criterion.p_reverse(e) < 0.025) == reversed_
    lo_edge, hi_edge = ((-criterion.margin, criterion.margin) if criterion.direction == "equivalent" else
                        (criterion.edge, criterion.edge))
    inside = {"greater": e.low > hi_edge, "not_worse": e.low > hi_edge, "less": e.high < lo_edge,
              "not_better": e.high < lo_edge, "equivalent": lo_edge < e.low and e.high < hi_edge}
    assert inside[criterion.direction] == supported


def test_equivalence_is_statsmodels_two_one_sided_tests():
    rng = np.random.default_rng(2)
    a, b = rng.normal(80, 1, 6), rng.normal(80.4, 1, 6)
    e = paired_difference(dict(enumerate(a)), dict(enumerate(b)), confidence=0.95)
    p, _, _ = ttost_paired(a, b, -2.0, 2.0)
    assert Criterion("equivalent", 2.0).p_supported(e) == pytest.approx(p)


def test_boundaries_and_needs_read_in_words():
    assert Criterion("not_worse", 2.0).need == "> -2" and Criterion("equivalent", 1.5).need == "inside ±1.5"
    assert Criterion("greater").need == "> 0" and Criterion("less", 2.0).need == "< -2"
    assert Criterion("not_better", 0.5).boundary == "+0.5" and Criterion("greater").boundary == "0"
    with pytest.raises(ValueError, match="direction 'above'"):
        Criterion("above")


def test_holm_by_hand_and_missing_p_values_are_never_rejected():
    """p = (0.005, 0.011, 0.04) at 0.025: 0.005 <= 0.025/3, 0.011 <= 0.025/2, 0.04 > 0.025."""
    reject, adjusted = holm([0.011, 0.005, 0.04], 0.025)
    assert reject == [True, True, False] and adjusted == pytest.approx([0.022, 0.015, 0.04])
    assert holm([0.01, 0.012, 0.02], 0.025)[0] == [False, False, False]  # each alone would be "contradicted"
    assert holm([math.nan, 0.001], 0.025)[0] == [False, True]


def test_holm_is_statsmodels_multipletests():
    rng = np.random.default_rng(3)
    for m in (1, 2, 5, 24):
        p = rng.uniform(0, 0.05, m) ** rng.uniform(0.5, 2)
        reject, adjusted = holm(list(p), 0.025)
        ref = multipletests(p, alpha=0.025, method="holm")
        assert reject == list(ref[0]) and adjusted == pytest.approx(list(ref[1]))


# --- power as a plan ---------------------------------------------------------------------------------------------

def test_detectable_effect_is_statsmodels_noncentral_t_times_the_sd():
    e = estimate(0.3, 1.0)  # seed sd √5, no images
    d = TTestPower().solve_power(nobs=5, alpha=0.025, power=0.8, alternative="larger")
    assert detectable_effect(e, Criterion("greater"), 5, 0.025, 0.8) == pytest.approx(d * math.sqrt(5))
    assert d == pytest.approx(1.68, abs=0.01)  # 80% power at n = 5 needs 1.68 sd of a seed's difference
    wider = detectable_effect(e, Criterion("equivalent", 2.0), 5, 0.025, 0.8)  # TOST: each side at 90%
    assert wider > d * math.sqrt(5)


def test_seeds_for_a_new_experiment_is_where_power_first_reaches_80_percent():
    e = estimate(0.3, 1.0)  # sd √5 per seed
    n = seeds_for(e, Criterion("greater"), 2.0, 0.025, 0.8)
    power = [TTestPower().power(effect_size=2.0 / math.sqrt(5), nobs=k, alpha=0.025, alternative="larger")
             for k in (n - 1, n)]
    assert power[0] < 0.8 <= power[1]
    assert seeds_for(e, Criterion("greater"), -1.0, 0.025, 0.8) is None  # the effect is not on the claimed side


def test_the_image_term_can_make_any_number_of_seeds_too_few():
    e = Estimate("a", "b", PAIRED, 5, 5, 100, 0.2, 1.0, 20.0, -1.8, 2.2, 0.95, (1.0,), 30.0, (40.0,), (0,) * 5)
    assert e.se_at(10 ** 6) == pytest.approx(3.0, rel=1e-3)  # 30 / √100 stays whatever the seeds
    assert seeds_for(e, Criterion("greater"), 1.0, 0.025, 0.8) is None
    assert e.se_at(5) == pytest.approx(math.sqrt(1 / 5 + (900 + 1600 / 5) / 100))


def test_an_estimate_keeps_each_seeds_difference_and_the_run_groups_it_contrasts():
    """The report prints each comparison's per-seed differences, and the claim-level power reads which run groups a
    comparison shares with another (per_seed_scores names them)."""
    runs = pd.DataFrame({"arm": ["a", "a", "b", "b"], "seed": [0, 1, 0, 1], "top1": [0.8, 0.9, 0.7, 0.6],
                         "correct": [None] * 4})
    runs.attrs["unit"] = "vit"
    a, b = per_seed_scores(runs, arm="a"), per_seed_scores(runs, arm="b")
    e = paired_difference(a, b, confidence=0.95)
    assert e.per_seed == pytest.approx((10.0, 30.0)) and e.seeds == (0, 1)
    assert e.terms == (("vit:0,1", 1.0), ("vit:2,3", -1.0))
    w = unpaired_difference(a, b, confidence=0.95)
    assert w.runs == ((80.0, 90.0), (70.0, 60.0)) and w.terms == e.terms
    assert paired_difference({0: 1.0, 1: 2.0}, {0: 0.0, 1: 0.5}, confidence=0.95).terms == ()  # unnamed inputs


def test_an_estimate_keeps_each_arms_mean_over_the_runs_it_compares():
    """The claims table prints each arm's accuracy beside the difference: paired, over the seeds both arms ran (seed
    2 of a has no partner and is left out); Welch, over every run of each arm; per-image correctness as a percent."""
    a, b = {0: 80.0, 1: 82.0, 2: 99.0}, {0: 75.0, 1: 76.0}
    assert paired_difference(a, b, confidence=0.95).arm_means == pytest.approx((81.0, 75.5))
    assert unpaired_difference(a, b, confidence=0.95).arm_means == pytest.approx((87.0, 75.5))
    images = {0: np.array([1, 1, 0, 0], bool), 1: np.array([1, 1, 1, 0], bool)}
    other = {0: np.array([1, 0, 0, 0], bool), 1: np.array([0, 0, 0, 0], bool)}
    e = paired_difference(images, other, confidence=0.95)
    assert e.arm_means == pytest.approx((62.5, 12.5)) and e.as_dict()["arm_means"] == pytest.approx([62.5, 12.5])
    gains = paired_contrast([a, b, b, a], [1, -1, -1, 1], confidence=0.95, labels=("x", "y"))
    assert len(gains.arm_means) == 4  # one per input arm

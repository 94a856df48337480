"""Seed statistics: the paired t interval (scipy's), the three comparison verdicts with their margins, and the
power estimate (seed pairs that would decide an inconclusive comparison), checked by hand and against scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from pipeline.analysis.stats import (
    CONTRADICTED,
    INCONCLUSIVE,
    MAX_PAIRS,
    SUPPORTED,
    Criterion,
    Paired,
    paired_difference,
    pairs_needed,
)
from pipeline.errors import PipelineError


def paired(mean: float, std: float, n: int, confidence: float = 0.95) -> Paired:
    """A Paired with the t interval scipy gives for n differences of exactly this mean and sample std."""
    z = np.arange(n, dtype=float)
    x = mean + std * (z - z.mean()) / z.std(ddof=1)
    ci = sps.ttest_1samp(x, 0.0).confidence_interval(confidence)
    return Paired("a", "b", n, mean, std, float(ci.low), float(ci.high), confidence, tuple(range(n)))


def test_paired_interval_is_scipys_paired_t_interval():
    a, b = {0: 84.5, 1: 85.2, 2: 84.9, 3: 85.6}, {0: 82.1, 1: 82.5, 2: 83.0, 3: 82.2, 4: 90.0}
    p = paired_difference(a, b, confidence=0.9, labels=("impulse", "mimetic"))
    ref = sps.ttest_rel([a[s] for s in range(4)], [b[s] for s in range(4)]).confidence_interval(0.9)
    assert p.n == 4 and p.seeds == (0, 1, 2, 3)  # seed 4 has no partner
    assert p.low == pytest.approx(ref.low) and p.high == pytest.approx(ref.high)
    assert p.mean == pytest.approx(np.mean([2.4, 2.7, 1.9, 3.4]))
    assert Criterion("greater").verdict(p.low, p.high) == SUPPORTED


def test_n3_interval_is_the_wide_t_interval_not_a_normal_one():
    p = paired_difference({0: 3.0, 1: 1.0, 2: 5.0}, {0: 0.0, 1: 0.0, 2: 0.0}, confidence=0.95)
    half = sps.t.ppf(0.975, 2) * 2.0 / math.sqrt(3)  # mean 3, sd 2, t with 2 degrees of freedom = 4.30
    assert (p.low, p.high) == pytest.approx((3 - half, 3 + half))
    assert p.low < 0 < 3 - 1.96 * 2 / math.sqrt(3)  # a z interval would (wrongly) clear 0


def test_identical_differences_give_a_point_interval():
    p = paired_difference({0: 3.0, 1: 4.0}, {0: 1.0, 1: 2.0}, confidence=0.95)
    assert (p.mean, p.std, p.low, p.high) == (2.0, 0.0, 2.0, 2.0)


def test_one_pair_has_no_interval_and_is_inconclusive():
    p = paired_difference({0: 90.0}, {0: 80.0}, confidence=0.95)
    assert p.n == 1 and math.isnan(p.low) and not p.enough
    assert Criterion("greater").verdict(p.low, p.high) == INCONCLUSIVE
    power = pairs_needed(p, Criterion("greater"))
    assert power.pairs is None and "too few seed pairs" in power.text


def test_a_confidence_outside_0_1_is_a_user_error():
    with pytest.raises(PipelineError, match="report.confidence = 95"):
        paired_difference({0: 1.0, 1: 2.0}, {0: 0.0, 1: 0.5}, confidence=95)


@pytest.mark.parametrize("test, low, high, verdict", [
    (Criterion("greater"), 0.1, 3.0, SUPPORTED),
    (Criterion("greater"), -3.0, -0.1, CONTRADICTED),
    (Criterion("greater"), -0.1, 3.0, INCONCLUSIVE),
    (Criterion("greater"), 0.0, 3.0, INCONCLUSIVE),  # touching the boundary does not clear it
    (Criterion("less"), -3.0, -0.1, SUPPORTED),
    (Criterion("less"), 0.1, 3.0, CONTRADICTED),
    (Criterion("not_worse", 2.0), -1.5, 0.5, SUPPORTED),  # at most 2 points below
    (Criterion("not_worse", 2.0), -3.0, -2.5, CONTRADICTED),  # more than 2 below beyond noise
    (Criterion("not_worse", 2.0), -2.5, 0.0, INCONCLUSIVE),
    (Criterion("not_better", 0.5), -2.0, 0.4, SUPPORTED),  # "no gain": at most 0.5 above
    (Criterion("not_better", 0.5), 0.6, 2.0, CONTRADICTED),
    (Criterion("not_better", 0.5), 0.0, 1.0, INCONCLUSIVE),
    (Criterion("equivalent", 2.0), -1.0, 1.5, SUPPORTED),
    (Criterion("equivalent", 2.0), 2.5, 3.0, CONTRADICTED),
    (Criterion("equivalent", 2.0), -3.0, -2.1, CONTRADICTED),
    (Criterion("equivalent", 2.0), 1.0, 3.0, INCONCLUSIVE),
    (Criterion("greater"), math.nan, math.nan, INCONCLUSIVE),
])
def test_verdict_of_an_interval_against_its_boundary(test, low, high, verdict):
    assert test.verdict(low, high) == verdict


def test_margins_read_in_the_evidence_and_unknown_directions_are_refused():
    assert Criterion("not_worse", 2.0).need == "> -2" and Criterion("equivalent", 1.5).need == "inside ±1.5"
    with pytest.raises(ValueError, match="direction 'above'"):
        Criterion("above")


def test_power_estimate_by_hand():
    """The issue's mimetic - default: +3.05, 95% CI [-2.79, +8.89] with 3 pairs, i.e. sd 2.35: inconclusive.

    t_{0.975, n-1} * 2.35 / sqrt(n) is 3.74 at n = 4 and 2.92 at n = 5, the first below 3.05: 5 pairs.
    """
    sd = (8.89 - 3.05) * math.sqrt(3) / sps.t.ppf(0.975, 2)
    p = Paired("mimetic", "default", 3, 3.05, sd, -2.79, 8.89, 0.95, (0, 1, 2))
    power = pairs_needed(p, Criterion("greater"))
    assert (power.pairs, power.reaches) == (5, SUPPORTED)
    assert "5 seed pairs would make it supported" in power.text


@pytest.mark.parametrize("mean, std, test", [
    (1.2, 2.0, Criterion("greater")),
    (-0.8, 1.5, Criterion("greater")),  # wrong side: the estimate is for a contradiction
    (-1.0, 1.0, Criterion("not_worse", 2.0)),
    (0.5, 1.0, Criterion("equivalent", 2.0)),
    (0.3, 0.4, Criterion("not_better", 0.5)),
])
def test_power_estimate_is_where_scipys_interval_first_clears_the_boundary(mean, std, test):
    p = paired(mean, std, 2)
    assert test.verdict(p.low, p.high) == INCONCLUSIVE
    power = pairs_needed(p, test)
    assert power.pairs is not None and 2 < power.pairs <= MAX_PAIRS
    at, before = paired(mean, std, power.pairs), paired(mean, std, power.pairs - 1)
    assert test.verdict(at.low, at.high) == power.reaches != INCONCLUSIVE
    assert test.verdict(before.low, before.high) == INCONCLUSIVE


def test_power_estimate_says_when_no_feasible_number_decides():
    wrong = pairs_needed(paired(-1.0, 1.0, 3), Criterion("greater"))
    assert wrong.reaches == CONTRADICTED and "would not support the claim" in wrong.text
    on = pairs_needed(paired(0.0, 1.0, 3), Criterion("greater"))
    assert on.pairs is None and "lies on the boundary" in on.text
    close = pairs_needed(paired(0.05, 5.0, 3), Criterion("greater"))
    assert close.pairs is None and f"more than {MAX_PAIRS} seed pairs" in close.text

"""A claim's power (pipeline/analysis/power.py): one comparison matches the noncentral t, comparisons that share a
run group are correlated, and the searches (detectable effect, seeds, seed sd) answer what they promise."""

from __future__ import annotations

import math

import pytest
from statsmodels.stats.power import TTestIndPower, TTestPower

from pipeline.analysis.power import (
    SEARCH_DRAWS,
    Planned,
    at_distance,
    claim_detectable,
    claim_power,
    describe,
    sd_needed,
    seeds_needed,
)
from pipeline.analysis.stats import WELCH, Criterion

GREATER = Criterion("greater")


def comparison(terms=(), n=5, sd=3.0, criterion=GREATER, **kw) -> Planned:
    return Planned(criterion, 0.025, n, (sd,), terms=terms, **kw)


@pytest.mark.parametrize("n, effect", [(3, 5.0), (5, 3.0), (10, 2.0)])
def test_one_paired_comparison_is_the_noncentral_t(n, effect):
    expected = TTestPower().power(effect_size=effect / 3.0, nobs=n, alpha=0.025, alternative="larger")
    assert claim_power([comparison(n=n)], [effect], draws=40_000) == pytest.approx(expected, abs=0.012)


def test_a_welch_comparison_is_the_noncentral_t_with_satterthwaite_df():
    c = Planned(GREATER, 0.025, (5, 5), (2.0, 2.0), kind=WELCH)
    expected = TTestIndPower().power(effect_size=2.0 / 2.0, nobs1=5, ratio=1.0, alpha=0.025, alternative="larger")
    assert claim_power([c], [2.0]) == pytest.approx(expected, abs=0.01)


def test_a_claim_needs_every_comparison_and_shared_run_groups_correlate_them():
    """impulse − mimetic and mimetic − default share mimetic's runs (negatively correlated): both pass less often
    than two independent comparisons would; the same two with their own groups give the product of powers."""
    alone = claim_power([comparison()], [3.0], draws=20_000)
    shared = [comparison((("impulse", 1.0), ("mimetic", -1.0))), comparison((("mimetic", 1.0), ("default", -1.0)))]
    independent = [comparison((("a", 1.0), ("b", -1.0))), comparison((("c", 1.0), ("d", -1.0)))]
    both_shared = claim_power(shared, [3.0, 3.0], draws=20_000)
    both_independent = claim_power(independent, [3.0, 3.0], draws=20_000)
    assert both_independent == pytest.approx(alone ** 2, abs=0.015)
    assert both_shared < both_independent - 0.015  # Monte-Carlo se about 0.003 each
    same = [comparison((("a", 1.0), ("b", -1.0))), comparison((("a", 1.0), ("b", -1.0)))]
    assert claim_power(same, [3.0, 3.0], draws=20_000) == pytest.approx(alone, abs=0.015)  # one test, twice


def test_the_test_images_term_does_not_shrink_with_seeds():
    c = comparison(sd=0.5, image_sd=30.0, images=100)  # image se 3 points: no number of seeds beats it
    assert c.image_se(5) == pytest.approx(3.0)
    assert seeds_needed([c], [1.0], 0.8) is None
    assert sd_needed([c], [1.0], 0.8) is None


def test_the_searches_return_what_reaches_the_power():
    claim = [comparison((("i", 1.0), ("m", -1.0)), n=3), comparison((("m", 1.0), ("d", -1.0)), n=3)]
    def power(comparisons, deltas):  # the searches' draws: the same random numbers, so the same answers
        return claim_power(comparisons, deltas, SEARCH_DRAWS)
    d = claim_detectable(claim, 0.8)
    assert power(claim, [at_distance(c, d) for c in claim]) >= 0.8
    assert power(claim, [at_distance(c, d - 0.5) for c in claim]) < 0.8
    k = seeds_needed(claim, [1.0, 1.0], 0.8)
    assert k > 3 and power([c.at(k) for c in claim], [1.0, 1.0]) >= 0.8
    assert power([c.at(k - 1) for c in claim], [1.0, 1.0]) < 0.8
    f = sd_needed(claim, [1.0, 1.0], 0.8)
    assert 0 < f < 1 and power([c.scaled(f) for c in claim], [1.0, 1.0]) >= 0.8


def test_equivalence_is_two_one_sided_tests_and_its_distance_stops_at_the_margin():
    eq = comparison(criterion=Criterion("equivalent", 2.0), sd=1.0, n=4)
    assert at_distance(eq, 0.5) == 1.5 and at_distance(eq, 5.0) == 0.0
    assert claim_power([eq], [0.0], draws=20_000) > claim_power([eq], [1.5], draws=20_000)
    assert claim_power([eq], [2.0], draws=20_000) <= 0.03  # at its margin: TOST's size


def test_describe_says_what_the_design_cannot_decide():
    claim = [comparison((("i", 1.0), ("m", -1.0)), n=3), comparison((("m", 1.0), ("d", -1.0)), n=3)]
    s = {"source": "the plan's assumptions", "comparisons": 2, "target": 0.8, "power": 0.1, "mc_error": 0.005,
         "weakest_alone": 0.3, "detectable": claim_detectable(claim, 0.8), "seeds_needed": 30, "sd_factor": 0.25,
         "planned_n": ["3"]}
    text = describe(s)
    assert text.startswith("claim power (the plan's assumptions): P(all 2 comparisons supported) = 10% ± 0")
    assert "cannot decide it at the plan's effects: it would need 30 seeds per arm or seed sds 0.25× these" in text
    assert math.isfinite(s["detectable"])

"""The claims' verdict logic on synthetic per-seed results (no files): the four verdicts, the claim-level rule with
Holm, the plan's margins (TOST for "≈", Welch for claim 6), claims over model variants (1, 3, 7, 8), [CI]'s α grid
(9), per-image correctness in the intervals, and the one-line summaries."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from pipeline.analysis import claims
from pipeline.analysis.analysis_plan import load_plan
from pipeline.analysis.claims import Evidence, check_claims
from pipeline.errors import PipelineError

PAPER = Path(__file__).resolve().parent.parent / "paper"
#: the plan, with planned n as this file's runs have them
PLANS = load_plan(PAPER, {"seeds": 3, "filter_study.seeds": 3, "ci_alpha.seeds": 3, "ci_model3.seeds": 3,
                          "sia.seeds": 3, "weight_selection.seeds": 3})

#: variant -> (timm model, family, heads, parameters), as the runs record them
VARIANTS = {"vit": ("vit_tiny_patch16_224", "vit", 3, 4.7e5), "vit6": ("vit_small_patch16_224", "vit", 6, 1.8e6),
            "swin": ("swin_tiny_patch4_window7_224", "swin", 3, 2.8e7),
            "mixer": ("mixer_s16_224", "mixer", None, 4.8e5), "mixer_shift": ("mixer_s16_224", "mixer", None, 4.8e5)}
#: impulse > mimetic > default on every seed, with seed noise shared by the arms
ORDERED = {"impulse": {0: 0.845, 1: 0.852, 2: 0.848}, "mimetic": {0: 0.821, 1: 0.825, 2: 0.824},
           "default": {0: 0.800, 1: 0.806, 2: 0.801}}
CLAIMS = [{"id": i, "claim": f"claim {i}", "short": f"claim {i}", "source": "s", "published": "p"}
          for i in claims.CLAIMS]


def run_rows(dataset: str, variant: str, arms: dict, epochs: int = 4) -> list[dict]:
    model, family, heads, params = VARIANTS[variant]
    return [{"dataset": dataset, "variant": variant, "arm": arm, "seed": seed, "top1": top1, "model": model,
             "family": family, "num_heads": heads, "params": params, "correct": None,
             "history": [{"epoch": e, "train_top1": top1 * (e + 1) / epochs, "val_top1": top1 * (e + 1) / epochs}
                         for e in range(epochs)]}
            for arm, seeds in arms.items() for seed, top1 in seeds.items()]


def evidence(cells: dict, arms=("impulse", "default", "mimetic"), **extra) -> Evidence:
    """Evidence from {(dataset, variant): {arm: {seed: top-1 fraction}}}."""
    rows = [r for (d, v), per_arm in cells.items() for r in run_rows(d, v, per_arm)]
    datasets = tuple(dict.fromkeys(d for d, _ in cells))
    base = dict(filters=pd.DataFrame(columns=["variant", "seed", "top1", "sigma", "heads", "params", "correct"]),
                arms=arms, datasets=datasets, plans=PLANS, convergence_epochs=(2, 4), kernel_size=3,
                filter_dataset="fashion_mnist")
    return Evidence(pd.DataFrame(rows), **(base | extra))


def judged(ev: Evidence, cid: str) -> dict:
    return next(c for c in check_claims(CLAIMS, ev) if c["id"] == cid)


def shifted(per_seed: dict, points: dict) -> dict:
    """per_seed {seed: fraction} plus points[seed] / 100."""
    return {s: v + points[s] / 100 for s, v in per_seed.items()}


# --- the four verdicts -------------------------------------------------------------------------------------------

def test_a_consistent_ordering_is_supported():
    c = judged(evidence({("cifar10", "vit"): ORDERED}), "1")
    assert c["verdict"] == "supported" and [x["verdict"] for x in c["comparisons"]] == ["supported"] * 3
    assert c["summary"].startswith("all 3 comparison(s) supported; closest: cifar10, vit:")
    first = c["comparisons"][0]  # impulse - mimetic, paired by seed, with scipy's interval
    ref = sps.ttest_rel([84.5, 85.2, 84.8], [82.1, 82.5, 82.4]).confidence_interval(0.95)
    assert (first["a"], first["b"], first["n"]) == ("impulse", "mimetic", 3)
    assert first["low"] == pytest.approx(ref.low) and first["high"] == pytest.approx(ref.high)
    assert first["new_experiment_seeds"] is None and first["kind"] == "seeds"  # these runs have no per-image data
    assert "alone, at 80% power the planned 3 detect(s) a true difference" in first["power"]


def test_a_reversed_ordering_is_contradicted():
    reversed_ = {"impulse": ORDERED["default"], "mimetic": ORDERED["mimetic"], "default": ORDERED["impulse"]}
    c = judged(evidence({("cifar10", "vit"): reversed_}), "1")
    assert c["verdict"] == "contradicted"
    assert "the reverse holds (Holm-adjusted p < 0.001 among 3 comparisons)" in c["summary"]
    assert any("needs the interval > 0: contradicted (one-sided p" in e for e in c["evidence"])


def test_an_interval_spanning_zero_is_inconclusive_with_a_plan_for_a_new_experiment():
    noisy = dict(ORDERED, mimetic=shifted(ORDERED["default"], {0: 3.0, 1: -2.0, 2: 1.0}))  # mimetic ≈ default
    c = judged(evidence({("cifar10", "vit"): noisy}), "1")
    assert c["verdict"] == "inconclusive"
    mid = next(x for x in c["comparisons"] if (x["a"], x["b"]) == ("mimetic", "default"))
    assert mid["verdict"] == "inconclusive" and mid["low"] < 0 < mid["high"]
    assert mid["detectable"] > 5 and mid["new_experiment_seeds"] > 3
    assert (f"for a true difference of +1.00 pts, a new experiment would need {mid['new_experiment_seeds']} seeds"
            " per arm, assuming this run's seed sd") in mid["power"]
    assert " spans 0 (1 more open); the claim's power at the plan's effects is " in c["summary"]
    assert "(all 3 comparisons must pass)" in c["summary"] and "seed pairs would" not in c["summary"]
    power = c["power"]  # the claim's, from this run's variance components: all three comparisons at once
    assert power["comparisons"] == 3 and power["source"] == "this run's variance components"
    assert 0 <= power["power"] <= power["weakest_alone"] and power["power"] < 0.8 and power["detectable"] > 5
    assert any(e.startswith("claim power (this run's variance components): P(all 3 comparisons supported)")
               for e in c["evidence"])


def test_one_contradicted_comparison_outweighs_an_inconclusive_one():
    arms = {"impulse": shifted(ORDERED["default"], {0: 2.0, 1: -1.0, 2: 0.5}),  # impulse ≈ default: open
            "mimetic": shifted(ORDERED["default"], {0: -3.0, 1: -3.2, 2: -2.9}),  # mimetic < default: reversed
            "default": ORDERED["default"]}
    c = judged(evidence({("cifar10", "vit"): arms}), "1")
    assert {x["verdict"] for x in c["comparisons"]} >= {"inconclusive", "contradicted"}
    assert c["verdict"] == "contradicted"


def test_holm_keeps_a_lone_marginal_reversal_from_contradicting_the_claim():
    """mimetic − default = −1.0, −1.4, −0.7 points: one-sided p = 0.018 for the reverse, below 0.025 alone but not
    below Holm's 0.025 / 3 among the claim's three comparisons."""
    arms = {"impulse": shifted(ORDERED["default"], {0: 9.0, 1: 9.5, 2: 9.2}),
            "mimetic": shifted(ORDERED["default"], {0: -1.0, 1: -1.4, 2: -0.7}), "default": ORDERED["default"]}
    c = judged(evidence({("cifar10", "vit"): arms}), "1")
    mid = next(x for x in c["comparisons"] if (x["a"], x["b"]) == ("mimetic", "default"))
    assert mid["high"] < 0 and mid["p_reverse"] == pytest.approx(0.018, abs=0.001)  # the interval alone: reversed
    assert mid["p_reverse_holm"] == pytest.approx(3 * mid["p_reverse"]) and mid["verdict"] == "inconclusive"
    assert c["verdict"] == "inconclusive"


def test_per_image_correctness_puts_the_test_images_into_the_interval():
    rng = np.random.default_rng(0)
    ev = evidence({("cifar10", "vit"): ORDERED})
    correct = [rng.random(2000) < top1 for top1 in ev.runs["top1"]]
    ev.runs["correct"] = pd.Series(correct, dtype=object)
    c = judged(ev, "1")
    first = c["comparisons"][0]
    assert first["kind"] == "paired" and first["images"] == 2000 and first["image_sd"] >= 0
    assert "over 3 seed pair(s) × 2,000 test images (n = 3 planned)" in c["evidence"][0]
    seeds_only = judged(evidence({("cifar10", "vit"): ORDERED}), "1")["evidence"][0]
    assert "seeds only: no per-image correctness recorded" in seeds_only


def test_a_comparison_the_plan_marks_holdout_reads_the_test_and_held_out_images():
    """`holdout: true` in the plan: the interval is over the test images and the held-out pool where every run scored
    one; the same comparison unmarked, or a run without a pool, stays on the test images."""
    import dataclasses

    rng = np.random.default_rng(1)
    ev = evidence({("fashion_mnist", "vit"): ORDERED})
    ev.runs["correct"] = pd.Series([rng.random(500) < t for t in ev.runs["top1"]], dtype=object)
    ev.runs["pooled"] = pd.Series([np.concatenate([c, rng.random(1500) < t])
                                   for c, t in zip(ev.runs["correct"], ev.runs["top1"])], dtype=object)
    rule = PLANS["1"].rule("impulse_mimetic")
    marked = dataclasses.replace(rule, holdout=True)
    pair = {"dataset": "fashion_mnist", "variant": "vit"}
    pooled, plain = ev.pair(marked, "impulse", "mimetic", **pair), ev.pair(rule, "impulse", "mimetic", **pair)
    assert (pooled.images, pooled.pool, plain.images, plain.pool) == (2000, True, 500, False)
    assert claims.Check("x", pooled, marked).runs() == "3 seed pair(s) × 2,000 test and held-out images"
    ev.runs.loc[0, "pooled"] = None  # one run without a pool: the test images alone
    assert ev.pair(marked, "impulse", "mimetic", **pair).images == 500


def test_one_seed_is_inconclusive_with_the_reason():
    c = judged(evidence({("cifar10", "vit"): {a: {0: v[0]} for a, v in ORDERED.items()}}), "1")
    assert c["verdict"] == "inconclusive" and "from 1 seed pair(s), too few for an interval" in c["summary"]
    assert "at least 2 runs per arm are needed" in c["comparisons"][0]["power"]


def test_what_the_experiment_lacks_is_not_tested():
    ev = evidence({("cifar10", "vit"): {a: ORDERED[a] for a in ("impulse", "default")}}, arms=("impulse", "default"))
    verdicts = {c["id"]: c["verdict"] for c in check_claims(CLAIMS, ev)}
    assert verdicts == dict.fromkeys(verdicts, "not tested")
    assert set(verdicts) == set(claims.CLAIMS)


def test_every_verdict_is_one_of_the_four_words():
    ev = evidence({("cifar10", "vit"): ORDERED, ("imagenet", "vit"): ORDERED, ("cifar10", "swin"): ORDERED})
    assert {c["verdict"] for c in check_claims(CLAIMS, ev)} <= set(claims.VERDICTS)
    assert claims.VERDICTS == ("supported", "contradicted", "inconclusive", "not tested")


def test_a_gaussian_grid_without_a_comparable_pair_says_so():
    filters = pd.DataFrame([{"variant": v, "seed": s, "top1": 0.8, "sigma": sigma, "heads": heads, "params": 6e4}
                            for v, sigma, heads in [("gaussian-0.1-h64", 0.1, 64), ("gaussian-1-h4", 1.0, 4)]
                            for s in (0, 1)])
    c = judged(evidence({("cifar10", "vit"): ORDERED}, filters=filters), "5b")
    assert c["verdict"] == "not tested" and c["summary"].startswith("the grid's runs form no comparable pair")


# --- claims over model variants ----------------------------------------------------------------------------------

def test_claim_1_needs_every_vit_family_variant_and_ignores_swin():
    bad = {"impulse": ORDERED["default"], "mimetic": ORDERED["mimetic"], "default": ORDERED["impulse"]}
    ev = evidence({("cifar10", "vit"): ORDERED, ("cifar10", "vit6"): ORDERED, ("cifar10", "swin"): bad})
    c = judged(ev, "1")
    assert c["verdict"] == "supported" and {x["label"] for x in c["comparisons"]} == {"cifar10, vit", "cifar10, vit6"}
    ev = evidence({("cifar10", "vit"): ORDERED, ("cifar10", "vit6"): bad})
    assert judged(ev, "1")["verdict"] == "contradicted"


def test_claim_2_is_judged_on_imagenet_runs_only():
    assert judged(evidence({("cifar10", "vit"): ORDERED}), "2")["verdict"] == "not tested"
    imagenet = {"impulse": shifted(ORDERED["default"], {0: -0.3, 1: 0.2, 2: 0.0}),  # within 1 point of default
                "mimetic": shifted(ORDERED["default"], {0: -0.7, 1: -0.6, 2: -0.8}), "default": ORDERED["default"]}
    c = judged(evidence({("imagenet", "vit"): imagenet}), "2")
    assert c["verdict"] == "supported" and [x["needs"] for x in c["comparisons"]] == ["> -1", "< 0"]


def test_claim_3_gains_grow_with_heads_paired_by_seed():
    small = ORDERED  # impulse - default: 4.5, 4.6, 4.7 points; impulse - mimetic: 2.4, 2.7, 2.4 (means 4.60, 2.50)
    big = {"impulse": shifted(ORDERED["impulse"], {0: 2.0, 1: 2.3, 2: 1.9}), "mimetic": ORDERED["mimetic"],
           "default": ORDERED["default"]}
    c = judged(evidence({("cifar100", "vit6"): big, ("cifar100", "vit"): small}), "3")
    assert c["verdict"] == "supported"
    labels = [x["label"] for x in c["comparisons"]]
    assert labels == ["cifar100, gain over default, vit6 vs vit", "cifar100, gain over mimetic, vit6 vs vit"]
    first = c["comparisons"][0]
    ref = sps.ttest_1samp([2.0, 2.3, 1.9], 0.0).confidence_interval(0.95)  # the gain difference, seed by seed
    assert first["mean"] == pytest.approx(2.0 + 0.2 / 3) and first["low"] == pytest.approx(ref.low)
    assert any(e.startswith("variants by head count, then size: vit (") for e in c["evidence"])
    assert any("impulse gain over default: vit +4.60 [" in e for e in c["evidence"])
    shrinking = judged(evidence({("cifar100", "vit"): big, ("cifar100", "vit6"): small}), "3")
    assert shrinking["verdict"] == "contradicted"


def test_claim_3_needs_two_head_counts():
    c = judged(evidence({("cifar100", "vit"): ORDERED, ("cifar100", "swin"): ORDERED}), "3")
    assert c["verdict"] == "not tested"
    assert "vit (3 heads, 470k parameters; timm's vit_tiny_patch16_224 class)" in c["summary"]


def filter_frame(top1: dict) -> pd.DataFrame:
    """{variant: {seed: top-1 fraction}} -> filter-study rows."""
    return pd.DataFrame([{"variant": v, "seed": s, "top1": t, "sigma": None, "heads": None, "params": 6e4,
                          "correct": None} for v, seeds in top1.items() for s, t in seeds.items()])


def test_claim_6_is_welch_over_every_run_of_the_first_vit_family_variant():
    filters = filter_frame({"learned": {0: 0.85, 1: 0.856, 2: 0.851}})
    worse = {a: shifted(v, {0: -5, 1: -5, 2: -5}) for a, v in ORDERED.items()}
    four = dict(ORDERED, impulse=ORDERED["impulse"] | {3: 0.849})  # a fourth ViT seed without a ConvMixer partner
    ev = evidence({("fashion_mnist", "vit"): four, ("fashion_mnist", "vit6"): worse}, filters=filters)
    c = judged(ev, "6")
    first = c["comparisons"][0]
    assert c["verdict"] == "supported" and first["label"] == "fashion_mnist, vit" and first["needs"] == "> -2"
    ref = sps.ttest_ind([84.5, 85.2, 84.8, 84.9], [85.0, 85.6, 85.1], equal_var=False).confidence_interval(0.95)
    assert (first["kind"], first["n"], first["n_b"]) == ("welch", 4, 3)  # no seed dropped
    assert (first["low"], first["high"]) == pytest.approx((ref.low, ref.high))


def test_claim_5a_tests_about_equal_both_ways_and_clearly_worse_beyond_its_margin():
    learned = {0: 0.85, 1: 0.856, 2: 0.851}
    filters = filter_frame({"learned": learned, "random": shifted(learned, {0: 0.3, 1: -0.2, 2: 0.1}),
                            "impulse": shifted(learned, {0: 3.2, 1: 3.0, 2: 3.1}),  # far above: not "≈"
                            "box-9": shifted(learned, {0: -9, 1: -8, 2: -10})})
    c = judged(evidence({("fashion_mnist", "vit"): ORDERED}, filters=filters), "5a")
    got = {x["a"]: (x["needs"], x["verdict"]) for x in c["comparisons"]}
    assert got == {"random": ("inside ±2", "supported"), "impulse": ("inside ±2", "contradicted"),
                   "box-9": ("< -2", "supported")}
    assert c["verdict"] == "contradicted"
    alone = judged(evidence({("fashion_mnist", "vit"): ORDERED}, filters=filter_frame({"learned": learned})), "5a")
    assert alone["verdict"] == "not tested" and alone["summary"].startswith("no frozen filter family the plan tests")


def test_claim_5a_rand_star_is_softmax_and_perm_is_reported_beside_it_without_deciding_it():
    learned = {0: 0.85, 1: 0.856, 2: 0.851}
    near = shifted(learned, {0: 0.3, 1: -0.2, 2: 0.1})
    filters = filter_frame({"learned": learned, "random": near, "box-1": near,  # code-2401's box1 is the impulse
                            "box-9": shifted(learned, {0: -9, 1: -8, 2: -10}),
                            "softmax": shifted(learned, {0: -6, 1: -7, 2: -6.5}),  # rand*: clearly worse
                            "perm": shifted(learned, {0: 3.0, 1: 3.2, 2: 3.1}),  # far above learned
                            "learned-softmax": near})  # a trainable arm: what the frozen ones are compared with
    c = judged(evidence({("fashion_mnist", "vit"): ORDERED}, filters=filters), "5a")
    got = {x["a"]: (x["rule"], x["verdict"]) for x in c["comparisons"]}
    assert got == {"random": ("random", "supported"), "box-1": ("impulse", "supported"),
                   "box-9": ("box", "supported"), "softmax": ("softmax", "supported")}
    assert c["verdict"] == "supported"  # perm's reverse result does not decide 5a
    perm = [e for e in c["evidence"] if "perm" in e]
    assert len(perm) == 1 and perm[0].startswith("Not part of this verdict, an arm beyond the paper")
    assert "perm (beyond the paper): perm − learned = +3.10 pts" in perm[0] and perm[0].endswith(")")
    assert ": contradicted (one-sided p" in perm[0]  # judged in its own Holm family, plan entry `beyond`
    assert "perm" not in c["summary"]
    worse = filter_frame({"learned": learned, "softmax": near, "perm": shifted(learned, {0: -9, 1: -8, 2: -10})})
    c = judged(evidence({("fashion_mnist", "vit"): ORDERED}, filters=worse), "5a")
    assert c["verdict"] == "contradicted" and [x["a"] for x in c["comparisons"]] == ["softmax"]
    only_perm = filter_frame({"learned": learned, "perm": near})
    c = judged(evidence({("fashion_mnist", "vit"): ORDERED}, filters=only_perm), "5a")
    assert c["verdict"] == "not tested" and any(e.startswith("Not part of this verdict") for e in c["evidence"])


def test_the_plan_must_cover_every_claim_and_comparison_a_check_needs():
    ev = evidence({("cifar10", "vit"): ORDERED}, plans={k: v for k, v in PLANS.items() if k != "1"})
    with pytest.raises(PipelineError, match="has no entry for claim '1'"):
        check_claims(CLAIMS, ev)
    plans = dict(PLANS, **{"8": type(PLANS["8"])("8", {}, {})})
    ev = evidence({("cifar10", "swin"): ORDERED}, plans=plans)
    with pytest.raises(PipelineError, match="claim '8' has no comparison 'impulse_default'"):
        check_claims(CLAIMS, ev)


def test_claim_8_swin_impulse_gains_and_mimetic_no_gain_margin():
    swin = {"impulse": shifted(ORDERED["default"], {0: 1.5, 1: 1.2, 2: 1.8}),
            "mimetic": shifted(ORDERED["default"], {0: -0.2, 1: 0.1, 2: -0.1}), "default": ORDERED["default"]}
    assert judged(evidence({("cifar10", "vit"): ORDERED}), "8")["verdict"] == "not tested"
    c = judged(evidence({("cifar10", "vit"): ORDERED, ("cifar10", "swin"): swin}), "8")
    assert c["verdict"] == "supported"
    assert [(x["label"], x["needs"]) for x in c["comparisons"]] == [("cifar10, swin", "> 0"),
                                                                    ("cifar10, swin", "< +0.5")]
    assert any(e.startswith("plan, mimetic_default: mimetic − default < +0.5; 'no gain' = at most 0.5 above")
               for e in c["evidence"])
    gaining = dict(swin, mimetic=shifted(ORDERED["default"], {0: 3.0, 1: 2.8, 2: 3.1}))
    assert judged(evidence({("cifar10", "swin"): gaining}), "8")["verdict"] == "contradicted"


def test_claim_8_is_one_holm_family_over_the_whole_claim_and_per_variant_is_secondary():
    """Claim 8 is judged as its plan had it before any result was read: every Swin / Mixer variant's comparisons
    in one Holm family (an alternative construction labelled, not left out); a verdict per variant is the plan's
    labelled secondary analysis, shown and never deciding."""
    gains = {"impulse": shifted(ORDERED["default"], {0: 1.5, 1: 1.2, 2: 1.8}),
             "mimetic": shifted(ORDERED["default"], {0: -0.2, 1: 0.1, 2: -0.1}), "default": ORDERED["default"]}
    loses = dict(gains, impulse=shifted(ORDERED["default"], {0: -4.0, 1: -3.8, 2: -4.1}))
    cells = {("fashion_mnist", "mixer"): gains, ("fashion_mnist", "mixer_shift"): loses}
    c = judged(evidence(cells, alternatives=frozenset({"mixer_shift"})), "8")
    assert c["verdict"] == "contradicted" and "among 4 comparisons" in c["summary"]
    assert [x["label"] for x in c["comparisons"]] == (["fashion_mnist, mixer"] * 2
                                                     + ["fashion_mnist, mixer_shift (an alternative construction)"] * 2)
    assert {x["family"] for x in c["comparisons"]} == {"8"}
    secondary = [e for e in c["evidence"] if e.startswith("Secondary analysis, not deciding (")]
    assert len(secondary) == 1 and "post hoc" in secondary[0]
    assert secondary[0].endswith("mixer (mixer): supported; mixer_shift (mixer): contradicted")
    assert judged(evidence({("fashion_mnist", "mixer"): gains}), "8")["verdict"] == "supported"


def attention_record(peaks, locality, uniform=9 / 49, model="vit_tiny_patch16_224 with img size 28"):
    """measures.json as the attention stage writes it (layer 0 of the pseudo-input and real batch)."""
    layer = {"peak_agreement": peaks, "locality_mass": locality, "uniform_locality_mass": uniform}
    return {"model": model, "grids": {"0": [7, 7]}, "layers": [0],
            "measures": {"pseudo": {"0": layer}, "real": {"0": layer | {"peak_agreement": [0.9, 0.2, 0.3]}}}}


def test_claim_7_is_structural_per_vit_family_variant():
    good = {"impulse": attention_record([1.0, 0.99, 0.98], [0.9, 0.8, 0.8]),
            "mimetic": attention_record([0.6, 0.1, 0.1], [0.5, 0.5, 0.5]),
            "default": attention_record([0.1, 0.1, 0.1], [0.2, 0.2, 0.2])}  # 0.2 <= 2 x 9/49: flat
    off = dict(good, impulse=attention_record([1.0, 0.5, 0.98], [0.9, 0.8, 0.8]))  # a head misses its offset
    cells = {("cifar10", "vit"): ORDERED, ("cifar10", "swin"): ORDERED}
    c = judged(evidence(cells, attention={"vit": good, "swin": off}), "7")
    assert c["verdict"] == "supported" and c["comparisons"] == []
    assert c["summary"].startswith("structural, seed 0:")
    assert any("swin (swin): maps drawn in the figures, not judged" in e for e in c["evidence"])
    assert any("0.90, 0.20, 0.30" in e for e in c["evidence"])  # the real-batch peaks are reported
    c = judged(evidence(cells, attention={"vit": off}), "7")
    assert c["verdict"] == "contradicted" and "thresholds not met for vit" in c["summary"]
    flat_mimetic = dict(good, mimetic=good["default"])
    assert judged(evidence(cells, attention={"vit": flat_mimetic}), "7")["verdict"] == "contradicted"


# --- [CI]'s α grid -----------------------------------------------------------------------------------------------

def ci_frame(top1: dict) -> pd.DataFrame:
    """{(alpha, arm): base top-1 in %} -> rows for seeds 0-2 (seed noise shared across cells)."""
    noise = {0: 0.0, 1: 0.3, 2: -0.2}
    return pd.DataFrame([{"dataset": "cifar10", "alpha": alpha, "arm": arm, "seed": s, "top1": (v + noise[s]) / 100}
                         for (alpha, arm), v in top1.items() for s in noise])


#: [CI] Table 3 (CIFAR-10) at α 0.0 / 0.1 / 0.5: impulse > mimetic > random everywhere, α 0.1 best for both
TABLE3 = {(0.0, "random"): 87.26, (0.1, "random"): 86.87, (0.5, "random"): 82.53, (0.0, "mimetic"): 87.63,
          (0.1, "mimetic"): 88.05, (0.5, "mimetic"): 86.05, (0.0, "impulse"): 90.01, (0.1, "impulse"): 90.45,
          (0.5, "impulse"): 88.35}


def test_claim_9_reads_the_alpha_grid():
    c = judged(evidence({("cifar10", "vit"): ORDERED}, ci=ci_frame(TABLE3)), "9")
    assert c["verdict"] == "supported"
    labels = [(x["label"], x["a"], x["b"]) for x in c["comparisons"]]
    assert ("cifar10, α 0.5", "mimetic", "random") in labels
    assert ("cifar10, impulse", "α 0.1", "α 0.5") in labels and ("cifar10, mimetic", "α 0.1", "α 0") in labels
    assert len(labels) == 3 * 2 + 2 * 2  # ordering at each α, then α 0.1 against each other α for two inits
    late = dict(TABLE3) | {(0.5, "impulse"): 91.0}  # impulse best at α 0.5
    assert judged(evidence({("cifar10", "vit"): ORDERED}, ci=ci_frame(late)), "9")["verdict"] == "contradicted"


def test_claim_9_without_alpha_01_tests_the_ordering_only():
    grid = {k: v for k, v in TABLE3.items() if k[0] != 0.1}
    c = judged(evidence({("cifar10", "vit"): ORDERED}, ci=ci_frame(grid)), "9")
    assert c["verdict"] == "supported" and len(c["comparisons"]) == 4
    assert any("'best α = 0.1' not tested (the grid has α 0, 0.5)" in e for e in c["evidence"])
    assert judged(evidence({("cifar10", "vit"): ORDERED}), "9")["verdict"] == "not tested"


def test_headline_is_per_dataset_and_variant():
    ev = evidence({("cifar10", "vit"): ORDERED, ("cifar10", "swin"): ORDERED})
    rows = [(d, v, c.estimate.a, c.estimate.b, c.verdict) for d, v, c in claims.headline(ev)]
    assert rows == [("cifar10", "vit", "impulse", "default", "supported"),
                    ("cifar10", "vit", "impulse", "mimetic", "supported"),
                    ("cifar10", "swin", "impulse", "default", "supported"),
                    ("cifar10", "swin", "impulse", "mimetic", "supported")]


# --- [CI]'s Model III grid (Table 2) -----------------------------------------------------------------------------

#: [CI] Table 2 (CIFAR-10): (qk, value, arm) -> top-1 %
TABLE2 = {("trained", "value", "random"): 73.04, ("trained", "value", "mimetic"): 73.46,
          ("trained", "value", "impulse"): 74.95, ("frozen", "value", "random"): 61.76,
          ("frozen", "value", "mimetic"): 61.24, ("frozen", "value", "impulse"): 77.81,
          ("frozen", "novalue", "random"): 59.56, ("frozen", "novalue", "mimetic"): 59.98,
          ("frozen", "novalue", "impulse"): 77.11}


def m3_frame(top1: dict, noise: dict | None = None) -> pd.DataFrame:
    """{(qk, value, arm): base top-1 in %} -> rows for seeds 0-2 (noise[seed][arm] added, in points)."""
    noise = noise or {0: {}, 1: {}, 2: {}}
    return pd.DataFrame([{"dataset": "cifar10", "arm": arm, "qk": qk, "value": value, "seed": s,
                          "top1": (v + 0.3 * s + noise[s].get(arm, 0.0)) / 100}
                         for (qk, value, arm), v in top1.items() for s in noise])


def test_claim_10_judges_the_frozen_columns_of_table_2():
    c = judged(evidence({("cifar10", "vit"): ORDERED}, m3=m3_frame(TABLE2)), "10")
    assert c["verdict"] == "supported"
    labels = [(x["label"], x["a"], x["b"]) for x in c["comparisons"]]
    assert labels == [("cifar10, NT w/ V", "impulse", "random"), ("cifar10, NT w/ V", "impulse", "mimetic"),
                      ("cifar10, NT w/o V", "impulse", "random"), ("cifar10, NT w/o V", "impulse", "mimetic")]
    # impulse level with the others at NT w/o V, with seed noise: not shown either way
    tied = dict(TABLE2) | {("frozen", "novalue", "impulse"): 59.8}
    noisy = {0: {"impulse": 1.5}, 1: {"impulse": -1.5}, 2: {"impulse": 0.2}}
    assert judged(evidence({("cifar10", "vit"): ORDERED}, m3=m3_frame(tied, noisy)), "10")["verdict"] == \
        "inconclusive"


def test_claim_10_says_when_its_two_baselines_are_one():
    """Frozen random and mimetic attention are both near-uniform: where their per-image scores agree on all but a
    few images, the evidence says its comparisons with each are the same comparison twice; where not, only counts."""
    rng = np.random.default_rng(0)
    rows = []
    for s in range(3):
        base = rng.random(1000) < 0.6
        impulse = rng.random(1000) < 0.8
        for value, differ in (("value", 2), ("novalue", 150)):
            other = base.copy()
            other[:differ] = ~other[:differ]
            for arm, correct in (("random", base), ("mimetic", other), ("impulse", impulse)):
                rows.append({"dataset": "cifar10", "arm": arm, "qk": "frozen", "value": value, "seed": s,
                             "top1": correct.mean(), "correct": correct, "images": np.arange(1000)})
    c = judged(evidence({("cifar10", "vit"): ORDERED}, m3=pd.DataFrame(rows)), "10")
    notes = [e for e in c["evidence"] if "score differently" in e]
    assert notes == ["cifar10, NT w/ V: random and mimetic score differently on 2, 2, 2 of 1,000 test images (seeds"
                     " 0, 1, 2): one baseline, not two, so the comparisons with random and with mimetic are the same"
                     " comparison twice",
                     "cifar10, NT w/o V: random and mimetic score differently on 150, 150, 150 of 1,000 test images"
                     " (seeds 0, 1, 2)"]


def test_claim_10_is_not_tested_without_the_frozen_grid():
    assert judged(evidence({("cifar10", "vit"): ORDERED}), "10")["verdict"] == "not tested"
    trained_only = {k: v for k, v in TABLE2.items() if k[0] == "trained"}
    c = judged(evidence({("cifar10", "vit"): ORDERED}, m3=m3_frame(trained_only)), "10")
    assert c["verdict"] == "not tested" and "params `ci_model3`" in c["evidence"][0]


def t1_frame(top1: dict, noise: dict | None = None) -> pd.DataFrame:
    """{(form, value): base top-1 in %} -> random / trained rows of the [CI] Tables 1-2 frame, seeds 0-2."""
    noise = noise or {0: {}, 1: {}, 2: {}}
    return pd.DataFrame([{"dataset": "cifar10", "form": form, "arm": "random", "qk": "trained", "value": value,
                          "seed": s, "top1": (v + 0.3 * s + noise[s].get(form, 0.0)) / 100}
                         for (form, value), v in top1.items() for s in noise])


#: [CI] Table 1 (CIFAR-10), with the no-PE Simple ViT w/o V (not published) set 14 points down, as w/ V
TABLE1 = {("simple", "value"): 71.96, ("simple", "novalue"): 70.38, ("simple_nope", "value"): 57.97,
          ("simple_nope", "novalue"): 56.4, ("model1", "value"): 71.3, ("model1", "novalue"): 70.69,
          ("model2", "value"): 72.16, ("model2", "novalue"): 71.44, ("model3", "value"): 73.04,
          ("model3", "novalue"): 72.63}


def test_claim_15_judges_table_1_as_published():
    c = judged(evidence({("cifar10", "vit"): ORDERED}, m3=t1_frame(TABLE1)), "15")
    assert c["verdict"] == "supported"
    assert [(x["label"], x["a"], x["b"], x["needs"]) for x in c["comparisons"][:3]] == [
        ("cifar10, w/ V", "model2", "simple", "> -1"), ("cifar10, w/ V", "model3", "simple", "> -1"),
        ("cifar10, w/ V", "simple", "simple_nope", "> 0")]
    worse = dict(TABLE1) | {("model2", "value"): 66.0}  # positions alone 6 points down: contradicted
    assert judged(evidence({("cifar10", "vit"): ORDERED}, m3=t1_frame(worse)), "15")["verdict"] == "contradicted"


def test_claim_15_is_not_tested_without_table_1_forms():
    assert judged(evidence({("cifar10", "vit"): ORDERED}), "15")["verdict"] == "not tested"
    only3 = {k: v for k, v in TABLE1.items() if k[0] == "model3"}
    c = judged(evidence({("cifar10", "vit"): ORDERED}, m3=t1_frame(only3)), "15")
    assert c["verdict"] == "not tested" and "ci_model3.forms" in c["evidence"][0]


def config_frame(per_config: dict) -> pd.DataFrame:
    """{config: {arm: {seed: top-1}}} -> training-configuration rows of the 'vit' variant on cifar10."""
    return pd.DataFrame([r | {"config": c} for c, arms in per_config.items()
                         for r in run_rows("cifar10", "vit", arms)])


def test_claim_11_asks_every_training_configuration_and_the_grids_own():
    assert judged(evidence({("cifar10", "vit"): ORDERED}), "11")["verdict"] == "not tested"
    configs = config_frame({"lr_half": ORDERED, "randaug": ORDERED})
    c = judged(evidence({("cifar10", "vit"): ORDERED}, configs=configs), "11")
    assert c["verdict"] == "supported"
    assert [x["label"] for x in c["comparisons"]] == ["cifar10, vit, train", "cifar10, vit, lr_half",
                                                     "cifar10, vit, randaug"]
    flipped = {"impulse": ORDERED["default"], "mimetic": ORDERED["mimetic"], "default": ORDERED["impulse"]}
    c = judged(evidence({("cifar10", "vit"): ORDERED}, configs=config_frame({"lr_half": ORDERED, "randaug": flipped})),
               "11")
    assert c["verdict"] == "contradicted" and "cifar10, vit, randaug" in c["summary"]


# --- at the edge: a verdict another CPU's spread could turn ------------------------------------------------------

def test_a_verdict_within_the_cross_cpu_spread_of_its_boundary_is_marked_at_the_edge():
    from pipeline.analysis.claims_report import verdict_cell

    near = dict(ORDERED, impulse=shifted(ORDERED["mimetic"], {0: 0.9, 1: 1.1, 2: 1.0}))  # impulse − mimetic ≈ +1
    c = judged(evidence({("cifar10", "vit"): near}, cpu_spread=1.0), "1")
    close = next(x for x in c["comparisons"] if (x["a"], x["b"]) == ("impulse", "mimetic"))
    assert close["verdict"] == "supported" and close["low"] > 0
    assert close["cpu_shift"] == pytest.approx(1.0 * np.sqrt(2 / 3))  # one pt a cell, 3 seed pairs
    assert close["edge_verdict"] == "inconclusive"  # the mean 0.82 lower: its interval reaches 0
    assert c["verdict"] == "supported" and c["edge_verdict"] == "inconclusive"
    assert "at the edge: a shift of ±0.82 pts" in " ".join(c["evidence"])
    assert verdict_cell(c) == "**supported** (at the edge: on another CPU, inconclusive)"
    far = next(x for x in c["comparisons"] if (x["a"], x["b"]) == ("mimetic", "default"))
    assert far["verdict"] == "supported" and far["edge_verdict"] is None  # +2 pts: beyond the spread's reach


def test_without_a_measured_spread_no_verdict_is_at_the_edge():
    near = dict(ORDERED, impulse=shifted(ORDERED["mimetic"], {0: 0.9, 1: 1.1, 2: 1.0}))
    c = judged(evidence({("cifar10", "vit"): near}), "1")
    assert c["edge_verdict"] is None and all(x["edge_verdict"] is None and x["cpu_shift"] == 0
                                             for x in c["comparisons"])


def test_the_cross_cpu_shift_of_a_welch_comparison_counts_both_arms_runs():
    from pipeline.analysis.stats import WELCH, Estimate

    e = Estimate("a", "b", WELCH, 4, 9, 0, 1.0, 0.5, 8.0, 0.0, 2.0, 0.95, (1.0, 1.0), 0.0, (), ())
    assert claims.cross_cpu_shift(e, 1.5) == pytest.approx(1.5 * np.sqrt(1 / 4 + 1 / 9))

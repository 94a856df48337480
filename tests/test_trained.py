"""Were the runs trained? The plateau record of a run (`pipeline.analysis.trained`), the plan's `training` entry, and
the guard: a comparison resting on an arm that never left chance is not tested, and says why."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from test_claims import CLAIMS, ORDERED, PLANS, run_rows

from pipeline.analysis import claims, tables, trained
from pipeline.analysis.analysis_plan import TrainingRule, load_training_rule
from pipeline.analysis.claims import Evidence, check_claims, headline
from pipeline.errors import PipelineError

RULE = TrainingRule(chance_loss_ratio=0.9, min_top1_over_chance=4.0, plateau_fraction=0.25, plateau_gain=1.0,
                    plateau_z=2.0)
CHANCE = math.log(10)


def curve(*top1: float) -> list[dict]:
    return [{"epoch": e, "val_top1": v / 100, "train_top1": v / 100} for e, v in enumerate(top1)]


def test_a_run_at_chance_did_not_train_and_a_rising_one_is_labelled():
    flat = trained.status(curve(50, 70, 80, 81, 81.5, 81.6, 81.4, 81.7, 81.5, 81.6, 81.6, 81.5), 0.9, 10, RULE)
    assert flat["status"] == trained.TRAINED and flat["trained"] and flat["plateaued"]
    assert abs(flat["plateau_gain"]) < 0.3  # a line through the last quarter (3 of 12 epochs): flat
    rising = trained.status(curve(30, 40, 50, 55, 60, 65, 70, 75), 1.2, 10, RULE)
    assert rising["status"] == trained.RISING and rising["trained"] and not rising["plateaued"]
    assert rising["plateau_gain"] == pytest.approx(10) and rising["plateau_se"] == pytest.approx(0, abs=1e-9)
    stuck = trained.status(curve(12, 15, 16, 17), 2.257, 10, RULE)  # digits' default arm in cpu-all
    assert stuck["status"] == trained.UNTRAINED and not stuck["trained"] and not stuck["plateaued"]
    assert stuck["chance_loss"] == pytest.approx(CHANCE) and stuck["loss_ratio"] == pytest.approx(2.257 / CHANCE)
    unknown = trained.status(curve(50, 60), 1.0, 0, RULE)  # a user folder's classes are not in the registry
    assert unknown["status"] == trained.UNKNOWN and unknown["trained"]
    once = trained.status(curve(70, 72), 0.5, 10, RULE)  # two evaluations: no line with a residual, not rising
    assert once["status"] == trained.TRAINED and math.isnan(once["plateau_gain"])


def test_a_model_at_thirty_percent_did_not_train():
    """Left chance by its loss (1.8 < 0.9 ln 10) but stopped at 30 % on ten classes, below 4 x chance: not trained."""
    weak = trained.status(curve(15, 22, 26, 28, 29, 30, 30, 30), 1.8, 10, RULE)
    assert weak["status"] == trained.UNTRAINED and not weak["trained"]
    assert trained.status(curve(15, 22, 30, 35, 38, 40, 41, 41), 1.6, 10, RULE)["trained"]


def test_a_rise_inside_its_own_noise_is_not_rising():
    """A line through the last 4 of 16 epochs rises 1.5 points, but the evaluations jump by 3-4 points around it:
    inside 2 standard errors, so plateaued; the same rise on a smooth curve is still rising. The anneal's lift of the
    last quarter's level over the quarter before (70 -> 78 here) does not count."""
    noisy = trained.status(curve(60, 66, 70, 72, 73, 74, 75, 76, 76, 77, 77, 78, 76, 80, 76, 79), 0.9, 10, RULE)
    assert 1.0 <= noisy["plateau_gain"] < 2 * noisy["plateau_se"] and noisy["status"] == trained.TRAINED
    smooth = trained.status(curve(*[70 + 0.5 * e for e in range(16)]), 0.9, 10, RULE)
    assert smooth["plateau_gain"] == pytest.approx(1.5) and smooth["status"] == trained.RISING


def test_the_plan_states_the_training_rule_and_a_bad_one_is_named(tmp_path: Path):
    assert load_training_rule(Path(__file__).resolve().parent.parent / "paper") == RULE
    (tmp_path / "plan.yaml").write_text("training: {chance_loss_ratio: 1.5}\n")
    with pytest.raises(PipelineError, match="0 < chance_loss_ratio <= 1"):
        load_training_rule(tmp_path)
    (tmp_path / "plan.yaml").write_text("training: {plateau: 1}\n")
    with pytest.raises(PipelineError, match="training takes chance_loss_ratio, min_top1_over_chance, plateau_fraction"):
        load_training_rule(tmp_path)
    (tmp_path / "plan.yaml").write_text("claims: {}\n")
    assert load_training_rule(tmp_path) == TrainingRule()


def evidence(losses: dict[str, float], arms=("impulse", "default", "mimetic")) -> Evidence:
    """claim 1's ordered arms on digits, each arm's runs ending at the training loss `losses[arm]`."""
    rows = run_rows("digits", "vit", ORDERED)
    for r in rows:
        r["train_loss"] = losses.get(r["arm"], 0.8)
    runs = trained.annotate(pd.DataFrame(rows), RULE)
    return Evidence(runs, pd.DataFrame(columns=["variant", "seed", "top1", "sigma", "heads", "params", "correct"]),
                    arms, ("digits",), PLANS, (2, 4), 3, "fashion_mnist")


def test_an_arm_at_chance_makes_its_claim_not_tested_whatever_its_interval():
    ok = next(c for c in check_claims(CLAIMS, evidence({})) if c["id"] == "1")
    assert ok["verdict"] == "supported"
    c = next(c for c in check_claims(CLAIMS, evidence({"default": 2.257})) if c["id"] == "1")
    assert c["verdict"] == claims.NOT_TESTED
    assert c["summary"] == ("not tested: digits, vit, default did not train (3 of 3 seed(s); train loss 2.26,"
                            " chance 2.30)")
    by = {(x["a"], x["b"]): x for x in c["comparisons"]}
    assert by[("impulse", "mimetic")]["verdict"] == "supported"  # its arms trained: still judged, shown
    assert by[("mimetic", "default")]["verdict"] == by[("impulse", "default")]["verdict"] == claims.NOT_TESTED
    assert by[("impulse", "default")]["untrained"] == [c["summary"].removeprefix("not tested: ")]
    assert c["power"] is None
    assert any("impulse − default: not tested, digits, vit, default did not train" in e for e in c["evidence"])


def test_the_headline_does_not_answer_on_an_arm_that_did_not_train():
    from pipeline.analysis.report import answer

    rows = headline(evidence({"mimetic": 2.29}))
    verdicts = {c.estimate.b: c.verdict for _, _, c in rows}
    assert verdicts == {"default": "supported", "mimetic": claims.NOT_TESTED}
    assert answer([c.as_dict() for _, _, c in rows]).startswith("Not tested: digits, vit, mimetic did not train")


def test_the_training_table_counts_each_group_and_the_aggregate_reads_the_plan():
    runs = evidence({"default": 2.257}).runs
    t = tables.training_table({"vit": runs}, RULE)
    by = {r[1]: r for r in t.rows}
    assert by["digits, vit, default"][5] == "3 did not train"
    assert by["digits, vit, impulse"][3] == f"0.80 / {CHANCE:.2f}"
    assert set(t.data["did_not_train"]) == {0, 3}

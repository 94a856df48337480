"""paper/plan.yaml, the analysis plan: the real file loads and resolves its planned n from params, covers every
claim of claims.yaml, and a bad entry stops with one message naming the claim, the comparison and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipeline.analysis.analysis_plan import load_plan, threshold
from pipeline.analysis.claims import CLAIMS
from pipeline.analysis.published import load_claims
from pipeline.errors import PipelineError

PAPER = Path(__file__).resolve().parent.parent / "paper"
SIZES = {"seeds": 5, "filter_study.seeds": 4, "ci_alpha.seeds": 3, "ci_model3.seeds": 3, "sia.seeds": 3,
         "weight_selection.seeds": 3}


def write_plan(tmp_path: Path, claims: dict, defaults: dict | None = None) -> Path:
    plan = {"defaults": defaults or {"alpha": 0.025, "power": 0.8, "interval": "paired", "n": "seeds"},
            "claims": claims}
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan, allow_unicode=True))
    return tmp_path


def test_the_plan_resolves_n_from_params_and_covers_every_checked_claim():
    plans = load_plan(PAPER, SIZES)
    assert {c["id"] for c in load_claims(PAPER) if c["id"] in CLAIMS} <= set(plans)
    six = plans["6"].rule("vit_convmixer")
    assert (six.interval, six.n, six.n_from) == ("welch", (5, 4), "seeds / filter_study.seeds")
    assert plans["5a"].rule("random").criterion.need == "inside ±2" and plans["5a"].rule("box").criterion.need == "< -2"
    assert plans["4"].rule("impulse_mimetic").interval == "seeds" and plans["9"].rule("best_alpha").n == (3,)
    one = plans["1"].rule("mimetic_default")
    assert (one.alpha, one.confidence, one.family, one.effect) == (0.025, 0.95, "1", 1.0)
    assert threshold(plans["7"], "peak_min") == 0.9 and plans["9"].rule("best_alpha").extra == {"best": 0.1}


def test_defaults_and_claim_keys_reach_the_comparisons(tmp_path):
    plans = load_plan(write_plan(tmp_path, {"x": {"n": 7, "alpha": 0.05, "comparisons": {
        "c": {"a": "p", "b": "q", "direction": "greater", "effect": 1.0, "family": "f"}}}}), SIZES)
    rule = plans["x"].rule("c")
    assert (rule.n, rule.n_from, rule.alpha, rule.confidence, rule.family) == ((7,), "plan", 0.05, 0.9, "f")
    assert rule.row()["needs"] == "p − q > 0"


@pytest.mark.parametrize("spec, message", [
    ({"a": "p", "b": "q", "direction": "above", "effect": 1.0}, "direction 'above'"),
    ({"a": "p", "b": "q", "direction": "greater", "effect": -1.0}, "effect -1 does not lie on the claimed side"),
    ({"a": "p", "b": "q", "direction": "equivalent", "margin": 1.0, "effect": 1.5}, "does not lie on the claimed"),
    ({"a": "p", "b": "q", "direction": "greater"}, "missing effect"),
    ({"a": "p", "b": "q", "direction": "greater", "effect": 1.0, "margn": 1}, "unknown key 'margn'"),
    ({"a": "p", "b": "q", "direction": "greater", "effect": 1.0, "n": "seedz"}, "n = 'seedz' is not a params key"),
    ({"a": "p", "b": "q", "direction": "greater", "effect": 1.0, "interval": "welch"}, "plans two numbers"),
    ({"a": "p", "b": "q", "direction": "greater", "effect": 1.0, "alpha": 0.05 * 20}, "0 < alpha < 0.5"),
])
def test_a_bad_comparison_names_claim_comparison_and_fix(tmp_path, spec, message):
    with pytest.raises(PipelineError, match=message) as err:
        load_plan(write_plan(tmp_path, {"x": {"comparisons": {"c": spec}}}), SIZES)
    assert "claim 'x', comparison 'c'" in str(err.value)


def test_a_family_runs_at_one_alpha_and_a_missing_plan_is_named(tmp_path):
    mixed = {"c": {"a": "p", "b": "q", "direction": "greater", "effect": 1.0},
             "d": {"a": "p", "b": "q", "direction": "greater", "effect": 1.0, "alpha": 0.01}}
    with pytest.raises(PipelineError, match="family 'x' mixes alpha levels"):
        load_plan(write_plan(tmp_path, {"x": {"comparisons": mixed}}), SIZES)
    with pytest.raises(PipelineError, match="plan.yaml: not found"):
        load_plan(tmp_path / "nowhere", SIZES)
    with pytest.raises(PipelineError, match="needs thresholds.peak_min"):
        threshold(load_plan(write_plan(tmp_path, {"7": {"thresholds": {}}}), SIZES)["7"], "peak_min")


def test_confirmatory_seeds_per_profile(tmp_path):
    from pipeline.analysis.analysis_plan import Confirmatory, load_confirmatory

    (tmp_path / "plan.yaml").write_text("confirmatory:\n- {profile: cpu-all, seeds: [10, 11]}\n"
                                        "- {profile: cpu, seeds: [20, 21]}\n")
    assert load_confirmatory(tmp_path, "cpu") == Confirmatory("cpu", (20, 21))
    assert load_confirmatory(tmp_path) == load_confirmatory(tmp_path, "smoke") == Confirmatory("cpu-all", (10, 11))
    (tmp_path / "plan.yaml").write_text("confirmatory:\n- {profile: cpu}\n")
    with pytest.raises(PipelineError, match="each confirmatory entry needs a profile"):
        load_confirmatory(tmp_path)

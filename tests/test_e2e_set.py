"""The laptop set's command at smoke size: `python -m pipeline repro` of profile smoke-all (cpu-all's blocks, tiny)
in a fresh git copy of this repository, then `python -m pipeline readme`: one run answers every claim but
ImageNet's in one table, the README's claims block is filled from it, the report carries the plan's history in
summary, the per-seed differences and [CI] Figs 6-9, and reports/appendix.md every change. Minutes: marked slow."""

from __future__ import annotations

import json
import re

import pytest
from workspace import sh

pytestmark = [pytest.mark.slow("builds profile smoke-all (the laptop set's every block, tiny) through dvc"),
              pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def built(laptop_set_built):
    return laptop_set_built


def test_one_run_answers_every_claim_in_one_table(built):
    claims = json.loads((built / "results/tables/claims.json").read_text())
    verdicts = {c["id"]: c["verdict"] for c in claims["claims"]}
    # ImageNet, and what smoke-all leaves out: one ViT, no filter study, no Swin / Mixer
    # smoke's one-epoch arms may stay at chance: a claim resting on one says so instead of a verdict
    untrained = {c["id"] for c in claims["claims"] if "did not train" in (c.get("summary") or "")}
    assert [k for k, v in verdicts.items() if v == "not tested" and k not in untrained] == ["2", "3", "5a", "5b", "6",
                                                                                             "8"]
    rev = sh(built, "git", "rev-parse", "--short=7", "HEAD").strip()
    readme = built.joinpath("README.md").read_text()
    block = readme.split("<!-- claims:begin")[1].split("<!-- claims:end -->")[0]
    rows = [line for line in block.splitlines() if re.match(r"^\| \d", line)]
    assert len(rows) == len(verdicts) and all(f"| cpu-all · {rev} |" in r for r in rows)
    assert "not run yet" not in block
    assert sh(built, "python", "-m", "pipeline", "readme", "--check", check=False).count("differs") == 0


def test_the_report_holds_the_history_the_per_seed_differences_and_the_ci_figures(built):
    claims = json.loads((built / "results/tables/claims.json").read_text())
    history = claims["plan"]["history"]
    assert history["available"] and history["run"]["revision"] and history["confirmatory"]["holds"] is False
    ten = next(c for c in claims["claims"] if c["id"] == "10")
    assert any(e.startswith("Sensitivity line, never deciding") for e in ten["evidence"])
    assert all(c["per_seed"] for c in ten["comparisons"])
    assert ten["verdict"] == "not tested" or ten["power"]["comparisons"] == 2  # no power without evidence
    report = (built / "reports/report.md").read_text()
    assert "## The plan's history" in report and "**Claim 12: each comparison seed by seed**" in report
    assert "**Changes of the plan and of the seed lists**" in (built / "reports/appendix.md").read_text()
    figures = json.loads((built / "reports/figures/figures.json").read_text())
    assert {"ci_curves", "ci_qk", "ci_pqkp", "ci_softmax"} <= {f["name"] for f in figures["families"]}
    assert "### [CI] Figs 6-9: the α grid at α = 0.2" in report

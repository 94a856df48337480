"""bench/bench_verdicts.py at reduced replicates: the verdicts pass their calibration bounds and the power the
pipeline states matches the simulated one, on the CPU default and on the laptop set's claims 10-15; and the bench
fails when a rule is made anti-conservative or a stated power is off (so its bounds can fail). The full bench
(400 simulations per claim and scenario, every laptop profile) is a benchmark, run by hand."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from pipeline.analysis.stats import Criterion

ROOT = Path(__file__).resolve().parent.parent
LAST = re.compile(r"^max false supported 0\.\d{3}, max false contradicted 0\.\d{3}, min coverage [01]\.\d{3},"
                  r" max power gap 0\.\d{3} \(\d+ simulations\)$")


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_verdicts", ROOT / "bench" / "bench_verdicts.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    return module


def rows_of(out: list[str], profile: str) -> dict:
    return {line.split()[1]: line.split() for line in out if line.split()[:1] == [profile]}


@pytest.mark.slow("simulates the claims thousands of times against their calibration bounds")
def test_the_verdicts_pass_their_calibration_bounds(capsys):
    bench = load_bench()
    assert bench.main(["--simulations", "100", "--profiles", "cpu", "--claims", "1"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert LAST.match(out[-1]) and out[-1].endswith("(100 simulations)")
    rows = rows_of(out, "cpu")
    assert set(rows) == {"1"}
    assert 0.2 < float(rows["1"][-2]) < 0.9  # the power scenario sits where a check says something
    assert "BOUND FAILED" not in "\n".join(out)
    assert bench.main(["--simulations", "40", "--profiles", "cpu-all", "--claims", "6"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert rows_of(out, "cpu-all")["6"][2] == "5/5"  # Welch: 5 ViT and 5 ConvMixer runs
    assert "BOUND FAILED" not in "\n".join(out)


@pytest.mark.slow("simulates claims 10-15 thousands of times (the calibration bench)")
def test_claims_10_to_15_are_simulated_and_calibrated(capsys):
    """The laptop set's claims of [CI] Tables 1-2, the training configurations, weight selection and [SIA]."""
    bench = load_bench()
    for profile, claims in (("cpu-all", ["10", "13", "14"]), ("cpu-rest", ["11", "12", "15"])):
        assert bench.main(["--simulations", "15", "--profiles", profile, "--claims", *claims]) == 0
        out = capsys.readouterr().out.strip().splitlines()
        assert set(rows_of(out, profile)) == set(claims) and LAST.match(out[-1])


@pytest.mark.slow("runs the calibration bench on a deliberately wrong rule")
def test_the_bench_fails_an_anti_conservative_rule(capsys, monkeypatch):
    """p-values four times too small: 'supported' and 'contradicted' come far too often, and the bench says so."""
    bench = load_bench()
    real_s, real_r = Criterion.p_supported, Criterion.p_reverse
    monkeypatch.setattr(Criterion, "p_supported", lambda self, e: real_s(self, e) / 4)
    monkeypatch.setattr(Criterion, "p_reverse", lambda self, e: real_r(self, e) / 4)
    assert bench.main(["--simulations", "60", "--profiles", "cpu-claims", "--claims", "1", "--scenarios", "boundary",
                       "one open"]) == 1
    out = capsys.readouterr().out
    assert "BOUND FAILED: cpu-claims 1 " in out and LAST.match(out.strip().splitlines()[-1])


@pytest.mark.slow("runs the calibration bench on a deliberately wrong power")
def test_the_bench_fails_a_stated_power_that_is_off(capsys, monkeypatch):
    bench = load_bench()
    real = bench.stated_power
    monkeypatch.setattr(bench, "stated_power", lambda *a: min(1.0, real(*a) + 0.3))
    assert bench.main(["--simulations", "60", "--profiles", "cpu-all", "--claims", "6", "--scenarios", "power"]) == 1
    assert "BOUND FAILED: cpu-all 6 power" in capsys.readouterr().out

"""bench/bench_verdicts.py, fast: the verdicts pass their calibration bounds on the CPU default's structure, and the
bench fails when a rule is made anti-conservative (so its bounds can fail)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

from pipeline.analysis.stats import Criterion

ROOT = Path(__file__).resolve().parent.parent
LAST = re.compile(r"^max false supported 0\.\d{3}, max false contradicted 0\.\d{3}, min coverage [01]\.\d{3}"
                  r" \(\d+ simulations\)$")


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_verdicts", ROOT / "bench" / "bench_verdicts.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    return module


def test_the_verdicts_pass_their_calibration_bounds(capsys):
    bench = load_bench()
    assert bench.main(["--simulations", "120", "--profiles", "cpu", "--claims", "1", "5a", "6"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert LAST.match(out[-1]) and out[-1].endswith("(120 simulations)")
    rows = {line.split()[1]: line.split() for line in out if line.split()[:1] == ["cpu"]}
    assert set(rows) == {"1", "5a", "6"} and rows["6"][2] == "5/4"  # Welch: 5 ViT and 4 ConvMixer runs
    assert "BOUND FAILED" not in "\n".join(out)


def test_the_bench_fails_an_anti_conservative_rule(capsys, monkeypatch):
    """p-values four times too small: 'supported' and 'contradicted' come far too often, and the bench says so."""
    bench = load_bench()
    real_s, real_r = Criterion.p_supported, Criterion.p_reverse
    monkeypatch.setattr(Criterion, "p_supported", lambda self, e: real_s(self, e) / 4)
    monkeypatch.setattr(Criterion, "p_reverse", lambda self, e: real_r(self, e) / 4)
    assert bench.main(["--simulations", "150", "--profiles", "cpu", "--claims", "1"]) == 1
    out = capsys.readouterr().out
    assert "BOUND FAILED: cpu 1 " in out and LAST.match(out.strip().splitlines()[-1])

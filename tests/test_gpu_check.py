"""bench/gpu_check.py, the GPU check: its CPU rehearsal on the emulated stock image (a real cell, the matrix, the
throughput rows `check` reads), and its verdicts on the issue's targets."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys

import pytest
from stock_image import ROOT, environment

from pipeline.check import throughput
from pipeline.config import ModelConfig
from pipeline.schema import yaml_load


def load_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "bench" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow("rehearses the GPU check on the CPU in a stock-image emulation: a cell and the throughput matrix")
def test_the_cpu_rehearsal_runs_a_cell_and_the_matrix_on_a_stock_image(tmp_path):
    table = tmp_path / "throughput.yaml"
    shutil.copy(ROOT / "bench" / "throughput.yaml", table)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "bench/gpu_check.py", "--cpu", "--budget", "240", "--modes", "eager",
                           "--parts", "facts,cell,matrix,syncs", "--out", str(out), "--yaml", str(table)],
                          cwd=ROOT, env=environment(tmp_path / "stock"), capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    summary = (out / "summary.txt").read_text()
    assert "cell eager: rc 0" in summary and "data path pil" in summary and "on 256 test images" in summary
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    measured = [(r["mode"], r["path"], r["batch_per_device"]) for r in rows if r["part"] == "matrix"]
    assert measured == [("eager", "device", 128), ("eager", "device", 16), ("eager", "loader", 128),
                        ("eager", "loader", 16)]
    assert next(r for r in rows if r["part"] == "matrix")["sampler_ranks"] == 2  # 128 = 2 ranks of 64
    assert [(r["mode"], r["path"], r["counted"]) for r in rows if r["part"] == "syncs"] == [
        ("eager", "device", False), ("eager", "loader", False)]  # the flow, at 128 (2 ranks); no sync debug mode
    for path in (out / "throughput_rows.yaml", table):  # the row `check` reads: paper-small's configuration
        row = throughput(ModelConfig(img_size=32), yaml_load(path.read_text()), "cpu")
        assert row["source"].startswith("bench/gpu_check.py (eager, auto, device data, batch 128") and "torch" in row[
            "source"]


def test_the_summary_judges_the_issues_targets():
    check = load_check()
    matrix = [{"part": "matrix", "mode": m, "path": "device", "batch_per_device": 512, "images_per_s": rate,
               "mfu": 0.2, "gpu_idle": 0.1, "data_wait": 0.05, "peak_memory_gib": 20.0}
              for m, rate in (("eager", 12000.0), ("compiled", 18000.0))]
    syncs = [{"part": "syncs", "mode": "eager", "path": "device", "counted": True, "per_step": 0.0, "syncs_2_steps": 1,
              "syncs_6_steps": 1, "sites_6_steps": {}, "eval_batches": 4, "eval_syncs": 1, "eval_sites": {}}]
    lines = check.targets(matrix + syncs)
    assert "  compiled >= 20,000 img/s: 18,000 (NOT met)" in lines
    assert "  eager >= 10,000 img/s: 12,000 (met)" in lines
    assert "  compiled / eager >= 1.3: 1.50 (met)" in lines
    assert "  zero host syncs per training step: 0 at most (met)" in lines
    # 15 runs of each dataset: 300 epochs of 183,808 trained images (the 8 ranks' steps x 512) and 301 evaluations
    # of its 63,068 test images at a third of the cost: 922.1 M image-equivalents, 12.8 h at 20,000 img/s, and 30 s
    # fixed per cell (90 cells: 0.75 h)
    assert round(check.paper_small_hours(20000.0), 1) == 13.6
    assert "  paper-small's 90 cells at 18,000 img/s: 15.0 GPU-hours of training and evaluation (NOT met: <= 12;" \
           " check's estimate)" in lines
    assert check.throughput_rows(matrix + [dict(matrix[1], row={"device": "H100"})]) == [{"device": "H100"}]


@pytest.mark.slow("profiles training steps in a stock-image emulation")
def test_the_step_profile_splits_a_step_on_a_stock_image(tmp_path):
    """bench/gpu_profile.py at its CPU size: the step's parts are timed and its heaviest ops named."""
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "bench/gpu_profile.py", "--cpu", "--modes", "eager", "--channels-last",
                           "--out", str(out)],
                          cwd=ROOT, env=environment(tmp_path / "stock"), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    row = json.loads((out / "profile.jsonl").read_text())
    assert row["mode"] == "eager" and row["channels_last"] and row["batch"] == 128 and row["steps"] == 4
    assert all(row[k] > 0 for k in ("batch_ms", "mix_ms", "model_ms", "epoch_ms"))
    assert len(row["top"]) == 10  # no ratio of two timings: the parallel suite's load moves them apart
    assert "eager, channels_last batch 128: per step" in proc.stdout

"""`python -m pipeline cells compare` (pipeline/analysis/reproduction.py): a reproduction against the committed cells
of the CPU default (cells/cpu/) says which cells, comparisons and verdicts moved, and changes neither side. Another
machine's run is emulated by moving the committed cells' per-image scores, as a CPU with other kernels would."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from workspace import copy_built, sh, tool_env

from pipeline.analysis.reproduction import cell_moves, compare
from pipeline.errors import PipelineError
from pipeline.params import load_params

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "cells" / "cpu"
CELL = Path("train/fashion_mnist/vit/impulse/seed{seed}")


def _lower(run: Path, seed: int, images: int) -> None:
    """Score `images` more test images of one impulse cell wrong, its top-1 with them."""
    cell = run / str(CELL).format(seed=seed)
    scores = dict(np.load(cell / "test_correct.npz"))
    correct = scores["correct"].copy()
    correct[np.flatnonzero(correct)[:images]] = False
    np.savez(cell / "test_correct.npz", **(scores | {"correct": correct}))
    metrics = json.loads((cell / "metrics.json").read_text())
    (cell / "metrics.json").write_text(json.dumps(metrics | {"test_top1": float(correct.mean())}))


@pytest.fixture
def mine(tmp_path) -> Path:
    run = tmp_path / "results"
    shutil.copytree(COMMITTED / "results", run)
    return run


def _compare(mine: Path):
    return compare(load_params(ROOT / "params.yaml"), COMMITTED, mine, ROOT / "paper", ROOT / "bench/cross_cpu.yaml")


def test_the_same_cells_are_the_same_answer(mine):
    lines, changed = _compare(mine)
    assert not changed
    assert "  cells: 9 identical, 0 moved, 0 of them beyond the cross-CPU spread measured for one cell, ±1.00 pts" \
        in "\n".join(lines)
    assert "  verdicts: 0 changed (the same answer)" in lines


def test_a_cell_within_the_spread_is_named_and_no_verdict_moves(mine):
    _lower(mine, 51, 50)  # half a point: what another CPU's kernels do to a cell
    lines, changed = _compare(mine)
    text = "\n".join(lines)
    assert not changed and "  cells: 8 identical, 1 moved, 0 of them beyond" in text
    assert "results/train/fashion_mnist/vit/impulse/seed51: top-1 79.20 → 78.70 % (-0.50 pts; 99.5 % of its images" \
        " scored alike)" in text
    assert "headline, fashion_mnist, vit: impulse − mimetic: +3.36 [+0.93, +5.78] supported → " in text


def test_cells_beyond_the_spread_that_turn_a_verdict_say_so_and_exit_1(mine):
    for seed in (50, 51, 52):
        _lower(mine, seed, 250)
    lines, changed = _compare(mine)
    text = "\n".join(lines)
    assert changed and "3 moved, 3 of them beyond the cross-CPU spread" in text
    assert "(-2.50 pts; 97.5 % of its images scored alike) (beyond the measured spread)" in text
    assert "headline, fashion_mnist, vit: impulse − mimetic: supported → inconclusive" in text
    assert "The committed cells stay the published run" in text


def test_a_committed_cell_missing_from_the_run_is_counted(mine):
    shutil.rmtree(mine / str(CELL).format(seed=52))
    moves, missing = cell_moves(COMMITTED / "results", mine)
    assert len(moves) == 8 and missing == ["results/train/fashion_mnist/vit/impulse/seed52"]


def test_no_run_of_ones_own_is_a_message(tmp_path):
    with pytest.raises(PipelineError, match="no run of your own to compare; run `make repro` first"):
        _compare(tmp_path / "results")


@pytest.mark.slow("re-trains two smoke cells on another CPU code path (about a minute on 2 cores, beside the"
                         " shared smoke build)")
def test_a_run_on_another_cpu_code_path_is_compared_cell_by_cell(smoke_built, tmp_path):
    """The smoke run's cells committed, two of them re-trained on the SSE4.2 path (bench/cross_cpu.yaml's `paths`,
    as bench/bench_cross_cpu.py stands in for another CPU): `cells compare` names what moved by how much, or says
    identical where the path changed nothing, and exits 1 exactly when a verdict changed."""
    other = copy_built(smoke_built[0], tmp_path / "other")
    sh(other, "python", "-m", "pipeline", "cells", "save")
    path = yaml.safe_load((ROOT / "bench/cross_cpu.yaml").read_text())["paths"]["sse4.2"]
    cells = ["train@fashion_mnist-vit-impulse-0", "train@fashion_mnist-vit-mimetic-0"]
    for stage in cells:
        sh(other, "dvc", "repro", "-f", "--single-item", stage, env=tool_env(**path))
    def scores(root: Path, stage: str) -> tuple:
        cell = root / "train/fashion_mnist/vit" / stage.split("-")[2] / "seed0"
        with np.load(cell / "test_correct.npz") as z:
            return json.loads((cell / "metrics.json").read_text())["test_top1"], z["correct"].tobytes()

    committed, mine = other / "cells/smoke/results", other / "results"
    moved = [c for c in cells if scores(committed, c) != scores(mine, c)]
    total = sum("test_top1" in json.loads(m.read_text()) for m in committed.rglob("metrics.json"))
    done = subprocess.run([sys.executable, "-m", "pipeline", "cells", "compare"], cwd=other, env=tool_env(),
                          capture_output=True, text=True)
    out = done.stdout + done.stderr
    assert f"  cells: {total - len(moved)} identical, {len(moved)} moved" in out, out
    for c in moved:
        before, after = scores(committed, c)[0], scores(mine, c)[0]
        assert f"results/train/fashion_mnist/vit/{c.split('-')[2]}/seed0: top-1 {100 * before:.2f} →" \
            f" {100 * after:.2f} %" in out, out
    assert done.returncode == (0 if "  verdicts: 0 changed (the same answer)" in out else 1), out

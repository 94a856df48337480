"""`python -m pipeline cells compare` (pipeline/analysis/reproduction.py): a reproduction against the committed cells
of the CPU default (cells/cpu/) says which cells, comparisons and verdicts moved, and changes neither side. Another
machine's run is emulated by moving the committed cells' per-image scores, as a CPU with other kernels would."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

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

"""A cell in flight (`pipeline.cell.in_flight`): its checkpoint folder names the process that trains it, and cells
that finish together tidy their shared scratch folders without failing each other."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from training_fixtures import dies_in_epoch, execute, tiny_run

from pipeline import cell
from pipeline.training import run

A = Path("scratch/train/fashion_mnist/vit/impulse/seed0/last.pt")
B = Path("scratch/train/fashion_mnist/vit/default/seed0/last.pt")
SHARED = Path("scratch/train/fashion_mnist/vit")


def checkpoints(*paths: Path) -> None:
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"state")


def interleaved(monkeypatch, other) -> None:
    """The first rmdir of SHARED waits until `other` (the second cell's whole finish) has run: the order in which
    two cells finishing together removed the same empty parent in a two-at-once `repro`."""
    real, waiting = Path.rmdir, [True]

    def rmdir(self):
        if waiting[0] and self == SHARED:
            waiting[0] = False
            other()
        real(self)

    monkeypatch.setattr(Path, "rmdir", rmdir)


def test_the_runtimes_own_walk_fails_when_another_cell_removed_a_parent_first(tmp_path, monkeypatch):
    """The failure the mark prevents: the other cell's walk, which had removed its own folders, saw SHARED empty too
    and removed it between this walk's look and its rmdir."""
    monkeypatch.chdir(tmp_path)
    checkpoints(A)
    interleaved(monkeypatch, lambda: os.rmdir(SHARED))
    with pytest.raises(FileNotFoundError):
        run.remove_checkpoint(A)


def test_two_cells_finishing_together_both_succeed_and_leave_no_scratch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first, second = cell.in_flight(A, "attempt-a"), cell.in_flight(B, "attempt-b")
    first.__enter__(), second.__enter__()
    checkpoints(A, B)

    def finish(path, context):
        run.remove_checkpoint(path)  # stops at the mark: the folder is not empty
        assert path.parent.is_dir()
        context.__exit__(None, None, None)

    interleaved(monkeypatch, lambda: finish(B, second))
    finish(A, first)
    assert not Path("scratch").exists()


def test_a_training_cell_is_marked_while_it_runs_and_tidied_after(workdir, monkeypatch):
    r, seen = tiny_run(), []
    real = run.fit

    def fit(*args, **kwargs):
        seen.append(json.loads((r.checkpoint.parent / cell.RUNNING).read_text()))
        return real(*args, **kwargs)

    monkeypatch.setattr(run, "fit", fit)
    with cell.in_flight(r.checkpoint, "attempt-1"):
        execute(r, attempt="attempt-1")
    assert seen[0]["attempt"] == "attempt-1" and seen[0]["pid"] == os.getpid()
    assert (r.out / "metrics.json").is_file() and not (workdir / "scratch").exists()


def test_a_stopped_cell_keeps_its_checkpoint_and_drops_its_mark(workdir, monkeypatch):
    r = tiny_run(epochs=3)
    with dies_in_epoch(monkeypatch, 1), pytest.raises(KeyboardInterrupt), cell.in_flight(r.checkpoint, "a"):
        execute(r, attempt="a")
    assert r.checkpoint.is_file() and not (r.checkpoint.parent / cell.RUNNING).exists()


def test_only_rank_zero_marks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RANK", "1")
    with cell.in_flight(A, "a"):
        assert not Path("scratch").exists()


def test_tidy_stops_at_a_folder_another_cell_filled(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    checkpoints(B)
    A.parent.mkdir(parents=True)
    cell.tidy(A.parent, Path("."))
    assert not A.parent.parent.exists() and B.is_file()

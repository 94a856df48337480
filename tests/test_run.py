"""The run skeleton (`pipeline.training.run`): outs all or nothing, and a checkpoint that never outlives its attempt."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from training_fixtures import dies_in_epoch, execute, tiny_run

from pipeline.training import run


def metrics(r: run.Run) -> dict:
    return json.loads((r.out / "metrics.json").read_text())


def test_a_finished_run_writes_its_outs_and_removes_its_checkpoint(workdir):
    r = tiny_run()
    summary = execute(r)
    m = metrics(r)
    assert m["epochs"] == 2 and m["top1"] == summary["top1"] and m["arm"] == "none" and m["params"] > 0
    assert m["config_digest"] and m["git_rev"] and m["torch"] == torch.__version__
    assert {p.name for p in r.out.iterdir()} == {"metrics.json", "config.json", "model.pt", "live",
                                                 "test_correct.npz"}
    assert not r.checkpoint.exists() and not (workdir / "scratch").exists()


def correctness(r: run.Run) -> tuple[np.ndarray, np.ndarray]:
    with np.load(r.out / "test_correct.npz") as f:
        return f["index"], f["correct"]


def test_a_run_scores_its_final_model_on_every_test_image(workdir):
    """The final model scores the whole test split (32 images) whatever subset the per-epoch curves use."""
    r = tiny_run()
    execute(r)  # val_subset 0: the curves are on the whole split too
    whole, (index, correct) = metrics(r), correctness(r)
    assert index.tolist() == list(range(32)) and correct.dtype == bool
    assert whole["test_size"] == 32 and whole["test_top1"] == pytest.approx(correct.mean())
    assert whole["test_top1"] == pytest.approx(whole["history"][-1]["val_top1"])
    execute(tiny_run(val_subset=12))  # the same training: validation draws no random numbers
    part = metrics(r)
    assert (part["val_size"], part["test_size"]) == (12, 32) and np.array_equal(correctness(r)[1], correct)


def test_a_run_scores_the_held_out_pool_beside_the_test_split(workdir):
    """With `data.holdout`, the final model also scores the pool (holdout_correct.npz, indexed by the images' places
    in the train split), which it never trained on; the analysis reads the test images then the pool's."""
    from pipeline.analysis.runs import RUN_FIELDS, _row
    from pipeline.data.load.loaders import holdout_pool
    from pipeline.data.store import load_split

    r = tiny_run(holdout=24)
    execute(r)
    m = metrics(r)
    with np.load(r.out / "holdout_correct.npz") as f:
        index, correct = f["index"], f["correct"]
    assert m["train_size"] == 64 - 24 and m["holdout_size"] == 24 == len(index) == len(correct)
    assert m["holdout_top1"] == pytest.approx(correct.mean()) and "holdout_correct" not in m
    row = _row(m, RUN_FIELDS, r.out)
    assert len(row["pooled"]) == 32 + 24 and np.array_equal(row["pooled"][32:], correct)
    assert row["top1"] == pytest.approx(m["test_top1"])  # the headline number stays the test split's
    labels = load_split(workdir / "data/fashion_mnist/train.pt")[1]
    assert index.tolist() == holdout_pool(labels, 24).tolist()  # the fixed pool, in the train split's order


def test_a_finished_run_run_again_trains_again(workdir, capsys):
    """`dvc repro -f`, or a re-run DVC starts after a code change, must train: no checkpoint is left to resume."""
    r = tiny_run()
    first = execute(r)
    again = execute(r)
    assert "resuming" not in capsys.readouterr().out
    assert again["wall_time_s"] > 0 and len(again["history"]) == 2
    timings = ("images_per_s", "epoch_time_s")
    strip = [[{k: v for k, v in row.items() if k not in timings} for row in s["history"]] for s in (first, again)]
    assert strip[0] == strip[1]  # the same seed gives the same result


def test_a_killed_run_resumes_only_into_the_same_code(workdir, monkeypatch, capsys):
    r = tiny_run(epochs=3)
    with dies_in_epoch(monkeypatch, 1), pytest.raises(KeyboardInterrupt):
        execute(r)
    assert r.checkpoint.exists() and not (r.out / "metrics.json").exists()
    # the code changed between the kill and the re-run: the old attempt's checkpoint is not resumed
    execute(r, attempt="edited code")
    assert "resuming" not in capsys.readouterr().out
    assert metrics(r)["epochs"] == 3 and not r.checkpoint.exists()


def test_a_killed_run_resumes_into_unchanged_code(workdir, monkeypatch, capsys):
    whole = execute(tiny_run(epochs=3))
    r = tiny_run(epochs=3)
    with dies_in_epoch(monkeypatch, 1), pytest.raises(KeyboardInterrupt):
        execute(r)
    resumed = execute(r)
    assert "resuming" in capsys.readouterr().out
    assert [row["val_top1"] for row in resumed["history"]] == [row["val_top1"] for row in whole["history"]]

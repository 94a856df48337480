"""The run skeleton (`pipeline.training.run`): outs all or nothing, and a checkpoint that never outlives its attempt."""

from __future__ import annotations

import json

import pytest
import torch
from training_fixtures import dies_in_epoch, tiny_run

from pipeline.config import DataConfig
from pipeline.training import run


def metrics(r: run.Run) -> dict:
    return json.loads((r.out / "metrics.json").read_text())


def test_a_finished_run_writes_its_outs_and_removes_its_checkpoint(workdir):
    r = tiny_run()
    summary = run.execute(r, DataConfig())
    m = metrics(r)
    assert m["epochs"] == 2 and m["top1"] == summary["top1"] and m["arm"] == "none" and m["params"] > 0
    assert m["config_digest"] and m["git_rev"] and m["torch"] == torch.__version__
    assert {p.name for p in r.out.iterdir()} == {"metrics.json", "config.json", "model.pt", "live"}
    assert not r.checkpoint.exists() and not (workdir / "scratch").exists()


def test_a_finished_run_run_again_trains_again(workdir, capsys):
    """`dvc repro -f`, or a re-run DVC starts after a code change, must train: no checkpoint is left to resume."""
    r = tiny_run()
    first = run.execute(r, DataConfig())
    again = run.execute(r, DataConfig())
    assert "resuming" not in capsys.readouterr().out
    assert again["wall_time_s"] > 0 and len(again["history"]) == 2
    timings = ("images_per_s", "epoch_time_s")
    strip = [[{k: v for k, v in row.items() if k not in timings} for row in s["history"]] for s in (first, again)]
    assert strip[0] == strip[1]  # the same seed gives the same result


def test_a_killed_run_resumes_only_into_the_same_code(workdir, monkeypatch, capsys):
    r = tiny_run(epochs=3)
    with dies_in_epoch(monkeypatch, 1), pytest.raises(KeyboardInterrupt):
        run.execute(r, DataConfig())
    assert r.checkpoint.exists() and not (r.out / "metrics.json").exists()
    # the code changed between the kill and the re-run: the old attempt's checkpoint is not resumed
    monkeypatch.setattr(run, "code_digest", lambda module: "edited code")
    run.execute(r, DataConfig())
    assert "resuming" not in capsys.readouterr().out
    assert metrics(r)["epochs"] == 3 and not r.checkpoint.exists()


def test_a_killed_run_resumes_into_unchanged_code(workdir, monkeypatch, capsys):
    whole = run.execute(tiny_run(epochs=3), DataConfig())
    r = tiny_run(epochs=3)
    with dies_in_epoch(monkeypatch, 1), pytest.raises(KeyboardInterrupt):
        run.execute(r, DataConfig())
    resumed = run.execute(r, DataConfig())
    assert "resuming" in capsys.readouterr().out
    assert [row["val_top1"] for row in resumed["history"]] == [row["val_top1"] for row in whole["history"]]

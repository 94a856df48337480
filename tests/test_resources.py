"""The rule of params.yaml: `resources` (where and how fast) is neither a DVC param of a training cell nor part of
its checkpoint key, and each run records it; `train` (what the numbers are) is both."""

from __future__ import annotations

import json

import pytest
from training_fixtures import execute, tiny_run
from workspace import copy_built, set_params, sh

from pipeline.config import Resources
from pipeline.errors import PipelineError
from pipeline.experiments import by_name
from pipeline.params import load_params

CELL = "train@fashion_mnist-vit-impulse-0"


def test_a_resource_knob_in_train_says_where_it_moved(params_file):
    with pytest.raises(PipelineError, match=r"train.workers: moved to resources.workers"):
        load_params(params_file, ["train.workers=2"])
    with pytest.raises(PipelineError, match=r"filter_study.train.compile: moved to resources.compile"):
        load_params(params_file, ["filter_study.train.compile=true"])


def test_the_checkpoint_key_holds_the_recipe_and_not_the_resources(params_file):
    def config(*overrides):
        params = load_params(params_file, list(overrides))
        return by_name("train").resolve(params, {"dataset": "fashion_mnist", "variant": "vit", "arm": "impulse",
                                                 "seed": "0"})

    base = config()
    for knob in ("resources.workers=4", "resources.nproc=2", "resources.compile=true", "resources.sync_every=8",
                 "resources.rdzv_endpoint=node0:29400", "resources.device=cpu", "resources.threads=2"):
        assert config(knob) == base, knob
    assert config("train.lr=0.002") != base and config("train.epochs=3") != base


def test_a_run_records_the_resources_it_ran_with(workdir):
    execute(tiny_run(), Resources(sync_every=2))
    metrics = json.loads((workdir / "results/train/fashion_mnist/tiny/seed0/metrics.json").read_text())
    assert metrics["resources"]["sync_every"] == 2 and metrics["resources"]["workers"] == 0
    assert (metrics["device"], metrics["amp_dtype"], metrics["data_path"]) == ("cpu", "float32", "tensor")
    assert metrics["slurm"] is None or metrics["slurm"]["job_id"]


def test_a_resources_change_leaves_a_finished_cell_up_to_date_and_a_train_change_does_not(smoke_built, tmp_path):
    """On a copy of the built smoke project: `dvc status` of a finished cell after each kind of change."""
    repo = copy_built(smoke_built[0], tmp_path / "repo")
    assert "up to date" in sh(repo, "dvc", "status", CELL)
    set_params(repo / "params.yaml", {"resources.workers": 2, "resources.sync_every": 4})
    sh(repo, "dvc", "repro", "--single-item", "configs")
    assert "up to date" in sh(repo, "dvc", "status", CELL)
    set_params(repo / "params.yaml", {"train.lr": 0.002})
    sh(repo, "dvc", "repro", "--single-item", "configs")
    status = sh(repo, "dvc", "status", CELL)
    assert CELL in status and "modified:" in status and "configs/train/fashion_mnist-vit-impulse-0.json" in status

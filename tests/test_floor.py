"""The floor beside the grid's tables (`pipeline.analysis.floor`): a logistic regression on the pixels of each seed's
training images (the cells' own class-stratified draw), scored on the whole test split; the floor@ stage; and the
row and sentence the tables print, naming the headline arms below it."""

from __future__ import annotations

import json
from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest
import yaml

from pipeline.analysis import floor as floor_stage
from pipeline.analysis.runs import read_floors
from pipeline.analysis.tables import headline_table, vit_table
from pipeline.data.load.loaders import holdout_pool, stratified_order
from pipeline.data.store import load_split
from pipeline.errors import PipelineError
from pipeline.params import load_params
from pipeline.stages import render

ROOT = Path(__file__).resolve().parent.parent


def test_each_seed_trains_on_the_images_its_cells_draw(workdir):
    labels = load_split(workdir / "data/fashion_mnist/train.pt")[1]
    for seed in (0, 1):
        chosen = floor_stage.seed_subset(labels, 12, seed)
        assert chosen.tolist() == stratified_order(labels, seed)[:12].tolist()
        assert np.bincount(labels[chosen].numpy()).tolist() == [4, 4, 4]  # class-stratified, as the cells draw
    assert floor_stage.seed_subset(labels, 0, 0).tolist() == list(range(64))  # 0 = the whole split
    pool = set(holdout_pool(labels, 24).tolist())  # data.holdout: the cells' draw outside the pool
    assert not pool & set(floor_stage.seed_subset(labels, 12, 0, 24).tolist())
    assert sorted(floor_stage.seed_subset(labels, 0, 0, 24).tolist()) == sorted(set(range(64)) - pool)


def test_the_floor_of_a_tiny_dataset(workdir):
    """The workdir's images say their class by brightness: a linear read of the pixels gets most of them."""
    record = floor_stage.floor("data", "fashion_mnist", [0, 1], 30)
    assert record["computed"] and record["train_images"] == 30 and record["test_images"] == 32
    tops = [s["top1"] for s in record["seeds"].values()]
    assert list(record["seeds"]) == ["0", "1"] and all(50 < t <= 100 for t in tops)
    assert record["mean"] == pytest.approx(np.mean(tops)) and record["std"] == pytest.approx(np.std(tops, ddof=1))
    assert floor_stage.floor("data", "fashion_mnist", [0, 1], 30) == record  # a seed gives the same numbers


def test_a_folder_of_images_has_no_floor_and_says_why(workdir):
    manifest = workdir / "data/fashion_mnist/manifest.json"
    manifest.write_text(json.dumps(json.loads(manifest.read_text()) | {"format": "folder"}))
    record = floor_stage.floor("data", "fashion_mnist", [0], 0)
    assert not record["computed"] and "resize" in record["reason"] and record["seeds"] == {}


def test_the_stage_writes_what_aggregate_reads(workdir):
    params = load_params(_params(workdir), ["seeds=[3]", "data.train_subset=24"])
    assert floor_stage.main(params, Namespace(dataset="fashion_mnist")) == 0
    floors = read_floors()
    assert list(floors) == ["fashion_mnist"] and list(floors["fashion_mnist"]["seeds"]) == ["3"]
    assert floors["fashion_mnist"]["train_images"] == 24
    with pytest.raises(PipelineError, match="^dataset 'digits': not one of params `datasets`"):
        floor_stage.main(params, Namespace(dataset="digits"))
    stage = yaml.safe_load(render())["stages"]["floor"]
    assert stage["deps"][0] == "data/${item.dataset}"
    assert stage["params"] == ["seeds", "data.train_subset", "data.holdout"]
    assert "pipeline/analysis/floor.py" in stage["deps"] and "results/floor" in yaml.safe_load(render())["stages"][
        "aggregate"]["deps"]


def _params(workdir):
    (workdir / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    return workdir / "params.yaml"


FLOORS = {"fashion_mnist": {"computed": True, "mean": 80.5, "std": 0.5, "seeds": {"0": {}, "1": {}},
                            "train_images": 3000}}


def test_the_tables_print_the_floor_and_name_the_arms_below_it():
    runs = pd_runs()
    table = vit_table(runs, ["impulse", "default"], FLOORS)
    assert table.rows[-1][0] == "logistic regression (floor)" and table.rows[-1][1].startswith("80.50")
    assert "Reference (the floor): a logistic regression" in table.caption and "not a ceiling" in table.caption
    assert "80.50 ± 0.50 (n=2) on fashion_mnist (3,000 training images)" in table.caption
    assert "logistic" not in table.data.to_csv()  # the CSV holds the runs' numbers only
    head = headline_table([{"dataset": "fashion_mnist", "variant": "vit", "a": "impulse", "b": "default",
                            "a_mean": 82.0, "a_std": 1.0, "a_n": 2, "b_mean": 79.0, "b_std": 1.0, "b_n": 2, "n": 2,
                            "mean": 3.0, "low": 1.0, "high": 5.0, "verdict": "supported", "confidence": 0.95,
                            "images": 100}], FLOORS)
    assert head.caption.endswith("Below the floor: default on fashion_mnist, vit.")
    one = {"fashion_mnist": FLOORS["fashion_mnist"] | {"std": None, "seeds": {"0": {}}}}  # as one seed writes it
    assert vit_table(runs, ["impulse", "default"], one).rows[-1][1].startswith("80.50")
    assert "Below the floor" not in vit_table(runs, ["impulse", "default"], {}).caption + headline_table(
        [], {}).caption


def pd_runs():
    import pandas as pd

    return pd.DataFrame([{"dataset": "fashion_mnist", "variant": "vit", "arm": arm, "seed": s, "top1": top1 + s / 100}
                         for arm, top1 in (("impulse", 0.82), ("default", 0.79)) for s in (0, 1)])

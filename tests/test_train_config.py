"""The training-configuration axis (params `train_configs`, stages train_config@...): validation, one cell, and
that a configuration's cells depend on its own overrides only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.__main__ import main
from pipeline.errors import PipelineError
from pipeline.params import load_params
from pipeline.resolve import resolved

ROOT = Path(__file__).resolve().parent.parent

TINY = ["models={vit: {name: vit_tiny_patch16_224, img_size: 12, patch_size: 4, embed_dim: 12, depth: 1,"
        " num_heads: 3, drop_path_rate: 0.0}}",
        "train={epochs: 1, batch_size: 16, warmup_epochs: 0, scale: [1.0, 1.0], hflip: 0.0}",
        "data.train_subset=0", "data.val_subset=0"]


@pytest.mark.parametrize("override, message", [
    ("train_configs={bad-name: {lr: 0.1}}", "train_configs: name 'bad-name'"),
    ("train_configs={empty: {}}", "train_configs.empty: give the `train` keys it changes"),
    ("train_configs={x: {lrr: 0.1}}", "train_configs.x.lrr: unknown key"),
    ("train_configs={x: {lr: -1}}", "train_configs.x.lr = -1"),
])
def test_bad_configurations_name_their_key(params_file, override, message):
    with pytest.raises(PipelineError, match=message):
        load_params(params_file, [override])


def test_a_configuration_is_train_with_its_overrides(params_file):
    p = load_params(params_file, ["train_configs={lr_half: {lr: 0.0005}, repeat3: {aug_repeats: 3}}"])
    assert p.config_recipes["lr_half"].lr == 0.0005 and p.config_recipes["lr_half"].epochs == p.train.epochs
    assert p.config_recipes["repeat3"].aug_repeats == 3 and p.config_recipes["repeat3"].lr == p.train.lr


def test_a_cell_trains_with_randaugment_and_repeated_augmentation(workdir, params_file, capsys):
    argv = ["--params", str(params_file), *[w for o in TINY for w in ("--set", o)], "--set",
            "train_configs={heavy: {aa: rand-m9-mstd0.5-inc1, aug_repeats: 3, lr: 0.002}}"]
    assert main([*argv, "train-config", "fashion_mnist", "vit", "heavy", "impulse", "0"]) == 0
    out = workdir / "results" / "train_config" / "fashion_mnist" / "vit" / "heavy" / "impulse" / "seed0"
    m = json.loads((out / "metrics.json").read_text())
    assert (m["train_config"], m["arm"], m["epochs"]) == ("heavy", "impulse", 1)
    train = json.loads((out / "config.json").read_text())["train"]
    assert (train["aa"], train["aug_repeats"], train["lr"]) == ("rand-m9-mstd0.5-inc1", 3, 0.002)
    assert main([*argv, "train-config", "fashion_mnist", "vit", "light", "impulse", "0"]) == 2
    assert "train_config@fashion_mnist-vit-light-impulse-0: config 'light' is not one params.yaml plans for this" \
        " stage (heavy)" in capsys.readouterr().err


def configs(train_configs: dict) -> dict[str, dict]:
    """The grid's resolved configurations for the repository's params.yaml with `train_configs`."""
    params = load_params(ROOT / "params.yaml", [f"train_configs={json.dumps(train_configs)}"])
    return {k: v for k, v in resolved(params).items() if k.startswith("train")}


def test_each_configuration_is_its_own_cells_on_its_own_params():
    none, two = configs({}), configs({"lr_half": {"lr": 0.0005}, "randaug": {"aa": "rand-m9-mstd0.5-inc1"}})
    assert not any(s.startswith("train_config/") for s in none)
    added = set(two) - set(none)
    assert {s.split("-")[2] for s in added} == {"lr_half", "randaug"} and len(added) == 2 * len(none)
    assert all(two[f] == config for f, config in none.items())  # the grid's own cells stay up to date
    cell = two["train_config/fashion_mnist-vit-lr_half-impulse-50.json"]
    grid = two["train/fashion_mnist-vit-impulse-50.json"]
    assert cell["train"] == grid["train"] | {"lr": 0.0005} and cell["labels"]["train_config"] == "lr_half"

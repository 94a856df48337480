"""The [CI] alpha-grid stage: one cell trains code-2401's Simple ViT and records its alpha and impulse fit."""

from __future__ import annotations

import json

import pytest

from pipeline.__main__ import main
from pipeline.errors import PipelineError
from pipeline.params import load_params

TINY = ["ci_alpha.datasets=[fashion_mnist]", "ci_alpha.model={image_size: 8, patch_size: 2, dim: 16, depth: 2,"
        " heads: 2, head_dim: 8, mlp_dim: 16, channels: null}", "ci_alpha.impulse_fit.steps=200",
        "ci_alpha.impulse_fit.lr=0.01", "ci_alpha.impulse_fit.window=3",
        "ci_alpha.train={epochs: 1, batch_size: 16, warmup_epochs: 0}"]


def test_a_ci_alpha_cell_trains_and_records_its_alpha_and_fit(workdir, params_file):
    """`python -m pipeline ci-alpha fashion_mnist 0.0 impulse 0` on the tiny dataset: the out spells alpha as the
    stage's command line does (dvc.yaml declares results/ci_alpha/<dataset>/alpha${item.alpha}/...)."""
    argv = ["--params", str(params_file), *[w for o in TINY for w in ("--set", o)]]
    assert main([*argv, "ci-alpha", "fashion_mnist", "0.0", "impulse", "0"]) == 0
    out = workdir / "results" / "ci_alpha" / "fashion_mnist" / "alpha0.0" / "impulse" / "seed0"
    m = json.loads((out / "metrics.json").read_text())
    assert m["alpha"] == 0.0 and m["arm"] == "impulse" and m["model"] == "simple_vit" and m["epochs"] == 1
    assert [f["layer"] for f in m["impulse_fit"]] == [0, 1]
    assert all(f["peak"] > 0.5 and 0 < f["mse"] < 0.05 and len(f["offsets"]) == 2 for f in m["impulse_fit"])
    assert json.loads((out / "config.json").read_text())["impulse_fit"]["steps"] == 200
    assert main([*argv, "ci-alpha", "fashion_mnist", "0.1", "random", "0"]) == 0
    m = json.loads((workdir / "results/ci_alpha/fashion_mnist/alpha0.1/random/seed0/metrics.json").read_text())
    assert "impulse_fit" not in m
    assert main([*argv, "ci-alpha", "fashion_mnist", "1.5", "impulse", "0"]) == 2


@pytest.mark.parametrize("override, message", [
    ("ci_alpha.model.patch_size=3", "ci_alpha.model.patch_size = 3 does not divide"),
    ("ci_alpha.model.dim=510", "multiple of 4"),
    ("ci_alpha.model.head_dim=1024", "head_dim = 1024 exceeds"),
    ("ci_alpha.impulse_fit.window=4", "ci_alpha.impulse_fit.window = 4"),
    ("ci_alpha.impulse_fit.window=33", "wider than the 16x16 token grid"),
    ("ci_alpha.impulse_fit.lr=0", "ci_alpha.impulse_fit.lr = 0"),
    ("ci_alpha.arms=[default]", "ci_alpha.arms: unknown value 'default'"),
    ("ci_alpha.model.name=vit_tiny_patch16_224", "ci_alpha.model.name: unknown key"),
])
def test_bad_grid_params_name_their_key(params_file, override, message):
    with pytest.raises(PipelineError, match=message):
        load_params(params_file, [override])

"""A user's own ImageFolder through every stage: `python -m pipeline repro` (what `make repro` runs) on the smoke
profile with `datasets: [folder]`.

Issue 14's failures (a ConvMixer built with 0 classes; the figures rebuilding a model with the registry's class
count) came from stages that read the registry instead of the fetched data. Here every stage runs on generated
folders unlike Fashion-MNIST: 13 grayscale classes, then 3 colour classes, images of mixed sizes and formats (PNG,
JPEG, BMP, TIFF; 16-bit, palette, RGBA), the filter study on the folder too. Minutes: marked `slow`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from datasets_fixtures import make_image_folder
from workspace import ran, set_params, sh

pytestmark = [pytest.mark.slow("builds the smoke profile on a user's image folder, every stage through dvc"),
              pytest.mark.timeout(900)]


def run_metrics(repo: Path, *parts: str) -> dict:
    return json.loads((repo / "results" / Path(*parts) / "metrics.json").read_text())


def test_every_stage_runs_on_a_users_folder(folder_built, tmp_path):
    repo, checked, out = folder_built  # 13 grayscale classes, checked, then built as `make repro` builds it
    assert "2 model(s) built" in checked
    stages = {line.split()[0] for line in sh(repo, "dvc", "stage", "list").splitlines() if line.strip()}
    assert ran(out) == stages
    manifest = json.loads((repo / "data/folder/manifest.json").read_text())
    assert (manifest["num_classes"], manifest["channels"]) == (13, 1)
    vit = run_metrics(repo, "train", "folder", "vit", "impulse", "seed0")
    assert vit["train_size"] == 78 and vit["val_size"] == 26
    study = run_metrics(repo, "filter_study", "learned", "seed0")
    assert study["dataset"] == "folder" and study["params"] > 0
    figures = json.loads((repo / "reports/figures/figures.json").read_text())
    # rebuilt with the data's 13 classes
    assert any(f["file"].startswith("attention_vit_trained_") for f in figures["figures"])
    assert (repo / "reports/report.pdf").stat().st_size > 10_000

    # the user points the pipeline at another folder: 3 colour classes; the stages that build a model from the data
    # (a ViT cell, the ConvMixer, the attention maps) run on it, and every other stage that reads the data is stale
    colour = make_image_folder(tmp_path / "colour", classes=3, train_per_class=24, val_per_class=4, colour="rgb")
    set_params(repo / "params.yaml", {"data.folder_path": str(colour.root)})
    cells = {"fetch@folder", "train@folder-vit-default-0", "filter_study@learned-0", "attention@vit-default"}
    out = sh(repo, "python", "-m", "pipeline", "repro", *sorted(cells))
    assert ran(out) == cells | {"configs", "sources"}  # params.yaml changed, the cells' configurations did not; the
    # runner re-reads every source first
    trained = {s for s in stages if s.startswith(("train@", "filter_study@", "attention@"))} - cells
    assert trained | {"figures", "aggregate"} <= set(json.loads(sh(repo, "dvc", "status", "--json")))
    manifest = json.loads((repo / "data/folder/manifest.json").read_text())
    assert (manifest["num_classes"], manifest["channels"]) == (3, 3)
    assert run_metrics(repo, "train", "folder", "vit", "default", "seed0")["train_size"] == 72
    assert run_metrics(repo, "filter_study", "learned", "seed0")["train_size"] == 72

"""What every stage builds its models with: `dataset_meta` (from the manifest) and `source_meta` (before the
fetch); the user's ImageFolder trees (`folder`, `imagenet`) in colour, grayscale and mixed; the bundled
`digits` dataset, fetched offline."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from datasets_fixtures import make_image_folder, one_training_step
from PIL import Image
from workspace import copy_repo, sh

from pipeline.config import DataConfig
from pipeline.data import fetch as fetch_stage
from pipeline.data.fetch import fetch_dataset, source_meta, sources, userdata
from pipeline.data.fetch.userdata import evenly_spaced, is_grayscale
from pipeline.data.load.loaders import build_loaders, open_split
from pipeline.data.load.transforms import Augment
from pipeline.data.meta import DatasetMeta, dataset_meta
from pipeline.data.store import load_split, read_manifest
from pipeline.datasets import DATASETS, normalization_stats
from pipeline.errors import PipelineError
from pipeline.params import Params


def quiet(_: str) -> None:
    pass


# ---------------------------------------------------------------- the user's ImageFolder tree


@pytest.mark.parametrize("colour, classes, eval_dir", [("rgb", 3, "val"), ("gray", 13, "test"), ("mixed", 5, "val")])
def test_a_folder_of_any_classes_channels_sizes_and_formats_trains(tmp_path, colour, classes, eval_dir):
    spec = make_image_folder(tmp_path / "mine", classes=classes, colour=colour, eval_dir=eval_dir)
    expected = DatasetMeta("folder", classes, spec.channels, spec.image_size)
    assert source_meta("folder", folder_path=str(spec.root)) == expected  # what `check` sees, before the fetch
    assert not (tmp_path / "data").exists()  # ... which writes nothing

    out = fetch_dataset("folder", tmp_path / "data", folder_path=str(spec.root), log=quiet)
    assert dataset_meta(tmp_path / "data", "folder") == expected
    manifest = read_manifest(out, "folder")
    assert manifest["classes"] == spec.classes and manifest["eval_split"] == eval_dir
    assert {s: manifest["splits"][s]["images"] for s in spec.counts} == spec.counts
    assert manifest["path"] == str(spec.root.resolve()) and [p.name for p in out.iterdir()] == ["manifest.json"]
    for split in spec.counts:  # every image loads with the manifest's channels, paired with its label
        for image, label in open_split(manifest, out, split):
            assert image.mode == ("L" if spec.channels == 1 else "RGB")
            pixels = np.asarray(image.convert("RGB"), dtype=np.float64).reshape(-1, 3).mean(axis=0)
            assert min(np.abs(pixels - c).max() for c in spec.colours(label)) < 6

    loaders = build_loaders("folder", tmp_path / "data", stats=normalization_stats("folder", "dataset"),
                            img_size=16, in_chans=None, batch_size=4, seed=0,
                            augment=Augment())
    images, _ = next(iter(loaders.train))
    assert images.shape == (4, spec.channels, 16, 16) and loaders.num_classes == classes
    one_training_step(loaders, expected)


def test_a_grayscale_folder_feeds_a_three_channel_model(tmp_path):
    spec = make_image_folder(tmp_path / "mine", colour="gray")
    fetch_dataset("folder", tmp_path / "data", folder_path=str(spec.root), log=quiet)
    loaders = build_loaders("folder", tmp_path / "data", stats=normalization_stats("folder", "dataset"),
                            img_size=16, in_chans=3, batch_size=4, seed=0,
                            augment=Augment())
    images, _ = next(iter(loaders.val))
    pixels = images * torch.tensor(loaders.std).view(1, 3, 1, 1) + torch.tensor(loaders.mean).view(1, 3, 1, 1)
    assert images.shape[1] == 3 and torch.allclose(pixels[:, 0], pixels[:, 1], atol=1e-6)
    assert torch.allclose(pixels[:, 1], pixels[:, 2], atol=1e-6)


def test_a_changed_folder_must_be_fetched_again(tmp_path):
    spec = make_image_folder(tmp_path / "mine")
    fetch_dataset("folder", tmp_path / "data", folder_path=str(spec.root), log=quiet)
    next((spec.root / "train" / "c00").iterdir()).unlink()
    with pytest.raises(PipelineError, match="data changed: fetch it again"):
        build_loaders("folder", tmp_path / "data", stats=normalization_stats("folder", "dataset"),
                      img_size=16, in_chans=3, batch_size=4, seed=0, augment=Augment())


def test_the_header_sample_spreads_over_each_class_folder(tmp_path, monkeypatch):
    assert evenly_spaced(list(range(10)), 4) == [0, 3, 6, 9] and evenly_spaced([1, 2], 4) == [1, 2]
    spec = make_image_folder(tmp_path / "mine", classes=3, train_per_class=9, val_per_class=2)
    monkeypatch.setattr(userdata, "SAMPLE_PER_SPLIT", 9)  # 3 of each class folder
    counts, sample = userdata.scan_split(spec.root / "train", "data.folder_path")
    assert counts == {"c00": 9, "c01": 9, "c02": 9}
    assert [Path(f).relative_to(spec.root / "train").as_posix() for f in sample[:3]] == [
        "c00/000.png", "c00/004.png", "c00/008.png"]


def test_palette_images_are_grayscale_when_their_palette_is():
    gray, colour = Image.new("P", (4, 4)), Image.new("P", (4, 4))
    gray.putpalette([v for level in range(256) for v in (level,) * 3])
    colour.putpalette([v for level in range(256) for v in (level, 0, 255 - level)])
    assert is_grayscale(gray) and not is_grayscale(colour)
    assert is_grayscale(Image.new("LA", (2, 2))) and not is_grayscale(Image.new("RGBA", (2, 2)))


def _break(root, layout):
    """Make the ImageFolder tree at `root` wrong in one way."""
    if layout == "loose images":
        for folder in list((root / "val").iterdir()):
            for image in folder.iterdir():
                image.rename(root / "val" / f"{folder.name}-{image.name}")
            folder.rmdir()
    elif layout == "different classes":
        (root / "val" / "c02").rename(root / "val" / "c99")
    elif layout == "empty class folder":
        for image in (root / "train" / "c01").iterdir():
            image.unlink()
    elif layout == "unreadable image":
        (root / "train" / "c00" / "000.png").write_bytes(b"not an image")
    elif layout == "no eval split":
        shutil.rmtree(root / "val")
    elif layout == "one class":
        for split in ("train", "val"):
            for name in ("c01", "c02"):
                shutil.rmtree(root / split / name)


@pytest.mark.parametrize("layout, message", [
    ("unset", "data.folder_path is empty but dataset 'folder' is used"),
    ("missing", "data.folder_path = '.*absent' is not a directory"),
    ("no eval split", r"data.folder_path = .*: .*/test is not a directory"),
    ("loose images", r"data.folder_path = .*/val holds loose images but no class folders"),
    ("different classes", "train/ and val/ have different class folders"),
    ("empty class folder", "class folder.s. c01 of .*/train hold no images"),
    ("unreadable image", r"000.png is not an image PIL can read"),
    ("one class", r"train/ has 1 class folder \(c00\); a classifier needs at least two"),
])
def test_a_wrong_folder_path_is_refused_before_and_at_fetch(tmp_path, layout, message):
    spec = make_image_folder(tmp_path / "mine")
    _break(spec.root, layout)
    path = {"unset": "", "missing": str(tmp_path / "absent")}.get(layout, str(spec.root))
    for attempt in (lambda: source_meta("folder", folder_path=path),
                    lambda: fetch_dataset("folder", tmp_path / "data", folder_path=path, log=quiet)):
        with pytest.raises(PipelineError, match=message) as err:
            attempt()
        assert str(err.value).startswith("data.folder_path")  # the key first, then what is wrong and the fix
    assert list((tmp_path / "data").iterdir()) == []


@pytest.mark.parametrize("layout, message", [
    ("unset", "data.imagenet_path is empty"),
    ("missing", "is not a directory"),
    ("few classes", "train/ has 3 class folders, expected 1000"),
])
def test_a_wrong_imagenet_path_fails_fast_and_says_how(tmp_path, layout, message):
    path = {"unset": "", "missing": str(tmp_path / "absent")}.get(layout, str(tmp_path / "imagenet"))
    make_image_folder(tmp_path / "imagenet")
    for attempt in (lambda: source_meta("imagenet", imagenet_path=path),
                    lambda: fetch_dataset("imagenet", tmp_path / "data", imagenet_path=path, log=quiet)):
        with pytest.raises(PipelineError, match=message) as err:
            attempt()
        assert str(err.value).startswith("data.imagenet_path") and "image-net.org" in str(err.value)
    assert list((tmp_path / "data").iterdir()) == []


def test_the_stage_command_runs_fetch_with_the_params(tmp_path):
    spec = make_image_folder(tmp_path / "mine")
    parser = argparse.ArgumentParser()
    fetch_stage.add_arguments(parser)
    params = Params(data=DataConfig(root=str(tmp_path / "data"), folder_path=str(spec.root)))
    assert fetch_stage.main(params, parser.parse_args(["folder"])) == 0
    assert dataset_meta(tmp_path / "data", "folder") == DatasetMeta("folder", 3, 3, spec.image_size)


# ---------------------------------------------------------------- dataset_meta / source_meta


def test_registered_datasets_meta_before_the_fetch_is_the_registry():
    for name, info in DATASETS.items():
        if info.source != "user-path":
            assert source_meta(name) == DatasetMeta(name, info.num_classes, info.channels, info.native_size)
    with pytest.raises(PipelineError, match="unknown dataset 'cifar11'"):
        source_meta("cifar11")


def test_meta_of_a_missing_or_old_fetch_says_to_fetch(tmp_path):
    with pytest.raises(PipelineError, match="python -m pipeline fetch svhn"):
        dataset_meta(tmp_path, "svhn")
    (tmp_path / "svhn").mkdir()
    (tmp_path / "svhn" / "manifest.json").write_text(json.dumps({"dataset": "svhn", "num_classes": 10}))
    with pytest.raises(PipelineError, match=r"older version .* lacks channels, image_size\); fetch it again"):
        dataset_meta(tmp_path, "svhn")


# ---------------------------------------------------------------- digits, bundled with scikit-learn


@pytest.fixture(scope="module")
def digits_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    fetch_dataset("digits", root, download=False, log=quiet)  # offline: nothing is downloaded
    return root


def test_digits_is_fetched_offline_with_a_fixed_stratified_split(digits_root):
    assert sorted(p.name for p in digits_root.iterdir()) == ["digits"]
    assert dataset_meta(digits_root, "digits") == source_meta("digits") == DatasetMeta("digits", 10, 1, 8)
    splits = {s: load_split(digits_root / "digits" / f"{s}.pt") for s in ("train", "val")}
    assert [len(labels) for _, labels in splits.values()] == [1347, 450]
    assert torch.bincount(splits["val"][1]).tolist() == [45, 46, 44, 46, 45, 46, 45, 45, 43, 45]  # stratified
    levels = torch.unique(torch.cat([images.flatten() for images, _ in splits.values()]))
    assert levels.tolist() == [round(v * 255 / 16) for v in range(17)]  # the 0-16 counts, scaled to 0-255
    train = splits["train"][0].double() / 255  # the registry's mean/std are the train split's
    info = DATASETS["digits"]
    assert train.mean().item() == pytest.approx(info.mean[0], abs=5e-5)
    assert train.std(unbiased=False).item() == pytest.approx(info.std[0], abs=5e-5)


def test_digits_loads_and_trains(digits_root):
    loaders = build_loaders("digits", digits_root, stats=normalization_stats("digits", "dataset"),
                            img_size=8, in_chans=None, batch_size=16, seed=0,
                            augment=Augment(scale=(0.8, 1.0), crop_pct=1.0))
    images, labels = next(iter(loaders.train))
    assert loaders.backend == "tensor" and images.shape == (16, 1, 8, 8) and (loaders.train_size, loaders.val_size) \
        == (1347, 450)
    one_training_step(loaders, dataset_meta(digits_root, "digits"))


def test_a_damaged_digits_file_is_refused(tmp_path):
    expect = dataclasses.replace(sources.expected("digits"), sha256={"digits.csv": "0" * 64})
    with pytest.raises(PipelineError, match="digits.csv.gz .decompressed. has SHA-256 6ebb3d2f.*reinstall scikit"):
        fetch_dataset("digits", tmp_path, expect=expect, log=quiet)
    assert list(tmp_path.iterdir()) == []


def test_fashion_mnist_and_digits_are_a_valid_dataset_list():
    assert Params(datasets=["fashion_mnist", "digits"]).datasets == ["fashion_mnist", "digits"]


@pytest.mark.slow("runs `dvc repro` three times in a copy of the repository")
def test_fetch_at_folder_depends_on_the_folders_content(tmp_path):
    """dvc.yaml's `sources` stage (always run) records the folder's listing; fetch@folder depends on it, so added
    images are fetched again by the next `dvc repro` and an unchanged folder is not."""
    spec = make_image_folder(tmp_path / "mine")
    repo = copy_repo(tmp_path / "repo", "smoke", {"datasets": ["folder"], "data.folder_path": str(spec.root),
                                                  "filter_study.dataset": "folder"})

    def fetch() -> tuple[str, int]:
        out = sh(repo, "dvc", "repro", "fetch@folder")
        return out, read_manifest(repo / "data" / "folder", "folder")["splits"]["train"]["images"]

    out, images = fetch()
    assert "Running stage 'fetch@folder'" in out and images == 12
    out, images = fetch()
    assert "Running stage 'sources'" in out and "Running stage 'fetch@folder'" not in out and images == 12
    shutil.copy(spec.root / "train" / "c00" / "000.png", spec.root / "train" / "c00" / "new.png")
    out, images = fetch()
    assert "Running stage 'fetch@folder'" in out and images == 13
    for image in spec.root.rglob("*.png"):  # the same bytes with a new modification time: nothing re-runs
        os.utime(image, ns=(image.stat().st_atime_ns, image.stat().st_mtime_ns + 10**9))
    out, images = fetch()
    assert "Running stage 'sources'" in out and "Running stage 'fetch@folder'" not in out


def test_the_folder_digest_is_of_the_images_bytes_and_reads_a_file_once(tmp_path, monkeypatch):
    """`listing_digest`: a copy or a `touch` of the same bytes gives the same digest, an edit another; an unchanged
    file is not read again (its stat is the cache's)."""
    import hashlib

    from pipeline.data.fetch.userdata import listing_digest

    spec = make_image_folder(tmp_path / "mine")
    splits = ("train", "test" if (spec.root / "test").is_dir() else "val")
    cache = tmp_path / "cache"
    first = listing_digest(spec.root, splits, cache)
    reads, real = [], hashlib.file_digest
    monkeypatch.setattr(hashlib, "file_digest", lambda f, algorithm: reads.append(1) or real(f, algorithm))
    assert listing_digest(spec.root, splits, cache) == first and not reads  # the stat cache: nothing read
    for image in spec.root.rglob("*.png"):
        os.utime(image, ns=(0, image.stat().st_mtime_ns + 10**9))
    assert listing_digest(spec.root, splits, cache) == first and reads  # read again, the same bytes
    copy = tmp_path / "copy"
    shutil.copytree(spec.root, copy, copy_function=shutil.copy)  # new modification times, another place
    assert listing_digest(copy, splits, cache) == first
    image = next(spec.root.rglob("*.png"))
    image.write_bytes(image.read_bytes() + b"\0")
    assert listing_digest(spec.root, splits, cache) != first

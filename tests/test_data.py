"""The data layer: fetching (real torchvision download code against a 127.0.0.1 server), verification,
failure cleanliness, and the loaders' contract with the trainer (shapes, determinism, sharding, subsets)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gzip
import hashlib
import http.server
import io
import json
import pickle
import socket
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps
from torchvision import datasets as tvd
from torchvision.transforms.v2 import functional as TF

from pipeline.config import DataConfig, Params
from pipeline.data import fetch as fetch_stage
from pipeline.data import sources
from pipeline.data.fetch import fetch_dataset
from pipeline.data.loaders import ShardSampler, build_loaders, stratified_order
from pipeline.data.registry import DATASETS
from pipeline.data.store import load_split, save_split, write_manifest
from pipeline.data.transforms import (
    Augment,
    channel_stats,
    pil_transform,
    posterize_any_bits,
    resized_crops,
    sample_crops,
)
from pipeline.errors import PipelineError

FMNIST_MIRROR = Path("/usr/share/datasets/fashion-mnist")
LIGHT = Augment(scale=(0.8, 1.0), crop_pct=1.0)  # the CPU default's augmentation


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


# ---------------------------------------------------------------- a bounded file server on 127.0.0.1


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        body = self.server.files.get(self.path.rsplit("/", 1)[-1])
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        cut = len(body) // 2 if self.server.truncate else len(body)  # truncate: announce all, send half, hang up
        with contextlib.suppress(OSError):  # torchvision's redirect probe closes without reading
            self.wfile.write(body[:cut])
        self.close_connection = True

    def log_message(self, *args):
        pass


@pytest.fixture
def data_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.files, server.truncate, server.daemon_threads = {}, False, True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}/files"
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def data_dead_url():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/files"


# ---------------------------------------------------------------- archives in the real formats


def _tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def data_cifar10(monkeypatch):
    """A CIFAR-10 python-pickle tar.gz (5 train batches of 4, a test batch of 6); torchvision and the registry
    are told its checksums and sizes, as they know the real ones. Returns (archive bytes, images, labels)."""
    rng = np.random.default_rng(0)
    batches, members, images, labels = {}, {}, {}, {}
    for name, n in [(f"data_batch_{i}", 4) for i in range(1, 6)] + [("test_batch", 6)]:
        data, lab = rng.integers(0, 256, (n, 3072), dtype=np.uint8), rng.integers(0, 10, n).tolist()
        batches[name] = pickle.dumps({"batch_label": name, "data": data, "labels": lab, "filenames": []}, 2)
        images.setdefault("test" if name == "test_batch" else "train", []).append(data)
        labels.setdefault("test" if name == "test_batch" else "train", []).extend(lab)
    meta = pickle.dumps({"label_names": [f"class{i}" for i in range(10)], "num_cases_per_batch": 4}, 2)
    members = {f"cifar-10-batches-py/{k}": v for k, v in {**batches, "batches.meta": meta}.items()}
    archive = _tar_gz(members)
    monkeypatch.setattr(tvd.CIFAR10, "tgz_md5", md5(archive))
    monkeypatch.setattr(tvd.CIFAR10, "train_list", [[f"data_batch_{i}", md5(batches[f"data_batch_{i}"])]
                                                     for i in range(1, 6)])
    monkeypatch.setattr(tvd.CIFAR10, "test_list", [["test_batch", md5(batches["test_batch"])]])
    monkeypatch.setattr(tvd.CIFAR10, "meta", {**tvd.CIFAR10.meta, "md5": md5(meta)})
    monkeypatch.setitem(DATASETS, "cifar10", dataclasses.replace(DATASETS["cifar10"], train_size=20, eval_size=6))
    stacked = {s: torch.from_numpy(np.vstack(v)).view(-1, 3, 32, 32) for s, v in images.items()}
    return archive, stacked, {s: torch.tensor(v) for s, v in labels.items()}


def _png(color, size=64) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (size, size), color).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


COLORS = {"n01443537": (200, 30, 30), "n01629819": (30, 200, 30), "n01641577": (30, 30, 200)}


@pytest.fixture
def data_tiny_imagenet(monkeypatch):
    """A tiny-imagenet-200.zip in the real layout: train/<wnid>/images/*.JPEG, a flat val/images/ with
    val_annotations.txt. Each class has its own colour, so labels can be checked from pixels."""
    buf, wnids = io.BytesIO(), sorted(COLORS)
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("tiny-imagenet-200/wnids.txt", "\n".join(wnids) + "\n")
        annotations = []
        for k, wnid in enumerate(wnids):
            for i in range(3):
                z.writestr(f"tiny-imagenet-200/train/{wnid}/images/{wnid}_{i}.JPEG", _png(COLORS[wnid]))
            z.writestr(f"tiny-imagenet-200/train/{wnid}/{wnid}_boxes.txt", "")
            for i in range(2):
                name = f"val_{2 * k + i}.JPEG"
                z.writestr(f"tiny-imagenet-200/val/images/{name}", _png(COLORS[wnid]))
                annotations.append(f"{name}\t{wnid}\t0\t0\t63\t63")
        z.writestr("tiny-imagenet-200/val/val_annotations.txt", "\n".join(annotations) + "\n")
        z.writestr("tiny-imagenet-200/test/images/test_0.JPEG", _png((0, 0, 0)))
    archive = buf.getvalue()
    monkeypatch.setattr(sources, "TINY_IMAGENET_MD5", md5(archive))
    monkeypatch.setitem(DATASETS, "tiny_imagenet",
                        dataclasses.replace(DATASETS["tiny_imagenet"], train_size=9, eval_size=6))
    return archive


def _assert_clean(root: Path, keep=()):
    """Nothing but `keep` under the data root: no partial dataset, no temporary directory."""
    assert sorted(p.name for p in root.iterdir()) == sorted(keep)


# ---------------------------------------------------------------- fetch: downloads


def test_cifar10_download_writes_the_archive_content(tmp_path, data_server, data_cifar10):
    archive, images, labels = data_cifar10
    data_server.files["cifar-10-python.tar.gz"] = archive
    lines = []
    out = fetch_dataset("cifar10", tmp_path, base_url=data_server.url, log=lines.append)
    _assert_clean(tmp_path, ["cifar10"])
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "test.pt", "train.pt"]
    for split in ("train", "test"):
        got_images, got_labels = load_split(out / f"{split}.pt")
        assert torch.equal(got_images, images[split]) and torch.equal(got_labels, labels[split])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["splits"]["train"]["images"] == 20 and manifest["classes"][3] == "class3"
    assert any(line.startswith("verified cifar-10-python.tar.gz") for line in lines)


@pytest.mark.parametrize("fault", ["checksum", "truncated", "server down", "not found"])
def test_failed_download_names_the_problem_and_leaves_nothing(tmp_path, data_server, data_dead_url,
                                                               data_cifar10, monkeypatch, fault):
    archive = data_cifar10[0]
    data_server.files["cifar-10-python.tar.gz"] = archive
    url, expected = data_server.url, {"checksum": "MD5 checksum mismatch", "truncated": "corrupt or truncated",
                                      "server down": "cannot reach the server", "not found": "HTTP 404"}[fault]
    if fault == "checksum":
        data_server.files["cifar-10-python.tar.gz"] = archive[:-100] + bytes(100)
    elif fault == "truncated":
        data_server.truncate = True
    elif fault == "server down":
        url = data_dead_url
    else:
        data_server.files.clear()
    start = time.monotonic()
    with pytest.raises(PipelineError) as err:
        fetch_dataset("cifar10", tmp_path, base_url=url, log=lambda _: None)
    assert time.monotonic() - start < 10
    message = str(err.value)
    assert "fetch cifar10" in message and expected in message and f"{url}/cifar-10-python.tar.gz" in message
    assert f"{tmp_path / 'downloads'}/" in message  # how to provide it by hand
    _assert_clean(tmp_path)


def test_an_archive_fetched_by_hand_is_used_without_network(tmp_path, data_dead_url, data_cifar10):
    (tmp_path / "downloads").mkdir()
    (tmp_path / "downloads" / "cifar-10-python.tar.gz").write_bytes(data_cifar10[0])
    fetch_dataset("cifar10", tmp_path, download=False, base_url=data_dead_url, log=lambda _: None)
    assert load_split(tmp_path / "cifar10" / "train.pt")[1].tolist() == data_cifar10[2]["train"].tolist()


def test_downloads_off_and_nothing_local_says_what_to_do(tmp_path, data_cifar10):
    with pytest.raises(PipelineError, match=r"data.download: false.*cifar-10-python.tar.gz"):
        fetch_dataset("cifar10", tmp_path, download=False, log=lambda _: None)
    _assert_clean(tmp_path)


def test_wrong_split_size_is_refused(tmp_path, data_server, data_cifar10, monkeypatch):
    data_server.files["cifar-10-python.tar.gz"] = data_cifar10[0]
    monkeypatch.setitem(DATASETS, "cifar10", dataclasses.replace(DATASETS["cifar10"], train_size=50000))
    with pytest.raises(PipelineError, match="has 20 images, expected 50000"):
        fetch_dataset("cifar10", tmp_path, base_url=data_server.url, log=lambda _: None)
    _assert_clean(tmp_path)


@pytest.mark.parametrize("name", [n for n, d in DATASETS.items() if d.source.split(":")[0].endswith("torchvision")])
def test_only_the_base_url_is_redirected(name):
    canonical = sources.archives(sources.torchvision_class(DATASETS[name]))
    moved = sources.archives(sources.torchvision_class(DATASETS[name], "http://127.0.0.1:9/m/"))
    assert [a.url for a in moved] == [f"http://127.0.0.1:9/m/{a.filename}" for a in canonical]
    assert [(a.md5, a.subdir) for a in moved] == [(a.md5, a.subdir) for a in canonical]
    assert all(a.url.startswith(("http://", "https://")) and a.md5 for a in canonical)


def test_tiny_imagenet_zip_is_reorganised_and_labelled(tmp_path, data_server, data_tiny_imagenet):
    data_server.files["tiny-imagenet-200.zip"] = data_tiny_imagenet
    out = fetch_dataset("tiny_imagenet", tmp_path, base_url=data_server.url, log=lambda _: None)
    _assert_clean(tmp_path, ["tiny_imagenet"])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["classes"] == sorted(COLORS) and manifest["eval_split"] == "val"
    for split, n in (("train", 9), ("val", 6)):
        images, labels = load_split(out / f"{split}.pt")
        assert images.shape == (n, 3, 64, 64) and images.dtype == torch.uint8
        colours = torch.tensor([COLORS[manifest["classes"][k]] for k in labels.tolist()], dtype=torch.float)
        assert torch.allclose(images.float().mean(dim=(2, 3)), colours, atol=4)


def test_a_rerun_replaces_the_dataset_and_cleans_leftovers(tmp_path, data_server, data_tiny_imagenet):
    data_server.files["tiny-imagenet-200.zip"] = data_tiny_imagenet
    (tmp_path / ".fetch-tiny_imagenet-killed").mkdir()  # what a killed run leaves
    for _ in range(2):
        fetch_dataset("tiny_imagenet", tmp_path, base_url=data_server.url, log=lambda _: None)
    _assert_clean(tmp_path, ["tiny_imagenet"])


def test_food101_tree_is_kept_and_loads(tmp_path, data_server, monkeypatch):
    members, meta = {}, {"train": {}, "test": {}}
    for k, cls in enumerate(("apple_pie", "ramen")):
        for i in range(4):
            members[f"food-101/images/{cls}/{i}.jpg"] = _png((100 * k, 80, 80), size=40)
            meta["train" if i < 3 else "test"].setdefault(cls, []).append(f"{cls}/{i}")
    for split in meta:
        members[f"food-101/meta/{split}.json"] = json.dumps(meta[split]).encode()
    archive = _tar_gz(members)
    data_server.files["food-101.tar.gz"] = archive
    monkeypatch.setattr(tvd.Food101, "_MD5", md5(archive))
    monkeypatch.setitem(DATASETS, "food101", dataclasses.replace(DATASETS["food101"], train_size=6, eval_size=2))
    out = fetch_dataset("food101", tmp_path, base_url=data_server.url, log=lambda _: None)
    assert sorted(p.name for p in out.iterdir()) == ["food-101", "manifest.json"]  # archive removed
    loaders = build_loaders("food101", tmp_path, img_size=16, in_chans=3, batch_size=2, seed=0, augment=Augment())
    assert (loaders.train_size, loaders.val_size, loaders.classes) == (6, 2, ["apple_pie", "ramen"])
    x, y = next(iter(loaders.val))
    assert x.shape == (2, 3, 16, 16) and loaders.backend == "pil"


def _idx(array: np.ndarray) -> bytes:
    """The IDX format of MNIST-type files: magic (0, 0, dtype 0x08 = uint8, ndim), big-endian sizes, data."""
    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


def test_fashion_mnist_downloads_when_no_mirror(tmp_path, data_server, monkeypatch):
    rng, raw = np.random.default_rng(0), {}
    for prefix, n in (("train", 30), ("t10k", 10)):
        raw[f"{prefix}-images-idx3-ubyte"] = _idx(rng.integers(0, 256, (n, 28, 28)))
        raw[f"{prefix}-labels-idx1-ubyte"] = _idx(np.arange(n) % 10)
    gz = {f"{k}.gz": gzip.compress(v) for k, v in raw.items()}
    data_server.files.update(gz)
    monkeypatch.setattr(tvd.FashionMNIST, "resources", [(k, md5(v)) for k, v in gz.items()])
    monkeypatch.setattr(sources, "FASHION_MNIST_SHA256", {k: hashlib.sha256(v).hexdigest() for k, v in raw.items()})
    monkeypatch.setitem(DATASETS, "fashion_mnist",
                        dataclasses.replace(DATASETS["fashion_mnist"], train_size=30, eval_size=10))
    lines = []
    out = fetch_dataset("fashion_mnist", tmp_path / "data", mirror=str(tmp_path / "absent"),
                        base_url=data_server.url, log=lines.append)
    images, labels = load_split(out / "train.pt")
    assert images.shape == (30, 1, 28, 28) and labels.tolist() == [i % 10 for i in range(30)]
    assert images[3, 0].numpy().tobytes() == raw["train-images-idx3-ubyte"][16 + 3 * 784:16 + 4 * 784]
    assert sum(line.startswith("verified") for line in lines) == 8  # 4 archives (md5) + 4 contents (sha256)


# ---------------------------------------------------------------- fetch: Fashion-MNIST's local mirror


@pytest.mark.skipif(not FMNIST_MIRROR.is_dir(), reason="Debian's dataset-fashion-mnist is not installed")
def test_fashion_mnist_from_the_debian_mirror(tmp_path):
    out = fetch_dataset("fashion_mnist", tmp_path, mirror=str(FMNIST_MIRROR), download=False, log=lambda _: None)
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["splits"]["train"]["images"], manifest["splits"]["test"]["images"]) == (60000, 10000)
    assert manifest["num_classes"] == 10 and manifest["classes"][9] == "Ankle boot"
    images, labels = load_split(out / "train.pt")
    assert images.shape == (60000, 1, 28, 28) and torch.bincount(labels).tolist() == [6000] * 10


def test_a_corrupt_mirror_is_refused(tmp_path):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for name in sources.FASHION_MNIST_SHA256:
        (mirror / f"{name}.gz").write_bytes(gzip.compress(b"not fashion-mnist"))
    with pytest.raises(PipelineError, match="train-images-idx3-ubyte.*SHA-256.*corrupt"):
        fetch_dataset("fashion_mnist", tmp_path / "data", mirror=str(mirror), log=lambda _: None)
    _assert_clean(tmp_path / "data")


# ---------------------------------------------------------------- fetch: the user's directories


def _image_folder(root: Path, splits=("train", "val"), classes=("cat", "dog"), n=3):
    for split in splits:
        for k, cls in enumerate(classes):
            (root / split / cls).mkdir(parents=True)
            for i in range(n):
                Image.new("RGB", (40, 30), (100 * k, 50, 50)).save(root / split / cls / f"{i}.png")


def test_folder_is_verified_in_place_and_loads(tmp_path):
    _image_folder(tmp_path / "mine", splits=("train", "test"), classes=("a", "b", "c"))
    out = fetch_dataset("folder", tmp_path / "data", folder_path=str(tmp_path / "mine"), log=lambda _: None)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["classes"] == ["a", "b", "c"] and manifest["eval_split"] == "test"
    assert manifest["path"] == str((tmp_path / "mine").resolve()) and sorted(p.name for p in out.iterdir()) == [
        "manifest.json"]  # nothing copied
    loaders = build_loaders("folder", tmp_path / "data", img_size=16, in_chans=3, batch_size=4, seed=0,
                            augment=Augment())
    x, y = next(iter(loaders.train))
    assert loaders.num_classes == 3 and x.shape == (4, 3, 16, 16) and loaders.backend == "pil"
    (tmp_path / "mine" / "train" / "a" / "0.png").unlink()
    with pytest.raises(PipelineError, match="data changed: fetch it again"):
        build_loaders("folder", tmp_path / "data", img_size=16, in_chans=3, batch_size=4, seed=0,
                      augment=Augment())


@pytest.mark.parametrize("layout, message", [
    ("missing", "is not a directory"),
    ("flat val", "loose images but no class folders"),
    ("few classes", "has 2 class folders, expected 1000"),
])
def test_a_wrong_imagenet_path_fails_fast_and_says_how(tmp_path, layout, message):
    root = tmp_path / "imagenet"
    if layout == "flat val":
        _image_folder(root, splits=("train",))
        (root / "val").mkdir()
        Image.new("RGB", (8, 8)).save(root / "val" / "ILSVRC2012_val_00000001.JPEG")
    elif layout == "few classes":
        _image_folder(root)
    with pytest.raises(PipelineError, match=message) as err:
        fetch_dataset("imagenet", tmp_path / "data", imagenet_path=str(root), log=lambda _: None)
    assert "data.imagenet_path" in str(err.value) or "imagenet" in str(err.value)
    _assert_clean(tmp_path / "data")


def test_the_stage_command_runs_fetch_with_the_params(tmp_path):
    _image_folder(tmp_path / "mine")
    parser = argparse.ArgumentParser()
    fetch_stage.add_arguments(parser)
    params = Params(data=DataConfig(root=str(tmp_path / "data"), folder_path=str(tmp_path / "mine")))
    assert fetch_stage.main(params, parser.parse_args(["folder"])) == 0
    assert (tmp_path / "data" / "folder" / "manifest.json").is_file()


def test_registry_imports_without_torch():
    code = "import sys, pipeline.config, pipeline.data.registry; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[1]).returncode == 0


# ---------------------------------------------------------------- loaders


@pytest.fixture
def data_fmnist_like(tmp_path):
    """A small dataset in the fetched `tensors` form under the name fashion_mnist: 200 train images
    (20 per class), 51 test images; image i of a split has every pixel equal to i % 256."""
    out = tmp_path / "fashion_mnist"
    out.mkdir()
    splits = {}
    for split, n in (("train", 200), ("test", 51)):
        images = (torch.arange(n) % 256).to(torch.uint8).view(n, 1, 1, 1).expand(n, 1, 28, 28).clone()
        labels = torch.arange(n) % 10
        save_split(out / f"{split}.pt", images, labels)
        splits[split] = {"images": n, "file": f"{split}.pt", "shape": [1, 28, 28]}
    write_manifest(out, {"dataset": "fashion_mnist", "num_classes": 10, "channels": 1, "train_split": "train",
                         "eval_split": "test", "format": "tensors", "classes": [str(i) for i in range(10)],
                         "splits": splits})
    return tmp_path


def _loaders(root, **kwargs):
    options = {"img_size": 28, "in_chans": 1, "batch_size": 16, "seed": 0, "augment": LIGHT, **kwargs}
    return build_loaders("fashion_mnist", root, **options)


def _pixels(x):
    """Undo the fashion_mnist normalisation: uint8 pixel values."""
    return (x * 0.3530 + 0.2860).mul(255).round().long()


def _epoch(loader, epoch, rng_seed=123):
    loader.sampler.set_epoch(epoch)
    torch.manual_seed(rng_seed)  # what the trainer does at each epoch start
    return [(x.clone(), y.clone()) for x, y in loader]


def test_train_batches_shapes_dtype_labels(data_fmnist_like):
    loaders = _loaders(data_fmnist_like)
    batches = _epoch(loaders.train, 0)
    assert loaders.backend == "tensor" and (loaders.train_size, loaders.val_size) == (200, 51)
    assert len(batches) == 200 // 16  # drop_last
    for x, y in batches:
        assert x.shape == (16, 1, 28, 28) and x.dtype == torch.float32 and y.dtype == torch.int64
        assert y.min() >= 0 and y.max() < loaders.num_classes == 10
        index = _pixels(x)  # image i is constant i: a crop of it too, and its label is i % 10
        assert (index == index[:, :1, :1, :1]).all() and torch.equal(index[:, 0, 0, 0] % 10, y)
    val = [y for _, y in loaders.val]
    assert sum(len(y) for y in val) == 51


def test_workers_give_the_same_order(data_fmnist_like):
    alone, pooled = _loaders(data_fmnist_like), _loaders(data_fmnist_like, workers=1)
    assert [y.tolist() for _, y in _epoch(alone.train, 2)] == [y.tolist() for _, y in _epoch(pooled.train, 2)]


def test_the_order_depends_only_on_seed_and_epoch(data_fmnist_like):
    a, b = _loaders(data_fmnist_like), _loaders(data_fmnist_like)
    for epoch in range(3):  # a has a history, b resumes at epoch 3
        _epoch(a.train, epoch)
    first, again = _epoch(a.train, 3), _epoch(b.train, 3)
    assert all(torch.equal(x1, x2) and torch.equal(y1, y2) for (x1, y1), (x2, y2) in zip(first, again))
    other_epoch = _epoch(b.train, 4)
    other_seed = _epoch(_loaders(data_fmnist_like, seed=1).train, 3)
    labels = [torch.cat([y for _, y in run]) for run in (first, other_epoch, other_seed)]
    assert not torch.equal(labels[0], labels[1]) and not torch.equal(labels[0], labels[2])


def test_two_ranks_cover_the_val_set_exactly_once(data_fmnist_like):
    seen = []
    for rank in (0, 1):
        loaders = _loaders(data_fmnist_like, rank=rank, world_size=2, batch_size=8)
        for x, _ in loaders.val:  # every pixel of image i encodes i
            seen += _pixels(x)[:, 0, 0, 0].tolist()
    assert sorted(seen) == list(range(51))


def test_two_ranks_split_each_train_epoch(data_fmnist_like):
    samplers = [_loaders(data_fmnist_like, rank=r, world_size=2).train.sampler for r in (0, 1)]
    for s in samplers:
        s.set_epoch(2)
    shards = [list(s) for s in samplers]
    assert sorted(shards[0] + shards[1]) == list(range(200))


def test_shard_sampler_has_no_padding():
    for n, world in ((10, 3), (7, 2), (1, 4)):
        shards = [list(ShardSampler(n, r, world)) for r in range(world)]
        assert sorted(sum(shards, [])) == list(range(n))


def test_subsets_are_fixed_stratified_and_seed_independent(data_fmnist_like):
    a = _loaders(data_fmnist_like, train_subset=50, val_subset=20, seed=0)
    b = _loaders(data_fmnist_like, train_subset=50, val_subset=20, seed=7)
    assert (a.train_size, a.val_size) == (50, 20)
    assert a.train.dataset.indices == b.train.dataset.indices
    labels = torch.arange(200)[a.train.dataset.indices] % 10
    assert torch.bincount(labels).tolist() == [5] * 10
    order = stratified_order(torch.tensor([0] * 90 + [1] * 10))
    assert torch.bincount(torch.tensor([0] * 90 + [1] * 10)[order[:20]]).tolist() == [10, 10]


def test_repeated_augmentation_sampler(data_fmnist_like):
    sampler = _loaders(data_fmnist_like, augment=dataclasses.replace(LIGHT, aug_repeats=3)).train.sampler
    sampler.set_epoch(1)
    first = list(sampler)
    sampler.set_epoch(1)
    assert list(sampler) == first and first[0] == first[1] == first[2]
    other = _loaders(data_fmnist_like, seed=1, augment=dataclasses.replace(LIGHT, aug_repeats=3)).train.sampler
    other.set_epoch(1)
    assert list(other) != first


def test_random_erasing_on_the_tensor_backend(data_fmnist_like):
    loaders = _loaders(data_fmnist_like, augment=dataclasses.replace(LIGHT, reprob=1.0))
    x, _ = _epoch(loaders.train, 0)[0]
    assert loaders.backend == "tensor" and (x.flatten(1).std(dim=1) > 0.1).all()  # constant images, erased


def test_gray_into_three_channels(data_fmnist_like):
    loaders = _loaders(data_fmnist_like, in_chans=3)
    x, _ = next(iter(loaders.val))
    assert x.shape[1] == 3 and torch.equal(x[:, 0], x[:, 1]) and torch.equal(x[:, 1], x[:, 2])
    assert loaders.mean == (0.2860,) * 3


def test_imagenet_normalization(data_fmnist_like):
    loaders = _loaders(data_fmnist_like, in_chans=3, normalization="imagenet")
    x, _ = next(iter(loaders.val))
    assert loaders.mean == (0.485, 0.456, 0.406) and loaders.std == (0.229, 0.224, 0.225)
    assert torch.allclose(x[0, :, 0, 0], (0 - torch.tensor(loaders.mean)) / torch.tensor(loaders.std))
    with pytest.raises(PipelineError, match="data.normalization = 'cifar'"):
        _loaders(data_fmnist_like, normalization="cifar")


def test_channel_stats():
    assert channel_stats((0.5,), (0.2,), 3) == ((0.5,) * 3, (0.2,) * 3)
    mean, std = channel_stats((1.0, 0.0, 0.0), (0.1, 0.2, 0.3), 1)
    assert mean == pytest.approx((0.299,)) and std == pytest.approx((0.299 * 0.1 + 0.587 * 0.2 + 0.114 * 0.3,))
    with pytest.raises(PipelineError, match="model.in_chans = 4"):
        channel_stats((0.5,), (0.2,), 4)


@pytest.mark.parametrize("in_chans, img_size", [(1, 28), (3, 28), (1, 36)])
def test_tensor_and_pil_backends_agree_at_eval(data_fmnist_like, in_chans, img_size):
    augment = dataclasses.replace(LIGHT, eval_interpolation="bilinear")
    batches = {}
    for backend in ("tensor", "pil"):
        loaders = _loaders(data_fmnist_like, in_chans=in_chans, img_size=img_size,
                           augment=dataclasses.replace(augment, backend=backend))
        batches[backend] = torch.cat([x for x, _ in loaders.val])
    assert batches["tensor"].shape == (51, in_chans, img_size, img_size)
    assert torch.allclose(batches["tensor"], batches["pil"], atol=1e-4)


def test_rgb_into_one_channel_matches_pil_luma(tmp_path):
    out = tmp_path / "cifar10"
    out.mkdir()
    images = torch.randint(0, 256, (20, 3, 32, 32), dtype=torch.uint8)
    save_split(out / "train.pt", images, torch.arange(20) % 10)
    save_split(out / "test.pt", images, torch.arange(20) % 10)
    splits = {s: {"images": 20, "file": f"{s}.pt"} for s in ("train", "test")}
    write_manifest(out, {"dataset": "cifar10", "num_classes": 10, "format": "tensors", "train_split": "train",
                         "eval_split": "test", "classes": [str(i) for i in range(10)], "splits": splits})
    batches = {}
    for backend in ("tensor", "pil"):
        loaders = build_loaders("cifar10", tmp_path, img_size=32, in_chans=1, batch_size=20, seed=0,
                                augment=dataclasses.replace(LIGHT, backend=backend))
        batches[backend] = next(iter(loaders.val))[0]
    std = loaders.std[0]
    assert batches["tensor"].shape == (20, 1, 32, 32)
    assert (batches["tensor"] - batches["pil"]).abs().max() <= 0.51 / 255 / std  # PIL rounds luma to uint8


def test_batched_crops_equal_torchvision_resized_crop():
    images = torch.rand(3, 2, 12, 10) * 255
    boxes = (torch.tensor([0.0, 2, 5]), torch.tensor([0.0, 1, 3]), torch.tensor([12.0, 7, 6]),
             torch.tensor([10.0, 9, 4]))
    flips = torch.tensor([False, True, False])
    got = resized_crops(images, boxes, flips, 16)
    for i in range(3):
        top, left, h, w = (int(b[i]) for b in boxes)
        want = TF.resized_crop(images[i], top, left, h, w, [16, 16], antialias=False)
        want = TF.horizontal_flip(want) if flips[i] else want
        assert torch.allclose(got[i], want, atol=1e-3)


def test_crop_boxes_follow_the_scale_and_ratio():
    torch.manual_seed(0)
    top, left, h, w = sample_crops(2000, 28, 28, (0.3, 0.6), (0.75, 4 / 3))
    assert (top >= 0).all() and (left >= 0).all() and (top + h <= 28).all() and (left + w <= 28).all()
    area = h * w / 784
    assert area.min() > 0.25 and area.max() < 0.65 and 0.4 < area.mean() < 0.5
    top, left, h, w = sample_crops(5, 28, 28, (1.0, 1.0), (1.0, 1.0))
    assert (h == 28).all() and (w == 28).all() and (top == 0).all()


def test_randaugment_survives_zero_bit_posterize():
    img = Image.fromarray(np.full((28, 28), 200, dtype=np.uint8))
    assert np.asarray(posterize_any_bits(img, 0)).max() == 0
    with pytest.raises(ValueError):  # why the patch exists: Pillow >= 13 refuses 0 bits
        ImageOps.posterize(img, 0)
    tf = pil_transform(img_size=28, in_chans=1, mean=(0.5,), std=(0.5,), training=True,
                       augment=Augment(aa="rand-m10-n15-inc1"))  # magnitude 10: posterize keeps 0 bits
    for _ in range(30):
        assert tf(img).shape == (1, 28, 28)


def test_user_mistakes_raise_one_clear_error(tmp_path, data_fmnist_like):
    with pytest.raises(PipelineError, match="python -m pipeline fetch cifar10"):
        build_loaders("cifar10", tmp_path, img_size=32, in_chans=3, batch_size=8, seed=0, augment=LIGHT)
    with pytest.raises(PipelineError, match="train.batch_size"):
        _loaders(data_fmnist_like, batch_size=512)
    with pytest.raises(PipelineError, match=r"train.scale = \[0.5, 0.2\]"):
        Augment(scale=[0.5, 0.2])
    with pytest.raises(PipelineError, match="backend 'tensor'"):
        _loaders(data_fmnist_like, augment=Augment(aa="rand-m9", backend="tensor"))


def test_augment_from_params():
    augment = Augment.from_train(Params().train)
    assert augment.scale == (0.08, 1.0) and augment.crop_pct == 0.875 and augment.backend == "auto"

"""Every downloadable registered dataset, fetched for real from a miniature in its upstream format.

For each dataset, `tests/datasets_fixtures.py` writes the files that torchvision's dataset class parses, with
the canonical file names; a server on 127.0.0.1 serves them, and `fetch_dataset` runs what a first real
download runs: torchvision's download and extraction with its MD5 checks (against the miniature's checksums,
handed over as `expect`), our split-size, class-count and image-shape checks, the conversion, the manifest.
Then `dataset_meta`, `build_loaders` and one training step. What each dataset's test exercises:

- cifar10, cifar100: `CIFAR10`/`CIFAR100`: tar.gz MD5, the MD5 of every pickled batch and of the meta file,
  N x 3072 rows -> NHWC -> our uint8 N x C x H x W tensors (equal pixel for pixel), labels (`labels` /
  `fine_labels`) and class names from batches.meta / meta (10 / 100 classes).
- svhn: `SVHN`: two .mat files (MD5 each) read by scipy, X (32 x 32 x 3 x N) -> N x C x H x W, label 10 -> 0.
- stl10: `STL10`: stl10_binary.tar.gz with the column-major 96 x 96 binaries (equal pixel for pixel after the
  transpose), labels 1-10 -> 0-9, class_names.txt, unlabeled_X.bin present as torchvision requires.
- flowers102: `Flowers102`: 102flowers.tgz + imagelabels.mat + setid.mat (three MD5s), the train/test image
  ids of setid.mat, 1-based labels, JPEGs of mixed sizes kept in torchvision's tree, the archive removed.
- pets: `OxfordIIITPet`: images.tar.gz and annotations.tar.gz (trainval.txt / test.txt), class names derived
  from the image ids, labels from the class ids.
- food101: `Food101`: food-101.tar.gz with meta/{train,test}.json (and classes.txt), images/<class>/<id>.jpg.
- tiny_imagenet: our path around torchvision's `download_and_extract_archive`: the zip, val/ reorganised by
  val_annotations.txt into class folders, 64 x 64 JPEGs decoded into uint8 tensors.
- fashion_mnist (the download path, without Debian's mirror): four gzipped IDX files, their MD5s and the
  SHA-256 of their content.

Every image's colour encodes its label (or the stored pixels must equal the generated ones), so images and
labels are shown to stay paired. Each damaged file (bytes changed, transfer cut short, an archive cut short
that still matches its checksum) fails with one PipelineError and leaves nothing under data/.
"""

from __future__ import annotations

import dataclasses
import io
import re
import tarfile
import zipfile

import numpy as np
import pytest
import torch
from datasets_fixtures import MINIATURES, class_colour, md5, one_training_step
from torchvision import datasets as tvd

from pipeline.data import upstream
from pipeline.data.fetch import fetch_dataset, source_meta, sources
from pipeline.data.load.loaders import build_loaders, open_split
from pipeline.data.load.transforms import Augment
from pipeline.data.meta import DatasetMeta, dataset_meta
from pipeline.data.store import load_split, read_manifest
from pipeline.datasets import DATASETS, normalization_stats
from pipeline.errors import PipelineError

DOWNLOADABLE = sorted(n for n, d in DATASETS.items() if d.source != "user-path" and not d.source.startswith("sklearn"))


def quiet(_: str) -> None:
    pass


def fetch(mini, root, server, **kwargs):
    """Serve the miniature's files and fetch it (mirror off: Fashion-MNIST takes its download path)."""
    server.files.update(mini.files)
    options = {"base_url": server.url, "expect": mini.expect, "mirror": "", "log": quiet, **kwargs}
    return fetch_dataset(mini.name, root, **options)


def mean_colour(image) -> np.ndarray:
    """Mean RGB of a stored uint8 C x H x W tensor or a PIL image."""
    if isinstance(image, torch.Tensor):
        return image.float().mean(dim=(1, 2)).numpy()
    return np.asarray(image.convert("RGB"), dtype=np.float64).reshape(-1, 3).mean(axis=0)


def test_every_downloadable_dataset_has_a_miniature():
    assert sorted(MINIATURES) == DOWNLOADABLE


@pytest.mark.parametrize("name", DOWNLOADABLE)
def test_real_downloads_are_checked_against_the_real_facts(name):
    """Without `expect`, the checks use the registry's sizes and classes and the recorded checksums."""
    info, facts = DATASETS[name], sources.expected(name)
    assert facts.sizes == {info.train_split: info.train_size, info.eval_split: info.eval_size}
    assert all(facts.sizes.values()) and facts.num_classes == info.num_classes
    assert not facts.md5 and not facts.sha256  # nothing replaced: torchvision's MD5s, our SHA-256s
    if info.source.split(":")[0].endswith("torchvision"):
        assert upstream.torchvision_class(info, None, facts.md5) is getattr(tvd, info.source.split(":")[1])


@pytest.mark.parametrize("name", DOWNLOADABLE)
def test_fetch_load_and_train_on_the_upstream_format(tmp_path, data_server, name):
    mini, lines = MINIATURES[name](), []
    out = fetch(mini, tmp_path, data_server, log=lines.append)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no temporary directory, no downloads/
    for filename in mini.files:  # each downloaded file's checksum was checked
        assert any(line.startswith(f"verified {filename} (md5 {mini.expect.md5[filename]})") for line in lines)
    archives = [p for p in out.rglob("*") if p.name in mini.files and p.name.endswith(sources.ARCHIVE_SUFFIXES)]
    assert not archives  # removed once extracted and verified

    info, manifest = DATASETS[name], read_manifest(out, name)
    assert manifest["format"] == "tensors"  # the image-file datasets too: decoded and resized once, here
    if not info.in_memory:
        assert manifest["resized"].startswith("shorter side 256 px") and not any(p.is_dir() for p in out.iterdir())
    meta = dataset_meta(tmp_path, name)
    assert meta == DatasetMeta(name, mini.expect.num_classes, info.channels, info.native_size)
    assert {s: manifest["splits"][s]["images"] for s in mini.expect.sizes} == dict(mini.expect.sizes)
    if mini.expect.num_classes == info.num_classes:
        assert meta == source_meta(name)  # what `check` sees before the fetch
    for split in mini.expect.sizes:  # images and labels stay paired through the upstream parser
        if mini.stored:
            images, labels = load_split(out / f"{split}.pt")
            assert torch.equal(images, mini.stored[split][0]) and torch.equal(labels, mini.stored[split][1])
        else:
            for image, label in open_split(manifest, out, split):
                assert np.abs(mean_colour(image) - class_colour(label, mini.colour_classes)).max() < 6

    loaders = build_loaders(name, tmp_path, stats=normalization_stats(name, "dataset"),
                            img_size=16, in_chans=None, batch_size=4, seed=0, augment=Augment())
    images, _ = next(iter(loaders.train))
    assert images.shape == (4, meta.channels, 16, 16) and loaders.num_classes == meta.num_classes
    assert (loaders.train_size, loaders.val_size) == tuple(mini.expect.sizes.values())
    one_training_step(loaders, meta)


@pytest.mark.parametrize("fault", ["bytes changed", "transfer cut", "archive cut"])
@pytest.mark.parametrize("name", DOWNLOADABLE)
def test_a_damaged_download_fails_cleanly(tmp_path, data_server, name, fault):
    mini = MINIATURES[name]()
    body, expect = mini.files[mini.main], mini.expect
    if fault == "bytes changed":  # same length: only the checksum can tell
        middle = len(body) // 2
        mini.files[mini.main] = body[:middle] + bytes(b ^ 0xFF for b in body[middle:middle + 64]) + body[middle + 64:]
    elif fault == "transfer cut":
        data_server.truncate = True
    else:  # the source's file is itself cut short and its checksum matches: the archive must be refused
        mini.files[mini.main] = body[:len(body) // 2]
        expect = dataclasses.replace(expect, md5={**expect.md5, mini.main: md5(mini.files[mini.main])})
    with pytest.raises(PipelineError) as err:
        fetch(mini, tmp_path / "data", data_server, expect=expect)
    message = str(err.value)
    assert data_server.requests.count(mini.main) <= 2  # it stops: no retry loop over a bad file
    assert message.startswith(f"fetch {name}: ") and f"{data_server.url}/{mini.main}" in message
    if fault == "archive cut":
        assert "the archive is corrupt or truncated" in message or f"do not hold {name}" in message
    else:
        assert "MD5 checksum mismatch" in message
    assert f"{tmp_path / 'data' / 'downloads'}/" in message  # how to provide the files by hand
    assert list((tmp_path / "data").iterdir()) == []


def test_split_sizes_and_class_count_are_checked(tmp_path, data_server):
    mini = MINIATURES["cifar10"]()
    for expect, message in ((dataclasses.replace(mini.expect, sizes={"train": 50000, "test": 4}),
                             "the train split has 10 images, expected 50000"),
                            (dataclasses.replace(mini.expect, num_classes=11), "the data has 10 classes, expected 11")):
        with pytest.raises(PipelineError, match=message):
            fetch(mini, tmp_path, data_server, expect=expect)
        assert list(tmp_path.iterdir()) == []


def test_the_checksum_table_replaces_only_the_files_it_names():
    info = DATASETS["cifar10"]
    cls = upstream.torchvision_class(info, md5={"data_batch_2": "0" * 32})
    assert cls.__name__ == "CIFAR10" and cls.url == tvd.CIFAR10.url and cls.tgz_md5 == tvd.CIFAR10.tgz_md5
    assert [m for _, m in cls.train_list] == [m if f != "data_batch_2" else "0" * 32 for f, m in tvd.CIFAR10.train_list]


@pytest.mark.parametrize("name", [n for n, d in DATASETS.items() if d.source.split(":")[0].endswith("torchvision")])
def test_only_the_base_url_is_redirected(name):
    canonical = sources.archives(upstream.torchvision_class(DATASETS[name]))
    moved = sources.archives(upstream.torchvision_class(DATASETS[name], "http://127.0.0.1:9/m/"))
    assert [a.url for a in moved] == [f"http://127.0.0.1:9/m/{a.filename}" for a in canonical]
    assert [(a.md5, a.subdir) for a in moved] == [(a.md5, a.subdir) for a in canonical]
    assert all(a.url.startswith(("http://", "https://")) and a.md5 for a in canonical)


@pytest.mark.parametrize("fault", ["server down", "not found"])
def test_an_unreachable_source_names_the_problem_and_leaves_nothing(tmp_path, data_server, data_dead_url, fault):
    mini = MINIATURES["cifar10"]()
    url = data_dead_url if fault == "server down" else data_server.url
    with pytest.raises(PipelineError) as err:
        fetch_dataset("cifar10", tmp_path, base_url=url, expect=mini.expect, log=quiet)  # nothing served
    message = str(err.value)
    assert {"server down": "cannot reach the server", "not found": "HTTP 404"}[fault] in message
    assert f"{url}/cifar-10-python.tar.gz" in message and f"{tmp_path / 'downloads'}/" in message
    assert list(tmp_path.iterdir()) == []


def test_an_archive_fetched_by_hand_is_used_without_network(tmp_path, data_dead_url):
    mini = MINIATURES["cifar10"]()
    (tmp_path / "downloads").mkdir()
    (tmp_path / "downloads" / "cifar-10-python.tar.gz").write_bytes(mini.files["cifar-10-python.tar.gz"])
    fetch_dataset("cifar10", tmp_path, download=False, base_url=data_dead_url, expect=mini.expect, log=quiet)
    assert torch.equal(load_split(tmp_path / "cifar10" / "train.pt")[1], mini.stored["train"][1])


def test_downloads_off_and_nothing_local_says_what_to_do(tmp_path):
    with pytest.raises(PipelineError, match=r"data.download: false.*cifar-10-python.tar.gz"):
        fetch_dataset("cifar10", tmp_path, download=False, log=quiet)
    assert list(tmp_path.iterdir()) == []


def test_a_rerun_replaces_the_dataset_and_cleans_leftovers(tmp_path, data_server):
    mini = MINIATURES["tiny_imagenet"]()
    (tmp_path / "tiny_imagenet.partial").mkdir()  # what a killed run leaves
    for _ in range(2):
        fetch(mini, tmp_path, data_server)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny_imagenet"]


def without(archive: bytes, member: str) -> bytes:
    """`archive` (tar.gz or zip) repacked without `member`."""
    out = io.BytesIO()
    if archive[:2] == b"PK":
        with zipfile.ZipFile(io.BytesIO(archive)) as src, zipfile.ZipFile(out, "w") as dst:
            for item in src.infolist():
                if item.filename != member:
                    dst.writestr(item, src.read(item))
    else:
        with tarfile.open(fileobj=io.BytesIO(archive)) as src, tarfile.open(fileobj=out, mode="w:gz") as dst:
            for item in src.getmembers():
                if item.name != member:
                    dst.addfile(item, src.extractfile(item))
    return out.getvalue()


@pytest.mark.parametrize("name, archive, member, message", [
    ("food101", "food-101.tar.gz", "food-101/meta/test.json", "do not hold food101 as its loader expects"),
    ("pets", "annotations.tar.gz", "annotations/test.txt", "do not hold pets as its loader expects"),
    ("cifar10", "cifar-10-python.tar.gz", "cifar-10-batches-py/batches.meta", "MD5 checksum mismatch"),  # its own
    ("tiny_imagenet", "tiny-imagenet-200.zip", "tiny-imagenet-200/val/val_annotations.txt",
     "do not hold tiny_imagenet"),
])
def test_an_archive_without_a_label_file_is_refused(tmp_path, data_server, name, archive, member, message):
    """An archive that passes its checksum but lacks a file the loader needs (an upstream change, say); CIFAR
    checks the MD5 of each file inside its archive."""
    mini = MINIATURES[name]()
    mini.files[archive] = without(mini.files[archive], member)
    expect = dataclasses.replace(mini.expect, md5={**mini.expect.md5, archive: md5(mini.files[archive])})
    with pytest.raises(PipelineError, match=re.escape(message)):
        fetch(mini, tmp_path, data_server, expect=expect)
    assert list(tmp_path.iterdir()) == []

"""Getting the downloadable datasets into a work directory, verified, with torchvision's own download code.

Each dataset comes from torchvision's dataset class (`torchvision.datasets.CIFAR10`, ...), which downloads
its archives with `download_url` and checks each against the MD5 torchvision records; Tiny-ImageNet, which
torchvision lacks, goes through the same `download_and_extract_archive` with the MD5 the community uses.
Fashion-MNIST comes from a local mirror when one is present (Debian's `dataset-fashion-mnist`): its gzip
files differ from the canonical ones (the stored file name is stripped from the gzip header), so we verify the
SHA-256 of the *decompressed* IDX files, which are identical to the canonical ones, on both paths.

What we add: a base URL that can be redirected (a mirror, or the tests' 127.0.0.1 server; only the base
changes, torchvision's code path runs as is), a downloads directory where a person can drop archives fetched
by hand (torchvision then finds them verified and downloads nothing), the split sizes checked against the
registry, and the small datasets converted to the uint8 tensor form of `pipeline.data.store`.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import inspect
import os
import shutil
import tarfile
import urllib.error
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torchvision
from torchvision import datasets as tvd
from torchvision.datasets.utils import check_integrity, download_and_extract_archive

from pipeline.data.registry import DATASETS, DatasetInfo
from pipeline.data.store import save_split
from pipeline.errors import PipelineError

#: Tiny-ImageNet's archive (cs231n); the MD5 is the one dataset loaders in the community check.
TINY_IMAGENET_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
TINY_IMAGENET_MD5 = "90528d7ca1a48142e341f4ef8d21d0de"

#: SHA-256 of the decompressed canonical IDX files (their gzip MD5s are torchvision's `FashionMNIST.resources`).
FASHION_MNIST_SHA256 = {
    "train-images-idx3-ubyte": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    "train-labels-idx1-ubyte": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    "t10k-images-idx3-ubyte": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    "t10k-labels-idx1-ubyte": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
}

#: What a failed download raises inside torchvision: network errors (URLError, timeouts: OSError), a broken
#: HTTP exchange, an MD5 mismatch ("File not found or corrupted.": RuntimeError; a transfer cut short ends
#: here too, as urllib returns the partial body without an error), a bad archive.
DOWNLOAD_ERRORS = (OSError, http.client.HTTPException, RuntimeError, tarfile.TarError, zipfile.BadZipFile, EOFError)

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip", ".gz")

Log = Callable[[str], None]


@dataclass(frozen=True)
class Archive:
    """One file a dataset downloads: its URL, MD5, and where its torchvision class looks for it."""

    url: str
    md5: str
    subdir: str = ""  #: relative to the class's root directory

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[1]


def torchvision_class(info: DatasetInfo, base_url: str | None = None) -> type:
    """The torchvision dataset class of `info`, with its downloads redirected to `base_url` if given."""
    cls = getattr(tvd, info.source.split(":", 1)[1])
    return cls if not base_url else type(cls.__name__, (cls,), _rebased_attributes(cls, base_url.rstrip("/")))


def _rebased_attributes(cls: type, base: str) -> dict:
    """Class attributes that move every download URL of `cls` to `base`, keeping the file names."""

    def at(url: str) -> str:
        return f"{base}/{url.rsplit('/', 1)[1]}"

    if issubclass(cls, tvd.MNIST):
        return {"mirrors": [base + "/"]}
    if issubclass(cls, tvd.CIFAR10 | tvd.STL10):
        return {"url": at(cls.url)}
    if issubclass(cls, tvd.SVHN):
        return {"split_list": {k: [at(u), f, m] for k, (u, f, m) in cls.split_list.items()}}
    if issubclass(cls, tvd.Food101):
        return {"_URL": at(cls._URL)}
    if issubclass(cls, tvd.Flowers102):
        return {"_download_url_prefix": base + "/"}
    if issubclass(cls, tvd.OxfordIIITPet):
        return {"_RESOURCES": tuple((at(u), m) for u, m in cls._RESOURCES)}
    raise ValueError(f"no download location known for {cls.__name__}")


def archives(cls: type) -> list[Archive]:
    """The files torchvision's `cls` downloads for our splits (read from the class, so redirects show)."""
    if issubclass(cls, tvd.MNIST):
        return [Archive(cls.mirrors[0] + f, m, f"{cls.__name__}/raw") for f, m in cls.resources]
    if issubclass(cls, tvd.CIFAR10 | tvd.STL10):
        return [Archive(cls.url, cls.tgz_md5)]
    if issubclass(cls, tvd.SVHN):
        return [Archive(cls.split_list[s][0], cls.split_list[s][2]) for s in ("train", "test")]
    if issubclass(cls, tvd.Food101):
        return [Archive(cls._URL, cls._MD5)]
    if issubclass(cls, tvd.Flowers102):
        return [Archive(cls._download_url_prefix + f, m, "flowers-102") for f, m in cls._file_dict.values()]
    if issubclass(cls, tvd.OxfordIIITPet):
        return [Archive(u, m, "oxford-iiit-pet") for u, m in cls._RESOURCES]
    raise ValueError(f"no archives known for {cls.__name__}")


def split_kwargs(cls: type, split: str) -> dict:
    """Constructor keywords selecting `split`: `train=` for MNIST/CIFAR, `split=` for the others."""
    if "train" in inspect.signature(cls).parameters:
        return {"train": split == "train"}
    return {"split": split}


def failure_reason(exc: BaseException) -> str:
    """A person's words for why a download failed."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"the server answered HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return f"cannot reach the server ({exc.reason})"
    if isinstance(exc, TimeoutError):
        return "the server stopped answering (timeout)"
    if isinstance(exc, RuntimeError) and "corrupted" in str(exc):
        return "MD5 checksum mismatch: the downloaded file is corrupt or truncated"
    if isinstance(exc, tarfile.TarError | zipfile.BadZipFile | EOFError):
        return f"the archive is corrupt or truncated ({exc})"
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def listing(files: list[Archive]) -> str:
    return ", ".join(f"{f.url} (md5 {f.md5})" for f in files)


def by_hand(name: str, downloads: Path) -> str:
    """The sentence telling a person how to provide the files just listed themselves."""
    return f"to provide the data by hand, put those files into {downloads}/ and re-run " \
           f"`python -m pipeline fetch {name}`"


def stage_manual_files(files: list[Archive], root: Path, downloads: Path) -> list[Archive]:
    """Link archives a person put in `downloads/` to where torchvision looks; return the ones still missing.

    torchvision's `download_url` skips a file that is present with the right MD5, so a verified manual copy
    means no download; a corrupt one is downloaded again (or reported, when downloads are off).
    """
    missing = []
    for f in files:
        src, dst = downloads / f.filename, root / f.subdir / f.filename
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(src, dst)
            except OSError:
                shutil.copy2(src, dst)
        if not check_integrity(str(dst), f.md5):
            missing.append(f)
    return missing


def guarded_download(info: DatasetInfo, files: list[Archive], root: Path, run: Callable[[], None], *,
                     allowed: bool, downloads: Path, log: Log) -> None:
    """Use manual copies, else `run()` the download; any failure becomes one message saying what to do."""
    missing = stage_manual_files(files, root, downloads)
    if missing and not allowed:
        raise PipelineError(f"fetch {info.name}: downloads are off (data.download: false) and {downloads}/ "
                            f"lacks {listing(missing)}; set data.download: true, or " + by_hand(info.name, downloads))
    try:
        run()
    except DOWNLOAD_ERRORS as exc:
        raise PipelineError(f"fetch {info.name}: download failed: {failure_reason(exc)}; tried {listing(files)}; "
                            + by_hand(info.name, downloads)) from None
    for f in files:
        log(f"verified {f.filename} (md5 {f.md5})")


def torchvision_download(info: DatasetInfo, cls: type, root: Path, *, allowed: bool, downloads: Path,
                         log: Log) -> None:
    """Run torchvision's download (with its MD5 checks) for the registry's splits of `info` into `root`."""

    def run():
        for split in (info.train_split, info.eval_split):
            cls(str(root), download=True, **split_kwargs(cls, split))

    guarded_download(info, archives(cls), root, run, allowed=allowed, downloads=downloads, log=log)


def check_size(info: DatasetInfo, split: str, n: int, expected: int) -> None:
    """Stop when a split does not have its published number of images."""
    if expected and n != expected:
        raise PipelineError(
            f"fetch {info.name}: the {split} split has {n} images, expected {expected}; the data is "
            f"incomplete or not {info.name} (source: {info.homepage}); remove it and fetch again"
        )


def as_tensors(ds) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 N x C x H x W images and int64 labels of an in-memory torchvision dataset."""
    images = torch.as_tensor(ds.data)
    if images.ndim == 3:  # MNIST family: N x H x W
        images = images.unsqueeze(1)
    elif isinstance(ds, tvd.CIFAR10):  # CIFAR stores N x H x W x C; SVHN and STL-10 are already N x C x H x W
        images = images.permute(0, 3, 1, 2)
    labels = getattr(ds, "targets", None)
    labels = ds.labels if labels is None else labels
    return images.contiguous(), torch.as_tensor(labels, dtype=torch.int64)


def write_tensor_splits(info: DatasetInfo, out: Path, splits: dict, classes: list, log: Log) -> dict:
    """Check each split's size, save it as `<split>.pt` and return the manifest's `splits` entry."""
    entry = {}
    for split, (images, labels) in splits.items():
        expected = info.train_size if split == info.train_split else info.eval_size
        check_size(info, split, len(labels), expected)
        if labels.min() < 0 or labels.max() >= len(classes):
            raise PipelineError(f"fetch {info.name}: {split} labels fall outside 0..{len(classes) - 1}")
        save_split(out / f"{split}.pt", images, labels)
        shape = "x".join(map(str, images.shape[1:]))
        log(f"wrote {split}.pt: {len(labels)} images {shape}, {len(classes)} classes")
        entry[split] = {"images": len(labels), "file": f"{split}.pt", "shape": list(images.shape[1:])}
    return entry


def tensor_dataset(info: DatasetInfo, out: Path, raw: Path, *, allowed: bool, base_url: str | None,
                   downloads: Path, log: Log) -> dict:
    """CIFAR-10/100, SVHN, STL-10: torchvision download into `raw`, uint8 tensors into `out`."""
    cls = torchvision_class(info, base_url)
    torchvision_download(info, cls, raw, allowed=allowed, downloads=downloads, log=log)
    sets = {s: cls(str(raw), **split_kwargs(cls, s)) for s in (info.train_split, info.eval_split)}
    splits = {s: as_tensors(ds) for s, ds in sets.items()}
    classes = list(getattr(sets[info.train_split], "classes", [str(i) for i in range(info.num_classes)]))
    return {"format": "tensors", "classes": classes, "splits": write_tensor_splits(info, out, splits, classes, log)}


def sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def copy_mirror(mirror: Path, raw_folder: Path, log: Log) -> None:
    """Decompress the four Fashion-MNIST gzip files of a local mirror into torchvision's raw folder."""
    raw_folder.mkdir(parents=True, exist_ok=True)
    for name in FASHION_MNIST_SHA256:
        src = mirror / f"{name}.gz"
        if not src.is_file():
            raise PipelineError(
                f"fetch fashion_mnist: the mirror {mirror} lacks {src.name}; reinstall Debian's "
                "dataset-fashion-mnist, or set data.fashion_mnist_mirror: '' to download instead"
            )
        try:
            with gzip.open(src) as fin, open(raw_folder / name, "wb") as fout:
                shutil.copyfileobj(fin, fout)
        except (OSError, EOFError) as exc:
            raise PipelineError(
                f"fetch fashion_mnist: {src} is not a valid gzip file ({exc}); reinstall "
                "dataset-fashion-mnist, or set data.fashion_mnist_mirror: '' to download instead"
            ) from None
    log(f"using the local mirror {mirror}")


def fashion_mnist(info: DatasetInfo, out: Path, raw: Path, *, allowed: bool, base_url: str | None,
                  downloads: Path, mirror: str, log: Log) -> dict:
    """Fashion-MNIST from the local mirror when present, else torchvision's download; content-verified."""
    cls = torchvision_class(info, base_url)
    raw_folder = raw / cls.__name__ / "raw"
    use_mirror = bool(mirror) and Path(mirror).is_dir()
    if use_mirror:
        copy_mirror(Path(mirror), raw_folder, log)
    else:
        log(f"no local mirror at {mirror!r} (data.fashion_mnist_mirror)")
        try:
            torchvision_download(info, cls, raw, allowed=allowed, downloads=downloads, log=log)
        except PipelineError as exc:
            raise PipelineError(f"{exc}; or install Debian's dataset-fashion-mnist, or set "
                                f"data.fashion_mnist_mirror (now {mirror!r}) to a directory with its four .gz "
                                "files") from None
    for name, expected in FASHION_MNIST_SHA256.items():
        got = sha256(raw_folder / name)
        if got != expected:
            raise PipelineError(
                f"fetch fashion_mnist: {name} (from {mirror if use_mirror else 'the download'}) has SHA-256 "
                f"{got}, expected {expected}; the file is corrupt: reinstall dataset-fashion-mnist or set "
                "data.fashion_mnist_mirror: '' to download it"
            )
        log(f"verified {name} (sha256 {expected[:16]}...)")
    splits = {s: as_tensors(cls(str(raw), **split_kwargs(cls, s))) for s in (info.train_split, info.eval_split)}
    return {"format": "tensors", "classes": list(cls.classes),
            "splits": write_tensor_splits(info, out, splits, list(cls.classes), log)}


def torchvision_tree(info: DatasetInfo, out: Path, *, allowed: bool, base_url: str | None, downloads: Path,
                     log: Log) -> dict:
    """Food-101, Flowers-102, Pets: torchvision's extracted tree in `out`, archives removed once verified."""
    cls = torchvision_class(info, base_url)
    torchvision_download(info, cls, out, allowed=allowed, downloads=downloads, log=log)
    sets = {s: cls(str(out), **split_kwargs(cls, s)) for s in (info.train_split, info.eval_split)}
    for split, expected in ((info.train_split, info.train_size), (info.eval_split, info.eval_size)):
        check_size(info, split, len(sets[split]), expected)
        log(f"verified {split} split: {len(sets[split])} images")
    for f in archives(cls):
        if f.filename.endswith(ARCHIVE_SUFFIXES):
            (out / f.subdir / f.filename).unlink()
    return {"format": "torchvision", "class": cls.__name__, "classes": list(sets[info.train_split].classes),
            "splits": {s: {"images": len(ds)} for s, ds in sets.items()}}


def reorganise_tiny_imagenet_val(val: Path) -> None:
    """Move `val/images/<file>` into `val/<wnid>/<file>` using `val_annotations.txt` (ImageFolder layout)."""
    for line in (val / "val_annotations.txt").read_text().splitlines():
        if not line.strip():
            continue
        filename, wnid = line.split("\t")[:2]
        (val / wnid).mkdir(exist_ok=True)
        os.replace(val / "images" / filename, val / wnid / filename)
    (val / "images").rmdir()  # fails if an image had no annotation: the archive is not Tiny-ImageNet's


def decode_folder(folder: Path, size: int) -> tuple[torch.Tensor, torch.Tensor, list]:
    """Decode an ImageFolder tree of `size` x `size` images into uint8 RGB tensors, labels and class names."""
    tree = tvd.ImageFolder(str(folder))
    images = torch.empty(len(tree), 3, size, size, dtype=torch.uint8)
    for i, (path, _) in enumerate(tree.samples):
        image = torchvision.io.decode_image(path, mode=torchvision.io.ImageReadMode.RGB)
        if image.shape[1:] != (size, size):
            raise PipelineError(f"fetch: {path} is {tuple(image.shape[1:])}, expected {size}x{size}")
        images[i] = image
    return images, torch.as_tensor(tree.targets, dtype=torch.int64), tree.classes


def tiny_imagenet(info: DatasetInfo, out: Path, raw: Path, *, allowed: bool, base_url: str | None,
                  downloads: Path, log: Log) -> dict:
    """Tiny-ImageNet: download the zip, reorganise val/ into class folders, decode into uint8 tensors."""
    url = f"{base_url.rstrip('/')}/tiny-imagenet-200.zip" if base_url else TINY_IMAGENET_URL
    guarded_download(info, [Archive(url, TINY_IMAGENET_MD5)], raw,
                     lambda: download_and_extract_archive(url, str(raw), md5=TINY_IMAGENET_MD5),
                     allowed=allowed, downloads=downloads, log=log)
    base = raw / "tiny-imagenet-200"
    reorganise_tiny_imagenet_val(base / "val")
    decoded = {s: decode_folder(base / s, info.native_size) for s in (info.train_split, info.eval_split)}
    classes = decoded[info.train_split][2]
    if decoded[info.eval_split][2] != classes:
        raise PipelineError(f"fetch {info.name}: val/ and train/ have different classes; the archive is damaged")
    splits = {s: (images, labels) for s, (images, labels, _) in decoded.items()}
    return {"format": "tensors", "classes": classes, "splits": write_tensor_splits(info, out, splits, classes, log)}


def fetch_source(name: str, out: Path, raw: Path, *, download: bool, mirror: str, base_url: str | None,
                 downloads: Path, log: Log) -> dict:
    """Fetch downloadable dataset `name` into `out` (scratch space in `raw`); return its manifest fields."""
    info = DATASETS[name]
    common = {"allowed": download, "base_url": base_url, "downloads": downloads, "log": log}
    if name == "fashion_mnist":
        return fashion_mnist(info, out, raw, mirror=mirror, **common)
    if name == "tiny_imagenet":
        return tiny_imagenet(info, out, raw, **common)
    if info.in_memory:
        return tensor_dataset(info, out, raw, **common)
    return torchvision_tree(info, out, **common)

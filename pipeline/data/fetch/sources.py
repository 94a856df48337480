"""The downloadable and bundled datasets into a work directory, verified, by their libraries' own code.

torchvision's dataset classes download and MD5-check the archives; Tiny-ImageNet, which torchvision lacks, goes
through the same `download_and_extract_archive` with the MD5 the community uses. Debian's Fashion-MNIST mirror
strips the file name from the gzip header, so both paths verify the SHA-256 of the decompressed IDX files.
What we add: a base URL that can be redirected (a mirror, the tests' local server), a downloads directory for
archives fetched by hand, split sizes and shapes checked against the registry (`expected(name)`), and every
dataset stored as uint8 tensors (`pipeline.data.store`; Food-101, Flowers-102 and Pets pre-resized by
`resized_tree`) so that no run decodes a JPEG.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.client
import inspect
import os
import pickle
import shutil
import tarfile
import urllib.error
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torchvision
from torch.utils.data import DataLoader
from torchvision import datasets as tvd
from torchvision.datasets.utils import check_integrity, download_and_extract_archive
from torchvision.transforms.v2 import functional as TF

from pipeline.datasets import DATASETS, DatasetInfo
from pipeline.data.store import save_split
from pipeline.data.upstream import torchvision_class
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


def mat_read_errors() -> tuple[type[Exception], ...]:
    """scipy's error for a damaged .mat file (Flowers-102, SVHN: torchvision reads them with scipy), where scipy is
    installed; `check` and the training cells import this module on machines without it."""
    try:
        from scipy.io.matlab import MatReadError
    except ImportError:
        return ()
    return (MatReadError,)


#: What the loaders (torchvision's and ours) raise on files that passed their checksums but do not hold the
#: dataset's layout: a missing file or key, a damaged pickle or .mat file, an image that does not decode.
LAYOUT_ERRORS = (FileNotFoundError, RuntimeError, KeyError, IndexError, ValueError, pickle.UnpicklingError,
                 *mat_read_errors())
FETCH_ERRORS = DOWNLOAD_ERRORS + LAYOUT_ERRORS

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip", ".gz")
#: Side of the square uint8 images Food-101, Flowers-102 and Pets are stored at: timm's evaluation resize for the
#: papers' 224-px models (224 / crop_pct 0.875), so evaluation sees the same pixels; 3 x 256 x 256 bytes per image
#: (Food-101: 20 GB, Flowers-102 and Pets: 1.4 GB each).
STORED_SIDE = 256

Log = Callable[[str], None]


@dataclass(frozen=True)
class Expected:
    """What a fetched copy must match to be taken for the dataset.

    `expected(name)` gives the real dataset's facts: the registry's split sizes and class count, and the
    checksums torchvision (or this module) records. The tests of miniature archives in the upstream formats
    pass their own to `fetch_dataset(..., expect=...)`: the one way these checks change, out of reach of
    params.yaml and the command line, so a real download is always checked against the real facts.
    """

    sizes: Mapping[str, int]  #: images per split
    num_classes: int
    md5: Mapping[str, str] = field(default_factory=dict)  #: by file name: replaces the MD5 torchvision records
    sha256: Mapping[str, str] = field(default_factory=dict)  #: by file name: replaces the SHA-256 we record


def expected(name: str) -> Expected:
    """The real dataset's facts (registry sizes and classes, recorded checksums)."""
    info = DATASETS[name]
    return Expected({info.train_split: info.train_size, info.eval_split: info.eval_size}, info.num_classes)


@dataclass(frozen=True)
class Request:
    """One fetch: where files may come from, what they must match, where progress goes."""

    expected: Expected
    allowed: bool  #: downloads allowed (params `data.download`)
    base_url: str | None  #: download every file from here instead (same file names)
    downloads: Path  #: archives a person fetched by hand
    log: Log = print


@dataclass(frozen=True)
class Archive:
    """One file a dataset downloads: its URL, MD5, and where its torchvision class looks for it."""

    url: str
    md5: str
    subdir: str = ""  #: relative to the class's root directory

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[1]


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


def failure_reason(exc: BaseException, name: str) -> str:
    """A person's words for why fetching `name` failed."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"download failed: the server answered HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return f"download failed: cannot reach the server ({exc.reason})"
    if isinstance(exc, TimeoutError):
        return "download failed: the server stopped answering (timeout)"
    if isinstance(exc, ConnectionError | http.client.HTTPException):
        return f"download failed: the connection broke ({type(exc).__name__}: {exc})"
    if isinstance(exc, RuntimeError) and "corrupted" in str(exc):
        return "download failed: MD5 checksum mismatch: the downloaded file is corrupt or truncated"
    if isinstance(exc, tarfile.TarError | zipfile.BadZipFile | EOFError):
        return f"the archive is corrupt or truncated ({exc})"
    reason = " ".join(f"{type(exc).__name__}: {exc}".split())
    # An OSError without a system error is a reader's complaint about the content (scipy's "could not read
    # bytes", PIL's UnidentifiedImageError), as the loaders' own exceptions are.
    if isinstance(exc, LAYOUT_ERRORS) or (isinstance(exc, OSError) and exc.errno is None):
        return f"the files passed their checksums but do not hold {name} as its loader expects ({reason}): " \
               f"the archive is damaged or not {name}"
    return reason


def listing(files: list[Archive]) -> str:
    return ", ".join(f"{f.url} (md5 {f.md5})" for f in files)


def by_hand(name: str, downloads: Path) -> str:
    """The sentence telling a person how to provide the files just listed themselves."""
    return f"to provide the data by hand, put those files into {downloads}/ and re-run " \
           f"`python -m pipeline fetch {name}`"


@contextlib.contextmanager
def reported(info: DatasetInfo, files: list[Archive], req: Request):
    """Turn any failure to download, verify or read `files` into one message that says what to do."""
    try:
        yield
    except FETCH_ERRORS as exc:
        raise PipelineError(f"fetch {info.name}: {failure_reason(exc, info.name)}; tried {listing(files)}; "
                            + by_hand(info.name, req.downloads)) from None


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


def guarded_download(info: DatasetInfo, files: list[Archive], root: Path, run: Callable[[], object],
                     req: Request):
    """Use manual copies, else `run()` the download; any failure becomes one message saying what to do.

    Returns what `run` returns (torchvision's constructors download, verify and load in one call).
    """
    missing = stage_manual_files(files, root, req.downloads)
    if missing and not req.allowed:
        raise PipelineError(f"fetch {info.name}: downloads are off (data.download: false) and {req.downloads}/ "
                            f"lacks {listing(missing)}; set data.download: true, or "
                            + by_hand(info.name, req.downloads))
    with reported(info, files, req):
        result = run()
    for f in files:
        req.log(f"verified {f.filename} (md5 {f.md5})")
    return result


def torchvision_download(info: DatasetInfo, cls: type, root: Path, req: Request) -> dict:
    """Run torchvision's download (with its MD5 checks) for the registry's splits of `info` into `root`, and
    return those splits as torchvision's datasets (the constructors download, verify and load in one call)."""

    def run():
        return {s: cls(str(root), download=True, **split_kwargs(cls, s)) for s in (info.train_split, info.eval_split)}

    return guarded_download(info, archives(cls), root, run, req)


def not_the_dataset(info: DatasetInfo) -> str:
    return f"the data is incomplete or not {info.name} (source: {info.homepage}); remove it and fetch again"


def check_size(info: DatasetInfo, split: str, n: int, expected: Expected) -> None:
    """Stop when a split does not have its published number of images."""
    if expected.sizes[split] and n != expected.sizes[split]:
        raise PipelineError(f"fetch {info.name}: the {split} split has {n} images, expected "
                            f"{expected.sizes[split]}; " + not_the_dataset(info))


def check_classes(info: DatasetInfo, classes: list, expected: Expected) -> None:
    """Stop when the data does not have the dataset's number of classes (models are built with that number)."""
    if len(classes) != expected.num_classes:
        raise PipelineError(f"fetch {info.name}: the data has {len(classes)} classes, expected "
                            f"{expected.num_classes}; " + not_the_dataset(info))


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


def write_tensor_splits(info: DatasetInfo, out: Path, splits: dict, classes: list, req: Request) -> dict:
    """Check the class count and each split's size, image shape and labels, save each as `<split>.pt`, and
    return the manifest fields of the `tensors` format."""
    check_classes(info, classes, req.expected)
    shape = (info.channels, info.native_size, info.native_size)
    entry = {}
    for split, (images, labels) in splits.items():
        check_size(info, split, len(labels), req.expected)
        if tuple(images.shape[1:]) != shape:
            raise PipelineError(f"fetch {info.name}: the {split} images are {'x'.join(map(str, images.shape[1:]))}"
                                f" (channels x height x width), expected {'x'.join(map(str, shape))}; "
                                + not_the_dataset(info))
        if len(labels) and (labels.min() < 0 or labels.max() >= len(classes)):
            raise PipelineError(f"fetch {info.name}: {split} labels fall outside 0..{len(classes) - 1}; "
                                + not_the_dataset(info))
        save_split(out / f"{split}.pt", images, labels)
        req.log(f"wrote {split}.pt: {len(labels)} images {'x'.join(map(str, shape))}, {len(classes)} classes")
        entry[split] = {"images": len(labels), "file": f"{split}.pt", "shape": list(shape)}
    return {"format": "tensors", "classes": classes, "channels": info.channels, "image_size": info.native_size,
            "splits": entry}


def tensor_dataset(info: DatasetInfo, out: Path, raw: Path, req: Request) -> dict:
    """CIFAR-10/100, SVHN, STL-10: torchvision download into `raw`, uint8 tensors into `out`."""
    cls = torchvision_class(info, req.base_url, req.expected.md5)
    sets = torchvision_download(info, cls, raw, req)
    splits = {s: as_tensors(ds) for s, ds in sets.items()}
    classes = list(getattr(sets[info.train_split], "classes", [str(i) for i in range(info.num_classes)]))
    return write_tensor_splits(info, out, splits, classes, req)


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


def fashion_mnist(info: DatasetInfo, out: Path, raw: Path, req: Request, mirror: str) -> dict:
    """Fashion-MNIST from the local mirror when present, else torchvision's download; content-verified."""
    cls = torchvision_class(info, req.base_url, req.expected.md5)
    raw_folder = raw / cls.__name__ / "raw"
    use_mirror = bool(mirror) and Path(mirror).is_dir()
    if use_mirror:
        copy_mirror(Path(mirror), raw_folder, req.log)
    else:
        req.log(f"no local mirror at {mirror!r} (data.fashion_mnist_mirror)")
        try:
            torchvision_download(info, cls, raw, req)
        except PipelineError as exc:
            raise PipelineError(f"{exc}; or install Debian's dataset-fashion-mnist, or set "
                                f"data.fashion_mnist_mirror (now {mirror!r}) to a directory with its four .gz "
                                "files") from None
    for name, recorded in FASHION_MNIST_SHA256.items():
        want, got = req.expected.sha256.get(name, recorded), sha256(raw_folder / name)
        if got != want:
            raise PipelineError(
                f"fetch fashion_mnist: {name} (from {mirror if use_mirror else 'the download'}) has SHA-256 "
                f"{got}, expected {want}; the file is corrupt: reinstall dataset-fashion-mnist or set "
                "data.fashion_mnist_mirror: '' to download it"
            )
        req.log(f"verified {name} (sha256 {want[:16]}...)")
    splits = {s: as_tensors(cls(str(raw), **split_kwargs(cls, s))) for s in (info.train_split, info.eval_split)}
    return write_tensor_splits(info, out, splits, list(cls.classes), req)


class Squared(torch.utils.data.Dataset):
    """A torchvision dataset's images as uint8 RGB tensors, shorter side resized to `side` (bicubic, antialiased)
    and centre-cropped square: timm's evaluation transform up to its final crop."""

    def __init__(self, dataset, side: int):
        self.dataset, self.side = dataset, side

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image, label = self.dataset[index]
        image = TF.pil_to_tensor(image.convert("RGB"))
        image = TF.resize(image, [self.side], interpolation=TF.InterpolationMode.BICUBIC, antialias=True)
        return TF.center_crop(image, [self.side]), label


def square_images(dataset, side: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every image of a torchvision dataset decoded and squared (`Squared`) by parallel DataLoader workers:
    (uint8 N x 3 x side x side, int64 labels N)."""
    batches = list(DataLoader(Squared(dataset, side), batch_size=64, num_workers=min(8, os.cpu_count() or 1)))
    return torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches]).to(torch.int64)


def resized_tree(info: DatasetInfo, out: Path, req: Request) -> dict:
    """Food-101, Flowers-102, Pets: torchvision's download and checks, then every image stored once as a
    STORED_SIDE-px square uint8 tensor (`Squared`) and the extracted tree removed.

    Deliberate difference from timm's training transform: its random-resized crops are drawn from the stored
    square (the centre of a non-square image, at 256 px) instead of the whole original image.
    """
    cls = torchvision_class(info, req.base_url, req.expected.md5)
    sets = torchvision_download(info, cls, out, req)
    classes = list(sets[info.train_split].classes)
    check_classes(info, classes, req.expected)
    for split, ds in sets.items():
        check_size(info, split, len(ds), req.expected)
        req.log(f"verified {split} split: {len(ds)} images")
    splits = {split: square_images(ds, STORED_SIDE) for split, ds in sets.items()}
    fields = write_tensor_splits(info, out, splits, classes, req)
    for entry in out.iterdir():  # the extracted tree: the tensors hold every image now
        if entry.suffix != ".pt":
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    return fields | {"resized": f"shorter side {STORED_SIDE} px (bicubic, antialiased), centre crop"
                                f" {STORED_SIDE} x {STORED_SIDE}, from the verified originals"}


def reorganise_tiny_imagenet_val(val: Path) -> None:
    """Move `val/images/<file>` into `val/<wnid>/<file>` using `val_annotations.txt` (ImageFolder layout)."""
    for line in (val / "val_annotations.txt").read_text().splitlines():
        if not line.strip():
            continue
        filename, wnid = line.split("\t")[:2]
        (val / wnid).mkdir(exist_ok=True)
        os.replace(val / "images" / filename, val / wnid / filename)
    left = sorted(os.listdir(val / "images"))
    if left:
        raise PipelineError(f"fetch tiny_imagenet: val/images/{left[0]} and {len(left) - 1} more have no line in "
                            "val/val_annotations.txt; the archive is damaged or not Tiny-ImageNet's")
    (val / "images").rmdir()


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


def tiny_imagenet(info: DatasetInfo, out: Path, raw: Path, req: Request) -> dict:
    """Tiny-ImageNet: download the zip, reorganise val/ into class folders, decode into uint8 tensors."""
    url = f"{req.base_url.rstrip('/')}/tiny-imagenet-200.zip" if req.base_url else TINY_IMAGENET_URL
    files = [Archive(url, req.expected.md5.get("tiny-imagenet-200.zip", TINY_IMAGENET_MD5))]
    guarded_download(info, files, raw, lambda: download_and_extract_archive(url, str(raw), md5=files[0].md5), req)
    base = raw / "tiny-imagenet-200"
    with reported(info, files, req):
        reorganise_tiny_imagenet_val(base / "val")
        decoded = {s: decode_folder(base / s, info.native_size) for s in (info.train_split, info.eval_split)}
    classes = decoded[info.train_split][2]
    if decoded[info.eval_split][2] != classes:
        raise PipelineError(f"fetch {info.name}: val/ and train/ have different classes; the archive is damaged")
    splits = {s: (images, labels) for s, (images, labels, _) in decoded.items()}
    return write_tensor_splits(info, out, splits, classes, req)


def fetch_source(name: str, out: Path, raw: Path, req: Request, *, mirror: str) -> dict:
    """Fetch downloadable dataset `name` into `out` (scratch space in `raw`); return its manifest fields:
    format, classes, channels, image_size, splits (and eval_split where it differs from the registry's)."""
    info = DATASETS[name]
    if name == "fashion_mnist":
        return fashion_mnist(info, out, raw, req, mirror)
    if name == "tiny_imagenet":
        return tiny_imagenet(info, out, raw, req)
    if info.in_memory:
        return tensor_dataset(info, out, raw, req)
    return resized_tree(info, out, req)

"""`python -m pipeline fetch <dataset>`: get one dataset into `data/<dataset>/`, verified, or fail cleanly.

    python -m pipeline fetch fashion_mnist          # Debian's mirror if installed, else download
    python -m pipeline fetch cifar10 --base-url http://mirror.example/cifar   # same file names, other host
    dvc repro fetch@cifar10                         # the DVC stage runs the first form

Everything happens in a temporary sibling `data/<dataset>.partial/` (`pipeline.outputs.folder_aside`, the writer
every stage uses): download (torchvision's code, MD5 checked), verify (split sizes, content hashes), convert (to
uint8 tensors), then `manifest.json` is written and the directory is moved into place. On any failure the
temporary directory is removed, so `data/<dataset>/` either is complete (it has a manifest) or does not exist.
Leftovers of a killed run are removed by the next one. Sources: `sources` (downloads), `digits` (bundled with
scikit-learn), `userdata` (ImageNet-1K and `folder`, verified in place and never copied). The manifest records
what `pipeline.data.meta.dataset_meta` reads: the classes, channels and image size every stage builds its models with.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.data.fetch.userdata import user_dataset
from pipeline.datasets import DATASETS
from pipeline.errors import PipelineError
from pipeline.outputs import folder_aside

if TYPE_CHECKING:  # these import torch (and the fetchers torchvision): the functions import them, not the package,
    from pipeline.data.fetch.sources import Expected, Log  # which the always-run `sources` stage imports
    from pipeline.data.meta import DatasetMeta


@contextlib.contextmanager
def socket_timeout(seconds: float):
    """Bound every socket operation (urllib has no timeout by default: a stalled server would hang forever)."""
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(old)


def fetch_dataset(name: str, root: str | Path, *, download: bool = True, mirror: str = "",
                  imagenet_path: str = "", folder_path: str = "", base_url: str | None = None,
                  downloads: str | Path | None = None, timeout: float = 20.0, log: Log = print,
                  expect: Expected | None = None) -> Path:
    """Fetch dataset `name` into `<root>/<name>/` atomically and return that directory.

    Args:
        name: a key of `pipeline.datasets.DATASETS`.
        root: the data directory (params `data.root`).
        download: allow downloads (params `data.download`); with False only local copies are used.
        mirror: Fashion-MNIST's local mirror directory (params `data.fashion_mnist_mirror`); used when it exists.
        imagenet_path, folder_path: the user's directories for `imagenet` and `folder` (never copied).
        base_url: download every file from this base URL instead of the canonical one (same file names).
        downloads: where a person may put archives fetched by hand (default `<root>/downloads`).
        timeout: seconds a stalled connection may stay silent before the fetch fails.
        log: where progress lines go (one per verified file).
        expect: what the copy must match (split sizes, class count, checksums); None: the real dataset's
            (`pipeline.data.fetch.sources.expected`). Only the tests of miniature archives pass another.

    Raises:
        PipelineError: with what was tried and how to provide the data; nothing is left in `<root>/<name>`.
    """
    from pipeline.data.fetch.digits import fetch_digits
    from pipeline.data.fetch.sources import Request, expected, fetch_source
    from pipeline.data.store import write_manifest

    if name not in DATASETS:
        raise PipelineError(f"fetch: unknown dataset {name!r}; valid choices are {', '.join(sorted(DATASETS))}")
    info, root = DATASETS[name], Path(root)
    downloads = Path(downloads) if downloads else root / "downloads"
    root.mkdir(parents=True, exist_ok=True)
    with folder_aside(root / name) as work:
        req = Request(expect or expected(name), allowed=download, base_url=base_url, downloads=downloads, log=log)
        if info.source == "user-path":
            fields = user_dataset(name, imagenet_path=imagenet_path, folder_path=folder_path)
        elif name == "digits":
            fields = fetch_digits(info, work, req)
        else:
            with socket_timeout(timeout):
                fields = fetch_source(name, work, work / "raw", req, mirror=mirror)
            shutil.rmtree(work / "raw", ignore_errors=True)
        write_manifest(work, {  # pipeline.data.meta reads num_classes, channels and image_size
            "dataset": name, "num_classes": len(fields["classes"]), "channels": fields.pop("channels"),
            "image_size": fields.pop("image_size"), "train_split": info.train_split,
            "eval_split": fields.pop("eval_split", info.eval_split), **fields,
        })
    log(f"fetched {name} into {root / name}")
    return root / name


def source_meta(name: str, *, imagenet_path: str = "", folder_path: str = "") -> DatasetMeta:
    """The DatasetMeta that fetching `name` will record, without fetching or writing anything.

    Args:
        name: a key of the registry (params `datasets`, `filter_study.dataset`, ...).
        imagenet_path, folder_path: params `data.imagenet_path` / `data.folder_path`, scanned for those two.

    Raises:
        PipelineError: unknown name; or for `folder` / `imagenet` a path that is unset or not an ImageFolder
            tree, naming `data.folder_path` / `data.imagenet_path` and the fix.
    """
    from pipeline.data.meta import DatasetMeta

    if name not in DATASETS:
        raise PipelineError(f"unknown dataset {name!r}; valid choices are {', '.join(sorted(DATASETS))}")
    info = DATASETS[name]
    if info.source == "user-path":
        fields = user_dataset(name, imagenet_path=imagenet_path, folder_path=folder_path)
        return DatasetMeta(name, len(fields["classes"]), fields["channels"], fields["image_size"])
    return DatasetMeta(name, info.num_classes, info.channels, info.native_size)


def add_arguments(parser) -> None:
    parser.add_argument("dataset", choices=sorted(DATASETS), help="which dataset to fetch (params `datasets`)")
    parser.add_argument("--base-url", default=None,
                        help="download from this base URL instead of the canonical one (same file names)")
    parser.add_argument("--downloads", default=None,
                        help="directory of archives fetched by hand (default: <data.root>/downloads)")


def main(params, args) -> int:
    data = params.data
    fetch_dataset(args.dataset, data.root, download=data.download, mirror=data.fashion_mnist_mirror,
                  imagenet_path=data.imagenet_path, folder_path=data.folder_path,
                  base_url=getattr(args, "base_url", None), downloads=getattr(args, "downloads", None))
    return 0

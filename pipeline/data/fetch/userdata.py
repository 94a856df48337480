"""Datasets the user provides as a path: ImageNet-1K (never downloaded) and `folder` (their own images).

Nothing is copied. `image_folder` checks the layout, counts every class folder's images and reads the headers
of a sample of them; the manifest records the absolute path, the classes, the counts, the channels and a
typical image side. `check` runs the same scan before anything is fetched (`pipeline.data.fetch.source_meta`),
so both see the same facts, and nothing is written. The loaders open the path with torchvision's
`ImageFolder` (label i = the i-th class folder in sorted order, so train and eval must have the same class
folders), and `pipeline.data.load.images.open_image` converts each image to the manifest's channels.

- Channels: 1 when every sampled image is grayscale, else 3. Grayscale are PIL's modes '1', 'L', 'LA', 'I',
  'I;16' (and its byte orders) and 'F', and palette images ('P', 'PA') whose palette holds only grays; every
  other mode (RGB, RGBA, CMYK, YCbCr, colour palettes, ...) is colour. A folder that mixes the two is colour:
  its grayscale images are replicated into 3 channels. Alpha is dropped, not composited; 16-bit grayscale
  keeps its top 8 bits (PIL's own conversion would clip it to white).
- Sample: about SAMPLE_PER_SPLIT images of each split, an equal share of every class folder (at least
  SAMPLE_PER_CLASS), evenly spaced in the order ImageFolder lists them; a class folder that holds no more
  than its share is read whole. ImageNet-1K: 2 per class, 4,000 headers (its 1.3M file names are still listed,
  to count them). A colour image between the sampled ones of an otherwise grayscale folder loads as gray.
- Image size: the median (the lower one of an even count) of the sampled train images' shorter sides.
- At least two class folders: one class would label every image the same and "train" to 100 %.
- `folder` only: `listing_digest`, a digest of every image's path and content, is recorded in the manifest and in
  data/sources/folder.json (`pipeline.data.fetch.fingerprint`), so images added, removed or edited make fetch@folder
  run again, while a `touch`, a copy or an unzip of the same bytes re-runs nothing. Each file's content hash is kept
  in a stat cache (path, size, modification time: what DVC itself compares before re-hashing a file), so an
  unchanged folder is listed, not re-read.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
from pathlib import Path

from PIL import Image

from pipeline.datasets import DATASETS
from pipeline.errors import PipelineError

IMAGENET_HOWTO = (
    "ImageNet-1K is never downloaded: get ILSVRC2012 from https://image-net.org/download.php, extract train/ "
    "and val/ with one folder per synset (n01440764/...; sort val/ with the valprep.sh of PyTorch's ImageNet "
    "example), and set data.imagenet_path to the directory holding them"
)
FOLDER_HOWTO = (
    "set data.folder_path to a directory holding train/ and val/ (or test/), each with one sub-folder of "
    "images per class, the same class folders in both"
)
PARAMS = {"imagenet": ("data.imagenet_path", IMAGENET_HOWTO), "folder": ("data.folder_path", FOLDER_HOWTO)}

#: PIL modes of grayscale images (palette images are grayscale when their palette is).
GRAY_MODES = frozenset({"1", "L", "LA", "La", "I", "I;16", "I;16L", "I;16B", "I;16N", "F"})
#: Image headers read per split for the channels and the typical size: SAMPLE_PER_SPLIT spread over the class
#: folders, at least SAMPLE_PER_CLASS of each (ImageNet-1K: 2 x 1000 per split).
SAMPLE_PER_SPLIT = 1024
SAMPLE_PER_CLASS = 2


def image_extensions() -> tuple[str, ...]:
    """The file endings torchvision's ImageFolder reads (imported here, not at the top: the always-run `sources`
    stage imports this module, and torchvision costs it seconds)."""
    from torchvision.datasets.folder import IMG_EXTENSIONS

    return IMG_EXTENSIONS


def class_images(class_dir: str) -> list[str]:
    """The image files of one class folder in the order torchvision's ImageFolder lists them."""
    endings = image_extensions()  # once per folder, not per file: ImageNet's train split has 1.28 M
    return [os.path.join(root, f) for root, _, files in sorted(os.walk(class_dir, followlinks=True))
            for f in sorted(files) if f.lower().endswith(endings)]


def evenly_spaced(items: list, k: int) -> list:
    """`k` items spread evenly from the first to the last (all of them when there are at most `k`)."""
    if len(items) <= k:
        return items
    if k == 1:
        return items[:1]
    return [items[round(i * (len(items) - 1) / (k - 1))] for i in range(k)]


def is_grayscale(image: Image.Image) -> bool:
    """Whether an opened image has no colour (its mode, or for palette images its palette, says so)."""
    if image.mode in ("P", "PA"):
        palette = image.getpalette() or []
        return all(palette[i] == palette[i + 1] == palette[i + 2] for i in range(0, len(palette), 3))
    return image.mode in GRAY_MODES


def scan_split(split_dir: Path, where: str) -> tuple[dict[str, int], list[str]]:
    """Images per class folder of one split and the sample of them to read, or a PipelineError (`where` is
    the message's start: the key and what it is set to)."""
    if not split_dir.is_dir():
        raise PipelineError(f"{where}: {split_dir} is not a directory")
    folders = sorted((e.name, e.path) for e in os.scandir(split_dir) if e.is_dir())
    if not folders:
        endings = image_extensions()
        loose = any(f.lower().endswith(endings) for f in os.listdir(split_dir))
        raise PipelineError(f"{where}: {split_dir} "
                            + ("holds loose images but no class folders" if loose else "holds no class folders"))
    per_class = max(SAMPLE_PER_CLASS, SAMPLE_PER_SPLIT // len(folders))
    counts, sample = {}, []
    for name, path in folders:
        files = class_images(path)
        counts[name] = len(files)
        sample += evenly_spaced(files, per_class)
    empty = [c for c, n in counts.items() if n == 0]
    if empty:
        raise PipelineError(f"{where}: class folder(s) {', '.join(empty[:5])} of {split_dir} hold no images "
                            f"({', '.join(image_extensions())})")
    return counts, sample


def read_header(path: str, where: str) -> tuple[bool, int]:
    """(grayscale?, shorter side) of an image, from its header."""
    try:
        with Image.open(path) as image:
            return is_grayscale(image), min(image.size)
    except OSError as exc:  # PIL's UnidentifiedImageError is one
        raise PipelineError(f"{where}: {path} is not an image PIL can read ({exc}); remove or replace it") from None


#: where the content hashes of a user's folder are cached between runs, keyed by file (scratch/: never a DVC out)
DIGEST_CACHE = Path("scratch") / "folder-digests"


def listing_digest(root: Path, splits: tuple[str, ...], cache_dir: Path = DIGEST_CACHE) -> str:
    """A digest of every image file of `splits` under `root`: its relative path and the sha256 of its bytes, read
    again only for a file whose (size, modification time) differs from the cache's (module docstring)."""
    cache_path = cache_dir / f"{hashlib.sha256(str(root).encode()).hexdigest()[:16]}.json"
    try:
        cache = json.loads(cache_path.read_text())
    except (OSError, ValueError):
        cache = {}
    fresh, h = {}, hashlib.sha256()
    for split in splits:
        for entry in sorted(os.scandir(root / split), key=lambda e: e.name):
            if entry.is_dir():
                for f in class_images(entry.path):
                    rel, st = os.path.relpath(f, root), os.stat(f)
                    known = cache.get(rel)
                    if known and known[:2] == [st.st_size, st.st_mtime_ns]:
                        content = known[2]
                    else:
                        with open(f, "rb") as handle:
                            content = hashlib.file_digest(handle, "sha256").hexdigest()
                    fresh[rel] = [st.st_size, st.st_mtime_ns, content]
                    h.update(f"{rel}\0{content}\n".encode())
    if fresh != cache:
        try:
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(fresh))
            tmp.replace(cache_path)
        except OSError:
            pass  # a read-only checkout: the digest is the same, only slower next time
    return h.hexdigest()[:16]


def image_folder(name: str, path: str) -> dict:
    """Scan the ImageFolder dataset `name` at `path`; return its manifest fields, or a PipelineError that
    names the params key (`data.folder_path` / `data.imagenet_path`) and how to fix it."""
    info, (param, howto) = DATASETS[name], PARAMS[name]
    if not path:
        raise PipelineError(f"{param} is empty but dataset {name!r} is used; {howto}")
    root = Path(path).expanduser().resolve()
    where = f"{param} = {path!r}"
    if not root.is_dir():
        raise PipelineError(f"{where} is not a directory; {howto}")
    eval_dir = "val" if (root / "val").is_dir() or name == "imagenet" else "test"
    try:
        (train, train_sample), (held_out, eval_sample) = (scan_split(root / s, where) for s in ("train", eval_dir))
    except PipelineError as exc:
        raise PipelineError(f"{exc}; {howto}") from None
    if sorted(train) != sorted(held_out):
        odd = sorted(set(train) ^ set(held_out))
        raise PipelineError(f"{where}: train/ and {eval_dir}/ have different class folders ({', '.join(odd[:5])}"
                            f" ...); labels would not match; {howto}")
    if len(train) < 2:
        raise PipelineError(f"{where}: train/ has {len(train)} class folder ({', '.join(train)}); a classifier needs"
                            " at least two (with one, every image has the same label and top-1 is 100 %); add a"
                            f" folder of images per class to train/ and {eval_dir}/")
    if info.num_classes and len(train) != info.num_classes:
        raise PipelineError(f"{where}: train/ has {len(train)} class folders, expected {info.num_classes}; {howto}")
    for split, counts, expected in (("train", train, info.train_size), (eval_dir, held_out, info.eval_size)):
        if expected and sum(counts.values()) != expected:
            raise PipelineError(f"{where}: {split}/ holds {sum(counts.values())} images, expected {expected}; the "
                                f"copy is incomplete; {howto}")
    headers = [read_header(f, where) for f in train_sample + eval_sample]
    listing = {"listing_digest": listing_digest(root, ("train", eval_dir))} if name == "folder" else {}
    return {"format": "imagefolder", "path": str(root), "classes": sorted(train), "eval_split": eval_dir, **listing,
            "channels": 1 if all(gray for gray, _ in headers) else 3,
            "image_size": statistics.median_low(side for _, side in headers[:len(train_sample)]),
            "splits": {"train": {"images": sum(train.values()), "dir": "train"},
                       eval_dir: {"images": sum(held_out.values()), "dir": eval_dir}}}


def user_dataset(name: str, *, imagenet_path: str, folder_path: str) -> dict:
    """Manifest fields of `imagenet` or `folder` after verifying the user's directory."""
    return image_folder(name, imagenet_path if name == "imagenet" else folder_path)

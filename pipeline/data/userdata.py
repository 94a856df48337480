"""Datasets the user provides as a path: ImageNet-1K (never downloaded) and `folder` (their own images).

Nothing is copied: `fetch` checks the layout and the class and image counts, and the manifest records the
absolute path and the counts. The loaders open the path with torchvision's `ImageFolder`, which assigns label
i to the i-th class folder in sorted order, so train and eval must have the same class folders.
"""

from __future__ import annotations

import os
from pathlib import Path

from torchvision.datasets.folder import IMG_EXTENSIONS

from pipeline.data.registry import DATASETS
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


def count_images(split_dir: Path) -> dict[str, int]:
    """Images per class folder of an ImageFolder tree (walked recursively, as `ImageFolder` does)."""
    counts = {}
    for entry in sorted(os.scandir(split_dir), key=lambda e: e.name):
        if entry.is_dir():
            counts[entry.name] = sum(
                f.lower().endswith(IMG_EXTENSIONS)
                for _, _, files in os.walk(entry.path, followlinks=True) for f in files
            )
    return counts


def check_split(name: str, split_dir: Path, howto: str) -> dict[str, int]:
    """The class counts of one split directory, or a `PipelineError` naming what is wrong with it."""
    if not split_dir.is_dir():
        raise PipelineError(f"fetch {name}: {split_dir} is not a directory; {howto}")
    counts = count_images(split_dir)
    if not counts:
        loose = any(f.lower().endswith(IMG_EXTENSIONS) for f in os.listdir(split_dir))
        what = "holds loose images but no class folders" if loose else "holds no class folders"
        raise PipelineError(f"fetch {name}: {split_dir} {what}; {howto}")
    empty = [c for c, n in counts.items() if n == 0]
    if empty:
        raise PipelineError(f"fetch {name}: class folder(s) {', '.join(empty[:5])} of {split_dir} hold no "
                            f"images ({', '.join(IMG_EXTENSIONS)}); {howto}")
    return counts


def image_folder(name: str, path: str, param: str, howto: str) -> dict:
    """Verify an ImageFolder dataset at `path` and return its manifest fields (the registry's split sizes)."""
    info = DATASETS[name]
    if not path:
        raise PipelineError(f"fetch {name}: {param} is empty; {howto}")
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise PipelineError(f"fetch {name}: {param} = {path!r} is not a directory; {howto}")
    eval_dir = "val" if (root / "val").is_dir() or name == "imagenet" else "test"
    train, held_out = check_split(name, root / "train", howto), check_split(name, root / eval_dir, howto)
    if sorted(train) != sorted(held_out):
        odd = sorted(set(train) ^ set(held_out))
        raise PipelineError(f"fetch {name}: train/ and {eval_dir}/ of {root} have different class folders "
                            f"({', '.join(odd[:5])} ...); labels would not match; {howto}")
    if info.num_classes and len(train) != info.num_classes:
        raise PipelineError(f"fetch {name}: {root}/train has {len(train)} class folders, expected "
                            f"{info.num_classes}; {howto}")
    for split, counts, expected in (("train", train, info.train_size), (eval_dir, held_out, info.eval_size)):
        if expected and sum(counts.values()) != expected:
            raise PipelineError(f"fetch {name}: {root}/{split} holds {sum(counts.values())} images, expected "
                                f"{expected}; the copy is incomplete; {howto}")
    return {"format": "imagefolder", "path": str(root), "classes": sorted(train), "eval_split": eval_dir,
            "splits": {"train": {"images": sum(train.values()), "dir": "train"},
                       eval_dir: {"images": sum(held_out.values()), "dir": eval_dir}}}


def user_dataset(name: str, *, imagenet_path: str, folder_path: str) -> dict:
    """Manifest fields of `imagenet` or `folder` after verifying the user's directory."""
    if name == "imagenet":
        return image_folder(name, imagenet_path, "data.imagenet_path", IMAGENET_HOWTO)
    return image_folder(name, folder_path, "data.folder_path", FOLDER_HOWTO)

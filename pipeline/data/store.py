"""What a fetched dataset looks like on disk: `data/<dataset>/manifest.json`, written last (so a directory without
one is incomplete), and the data it describes: `tensors` (one memory-mapped `<split>.pt` of uint8 images and
int64 labels per split, every registered dataset) or `imagefolder` (a user's tree outside the repository)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from pipeline.errors import PipelineError

MANIFEST = "manifest.json"


def save_split(path: Path, images: torch.Tensor, labels: torch.Tensor) -> None:
    if images.dtype != torch.uint8 or images.ndim != 4 or labels.shape != (images.shape[0],):
        raise ValueError(f"expected uint8 N x C x H x W images and N labels, got {images.shape} {labels.shape}")
    torch.save({"images": images.contiguous(), "labels": labels.to(torch.int64).contiguous()}, path)


def load_split(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    data = torch.load(path, mmap=True, weights_only=True)
    return data["images"], data["labels"]


def write_manifest(directory: Path, manifest: dict) -> None:
    """Write `manifest.json` (call it last: its presence marks the directory complete)."""
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def read_manifest(directory: Path, name: str) -> dict:
    path = Path(directory) / MANIFEST
    if not path.is_file():
        raise PipelineError(
            f"dataset {name!r} is not fetched: {path} is missing; run `python -m pipeline fetch {name}` "
            f"(or `dvc repro fetch@{name}`), with data.root pointing at the directory that holds {name}/"
        )
    return json.loads(path.read_text())

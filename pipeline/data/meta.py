"""What a model needs to know about a dataset: `dataset_meta(root, name)`, from the fetched manifest.

The one source of a dataset's class count, channels and image size for every stage that builds a model
(train, filter study, attention, figures, check, benches): `fetch` records them in `data/<name>/manifest.json`,
for registered and user datasets alike, so a user's folder with 13 grayscale classes is built as such.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.data.registry import DATASETS
from pipeline.data.store import read_manifest


@dataclass(frozen=True)
class DatasetMeta:
    """A fetched dataset's facts: classes, image channels and the side of its stored images."""

    name: str
    num_classes: int
    channels: int
    image_size: int


def dataset_meta(root: str | Path, name: str) -> DatasetMeta:
    """The facts of fetched dataset `name` under `root` (PipelineError saying how to fetch it if it is not)."""
    manifest = read_manifest(Path(root) / name, name)
    info = DATASETS[name]
    return DatasetMeta(name, int(manifest["num_classes"]), int(manifest.get("channels", info.channels)),
                       int(manifest.get("image_size", info.native_size)))

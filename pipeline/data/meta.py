"""What a model is built with: `dataset_meta(root, name)` -> DatasetMeta(name, num_classes, channels, image_size),
read from the fetched dataset's manifest, one source for every stage that builds a model. Before anything is
fetched, `pipeline.data.fetch.source_meta` gives the same facts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.data.store import read_manifest
from pipeline.errors import PipelineError

FIELDS = ("num_classes", "channels", "image_size")


@dataclass(frozen=True)
class DatasetMeta:

    name: str
    num_classes: int  #: classifier outputs
    channels: int  #: 1 (grayscale) or 3: the model's in_chans unless model.in_chans asks otherwise
    image_size: int  #: side of the stored images; for folder/imagenet, the median shorter side of a sample


def meta_from_manifest(manifest: dict, name: str) -> DatasetMeta:
    missing = [key for key in FIELDS if key not in manifest]
    if missing:
        raise PipelineError(f"dataset {name!r} was fetched by an older version of the pipeline (its manifest lacks "
                            f"{', '.join(missing)}); fetch it again: `python -m pipeline fetch {name}`")
    return DatasetMeta(name, *(int(manifest[key]) for key in FIELDS))


def dataset_meta(root: str | Path, name: str) -> DatasetMeta:
    """The DatasetMeta of fetched dataset `name` under `root` (params `data.root`), from its manifest; PipelineError
    when it is not fetched (saying how) or was fetched by an older version."""
    return meta_from_manifest(read_manifest(Path(root) / name, name), name)

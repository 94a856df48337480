"""What a model is built with: `dataset_meta(root, name)` -> DatasetMeta(name, num_classes, channels, image_size).

    meta = dataset_meta(params.data.root, "folder")      # after `python -m pipeline fetch folder`
    model = builders.timm_model(params.models["vit"], meta)  # num_classes, in_chans from meta

One source of truth for every stage that builds a model: the fetched dataset's manifest
(`data/<name>/manifest.json`), which `fetch` writes for every dataset, registered or the user's:

- `num_classes`: the classes the data has (registered datasets: checked against the registry at fetch).
- `channels`: 1 or 3: the stored images' for tensor datasets, the registry's for torchvision's image trees
  (Food-101, Flowers-102, Pets: RGB), read from the images for `folder` and `imagenet`
  (`pipeline.data.fetch.userdata`: all grayscale -> 1, else 3).
- `image_size`: the stored side for tensor datasets (checked against the registry; Food-101, Flowers-102 and Pets
  are stored as 256-px squares, `pipeline.data.fetch.sources.resized_tree`), and for `folder` / `imagenet` a
  typical side: the median shorter side of a sample of images.

Before anything is fetched (`python -m pipeline check`), `pipeline.data.fetch.source_meta` gives the
DatasetMeta that fetch will record: the registry's facts for registered datasets (fetch refuses data that does
not match them), and for `folder` / `imagenet` the same scan of the user's directory that fetch runs, writing
nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.data.store import read_manifest
from pipeline.errors import PipelineError

FIELDS = ("num_classes", "channels", "image_size")


@dataclass(frozen=True)
class DatasetMeta:
    """The facts about a dataset that a model is built with."""

    name: str
    num_classes: int  #: classifier outputs
    channels: int  #: 1 (grayscale) or 3: the model's in_chans unless model.in_chans asks otherwise
    image_size: int  #: side of the stored images; a typical side for variable-size sets (module docstring)


def meta_from_manifest(manifest: dict, name: str) -> DatasetMeta:
    """The DatasetMeta a manifest records, or a PipelineError when it predates these fields."""
    missing = [key for key in FIELDS if key not in manifest]
    if missing:
        raise PipelineError(f"dataset {name!r} was fetched by an older version of the pipeline (its manifest lacks "
                            f"{', '.join(missing)}); fetch it again: `python -m pipeline fetch {name}`")
    return DatasetMeta(name, *(int(manifest[key]) for key in FIELDS))


def dataset_meta(root: str | Path, name: str) -> DatasetMeta:
    """The DatasetMeta of fetched dataset `name` under `root` (params `data.root`), from its manifest.

    Raises:
        PipelineError: the dataset is not fetched (saying how to fetch it), or was fetched by an older version.
    """
    return meta_from_manifest(read_manifest(Path(root) / name, name), name)

"""The data layer: dataset registry, fetching (download + verify), and loaders.

    from pipeline.data import DATASETS, build_loaders, Augment, fetch_dataset, dataset_meta

- `registry`: name -> source, classes, splits, mean/std, native size, citation (no torch: config.py reads it).
- `fetch` / `sources` / `digits` / `userdata`: `python -m pipeline fetch <dataset>` writes `data/<dataset>/`
  atomically.
- `meta`: `dataset_meta(root, name)`: the classes, channels and image size every model is built with (from the
  manifest); `source_meta(name, ...)`: the same before a fetch.
- `store`: the on-disk form (manifest + uint8 tensors for small sets).
- `transforms` / `loaders`: `build_loaders(...)` with timm's transforms or their batched tensor equivalent.

Names are imported lazily, so `import pipeline.data.registry` does not load torch.
"""

from __future__ import annotations

import importlib

from pipeline.data.registry import DATASETS, DatasetInfo

_LAZY = {
    "Augment": "pipeline.data.transforms",
    "build_loaders": "pipeline.data.loaders",
    "Loaders": "pipeline.data.loaders",
    "fetch_dataset": "pipeline.data.fetch",
    "DatasetMeta": "pipeline.data.meta",
    "dataset_meta": "pipeline.data.meta",
    "source_meta": "pipeline.data.meta",
}

__all__ = ["DATASETS", "DatasetInfo", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pipeline.data' has no attribute {name!r}")

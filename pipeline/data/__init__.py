"""The data layer: dataset registry, fetching (download + verify), and loaders.

    from pipeline.data import DATASETS, build_loaders, Augment, fetch_dataset

- `registry`: name -> source, classes, splits, mean/std, native size, citation (no torch: config.py reads it).
- `fetch` / `sources` / `userdata`: `python -m pipeline fetch <dataset>` writes `data/<dataset>/` atomically.
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
}

__all__ = ["DATASETS", "DatasetInfo", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pipeline.data' has no attribute {name!r}")

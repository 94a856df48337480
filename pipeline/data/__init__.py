"""The data layer: dataset registry, fetching (download + verify), dataset facts, and loaders.

- `registry`: name -> source, classes, splits, mean/std, native size, citation (no torch: config.py reads it).
- `fetch` / `sources` / `digits` / `userdata`: `python -m pipeline fetch <dataset>` writes `data/<dataset>/`
  atomically.
- `meta`: `dataset_meta(root, name)`: the classes, channels and image size every model is built with (from the
  manifest); `fetch.source_meta(name, ...)`: the same before a fetch.
- `store`: the on-disk form (manifest + uint8 tensors for small sets).
- `transforms` / `loaders`: `build_loaders(...)` with timm's transforms or their batched tensor equivalent.

Import from the submodules (`from pipeline.data.loaders import build_loaders`): this package's `__init__` imports
nothing, so `import pipeline.data.registry` does not load torch.
"""

"""The data layer, in two sides that share only the facts and the stored format.

- Shared: the facts live below this package, in `pipeline.datasets` (name -> source, classes, splits, mean/std,
  native size, citation; no torch: params validation reads it without importing the data layer), `store` (the on-disk
  form: manifest + uint8 tensors for small sets), `meta` (`dataset_meta(root, name)`: the
  classes, channels and image size every model is built with), `upstream` (a dataset's torchvision class).
- `fetch/`: the stage `fetch@<dataset>` (`python -m pipeline.data.fetch <dataset>`): download or copy, verify,
  convert, write `data/<dataset>/` atomically (`sources`, `digits`, `userdata`).
- `load/`: what a training run reads (`build_loaders`, transforms, the device-resident path).

Import from the submodules: this package's `__init__` imports nothing, so `import pipeline.data.store` does not
load torch.
"""

"""What the training tests share: a tiny `Run` on the `workdir` fixture's dataset, and a kill in mid-run."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from pipeline.cell import provenance
from pipeline.config import Resources, TrainConfig
from pipeline.schema import digest
from pipeline.training import engine, run


def tiny_run(epochs: int = 2, lr: float = 1e-2, val_subset: int = 0, holdout: int = 0, **recipe) -> run.Run:
    """A 2-layer MLP run on the `workdir` fixture's tiny Fashion-MNIST-shaped dataset (8 x 8, 3 classes)."""
    def build(meta, device):
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 16), torch.nn.GELU(),
                                   torch.nn.Linear(16, meta.num_classes))

    train = TrainConfig(**{"epochs": epochs, "batch_size": 16, "lr": lr, "warmup_epochs": 0, "scale": [1.0, 1.0],
                           "ratio": [1.0, 1.0], "hflip": 0.0, "smoothing": 0.0} | recipe)
    config = {"cell": "fashion_mnist-tiny-0", "results": "results/train/fashion_mnist/tiny/seed0",
              "dataset": "fashion_mnist", "seed": 0, "train": dataclasses.asdict(train),
              "data": {"train_subset": 0, "val_subset": val_subset, "mean": [0.286], "std": [0.353]}
              | ({"holdout": holdout} if holdout else {})}
    return run.Run(config=config, build=build, input_size=lambda meta: (meta.image_size, meta.channels),
                   facts=lambda model: {"arm": "none"})


def execute(r: run.Run, resources: Resources | None = None, attempt: str | None = None) -> dict | None:
    """`run.execute` of `r` on the `workdir` fixture's data, one process, as `pipeline.cell` starts it."""
    return run.execute(r, "data", resources or Resources(), attempt or digest(r.config), provenance(r.config))


@contextmanager
def dies_in_epoch(monkeypatch, epoch: int) -> Iterator[None]:
    """Inside the block, training is interrupted (KeyboardInterrupt, as Ctrl-C) while it evaluates epoch `epoch`
    (0-based), after the checkpoint of the epoch before; the engine is whole again after the block."""
    real, calls = engine.evaluate, []

    def dying(*args, **kwargs):
        calls.append(1)
        if len(calls) == epoch + 1:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(engine, "evaluate", dying)
        yield

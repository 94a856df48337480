"""What the training tests share: a tiny `Run` on the `workdir` fixture's dataset, and a kill in mid-run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from pipeline.config import TrainConfig
from pipeline.training import engine, run


def tiny_run(epochs: int = 2, lr: float = 1e-2) -> run.Run:
    """A 2-layer MLP run on the `workdir` fixture's tiny Fashion-MNIST-shaped dataset (8 x 8, 3 classes)."""
    def build(meta):
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 16), torch.nn.GELU(),
                                   torch.nn.Linear(16, meta.num_classes))

    recipe = TrainConfig(epochs=epochs, batch_size=16, lr=lr, warmup_epochs=0, scale=[1.0, 1.0],
                         ratio=[1.0, 1.0], hflip=0.0, smoothing=0.0)
    return run.Run(module="pipeline.training.train", kind="train", key=("fashion_mnist", "tiny", "seed0"),
                   dataset="fashion_mnist", seed=0,
                   recipe=recipe, config={"lr": lr, "epochs": epochs}, build=build,
                   input_size=lambda meta: (meta.image_size, meta.channels),
                   facts=lambda model: {"arm": "none"})


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

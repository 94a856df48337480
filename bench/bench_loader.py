"""Does the train loader keep up with training? Images/s of both, for the CPU default, on this machine.

    .venv/bin/python bench/bench_loader.py                       # CPU default: Fashion-MNIST, 5000 images
    .venv/bin/python bench/bench_loader.py --threads 1 --json bench/loader.json

The loader is `pipeline.data.build_loaders` exactly as the train stage builds it for params.yaml's CPU
default (5000 training images, batch 128, RandomResizedCrop scale (0.8, 1) + flip, workers 0), timed over
whole epochs. The training step is the CPU default's model (a 6-layer ViT, dim 96, patch 4 at 28 px, 1
channel, 10 classes), AdamW lr 1e-3, forward + backward + step on a batch of 128. Both run in this process
with the same torch thread count (the train stage's `resources.threads`). The loader must deliver at least
`--min-ratio` (3) times the images a training step consumes; the script exits 1 otherwise.

Fashion-MNIST is read from `<root>/fashion_mnist` when fetched, else fetched from Debian's mirror into a
temporary directory first.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import timm
import torch

from pipeline.data.fetch import fetch_dataset
from pipeline.data.load.loaders import build_loaders
from pipeline.data.load.transforms import Augment
from pipeline.datasets import normalization_stats

LIGHT = Augment(scale=(0.8, 1.0), ratio=(0.75, 4 / 3), hflip=0.5, crop_pct=1.0)


def loader_rate(root: Path, backend: str, epochs: int) -> list[float]:
    """Images/s of whole train epochs of the CPU default's loader (one value per epoch)."""
    loaders = build_loaders("fashion_mnist", root, stats=normalization_stats("fashion_mnist", "dataset"),
                            img_size=28, in_chans=1, batch_size=128, seed=0,
                            augment=dataclasses.replace(LIGHT, backend=backend), train_subset=5000)
    rates = []
    for epoch in range(epochs + 1):  # epoch 0 warms up (page cache of the memory-mapped tensors)
        loaders.train.sampler.set_epoch(epoch)
        start, n = time.perf_counter(), 0
        for x, _ in loaders.train:
            n += x.shape[0]
        if epoch:
            rates.append(n / (time.perf_counter() - start))
    return rates


def step_rate(repeats: int, steps: int) -> list[float]:
    """Images/s of the CPU default's training step (batch 128), one value per block of `steps` steps."""
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, weight_init="skip", img_size=28,
                              patch_size=4, embed_dim=96, depth=6, num_heads=3, in_chans=1, num_classes=10)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(128, 1, 28, 28), torch.randint(0, 10, (128,))

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    step()  # warm-up
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        rates.append(steps * 128 / (time.perf_counter() - start))
    return rates


def summary(rates: list[float]) -> str:
    spread = statistics.stdev(rates) if len(rates) > 1 else 0.0
    return f"{statistics.mean(rates):9.0f} ± {spread:6.0f} img/s (n={len(rates)})"


def data_root(root: Path, scratch: Path) -> Path:
    if (root / "fashion_mnist" / "manifest.json").is_file():
        return root
    fetch_dataset("fashion_mnist", scratch, mirror="/usr/share/datasets/fashion-mnist", log=lambda _: None)
    return scratch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default="data", help="params data.root")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (a train stage's resources.threads)")
    parser.add_argument("--epochs", type=int, default=5, help="timed loader epochs")
    parser.add_argument("--steps", type=int, default=5, help="training steps per timed block")
    parser.add_argument("--repeats", type=int, default=3, help="timed blocks of training steps")
    parser.add_argument("--min-ratio", type=float, default=3.0)
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as scratch:
        root = data_root(Path(args.root), Path(scratch))
        loader = {b: loader_rate(root, b, args.epochs) for b in ("tensor", "pil")}
    step = step_rate(args.repeats, args.steps)
    ratio = statistics.mean(loader["tensor"]) / statistics.mean(step)
    print(f"machine: {platform.machine()} {platform.processor() or ''}, torch {torch.__version__}, "
          f"{args.threads} thread(s)")
    print(f"train loader, tensor back-end (used): {summary(loader['tensor'])}")
    print(f"train loader, pil back-end (timm)   : {summary(loader['pil'])}")
    print(f"training step (batch 128)           : {summary(step)}")
    print(f"loader / training = {ratio:.1f}x (required >= {args.min_ratio}x)")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "threads": args.threads, "torch": torch.__version__, "machine": platform.machine(),
            "loader_tensor": loader["tensor"], "loader_pil": loader["pil"], "step": step, "ratio": ratio,
        }, indent=2) + "\n")
    return 0 if ratio >= args.min_ratio else 1


if __name__ == "__main__":
    sys.exit(main())

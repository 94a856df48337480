"""GPU throughput of the training engine: images/s and MFU for ViT-T/S/B at 224 px, eager vs compiled, with the
device-resident data path and the DataLoader path, at the paper's 64 images per GPU and at 512 (paper-small's
cell on one GPU, `resources.nproc: 1`), on one GPU or (under torchrun) on all visible GPUs.

    .venv/bin/python bench/bench_gpu.py                                     # one GPU, every model/mode/path/batch
    torchrun --standalone --nproc_per_node=gpu bench/bench_gpu.py           # all visible GPUs (DDP)
    .venv/bin/python bench/bench_gpu.py --models vit_base_patch16_224 --modes compiled --paths device \\
        --yaml bench/throughput.yaml                                        # add the measured rows to the table

What runs is the engine's own epoch (`pipeline.training.engine.train_one_epoch` on `build_parts`: AdamW, cosine
schedule, mixup 0.8 / cutmix 1.0, label smoothing, bf16 autocast, DDP under torchrun) on the paper's small-dataset
recipe (code-2505's README: RandAugment rand-m9-mstd0.5-inc1, random-resized crop, flip, random erasing 0.25), fed
from a synthetic CIFAR-shaped dataset (uint8, 32 px, upscaled to 224 like the paper's CIFAR runs) stored exactly as
`fetch` stores CIFAR, through `build_loaders`:

- `device`: `pipeline.data.load.device` (the splits on the GPU, augmented there in whole batches);
- `loader`: DataLoader workers with timm's per-image PIL transforms (`--workers`, default: the CPU cores per
  process).

A batch of 512 per GPU emulates the official run's 64-image ranks (`train.sampler_ranks`, as paper-small). Each
measurement trains one warm-up epoch (compilation, cuDNN autotuning, worker start), times one epoch of `--steps`
steps, then profiles 5 steps of a third: the share of them the GPU computed nothing (1 - kernel time / wall time,
torch's profiler), the share the host spent getting batches, and the timed epoch's peak GPU memory. Images/s is over all
processes; the row written for bench/throughput.yaml (what `python -m pipeline check` divides a grid's images by) is
per GPU. MFU = model FLOPs per image (forward + backward, counted by `torch.utils.flop_counter.FlopCounterMode` on
one training step, attention included: `flops_per_image`) x images/s, over the GPUs' peak dense bf16 throughput
(PEAK_TFLOPS, from NVIDIA's datasheets; `--peak-tflops` for another device). `bench/gpu_check.py` runs this matrix
for ViT-Ti/16 within the GPU check.

`--tiny` is the configuration the tests run on CPU (a 2-block ViT at 32 px, a few steps), so this script cannot rot.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import os
import sys
import tempfile
import time
from pathlib import Path

import timm
import torch
from torch.utils.flop_counter import FlopCounterMode

from pipeline.check import row_key as model_key
from pipeline.config import Resources, TrainConfig
from pipeline.data.load.device import device_loaders
from pipeline.data.load.loaders import build_loaders
from pipeline.data.load.transforms import Augment
from pipeline.data.store import save_split, write_manifest
from pipeline.datasets import normalization_stats
from pipeline.schema import yaml_load
from pipeline.training.engine import (
    Dist,
    amp_dtype,
    autocast_context,
    build_parts,
    peak_memory_gib,
    setup_distributed,
    teardown_distributed,
    train_one_epoch,
)

MODELS = ("vit_tiny_patch16_224", "vit_small_patch16_224", "vit_base_patch16_224")
#: Peak dense bf16 tensor-core TFLOPS per GPU (NVIDIA datasheets; no sparsity), matched on the device name.
#: V100 has no bf16: its fp16 figure, which `amp: auto` uses there.
PEAK_TFLOPS = {"H200": 989.0, "H100 PCIe": 756.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "L4": 121.0,
               "A10": 125.0, "V100": 125.0, "RTX 4090": 165.0}
#: Training steps the GPU-idle share is profiled over.
PROFILED_STEPS = 5
#: Images per GPU of the official small-dataset run (8 GPUs x 64): a larger batch per process emulates its ranks
#: (`train.sampler_ranks`), as paper-small does.
OFFICIAL_RANK_BATCH = 64
#: The paper's small-dataset recipe (code-2505's README) as the engine takes it.
PAPER_RECIPE = {"aa": "rand-m9-mstd0.5-inc1", "scale": [0.08, 1.0], "hflip": 0.5, "reprob": 0.25, "mixup": 0.8,
                "cutmix": 1.0, "smoothing": 0.1, "opt": "adamw", "lr": 1e-3, "weight_decay": 0.05,
                "warmup_epochs": 0, "crop_pct": 0.875}


def synthetic_cifar(root: Path, images: int, size: int = 32) -> None:
    """A CIFAR-shaped dataset under root/cifar10, stored as `fetch` stores CIFAR (uint8 tensors + manifest)."""
    g = torch.Generator().manual_seed(0)
    directory = root / "cifar10"
    directory.mkdir(parents=True)
    splits = {}
    for split, n in (("train", images), ("test", 256)):
        labels = torch.arange(n) % 10
        save_split(directory / f"{split}.pt", torch.randint(0, 256, (n, 3, size, size), generator=g,
                                                           dtype=torch.uint8), labels)
        splits[split] = {"images": n, "file": f"{split}.pt", "shape": [3, size, size]}
    write_manifest(directory, {"dataset": "cifar10", "num_classes": 10, "channels": 3, "image_size": size,
                               "train_split": "train", "eval_split": "test", "format": "tensors",
                               "classes": [str(c) for c in range(10)], "splits": splits})


def make_model(name: str, args) -> torch.nn.Module:
    """The benchmarked model: timm's, at the paper-small recipe's drop-path 0.1 (`--tiny`: a 2-block ViT)."""
    torch.manual_seed(0)
    if args.tiny:
        return timm.create_model(name, img_size=args.img, patch_size=8, embed_dim=48, depth=2, num_heads=3,
                                 num_classes=10)
    return timm.create_model(name, img_size=args.img, num_classes=10, drop_path_rate=0.1)


def vit_flops(img: int, dim: int, depth: int, patch: int = 16, in_chans: int = 3, num_classes: int = 10) -> float:
    """Forward FLOPs per image of a timm ViT with a class token, counted by hand (2 per multiply-add): the patch
    embedding, per block qkv, q k^T and attn v over n = tokens + 1, the projection and the 4x MLP; the head. A
    training step costs three times it (the backward pass twice the forward's matmuls): ViT-Ti/16 at 224, 2.51 and
    7.52 GFLOP."""
    tokens = (img // patch) ** 2
    n = tokens + 1
    block = n * dim * 3 * dim + 2 * n * n * dim + n * dim * dim + 2 * n * dim * 4 * dim
    return 2 * (tokens * patch * patch * in_chans * dim + depth * block + dim * num_classes)


def flops_per_image(model: torch.nn.Module, img: int, amp: str, device: torch.device) -> tuple[float, float]:
    """(forward, forward + backward) FLOPs of one training step per image, counted by PyTorch's `FlopCounterMode`
    on the bare model (before DDP or compile wrap it) with timm's fused attention off: the counter has no formula
    for the CPU's fused attention kernel and would miss attention there (ViT-Ti/16: 6.39 of 7.52 GFLOP); the
    explicit q k^T and attn v matmuls it counts on every device."""
    model = model.to(device)
    for module in model.modules():
        if hasattr(module, "fused_attn"):
            module.fused_attn = False
    autocast = autocast_context(amp_dtype(amp, device)[0], device)
    images, targets = torch.randn(2, 3, img, img, device=device), torch.randint(0, 10, (2,), device=device)
    with FlopCounterMode(display=False) as counter:
        with autocast():
            loss = torch.nn.functional.cross_entropy(model(images), targets)
        forward = counter.get_total_flops()
        loss.backward()
    return forward / len(images), counter.get_total_flops() / len(images)


def peak_tflops(device: torch.device, override: float | None) -> tuple[str, float | None]:
    """(device name, its peak dense bf16 TFLOPS or None when unknown)."""
    if device.type != "cuda":
        return "cpu", override
    name = torch.cuda.get_device_name(device)
    if override:
        return name, override
    return name, next((v for k, v in PEAK_TFLOPS.items() if k in name), None)


def setup(name: str, mode: str, path: str, batch: int, args, root: Path, d: Dist):
    """The engine's parts for one (model, mode, path, batch per process) on the paper's recipe: (recipe, resources,
    loaders, parts). A batch of several official 64-image ranks emulates them (`train.sampler_ranks`)."""
    global_batch = batch * d.world_size
    ranks = global_batch // OFFICIAL_RANK_BATCH if global_batch % OFFICIAL_RANK_BATCH == 0 else 1
    recipe = TrainConfig(**PAPER_RECIPE, epochs=3, batch_size=global_batch, amp=args.amp,
                         sampler_ranks=ranks if ranks > d.world_size else 1)
    resources = Resources(compile=mode == "compiled", device=d.device.type, workers=args.workers,
                          sync_every=args.sync_every, nproc=d.world_size,
                          channels_last=getattr(args, "channels_last", False))
    augment = Augment.from_train(recipe)
    loaders = build_loaders("cifar10", root, stats=normalization_stats("cifar10", "dataset"),
                            img_size=args.img, in_chans=3, batch_size=batch, seed=0,
                            augment=augment, rank=d.rank, world_size=d.world_size, workers=args.workers,
                            pin_memory=d.device.type == "cuda", sampler_ranks=recipe.sampler_ranks)
    if path == "device":
        loaders = device_loaders(loaders, img_size=args.img, augment=augment, device=d.device)
    parts = build_parts(make_model(name, args), recipe, 10, len(loaders.train), d, resources)
    return recipe, resources, loaders, parts


def measure(name: str, mode: str, path: str, batch: int, args, root: Path, d: Dist) -> dict:
    """One (model, mode, path, batch per process): a warm-up epoch, then a timed one; images/s over all processes."""
    recipe, resources, loaders, parts = setup(name, mode, path, batch, args, root, d)
    flops = flops_per_image(make_model(name, args), args.img, args.amp, d.device)[1]
    rows = []
    for epoch in range(2):  # a warm-up epoch (compilation, autotuning, workers), then the timed one
        loaders.train.sampler.set_epoch(epoch)
        peak_memory_gib(d.device)  # resets the GPU's peak: the timed epoch's own
        rows.append(train_one_epoch(parts, loaders.train, recipe, epoch, d, lambda n: None, resources))
    peak_memory = peak_memory_gib(d.device)
    first = FirstBatches(loaders.train, PROFILED_STEPS)  # the profiler's trace grows with the kernels it records
    idle = gpu_idle_share(lambda: train_one_epoch(parts, first, recipe, 2, d, lambda n: None, resources), d.device)
    device_name, peak = peak_tflops(d.device, args.peak_tflops)
    rate = rows[-1]["images_per_s"]
    mfu = rate * flops / (peak * 1e12 * d.world_size) if peak else None
    return {"model": name, "mode": mode, "path": path, "images_per_s": rate, "per_device": rate / d.world_size,
            "gflops_per_image": flops / 1e9, "mfu": mfu, "device": device_name, "world_size": d.world_size,
            "batch_per_device": batch, "amp": args.amp, "data_wait": rows[-1]["data_wait"], "gpu_idle": idle,
            "peak_memory_gib": peak_memory, "sampler_ranks": recipe.sampler_ranks, "torch": torch.__version__}


class FirstBatches:
    """The first `steps` batches of a train loader, as `train_one_epoch` reads a loader (len, iteration)."""

    def __init__(self, loader, steps: int):
        self.loader, self.steps = loader, min(steps, len(loader))

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        return itertools.islice(iter(self.loader), self.steps)


def gpu_idle_share(run, device: torch.device) -> float | None:
    """The share of `run()`'s wall time the GPU did nothing: 1 - (the union of its kernels', copies' and memsets'
    time ranges, by torch's profiler: CUPTI) / wall time. None on CPU."""
    if device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        run()
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
    busy = covered([(e.time_range.start, e.time_range.end) for e in prof.events() if e.device_type.name == "CUDA"])
    return max(0.0, 1 - busy / 1e6 / wall)  # the profiler's times are microseconds


def covered(spans: list[tuple[float, float]]) -> float:
    """The length of the union of the intervals `spans` (overlapping kernels, on several streams, count once)."""
    total, reach = 0.0, float("-inf")
    for begin, end in sorted(spans):
        total += max(0.0, end - max(begin, reach))
        reach = max(reach, end)
    return total


def throughput_row(result: dict, img: int, script: str = "bench/bench_gpu.py") -> dict:
    """A bench/throughput.yaml entry (what `python -m pipeline check` reads) for one measurement: the device's short
    name (its row key), the full name, torch's version and the date in the source."""
    short = next((k for k in PEAK_TFLOPS if k in result["device"]), result["device"])
    mfu = f", MFU {result['mfu']:.2f}" if result["mfu"] is not None else ""
    source = (f"{script} ({result['mode']}, {result['amp']}, {result['path']} data, batch"
              f" {result['batch_per_device']} per GPU, {result['world_size']} GPU(s){mfu}) on {result['device']},"
              f" torch {result['torch']}, {datetime.date.today().isoformat()}")
    return {"model": result["model"], "img_size": img, "embed_dim": None, "device": short,
            "images_per_s": round(result["per_device"]), "source": source}


def row_key(row: dict) -> tuple:
    """What `python -m pipeline check` matches a throughput row by: its model key and device."""
    return *model_key(row), row["device"]


def append_rows(path: Path, rows: list[dict]) -> None:
    """Add rows to a throughput table (a YAML list), keeping its comments and earlier entries except those of the
    same (model, image size, patch size, width, device), which the new rows replace (`check` reads the first match)."""
    text = path.read_text() if path.exists() else ""
    head, *entries = ("\n" + text).split("\n- model: ")
    new = {row_key(r) for r in rows}
    kept = [e for e in entries if row_key(yaml_load("- model: " + e)[0]) not in new]
    lines = []
    for row in rows:
        lines.append(f"- model: {row['model']}")
        lines += [f"  {k}: {'null' if v is None else v if not isinstance(v, str) else repr(v)}"
                  for k, v in row.items() if k != "model"]
    body = "".join(f"\n- model: {e.rstrip()}" for e in kept)
    path.write_text((head.lstrip("\n").rstrip("\n") + body).strip("\n") + ("\n" if head.strip() or body else "")
                    + "\n".join(lines) + "\n")
    yaml_load(path.read_text())  # still one valid YAML list


def report(result: dict, d: Dist, args) -> None:
    """One measurement's line."""
    mfu = f"{result['mfu']:.3f}" if result["mfu"] is not None else "n/a"
    idle = f"{result['gpu_idle']:.0%}" if result["gpu_idle"] is not None else "n/a"
    print(f"{result['model']:24s} {result['mode']:8s} {result['path']:6s} batch {result['batch_per_device']:4d}"
          f" {result['images_per_s']:9.1f} img/s ({result['per_device']:.1f} per device)"
          f"  {result['gflops_per_image']:.2f} GFLOP/img  MFU {mfu}  GPU idle {idle}  host getting batches"
          f" {result['data_wait']:.0%}  peak {result['peak_memory_gib']:.2f} GiB  [{result['device']}"
          f" x{d.world_size}, {args.amp}]", flush=True)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--modes", nargs="+", default=["eager", "compiled"], choices=["eager", "compiled"])
    p.add_argument("--paths", nargs="+", default=["device", "loader"], choices=["device", "loader"])
    p.add_argument("--img", type=int, default=224)
    p.add_argument("--batch", type=int, nargs="+", default=[64, 512],
                   help="images per process (64: the paper's per GPU; 512: paper-small's cell on one GPU)")
    p.add_argument("--steps", type=int, default=50, help="timed steps (one epoch) at the largest batch")
    p.add_argument("--amp", default="bf16", choices=["auto", "bf16", "fp16", "off"])
    p.add_argument("--sync-every", type=int, default=32)
    p.add_argument("--workers", type=int, default=None, help="DataLoader workers per process (default: cores)")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    p.add_argument("--peak-tflops", type=float, default=None, help="peak bf16 TFLOPS per device, for MFU")
    p.add_argument("--yaml", type=Path, default=None, help="append the rows to this throughput table")
    p.add_argument("--tiny", action="store_true", help="the CPU test configuration (2-block ViT, 32 px)")
    args = p.parse_args(argv)
    if args.tiny:
        args.img, args.batch, args.steps = 32, [8], 2
    return args


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse(argv)
    d = setup_distributed(args.device, threads=max(1, (os.cpu_count() or 1) // int(os.environ.get("WORLD_SIZE", 1))))
    if args.workers is None:
        args.workers = 0 if args.tiny else max(1, (os.cpu_count() or 1) // d.world_size - 1)
    results = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            # every rank builds the same synthetic set in its own temporary directory
            synthetic_cifar(Path(tmp), max(args.batch) * d.world_size * args.steps)
            for name in args.models:
                for mode in args.modes:
                    for batch in args.batch:
                        for path in args.paths:
                            result = measure(name, mode, path, batch, args, Path(tmp), d)
                            results.append(result)
                            if d.master:
                                report(result, d, args)
        if d.master and args.yaml:
            append_rows(args.yaml, [throughput_row(r, args.img) for r in results])
            print(f"appended {len(results)} row(s) to {args.yaml}")
    finally:
        teardown_distributed()
    return results


if __name__ == "__main__":
    sys.exit(0 if main() else 1)


"""Where a paper-small training step's time goes on one GPU: ViT-Ti/16 at 224, bf16, batch 512 (8 emulated ranks of
64), the device data path, eager and compiled: what bounds the throughput that bench/gpu_check.py measures.

    python bench/gpu_profile.py                 # on a GPU; the table on stdout, rows in $OUT/profile.jsonl
    python bench/gpu_profile.py --cpu           # the flow at a tiny size (tests/test_gpu_check.py)

Per mode (`--channels-last`: with `resources.channels_last`), wall milliseconds per step (CUDA synchronised before
and after each timed span) of:
  batch    getting a batch: the device path's augmentation (RandAugment, crop, flip, erasing) on the GPU;
  mix      Mixup/CutMix, one draw per 64-image chunk;
  model    forward, loss, backward, AdamW and the scheduler on one fixed batch;
  epoch    the engine's whole step (`train_one_epoch`), over the same number of steps;
and the ten CUDA kernels (or CPU ops on `--cpu`) that took the most device time over three whole steps, by torch's
profiler.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import torch  # noqa: E402
from bench_gpu import FirstBatches, setup, synthetic_cifar  # noqa: E402

from pipeline.training.engine import Dist, mix, rank_batch, train_one_epoch  # noqa: E402


def timed(fn, device: torch.device, steps: int) -> float:
    """Milliseconds per call of `fn` over `steps` calls, the device synchronised before and after."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3 / steps


def profile_mode(mode: str, args, root: Path, device: torch.device) -> dict:
    """The split of one mode's training step (see the module docstring)."""
    d = Dist(0, 1, 0, device)
    recipe, resources, loaders, parts = setup("vit_tiny_patch16_224", mode, "device", args.batch, args, root, d)
    steps = len(loaders.train)
    train_one_epoch(parts, loaders.train, recipe, 0, d, lambda n: None, resources)  # warm-up: compilation, autotune

    batches = iter(loaders.train)
    images, targets = next(batches)
    chunk = rank_batch(recipe, 1)
    memory = torch.channels_last if args.channels_last else torch.contiguous_format
    fixed = images.clone().contiguous(memory_format=memory), mix(parts.mixup, images.clone(), targets, chunk)

    def one_batch():
        nonlocal batches
        try:
            next(batches)
        except StopIteration:
            batches = iter(loaders.train)
            next(batches)

    def model_step():
        with parts.autocast():
            loss = parts.criterion(parts.wrapped(fixed[0]), fixed[1])
        parts.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        parts.optimizer.step()
        parts.scheduler.step_update(num_updates=1)

    row = {"mode": mode, "channels_last": args.channels_last, "batch": args.batch, "img": args.img, "steps": steps,
           "batch_ms": timed(one_batch, device, steps),
           "mix_ms": timed(lambda: mix(parts.mixup, images.clone(), targets, chunk), device, steps),
           "model_ms": timed(model_step, device, steps)}
    epoch = train_one_epoch(parts, loaders.train, recipe, 1, d, lambda n: None, resources)
    row["epoch_ms"] = epoch["epoch_time_s"] * 1e3 / steps
    row["images_per_s"] = epoch["images_per_s"]
    row["top"] = top_ops(lambda: train_one_epoch(parts, FirstBatches(loaders.train, 3), recipe, 2, d,
                                                 lambda n: None, resources), device)
    return row


def top_ops(run, device: torch.device, n: int = 10) -> list[tuple[str, float]]:
    """The `n` kernels (CPU ops on a CPU) with the most self device time in `run()`, in milliseconds."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        run()
        if cuda:
            torch.cuda.synchronize()
    if cuda:
        events = [e for e in prof.events() if e.device_type.name == "CUDA"]
        totals: dict[str, float] = {}
        for e in events:
            totals[e.name[:90]] = totals.get(e.name[:90], 0.0) + e.time_range.elapsed_us() / 1e3
    else:
        totals = {e.key[:90]: e.self_cpu_time_total / 1e3 for e in prof.key_averages()}
    return sorted(totals.items(), key=lambda kv: -kv[1])[:n]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cpu", action="store_true", help="a tiny ViT at 32 px on the CPU (the flow only)")
    p.add_argument("--modes", default="eager,compiled")
    p.add_argument("--channels-last", action="store_true", help="resources.channels_last: the images and the patch"
                   " embedding's convolution in NHWC")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "gpu_check_out"))
    args = p.parse_args(argv)
    device = torch.device("cpu" if args.cpu else "cuda")
    args.tiny, args.img, args.batch = args.cpu, 32 if args.cpu else 224, 128 if args.cpu else 512
    args.amp, args.workers, args.sync_every = "auto" if args.cpu else "bf16", 0, 32
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        synthetic_cifar(Path(tmp), 4 * args.batch if args.cpu else 20 * args.batch)
        for mode in [m for m in args.modes.split(",") if m]:
            row = profile_mode(mode, args, Path(tmp), device)
            with (args.out / "profile.jsonl").open("a") as f:
                f.write(json.dumps(row) + "\n")
            label = f"{mode}, channels_last" if args.channels_last else mode
            print(f"{label:8s} batch {row['batch']}: per step {row['epoch_ms']:.1f} ms ({row['images_per_s']:.0f}"
                  f" img/s) = getting the batch {row['batch_ms']:.1f} + mixing {row['mix_ms']:.1f} + model step"
                  f" {row['model_ms']:.1f} (+ {row['epoch_ms'] - row['batch_ms'] - row['mix_ms'] - row['model_ms']:.1f}"
                  " other)", flush=True)
            for name, ms in row["top"]:
                print(f"    {ms:8.2f} ms  {name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

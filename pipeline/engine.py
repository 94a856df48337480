"""The training engine: `fit(model, loaders, recipe, ...)` trains and evaluates one model, one process per device.

DeiT's split, on timm's building blocks: `create_optimizer_v2`, `create_scheduler_v2`, `Mixup`, the soft-target /
label-smoothing losses, `ModelEmaV3`, `NativeScaler`. The same engine trains the ViTs (`pipeline.train`) and the
ConvMixers of the filter study (`pipeline.filter_study`): only the model differs.

Launch lines (the `train` command builds them for you from params.yaml; see `pipeline.launch`):

    python -m pipeline train fashion_mnist impulse 0                      # one process
    torchrun --standalone --nproc_per_node=8 -m pipeline train cifar10 impulse 0
    torchrun --nnodes=2 --nproc_per_node=8 --rdzv_backend=c10d --rdzv_endpoint=node0:29400 \\
        --rdzv_id=job42 -m pipeline train imagenet impulse 0                # on each node

Reliability: every epoch ends with a checkpoint in an undeclared scratch directory (not a DVC out: a `persist`
out would take the stage out of DVC's run-cache). A killed run started again resumes from it; because each epoch
reseeds every random source from (seed, epoch), the resumed run ends with the same metrics as an uninterrupted one.
"""

from __future__ import annotations

import math
import os
import random
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from timm.data import Mixup
from timm.loss import LabelSmoothingCrossEntropy, SoftTargetCrossEntropy
from timm.optim import create_optimizer_v2
from timm.scheduler import create_scheduler_v2
from timm.utils import ModelEmaV3, NativeScaler, dispatch_clip_grad
from torch.nn.parallel import DistributedDataParallel

from pipeline.config import TrainConfig
from pipeline.errors import PipelineError
from pipeline.outputs import atomic_path


@dataclass
class Dist:
    """This process's place in the job. `master` gates every write, print and log (nanoGPT's master_process)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def master(self) -> bool:
        return self.rank == 0


def setup_distributed(device: str = "auto", threads: int = 1) -> Dist:
    """Read torchrun's environment, pick the device and join the process group (nccl on CUDA, gloo on CPU)."""
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if use_cuda and not torch.cuda.is_available():
        raise PipelineError("train.device = 'cuda' but no CUDA device is visible; set train.device: auto or cpu")
    if use_cuda:
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
    else:
        dev = torch.device("cpu")
        torch.set_num_threads(threads)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if use_cuda else "gloo")
    return Dist(rank, world, local_rank, dev)


def reseed(seed: int, epoch: int) -> None:
    """Seed every global RNG from (seed, epoch) only, so an epoch's randomness does not depend on the past.

    Python's `random` too: timm's per-image transforms and RandomErasing draw from it.
    """
    value = seed * 1_000_003 + epoch
    torch.manual_seed(value)
    random.seed(value)
    np.random.seed(value % 2**32)


def all_sum(values: list[float], d: Dist) -> list[float]:
    """Sum a few numbers over all ranks (float64 so counts stay exact)."""
    if d.world_size == 1:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=d.device)
    dist.all_reduce(t)
    return t.tolist()


def autocast_for(amp: str, device: torch.device):
    """(context factory, dtype or None). 'auto' = bf16 on CUDA, off on CPU (CPU autocast is slower here)."""
    if amp == "auto":
        amp = "bf16" if device.type == "cuda" else "off"
    if amp == "off":
        return nullcontext, None
    if device.type != "cuda":
        raise PipelineError(f"train.amp = {amp!r} needs a CUDA device; set train.amp: auto or off on CPU")
    dtype = torch.bfloat16 if amp == "bf16" else torch.float16
    return (lambda: torch.autocast("cuda", dtype=dtype)), dtype


@dataclass
class Parts:
    """What `fit` builds around the model from the recipe."""

    model: torch.nn.Module  #: the bare model (EMA, checkpoints, evaluation)
    wrapped: torch.nn.Module  #: what the training step calls: the model, DDP-wrapped and/or compiled
    optimizer: torch.optim.Optimizer
    scheduler: object
    mixup: Mixup | None
    criterion: torch.nn.Module
    scaler: NativeScaler | None
    ema: ModelEmaV3 | None
    autocast: Callable


def build_parts(model: torch.nn.Module, recipe: TrainConfig, num_classes: int, steps: int, d: Dist) -> Parts:
    """Optimizer, schedule, mixup, loss, AMP and EMA from the recipe, by timm's factories."""
    model.to(d.device)
    if recipe.channels_last:
        model.to(memory_format=torch.channels_last)
    optimizer = create_optimizer_v2(model, opt=recipe.opt, lr=recipe.lr, weight_decay=recipe.weight_decay,
                                    momentum=recipe.momentum, layer_decay=recipe.layer_decay, eps=recipe.opt_eps)
    scheduler, _ = create_scheduler_v2(
        optimizer, sched=recipe.sched, num_epochs=recipe.epochs, min_lr=recipe.min_lr, warmup_lr=recipe.warmup_lr,
        warmup_epochs=recipe.warmup_epochs, cooldown_epochs=recipe.cooldown_epochs, step_on_epochs=False,
        updates_per_epoch=steps)
    mixup = None
    if recipe.mixup > 0 or recipe.cutmix > 0:
        mixup = Mixup(mixup_alpha=recipe.mixup, cutmix_alpha=recipe.cutmix, prob=recipe.mixup_prob,
                      switch_prob=recipe.mixup_switch_prob, label_smoothing=recipe.smoothing, num_classes=num_classes)
        criterion = SoftTargetCrossEntropy()
    elif recipe.smoothing > 0:
        criterion = LabelSmoothingCrossEntropy(smoothing=recipe.smoothing)
    else:
        criterion = torch.nn.CrossEntropyLoss()
    autocast, dtype = autocast_for(recipe.amp, d.device)
    scaler = NativeScaler() if dtype == torch.float16 else None
    ema = ModelEmaV3(model, decay=recipe.ema_decay) if recipe.ema else None
    wrapped = model
    if d.world_size > 1:
        wrapped = DistributedDataParallel(model, device_ids=[d.local_rank] if d.device.type == "cuda" else None)
    if recipe.compile:
        if d.device.type != "cuda":
            raise PipelineError("train.compile needs a CUDA device; set train.compile: false on CPU")
        wrapped = torch.compile(wrapped)
    return Parts(model, wrapped, optimizer, scheduler, mixup, criterion.to(d.device), scaler, ema, autocast)


def train_one_epoch(parts: Parts, loader, recipe: TrainConfig, epoch: int, d: Dist, progress) -> dict:
    """One pass over the training loader; returns mean loss, accuracy on the hard labels, images/s."""
    parts.wrapped.train()
    steps = len(loader)
    loss_sum = correct = seen = 0.0
    start = time.perf_counter()
    for step, (images, targets) in enumerate(loader):
        images = images.to(d.device, non_blocking=True)
        targets = targets.to(d.device, non_blocking=True)
        hard = targets
        if recipe.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        if parts.mixup is not None:
            images, targets = parts.mixup(images, targets)
        with parts.autocast():
            logits = parts.wrapped(images)
            loss = parts.criterion(logits, targets)
        if not math.isfinite(loss.item()):
            raise PipelineError(
                f"non-finite training loss ({loss.item()}) at epoch {epoch}, step {step}: lower train.lr, set"
                " train.clip_grad (e.g. 1.0), or use train.amp: bf16/off instead of fp16")
        parts.optimizer.zero_grad(set_to_none=True)
        if parts.scaler is not None:
            parts.scaler(loss, parts.optimizer, clip_grad=recipe.clip_grad, parameters=parts.model.parameters())
        else:
            loss.backward()
            if recipe.clip_grad:
                dispatch_clip_grad(parts.model.parameters(), recipe.clip_grad)
            parts.optimizer.step()
        if parts.ema is not None:
            parts.ema.update(parts.model, step=epoch * steps + step)
        parts.scheduler.step_update(num_updates=epoch * steps + step + 1)
        # with mixup on, "accuracy" is against the unmixed label (paper.md section 4 item 12: theirs is n/p)
        correct += (logits.argmax(-1) == hard).sum().item()
        loss_sum += loss.item() * len(hard)
        seen += len(hard)
        progress(1)
    elapsed = time.perf_counter() - start
    loss_sum, correct, seen = all_sum([loss_sum, correct, seen], d)
    return {"train_loss": loss_sum / seen, "train_top1": correct / seen, "images_per_s": seen / elapsed,
            "epoch_time_s": elapsed}


@torch.no_grad()
def evaluate(model: torch.nn.Module, loader, d: Dist, autocast=nullcontext) -> dict:
    """Top-1, top-5 and mean cross-entropy over the whole (sharded, unpadded) evaluation set."""
    model.eval()
    loss_sum = top1 = top5 = n = 0.0
    for images, targets in loader:
        images, targets = images.to(d.device), targets.to(d.device)
        with autocast():
            logits = model(images).float()
        loss_sum += F.cross_entropy(logits, targets, reduction="sum").item()
        best = logits.topk(min(5, logits.shape[-1]), dim=-1).indices
        top1 += (best[:, 0] == targets).sum().item()
        top5 += (best == targets[:, None]).any(-1).sum().item()
        n += len(targets)
    loss_sum, top1, top5, n = all_sum([loss_sum, top1, top5, n], d)
    return {"val_loss": loss_sum / n, "val_top1": top1 / n, "val_top5": top5 / n}


def save_checkpoint(path: Path, parts: Parts, epoch: int, history: list, attempt: str) -> None:
    """Everything a resumed run needs, written atomically (a kill mid-write leaves the previous one)."""
    state = {"epoch": epoch, "history": history, "attempt": attempt, "model": parts.model.state_dict(),
             "optimizer": parts.optimizer.state_dict(), "scheduler": parts.scheduler.state_dict(),
             "scaler": parts.scaler.state_dict() if parts.scaler else None,
             "ema": parts.ema.state_dict() if parts.ema else None}
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def load_checkpoint(path: Path, parts: Parts, attempt: str, d: Dist) -> tuple[int, list]:
    """(first epoch to run, history so far); (0, []) when there is no checkpoint of this attempt."""
    if not path.exists():
        return 0, []
    state = torch.load(path, map_location=d.device, weights_only=False)
    if state.get("attempt") != attempt:
        return 0, []
    parts.model.load_state_dict(state["model"])
    parts.optimizer.load_state_dict(state["optimizer"])
    parts.scheduler.load_state_dict(state["scheduler"])
    if parts.scaler and state["scaler"]:
        parts.scaler.load_state_dict(state["scaler"])
    if parts.ema and state["ema"]:
        parts.ema.load_state_dict(state["ema"])
    return state["epoch"] + 1, state["history"]


class Logger:
    """dvclive on rank 0 (`Live(dir, dvcyaml=False)`; dvc.yaml declares the metrics and plots) + one line per epoch."""

    def __init__(self, live_dir: Path | None, d: Dist, name: str):
        self.d, self.name, self.live = d, name, None
        if d.master and live_dir is not None:
            from dvclive import Live

            self.live = Live(str(live_dir), dvcyaml=False, save_dvc_exp=False, report=None)

    def epoch(self, row: dict, epochs: int) -> None:
        if not self.d.master:
            return
        if self.live is not None:
            for key, value in row.items():
                if key != "epoch":
                    self.live.log_metric(key, value)
            self.live.next_step()
        print(f"[{self.name}] epoch {row['epoch'] + 1}/{epochs}  loss {row['train_loss']:.4f}  "
              f"val top-1 {row['val_top1']:.4f}  top-5 {row['val_top5']:.4f}  lr {row['lr']:.2e}  "
              f"{row['images_per_s']:.0f} img/s  {row['epoch_time_s']:.1f} s", flush=True)

    def close(self) -> None:
        if self.live is not None:
            self.live.end()


def progress_bar(total: int, d: Dist, desc: str):
    """A tqdm bar on rank 0 when stderr is a terminal; a no-op callable otherwise."""
    if not d.master or not sys.stderr.isatty():
        return None, (lambda n: None)
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, leave=False, dynamic_ncols=True)
    return bar, bar.update


def fit(model, loaders, recipe: TrainConfig, *, seed: int, d: Dist, checkpoint: Path, attempt: str,
        live_dir: Path | None = None, name: str = "run") -> dict:
    """Train `model` on `loaders` with `recipe`; resume from `checkpoint` if it belongs to the same `attempt`.

    `attempt` identifies what produced the checkpoint (the caller's digest of the run's config and code,
    `pipeline.run`): a checkpoint of another attempt is ignored and overwritten. The caller removes the
    checkpoint once the run's outputs are written, so a finished run is never "resumed".

    Returns a summary: final and best top-1/top-5, losses, epochs, wall time, images/s and the per-epoch history.
    """
    steps = len(loaders.train)
    if steps == 0:
        raise PipelineError(f"[{name}] the training set gives no full batch of {recipe.batch_size}; lower"
                            " train.batch_size or raise data.train_subset")
    parts = build_parts(model, recipe, loaders.num_classes, steps, d)
    first, history = load_checkpoint(checkpoint, parts, attempt, d)
    if first and d.master:
        print(f"[{name}] resuming from {checkpoint} at epoch {first + 1}", flush=True)
    logger = Logger(live_dir, d, name)
    for row in history:  # a resumed run's dvclive logs start over in a fresh out dir: replay the past epochs
        logger.epoch(row, recipe.epochs)
    wall = time.perf_counter()
    for epoch in range(first, recipe.epochs):
        reseed(seed, epoch)
        loaders.train.sampler.set_epoch(epoch)
        bar, tick = progress_bar(steps, d, f"epoch {epoch + 1}/{recipe.epochs}")
        row = {"epoch": epoch, "lr": parts.optimizer.param_groups[0]["lr"]}
        row |= train_one_epoch(parts, loaders.train, recipe, epoch, d, tick)
        if bar is not None:
            bar.close()
        parts.scheduler.step(epoch + 1)
        row |= evaluate(parts.ema.module if parts.ema else parts.model, loaders.val, d, parts.autocast)
        history.append(row)
        logger.epoch(row, recipe.epochs)
        if d.master:
            save_checkpoint(checkpoint, parts, epoch, history, attempt)
        if d.world_size > 1:
            dist.barrier()
    logger.close()
    return summarize(history, time.perf_counter() - wall)


def summarize(history: list[dict], wall_s: float) -> dict:
    """The run's headline numbers from its per-epoch history."""
    last = history[-1]
    best = max(history, key=lambda r: r["val_top1"])
    return {
        "top1": last["val_top1"], "top5": last["val_top5"], "val_loss": last["val_loss"],
        "train_loss": last["train_loss"], "train_top1": last["train_top1"],
        "best_top1": best["val_top1"], "best_top5": max(r["val_top5"] for r in history),
        "best_epoch": best["epoch"] + 1, "epochs": len(history),
        "images_per_s": sum(r["images_per_s"] for r in history) / len(history),
        "wall_time_s": wall_s, "history": history,
    }

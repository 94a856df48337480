"""The training engine: `fit(model, loaders, recipe, ...)` trains and evaluates one model, one process per device,
DeiT's split on timm's blocks (`create_optimizer_v2`, `create_scheduler_v2`, `Mixup`, `ModelEmaV3`). Launch
lines (`pipeline.cell` builds the torchrun ones):

    python -m pipeline train fashion_mnist vit impulse 0                  # one process
    python -m pipeline --set resources.nproc=8 train cifar10 vit impulse 0   # torchrun --standalone, 8 processes
    torchrun --nnodes=2 --nproc_per_node=8 --rdzv_backend=c10d --rdzv_endpoint=node0:29400 \
        --rdzv_id=job42 -m pipeline.cell pipeline.training.train configs/train/imagenet-vit-impulse-0.json  # each node

Each epoch reseeds every random source from (seed, epoch, rank) and ends with a checkpoint in undeclared scratch
(a `persist` DVC out would leave the run-cache), so a resumed run ends with an uninterrupted one's metrics. Only
the recipe, not the resources, enters a checkpoint's attempt key.
"""

from __future__ import annotations

import functools
import math
import os
import random
import resource
import shutil
import signal
import sys
import threading
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
from timm.utils import ModelEmaV3, NativeScaler, dispatch_clip_grad, distribute_bn
from torch.nn.parallel import DistributedDataParallel

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
    if use_cuda:
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
        cuda_speedups()
        os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(threads))  # cells side by side share the host
    else:
        dev = torch.device("cpu")
    torch.set_num_threads(threads)
    if world > 1 and not dist.is_initialized():
        # device_id binds the NCCL communicator to this GPU eagerly (no guess from the current device)
        dist.init_process_group("nccl" if use_cuda else "gloo", device_id=dev if use_cuda else None)
    return Dist(rank, world, local_rank, dev)


def teardown_distributed() -> None:
    """Leave the process group (torch warns about, and NCCL may hang on, a process that exits without it)."""
    if dist.is_initialized():
        dist.destroy_process_group()


def cuda_speedups() -> None:
    """TF32 matmuls and convolutions, cuDNN autotuning: what timm's and DeiT's train scripts set on CUDA."""
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True


#: reseed's seed for (seed s, epoch e, rank r) is s * SEED_STRIDE + e + r * RANK_STRIDE: distinct for every
#: (s, e, r) with e < SEED_STRIDE and s < SEED_STRIDE; rank 0's is the single-process run's.
SEED_STRIDE = 1_000_003
RANK_STRIDE = SEED_STRIDE**2


def reseed(seed: int, epoch: int, rank: int = 0) -> None:
    """Seed every global RNG (torch, numpy for Mixup, Python's for timm's transforms) from (seed, epoch, rank) only,
    so an epoch's randomness does not depend on the past; each rank draws its own augmentations, as timm's
    `random_seed(seed, rank)`."""
    value = seed * SEED_STRIDE + epoch + rank * RANK_STRIDE
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


def native_bf16(device: torch.device) -> bool:
    """Whether the GPU computes bf16 natively (compute capability >= 8.0); inductor does not compile it below."""
    return torch.cuda.get_device_capability(device) >= (8, 0)


def amp_dtype(amp: str, device: torch.device) -> tuple[torch.dtype | None, str]:
    """(autocast dtype or None, a note to print or '') for `train.amp` on this device: 'auto' is bf16 on a GPU with
    native bf16, fp16 with a gradient scaler on an older one, off on CPU; 'bf16' also runs on CPU; 'fp16' needs CUDA."""
    if amp == "off" or (amp == "auto" and device.type != "cuda"):
        return None, ""
    if device.type != "cuda":
        if amp == "fp16":
            raise PipelineError("train.amp = 'fp16' needs a CUDA device (its gradient scaler does); set"
                                " train.amp: bf16, auto or off on CPU")
        return torch.bfloat16, ""
    if amp == "fp16":
        return torch.float16, ""
    if native_bf16(device):
        return torch.bfloat16, ""
    if amp == "auto":
        return torch.float16, ""
    major, minor = torch.cuda.get_device_capability(device)
    return torch.float16, (f"train.amp = 'bf16': {torch.cuda.get_device_name(device)} (compute capability"
                           f" {major}.{minor}) has no native bf16; training in fp16 with a gradient scaler instead"
                           " (set train.amp: auto or fp16 to silence this)")


def autocast_context(dtype: torch.dtype | None, device: torch.device) -> Callable:
    if dtype is None:
        return nullcontext
    return lambda: torch.autocast(device.type, dtype=dtype)


#: The compilers inductor needs: C++ for its CPU kernels, C for Triton's GPU launcher (Triton takes $CC, else gcc,
#: else clang).
COMPILERS = {"cpu": ("CXX", ("g++", "c++", "clang++"), "a C++ compiler", "g++"),
             "cuda": ("CC", ("gcc", "clang"), "a C compiler (Triton builds its GPU launcher with one)", "gcc")}


def check_compile(device: torch.device) -> None:
    """Stop before the first step, with one message naming resources.compile, where torch.compile cannot compile on
    this device (`compile_probe`), rather than with a traceback from inside the first step."""
    variable, names, what, package = COMPILERS.get(device.type, COMPILERS["cpu"])
    if not any(c and shutil.which(c) for c in (os.environ.get(variable, ""), *names)):
        raise PipelineError(f"resources.compile on {device.type} needs {what} for inductor (none of ${variable},"
                            f" {', '.join(names)} found); install one (apt-get install {package}) or set"
                            " resources.compile: false")
    failure = compile_probe(str(device))
    if failure:
        raise PipelineError(f"resources.compile: torch.compile cannot compile on {device} here ({failure}); fix the"
                            " toolchain it names, or set resources.compile: false")


@functools.cache
def compile_probe(device: str) -> str:
    """'' when torch.compile (inductor) compiles and runs a tiny function on `device`, else what failed."""
    def tiny(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x) * 2 + 1

    try:
        x = torch.linspace(-1, 1, 16, device=device)
        if not torch.allclose(torch.compile(tiny, fullgraph=True)(x), tiny(x), atol=1e-5):
            return "a compiled function computed another result than eager"
    except Exception as exc:  # any failure of the toolchain is the user's to fix: say what it was
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:400]
    return ""


@dataclass
class Parts:

    model: torch.nn.Module  #: the bare model (EMA, checkpoints, evaluation)
    wrapped: torch.nn.Module  #: what the training step calls: the model, DDP-wrapped and/or compiled
    optimizer: torch.optim.Optimizer
    scheduler: object
    mixup: Mixup | None
    criterion: torch.nn.Module
    scaler: NativeScaler | None
    ema: ModelEmaV3 | None
    autocast: Callable
    precision: str = "float32"  #: what `train.amp` resolved to on this device (a checkpoint keeps it)


#: timm's optimizer names whose torch class takes `fused=True` (`resources.fused_optimizer`)
FUSED_OPTIMIZERS = ("adam", "adamw")


def fused_kwargs(opt: str, resources) -> dict:
    """{'fused': True} for `resources.fused_optimizer`; a PipelineError where the optimizer has no fused kernel."""
    if not getattr(resources, "fused_optimizer", False):
        return {}
    if opt.lower() not in FUSED_OPTIMIZERS:
        raise PipelineError(f"resources.fused_optimizer: train.opt {opt!r} has no fused kernel (torch's Adam and AdamW"
                            " do); set resources.fused_optimizer: false")
    return {"fused": True}


def create_schedule(optimizer: torch.optim.Optimizer, recipe, steps: int):
    """timm's schedule for the recipe. `train.epochs` counts the cooldown, as timm's train.py does with `--epochs 300
    --cooldown-epochs 10`: timm gets `epochs - cooldown_epochs`, then `cooldown_epochs` run at min_lr. Stepped per
    epoch unless `sched_on_updates` (timm's flag of that name): the engine calls `step_update` after each update and
    `step` after each epoch, as timm's train.py does, and timm's scheduler acts on the one its mode names."""
    scheduler, _ = create_scheduler_v2(
        optimizer, sched=recipe.sched, num_epochs=recipe.epochs - recipe.cooldown_epochs, min_lr=recipe.min_lr,
        warmup_lr=recipe.warmup_lr, warmup_epochs=recipe.warmup_epochs, cooldown_epochs=recipe.cooldown_epochs,
        step_on_epochs=not recipe.sched_on_updates, updates_per_epoch=steps)
    return scheduler


def build_parts(model: torch.nn.Module, recipe, num_classes: int, steps: int, d: Dist,
                resources) -> Parts:
    """Optimizer, schedule, mixup, loss, AMP and EMA from the recipe, by timm's factories; compile, DDP and memory
    format from the resources."""
    model.to(d.device)
    if resources.channels_last:
        model.to(memory_format=torch.channels_last)
    optimizer = create_optimizer_v2(model, opt=recipe.opt, lr=recipe.lr, weight_decay=recipe.weight_decay,
                                    momentum=recipe.momentum, layer_decay=recipe.layer_decay, eps=recipe.opt_eps,
                                    **fused_kwargs(recipe.opt, resources))
    scheduler = create_schedule(optimizer, recipe, steps)
    mixup = None
    if recipe.mixup > 0 or recipe.cutmix > 0:
        mixup = Mixup(mixup_alpha=recipe.mixup, cutmix_alpha=recipe.cutmix, prob=recipe.mixup_prob,
                      switch_prob=recipe.mixup_switch_prob, label_smoothing=recipe.smoothing, num_classes=num_classes)
        criterion = SoftTargetCrossEntropy()
    elif recipe.smoothing > 0:
        criterion = LabelSmoothingCrossEntropy(smoothing=recipe.smoothing)
    else:
        criterion = torch.nn.CrossEntropyLoss()
    dtype, note = amp_dtype(recipe.amp, d.device)
    if note and d.master:
        print(note, flush=True)
    autocast = autocast_context(dtype, d.device)
    scaler = NativeScaler() if dtype == torch.float16 else None
    ema = ModelEmaV3(model, decay=recipe.ema_decay) if recipe.ema else None
    wrapped = model
    if d.world_size > 1:
        wrapped = DistributedDataParallel(model, device_ids=[d.local_rank] if d.device.type == "cuda" else None)
    if resources.compile:  # compile the DDP wrapper (DDPOptimizer splits the graph at its buckets), not the reverse
        if resources.compile_cache:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(resources.compile_cache).resolve())
        check_compile(d.device)
        wrapped = torch.compile(wrapped)
    return Parts(model, wrapped, optimizer, scheduler, mixup, criterion.to(d.device), scaler, ema, autocast,
                 str(dtype).removeprefix("torch.") if dtype else "float32")


def train_one_epoch(parts: Parts, loader, recipe, epoch: int, d: Dist, progress,
                    resources, erase: Callable | None = None) -> dict:
    """One pass over the training loader; returns mean loss, hard-label accuracy, images/s and `data_wait`, the
    share of the epoch the host spent getting batches. Losses and correct counts are read back every
    `resources.sync_every` steps and summed in float64 in step order. `erase` (the loaders' `erase`) erases each
    batch after Mixup/CutMix, where timm's PrefetchLoader erases it."""
    parts.wrapped.train()
    steps = len(loader)
    window: list[tuple[torch.Tensor, torch.Tensor, int]] = []  # (loss, correct, n) of the steps since the last sync
    totals = [0.0, 0.0, 0.0]  # loss sum, correct, seen
    start = time.perf_counter()
    waited, batches = 0.0, iter(loader)
    for step in range(steps):
        ready = time.perf_counter()
        images, targets = next(batches)
        waited += time.perf_counter() - ready
        images = images.to(d.device, non_blocking=True)
        targets = targets.to(d.device, non_blocking=True)
        hard = targets
        if resources.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        if parts.mixup is not None:
            targets = mix(parts.mixup, images, targets, rank_batch(recipe, d.world_size))
        if erase is not None:
            images = erase(images)
        with parts.autocast():
            logits = parts.wrapped(images)
            loss = parts.criterion(logits, targets)
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
        # with mixup on, "accuracy" is against the unmixed label (how [NeurIPS] measured its own is n/p)
        window.append((loss.detach(), (logits.detach().argmax(-1) == hard).sum(), len(hard)))
        if len(window) == resources.sync_every or step == steps - 1:
            read_back(window, totals, epoch, step + 1 - len(window))
            window.clear()
        progress(1)
    elapsed = time.perf_counter() - start
    loss_sum, correct, seen = all_sum(totals, d)
    return {"train_loss": loss_sum / seen, "train_top1": correct / seen, "images_per_s": seen / elapsed,
            "epoch_time_s": elapsed, "data_wait": waited / elapsed}


def rank_batch(recipe, ranks: int) -> int:
    """Images per data-parallel rank in a step: the batch over `train.sampler_ranks` emulated ranks, or over the
    `ranks` processes when that is 1."""
    return recipe.batch_size // max(recipe.sampler_ranks, ranks)


def mix(mixup: Mixup, images: torch.Tensor, targets: torch.Tensor, chunk: int) -> torch.Tensor:
    """timm's Mixup/CutMix on each `rank_batch` share of the batch in turn, one draw per share, as each GPU of a
    multi-GPU run draws its own. Mixes `images` in place; returns the targets."""
    if chunk >= len(images):
        return mixup(images, targets)[1]
    return torch.cat([mixup(images[i:i + chunk], targets[i:i + chunk])[1] for i in range(0, len(images), chunk)])


def read_back(window: list, totals: list[float], epoch: int, first_step: int) -> None:
    """Copy a window of steps' (loss, correct, n) to the host in one transfer; stop at the first non-finite loss
    (found up to `resources.sync_every` steps late, before the epoch's checkpoint)."""
    losses = torch.stack([w[0] for w in window]).double()
    corrects = torch.stack([w[1] for w in window]).double()
    losses, corrects = torch.stack([losses, corrects]).tolist()  # the one transfer (a host sync on a GPU)
    for offset, (loss, correct, (_, _, n)) in enumerate(zip(losses, corrects, window)):
        if not math.isfinite(loss):
            raise PipelineError(
                f"non-finite training loss ({loss}) at epoch {epoch}, step {first_step + offset}: lower train.lr,"
                " set train.clip_grad (e.g. 1.0), or use train.amp: bf16/off instead of fp16")
        totals[0] += loss * n
        totals[1] += correct
        totals[2] += n


@torch.no_grad()
def evaluate(model: torch.nn.Module, loader, d: Dist, autocast=nullcontext) -> dict:
    """Top-1, top-5 and mean cross-entropy over the whole (sharded, unpadded) evaluation set."""
    model.eval()
    sums = torch.zeros(4, dtype=torch.float64, device=d.device)  # loss, top-1, top-5, images
    seen = 0  # counted on the host: a tensor made from it per batch would be a host-to-device copy per batch
    for images, targets in loader:
        images, targets = images.to(d.device, non_blocking=True), targets.to(d.device, non_blocking=True)
        with autocast():
            logits = model(images).float()
        best = logits.topk(min(5, logits.shape[-1]), dim=-1).indices
        sums[:3] += torch.stack([F.cross_entropy(logits, targets, reduction="sum").double(),
                                 (best[:, 0] == targets).sum().double(),
                                 (best == targets[:, None]).any(-1).sum().double()])
        seen += len(targets)
    sums[3] = seen
    if d.world_size > 1:
        dist.all_reduce(sums)
    loss_sum, top1, top5, n = sums.tolist()
    return {"val_loss": loss_sum / n, "val_top1": top1 / n, "val_top5": top5 / n}


@torch.no_grad()
def score(model: torch.nn.Module, loader, d: Dist, autocast=nullcontext) -> np.ndarray:
    """Per-image top-1 correctness over the whole evaluation set, as booleans in the dataset's order, on every rank
    (the intervals of `pipeline.analysis.stats` resample the test images through it)."""
    model.eval()
    n = len(loader.dataset)
    hits, seen = (torch.zeros(n, dtype=torch.int32, device=d.device) for _ in range(2))
    order, start = torch.as_tensor(list(loader.sampler), dtype=torch.int64, device=d.device), 0
    for images, targets in loader:
        images, targets = images.to(d.device, non_blocking=True), targets.to(d.device, non_blocking=True)
        with autocast():
            logits = model(images).float()
        index = order[start:start + len(targets)]
        hits[index], seen[index], start = (logits.argmax(-1) == targets).int(), 1, start + len(targets)
    if d.world_size > 1:
        dist.all_reduce(hits)
        dist.all_reduce(seen)
    if not bool((seen == 1).all()):
        raise RuntimeError(f"scoring counted the {n} test images {seen.min().item()}-{seen.max().item()} times;"
                           " the eval sampler must give every image to exactly one rank")
    return hits.bool().cpu().numpy()


def computed_by(parts: Parts, loaders) -> dict:
    """How a run computes beyond its configuration and code: the precision `train.amp` resolved to and the
    augmentation path (`resources.data_on_device`); both change the numbers, so a run never resumes across them."""
    return {"amp_dtype": parts.precision, "data_path": getattr(loaders, "backend", "")}


def save_checkpoint(path: Path, parts: Parts, epoch: int, history: list, attempt: str, computed: dict) -> None:
    """Everything a resumed run needs, written atomically. Weights come from the bare model, without DDP's or
    compile's prefixes, so a compiled run resumes uncompiled and back."""
    state = {"epoch": epoch, "history": history, "attempt": attempt, "computed": computed,
             "model": parts.model.state_dict(),
             "optimizer": parts.optimizer.state_dict(), "scheduler": parts.scheduler.state_dict(),
             "scaler": parts.scaler.state_dict() if parts.scaler else None,
             "ema": parts.ema.state_dict() if parts.ema else None}
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def read_checkpoint(path: Path, attempt: str) -> dict | None:
    if not path.exists():
        return None
    state = torch.load(path, map_location="cpu", weights_only=False)
    return state if state.get("attempt") == attempt else None


def agree_on_checkpoint(state: dict | None, d: Dist, name: str = "run") -> dict | None:
    """Rank 0's checkpoint for every rank: where the ranks' disagree (nodes without a shared filesystem), rank 0
    sends its own, so no rank restarts while another resumes."""
    if d.world_size == 1:
        return state
    epochs: list = [None] * d.world_size
    dist.all_gather_object(epochs, -1 if state is None else state["epoch"])
    if all(e == epochs[0] for e in epochs):
        return state
    if d.master:
        print(f"[{name}] the ranks' checkpoints disagree (last epochs {epochs}, -1 = none); every rank starts"
              " from rank 0's", flush=True)
    payload = [state if d.master else None]
    dist.broadcast_object_list(payload, src=0)
    return payload[0]


def load_checkpoint(path: Path, parts: Parts, attempt: str, d: Dist, name: str = "run",
                    computed: dict | None = None) -> tuple[int, list]:
    """(first epoch to run, history so far); (0, []) when rank 0 has no checkpoint of this attempt. A checkpoint
    computed otherwise (`computed_by`: another precision or augmentation path, e.g. a requeue onto another GPU kind
    under `train.amp: auto`) stops the run rather than mix the two in one result."""
    state = agree_on_checkpoint(read_checkpoint(path, attempt), d, name)
    if state is None:
        return 0, []
    before = state.get("computed")
    if computed is not None and before is not None and before != computed:
        change = ", ".join(f"{k} {before.get(k)} -> {v}" for k, v in computed.items() if before.get(k) != v)
        raise PipelineError(f"[{name}] {path} was trained with {before}; resuming here would change its {change}"
                            " mid-run. Pin train.amp and resources.data_on_device to the checkpoint's (a GPU"
                            " profile sets both), run it where they resolve alike, or delete the checkpoint to"
                            " start the run over")
    parts.model.load_state_dict(state["model"])
    parts.optimizer.load_state_dict(state["optimizer"])
    parts.scheduler.load_state_dict(state["scheduler"])
    if parts.scaler and state["scaler"]:
        parts.scaler.load_state_dict(state["scaler"])
    if parts.ema and state["ema"]:
        parts.ema.load_state_dict(state["ema"])
    return state["epoch"] + 1, state["history"]


def sync_batchnorm_stats(parts: Parts, d: Dist) -> None:
    """Average BatchNorm running statistics (and the EMA's) over the ranks before evaluating, as timm's
    `distribute_bn(reduce)`: DDP synchronises gradients, not buffers."""
    if d.world_size == 1:
        return
    for module in (parts.model, parts.ema.module if parts.ema else None):
        if module is not None and any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in module.modules()):
            distribute_bn(module, d.world_size, reduce=True)


def peak_memory_gib(device: torch.device) -> float:
    """The most memory this process held since the last call: the GPU allocator's peak (then reset), or on CPU the
    peak resident set."""
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        return peak / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def duration(seconds: float) -> str:
    if seconds < 100:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 6000 else f"{seconds / 3600:.1f} h"


class Logger:
    """dvclive on rank 0 (`Live(dir, dvcyaml=False)`; dvc.yaml declares metrics and plots) and one line per epoch.
    dvclive is optional: without it metrics.json still holds the per-epoch history."""

    def __init__(self, live_dir: Path | None, d: Dist, name: str):
        self.d, self.name, self.live = d, name, None
        if d.master and live_dir is not None:
            try:
                from dvclive import Live
            except ImportError:
                print(f"[{name}] dvclive is not installed: no {live_dir}/ logs (metrics.json holds the per-epoch"
                      " history)", flush=True)
                return
            self.live = Live(str(live_dir), dvcyaml=False, save_dvc_exp=False, report=None)

    def epoch(self, row: dict, epochs: int, timing: dict | None = None) -> None:
        """Log `row` to dvclive and print the epoch line; `timing` (live runs): ETA, data_wait, peak memory."""
        if not self.d.master:
            return
        if self.live is not None:
            for key, value in row.items():
                if key != "epoch":
                    self.live.log_metric(key, value)
            self.live.next_step()
        val = (f"val top-1 {row['val_top1']:.4f}  top-5 {row['val_top5']:.4f}" if "val_top1" in row
               else "(no evaluation)")
        line = (f"[{self.name}] epoch {row['epoch'] + 1}/{epochs}  loss {row['train_loss']:.4f}  {val}  "
                f"lr {row['lr']:.2e}  {row['images_per_s']:.0f} img/s  {row['epoch_time_s']:.1f} s")
        if timing:
            line += (f"  {timing['data_label']} {timing['data_wait']:.0%}  peak mem {timing['peak_memory_gib']:.2f} GiB"
                     f"  ETA {duration(timing['eta_s'])}")
        print(line, flush=True)

    def close(self) -> None:
        if self.live is not None:
            self.live.end()


class CheckpointPolicy:
    """When an epoch's end writes the resume checkpoint: every `minutes` of training (0: every epoch), and after the
    epoch in which this process got SIGUSR1 (write, go on) or SIGTERM (write, stop: a time limit or preemption).
    Ranks agree on the signals; rank 0 writes. A context: the handlers are installed only inside it."""

    SIGNALS = ("SIGUSR1", "SIGTERM")

    def __init__(self, minutes: float, d: Dist):
        self.minutes, self.d, self.last = minutes, d, time.monotonic()
        self.got: dict[str, bool] = dict.fromkeys(self.SIGNALS, False)
        self.previous: dict = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for name in self.SIGNALS:
                self.previous[name] = signal.signal(getattr(signal, name), self.handle)
        return self

    def __exit__(self, *exc) -> None:
        for name, handler in self.previous.items():
            signal.signal(getattr(signal, name), handler)

    def handle(self, signum, frame) -> None:
        self.got[signal.Signals(signum).name] = True

    def decide(self) -> tuple[bool, bool]:
        """(write a checkpoint now, stop after it), at an epoch's end."""
        asked = all_sum([float(self.got[name]) for name in self.SIGNALS], self.d)
        usr1, term = (value > 0 for value in asked)
        due = self.minutes == 0 or time.monotonic() - self.last >= 60 * self.minutes
        if due or usr1 or term:
            self.last, self.got = time.monotonic(), dict.fromkeys(self.SIGNALS, False)
        return due or usr1 or term, term


def evaluates(epoch: int, recipe) -> bool:
    """Whether epoch `epoch` (0-based) is evaluated: every `train.eval_every`-th, and always the last."""
    return (epoch + 1) % recipe.eval_every == 0 or epoch == recipe.epochs - 1


def progress_bar(total: int, d: Dist, desc: str):
    if not d.master or not sys.stderr.isatty():
        return None, (lambda n: None)
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, leave=False, dynamic_ncols=True)
    return bar, bar.update


def fit(model, loaders, recipe, *, seed: int, d: Dist, checkpoint: Path, attempt: str,
        live_dir: Path | None = None, name: str = "run", resources) -> dict:
    """Train `model` on `loaders` with `recipe`; resume from `checkpoint` if it belongs to the same `attempt` (the
    caller's digest of what produced it; `resources` are not part of it). Returns a summary: final and best top-1/5,
    losses, epochs, wall time, images/s, the per-epoch history and, with `loaders.test`, per-image `test_correct`
    (`holdout_correct` with `loaders.holdout`)."""
    steps = len(loaders.train)
    if steps == 0:
        raise PipelineError(f"[{name}] the training set gives no full batch of {recipe.batch_size}; lower"
                            " train.batch_size or raise data.train_subset")
    parts = build_parts(model, recipe, loaders.num_classes, steps, d, resources)
    first, history = load_checkpoint(checkpoint, parts, attempt, d, name, computed_by(parts, loaders))
    if first and d.master:
        print(f"[{name}] resuming from {checkpoint} at epoch {first + 1}", flush=True)
    logger = Logger(live_dir, d, name)
    for row in history:  # a resumed run's dvclive logs start over in a fresh out dir: replay the past epochs
        logger.epoch(row, recipe.epochs)
    wall = time.perf_counter()
    with CheckpointPolicy(resources.checkpoint_minutes, d) as policy:
        history = train_epochs(parts, loaders, recipe, seed, d, checkpoint, attempt, name, resources, first, history,
                               logger, policy, wall)
    logger.close()
    summary = summarize(history, time.perf_counter() - wall)
    if getattr(loaders, "test", None) is not None:
        start = time.perf_counter()
        correct = score(parts.ema.module if parts.ema else parts.model, loaders.test, d, parts.autocast)
        summary |= {"test_top1": float(correct.mean()), "test_size": len(correct), "test_correct": correct,
                    "test_time_s": time.perf_counter() - start}
    if getattr(loaders, "holdout", None) is not None:  # the held-out pool of the train split (data.holdout)
        start = time.perf_counter()
        correct = score(parts.ema.module if parts.ema else parts.model, loaders.holdout, d, parts.autocast)
        summary |= {"holdout_top1": float(correct.mean()), "holdout_size": len(correct), "holdout_correct": correct,
                    "holdout_index": np.asarray(loaders.holdout.dataset.indices, dtype=np.int32),
                    "holdout_time_s": time.perf_counter() - start}
    return summary


def train_epochs(parts: Parts, loaders, recipe, seed: int, d: Dist, checkpoint: Path, attempt: str,
                 name: str, resources, first: int, history: list, logger: Logger,
                 policy: CheckpointPolicy, wall: float) -> list:
    """Epochs `first` .. the last: train, evaluate (`evaluates`), log, checkpoint as `policy` says; the history."""
    steps = len(loaders.train)
    for epoch in range(first, recipe.epochs):
        reseed(seed, epoch, d.rank)
        loaders.train.sampler.set_epoch(epoch)
        bar, tick = progress_bar(steps, d, f"epoch {epoch + 1}/{recipe.epochs}")
        row = {"epoch": epoch, "lr": parts.optimizer.param_groups[0]["lr"]}
        row |= train_one_epoch(parts, loaders.train, recipe, epoch, d, tick, resources, getattr(loaders, "erase", None))
        if bar is not None:
            bar.close()
        parts.scheduler.step(epoch + 1)
        timing = {"data_wait": row.pop("data_wait"), "peak_memory_gib": peak_memory_gib(d.device),
                  "data_label": "batch build (host)" if getattr(loaders, "backend", "") == "device" else "data wait"}
        if evaluates(epoch, recipe):
            sync_batchnorm_stats(parts, d)
            row |= evaluate(parts.ema.module if parts.ema else parts.model, loaders.val, d, parts.autocast)
        history.append(row)
        timing["eta_s"] = (time.perf_counter() - wall) / (epoch + 1 - first) * (recipe.epochs - epoch - 1)
        logger.epoch(row, recipe.epochs, timing)
        write, stop = policy.decide()
        if write and d.master:
            save_checkpoint(checkpoint, parts, epoch, history, attempt, computed_by(parts, loaders))
        if d.world_size > 1:
            dist.barrier()
        if stop:
            raise PipelineError(f"[{name}] stopped by SIGTERM after epoch {epoch + 1}; its checkpoint {checkpoint}"
                                " holds it: run the same command again to resume")
    return history


def summarize(history: list[dict], wall_s: float) -> dict:
    last, evaluated = history[-1], [r for r in history if "val_top1" in r]
    best = max(evaluated, key=lambda r: r["val_top1"])
    return {
        "top1": last["val_top1"], "top5": last["val_top5"], "val_loss": last["val_loss"],
        "train_loss": last["train_loss"], "train_top1": last["train_top1"],
        "best_top1": best["val_top1"], "best_top5": max(r["val_top5"] for r in evaluated),
        "best_epoch": best["epoch"] + 1, "epochs": len(history),
        "images_per_s": sum(r["images_per_s"] for r in history) / len(history),
        "wall_time_s": wall_s, "history": history,
    }

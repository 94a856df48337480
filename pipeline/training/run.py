"""One training cell, the skeleton every training stage shares: build -> fit -> write outs -> clean up.

`execute` (one rank under torchrun) sets up the device and process group, builds the loaders and the model,
trains with the engine (checkpointing to scratch/<results path>/last.pt, not a DVC out), writes the results
folder on rank 0 all or nothing (metrics.json, test_correct.npz, with `data.holdout` holdout_correct.npz,
config.json, model.pt, live/) and removes the checkpoint. `pipeline.cell` starts it.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from timm.data.random_erasing import RandomErasing
from torch import nn

from pipeline.data.load import device as device_data
from pipeline.data.load.loaders import Loaders, build_loaders
from pipeline.data.load.transforms import Augment
from pipeline.data.meta import DatasetMeta, dataset_meta
from pipeline.errors import PipelineError
from pipeline.outputs import HOLDOUT_CORRECT, TEST_CORRECT, folder_aside
from pipeline.training.engine import Dist, amp_dtype, fit, setup_distributed, teardown_distributed

RESULTS = Path("results")
SCRATCH = Path("scratch")
#: Libraries whose version is part of what produced a result (and of a checkpoint's attempt key).
LIBRARIES = ("torch", "torchvision", "timm", "numpy")


@dataclass
class Run:
    """One training cell: its resolved configuration (configs/<stage>/<cell>.json), `build`, its initialised model for
    the dataset's facts, the (image side, channels) it takes, and the metrics.json fields known before (`facts`) and
    measured after training (`measure`)."""

    config: dict
    build: Callable[[DatasetMeta, torch.device], nn.Module]
    input_size: Callable[[DatasetMeta], tuple[int, int]]
    facts: Callable[[nn.Module], dict] = field(default=lambda model: {})
    measure: Callable[[nn.Module, Loaders], dict] = field(default=lambda model, loaders: {})
    #: what the cell read besides its configuration (e.g. a teacher's weights digest): part of its checkpoint key
    inputs: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.config["cell"]

    @property
    def dataset(self) -> str:
        return self.config["dataset"]

    @property
    def seed(self) -> int:
        return self.config["seed"]

    @property
    def recipe(self) -> SimpleNamespace:
        return SimpleNamespace(**self.config["train"])

    @property
    def out(self) -> Path:
        return Path(self.config["results"])

    @property
    def checkpoint(self) -> Path:
        return SCRATCH.joinpath(self.out.relative_to(RESULTS), "last.pt")


def build_run_loaders(data: dict, root: str | Path, dataset: str, img_size: int, in_chans: int, seed: int, recipe,
                      d: Dist, resources) -> Loaders:
    """The dataset's train/val loaders for one process of a run (the global batch split over processes): DataLoaders,
    or device-resident batches (`pipeline.data.load.device`) under `resources.data_on_device`."""
    if recipe.batch_size % d.world_size:
        raise PipelineError(f"train.batch_size = {recipe.batch_size} is not divisible by the {d.world_size}"
                            " processes; make it a multiple of resources.nproc x resources.nnodes")
    after = erasing_after_mix(recipe)
    augment = Augment.from_train(recipe, **({"reprob": 0.0} if after else {}))
    built = build_loaders(dataset, root, stats=(tuple(data["mean"]), tuple(data["std"])), img_size=img_size,
                          in_chans=in_chans, batch_size=recipe.batch_size // d.world_size, seed=seed,
                          augment=augment, rank=d.rank, world_size=d.world_size, workers=resources.workers,
                          train_subset=data["train_subset"], val_subset=data["val_subset"],
                          pin_memory=d.device.type == "cuda", sampler_ranks=recipe.sampler_ranks,
                          holdout=data.get("holdout", 0))
    if after:  # timm's own, on the whole batch (the device path's equal in law: device_data.Erasing)
        built.erase = RandomErasing(recipe.reprob, mode=recipe.remode, device=d.device.type)
    if device_data.choose(resources.data_on_device, built, augment, d.device):
        return device_data.device_loaders(built, img_size=img_size, augment=augment, device=d.device)
    return built


def token_grid(model: nn.Module) -> str | None:
    """The model's first token grid, e.g. '7x7' (timm's patch embedding of a ViT, Swin or Mixer); None for a model
    without one. A verdict's regime names it: what a position embedding can do depends on it."""
    embed = getattr(model, "patch_embed", None) or getattr(model, "stem", None)  # timm's Mixer calls it stem
    grid = getattr(embed, "grid_size", None)
    return "x".join(str(int(g)) for g in grid) if grid else None


def erasing_after_mix(recipe) -> bool:
    """Whether the run erases the mixed batch (`train.erase_after_mix` with random erasing and Mixup/CutMix on), as
    timm's PrefetchLoader erases after FastCollateMixup in the official GPU runs, instead of each image in its
    transform."""
    mixes = recipe.mixup > 0 or recipe.cutmix > 0
    return bool(recipe.reprob > 0 and mixes and getattr(recipe, "erase_after_mix", True))


def versions() -> dict[str, str]:
    import importlib

    return {lib: importlib.import_module(lib).__version__ for lib in LIBRARIES}


def software() -> dict:
    """Git revision, Python and library versions and hardware: recorded beside every result."""
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        rev = "unknown"
    return {"git_rev": rev, "python": platform.python_version(), **versions(),
            "hardware": torch.cuda.get_device_name(0) if torch.cuda.is_available() else platform.processor() or "cpu",
            "cpu_count": os.cpu_count()}


def write_outputs(out: Path, summary: dict, config: dict, model: nn.Module, record: dict) -> None:
    """Write the run's outs into a temporary sibling, then move it into place (never a half-written out)."""
    live = out / "live"
    with folder_aside(out) as tmp:
        if live.exists():
            shutil.move(str(live), tmp / "live")
        torch.save(model.state_dict(), tmp / "model.pt")
        (tmp / "config.json").write_text(json.dumps(config, indent=2, default=str) + "\n")
        if summary.get("test_correct") is not None:
            correct = summary["test_correct"]
            np.savez_compressed(tmp / TEST_CORRECT, index=np.arange(len(correct), dtype=np.int32),
                                correct=correct)
        if summary.get("holdout_correct") is not None:
            np.savez_compressed(tmp / HOLDOUT_CORRECT, index=summary["holdout_index"],
                                correct=summary["holdout_correct"])
        metrics = {k: v for k, v in summary.items()
                   if k not in ("history", "test_correct", "holdout_correct", "holdout_index")} | record
        metrics["history"] = summary["history"]
        (tmp / "metrics.json").write_text(json.dumps(metrics, indent=2, default=str) + "\n")


def remove_checkpoint(path: Path) -> None:
    path.unlink(missing_ok=True)
    for parent in path.parents:
        if parent == SCRATCH.parent or not parent.is_dir() or any(parent.iterdir()):
            break
        parent.rmdir()


def where(resources, d: Dist, loaders: Loaders, recipe) -> dict:
    dtype = amp_dtype(recipe.amp, d.device)[0]
    return {"resources": dict(vars(resources)), "device": d.device.type,
            "amp_dtype": str(dtype).removeprefix("torch.") if dtype else "float32", "data_path": loaders.backend}


def execute(run: Run, root: str | Path, resources, attempt: str, record: dict | None = None) -> dict | None:
    """Train `run` in this process (one rank of it under torchrun); returns the summary on rank 0. `attempt` keys the
    checkpoint (`pipeline.cell`); `record` joins metrics.json."""
    d = setup_distributed(resources.device, resources.threads)
    try:
        return train_and_write(run, root, d, resources, attempt, record or {})
    finally:
        teardown_distributed()


def train_and_write(run: Run, root: str | Path, d: Dist, resources, attempt: str, record: dict) -> dict | None:
    meta = dataset_meta(root, run.dataset)
    img_size, in_chans = run.input_size(meta)
    recipe = run.recipe
    loaders = build_run_loaders(run.config["data"], root, run.dataset, img_size, in_chans, run.seed, recipe, d,
                                resources)
    model = run.build(meta, d.device)
    facts = run.facts(model) | {"params": sum(p.numel() for p in model.parameters())}
    if d.master:
        shutil.rmtree(run.out, ignore_errors=True)  # dvclive writes live/ into a fresh out during training
        run.out.mkdir(parents=True)
    summary = fit(model, loaders, recipe, seed=run.seed, d=d, checkpoint=run.checkpoint, attempt=attempt,
                  live_dir=run.out / "live", name=run.name, resources=resources)
    if not d.master:
        return None
    record = facts | run.measure(model, loaders) | {
        "dataset": run.dataset, "seed": run.seed, "world_size": d.world_size, "train_size": loaders.train_size,
        "val_size": loaders.val_size, "steps": recipe.epochs * len(loaders.train),
        "token_grid": token_grid(model)} | software() | where(resources, d, loaders, recipe) | record
    write_outputs(run.out, summary, run.config, model, record)
    remove_checkpoint(run.checkpoint)
    print(f"[{run.name}] final top-1 {summary['top1']:.4f} (best {summary['best_top1']:.4f}); wrote {run.out}",
          flush=True)
    return summary

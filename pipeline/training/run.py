"""One training run, the skeleton every training stage shares: set up -> build -> fit -> write outs -> clean up.

A stage module (`pipeline.training.train`, `filter_study`, `ci_alpha`) turns its arguments into a `Run`: what to
build, with which recipe, and where its outs go. `start(run, data, argv)` then either re-executes the command under
torchrun (several processes or nodes, `pipeline.training.launch`) or calls `execute`, which in this process (one rank
of it under torchrun):

1. sets up the device and process group (`pipeline.training.engine.setup_distributed`);
2. reads the dataset's facts (`pipeline.data.meta.dataset_meta`), builds the loaders and the model;
3. trains with the shared engine (`pipeline.training.engine.fit`), checkpointing every epoch to
   `scratch/<kind>/<key>/last.pt` (not a DVC out; see DESIGN.md);
4. on rank 0 writes `results/<kind>/<key>/` all or nothing: metrics.json (the one results schema `aggregate`
   reads), test_correct.npz (the final model's per-image correctness on the whole test split: `index`, the
   images' positions in the split, and `correct`, booleans), config.json, model.pt and dvclive's live/;
5. removes the checkpoint. A checkpoint belongs to one attempt of one (config, code): its key is the digest of
   the run's config, of the code its stage depends on (the stage module's import closure, `pipeline.closure`:
   the same files as its deps in dvc.yaml) and of the library versions, so a killed run resumes only into the
   same code, and a finished run, or one re-run after a code change, trains from scratch. The params
   `resources` (where and how fast: processes, workers, compile, ...) are not part of the key, so a run killed
   by a SLURM time limit, or stopped to change them, resumes; metrics.json records the ones each run ran with.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import os
import platform
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np
import torch
from torch import nn

from pipeline.closure import ROOT, closure
from pipeline.config import DEFAULT_RESOURCES, DataConfig, Resources, TrainConfig, digest
from pipeline.data.load import device as device_data
from pipeline.data.load.loaders import Loaders, build_loaders
from pipeline.data.load.transforms import Augment
from pipeline.data.meta import DatasetMeta, dataset_meta
from pipeline.errors import PipelineError
from pipeline.outputs import TEST_CORRECT, folder_aside
from pipeline.training import launch
from pipeline.training.engine import Dist, amp_dtype, fit, setup_distributed, teardown_distributed

RESULTS = Path("results")
SCRATCH = Path("scratch")
#: Libraries whose version is part of what produced a result (and of a checkpoint's attempt key).
LIBRARIES = ("torch", "torchvision", "timm", "numpy")


@dataclass
class Run:
    """One training run: what to build and train, and where its outs go.

    Attributes:
        module: the stage module that runs it (its import closure is the code the run depends on).
        kind: the results folder of its stage group: 'train' (ViT grid), 'filter_study'.
        key: the run's path below `results/<kind>/`, e.g. ('fashion_mnist', 'vit', 'impulse', 'seed0').
        dataset: a dataset of params `datasets` (fetched).
        seed: the run's seed (model init, data order, augmentation draws).
        recipe: the training recipe.
        config: everything that determines the result; written to config.json and digested.
        build: the model for the dataset's facts.
        input_size: (image side, channels) the model takes, for the dataset's facts.
        facts: metrics.json fields known before training (e.g. variant, family, heads), from the model.
        measure: metrics.json fields measured after training (e.g. the filter study's rank check).
    """

    module: str
    kind: str
    key: tuple[str, ...]
    dataset: str
    seed: int
    recipe: TrainConfig
    config: dict
    build: Callable[[DatasetMeta], nn.Module]
    input_size: Callable[[DatasetMeta], tuple[int, int]]
    facts: Callable[[nn.Module], dict] = field(default=lambda model: {})
    measure: Callable[[nn.Module, Loaders], dict] = field(default=lambda model, loaders: {})

    @property
    def name(self) -> str:
        return "-".join(k.removeprefix("seed") if k.startswith("seed") else k for k in self.key)

    @property
    def out(self) -> Path:
        return RESULTS.joinpath(self.kind, *self.key)

    @property
    def checkpoint(self) -> Path:
        return SCRATCH.joinpath(self.kind, *self.key, "last.pt")


def data_identity(data: DataConfig) -> dict:
    """The data params that change what a run trains on (part of its config, so of its checkpoint key)."""
    return {"train_subset": data.train_subset, "val_subset": data.val_subset, "normalization": data.normalization}


def build_run_loaders(data: DataConfig, dataset: str, img_size: int, in_chans: int, seed: int, recipe: TrainConfig,
                      d: Dist, resources: Resources = DEFAULT_RESOURCES) -> Loaders:
    """The dataset's train/val loaders for one process of a run (the global batch split over processes): DataLoaders,
    or for a dataset stored as tensors under `resources.data_on_device` the device-resident batches of
    `pipeline.data.load.device`."""
    if recipe.batch_size % d.world_size:
        raise PipelineError(f"train.batch_size = {recipe.batch_size} is not divisible by the {d.world_size}"
                            " processes; make it a multiple of resources.nproc x resources.nnodes")
    augment = Augment.from_train(recipe)
    built = build_loaders(dataset, data.root, img_size=img_size, in_chans=in_chans,
                          batch_size=recipe.batch_size // d.world_size, seed=seed, augment=augment,
                          rank=d.rank, world_size=d.world_size, workers=resources.workers,
                          train_subset=data.train_subset, val_subset=data.val_subset,
                          normalization=data.normalization, pin_memory=d.device.type == "cuda",
                          sampler_ranks=recipe.sampler_ranks)
    if device_data.choose(resources.data_on_device, built, augment, d.device):
        return device_data.device_loaders(built, img_size=img_size, augment=augment, device=d.device)
    return built


def versions() -> dict[str, str]:
    """The versions of LIBRARIES, as each reports itself (torch's includes its build, e.g. +cu130)."""
    return {lib: importlib.import_module(lib).__version__ for lib in LIBRARIES}


@cache
def code_digest(module: str) -> str:
    """A digest of the source files stage module `module` loads (its deps in dvc.yaml) and of the library versions."""
    parts = {f.relative_to(ROOT).as_posix(): hashlib.sha256(f.read_bytes()).hexdigest() for f in closure(module)}
    return digest({"files": dict(sorted(parts.items())), "libraries": versions()})


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
        metrics = ({k: v for k, v in summary.items() if k not in ("history", "test_correct")} | record
                   | {"config_digest": digest(config)})
        metrics["history"] = summary["history"]
        (tmp / "metrics.json").write_text(json.dumps(metrics, indent=2, default=str) + "\n")


def remove_checkpoint(path: Path) -> None:
    """Delete a finished run's checkpoint and the scratch folders it leaves empty."""
    path.unlink(missing_ok=True)
    for parent in path.parents:
        if parent == SCRATCH.parent or not parent.is_dir() or any(parent.iterdir()):
            break
        parent.rmdir()


def where(resources: Resources, d: Dist, loaders: Loaders, recipe: TrainConfig) -> dict:
    """What a run records of where and how fast it went: its resources, what they resolved to, and its SLURM job."""
    dtype = amp_dtype(recipe.amp, d.device)[0]
    return {"resources": dataclasses.asdict(resources), "device": d.device.type,
            "amp_dtype": str(dtype).removeprefix("torch.") if dtype else "float32", "data_path": loaders.backend,
            "slurm": launch.slurm_job()}


def execute(run: Run, data: DataConfig, resources: Resources = DEFAULT_RESOURCES) -> dict | None:
    """Train `run` in this process (one rank of it under torchrun). Returns the summary on rank 0."""
    d = setup_distributed(resources.device, resources.threads)
    try:
        return train_and_write(run, data, d, resources)
    finally:
        teardown_distributed()


def train_and_write(run: Run, data: DataConfig, d: Dist, resources: Resources = DEFAULT_RESOURCES) -> dict | None:
    """Steps 2 to 5 of the module docstring, in this process."""
    meta = dataset_meta(data.root, run.dataset)
    img_size, in_chans = run.input_size(meta)
    loaders = build_run_loaders(data, run.dataset, img_size, in_chans, run.seed, run.recipe, d, resources)
    model = run.build(meta)
    facts = run.facts(model) | {"params": sum(p.numel() for p in model.parameters())}
    if d.master:
        shutil.rmtree(run.out, ignore_errors=True)  # dvclive writes live/ into a fresh out during training
        run.out.mkdir(parents=True)
    attempt = digest({"config": run.config, "code": code_digest(run.module)})
    summary = fit(model, loaders, run.recipe, seed=run.seed, d=d, checkpoint=run.checkpoint, attempt=attempt,
                  live_dir=run.out / "live", name=run.name, resources=resources)
    if not d.master:
        return None
    record = facts | run.measure(model, loaders) | {
        "dataset": run.dataset, "seed": run.seed, "world_size": d.world_size, "train_size": loaders.train_size,
        "val_size": loaders.val_size} | software() | where(resources, d, loaders, run.recipe)
    write_outputs(run.out, summary, run.config, model, record)
    remove_checkpoint(run.checkpoint)
    print(f"[{run.name}] final top-1 {summary['top1']:.4f} (best {summary['best_top1']:.4f}); wrote {run.out}",
          flush=True)
    return summary


def start(run: Run, data: DataConfig, resources: Resources, argv: list[str]) -> int:
    """Run `run` here, or re-run this command (`python <argv>`, argv = `-m <module> ...`) under torchrun when the
    resources ask for several processes or nodes."""
    if launch.needs_launch(resources):
        return launch.launch(resources, argv)
    execute(run, data, resources)
    return 0


"""`python -m pipeline train <dataset> <arm> <seed>`: one ViT training run, the `train@<dataset>-<arm>-<seed>` stage.

Builds the timm model as the official code does (`weight_init='skip'`, i.e. PyTorch's default init), applies the
arm's initialization (`pipeline.inits.apply_init`, seeded), trains it with the shared engine and writes, last of
all, `results/train/<dataset>/<arm>/seed<k>/`:

    metrics.json   final and best top-1/top-5, losses, epochs, wall time, images/s, parameter count,
                   config digest, git revision, library versions (the one results schema `aggregate` reads)
    config.json    the resolved configuration of this run
    model.pt       the final weights (the figures draw the attention maps after training from them)
    live/          dvclive's per-epoch logs (written during training)

The per-epoch checkpoint lives in `scratch/train/<dataset>/<arm>/seed<k>/` (not a DVC out; see DESIGN.md).
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shutil
import subprocess
from pathlib import Path

import torch

from pipeline import launch
from pipeline.config import Params, digest
from pipeline.engine import Dist, fit, setup_distributed
from pipeline.outputs import folder_aside

RESULTS = Path("results")
SCRATCH = Path("scratch")


def run_dir(kind: str, *parts) -> Path:
    return RESULTS.joinpath(kind, *map(str, parts))


def provenance() -> dict:
    """Git revision and library versions, recorded beside every result."""
    import timm
    import torchvision

    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        rev = "unknown"
    return {"git_rev": rev, "python": platform.python_version(), "torch": torch.__version__,
            "torchvision": torchvision.__version__, "timm": timm.__version__,
            "hardware": torch.cuda.get_device_name(0) if torch.cuda.is_available() else platform.processor() or "cpu",
            "cpu_count": os.cpu_count()}


def loaders_for(params: Params, dataset: str, img_size: int, in_chans: int, seed: int, recipe, d: Dist):
    """The dataset's train/val loaders for one process of the run."""
    from pipeline.data import Augment, build_loaders

    if recipe.batch_size % d.world_size:
        from pipeline.errors import PipelineError

        raise PipelineError(f"train.batch_size = {recipe.batch_size} is not divisible by the {d.world_size}"
                            " processes; make it a multiple of train.nproc x train.nnodes")
    return build_loaders(dataset, params.data.root, img_size=img_size, in_chans=in_chans,
                         batch_size=recipe.batch_size // d.world_size, seed=seed, augment=Augment.from_train(recipe),
                         rank=d.rank, world_size=d.world_size, workers=recipe.workers,
                         train_subset=params.data.train_subset, val_subset=params.data.val_subset,
                         normalization=params.data.normalization, pin_memory=d.device.type == "cuda")


def input_shape(params: Params, dataset: str) -> tuple[int, int]:
    """(image size, channels) of the ViT's input: params.model's, else the timm model's size and the data's channels."""
    import timm

    from pipeline.data.registry import DATASETS

    size = params.model.img_size
    if size is None:
        size = timm.models.get_pretrained_cfg(params.model.name).input_size[-1]
    return size, params.model.in_chans or DATASETS[dataset].channels


def build_vit(params: Params, dataset: str, arm: str, seed: int, num_classes: int | None = None) -> torch.nn.Module:
    """The timm model of params.model for this dataset, initialized by `arm` with a generator seeded by `seed`.

    `num_classes` defaults to the registry's (the `folder` dataset's comes from its loaders).
    """
    from pipeline.data.registry import DATASETS
    from pipeline.inits import apply_init
    from pipeline.models import create_vit

    m = params.model
    info = DATASETS[dataset]
    overrides = {k: getattr(m, k) for k in ("img_size", "patch_size", "embed_dim", "depth", "num_heads",
                                            "mlp_ratio", "class_token", "global_pool")}
    torch.manual_seed(seed)  # anything the constructor draws; apply_init redefines what the method depends on
    model = create_vit(m.name, num_classes=num_classes or info.num_classes, in_chans=m.in_chans or info.channels,
                       weight_init=m.weight_init, drop_rate=m.drop_rate, drop_path_rate=m.drop_path_rate,
                       **overrides, **m.extra)
    return apply_init(model, arm, generator=torch.Generator().manual_seed(seed), **params.method_options(arm))


def run_config(params: Params, dataset: str, arm: str, seed: int) -> dict:
    """Everything that determines this run's result (its digest keys the resume checkpoint)."""
    return {"dataset": dataset, "arm": arm, "seed": seed, "model": dataclasses.asdict(params.model),
            "init": params.method_options(arm), "train": dataclasses.asdict(params.train),
            "data": {"train_subset": params.data.train_subset, "val_subset": params.data.val_subset}}


def write_outputs(out: Path, summary: dict, config: dict, model: torch.nn.Module, extra: dict) -> None:
    """Write the run's outs into a temporary sibling, then move it into place (never a half-written out)."""
    live = out / "live"
    with folder_aside(out) as tmp:
        if live.exists():
            shutil.move(str(live), tmp / "live")
        torch.save(model.state_dict(), tmp / "model.pt")
        (tmp / "config.json").write_text(json.dumps(config, indent=2, default=str) + "\n")
        metrics = {k: v for k, v in summary.items() if k != "history"} | extra | {"config_digest": digest(config)}
        metrics["history"] = summary["history"]
        (tmp / "metrics.json").write_text(json.dumps(metrics, indent=2, default=str) + "\n")


def train_run(params: Params, dataset: str, arm: str, seed: int) -> dict | None:
    """One ViT run in this process (one rank of it under torchrun). Returns the metrics on rank 0."""
    recipe = params.train
    d = setup_distributed(recipe.device, recipe.threads)
    img_size, in_chans = input_shape(params, dataset)
    loaders = loaders_for(params, dataset, img_size, in_chans, seed, recipe, d)
    model = build_vit(params, dataset, arm, seed, num_classes=loaders.num_classes)
    n_params = sum(p.numel() for p in model.parameters())
    config = run_config(params, dataset, arm, seed)
    out = run_dir("train", dataset, arm, f"seed{seed}")
    if d.master:
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
    summary = fit(model, loaders, recipe, seed=seed, d=d, checkpoint=SCRATCH / out.relative_to(RESULTS) / "last.pt",
                  digest=digest(config), live_dir=out / "live", name=f"{dataset}-{arm}-{seed}")
    if not d.master:
        return None
    extra = {"dataset": dataset, "arm": arm, "seed": seed, "params": n_params, "world_size": d.world_size,
             "train_size": loaders.train_size, "val_size": loaders.val_size} | provenance()
    write_outputs(out, summary, config, model, extra)
    print(f"[{dataset}-{arm}-{seed}] final top-1 {summary['top1']:.4f} (best {summary['best_top1']:.4f});"
          f" wrote {out}", flush=True)
    return summary


def add_arguments(parser) -> None:
    parser.add_argument("dataset", help="a dataset of params `datasets`")
    parser.add_argument("arm", help="an init method: default, timm, mimetic, impulse")
    parser.add_argument("seed", type=int)


def main(params: Params, args) -> int:
    from pipeline.config import INIT_METHODS
    from pipeline.errors import PipelineError

    if args.arm not in INIT_METHODS:
        raise PipelineError(f"arm {args.arm!r}: unknown init method; valid choices are {', '.join(INIT_METHODS)}")
    if launch.needs_launch(params.train):
        argv = ["--params", args.params, *sum((["--set", o] for o in args.overrides), []),
                "train", args.dataset, args.arm, str(args.seed)]
        return launch.launch(params.train, argv)
    train_run(params, args.dataset, args.arm, args.seed)
    return 0

"""What the configs stage checks before any cell runs (`validate`): params valid, every planned model built on the
meta device with its recipe, each init of your own imported and bound, the GPUs asked for present, the held-out pool
possible. `python -m pipeline check` runs the same, then plans (cost, power); this module imports nothing from
pipeline/analysis, so the configs stage, which runs it, never re-runs for a change to the analysis.

What only the libraries can judge (a timm name or keyword, a patch size, an optimizer, a RandAugment string) is
checked in seconds by building each model with its recipe on PyTorch's meta device; an init of your own (params
`inits`) is imported and its options bound to its function.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from timm.optim import create_optimizer_v2

from pipeline.config import TrainConfig
from pipeline.data.fetch import source_meta
from pipeline.data.load.transforms import Augment, pil_transform
from pipeline.data.meta import DatasetMeta, dataset_meta
from pipeline.data.store import MANIFEST
from pipeline.datasets import DATASETS
from pipeline.errors import PipelineError
from pipeline.experiments import check_frames, experiment_modules
from pipeline.method.plugins import check_call, load
from pipeline.params import Params
from pipeline.schema import yaml_load
from pipeline.training.engine import create_schedule
from pipeline.training.launch import require_devices, visible_devices

#: the measured (and derived) throughput of each device: what `check --device` can plan on
THROUGHPUT = Path(__file__).resolve().parent.parent / "bench" / "throughput.yaml"


def throughput_devices(path: Path = THROUGHPUT) -> list[str]:
    """The devices bench/throughput.yaml has figures for (what `check --device` can estimate on)."""
    table = yaml_load(path.read_text()) if path.exists() else []
    return sorted({row["device"] for row in table})


def check_devices(params: Params) -> None:
    """CUDA asked for where it cannot run, or more GPUs than this machine has: stop before any stage runs, saying how
    to plan the GPU time here all the same (`--device`)."""
    res = params.resources
    try:
        require_devices(res.nproc, res.device, visible_devices())
    except PipelineError as exc:
        cards = ", ".join(d for d in throughput_devices() if not d.startswith("cpu"))
        raise PipelineError(f"{exc}; to plan the GPU time on this machine: python -m pipeline check --device <card>"
                            f" ({cards})") from None


def planned_meta(params: Params, dataset: str) -> DatasetMeta:
    """The dataset's facts before any stage runs: as fetched, else what fetching will record."""
    if (Path(params.data.root) / dataset / MANIFEST).is_file():
        return dataset_meta(params.data.root, dataset)
    return source_meta(dataset, imagenet_path=params.data.imagenet_path, folder_path=params.data.folder_path)


@contextmanager
def keyed(key: str) -> Iterator[None]:
    """A PipelineError raised in the block is re-raised naming the params key it came from."""
    try:
        yield
    except PipelineError as exc:
        raise PipelineError(f"{key}: {exc}") from None


def check_recipe(key: str, recipe: TrainConfig, model: torch.nn.Module, dataset: str, img_size: int,
                 in_chans: int, train_images: int | None) -> None:
    with keyed(key):
        try:
            optimizer = create_optimizer_v2(model, opt=recipe.opt, lr=recipe.lr, weight_decay=recipe.weight_decay)
        except (ValueError, KeyError) as exc:
            raise PipelineError(f"opt = {recipe.opt!r}: {exc}; see timm.optim.list_optimizers()") from None
        try:
            create_schedule(optimizer, recipe, steps=1)
        except (ValueError, KeyError) as exc:
            raise PipelineError(f"sched = {recipe.sched!r}: {exc}; e.g. cosine, step, plateau, poly") from None
        try:
            pil_transform(img_size=img_size, in_chans=in_chans, mean=(0.5,) * in_chans, std=(0.5,) * in_chans,
                          training=True, augment=Augment.from_train(recipe))
        except (AssertionError, ValueError, KeyError) as exc:
            raise PipelineError(f"aa = {recipe.aa!r} (or another augmentation field): timm refused it ({exc});"
                                " e.g. rand-m9-mstd0.5-inc1") from None
        if train_images and recipe.batch_size > train_images:
            raise PipelineError(f"batch_size = {recipe.batch_size} exceeds the {train_images} training images of"
                                f" {dataset}; lower it or raise data.train_subset")


def train_images(dataset: str, train_subset: int, holdout: int = 0) -> int | None:
    """Images a run of `dataset` trains on: its train split less the held-out pool (`data.holdout`), or
    `data.train_subset` of that (None: unknown until fetched)."""
    size = DATASETS[dataset].train_size and DATASETS[dataset].train_size - holdout
    return min(s for s in (size, train_subset) if s) if (size or train_subset) else None


def check_holdout(params: Params) -> None:
    """`data.holdout` names datasets with a train split of known size and leaves each at least
    `data.train_subset` images to draw from (else the seeds would train on the same images)."""
    for dataset, n in (params.data.holdout or {}).items():
        info = DATASETS.get(dataset)
        if info is None or not info.train_size:
            raise PipelineError(f"data.holdout.{dataset}: not a dataset with a train split of known size (one of"
                                f" {', '.join(d for d, i in DATASETS.items() if i.train_size)}); remove the key")
        if n and n + params.data.train_subset > info.train_size:
            raise PipelineError(f"data.holdout.{dataset} = {n:,} leaves {info.train_size - n:,} of its"
                                f" {info.train_size:,} training images, fewer than data.train_subset"
                                f" ({params.data.train_subset:,}); lower it to at most"
                                f" {info.train_size - params.data.train_subset:,}")


class Builds:
    """What an experiment's `check_builds(params, check)` (its module under pipeline/experiments/) is handed: the
    planned data's facts, the recipe check, the error's key, the training images, and its runtime's modules
    (`module`), so that it builds its models with its runtime's own builders, on the meta device `check_builds`
    sets. The experiment modules import no training code: params load without torch, and the stages that read
    only the declarations (sources, aggregate, report) do not depend on it. The configs stage, which runs this,
    depends on every runtime's code (`pipeline.stages`)."""

    def __init__(self, params: Params):
        self.params = params

    @staticmethod
    def module(name: str):
        """A module of a runtime, e.g. 'pipeline.training.builders'."""
        return importlib.import_module(name)

    def meta(self, dataset: str) -> DatasetMeta:
        return planned_meta(self.params, dataset)

    def train_images(self, dataset: str) -> int | None:
        return train_images(dataset, self.params.data.train_subset, (self.params.data.holdout or {}).get(dataset, 0))

    keyed = staticmethod(keyed)
    recipe = staticmethod(check_recipe)


def check_builds(params: Params) -> int:
    """Build every planned model once on the meta device with its recipe, each experiment through its module's
    `check_builds`; returns how many were built."""
    with torch.device("meta"):
        return sum(module.check_builds(params, Builds(params)) for module in experiment_modules())


def check_own_inits(params: Params) -> None:
    """Import each init of your own (params `inits`) and bind the options each variant gives it: a module that does
    not import, a name that is not a function, or an option it does not take stops here, before any stage runs."""
    for arm, own in params.own_inits.items():
        fn = load(own.function, own.key)
        for variant, model in params.models.items():
            options = params.method_options(arm, variant)
            key = f"inits.{arm}.options" if options else own.key
            check_call(fn, options, key + (f" (with models.{variant}.init_options.{arm})"
                                           if arm in model.init_options else ""))


def validate(params: Params, devices: bool = True) -> int:
    """Everything `check` checks before any stage runs; returns how many models were built."""
    if devices:
        check_devices(params)
    check_frames()
    check_holdout(params)
    check_own_inits(params)
    return check_builds(params)

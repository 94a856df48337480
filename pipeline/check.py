"""`python -m pipeline check`: validate params.yaml, build every planned run on the meta device, and print what
`dvc repro` would train and roughly what it costs.

Loading the params already validated them (`pipeline.config`). What only the libraries can judge is checked by
building each planned model once on PyTorch's meta device (no weights allocated) with the dataset's classes and
channels, with its optimizer, schedule and transforms: an unknown timm name, a keyword the model does not take, a
patch size that does not divide the image, an unknown optimizer or scheduler, a bad RandAugment string or a batch
larger than the training set stop here, in seconds, with the params key and the fix.

The estimate multiplies the images each run processes (train split x epochs, capped by data.train_subset) by the
throughput of the entry of bench/throughput.yaml for the model and for the device the runs will use (this machine's
first GPU, or its CPU; measured with bench/bench_gpu.py or bench/bench_train.py, or derived from the paper's stated
hours; each entry names its source). `make repro` runs this before it reproduces anything, so a GPU profile
(`resources.device: cuda`) on a machine where CUDA cannot run stops here, in seconds, saying why.

Last, before any run, it says claim by claim what the design can decide: each claim's power at paper/plan.yaml's
effects of interest and assumed seed sds, all its comparisons at once (`pipeline.analysis.design`,
`pipeline.analysis.power`), and, where it falls short, the seeds or the seed sd that would reach the plan's power.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from timm.optim import create_optimizer_v2

from pipeline.analysis.design import CLAIM_FRAMES, Design, plan_power
from pipeline.analysis.power import describe
from pipeline.analysis.published import load_claims
from pipeline.config import ModelConfig, Params, SimpleVitConfig, TrainConfig, yaml_load
from pipeline.data.fetch import source_meta
from pipeline.data.load.transforms import Augment, pil_transform
from pipeline.data.meta import DatasetMeta, dataset_meta
from pipeline.data.registry import DATASETS
from pipeline.data.store import MANIFEST
from pipeline.errors import PipelineError
from pipeline.method.weight_selection import select_weights
from pipeline.training import builders, ci_alpha, ci_model3, ci_table1, filter_study
from pipeline.training import sia as sia_stage
from pipeline.training.engine import create_schedule
from pipeline.training.launch import require_devices, visible_devices

THROUGHPUT = Path(__file__).resolve().parent.parent / "bench" / "throughput.yaml"
PAPER = Path(__file__).resolve().parent.parent / "paper"


def train_runs(params: Params) -> list[str]:
    """Run ids `<dataset>-<variant>-<arm>-<seed>` of every ViT training cell, as the train@ stages name them."""
    return [f"{d}-{v}-{a}-{s}" for d in params.datasets for v in params.variants for a in params.arms
            for s in params.seeds]


def run_device(params: Params) -> str:
    """The device the training runs will use here: the first visible GPU's name, or 'cpu'."""
    if params.resources.device == "cpu" or not visible_devices() or not torch.cuda.is_available():
        return "cpu"
    return torch.cuda.get_device_name(0)


def on_device(row: dict, device: str) -> bool:
    """Whether a throughput row was measured on `device` (its short name, e.g. 'V100', within the GPU's name;
    'cpu...' rows for the CPU)."""
    return row["device"].startswith("cpu") if device == "cpu" else row["device"].lower() in device.lower()


def throughput_key(m: ModelConfig | SimpleVitConfig) -> tuple[str, int, int | None]:
    """(model name, image size, width) as bench/throughput.yaml names a model: a timm model, or [CI]'s Simple ViT
    ('simple_vit')."""
    if isinstance(m, SimpleVitConfig):
        return "simple_vit", m.image_size, m.dim
    return m.name, m.img_size or 224, m.embed_dim


def throughput(m: ModelConfig | SimpleVitConfig, table: list[dict], device: str) -> dict | None:
    """The entry of bench/throughput.yaml for this model (name, image size, width) on `device`, if any."""
    for row in table:
        if (row["model"], row["img_size"], row["embed_dim"]) == throughput_key(m) and on_device(row, device):
            return row
    return None


def grid_estimate(label: str, model: ModelConfig | SimpleVitConfig, datasets: list[str], runs: int, epochs: int,
                  params: Params, table: list[dict], device: str) -> list[str]:
    """Lines estimating one grid's training compute: `runs` runs per dataset of `epochs` epochs of `model`."""
    row = throughput(model, table, device)
    if row is None:
        name, size, _ = throughput_key(model)
        others = sorted({r["device"] for r in table if (r["model"], r["img_size"]) == (name, size)})
        return [f"compute estimate of {label}: no throughput figure for {name} at this size on {device}"
                + (f" (bench/throughput.yaml has {', '.join(others)})" if others else "")
                + "; measure it with bench/bench_gpu.py --yaml bench/throughput.yaml (GPU) or bench/bench_train.py"]
    total = 0.0
    lines = [f"compute estimate of {label} at {row['images_per_s']} images/s per {row['device']} ({row['source']}):"]
    for dataset in datasets:
        n = train_images(params, dataset)
        if n is None:
            lines.append(f"  {dataset}: size unknown until fetched")
            continue
        hours = n * epochs / row["images_per_s"] / 3600
        total += hours * runs
        lines.append(f"  {dataset}: {runs} runs x {n * epochs:,} images = {hours:.2f} h each")
    unit = "GPU-hours" if not row["device"].startswith("cpu") else f"hours on a {row['device']} CPU"
    return [*lines, f"  total: {total:.1f} {unit} (training only)"]


def estimate_lines(params: Params, device: str | None = None) -> list[str]:
    """The compute estimate of every grid (each model variant of the ViT grid, and [CI]'s alpha grid) on `device`
    (default: the one the runs will use here)."""
    table = yaml_load(THROUGHPUT.read_text()) if THROUGHPUT.exists() else []
    device, lines = device or run_device(params), []
    for variant, model in params.models.items():
        lines += grid_estimate(variant, model, params.datasets, len(params.arms) * len(params.seeds),
                               params.train.epochs, params, table, device)
    for name, recipe in params.config_recipes.items():
        for variant in params.train_config_cells.variants:
            lines += grid_estimate(f"{variant} under training configuration {name}", params.models[variant],
                                   params.train_config_cells.datasets, len(params.arms) * len(params.seeds),
                                   recipe.epochs, params, table, device)
    ci = params.ci_alpha
    if ci.datasets:
        lines += grid_estimate("the [CI] alpha grid", ci.model, ci.datasets,
                               len(ci.alphas) * len(ci.arms) * len(ci.seeds), params.ci_recipe.epochs, params, table,
                               device)
    m3 = params.ci_model3
    if m3.datasets:
        lines += grid_estimate("the [CI] Model III grid", m3.model, m3.datasets,
                               len(m3.arms) * len(m3.qk) * len(m3.value) * len(m3.seeds),
                               params.ci_model3_recipe.epochs, params, table, device)
    if m3.datasets and m3.forms:
        lines += grid_estimate("[CI] Table 1's other columns", m3.model, m3.datasets,
                               len(m3.forms) * len(m3.value) * len(m3.seeds), params.ci_model3_recipe.epochs, params,
                               table, device)
    sia = params.sia
    if sia.enabled:
        lines += grid_estimate(f"[SIA]'s cells on {sia.variant} (the fit cells' {sia.fit.steps} Adam steps per fit"
                               " not included)", params.models[sia.variant], sia.datasets,
                               (len(sia.bases) + len(sia.fits)) * len(sia.seeds), params.train.epochs, params, table,
                               device)
    return lines + weight_selection_estimate(params, table, device)


def weight_selection_estimate(params: Params, table: list[dict], device: str) -> list[str]:
    """The weight-selection block's compute: each teacher on its own pretraining-set size, then the student's
    fine-tune and scratch cells."""
    ws, lines = params.weight_selection, []
    row = throughput(ws.teacher, table, device)
    for name, t in ws.teachers.items():
        n = t.train_size or DATASETS[ws.pretrain_dataset].train_size
        if row is None:
            lines.append(f"compute estimate of teacher {name}: no throughput figure for {ws.teacher.name} at"
                         f" {ws.teacher.img_size} px, width {ws.teacher.embed_dim} on {device}")
            continue
        hours = n * params.ws_pretrain_recipe.epochs / row["images_per_s"] / 3600
        lines.append(f"compute estimate of teacher {name}: {n:,} images x {params.ws_pretrain_recipe.epochs} epochs"
                     f" at {row['images_per_s']} images/s ({row['device']}) = {hours:.2f} h")
    runs = (len(ws.teachers) + len(ws.scratch)) * len(ws.seeds)
    if ws.datasets and runs:
        lines += grid_estimate(f"the weight-selection student {ws.student}", params.models[ws.student], ws.datasets,
                               runs, params.ws_finetune_recipe.epochs, params, table, device)
    return lines


def check_devices(params: Params) -> None:
    """CUDA asked for where it cannot run, or more GPUs than this machine has: stop before any stage runs."""
    res = params.resources
    require_devices(res.nproc, res.device, visible_devices())


def planned_meta(params: Params, dataset: str) -> DatasetMeta:
    """The dataset's facts before any stage runs: as fetched when it is, else what fetching it will record (the
    registry's, or a scan of the user's folder for `folder` / `imagenet`)."""
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
    """The recipe's optimizer, schedule and transforms for `model` (on the meta device), and its batch size."""
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


def train_images(params: Params, dataset: str) -> int | None:
    """Training images a run sees: data.train_subset, capped by the split (None when unknown before fetching)."""
    size = DATASETS[dataset].train_size
    return min(s for s in (size, params.data.train_subset) if s) if (size or params.data.train_subset) else None


def check_builds(params: Params) -> int:
    """Build every planned model once on the meta device, with its recipe; returns how many were built."""
    built = 0
    with torch.device("meta"):
        for dataset in dict.fromkeys(params.datasets):
            meta = planned_meta(params, dataset)
            n = train_images(params, dataset)
            for variant, cfg in params.models.items():
                with keyed(f"models.{variant}"):
                    model = builders.timm_model(cfg, meta)
                check_recipe("train", params.train, model, dataset, *builders.input_size(cfg, meta), n)
                built += 1
            if dataset in params.ci_alpha.datasets and params.ci_alpha.alphas:
                cfg = params.ci_alpha.model
                with keyed("ci_alpha.model"):
                    model = ci_alpha.simple_vit(cfg, meta, alpha=params.ci_alpha.alphas[0])
                check_recipe("ci_alpha.train", params.ci_recipe, model, dataset, *ci_alpha.input_size(cfg, meta), n)
                built += 1
            m3 = params.ci_model3
            if dataset in m3.datasets and m3.qk and m3.value:
                with keyed("ci_model3.model"):
                    model = ci_alpha.simple_vit(m3.model, meta, **ci_model3.attention_form(m3.qk[0], m3.value[0]))
                check_recipe("ci_model3.train", params.ci_model3_recipe, model, dataset,
                             *ci_alpha.input_size(m3.model, meta), n)
                built += 1
            if dataset in m3.datasets and m3.forms and m3.value:
                with keyed("ci_model3.model"):
                    model = ci_alpha.simple_vit(m3.model, meta, **ci_table1.attention_form(m3.forms[0], m3.value[0]))
                check_recipe("ci_model3.train", params.ci_model3_recipe, model, dataset,
                             *ci_alpha.input_size(m3.model, meta), n)
                built += 1
            study = params.filter_study
            if study.enabled and dataset == study.dataset:
                with keyed("filter_study.model"):
                    model = filter_study.build_model(study.model, "learned", None, meta, seed=0)
                check_recipe("filter_study.train", params.filter_recipe, model, dataset,
                             *filter_study.model_input(study.model, meta), n)
                built += 1
    return built + check_weight_selection(params) + check_sia(params)


def check_sia(params: Params) -> int:
    """Build each architecture [SIA]'s cells use (sia.variant with a cls token and learned PE, or average pooling
    and the sin-cos PE) on the meta device with the `train` recipe, per dataset; returns how many were built."""
    sia, built = params.sia, 0
    if not sia.enabled:
        return 0
    archs = dict.fromkeys([*sia.bases, *([sia_stage.cell_of("fit", f).arch for f in sia.fits])])
    with torch.device("meta"):
        for dataset in sia.datasets:
            meta = planned_meta(params, dataset)
            for arch in archs:
                cfg = sia_stage.sia_model_config(params.models[sia.variant], arch)
                with keyed(f"sia ({arch}) on models.{sia.variant}"):
                    model = builders.timm_model(cfg, meta)
                check_recipe("train", params.train, model, dataset, *builders.input_size(cfg, meta),
                             train_images(params, dataset))
                built += 1
    return built


def check_weight_selection(params: Params) -> int:
    """Build each teacher and the student on the meta device with their recipes, and select the teacher into the
    student for every fine-tune dataset (a teacher too small or of another patch size stops here); returns how many
    models were built."""
    ws, built = params.weight_selection, 0
    if not ws.teachers and not ws.datasets:
        return 0
    with torch.device("meta"):
        teacher = None
        if ws.teachers:
            meta = planned_meta(params, ws.pretrain_dataset)
            with keyed("weight_selection.teacher"):
                teacher = builders.timm_model(ws.teacher, meta)
            smallest = min(t.train_size or DATASETS[ws.pretrain_dataset].train_size for t in ws.teachers.values())
            check_recipe("weight_selection.pretrain", params.ws_pretrain_recipe, teacher, ws.pretrain_dataset,
                         *builders.input_size(ws.teacher, meta), smallest or None)
            built += 1
        cfg = params.models[ws.student]
        for dataset in ws.datasets:
            meta = planned_meta(params, dataset)
            with keyed(f"models.{ws.student}"):
                student = builders.timm_model(cfg, meta)
            check_recipe("weight_selection.finetune", params.ws_finetune_recipe, student, dataset,
                         *builders.input_size(cfg, meta), train_images(params, dataset))
            if teacher is not None:
                with keyed(f"weight_selection.teacher -> models.{ws.student} on {dataset}"):
                    select_weights(teacher.state_dict(), student.state_dict())
            built += 1
    return built


def weight_selection_lines(params: Params) -> list[str]:
    """What the weight-selection block plans: teachers, fine-tune and scratch cells."""
    ws = params.weight_selection
    n_ft = len(ws.datasets) * len(ws.teachers) * len(ws.seeds)
    n_sc = len(ws.datasets) * len(ws.scratch) * len(ws.seeds)
    if not ws.teachers and not n_sc:
        return ["weight-selection runs: 0 (off)"]
    teachers = ", ".join(f"{k} ({t.arm}, {t.train_size or 'all'} images)" for k, t in ws.teachers.items())
    return [f"weight-selection runs: {len(ws.teachers)} teacher(s) on {ws.pretrain_dataset} ({teachers or 'none'}),"
            f" {params.ws_pretrain_recipe.epochs} epochs each; {n_ft} fine-tune = {len(ws.datasets)} dataset(s) x"
            f" {len(ws.teachers)} teacher(s) x {len(ws.seeds)} seed(s) and {n_sc} scratch = {len(ws.scratch)}"
            f" arm(s), {params.ws_finetune_recipe.epochs} epochs each, into {ws.student!r}"]


def decide_lines(params: Params, paper: Path = PAPER) -> list[str]:
    """Before any run: what this design can decide, claim by claim, at paper/plan.yaml's effects of interest and
    assumed variance components (a claim's power is that of all its comparisons at once, `pipeline.analysis.power`)."""
    design = Design.of(params, paper)
    lines = ["what this design can decide (paper/plan.yaml: each claim's effects of interest and assumed seed sd;"
             " a claim is supported only when all its comparisons are, so its power is theirs together):"]
    for claim in load_claims(paper):
        power = plan_power(design, claim["id"])
        if claim["id"] not in CLAIM_FRAMES:
            lines.append(f"  claim {claim['id']}: structural (no seed statistic, no power to state)")
        elif power is None:
            lines.append(f"  claim {claim['id']}: not tested by this profile")
        elif not math.isfinite(power["power"]):
            lines.append(f"  claim {claim['id']}: one seed per arm: no interval, so no verdict but 'inconclusive'")
        else:
            lines.append(f"  claim {claim['id']}: {describe(power)}")
    return lines


def add_arguments(parser) -> None:
    parser.add_argument("--device", default=None, help="estimate the compute on this device (a name of"
                        " bench/throughput.yaml, e.g. V100) instead of this machine's, and skip the GPU check")


def main(params: Params, args) -> int:
    if args.device is None:
        check_devices(params)
    built = check_builds(params)
    runs = train_runs(params)
    print(f"params valid (profile {params.profile!r}); {built} model(s) built on the meta device with their recipes")
    print(f"method under study: {params.init}; baselines: {', '.join(params.baselines)}")
    print(f"ViT training runs: {len(runs)} = {len(params.datasets)} dataset(s) x {len(params.variants)} model"
          f" variant(s) x {len(params.arms)} arm(s) x {len(params.seeds)} seed(s), {params.train.epochs} epochs each")
    if params.train_configs:
        cells = params.train_config_cells
        n_cfg = len(cells.datasets) * len(cells.variants) * len(params.arms) * len(params.seeds)
        print(f"training-configuration runs: {n_cfg * len(params.train_configs)} = {n_cfg} grid cells"
              f" ({', '.join(cells.datasets)} x {', '.join(cells.variants)}) x {len(params.train_configs)}"
              f" configuration(s) ({', '.join(params.train_configs)})")
    sia = params.sia
    if sia.enabled:
        n_sia = len(sia.datasets) * (len(sia.bases) + len(sia.fits)) * len(sia.seeds)
        print(f"[SIA] ablation runs: {n_sia} = {len(sia.datasets)} dataset(s) x {len(sia.bases)} base and"
              f" {len(sia.fits)} fit cell(s) x {len(sia.seeds)} seed(s) on variant {sia.variant!r}, each fit cell"
              f" {sia.fit.steps} Adam steps per fit first")
    for line in weight_selection_lines(params):
        print(line)
    study = params.filter_study
    n_study = len(study.filters) * len(study.seeds) + len(study.gaussian_sigmas) * len(study.gaussian_heads) * len(
        study.seeds)
    print(f"filter-study runs: {n_study} (ConvMixer on {study.dataset})")
    ci = params.ci_alpha
    n_ci = len(ci.datasets) * len(ci.alphas) * len(ci.arms) * len(ci.seeds)
    print(f"[CI] alpha-grid runs: {n_ci}" + (f" = {len(ci.datasets)} dataset(s) x {len(ci.alphas)} alpha(s) x"
                                            f" {len(ci.arms)} arm(s) x {len(ci.seeds)} seed(s)" if n_ci else " (off)"))
    m3 = params.ci_model3
    n_m3 = len(m3.datasets) * len(m3.arms) * len(m3.qk) * len(m3.value) * len(m3.seeds)
    print(f"[CI] Model III runs: {n_m3}" + (f" = {len(m3.datasets)} dataset(s) x {len(m3.arms)} arm(s) x"
                                            f" {len(m3.qk)} qk x {len(m3.value)} value x {len(m3.seeds)} seed(s)"
                                            if n_m3 else " (off)"))
    n_t1 = len(m3.datasets) * len(m3.forms) * len(m3.value) * len(m3.seeds)
    print(f"[CI] Table 1 runs (Simple ViT, Models I / II): {n_t1}"
          + (f" = {len(m3.datasets)} dataset(s) x {len(m3.forms)} form(s) x {len(m3.value)} value x {len(m3.seeds)}"
             " seed(s)" if n_t1 else " (off)"))
    for line in estimate_lines(params, args.device):
        print(line)
    for line in decide_lines(params):
        print(line)
    return 0

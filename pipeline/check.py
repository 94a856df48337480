"""`python -m pipeline check`: validate params.yaml as the configs stage does (`pipeline.validation`: every planned
run built on the meta device), then print what `dvc repro` would train, roughly what it costs, and what the design
can decide. Costs come from bench/throughput.yaml (each entry names its source); the power of each claim from
`pipeline.analysis.design`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import statistics
import subprocess
from pathlib import Path
from types import SimpleNamespace

import torch

from pipeline.config import TrainConfig
from pipeline.data.fetch.userdata import read_header, scan_split
from pipeline.datasets import DATASETS
from pipeline.errors import PipelineError
from pipeline.experiments import init_section, plugin_section, stages
from pipeline.params import Params
from pipeline.schema import yaml_load
from pipeline.training.launch import visible_devices
from pipeline.validation import THROUGHPUT, throughput_devices, train_images, validate

PAPER = Path(__file__).resolve().parent.parent / "paper"


def train_runs(params: Params) -> list[str]:
    return [f"{d}-{v}-{a}-{s}" for d in params.datasets for v in params.variants for a in params.arms
            for s in params.seeds]


def run_device(params: Params) -> str:
    if params.resources.device == "cpu" or not visible_devices() or not torch.cuda.is_available():
        return "cpu"
    return torch.cuda.get_device_name(0)


def on_device(row: dict, device: str) -> bool:
    """Whether a throughput row was measured on `device` (its short name within the GPU's name; 'cpu...' rows for the
    CPU)."""
    return row["device"].startswith("cpu") if device == "cpu" else row["device"].lower() in device.lower()


def throughput_key(model) -> tuple[str, int | None, int | None, int | None] | None:
    """(model name, image size, patch size, width) as bench/throughput.yaml names a model section (a params section or
    a resolved configuration's): a timm model, [CI]'s Simple ViT ('simple_vit'), or the filter study's ConvMixer
    ('convmixer'; its image size null where the section leaves it to the dataset's stored side); None for any other.
    The patch size is null where the timm name sets it; it is in the key because the token count, and with it a
    step's cost, follows it (at 28 px, 196 tokens at patch 2 against 49 at patch 4)."""
    m = model if isinstance(model, dict) else vars(model)
    if "name" in m:
        return m["name"], m.get("img_size") or 224, m.get("patch_size"), m.get("embed_dim")
    if "image_size" in m:
        return "simple_vit", m["image_size"], m["patch_size"], m["dim"]
    if "kernel_size" in m and "dim" in m:
        return "convmixer", m.get("img_size"), m.get("patch_size"), m["dim"]
    return None


def row_key(row: dict) -> tuple:
    """A throughput row's model key, `throughput_key`'s form (a row without a patch size has the timm name's)."""
    return row["model"], row["img_size"], row.get("patch_size"), row["embed_dim"]


def throughput(model, table: list[dict], device: str) -> dict | None:
    key = throughput_key(model)
    for row in table:
        if key and row_key(row) == key and on_device(row, device):
            return row
    return None


#: A GPU cell's cost beyond its images (seconds): process start-up, a cold torch.compile, the data copied to the GPU
#: and the outputs. docs/gpus.md: a one-epoch CIFAR-10 cell of paper-small ran 17 s compiled end to end on an H200
#: (about 3 s of it training) and 27 s on an H100; rounded up for a larger dataset's copy to the GPU.
CELL_FIXED_S = 30

#: What one evaluated image costs against one trained image: the forward pass alone, a third of the forward and
#: backward FLOPs (ViT-Ti/16: 2.51 of 7.52 GFLOP, `bench/gpu_check.py`'s count).
EVAL_COST = 1 / 3


def evaluated_epochs(recipe: TrainConfig) -> int:
    return len([e for e in range(recipe.epochs) if (e + 1) % recipe.eval_every == 0 or e == recipe.epochs - 1])


def epoch_images(n: int, recipe: TrainConfig, processes: int) -> int:
    """Images one epoch of `n` trains: each rank's padded shard in whole batches, over the ranks (processes or
    train.sampler_ranks emulated ones), as the loaders deal them."""
    ranks = recipe.sampler_ranks if recipe.sampler_ranks > 1 else processes
    share = recipe.batch_size // ranks
    return math.ceil(n / ranks) // share * share * ranks


def eval_images(dataset: str, val_subset: int, recipe, holdout: int = 0) -> int | None:
    """Images one run evaluates: the validation set at every evaluated epoch, then the test split and the held-out
    pool once (None when unknown before fetching)."""
    size = DATASETS[dataset].eval_size
    if not size:
        return None
    val = min(size, val_subset) if val_subset else size
    return val * evaluated_epochs(recipe) + size + holdout


def cost_groups(params: Params) -> list[tuple[str, dict, str, dict, dict, int]]:
    """Every declared stage's cells (`pipeline.experiments`), grouped by what costs alike: (label, model section,
    dataset, recipe, data section, cells), from the cells' resolved configurations. A label names the stage and the
    axis values its cells share (`train cells, variant vit`)."""
    groups: dict[str, list] = {}
    for stage in stages():
        for cell in stage.cells(params):
            c = stage.resolve(params, cell)
            if throughput_key(c.get("model") or {}) is None:
                continue
            key = json.dumps([stage.name, c["model"], c["dataset"], c["train"], c["data"]], sort_keys=True)
            groups.setdefault(key, [stage, c["model"], c["dataset"], c["train"], c["data"], []])[5].append(cell)
    found = []
    for stage, model, dataset, train, data, cells in groups.values():
        shared = [f"{axis} {value}" for axis, value in cells[0].items()
                  if axis != "dataset" and all(c[axis] == value for c in cells)]
        note = f" ({stage.cost_note})" if stage.cost_note else ""
        found.append((", ".join([f"{stage.name} cells", *shared]) + note, model, dataset, train, data, len(cells)))
    return found


def group_estimate(group: tuple, table: list[dict], device: str, ranks: int, cells: list,
                   known: dict | None = None) -> tuple[str, float, str]:
    """One line estimating a group of cells' compute (evaluation included, EVAL_COST per image), its total hours and
    their unit; each cell's wall time goes to `cells` as (hours, where, device); `known`: training images of the
    datasets only the data can size (`known_train_sizes`)."""
    known = known or {}
    label, model, dataset, train, data, runs = group
    row = throughput(model, table, device)
    name = throughput_key(model)[0]
    if row is None:
        others = sorted({r["device"] for r in table if row_key(r)[:3] == throughput_key(model)[:3]})
        return (f"compute estimate of {label} on {dataset}: no throughput figure for {name} at this size on {device}"
                + (f" (bench/throughput.yaml has {', '.join(others)})" if others else "")
                + "; measure it with bench/gpu_check.py (GPU) or bench/bench_train.py", 0.0, "")
    n = (min(data["train_subset"] or known[dataset], known[dataset]) if dataset in known
         else train_images(dataset, data["train_subset"], data.get("holdout", 0)))
    if n is None:
        return f"compute estimate of {label} on {dataset}: size unknown until fetched", 0.0, ""
    recipe = SimpleNamespace(**train)
    trained = recipe.epochs * epoch_images(n, recipe, ranks)
    evaluated = eval_images(dataset, data["val_subset"], recipe, data.get("holdout", 0))
    cost = trained + EVAL_COST * (evaluated or 0)
    gpu = not row["device"].startswith("cpu")
    hours = cost / row["images_per_s"] / 3600 + (CELL_FIXED_S * ranks / 3600 if gpu else 0.0)
    cells.append((hours / ranks, f"{label} on {dataset}", f"{ranks} x {row['device']}"))
    share = f" + {evaluated:,} evaluated ({EVAL_COST * evaluated / cost:.0%} of the cost)" if evaluated else ""
    fixed = f" + {CELL_FIXED_S} s fixed per cell (start-up, cold compile, data to the GPU)" if gpu else ""
    unit = "GPU-hours" if gpu else f"hours on a {row['device']} CPU"
    source = f"a derived figure: {row['source'].removeprefix('derived: ')}" if row.get("derived") else row["source"]
    return (f"compute estimate of {label} on {dataset} at {row['images_per_s']} images/s per {row['device']}"
            f" ({source}): {runs} runs x {trained:,} images{share}{fixed}"
            f" = {hours:.2f} h each", hours * runs, unit)


def slurm_lines(params: Params, cells: list) -> list[str]:
    """Where a cell's estimated time exceeds slurm.time x (slurm.requeues + 1): what to set."""
    if not cells:
        return []
    hours, where, device = max(cells)
    cap = params.slurm.time * (params.slurm.requeues + 1) / 60
    if hours <= cap:
        return [f"slurm: the longest cell ({where}, ~{hours:.1f} h on {device}) fits slurm.time x (slurm.requeues + 1)"
                f" = {cap:.0f} h"]
    minutes = math.ceil(hours * 60 * 1.1)  # 10% for start-up, compilation and the requeues' restarts
    requeues, time = math.ceil(minutes / params.slurm.time) - 1, math.ceil(minutes / (params.slurm.requeues + 1))
    return [f"slurm: the longest cell ({where}) needs ~{hours:.1f} h on {device}, beyond slurm.time x (slurm.requeues"
            f" + 1) = {params.slurm.time} min x {params.slurm.requeues + 1} = {cap:.0f} h that `repro --executor"
            f" slurm` lets a cell run; set slurm.requeues: {requeues} (or slurm.time: {time})"]


def estimate_lines(params: Params, device: str | None = None) -> list[str]:
    """The compute estimate of every declared stage's cells on `device` (default: the one the runs will use here),
    from their resolved configurations: what they train and evaluate, at bench/throughput.yaml's rate."""
    table = yaml_load(THROUGHPUT.read_text()) if THROUGHPUT.exists() else []
    device, lines, cells, totals = device or run_device(params), [], [], {}
    for group in cost_groups(params):
        line, hours, unit = group_estimate(group, table, device, params.resources.ranks, cells,
                                           known_train_sizes(params))
        lines.append(line)
        if unit:
            totals[unit] = totals.get(unit, 0.0) + hours
    lines += [f"  total: {hours:.1f} {unit}" + (wall_clock(hours, cells) if unit == "GPU-hours" else "")
              for unit, hours in totals.items()]
    return lines + slurm_lines(params, cells)


def wall_clock(gpu_hours: float, cells: list) -> str:
    """The wall-clock hours of `gpu_hours` on 1, 8 and 64 GPUs, one cell per resources.ranks GPUs at once: the total
    shared out, never below the longest cell."""
    longest = max((h for h, _, _ in cells), default=0.0)
    walls = ", ".join(f"{max(gpu_hours / n, longest):.1f} h on {n}" for n in (1, 8, 64))
    return f"; wall-clock about {walls} GPU(s) (cells side by side; the longest cell, {longest:.1f} h, bounds it)"


#: the images per GPU the GPU check measures its throughput at (bench/gpu_check.py; bench/throughput.yaml's GPU rows)
MEASURED_BATCH = 512


def parallel_lines(params: Params) -> list[str]:
    """The batch each process trains when a cell is split over processes (resources.nproc x nnodes), and a warning
    where that share is below the GPU check's: a small share leaves the step host-bound, so one cell on 8 GPUs runs
    slower than 8 cells side by side (docs/gpus.md: 64 per H200 at 2-3k images/s against 16k at 512)."""
    ranks, batch = params.resources.ranks, params.train.batch_size
    if ranks <= 1:
        return []
    share = batch // ranks
    line = f"per-process batch: train.batch_size {batch} over {ranks} processes = {share} per GPU"
    if share >= MEASURED_BATCH:
        return [line]
    return [line, f"warning: {share} images per GPU is below the {MEASURED_BATCH} the throughput figures are measured"
                  f" at: the step is host-bound there and one cell on {ranks} GPUs trains slower than {ranks} cells"
                  f" side by side; for a grid, set resources.nproc: 1 (`python -m pipeline repro` then runs one cell"
                  " per GPU at once; docs/gpus.md)"]


def device_lines(params: Params, device: str | None) -> list[str]:
    """`--device`: the card must have figures in bench/throughput.yaml; a line saying the estimate is for it and that
    training needs one where the params ask for CUDA."""
    if device is None:
        return []
    known = throughput_devices(THROUGHPUT)
    if not any(device.lower() in d.lower() or d.lower() in device.lower() for d in known):
        raise PipelineError(f"--device {device!r}: bench/throughput.yaml has no figures for it ({', '.join(known)});"
                            " measure it there with `make bench-gpu` (bench/gpu_check.py), or name one of these")
    needs = "training needs one (resources.device: cuda)" if params.resources.device == "cuda" else (
        "training runs where `python -m pipeline repro` finds one")
    return [f"planned for {params.resources.ranks} x {device} per cell, without using one here: {needs}"]


def holdout_lines(params: Params) -> list[str]:
    """What the held-out pool costs and buys: the images each cell scores once after training and the comparisons
    that read them (the plan's `holdout: true`)."""
    pools = {d: n for d, n in (params.data.holdout or {}).items() if n}
    if not pools:
        return []
    from pipeline.analysis.aggregate import Experiment
    from pipeline.analysis.analysis_plan import load_plan

    plans = load_plan("paper", Experiment.from_params(params).sizes())
    marked = sorted({r.claim for entry in plans.values() for r in entry.rules.values() if r.holdout},
                    key=lambda c: (int(c.rstrip("ab")), c))
    where = ", ".join(f"{d} {n:,}" for d, n in pools.items())
    return [f"held-out pool (data.holdout): {where} training images no cell trains or selects on, scored once by"
            f" every cell's final model beside the test split (about {EVAL_COST:.2g} of a training image's cost"
            f" each, in the estimates below); read, over the test and held-out images together, by the comparisons"
            f" of claim(s) {', '.join(marked) or 'none'} (paper/plan.yaml `holdout: true`)"]


FOLDER = "folder"  #: the user's ImageFolder dataset (pipeline.datasets; `data.folder_path`)


@functools.cache
def _scan_folder(path: str) -> tuple[int, int, int, int] | None:
    """(training images, classes, the median shorter side of a sample, the sample's size) of the ImageFolder tree at
    `path` (its train/ listing and a few image headers, as the fetch stage reads them); None when it cannot be read
    (`validate` says why)."""
    try:
        counts, sample = scan_split(Path(path).expanduser() / "train", "data.folder_path")
        sides = [read_header(f, "data.folder_path")[1] for f in sample]
    except PipelineError:
        return None
    return sum(counts.values()), len(counts), statistics.median_low(sides), len(sides)


def known_train_sizes(params: Params) -> dict[str, int]:
    """Training images of the datasets whose size only the data says (the user's folder), where it can be read."""
    scan = _scan_folder(params.data.folder_path) if params.data.folder_path else None
    return {FOLDER: scan[0]} if scan else {}


def folder_lines(params: Params, img_sizes: set) -> list[str]:
    """What the user's folder holds and what its images become: the model's input size, by timm's resize."""
    scan = _scan_folder(params.data.folder_path)
    if scan is None or not img_sizes:
        return []
    n, classes, side, sampled = scan
    px = ", ".join(f"{s} px" for s in sorted(img_sizes))
    lines = [f"{FOLDER} ({params.data.folder_path}): {n:,} training images in {classes} classes, shorter side {side} px"
             f" (median of {sampled} read); the models take {px}: each image is resized to it (timm's random-resized"
             " crops in training, resize and centre crop in evaluation)"]
    small = min(img_sizes)
    if side < small:
        lines.append(f"warning: {FOLDER}: its images ({side} px) are upsampled about {small / side:.1f}x to the models'"
                     f" {small} px input: the model sees no more detail than {side} px hold (set models.<variant>"
                     f".img_size nearer {side}, or use larger images)")
    return lines


def data_lines(params: Params) -> list[str]:
    """Warnings on the data each planned cell reads: a training subset larger than the split (every seed then trains
    on the same images) and a validation subset that is the whole test split (the curves, the best epoch and the
    plateau are then read on the images that test)."""
    used: dict[str, set] = {}
    sizes: dict[str, set] = {}  #: dataset -> the input sizes of the models that read it
    for stage in stages():
        for cell in stage.cells(params):
            config = stage.resolve(params, cell)
            data = config.get("data") or {}
            if config.get("dataset") in DATASETS and data:
                used.setdefault(config["dataset"], set()).add((data["train_subset"], data["val_subset"]))
                if (config.get("model") or {}).get("img_size"):
                    sizes.setdefault(config["dataset"], set()).add(config["model"]["img_size"])
    lines, whole = [], []
    for dataset, subsets in used.items():
        info = DATASETS[dataset]
        size = known_train_sizes(params).get(dataset) or info.train_size
        if dataset == FOLDER:
            lines += folder_lines(params, sizes.get(dataset, set()))
        for train, val in sorted(subsets):
            if size and train >= size:
                lines.append(f"warning: {dataset}: data.train_subset {train} >= its {size:,} training"
                             f" images: every seed trains on all {size:,}, the same images (the seeds"
                             " differ in init, order and augmentation only)")
            if info.eval_size and (not val or val >= info.eval_size):
                whole.append(f"{dataset} ({info.eval_size:,})")
    if whole:
        lines.append(f"warning: the validation subset (data.val_subset) is the whole test split of {', '.join(whole)}:"
                     " the learning curves, best epoch and plateau are read on the images that test")
    return lines


def weight_selection_lines(params: Params) -> list[str]:
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
    """Before any run: what this design can decide, claim by claim (`pipeline.analysis.power`). The analysis stack
    is imported here only, so `check` validates on a stock PyTorch image."""
    from pipeline.analysis.design import CLAIM_FRAMES, Design, plan_power
    from pipeline.analysis.power import describe
    from pipeline.analysis.published import load_claims

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


def own_init_lines(params: Params) -> list[str]:
    """Each init of your own: its function, and the files whose behaviour its cells' configurations record."""
    lines = []
    for arm, own in params.own_inits.items():
        files = plugin_section(params, arm)["plugin"]["files"]
        role = "method under study" if arm == params.init else "baseline" if arm in params.baselines else "not run"
        lines.append(f"your own init {arm} ({role}): {own.function}, options {own.options or 'none'}; its cells"
                     f" re-run when {', '.join(files)} change(s) what they compute (not for comments or docstrings)")
        loose = untracked(files)
        if loose:
            lines.append(f"warning: {', '.join(loose)} (your own init {arm}) is not tracked by git, so a commit or"
                         " `dvc exp run` of this experiment would name code it does not hold: `git add"
                         f" {' '.join(loose)}`")
    return lines


def untracked(files: list[str]) -> list[str]:
    """The files of `files` git does not track here ([] outside a git repository: nothing to say)."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--", *files], capture_output=True, text=True)
    except OSError:
        return []
    if listed.returncode:  # not a git repository
        return []
    tracked = set(listed.stdout.split("\0"))
    return [f for f in files if f not in tracked]


def resolved_lines(params: Params) -> list[str]:
    """Where a cell resolves an init option to another value that trains the same model (`init_section`), and so
    re-runs nothing when params change it."""
    lines = []
    for variant, model in params.models.items():
        if "impulse" not in params.arms:
            break
        given = params.method_options("impulse", variant).get("kernel_size")
        used = init_section(params, "impulse", variant).get("kernel_size")
        if given != used:
            lines.append(f"note: impulse.kernel_size {given} gives models.{variant}'s {model.num_heads} heads the"
                         f" offsets of a {used}x{used} kernel (code-2505's order takes a larger kernel's other"
                         f" offsets only after {used * used} heads): its cells resolve to kernel_size {used} and"
                         f" train what {used} trains, so this value re-runs none of them")
    return lines


def cell_counts(params: Params) -> list[str]:
    lines = []
    for stage in stages():
        cells = stage.cells(params)
        if cells:
            sizes = " x ".join(f"{len(dict.fromkeys(c[a] for c in cells))} {a}" for a in stage.axes)
            lines.append(f"  {stage.name}: {len(cells)} = {sizes}")
    return lines


#: the init sections whose options only the grid's arms (and weight selection's teachers) read
ARM_SECTIONS = ("default", "mimetic", "impulse")


def unused_arm_lines(params: Params) -> list[str]:
    """A warning for each arm section set away from its defaults while no planned cell trains that arm: `dvc exp
    run -S impulse.offsets=random` after `-S init=timm` trains nothing new, since the workspace kept init: timm."""
    if params.weight_selection.datasets:  # its teachers and scratch cells name arms of their own
        return []
    lines = []
    for arm in ARM_SECTIONS:
        section = getattr(params, arm)
        changed = [f"{arm}.{f.name} = {getattr(section, f.name)!r}" for f in dataclasses.fields(section)
                   if getattr(section, f.name) != getattr(type(section)(), f.name)]
        if changed and arm not in params.arms:
            lines.append(f"warning: {', '.join(changed)} is set, but no planned cell trains the {arm} arm (init ="
                         f" {params.init}, baselines {', '.join(params.baselines)}): it changes nothing; add -S"
                         f" init={arm} to train it")
    return lines


def main(params: Params, args) -> int:
    planned = device_lines(params, args.device)
    built = validate(params, devices=args.device is None)
    print(f"params valid (profile {params.profile!r}); {built} model(s) built on the meta device with their recipes")
    print(f"method under study: {params.init}; baselines: {', '.join(params.baselines)}")
    for line in unused_arm_lines(params):
        print(line)
    for line in own_init_lines(params):
        print(line)
    counts = cell_counts(params)
    print(f"training cells: {sum(int(line.split(': ')[1].split()[0]) for line in counts)}, per stage:")
    for line in counts:
        print(line)
    for line in weight_selection_lines(params):
        print(line)
    for line in resolved_lines(params) + planned + data_lines(params) + holdout_lines(params) + parallel_lines(params):
        print(line)
    for line in estimate_lines(params, args.device):
        print(line)
    for line in decide_lines(params):
        print(line)
    return 0

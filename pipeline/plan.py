"""`python -m pipeline check`: validate params.yaml and print what `dvc repro` would train, and roughly what it costs.

Loading the params already validated them (`pipeline.config`). The estimate multiplies the images each run
processes (train split x epochs, capped by data.train_subset) by the throughput of a matching entry of
bench/throughput.yaml (measured with bench/bench_train.py, or derived from the paper's stated hours; each entry
names its source). `make repro` runs this before `dvc repro`.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.config import ModelConfig, Params, yaml_load
from pipeline.data.registry import DATASETS

THROUGHPUT = Path(__file__).resolve().parent.parent / "bench" / "throughput.yaml"


def train_runs(params: Params) -> list[str]:
    """Run ids `<dataset>-<variant>-<arm>-<seed>` of every ViT training cell, as the train@ stages name them."""
    return [f"{d}-{v}-{a}-{s}" for d in params.datasets for v in params.variants for a in params.arms
            for s in params.seeds]


def images_per_run(params: Params, dataset: str) -> int | None:
    """Training images one run processes (train split, capped by data.train_subset, times epochs)."""
    size = DATASETS[dataset].train_size
    if params.data.train_subset:
        size = min(size or params.data.train_subset, params.data.train_subset)
    return size * params.train.epochs if size else None


def throughput(m: ModelConfig, table: list[dict]) -> dict | None:
    """The entry of bench/throughput.yaml for this model (name, image size, width), if any."""
    for row in table:
        if row["model"] == m.name and row["img_size"] == (m.img_size or 224) and row["embed_dim"] == m.embed_dim:
            return row
    return None


def estimate_lines(params: Params) -> list[str]:
    table = yaml_load(THROUGHPUT.read_text()) if THROUGHPUT.exists() else []
    lines = []
    for variant, model in params.models.items():
        row = throughput(model, table)
        if row is None:
            lines.append(f"compute estimate of {variant}: no throughput figure for {model.name} at this size;"
                         " measure one with bench/bench_train.py and add it to bench/throughput.yaml")
            continue
        total = 0.0
        lines.append(f"compute estimate of {variant} at {row['images_per_s']} images/s per {row['device']}"
                     f" ({row['source']}):")
        for dataset in params.datasets:
            images = images_per_run(params, dataset)
            if images is None:
                lines.append(f"  {dataset}: size unknown until fetched")
                continue
            hours = images / row["images_per_s"] / 3600
            n = len(params.arms) * len(params.seeds)
            total += hours * n
            lines.append(f"  {dataset}: {n} runs x {images:,} images = {hours:.2f} h each")
        unit = "GPU-hours" if row["device"] != "cpu-2core" else "hours on this 2-core CPU"
        lines.append(f"  total: {total:.1f} {unit} (training only)")
    return lines


def check_devices(params: Params) -> None:
    """More GPUs asked for than this machine has, or CUDA asked for without one: stop before any stage runs."""
    from pipeline.errors import PipelineError
    from pipeline.launch import visible_devices

    recipe = params.train
    devices = visible_devices()
    if recipe.device == "cuda" and not devices:
        raise PipelineError("train.device = 'cuda' but this machine has no GPU; set train.device: auto or cpu")
    if devices and recipe.device != "cpu" and recipe.nproc > len(devices):
        raise PipelineError(f"train.nproc = {recipe.nproc} but this machine has {len(devices)} GPU(s); lower"
                            " train.nproc (or set train.device: cpu for CPU processes)")


def add_arguments(parser) -> None:
    del parser  # no options beyond the global ones


def main(params: Params, args) -> int:
    check_devices(params)
    runs = train_runs(params)
    print(f"params valid (profile {params.profile!r})")
    print(f"method under study: {params.init}; baselines: {', '.join(params.baselines)}")
    print(f"ViT training runs: {len(runs)} = {len(params.datasets)} dataset(s) x {len(params.variants)} model"
          f" variant(s) x {len(params.arms)} arm(s) x {len(params.seeds)} seed(s), {params.train.epochs} epochs each")
    study = params.filter_study
    n_study = len(study.filters) * len(study.seeds) + len(study.gaussian_sigmas) * len(study.gaussian_heads) * len(
        study.seeds)
    print(f"filter-study runs: {n_study} (ConvMixer on {study.dataset})")
    ci = params.ci_alpha
    n_ci = len(ci.datasets) * len(ci.alphas) * len(ci.arms) * len(ci.seeds)
    print(f"[CI] alpha-grid runs: {n_ci}" + (f" = {len(ci.datasets)} dataset(s) x {len(ci.alphas)} alpha(s) x"
                                            f" {len(ci.arms)} arm(s) x {len(ci.seeds)} seed(s)" if n_ci else " (off)"))
    for line in estimate_lines(params):
        print(line)
    return 0

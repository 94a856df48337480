"""Read the runs of the current experiment from results/ (their metrics.json files) into pandas frames.

Which runs belong to the experiment is decided by params.yaml, not by what lies in results/ (old runs of other
inits may still be there): the ViT runs are exactly `results/train/<dataset>/<variant>/<arm>/seed<k>/metrics.json`
for the experiment's datasets × variants × arms × seeds, the filter study exactly
`results/filter_study/<variant>/seed<k>/` for its variants and seeds. A run the experiment expects but that has
no metrics.json is reported as missing, not silently dropped. Accuracies stay fractions here; the tables convert
to percent.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from pipeline.errors import PipelineError

#: per-run fields kept from metrics.json (besides the history); absent ones become NaN / ""
RUN_FIELDS = ("top1", "top5", "best_top1", "best_epoch", "train_top1", "val_loss", "train_loss", "epochs",
              "wall_time_s", "images_per_s", "params", "train_size", "val_size", "world_size", "git_rev", "python",
              "torch", "torchvision", "timm", "hardware", "cpu_count", "config_digest")
#: extra fields of a filter-study run
FILTER_FIELDS = ("family", "frozen", "heads", "sigma", "kernel_size", "dim", "effective_rank", "prop1_holds",
                 "prop1_rhs")


def read_metrics(path: Path) -> dict:
    """One run's metrics.json; a corrupt file is a PipelineError naming it."""
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PipelineError(f"{path}: not valid JSON ({exc}); re-run its stage (dvc repro -f <stage>)") from None


def _row(metrics: dict, fields: Sequence[str]) -> dict:
    return {k: metrics.get(k, math.nan) for k in fields} | {"history": metrics.get("history", [])}


def load_vit_runs(train_root: str | Path, datasets: Sequence[str], variants: Sequence[str], arms: Sequence[str],
                  seeds: Sequence[int]) -> tuple[pd.DataFrame, list[str]]:
    """The experiment's ViT runs: (one row per run found, the paths of the runs it expects but lacks).

    Columns: dataset, variant, arm, seed, the RUN_FIELDS and `history` (the per-epoch list of dicts, epoch
    0-based).
    """
    rows, missing = [], []
    for dataset in datasets:
        for variant in variants:
            for arm in arms:
                for seed in seeds:
                    path = Path(train_root) / dataset / variant / arm / f"seed{seed}" / "metrics.json"
                    if path.is_file():
                        rows.append({"dataset": dataset, "variant": variant, "arm": arm, "seed": seed}
                                    | _row(read_metrics(path), RUN_FIELDS))
                    else:
                        missing.append(str(path))
    columns = ["dataset", "variant", "arm", "seed", *RUN_FIELDS, "history"]
    return pd.DataFrame(rows, columns=columns), missing


def _gaussian_runs(study_root: Path, sigmas: Sequence[float], heads: Sequence[int], seeds: Sequence[int]):
    """Gaussian-grid runs, matched on the sigma/heads their metrics.json record (robust to how the folder
    spells the number, e.g. gaussian-1.0-h4 or gaussian-1-h4)."""
    found = {}
    for seed in seeds:
        for path in sorted(study_root.glob(f"gaussian-*/seed{seed}/metrics.json")):
            m = read_metrics(path)
            for sigma in sigmas:
                if m.get("heads") in heads and m.get("sigma") is not None and math.isclose(m["sigma"], sigma):
                    found[(float(sigma), int(m["heads"]), seed)] = m | {"variant": path.parent.parent.name}
    expected = {(float(s), int(h), seed) for s in sigmas for h in heads for seed in seeds}
    missing = [f"{study_root}/gaussian-{s:g}-h{h}/seed{seed} (sigma {s}, heads {h})"
               for s, h, seed in sorted(expected - found.keys())]
    return found, missing


def load_filter_runs(study_root: str | Path, filters: Sequence[str], sigmas: Sequence[float],
                     heads: Sequence[int], seeds: Sequence[int]) -> tuple[pd.DataFrame, list[str]]:
    """The experiment's filter-study runs: (rows found, runs expected but missing).

    `filters` are the variant names of params `filter_study.filters` (``learned`` and frozen families); the
    Gaussian grid is sigmas × heads. Columns: variant, seed, the RUN_FIELDS, the FILTER_FIELDS, history.
    """
    study_root = Path(study_root)
    rows, missing = [], []
    for variant in filters:
        for seed in seeds:
            path = study_root / variant / f"seed{seed}" / "metrics.json"
            if path.is_file():
                rows.append({"variant": variant, "seed": seed} | _row(read_metrics(path), RUN_FIELDS + FILTER_FIELDS))
            else:
                missing.append(str(path))
    found, gaussian_missing = _gaussian_runs(study_root, sigmas, heads, seeds)
    for (_, _, seed), m in sorted(found.items()):
        rows.append({"variant": m["variant"], "seed": seed} | _row(m, RUN_FIELDS + FILTER_FIELDS))
    columns = ["variant", "seed", *RUN_FIELDS, *FILTER_FIELDS, "history"]
    return pd.DataFrame(rows, columns=columns), missing + gaussian_missing


def at_epoch(history: list[dict], epoch: int, key: str) -> float:
    """`key` after `epoch` finished epochs (history rows count epochs from 0), NaN when the run is shorter."""
    for row in history:
        if row.get("epoch") == epoch - 1:
            return float(row.get(key, math.nan))
    return math.nan


def per_seed(runs: pd.DataFrame, dataset: str, value: str, metric: str = "top1", column: str = "arm",
             scale: float = 100.0) -> dict[int, float]:
    """{seed: metric × scale} of the runs whose `column` equals `value`, within `dataset` ('' = any).

    The default reads a ViT arm's final top-1 in percent; `column='variant'` reads a filter-study variant.
    """
    rows = runs[runs[column] == value]
    if dataset and "dataset" in rows.columns:
        rows = rows[rows["dataset"] == dataset]
    return {int(s): float(v) * scale for s, v in zip(rows["seed"], rows[metric]) if v is not None}

"""Read the runs of the current experiment from results/ (their metrics.json files) into pandas frames: the one
results reader of the analysis.

Which runs belong to the experiment is decided by params.yaml, not by what lies in results/; a run it expects
without a metrics.json is reported missing. Grids whose axis is a number (α, σ) match runs on the value each
recorded, not on the folder's spelling. Accuracies stay fractions. `top1` is the final model's test top-1 where
the run scored the test split (`correct` then holds its per-image correctness, ordered by image), else the last
validation top-1.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.errors import PipelineError
from pipeline.outputs import TEST_CORRECT

#: per-run fields kept from metrics.json (besides the history); absent ones become NaN / ""
RUN_FIELDS = ("top1", "top5", "best_top1", "best_epoch", "train_top1", "val_loss", "train_loss", "epochs",
              "wall_time_s", "images_per_s", "params", "train_size", "val_size", "test_size", "world_size", "git_rev",
              "python", "torch", "torchvision", "timm", "hardware", "cpu_count", "config_digest")
#: what a ViT-family run records about its model (pipeline.training.builders): timm name, family, heads
MODEL_FIELDS = ("model", "family", "num_heads")
#: what a cell of [CI]'s α grid records beyond a ViT run: its impulse fit per layer (pipeline.method.ci_2401)
CI_FIELDS = ("impulse_fit",)
#: how a timm model name maps to a family (for an attention record, which names its model only)
FAMILY_PREFIXES = {"vit": "vit", "deit": "vit", "swin": "swin", "mixer": "mixer"}
#: extra fields of a filter-study run
FILTER_FIELDS = ("family", "frozen", "heads", "sigma", "kernel_size", "dim", "effective_rank", "prop1_holds",
                 "prop1_rhs")
#: per-image correctness of the final model on the whole test split, beside metrics.json
#: columns every frame gets besides its fields: the validation top-1, per-image correctness and its image indices
SCORED = ("val_top1", "correct", "images")


def read_metrics(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PipelineError(f"{path}: not valid JSON ({exc}); re-run its stage (dvc repro -f <stage>)") from None


def family_of(model: str) -> str:
    return FAMILY_PREFIXES.get(str(model).split("_")[0], "")


def read_correct(path: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """(image indices, correctness as booleans), ordered by index, of a run's TEST_CORRECT file; None without one."""
    if not path.is_file():
        return None
    try:
        with np.load(path) as f:
            index, correct = np.asarray(f["index"]), np.asarray(f["correct"], dtype=bool)
    except (OSError, ValueError, KeyError) as exc:
        raise PipelineError(f"{path}: not a per-image correctness file ({exc}); re-run its stage (dvc repro -f"
                            " <stage>)") from None
    if index.shape != correct.shape or index.ndim != 1 or len(np.unique(index)) != len(index):
        raise PipelineError(f"{path}: index and correct must be 1-D, of one length, each image once; re-run its"
                            " stage (dvc repro -f <stage>)")
    order = np.argsort(index)
    return index[order], correct[order]


def _row(metrics: dict, fields: Sequence[str], folder: Path | None = None) -> dict:
    row = {k: metrics.get(k, math.nan) for k in fields} | {"history": metrics.get("history", [])}
    scored = read_correct(folder / TEST_CORRECT) if folder is not None else None
    row |= {"val_top1": row.get("top1", math.nan), "correct": None, "images": None}
    if scored is not None:
        row |= {"top1": float(scored[1].mean()), "images": scored[0], "correct": scored[1]}
    return row


def check_images(runs: Iterable[tuple[str, np.ndarray | None]]) -> None:
    """Every run with per-image correctness was scored on the same images; else a PipelineError naming two."""
    first = None
    for name, images in runs:
        if images is None:
            continue
        if first is None:
            first = (name, images)
        elif not np.array_equal(first[1], images):
            raise PipelineError(f"{name} and {first[0]} were scored on different test images; re-run the older one"
                                " so every run of a comparison scores the whole test split")


def load_vit_runs(train_root: str | Path, datasets: Sequence[str], variants: Sequence[str], arms: Sequence[str],
                  seeds: Sequence[int]) -> tuple[pd.DataFrame, list[str]]:
    """The experiment's ViT-grid runs: (one row per run found, the paths of the runs it expects but lacks). Columns:
    dataset, variant, arm, seed, RUN_FIELDS, MODEL_FIELDS, `history` (per-epoch dicts)."""
    rows, missing = [], []
    fields = RUN_FIELDS + MODEL_FIELDS
    for dataset in datasets:
        for variant in variants:
            for arm in arms:
                for seed in seeds:
                    path = Path(train_root) / dataset / variant / arm / f"seed{seed}" / "metrics.json"
                    if path.is_file():
                        rows.append({"dataset": dataset, "variant": variant, "arm": arm, "seed": seed}
                                    | _row(read_metrics(path), fields, path.parent))
                    else:
                        missing.append(str(path))
    return pd.DataFrame(rows, columns=["dataset", "variant", "arm", "seed", *fields, *SCORED, "history"]), missing


def match_recorded(paths: Iterable[Path], key: str, values: Sequence[float],
                   **fixed) -> dict[float, tuple[Path, dict]]:
    """{configured value: (path, metrics)} of the runs among `paths` whose metrics.json records `key` close to one of
    `values` and each `fixed` field exactly (the first path in sorted order wins)."""
    found: dict[float, tuple[Path, dict]] = {}
    for path in sorted(paths):
        m = read_metrics(path)
        recorded = m.get(key)
        if any(m.get(k) != v for k, v in fixed.items()):
            continue
        value = next((float(v) for v in values if recorded is not None and math.isclose(recorded, v)), None)
        if value is not None:
            found.setdefault(value, (path, m))
    return found


def _gaussian_runs(study_root: Path, sigmas: Sequence[float], heads: Sequence[int], seeds: Sequence[int]):
    found = {}
    for seed in seeds:
        for h in heads:
            paths = study_root.glob(f"gaussian-*-h{h}/seed{seed}/metrics.json")
            for sigma, (path, m) in match_recorded(paths, "sigma", sigmas, heads=h).items():
                found[(sigma, int(h), seed)] = m | {"variant": path.parent.parent.name, "folder": path.parent}
    expected = {(float(s), int(h), seed) for s in sigmas for h in heads for seed in seeds}
    missing = [f"{study_root}/gaussian-{s:g}-h{h}/seed{seed} (sigma {s}, heads {h})"
               for s, h, seed in sorted(expected - found.keys())]
    return found, missing


def load_filter_runs(study_root: str | Path, filters: Sequence[str], sigmas: Sequence[float],
                     heads: Sequence[int], seeds: Sequence[int]) -> tuple[pd.DataFrame, list[str]]:
    """The experiment's filter-study runs, learned, frozen and the Gaussian grid: (rows found, runs missing)."""
    study_root = Path(study_root)
    rows, missing = [], []
    for variant in filters:
        for seed in seeds:
            path = study_root / variant / f"seed{seed}" / "metrics.json"
            if path.is_file():
                rows.append({"variant": variant, "seed": seed}
                            | _row(read_metrics(path), RUN_FIELDS + FILTER_FIELDS, path.parent))
            else:
                missing.append(str(path))
    found, gaussian_missing = _gaussian_runs(study_root, sigmas, heads, seeds)
    for (_, _, seed), m in sorted(found.items()):
        rows.append({"variant": m["variant"], "seed": seed} | _row(m, RUN_FIELDS + FILTER_FIELDS, m["folder"]))
    columns = ["variant", "seed", *RUN_FIELDS, *FILTER_FIELDS, *SCORED, "history"]
    return pd.DataFrame(rows, columns=columns), missing + gaussian_missing


def load_ci_alpha_runs(ci_root: str | Path, datasets: Sequence[str], alphas: Sequence[float], arms: Sequence[str],
                       seeds: Sequence[int]) -> tuple[pd.DataFrame, list[str]]:
    """[CI]'s α grid (results/ci_alpha/): (rows found, runs missing), `alpha` the configured value matched."""
    ci_root = Path(ci_root)
    rows, missing = [], []
    fields = RUN_FIELDS + MODEL_FIELDS + CI_FIELDS
    for dataset in datasets:
        for arm in arms:
            for seed in seeds:
                found = match_recorded(ci_root.glob(f"{dataset}/alpha*/{arm}/seed{seed}/metrics.json"), "alpha",
                                       alphas)
                for alpha in alphas:
                    if float(alpha) in found:
                        rows.append({"dataset": dataset, "alpha": float(alpha), "arm": arm, "seed": seed}
                                    | _row(found[float(alpha)][1], fields, found[float(alpha)][0].parent))
                    else:
                        missing.append(f"{ci_root}/{dataset}/alpha{alpha}/{arm}/seed{seed} (alpha {alpha})")
    return pd.DataFrame(rows, columns=["dataset", "alpha", "arm", "seed", *fields, *SCORED, "history"]), missing


def load_ci_model3_runs(root: str | Path, datasets: Sequence[str], arms: Sequence[str], qks: Sequence[str],
                        values: Sequence[str], seeds: Sequence[int]) -> tuple[pd.DataFrame, list[str]]:
    """[CI]'s Model III grid (results/ci_model3/): (rows found, runs missing)."""
    root = Path(root)
    rows, missing = [], []
    fields = RUN_FIELDS + MODEL_FIELDS + CI_FIELDS
    for dataset, arm, qk, value, seed in itertools.product(datasets, arms, qks, values, seeds):
        folder = root / dataset / arm / qk / value / f"seed{seed}"
        if not (folder / "metrics.json").exists():
            missing.append(str(folder))
            continue
        cell = {"dataset": dataset, "arm": arm, "qk": qk, "value": value, "seed": seed}
        rows.append(cell | _row(read_metrics(folder / "metrics.json"), fields, folder))
    columns = ["dataset", "arm", "qk", "value", "seed", *fields, *SCORED, "history"]
    return pd.DataFrame(rows, columns=columns), missing


def load_train_config_runs(root: str | Path, datasets: Sequence[str], variants: Sequence[str],
                           configs: Sequence[str], arms: Sequence[str],
                           seeds: Sequence[int]) -> tuple[pd.DataFrame, list[str]]:
    """The training-configuration cells (results/train_config/): (rows found, runs missing), `load_vit_runs`' columns
    plus `config`."""
    rows, missing = [], []
    fields = RUN_FIELDS + MODEL_FIELDS
    for dataset, variant, config, arm, seed in itertools.product(datasets, variants, configs, arms, seeds):
        path = Path(root) / dataset / variant / config / arm / f"seed{seed}" / "metrics.json"
        if path.is_file():
            rows.append({"dataset": dataset, "variant": variant, "config": config, "arm": arm, "seed": seed}
                        | _row(read_metrics(path), fields, path.parent))
        else:
            missing.append(str(path))
    columns = ["dataset", "variant", "config", "arm", "seed", *fields, *SCORED, "history"]
    return pd.DataFrame(rows, columns=columns), missing


def load_sia_runs(root: str | Path, datasets: Sequence[str], cells: Sequence[str],
                  seeds: Sequence[int]) -> tuple[pd.DataFrame, list[str]]:
    """[SIA]'s ablations (results/sia/): (rows found, runs missing)."""
    rows, missing = [], []
    fields = RUN_FIELDS + MODEL_FIELDS + CI_FIELDS
    for dataset, cell, seed in itertools.product(datasets, cells, seeds):
        path = Path(root) / dataset / cell / f"seed{seed}" / "metrics.json"
        if path.is_file():
            cell_keys = {"dataset": dataset, "cell": cell, "seed": seed}
            rows.append(cell_keys | _row(read_metrics(path), fields, path.parent))
        else:
            missing.append(str(path))
    return pd.DataFrame(rows, columns=["dataset", "cell", "seed", *fields, *SCORED, "history"]), missing


#: what a weight-selection cell records about its teacher (pipeline.training.select_finetune)
TEACHER_FIELDS = ("teacher_arm", "teacher_train_size", "pretrain_dataset")
#: the `source` of a weight-selection row trained from scratch is SCRATCH + its arm, e.g. 'scratch:default'
SCRATCH = "scratch:"


def load_weight_selection_runs(root: str | Path, datasets: Sequence[str], teachers: Sequence[str],
                               scratch: Sequence[str], seeds: Sequence[int]) -> tuple[pd.DataFrame, list[str]]:
    """The weight-selection cells (results/weight_selection/): (rows found, runs missing), with `source` the teacher's
    name or SCRATCH + the arm."""
    rows, missing = [], []
    fields = RUN_FIELDS + ("variant",) + MODEL_FIELDS + TEACHER_FIELDS
    cells = [(t, Path(t)) for t in teachers] + [(SCRATCH + a, Path("scratch") / a) for a in scratch]
    for dataset, (source, sub), seed in itertools.product(datasets, cells, seeds):
        path = Path(root) / dataset / sub / f"seed{seed}" / "metrics.json"
        if path.is_file():
            rows.append({"dataset": dataset, "source": source, "seed": seed}
                        | _row(read_metrics(path), fields, path.parent))
        else:
            missing.append(str(path))
    columns = ["dataset", "source", "seed", *fields, *SCORED, "history"]
    return pd.DataFrame(rows, columns=columns), missing


#: the `form` of Model III's rows when they stand beside [CI] Table 1's other columns in one frame
MODEL3 = "model3"


def load_ci_table1_runs(root: str | Path, datasets: Sequence[str], forms: Sequence[str], values: Sequence[str],
                        seeds: Sequence[int]) -> tuple[pd.DataFrame, list[str]]:
    """[CI] Table 1's other columns (results/ci_table1/): (rows found, runs missing), in the Model III frame's columns
    plus `form`."""
    root = Path(root)
    rows, missing = [], []
    fields = RUN_FIELDS + MODEL_FIELDS + CI_FIELDS
    for dataset, form, value, seed in itertools.product(datasets, forms, values, seeds):
        folder = root / dataset / form / value / f"seed{seed}"
        if not (folder / "metrics.json").exists():
            missing.append(str(folder))
            continue
        cell = {"dataset": dataset, "form": form, "arm": "random", "qk": "trained", "value": value, "seed": seed}
        rows.append(cell | _row(read_metrics(folder / "metrics.json"), fields, folder))
    columns = ["dataset", "form", "arm", "qk", "value", "seed", *fields, *SCORED, "history"]
    return pd.DataFrame(rows, columns=columns), missing


def at_epoch(history: list[dict], epoch: int, key: str) -> float:
    """`key` after `epoch` finished epochs (history rows count epochs from 0), NaN when the run is shorter."""
    for row in history:
        if row.get("epoch") == epoch - 1:
            return float(row.get(key, math.nan))
    return math.nan


class SeedScores(dict):
    """{seed: a run's scores} of one run group, naming the group (`unit`), so the claim-level power knows which
    comparisons share one (`stats.terms_of`)."""

    unit: str


def _matched(runs: pd.DataFrame, match: dict) -> pd.DataFrame:
    rows = runs
    for column, value in match.items():
        rows = rows[rows[column] == value]
    return rows


def _named(values: dict, rows: pd.DataFrame) -> SeedScores:
    out = SeedScores(values)
    out.unit = f"{rows.attrs.get('unit', '')}:{','.join(map(str, sorted(rows.index)))}"
    return out


def per_seed(runs: pd.DataFrame, metric: str = "top1", scale: float = 100.0, **match) -> SeedScores:
    """{seed: metric × scale} of the runs whose columns equal `match` (default: final top-1 in percent)."""
    rows = _matched(runs, match)
    return _named({int(s): float(v) * scale for s, v in zip(rows["seed"], rows[metric]) if v is not None}, rows)


def per_seed_scores(runs: pd.DataFrame, **match) -> SeedScores:
    """{seed: per-image correctness} of the runs matching `match`, or {seed: final top-1 in points} without it: what
    `stats` takes as a run's scores."""
    rows = _matched(runs, match)
    correct = rows["correct"] if "correct" in rows else [None] * len(rows)
    return _named({int(s): c if c is not None else 100.0 * float(v)
                   for s, c, v in zip(rows["seed"], correct, rows["top1"])}, rows)


def convergence_columns(runs: pd.DataFrame, epochs: Sequence[int]) -> pd.DataFrame:
    """`runs` with columns val_top1@e and train_top1@e (fractions) read from each run's history."""
    extra = {f"{k}@{e}": [at_epoch(h, e, k) for h in runs["history"]] for e in epochs for k in ("val_top1",
                                                                                                 "train_top1")}
    return runs.assign(**extra)


def clip_epochs(runs: pd.DataFrame, epochs: Sequence[int]) -> tuple[list[int], str]:
    """The requested epochs every run reached (the last epoch when none), and a note on what was clipped."""
    run_epochs = [len(h) for h in runs["history"]] or [0]
    last = min(run_epochs)
    kept = [e for e in epochs if 1 <= e <= last]
    note = "" if kept == list(epochs) else f" Requested epochs {list(epochs)} clipped to the {last} every run has."
    return (kept or ([last] if last else [])), note


def model3_rows(m3: pd.DataFrame | None) -> pd.DataFrame | None:
    """The Model III rows of the [CI] Tables 1-2 frame (it also holds Table 1's other columns, by `form`)."""
    return m3 if m3 is None or "form" not in m3.columns else m3[m3["form"] == MODEL3]

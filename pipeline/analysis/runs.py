"""Read the runs of the current experiment from results/ (their metrics.json files) into pandas frames: the one
results reader of the analysis.

Which runs belong to the experiment is decided by params.yaml through the declared stages (`pipeline.experiments`:
each stage's cells, their results folders and how their rows join a frame), not by what lies in results/; a cell it
plans without a metrics.json is reported missing. Accuracies stay fractions. `top1` is the final model's test top-1
where the run scored the test split (`correct` then holds its per-image correctness, ordered by image), else the
last validation top-1. Where a run also scored the held-out pool of `data.holdout`, `pooled` holds its correctness
on the test images followed by the pool's, for the comparisons the plan reads over both (`Rule.holdout`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.analysis.regime import run_regime
from pipeline.analysis.trained import untrained_note
from pipeline.errors import PipelineError
from pipeline.experiments import CellStage, stages
from pipeline.experiments.ci import MODEL3
from pipeline.outputs import HOLDOUT_CORRECT, TEST_CORRECT

#: the stages' results folder, as their declarations name it
RESULTS = Path("results")
#: the floor@ stages' outputs: results/floor/<dataset>/floor.json (`pipeline.analysis.floor`)
FLOORS = RESULTS / "floor"

#: per-run fields kept from metrics.json (besides the history); absent ones become NaN / ""
RUN_FIELDS = ("top1", "top5", "best_top1", "best_epoch", "train_top1", "val_loss", "train_loss", "epochs",
              "wall_time_s", "images_per_s", "params", "train_size", "val_size", "test_size", "steps", "token_grid",
              "world_size", "git_rev", "python", "torch", "torchvision", "timm", "hardware", "cpu_count",
              "config_digest", "amp_dtype", "data_path", "holdout_top1", "holdout_size")
#: columns every frame gets besides its fields: the validation top-1, per-image correctness and its image indices,
#: and the correctness on the test images then the held-out pool's (None without a pool)
SCORED = ("val_top1", "correct", "images", "pooled")


def read_metrics(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PipelineError(f"{path}: not valid JSON ({exc}); re-run its stage (dvc repro -f <stage>)") from None


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
    row |= {"val_top1": row.get("top1", math.nan), "correct": None, "images": None, "pooled": None}
    if scored is not None:
        row |= {"top1": float(scored[1].mean()), "images": scored[0], "correct": scored[1]}
        pool = read_correct(folder / HOLDOUT_CORRECT)
        if pool is not None:
            row["pooled"] = np.concatenate([scored[1], pool[1]])
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


def key_columns(stage: CellStage) -> list[str]:
    return list(stage.row_keys({axis: "0" for axis in stage.axes}))


def read_floors(directory: str | Path = FLOORS) -> dict[str, dict]:
    """dataset -> the floor.json of each floor@ stage (`pipeline.analysis.floor`) under `directory`."""
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(Path(directory).glob("*/floor.json"))}


def read_frames(results: str | Path, cells: Iterable[tuple[CellStage, dict]]) -> tuple[dict[str, pd.DataFrame],
                                                                                    list[str]]:
    """The runs of `cells` (declared stages' cells, `pipeline.experiments`) by analysis frame: ({frame: one row per
    finished cell, with its key columns, RUN_FIELDS, what its stage records, SCORED, `history` and its `folder`},
    the folders of the cells without a metrics.json). `results` stands for the stages' results/ folder."""
    cells = list(cells)
    rows: dict[str, list[dict]] = {}
    columns: dict[str, dict[str, None]] = {}
    missing = []
    declared = {s.name: s for s in [*stages(), *(stage for stage, _ in cells)] if s.frame}
    for stage in declared.values():
        columns.setdefault(stage.frame, {}).update(dict.fromkeys([*key_columns(stage), *RUN_FIELDS, *stage.records]))
    for stage, cell in cells:
        folder = Path(results) / Path(stage.outs.format(**cell)).relative_to(RESULTS)
        if (folder / "metrics.json").is_file():
            row = _row(read_metrics(folder / "metrics.json"), RUN_FIELDS + stage.records, folder)
            rows.setdefault(stage.frame, []).append(stage.row_keys(cell) | row | {"folder": str(folder)})
        else:
            missing.append(str(folder))
    frames = {frame: pd.DataFrame(rows.get(frame, []), columns=[*names, *SCORED, "history", "folder"])
              for frame, names in columns.items()}
    return frames, missing


def planned_cells(params, frames: Sequence[str] | None = None) -> list[tuple[CellStage, dict]]:
    """Every cell params plans of the declared stages whose runs join `frames` (default: all of them)."""
    return [(stage, cell) for stage in stages() if stage.frame and (frames is None or stage.frame in frames)
            for cell in stage.cells(params)]


def at_epoch(history: list[dict], epoch: int, key: str) -> float:
    """`key` after `epoch` finished epochs (history rows count epochs from 0), NaN when the run is shorter."""
    for row in history:
        if row.get("epoch") == epoch - 1:
            return float(row.get(key, math.nan))
    return math.nan


class SeedScores(dict):
    """{seed: a run's scores} of one run group, naming the group (`unit`), so the claim-level power knows which
    comparisons share one (`stats.terms_of`), and saying which of its runs did not train (`untrained`,
    `pipeline.analysis.trained`), so a comparison resting on them is not taken as evidence."""

    unit: str
    untrained: tuple = ()
    regime: str = ""  #: what its runs were reached with (`pipeline.analysis.regime.run_regime`)
    #: {seed: correctness on the test images then the held-out pool's} when every run scored a pool, else None
    pooled: dict | None = None


def _matched(runs: pd.DataFrame, match: dict) -> pd.DataFrame:
    """The rows whose columns equal `match`: one mask over plain arrays (the claims' bench calls it per simulation)."""
    if not match:
        return runs
    return runs[np.logical_and.reduce([runs[column].to_numpy() == value for column, value in match.items()])]


def _named(values: dict, rows: pd.DataFrame, match: dict) -> SeedScores:
    out = SeedScores(values)
    out.unit = f"{rows.attrs.get('unit', '')}:{','.join(map(str, sorted(rows.index)))}"
    where = sorted(match, key=lambda k: (k not in ("dataset", "variant"), k != "dataset"))  # where, then which arm
    out.untrained = untrained_note(rows, ", ".join(str(match[k]) for k in where) or "a run")
    out.regime = run_regime(rows)
    return out


def per_seed(runs: pd.DataFrame, metric: str = "top1", scale: float = 100.0, **match) -> SeedScores:
    """{seed: metric × scale} of the runs whose columns equal `match` (default: final top-1 in percent)."""
    rows = _matched(runs, match)
    return _named({int(s): float(v) * scale for s, v in zip(rows["seed"], rows[metric]) if v is not None}, rows,
                  match)


def per_seed_scores(runs: pd.DataFrame, **match) -> SeedScores:
    """{seed: per-image correctness} of the runs matching `match`, or {seed: final top-1 in points} without it: what
    `stats` takes as a run's scores."""
    rows = _matched(runs, match)
    correct = rows["correct"] if "correct" in rows else [None] * len(rows)
    out = _named({int(s): c if c is not None else 100.0 * float(v)
                  for s, c, v in zip(rows["seed"], correct, rows["top1"])}, rows, match)
    pooled = list(rows["pooled"]) if "pooled" in rows else []
    if len(rows) and all(p is not None for p in pooled):
        out.pooled = {int(s): p for s, p in zip(rows["seed"], pooled)}
    return out


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

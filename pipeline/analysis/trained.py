"""Were the runs trained? Each run's training status, from its metrics.json history, by paper/plan.yaml `training`.

A run *trained* when its final training loss is below `chance_loss_ratio` × ln(classes) and its final validation
top-1 is at least `min_top1_over_chance` × chance. ln(classes) is what a model that predicts every class alike pays
on any target, one-hot, smoothed or mixed, so a loss near it means the run never left chance (a digits arm at 2.26
against 2.30 did not); the accuracy gate keeps out a model that left chance but stopped far short of a trained one
(30 % on ten classes passes the loss gate, not 4 × 10 %). A comparison resting on such a run is no evidence: its
claim says "not tested" and why (`pipeline.analysis.claims`).

A trained run *plateaued* unless its validation top-1 still rose over its last `plateau_fraction` of evaluated
epochs (at least 3): the rise of a least-squares line through them, from the first of them to the last, must reach
both `plateau_gain` points and `plateau_z` standard errors of that rise (from the line's residuals), so a rise that
one evaluation's noise could make (1,000 validation images at 77 % have a binomial sd of 1.33 points) does not count.
A line through the last epochs, not their level against the epochs before: under a cosine schedule the low-lr
anneal lifts the last quarter's level by about a point in every run, converged or not. A run that had not plateaued
is labelled "still rising" beside its numbers, its top-1 measuring a point on the way, not a trained model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from pipeline.analysis.analysis_plan import TrainingRule
from pipeline.datasets import DATASETS

#: the columns `annotate` adds to a frame
COLUMNS = ("chance_loss", "loss_ratio", "trained", "plateau_gain", "plateau_se", "plateaued", "status")
TRAINED, RISING, UNTRAINED, UNKNOWN = "plateaued", "still rising", "did not train", "unknown"


def plateau_gain(history: Sequence[dict], fraction: float) -> tuple[float, float]:
    """(rise, its standard error) in points of validation top-1 over the last `fraction` of the evaluated epochs, at
    least 3: a least-squares line's rise from the first of them to the last (module docstring); NaNs with fewer
    than 3 evaluated epochs."""
    scores = [100.0 * float(r["val_top1"]) for r in history if r.get("val_top1") is not None]
    k = max(3, math.ceil(fraction * len(scores)))
    if len(scores) < k:
        return math.nan, math.nan
    y, x = scores[-k:], range(k)
    mx, my = (k - 1) / 2, sum(scores[-k:]) / k
    sxx = sum((i - mx) ** 2 for i in x)
    slope = sum((i - mx) * (v - my) for i, v in zip(x, y)) / sxx
    residual = sum((v - my - slope * (i - mx)) ** 2 for i, v in zip(x, y)) / (k - 2)
    return slope * (k - 1), math.sqrt(residual / sxx) * (k - 1)


def status(history: Sequence[dict], train_loss: float, classes: int, rule: TrainingRule) -> dict:
    """One run's training status (the COLUMNS); `unknown` where its dataset's classes or its loss are not known."""
    chance = math.log(classes) if classes and classes > 1 else math.nan
    ratio = float(train_loss) / chance if math.isfinite(chance) and train_loss is not None else math.nan
    gain, se = plateau_gain(history, rule.plateau_fraction)
    rising = gain >= rule.plateau_gain and gain >= rule.plateau_z * se  # NaN (too few evaluations): not rising
    if not math.isfinite(ratio):
        return {"chance_loss": chance, "loss_ratio": ratio, "trained": True, "plateau_gain": gain,
                "plateau_se": se, "plateaued": not rising, "status": UNKNOWN}
    final = [r["val_top1"] for r in history if r.get("val_top1") is not None][-1:]
    accurate = not final or 100.0 * final[0] >= rule.min_top1_over_chance * 100.0 / classes
    trained = ratio < rule.chance_loss_ratio and accurate
    plateaued = trained and not rising
    return {"chance_loss": chance, "loss_ratio": ratio, "trained": trained, "plateau_gain": gain, "plateau_se": se,
            "plateaued": plateaued, "status": UNTRAINED if not trained else TRAINED if plateaued else RISING}


def classes_of(dataset) -> int:
    """A dataset's number of classes from the registry; 0 when unknown (a user folder reads its own)."""
    entry = DATASETS.get(str(dataset)) if isinstance(dataset, str) else None
    return entry.num_classes if entry is not None else 0


def annotate(frame: pd.DataFrame, rule: TrainingRule, dataset: str = "") -> pd.DataFrame:
    """`frame` with each run's training status (COLUMNS); `dataset` stands in where the frame has no such column."""
    if frame.empty:
        return frame.assign(**{c: pd.Series(dtype=object) for c in COLUMNS})
    datasets = frame["dataset"] if "dataset" in frame.columns else pd.Series(dataset, index=frame.index)
    rows = [status(h if isinstance(h, list) else [], loss if pd.notna(loss) else None, classes_of(d), rule)
            for h, loss, d in zip(frame["history"], frame["train_loss"], datasets)]
    return frame.assign(**{c: [r[c] for r in rows] for c in COLUMNS})


def untrained_note(rows: pd.DataFrame, label: str) -> tuple[str, ...]:
    """('<label> did not train (k of n seeds; train loss x, chance y)',) when any of `rows` did not train; () else."""
    if "trained" not in rows.columns or rows.empty:
        return ()
    bad = rows[rows["trained"] == False]  # noqa: E712 (a column of Python bools)
    if bad.empty:
        return ()
    return (f"{label} did not train ({len(bad)} of {len(rows)} seed(s); train loss {bad['train_loss'].mean():.2f},"
            f" chance {bad['chance_loss'].iloc[0]:.2f})",)


def rising_label(rows: pd.DataFrame) -> str:
    """'still rising' (with the count) when some trained runs of `rows` had not plateaued; '' else."""
    if "status" not in rows.columns or rows.empty:
        return ""
    rising = int((rows["status"] == RISING).sum())
    return "" if not rising else "still rising" + ("" if rising == len(rows) else f" ({rising} of {len(rows)})")

"""Seed statistics for the tables and the claims: mean ± std, and paired differences with a t interval.

A claim such as "impulse beats mimetic" is judged on the difference between two arms trained with the *same*
seed (same data order, same augmentation draws; only the init differs), so the seed-to-seed noise they share
cancels. `paired_difference` pairs the two arms' runs by seed and gives the mean difference with a Student-t
confidence interval, mean ± t_{(1+c)/2, n-1} · s/√n (scipy.stats.t). With fewer than two pairs there is no
interval, and the claims say "not enough runs" rather than read a verdict from one number.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from pipeline.errors import PipelineError

#: what a claim asks of a paired difference a − b (in points), given a margin m >= 0
DIRECTIONS = {
    "greater": "a > b (interval above 0)",
    "less": "a < b (interval below 0)",
    "not_worse": "a > b - m (interval above -m)",
    "equivalent": "|a - b| < m (interval inside ±m)",
    "not_greater": "a not above b (interval reaches 0 or below)",
}


def mean_std(values: Sequence[float]) -> tuple[float, float, int]:
    """(mean, sample std with ddof=1, n) of the finite values; std is NaN for n < 2 and mean NaN for n = 0."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if len(x) == 0:
        return math.nan, math.nan, 0
    return float(x.mean()), float(x.std(ddof=1)) if len(x) > 1 else math.nan, len(x)


@dataclass(frozen=True)
class Paired:
    """The paired difference a − b over the seeds both arms ran, with its t confidence interval.

    Values are in the unit of the inputs (the aggregate passes percentage points). `low`/`high` are NaN when
    n < 2 (no interval can be formed).
    """

    a: str
    b: str
    n: int
    mean: float
    std: float
    low: float
    high: float
    confidence: float
    seeds: tuple

    @property
    def enough(self) -> bool:
        """Whether there are at least two pairs, the minimum for an interval."""
        return self.n >= 2

    def supports(self, direction: str, margin: float = 0.0) -> bool:
        """Whether the interval supports `direction` (a key of DIRECTIONS) at this confidence."""
        if not self.enough:
            return False
        tests = {"greater": self.low > 0, "less": self.high < 0, "not_worse": self.low > -margin,
                 "equivalent": -margin < self.low and self.high < margin, "not_greater": self.low <= 0}
        if direction not in tests:
            raise ValueError(f"direction {direction!r}: expected one of {', '.join(DIRECTIONS)}")
        return bool(tests[direction])

    def outcome(self) -> str:
        """Plain words for a two-sided reading: who is better, or that the interval includes 0."""
        if not self.enough:
            return f"not enough runs (n = {self.n})"
        if self.low > 0:
            return f"{self.a} better"
        if self.high < 0:
            return f"{self.a} worse"
        return "no significant difference"

    def as_dict(self) -> dict:
        """JSON-ready (NaN as None)."""
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()} | {
            "seeds": list(self.seeds)}


def paired_difference(a: Mapping[int, float], b: Mapping[int, float], *, confidence: float,
                      labels: tuple[str, str] = ("a", "b")) -> Paired:
    """a − b over the seeds present (and finite) in both mappings seed -> value, with a t interval.

    Args:
        a, b: per-seed values of the two arms (e.g. top-1 in points).
        confidence: two-sided level of the interval, e.g. 0.95.
        labels: names of the two arms, kept in the result for the evidence text.
    """
    if not 0 < confidence < 1:
        raise PipelineError(f"report.confidence = {confidence}: must lie strictly between 0 and 1 (e.g. 0.95)")
    seeds = tuple(sorted(s for s in a.keys() & b.keys() if math.isfinite(a[s]) and math.isfinite(b[s])))
    diffs = np.asarray([a[s] - b[s] for s in seeds], dtype=float)
    mean, std, n = mean_std(diffs)
    if n < 2:
        return Paired(*labels, n, mean, math.nan, math.nan, math.nan, confidence, seeds)
    half = float(stats.t.ppf((1 + confidence) / 2, n - 1)) * std / math.sqrt(n)
    return Paired(*labels, n, mean, std, mean - half, mean + half, confidence, seeds)

"""Seed statistics for the tables and the claims: mean ± std, paired differences with a t interval, verdicts.

A claim such as "impulse beats mimetic" is judged on the difference between two arms trained with the *same*
seed (same data order, same augmentation draws; only the init differs), so the seed-to-seed noise they share
cancels. `paired_difference` pairs the two arms' runs by seed and gives the mean difference with the two-sided
Student-t interval at the report's confidence c (`scipy.stats.ttest_rel(...).confidence_interval(c)`: mean ±
t_{(1+c)/2, n-1} · s/√n; no normal shortcut, so n = 3 gives the wide interval it should).

A comparison asks the interval to lie on one side of a boundary (`Criterion`: a direction and a margin), and reads
one of three words (`verdict`):

- **supported**: the interval lies entirely on the claimed side of the boundary;
- **contradicted**: it lies entirely on the other side (the reverse holds beyond seed noise);
- **inconclusive**: it spans the boundary, or there are fewer than two seed pairs (no interval).

Equivalence ("≈", |a − b| < m) is supported when the interval lies inside ±m and contradicted when it lies
entirely outside it; every test reads the same (1 + c)/2 one-sided bound on each side, so an equivalence test at
c = 0.95 is two one-sided tests at 2.5 % each (conservative against the usual 5 %).

`pairs_needed` is the power estimate of an inconclusive comparison: the smallest number of seed pairs whose
interval, at the observed mean difference and standard deviation, would clear the boundary (searched up to
`MAX_PAIRS`). It is a planning figure, not a promise: the next seeds' mean and spread will differ, and if the
observed ones are the true ones, a new experiment of exactly that size clears the boundary only about half the
time (a few pairs more give the usual 80 %).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from pipeline.errors import PipelineError

SUPPORTED, CONTRADICTED, INCONCLUSIVE = "supported", "contradicted", "inconclusive"
#: the search limit of the power estimate (seed pairs); beyond it a comparison is called undecidable in practice
MAX_PAIRS = 100

#: what a comparison asks of the paired difference a − b (in points), given a margin m >= 0
DIRECTIONS = {
    "greater": "> 0",
    "less": "< 0",
    "not_worse": "> -m",  # non-inferiority: a at most m below b
    "not_better": "< +m",  # no gain: a at most m above b
    "equivalent": "inside ±m",  # |a - b| < m
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
    x, y = np.asarray([a[s] for s in seeds], dtype=float), np.asarray([b[s] for s in seeds], dtype=float)
    mean, std, n = mean_std(x - y)
    if n < 2:
        return Paired(*labels, n, mean, math.nan, math.nan, math.nan, confidence, seeds)
    if std == 0:  # identical differences: the interval is the point (scipy warns about the cancellation)
        return Paired(*labels, n, mean, std, mean, mean, confidence, seeds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # near-identical differences: precision note only
        ci = stats.ttest_rel(x, y).confidence_interval(confidence)
    return Paired(*labels, n, mean, std, float(ci.low), float(ci.high), confidence, seeds)


@dataclass(frozen=True)
class Criterion:
    """What a comparison asks of the paired difference: a key of DIRECTIONS and a margin m >= 0 (points)."""

    direction: str
    margin: float = 0.0

    def __post_init__(self):
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction {self.direction!r}: expected one of {', '.join(DIRECTIONS)}")
        if self.margin < 0:
            raise ValueError(f"margin {self.margin}: must be >= 0")

    @property
    def boundary(self) -> str:
        """The boundary in words: '0', '-2', '+0.5' or '±2'."""
        m = f"{self.margin:g}"
        return {"greater": "0", "less": "0", "not_worse": f"-{m}", "not_better": f"+{m}", "equivalent": f"±{m}"}[
            self.direction]

    @property
    def need(self) -> str:
        """The condition on the interval in words, e.g. '> -2' or 'inside ±2'."""
        return DIRECTIONS[self.direction].replace("m", f"{self.margin:g}")

    def verdict(self, low: float, high: float) -> str:
        """supported / contradicted / inconclusive for the interval [low, high] (NaN: inconclusive)."""
        if not (math.isfinite(low) and math.isfinite(high)):
            return INCONCLUSIVE
        m = self.margin
        supported, contradicted = {
            "greater": (low > 0, high < 0),
            "less": (high < 0, low > 0),
            "not_worse": (low > -m, high < -m),
            "not_better": (high < m, low > m),
            "equivalent": (-m < low and high < m, high < -m or low > m),
        }[self.direction]
        return SUPPORTED if supported else CONTRADICTED if contradicted else INCONCLUSIVE

    def gap(self, mean: float) -> float:
        """How far `mean` lies from the boundary that would decide the comparison (>= 0; 0 = on it).

        An interval around `mean` whose half-width is below this gap is decisive: supported when `mean` is on
        the claimed side, contradicted when it is on the other.
        """
        if self.direction == "equivalent":
            return abs(self.margin - abs(mean))
        boundary = {"greater": 0.0, "less": 0.0, "not_worse": -self.margin, "not_better": self.margin}
        return abs(mean - boundary[self.direction])


@dataclass(frozen=True)
class Power:
    """What would decide an inconclusive comparison: seed pairs needed at the observed mean and spread.

    `pairs` is None when no feasible number decides it (fewer than two pairs so far, the mean on the boundary,
    or more than MAX_PAIRS needed); `reaches` is the verdict those pairs would give; `text` says it in words.
    """

    pairs: int | None
    reaches: str | None
    text: str


def pairs_needed(p: Paired, criterion: Criterion, max_pairs: int = MAX_PAIRS) -> Power:
    """The smallest n <= max_pairs whose t interval at p's mean and std would clear the deciding boundary.

    For n = 2, 3, ...: half-width h(n) = t_{(1+c)/2, n-1} · std / √n (scipy.stats.t), decisive once h(n) <
    `criterion.gap(mean)`. The verdict reached is supported when the observed mean lies on the claimed side and
    contradicted when it lies on the other (then more seeds would not support the claim).
    """
    if not p.enough:
        return Power(None, None, f"too few seed pairs for an interval (n = {p.n}); the spread is unknown until at"
                                 " least 2 seeds per arm have run")
    gap, need = criterion.gap(p.mean), criterion.need
    reaches = criterion.verdict(p.mean, p.mean)  # a zero-width interval at the mean: the side it lies on
    if gap == 0 or reaches == INCONCLUSIVE:
        return Power(None, None, f"the observed mean {p.mean:+.2f} lies on the boundary ({need}): no number of seeds"
                                 " decides it")
    n = np.arange(2, max_pairs + 1)
    half = stats.t.ppf((1 + p.confidence) / 2, n - 1) * p.std / np.sqrt(n)
    decisive = np.flatnonzero(half < gap)
    side = "" if reaches == SUPPORTED else (" (the observed mean lies on the contradicting side: more seeds would"
                                            " not support the claim)")
    if not len(decisive):
        return Power(None, reaches, f"the observed mean {p.mean:+.2f} is too close to the boundary ({need}) for"
                                    f" the observed sd {p.std:.2f}: more than {max_pairs} seed pairs (the search"
                                    f" stops there) would be needed{side}")
    pairs = int(n[decisive[0]])
    return Power(pairs, reaches, f"at the observed mean {p.mean:+.2f} and sd {p.std:.2f}, {pairs} seed pairs"
                                 f" would make it {reaches}{side}")

"""Estimates, tests and power for the verdicts: one comparison over seeds and test images.

D, the mean over seeds and test images of c_a − c_b in points, estimates δ over both sources of sampling. Paired
arms (`crossed`): Var(D) ≈ var_s(d_s)/n + var_i(z_i)/N (the crossed decomposition with the interaction counted
twice, conservative) on the seeds' n − 1 degrees of freedom; Welch–Satterthwaite's undercover at 3 seeds
(bench/bench_verdicts.py). Without per-image scores: scipy's paired t. Unpaired arms: Welch's degrees of
freedom for the seed terms (Welch 1947).

`Criterion`: one-sided tests at α read from the printed 1 − 2α interval; equivalence is TOST (Schuirmann 1987);
the reverse hypothesis gets its own p-value for `holm`. Power (`detectable_effect`, `seeds_for`) is statsmodels'
noncentral t at this run's variance components, never at the observed difference.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np
from scipy import stats
from statsmodels.stats.power import TTestIndPower, TTestPower

from pipeline.errors import PipelineError

SUPPORTED, CONTRADICTED, INCONCLUSIVE = "supported", "contradicted", "inconclusive"
#: the interval kinds of the plan: paired over seeds and images, unpaired (Welch), over seeds only
PAIRED, WELCH, SEEDS = "paired", "welch", "seeds"
#: how far `seeds_for` searches (seeds per arm) before it says no feasible number does it
MAX_SEEDS = 1000

#: what a comparison asks of the difference a − b (in points), given a margin m >= 0
DIRECTIONS = {
    "greater": "> +m",  # a above b (by more than m)
    "less": "< -m",  # a below b (by more than m: "clearly worse")
    "not_worse": "> -m",  # non-inferiority: a at most m below b
    "not_better": "< +m",  # no gain: a at most m above b
    "equivalent": "inside ±m",  # |a - b| < m, two one-sided tests
}

#: per seed, what a run contributes: its accuracy in points, or its per-image correctness (0/1) on the test images
Scores = float | np.ndarray


def mean_std(values: Sequence[float]) -> tuple[float, float, int]:
    """(mean, sample std with ddof=1, n) of the finite values; std is NaN for n < 2 and mean NaN for n = 0."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if len(x) == 0:
        return math.nan, math.nan, 0
    return float(x.mean()), float(x.std(ddof=1)) if len(x) > 1 else math.nan, len(x)


@dataclass(frozen=True)
class Estimate:
    """A difference a − b in points: its mean, standard error, t interval and variance components (points):
    `seed_sds` (paired: the seed difference's sd; Welch: each arm's), `image_sd` and `interaction_sds` from the
    two-way decomposition (0 over seeds only); `low`/`high` NaN when an arm has fewer than two runs."""

    a: str
    b: str
    kind: str  #: PAIRED | WELCH | SEEDS
    n: int  #: seed pairs (paired, seeds) or runs of a (welch)
    n_b: int  #: runs of b (welch); n otherwise
    images: int
    mean: float
    se: float
    df: float
    low: float
    high: float
    confidence: float
    seed_sds: tuple
    image_sd: float
    interaction_sds: tuple
    seeds: tuple
    per_seed: tuple = ()  #: paired / seeds: each seed's difference (points), in the order of `seeds`
    runs: tuple = ()  #: Welch: (a's runs, b's runs) in points
    terms: tuple = ()  #: ((run group, weight), ...) of the contrast when the inputs name their groups
    untrained: tuple = ()  #: the inputs' runs that did not train (`runs.SeedScores`): no evidence while non-empty
    #: the inputs' regime (`runs.SeedScores.regime`: images, steps, tokens, parameters), each distinct one once
    regime: str = ""
    pool: bool = False  #: the images are the test split's and the held-out pool's (`data.holdout`)
    #: each input arm's mean top-1 (%) over the runs compared (paired: the seeds every arm ran), in input order
    arm_means: tuple = ()

    @property
    def enough(self) -> bool:
        return min(self.n, self.n_b) >= 2

    @property
    def std(self) -> float:
        """The sd of a seed's difference (paired); the root mean square of the two arms' sds (Welch)."""
        return float(np.sqrt(np.mean(np.square(self.seed_sds)))) if self.seed_sds else math.nan

    def p_above(self, boundary: float) -> float:
        """One-sided p-value against δ <= boundary (small: δ lies above it)."""
        return self._p(boundary, upper=True)

    def p_below(self, boundary: float) -> float:
        """One-sided p-value against δ >= boundary (small: δ lies below it)."""
        return self._p(boundary, upper=False)

    def _p(self, boundary: float, upper: bool) -> float:
        if not self.enough:
            return math.nan
        if self.se == 0:  # identical differences: the point decides
            return 0.0 if (self.mean > boundary if upper else self.mean < boundary) else 1.0
        t = (self.mean - boundary) / self.se
        return float(stats.t.sf(t, self.df) if upper else stats.t.cdf(t, self.df))

    def se_at(self, n: int | tuple[int, int]) -> float:
        """The standard error with `n` seeds (Welch: (n_a, n_b) runs) at these variance components and test images."""
        ns = (n if isinstance(n, tuple) else (n, n)) if self.kind == WELCH else (n[0] if isinstance(n, tuple) else n,)
        seed = sum(sd * sd / k for sd, k in zip(self.seed_sds, ns))
        if not self.images:
            return math.sqrt(seed)
        image = self.image_sd ** 2 + sum(sd * sd / k for sd, k in zip(self.interaction_sds, ns))
        return math.sqrt(seed + image / self.images)

    def as_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()} | {
            "seeds": list(self.seeds), "seed_sds": [None if math.isnan(s) else s for s in self.seed_sds],
            "interaction_sds": [None if math.isnan(s) else s for s in self.interaction_sds],
            "std": None if math.isnan(self.std) else self.std, "per_seed": list(self.per_seed),
            "runs": [list(r) for r in self.runs], "terms": [list(t) for t in self.terms],
            "untrained": list(self.untrained), "arm_means": [None if math.isnan(m) else m for m in self.arm_means]}


def satterthwaite(variances: Sequence[float], dfs: Sequence[float]) -> float:
    """Welch–Satterthwaite degrees of freedom of a sum of variance terms (the smallest when every term is 0)."""
    total = sum(variances)
    denominator = sum(v * v / d for v, d in zip(variances, dfs) if v > 0)
    return total * total / denominator if denominator > 0 else min(dfs)


def _interval(mean: float, se: float, df: float, confidence: float) -> tuple[float, float]:
    half = float(stats.t.ppf((1 + confidence) / 2, df)) * se
    return mean - half, mean + half


def interaction_var(x: np.ndarray) -> float:
    """The seed × image residual mean square of x (the two-way ANOVA's error term)."""
    r = x - x.mean(axis=1, keepdims=True) - x.mean(axis=0, keepdims=True) + x.mean()
    return float((r * r).sum() / ((x.shape[0] - 1) * (x.shape[1] - 1)))


def _check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise PipelineError(f"confidence {confidence}: must lie strictly between 0 and 1 (e.g. 0.95, i.e. a"
                            " one-sided alpha of 0.025)")


def _matrix(per_seed: Sequence[Scores]) -> np.ndarray | None:
    arrays = [s for s in per_seed if isinstance(s, np.ndarray) and s.ndim == 1 and s.size > 1]
    if not per_seed or len(arrays) != len(per_seed) or len({a.size for a in arrays}) != 1:
        return None
    return 100.0 * np.stack(arrays).astype(float)


def _value(score: Scores) -> float:
    return 100.0 * float(np.mean(score)) if isinstance(score, np.ndarray) else float(score)


def _finite(score: Scores) -> bool:
    return isinstance(score, np.ndarray) or (score is not None and math.isfinite(score))


def terms_of(arms: Sequence[Mapping[int, Scores]], weights: Sequence[float]) -> tuple:
    """((run group, weight), ...) of a contrast whose inputs name their run group (`runs.SeedScores`); () otherwise.
    `power` reads from them which comparisons share a run group."""
    units = [getattr(a, "unit", None) for a in arms]
    return () if any(u is None for u in units) else tuple((u, float(w)) for u, w in zip(units, weights))


def regime_of(arms: Sequence[Mapping[int, Scores]]) -> str:
    """The regime the inputs were reached in (`runs.SeedScores.regime`), each distinct one once, '; '-joined."""
    return "; ".join(dict.fromkeys(r for a in arms if (r := getattr(a, "regime", ""))))


def untrained_of(arms: Sequence[Mapping[int, Scores]]) -> tuple:
    """What the inputs say of their runs that did not train (`runs.SeedScores.untrained`), each once."""
    return tuple(dict.fromkeys(note for a in arms for note in getattr(a, "untrained", ())))


def crossed(x: np.ndarray, confidence: float, labels: tuple[str, str], seeds: tuple = (),
            terms: tuple = ()) -> Estimate:
    """The paired estimate from x: seeds × images (per-image differences, points) or seeds (module docstring)."""
    _check_confidence(confidence)
    x = np.asarray(x, dtype=float)
    n = x.shape[0]
    images = x.shape[1] if x.ndim == 2 else 0
    d = x.mean(axis=1) if images else x
    mean = float(d.mean()) if n else math.nan
    per_seed = tuple(float(v) for v in d)
    if n < 2:
        return Estimate(*labels, PAIRED if images else SEEDS, n, n, images, mean, math.nan, math.nan, math.nan,
                        math.nan, confidence, (math.nan,), math.nan, (math.nan,), seeds, per_seed, (), terms)
    seed_var = float(d.var(ddof=1))
    image_var = float(x.mean(axis=0).var(ddof=1)) if images else 0.0
    se = math.sqrt(seed_var / n + (image_var / images if images else 0.0))
    df = float(n - 1)  # the seeds' (module docstring)
    low, high = _interval(mean, se, df, confidence)
    residual = interaction_var(x) if images else 0.0
    return Estimate(*labels, PAIRED if images else SEEDS, n, n, images, mean, se, df, low, high, confidence,
                    (math.sqrt(seed_var),), math.sqrt(max(0.0, image_var - residual / n)), (math.sqrt(residual),),
                    seeds, per_seed, (), terms)


def paired_contrast(arms: Sequence[Mapping[int, Scores]], weights: Sequence[float], *, confidence: float,
                    labels: tuple[str, str], images: bool = True) -> Estimate:
    """Σ_k weights[k] · arm_k over the seeds every arm ran, e.g. (1, −1) for a − b or (1, −1, −1, 1) for a difference
    of two gains; over images too where every run has per-image correctness."""
    seeds = tuple(sorted(set.intersection(*(set(k for k, v in a.items() if _finite(v)) for a in arms))))
    per_arm = [[a[s] for s in seeds] for a in arms]
    matrices = [_matrix(p) for p in per_arm] if images else [None]
    if seeds and all(m is not None for m in matrices) and len({m.shape for m in matrices}) == 1:
        x = sum(w * m for w, m in zip(weights, matrices))
    else:
        x = np.asarray([sum(w * _value(p[j]) for w, p in zip(weights, per_arm)) for j in range(len(seeds))])
    means = tuple(float(np.mean([_value(v) for v in p])) if p else math.nan for p in per_arm)
    return replace(crossed(x, confidence, labels, seeds, terms_of(arms, weights)), untrained=untrained_of(arms),
                   regime=regime_of(arms), arm_means=means)


def paired_difference(a: Mapping[int, Scores], b: Mapping[int, Scores], *, confidence: float,
                      labels: tuple[str, str] = ("a", "b"), images: bool = True) -> Estimate:
    """a − b over the seeds both ran (same seed: same init draw of the other weights, data order, subset)."""
    return paired_contrast([a, b], [1.0, -1.0], confidence=confidence, labels=labels, images=images)


def unpaired_difference(a: Mapping[int, Scores], b: Mapping[int, Scores], *, confidence: float,
                        labels: tuple[str, str] = ("a", "b"), images: bool = True) -> Estimate:
    """a − b from every run of each arm (Welch), with the image term when every run has per-image correctness."""
    _check_confidence(confidence)
    runs_a, runs_b = [v for v in a.values() if _finite(v)], [v for v in b.values() if _finite(v)]
    va, vb = np.asarray([_value(v) for v in runs_a]), np.asarray([_value(v) for v in runs_b])
    na, nb = len(va), len(vb)
    mean = float(va.mean() - vb.mean()) if na and nb else math.nan
    values, groups = (tuple(map(float, va)), tuple(map(float, vb))), terms_of([a, b], [1.0, -1.0])
    untrained, regime = untrained_of([a, b]), regime_of([a, b])
    means = tuple(float(v.mean()) if v.size else math.nan for v in (va, vb))
    if min(na, nb) < 2:
        return Estimate(*labels, WELCH, na, nb, 0, mean, math.nan, math.nan, math.nan, math.nan, confidence,
                        (math.nan, math.nan), math.nan, (math.nan, math.nan), (), (), values, groups, untrained,
                        regime, arm_means=means)
    ma, mb = (_matrix(runs_a), _matrix(runs_b)) if images else (None, None)
    n_images = ma.shape[1] if ma is not None and mb is not None and ma.shape[1] == mb.shape[1] else 0
    sa, sb = float(va.std(ddof=1)), float(vb.std(ddof=1))
    image_var = float((ma.mean(axis=0) - mb.mean(axis=0)).var(ddof=1)) if n_images else 0.0
    terms = [sa * sa / na, sb * sb / nb]
    se = math.sqrt(sum(terms) + (image_var / n_images if n_images else 0.0))
    df = satterthwaite(terms, [na - 1, nb - 1])  # the seed terms' (module docstring)
    low, high = _interval(mean, se, df, confidence)
    residual = (interaction_var(ma), interaction_var(mb)) if n_images else (0.0, 0.0)
    own = max(0.0, image_var - residual[0] / na - residual[1] / nb)
    return Estimate(*labels, WELCH, na, nb, n_images, mean, se, df, low, high, confidence, (sa, sb),
                    math.sqrt(own), (math.sqrt(residual[0]), math.sqrt(residual[1])), (), (), values, groups,
                    untrained, regime, arm_means=means)


@dataclass(frozen=True)
class Criterion:
    """What a comparison asks of the difference: a key of DIRECTIONS and a margin m >= 0 (points)."""

    direction: str
    margin: float = 0.0

    def __post_init__(self):
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction {self.direction!r}: expected one of {', '.join(DIRECTIONS)}")
        if not self.margin >= 0:
            raise ValueError(f"margin {self.margin}: must be >= 0")

    @property
    def boundary(self) -> str:
        m = f"{self.margin:g}"
        if self.direction == "equivalent":
            return f"±{m}"
        value = self.edge
        return "0" if value == 0 else f"{value:+g}"

    @property
    def edge(self) -> float:
        """The boundary as a number (equivalence: its upper edge, +m)."""
        return {"greater": self.margin, "less": -self.margin, "not_worse": -self.margin,
                "not_better": self.margin, "equivalent": self.margin}[self.direction]

    @property
    def upward(self) -> bool:
        return self.direction in ("greater", "not_worse")

    @property
    def need(self) -> str:
        m = f"{self.margin:g}"
        return DIRECTIONS[self.direction].replace("+m", f"+{m}" if self.margin else "0").replace(
            "-m", f"-{m}" if self.margin else "0").replace("±m", f"±{m}")

    def p_supported(self, e: Estimate) -> float:
        """The p-value of the claimed side (small: supported); for equivalence the larger of TOST's two."""
        if self.direction == "equivalent":
            return max(e.p_above(-self.margin), e.p_below(self.margin))
        return e.p_above(self.edge) if self.upward else e.p_below(self.edge)

    def p_reverse(self, e: Estimate) -> float:
        """The p-value of the reverse hypothesis (small: the reverse holds); for equivalence, of lying outside ±m on the
        nearer side."""
        if self.direction == "equivalent":
            return min(e.p_above(self.margin), e.p_below(-self.margin))
        return e.p_below(self.edge) if self.upward else e.p_above(self.edge)

    def distance(self, effect: float) -> float:
        """How far a true difference `effect` lies from the boundary on the claimed side (< 0: the wrong side)."""
        if self.direction == "equivalent":
            return self.margin - abs(effect)
        return effect - self.edge if self.upward else self.edge - effect


def holm(p_values: Sequence[float], alpha: float) -> tuple[list[bool], list[float]]:
    """Holm's step-down rejections and adjusted p-values at family-wise `alpha` (Holm 1979); a NaN p-value is never
    rejected. statsmodels' `multipletests(method='holm')` gives the same (tests/test_stats.py) but calls
    gc.collect() on every call, too slow for the calibration bench's thousands of families."""
    p = np.nan_to_num(np.asarray(p_values, dtype=float), nan=1.0)
    m = len(p)
    order = np.argsort(p, kind="stable")
    adjusted_sorted = np.minimum(1.0, np.maximum.accumulate(p[order] * np.arange(m, 0, -1)))
    adjusted = np.empty(m)
    adjusted[order] = adjusted_sorted
    return [bool(a <= alpha) for a in adjusted], [float(a) for a in adjusted]


def _noncentrality(e: Estimate, n: int | tuple[int, int], alpha: float, power: float) -> float:
    """The noncentrality the one-sided test at `alpha` needs for `power` with n seeds (statsmodels')."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # statsmodels' root finder notes its brackets
        if e.kind == WELCH:
            n_a, n_b = n if isinstance(n, tuple) else (n, n)
            d = TTestIndPower().solve_power(nobs1=n_a, ratio=n_b / n_a, alpha=alpha, power=power,
                                            alternative="larger")
            return float(d) * math.sqrt(n_a * n_b / (n_a + n_b))
        k = n[0] if isinstance(n, tuple) else n
        return float(TTestPower().solve_power(nobs=k, alpha=alpha, power=power, alternative="larger")) * math.sqrt(k)


def detectable_effect(e: Estimate, criterion: Criterion, n: int | tuple[int, int], alpha: float,
                      power: float) -> float:
    """The minimal detectable effect: how far beyond the boundary a true difference must lie for the planned n to find
    it with `power` (equivalence: each one-sided test at 1 − (1 − power)/2)."""
    if not e.enough or min(n if isinstance(n, tuple) else (n,)) < 2:
        return math.nan
    side = 1 - (1 - power) / 2 if criterion.direction == "equivalent" else power
    return _noncentrality(e, n, alpha, side) * e.se_at(n)


def seeds_for(e: Estimate, criterion: Criterion, effect: float, alpha: float, power: float,
              max_seeds: int = MAX_SEEDS) -> int | None:
    """Seeds per arm a new experiment needs for `power` at a true difference `effect`, at this run's variance
    components; None when none up to `max_seeds` does."""
    distance = criterion.distance(effect)
    if not e.enough or distance <= 0:
        return None
    side = 1 - (1 - power) / 2 if criterion.direction == "equivalent" else power
    n = np.arange(2, max_seeds + 1)
    se = np.asarray([e.se_at(int(k)) for k in n])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if e.kind == WELCH:  # equal runs per arm: noncentrality δ / se = d √(n/2)
            reached = TTestIndPower().power(effect_size=distance / (se * np.sqrt(n / 2)), nobs1=n, ratio=1.0,
                                            alpha=alpha, alternative="larger")
        else:  # noncentrality δ / se = d √n
            reached = TTestPower().power(effect_size=distance / (se * np.sqrt(n)), nobs=n, alpha=alpha,
                                         alternative="larger")
    enough = np.flatnonzero(np.asarray(reached) >= side)
    return int(n[enough[0]]) if len(enough) else None

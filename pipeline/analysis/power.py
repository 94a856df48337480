"""The power of a claim: the probability that every comparison it needs is supported, not one comparison's.

Comparisons that share a run group (impulse − mimetic and mimetic − default) are correlated, so the product of
their powers is not it. Under the intervals' model (`stats`), each run group's seed effects are drawn normal and
shared by the comparisons that contrast it (`Estimate.terms`), and each comparison is tested as
`stats.Criterion` tests it: a Monte-Carlo mean over fixed draws (reproducible, and monotone in the effect, so
bisection finds the detectable effect), to about ±0.01. bench/bench_verdicts.py checks it by simulation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

from pipeline.analysis.analysis_plan import Rule
from pipeline.analysis.stats import SEEDS, WELCH, Criterion, Estimate, satterthwaite

#: Monte-Carlo draws per stated probability: its standard error is at most 0.5 / √MC_DRAWS ≈ 0.008
MC_DRAWS = 4000
#: draws per probability inside the searches (detectable effect, seeds, seed sd): their answers are ±1 step
SEARCH_DRAWS = 1000
#: how far `seeds_needed` searches (seeds per arm)
MAX_SEEDS = 100


@dataclass(frozen=True)
class Planned:
    """One comparison as the power calculation sees it: its test, its planned n and its variance components."""

    criterion: Criterion
    alpha: float
    n: int | tuple[int, int]  #: seeds per arm (welch: runs of a and of b)
    seed_sds: tuple  #: paired: (sd of a seed's difference,); welch: (sd of a's runs, sd of b's runs)
    image_sd: float = 0.0  #: sd of an image's own difference (points): the term that does not shrink with seeds
    interaction_sd: float = 0.0  #: seed × image residual sd (points; divided by n, then by the images)
    images: int = 0  #: test images the interval is over (0: over seeds only)
    terms: tuple = ()  #: ((run group, weight), ...); () = a group of its own
    kind: str = "paired"

    def image_se(self, n: int) -> float:
        if not self.images:
            return 0.0
        return math.sqrt((self.image_sd ** 2 + self.interaction_sd ** 2 / n) / self.images)

    def at(self, n: int) -> Planned:
        return replace(self, n=(n, n) if self.kind == WELCH else n)

    def scaled(self, factor: float) -> Planned:
        return replace(self, seed_sds=tuple(s * factor for s in self.seed_sds))


def at_distance(c: Planned, distance: float) -> float:
    """The true difference `distance` points beyond the comparison's boundary on its claimed side (equivalence:
    |δ| = margin − distance, 0 at most)."""
    cr = c.criterion
    if cr.direction == "equivalent":
        return max(0.0, cr.margin - distance)
    return cr.edge + distance if cr.upward else cr.edge - distance


def _passes(cr: Criterion, mean: np.ndarray, se: np.ndarray, critical: float) -> np.ndarray:
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):  # se 0: the point decides, as in stats
        if cr.direction == "equivalent":
            return ((mean + cr.margin) / se > critical) & ((mean - cr.margin) / se < -critical)
        t = (mean - cr.edge) / se
    return t > critical if cr.upward else t < -critical


def _welch_power(c: Planned, delta: float) -> float:
    """P(supported) of one Welch comparison: noncentral t at the planned runs and Satterthwaite's df."""
    na, nb = c.n
    sa, sb = c.seed_sds
    parts = [sa * sa / na, sb * sb / nb]
    se = math.sqrt(sum(parts) + c.image_se(min(na, nb)) ** 2)
    df = satterthwaite(parts, [na - 1, nb - 1])
    critical = stats.t.ppf(1 - c.alpha, df)
    if c.criterion.direction == "equivalent":  # TOST: both sides
        low = stats.nct.sf(critical, df, (delta + c.criterion.margin) / se)
        high = stats.nct.cdf(-critical, df, (delta - c.criterion.margin) / se)
        return float(max(0.0, low + high - 1))
    shift = (delta - c.criterion.edge) / se
    return float(stats.nct.sf(critical, df, shift) if c.criterion.upward else stats.nct.cdf(-critical, df, shift))


def claim_power(comparisons: Sequence[Planned], deltas: Sequence[float], draws: int = MC_DRAWS,
                seed: int = 0) -> float:
    """P(every comparison supported) when comparison k's true difference is deltas[k] (module docstring)."""
    if not comparisons:
        return math.nan
    welch = [k for k, c in enumerate(comparisons) if c.kind == WELCH]
    if welch:
        if len(comparisons) > 1:
            raise ValueError("a Welch comparison is powered alone; split the claim's comparisons")
        return _welch_power(comparisons[0], deltas[0])
    ns = [int(c.n) for c in comparisons]
    if min(ns) < 2:
        return math.nan
    units: dict = {}
    weights = []
    for k, c in enumerate(comparisons):
        terms = c.terms or ((f"own:{k}", 1.0),)
        weights.append({units.setdefault(u, len(units)): w for u, w in terms})
    W = np.zeros((len(comparisons), len(units)))
    for k, row in enumerate(weights):
        for u, w in row.items():
            W[k, u] += w
    norm = np.linalg.norm(W, axis=1)
    seed_scale = np.asarray([c.seed_sds[0] for c in comparisons]) / norm
    image_se = np.asarray([c.image_se(n) for c, n in zip(comparisons, ns)])
    rng = np.random.default_rng(seed)
    image = (rng.standard_normal((draws, len(units))) @ W.T) * (image_se / norm)
    total = np.zeros((draws, len(comparisons)))
    square = np.zeros_like(total)
    means, variances = np.zeros_like(total), np.zeros_like(total)
    for s in range(max(ns)):
        d = (rng.standard_normal((draws, len(units))) @ W.T) * seed_scale
        total += d
        square += d * d
        for k, n in enumerate(ns):
            if s + 1 == n:
                means[:, k] = total[:, k] / n
                variances[:, k] = (square[:, k] - n * means[:, k] ** 2) / (n - 1)
    ok = np.ones(draws, dtype=bool)
    for k, (c, n) in enumerate(zip(comparisons, ns)):
        se = np.sqrt(np.maximum(variances[:, k], 0.0) / n + image_se[k] ** 2)
        ok &= _passes(c.criterion, deltas[k] + means[:, k] + image[:, k], se, stats.t.ppf(1 - c.alpha, n - 1))
    return float(ok.mean())


def mc_error(p: float, draws: int = MC_DRAWS) -> float:
    return math.sqrt(max(p * (1 - p), 0.0) / draws) if math.isfinite(p) else math.nan


def claim_detectable(comparisons: Sequence[Planned], power: float, limit: float = 100.0) -> float:
    """The distance beyond every comparison's boundary (points, the same for each) at which the claim is supported
    with `power`; NaN when none up to `limit` does."""
    def reached(d: float) -> bool:
        return claim_power(comparisons, [at_distance(c, d) for c in comparisons], SEARCH_DRAWS) >= power
    if not comparisons or not reached(limit):
        return math.nan
    low, high = 0.0, limit
    while high - low > 0.05:
        mid = (low + high) / 2
        low, high = (low, mid) if reached(mid) else (mid, high)
    return high


def seeds_needed(comparisons: Sequence[Planned], deltas: Sequence[float], power: float,
                 max_seeds: int = MAX_SEEDS) -> int | None:
    """The fewest seeds per arm (2 or more) at which the claim is supported with `power` at these differences and
    variance components; None when `max_seeds` do not."""
    def reached(n: int) -> bool:
        return claim_power([c.at(n) for c in comparisons], deltas, SEARCH_DRAWS) >= power
    if not comparisons or not reached(max_seeds):
        return None
    low, high = 1, max_seeds  # reached(high); low is below the search range
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if reached(mid) else (mid, high)
    return high


def sd_needed(comparisons: Sequence[Planned], deltas: Sequence[float], power: float) -> float | None:
    """The largest factor on every comparison's seed sd at which the planned n decide the claim with `power` (None:
    the test images' term alone is too large)."""
    def reached(f: float) -> bool:
        return claim_power([c.scaled(f) for c in comparisons], deltas, SEARCH_DRAWS) >= power
    if not comparisons or not reached(1e-3):
        return None
    if reached(1.0):
        return 1.0
    low, high = 1e-3, 1.0
    while high / low > 1.02:
        mid = math.sqrt(low * high)
        low, high = (mid, high) if reached(mid) else (low, mid)
    return low



def planned_from_estimate(e: Estimate, rule: Rule) -> Planned:
    """A comparison at its planned n with this run's variance components (a run group per `e.terms`)."""
    if e.kind == WELCH:
        inter = math.sqrt(sum(s * s for s in e.interaction_sds))
        return Planned(rule.criterion, rule.alpha, tuple(rule.n), tuple(e.seed_sds), e.image_sd, inter, e.images,
                       e.terms, WELCH)
    return Planned(rule.criterion, rule.alpha, rule.n[0], (e.std,), e.image_sd, e.interaction_sds[0], e.images,
                   e.terms)


def planned_from_rule(rule: Rule, images: int, terms: tuple = ()) -> Planned:
    """A comparison at its planned n with the plan's assumed variance components (`seed_sd`, `image_sd`)."""
    images = 0 if rule.interval == SEEDS else images
    if rule.interval == WELCH:
        half = rule.seed_sd / math.sqrt(2)
        return Planned(rule.criterion, rule.alpha, tuple(rule.n), (half, half), rule.image_sd, 0.0, images, terms,
                       WELCH)
    return Planned(rule.criterion, rule.alpha, rule.n[0], (rule.seed_sd,), rule.image_sd, 0.0, images, terms)


def summary(planned: Sequence[Planned], rules: Sequence[Rule], source: str) -> dict:
    """A claim's power at its plan: the distance its planned n detect and, when short, the seeds or the seed sd that
    would reach the plan's power. `source` says whose variance components these are."""
    target = rules[0].power
    effects = [r.effect for r in rules]
    singles = [claim_power([p], [r.effect]) for p, r in zip(planned, rules)]
    power = claim_power(planned, effects)
    out = {"source": source, "comparisons": len(planned), "target": target, "power": power,
           "mc_error": mc_error(power), "weakest_alone": min(singles), "detectable": claim_detectable(planned, target),
           "seeds_needed": None, "sd_factor": None,
           "planned_n": sorted({" / ".join(map(str, r.n)) for r in rules})}
    if power < target:
        out["seeds_needed"] = seeds_needed(planned, effects, target)
        out["sd_factor"] = sd_needed(planned, effects, target)
    return out


def describe(s: dict) -> str:
    k, target = s["comparisons"], 100 * s["target"]
    every = f"all {k} comparisons supported" if k > 1 else "its comparison supported"
    text = (f"claim power ({s['source']}): P({every}) = {100 * s['power']:.0f}% ± {100 * s['mc_error']:.0f} at the"
            f" plan's effects of interest with n = {', '.join(s['planned_n'])}")
    if k > 1:
        text += f" (the weakest comparison alone {100 * s['weakest_alone']:.0f}%)"
    d = s["detectable"]
    text += (f"; {target:g}% needs true differences {d:.2f} pts beyond every boundary" if math.isfinite(d) else
             f"; no true difference reaches {target:g}% at this n")
    if s["power"] >= s["target"]:
        return text + ": the design can decide it"
    needs = [f"{s['seeds_needed']} seeds per arm" if s["seeds_needed"] else f"more than {MAX_SEEDS} seeds per arm"]
    if s["sd_factor"]:
        needs.append(f"seed sds {s['sd_factor']:.2f}× these (more training images or epochs lower them)")
    if not s["sd_factor"] and not s["seeds_needed"]:
        return text + (f"; the design cannot decide it at the plan's effects: no number of seeds up to {MAX_SEEDS}"
                       " and no seed sd reach it (the test images' term alone is too large: more test images would)")
    return text + "; the design cannot decide it at the plan's effects: it would need " + " or ".join(needs)

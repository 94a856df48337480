"""Are the verdicts calibrated, and is the power the report states the claims' own? By simulation, every claim.

    .venv/bin/python bench/bench_verdicts.py                      # 400 simulations per claim and scenario, the
                                                                  #   laptop profiles and imagenet-vit-b (hours)
    .venv/bin/python bench/bench_verdicts.py --simulations 200 --profiles cpu-all --claims 10 12 --seed 1

Each simulated experiment has a profile's structure (its run groups: datasets × variants × arms × seeds, the
filter study, [CI]'s grids, the training configurations, [SIA]'s cells, weight selection, each dataset's whole
test split; `pipeline.analysis.design`) and goes through the pipeline's own code: each claim's function of
`pipeline.analysis.claims`, `judge` (one-sided tests, Holm) and `claim_verdict`, with the plan of paper/plan.yaml
resolved for that profile; nothing here re-implements a test.

The data. A run gets image i right when μ_g + seed effect + image difficulty b_i + the group's own image effect +
noise > 0 (a probit model): the seed effect is shared in part by every run of that seed (same training subset and
data order) and is in part the run's own; b_i is shared by every run on the dataset (it cancels in a paired
difference); the group's own image effects do not (they make the image term of a difference); training accuracy
(claim 4) is a per-seed value with the same seed structure. A group's population accuracy is then Φ(μ_g / τ) in
closed form, so every comparison's true difference is known: the same claim code on noise-free data gives it.
`--skew` draws the seed effects from a skewed law instead (one seed in five far below the others), the case where
the normal-seed assumption of the intervals does not hold: the table then measures what that costs (the error rates,
the coverage and how far the stated power, a normal model's, lies from the simulated one; a bound may fail there).

The scenarios, per claim. `boundary`: every comparison's true difference lies on its boundary (0, or the margin:
±2 for "≈", -2 for "clearly worse", ...), the least favourable case for a false "contradicted" (Holm's family-wise
rate) and for a false "supported". `one open`: one kind of comparison on its boundary, the others far on their
claimed side, the least favourable case for a false "supported" under the all-must-hold rule. A verdict counts as
false when the truth does not back it: "supported" while some comparison's true difference is not strictly on
its claimed side; "contradicted" while none is strictly on the reverse side. `power`: every comparison at the
plan's effect of interest (consistently: e.g. impulse +2, mimetic +1 over default for claim 1), times the multiple
(1 to 16) at which a pilot puts the claim's power nearest 0.5, where a check of it says most; there the share of
simulations in which the claim is supported is its power, which must match the power `pipeline.analysis.power`
states from the simulations' own variance components (their mean over the simulations) and the true differences.

Monte-Carlo error. Each rate is a binomial count over the simulations; a bound fails when the exact one-sided
binomial test (scipy.stats.binomtest) rejects "rate <= 2.5 %" (or "coverage >= 95 %") at 0.05 divided by the
number of bounds checked (Bonferroni over the table), and a power fails when simulated and stated differ by more
than the normal quantile at that level times their combined Monte-Carlo standard error. Coverage is the mean over
a claim's intervals, counted over simulations (conservative: an average of correlated intervals varies less than
one interval). The last line reads `max false supported 0.0xx, max false contradicted 0.0xx, min coverage 0.9xx,
max power gap 0.0xx (N simulations)`; the exit status is 1 when a bound fails.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.analysis.analysis_plan import plan_for  # noqa: E402
from pipeline.analysis.claims import CLAIMS, claim_verdict, headline, judge  # noqa: E402
from pipeline.analysis.design import CLAIM_FRAMES, KINDS, Design  # noqa: E402
from pipeline.analysis.power import MC_DRAWS, Planned, claim_power  # noqa: E402
from pipeline.analysis.stats import CONTRADICTED, SUPPORTED, WELCH  # noqa: E402

BASE = 0.50  #: every group's accuracy before a scenario's offsets (all stay within 0.3 and 0.9)
FAR = 20.0  #: points by which a comparison lies "far" on its claimed side (several interval half-widths at n = 3)
ALPHA, COVERAGE = 0.025, 0.95
SCENARIOS = ("boundary", "one open", "power")
#: the scales of the way from each boundary to the effect of interest the power scenario chooses from (at 3 seeds
#: most claims have little power at 1)
POWER_SCALES = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0)
#: what runs by default: each profile with the claims it tests (imagenet-vit-b: claim 2's structure and n)
DEFAULT_RUNS = {"cpu": list(CLAIM_FRAMES), "cpu-claims": list(CLAIM_FRAMES), "cpu-ablations": list(CLAIM_FRAMES),
                "cpu-all": list(CLAIM_FRAMES), "cpu-rest": list(CLAIM_FRAMES), "imagenet-vit-b": ["headline", "2"]}


@dataclass(frozen=True)
class Noise:
    """Latent standard deviations of the probit model (the unit is the per-observation noise)."""

    seed_shared: float = 0.06  #: a seed's effect on every run of it (training subset, data order)
    seed_own: float = 0.06  #: a run's own seed effect (its init)
    difficulty: float = 1.0  #: an image's difficulty, shared by every run on the dataset
    own_image: float = 0.35  #: a run group's own per-image effect (the image term of a difference)
    train_sd: float = 1.5  #: training top-1 (claim 4): a seed's sd in points, half of it shared by the seed
    skew: bool = False  #: seed effects from a skewed law (mean 0, sd 1): one seed in five about 2 sd below


def seed_draw(rng, size, skew: bool) -> np.ndarray:
    """Standard seed effects: normal, or (skew) a two-point mixture with mean 0 and sd 1, 20 % at −2 and 80 % at
    +0.5 (one seed in five losing several points, as the CPU default's mimetic seeds cluster)."""
    if not skew:
        return rng.standard_normal(size)
    return np.where(rng.random(size) < 0.2, -2.0, 0.5)


def offset(claim: str, scenario: str, g: dict, d: Design, scale: float = 1.0) -> float:
    """Points added to BASE for one run group in a claim's scenario (see the module docstring). In `one open`,
    only the claim's first cell (first dataset and variant) holds the open comparison."""
    if scenario == "power":
        return effect_offset(claim, g, d, scale)
    arm, kind = g.get("arm"), g["kind"]
    first = g.get("dataset") == first_dataset(d, kind)
    if scenario == "boundary":
        if claim == "5a":
            return {"random": 2.0, "learned": 0.0, "gaussian": 0.0}.get(g["variant"].split("-")[0], -2.0)
        if claim == "12":
            return -1.0 if g["source"] == d.exp.ws_teachers[0] else 0.0
        if claim == "15":
            return {"model2": -1.0, "model3": -1.0 if arm == "random" and g["qk"] == "trained" else 0.0}.get(
                g["form"], 0.0)
        return {"2": {"impulse": -1.0}, "6": {"impulse": -2.0 if kind == "vit" else 0.0},
                "8": {"mimetic": 0.5}}.get(claim, {}).get(arm, 0.0)
    cell = first and g.get("variant") == first_variant(d, claim)
    if claim in ("1", "4", "headline"):  # impulse > mimetic > default far, except in the first cell:
        if cell:  # 1, 4: mimetic − default open; headline: impulse − mimetic open
            return {"impulse": 0.0 if claim == "headline" else FAR, "default": -FAR if claim == "headline" else 0.0
                    }.get(arm, 0.0)
        return {"impulse": FAR, "mimetic": 0.0, "default": -FAR}[arm]
    if claim == "2":
        return {"impulse": -1.0, "mimetic": -FAR}.get(arm, 0.0)  # impulse − default open
    if claim == "3":  # the gains grow by FAR per variant, except over default on the first dataset (open)
        rank = vit_variants(d).index(g["variant"]) if g["variant"] in vit_variants(d) else 0
        return {"impulse": FAR * rank, "mimetic": 0.0, "default": FAR * rank if first else 0.0}[arm]
    if claim == "5a":  # frozen random at the edge of "≈", the others far on their side
        return {"random": 2.0, "impulse": 0.0, "learned": 0.0, "gaussian": 0.0}.get(g["variant"].split("-")[0],
                                                                                    -FAR)
    if claim == "5b":  # heads at the largest σ open; every other comparison far
        small, many = g.get("sigma") == min(d.exp.sigmas, default=None), (g.get("heads") or 0) >= 8
        return FAR * small * (1 + many)
    if claim == "6":
        return -2.0 if kind == "vit" and arm == "impulse" else 0.0
    if claim == "8":  # impulse far above default everywhere; mimetic at its +0.5 edge in the first cell only
        return {"impulse": FAR, "mimetic": 0.5 if cell else -FAR}.get(arm, 0.0)
    if claim == "9":  # the ordering far at every α; α 0.1 far ahead for mimetic, level for impulse (open)
        best = g["alpha"] == plan_for(d.plans, "9").rule("best_alpha").extra.get("best")
        return {"impulse": 2 * FAR, "mimetic": FAR if best else 0.0}.get(arm, -FAR)
    if claim == "10":  # impulse far above random everywhere, level with mimetic on the first dataset (open)
        return {"impulse": FAR, "impulse_sens": FAR, "mimetic": 0.0 if first else -FAR}.get(arm, 0.0)
    if claim == "11":  # impulse far above default, except in the grid's own first cell (open)
        return FAR if arm == "impulse" and not (kind == "vit" and cell) else 0.0
    if claim == "12":  # one comparison per dataset: the open one is the boundary
        return -1.0 if g["source"] == d.exp.ws_teachers[0] else 0.0
    if claim == "13":  # the fit on the PE level with uniform pseudo-inputs (open), far above Gaussian ones
        return {"fit_PP": 0.0, "fit_UU": 0.0}.get(g["cell"], -FAR)
    if claim == "14":
        return 0.0
    if claim == "15":  # Model II at its margin (open), Model III far above, the PE far ahead of no PE
        if g["form"] == "model3":
            return FAR if arm == "random" and g["qk"] == "trained" else 0.0
        return {"model2": -1.0, "simple_nope": -FAR}.get(g["form"], 0.0)
    raise ValueError(claim)


def effect_offset(claim: str, g: dict, d: Design, scale: float = 1.0) -> float:
    """Every comparison at its boundary plus `scale` times the way from its boundary to the plan's effect of
    interest (scale 1: at the effect), consistently (the module docstring's `power`)."""
    arm = g.get("arm")

    def at(boundary: float, effect: float) -> float:
        return boundary + scale * (effect - boundary)
    if claim in ("headline",):
        return {"impulse": at(0, 1)}.get(arm, 0.0)
    if claim in ("1", "4"):
        return {"impulse": 2 * at(0, 1), "mimetic": at(0, 1)}.get(arm, 0.0)
    if claim == "2":
        return {"impulse": at(-1, 0), "mimetic": at(0, -0.5)}.get(arm, 0.0)
    if claim == "3":  # each larger variant's gains one point above the smaller's
        rank = vit_variants(d).index(g["variant"]) if g["variant"] in vit_variants(d) else 0
        return at(0, 1) * rank if arm == "impulse" else 0.0
    if claim == "5a":  # the equivalences at 0 (their best case), the rest scaled beyond -2
        return {"box": at(-2, -5), "softmax": at(-2, -5), "perm": at(-2, -5), "fullperm": at(-2, -5)}.get(
            g["variant"].split("-")[0], 0.0)
    if claim == "5b":
        return at(0, 1) * (float(g.get("sigma") == min(d.exp.sigmas, default=None))
                           + float((g.get("heads") or 0) >= 8))
    if claim == "6":
        return at(-2, 0) if g["kind"] == "vit" and arm == "impulse" else 0.0
    if claim == "8":
        return {"impulse": at(0, 1), "mimetic": at(0.5, 0)}.get(arm, 0.0)
    if claim == "9":
        best = g["alpha"] == plan_for(d.plans, "9").rule("best_alpha").extra.get("best")
        return {"impulse": 2 * at(0, 1) + at(0, 0.5) * best, "mimetic": at(0, 1) + at(0, 0.5) * best}.get(arm, 0.0)
    if claim == "10":
        return at(0, 5) if arm in ("impulse", "impulse_sens") else 0.0
    if claim == "11":
        return at(0, 1) if arm == "impulse" else 0.0
    if claim == "12":
        return at(-1, 0) if g["source"] == d.exp.ws_teachers[0] else 0.0
    if claim == "13":
        return at(0, 3) if g["cell"] == "fit_PP" else 0.0
    if claim == "14":
        return at(0, 4) if g["cell"] == "base_avg_sincos" else 0.0
    if claim == "15":
        if g["form"] == "model3":
            return at(-1, 0) if arm == "random" and g["qk"] == "trained" else 0.0
        return {"model2": at(-1, 0), "simple_nope": -at(0, 5)}.get(g["form"], 0.0)
    raise ValueError(claim)


def level(points: float) -> float:
    """A group's population accuracy: BASE plus `points`, kept within 2 % and 98 % (the true differences are
    then read from noise-free runs at these levels, so a clipped scenario stays consistent)."""
    return min(max(BASE + points / 100, 0.02), 0.98)


def vit_variants(d: Design) -> list[str]:
    """ViT-family variants by head count (claim 3's order)."""
    from pipeline.method.names import family_of
    vits = [(heads or 0, v) for v, name, heads in d.exp.models if family_of(name) == "vit"]
    return [v for _, v in sorted(vits)]


def first_variant(d: Design, claim: str) -> str | None:
    """The variant of a claim's first cell: the first ViT-family one, or for claim 8 the first Swin/Mixer."""
    from pipeline.method.names import family_of
    families = ("swin", "mixer") if claim == "8" else ("vit",) if claim != "headline" else ("vit", "swin", "mixer")
    return next((v for v, name, _ in d.exp.models if family_of(name) in families), None)


def first_dataset(d: Design, kind: str) -> str | None:
    e = d.exp
    names = {"vit": e.datasets, "configs": e.datasets, "filters": (e.filter_dataset,), "ci": e.ci_datasets,
             "m3": e.m3_datasets, "sia": e.sia_datasets, "weight_selection": e.ws_datasets}[kind]
    return names[0] if names else None


def simulate(d: Design, groups: list[dict], truth: list[float], noise: Noise, rng) -> dict:
    """One experiment: per run, per-image correctness on its dataset's test split and a training-top-1 history."""
    tau = math.sqrt(1 + noise.seed_shared ** 2 + noise.seed_own ** 2 + noise.difficulty ** 2 + noise.own_image ** 2)
    seeds = sorted({seed for k in KINDS for seed in d.seeds(k)})
    shared = dict(zip(seeds, seed_draw(rng, len(seeds), noise.skew)))
    train_shared = dict(zip(seeds, seed_draw(rng, len(seeds), noise.skew)))
    difficulty = {name: rng.standard_normal(n).astype(np.float32) * noise.difficulty
                  for name, n in d.test_size.items()}
    epochs = max(d.exp.convergence_epochs, default=1)
    rows: dict[str, list] = {k: [] for k in KINDS}
    for g, p in zip(groups, truth):
        mu = np.float32(stats.norm.ppf(p) * tau)
        base = difficulty[g["dataset"]] + noise.own_image * rng.standard_normal(len(difficulty[g["dataset"]]),
                                                                                 dtype=np.float32)
        for seed in d.seeds(g["kind"]):
            effect = np.float32(noise.seed_shared * shared[seed]
                                + noise.seed_own * seed_draw(rng, None, noise.skew))
            correct = (mu + effect + base + rng.standard_normal(len(base), dtype=np.float32)) > 0
            train = p + noise.train_sd / 100 * (math.sqrt(0.5) * train_shared[seed] + math.sqrt(0.5)
                                                * seed_draw(rng, None, noise.skew))
            history = [{"epoch": e, "train_top1": train, "val_top1": p} for e in range(epochs)]
            rows[g["kind"]].append(g | {"seed": seed, "top1": float(correct.mean()), "correct": correct,
                                        "history": history, "params": g.get("params", 5e4)})
    return d.frames(rows)


def verdicts(claim: str, d: Design, frames: dict) -> list[tuple[str, list]]:
    """(verdict, checks) of the claim, through the pipeline's code; the headline gives one per (dataset, variant)."""
    ev = d.evidence(frames)
    if claim == "headline":
        cells: dict[tuple, list] = {}
        for ds, v, check in headline(ev):
            cells.setdefault((ds, v), []).append(check)
        return [(claim_verdict(checks), checks) for checks in cells.values()]
    found = CLAIMS[claim](ev, plan_for(ev.plans, claim))
    judge(found.checks)
    return [(claim_verdict(found.checks), found.checks)]


@dataclass
class Tally:
    """Counts over the simulations of one claim and scenario; a claim with several verdicts (the headline's
    cells) keeps one count per verdict, and the rates are the worst cell's."""

    sims: int = 0
    supported: np.ndarray | None = None  #: false "supported" (effect: every "supported"), per cell
    contradicted: np.ndarray | None = None
    coverage: float = 0.0  #: sum over simulations of the mean coverage of the claim's intervals
    intervals: int = 0
    variances: list | None = None  #: per cell, per comparison: summed (seed vars per arm, image var, inter var)
    stated: list | None = None  #: per cell: the power pipeline.analysis.power states (power scenario)
    scale: float = 1.0  #: the power scenario's multiple of the effect offsets

    def count(self, what: str) -> int:
        values = getattr(self, what)
        return int(values.max()) if values is not None else 0

    def rate(self, what: str) -> float:
        return self.count(what) / self.sims if self.sims else math.nan


def run_claim(d: Design, claim: str, scenario: str, noise: Noise, sims: int, rng) -> Tally | None:
    groups = d.groups(CLAIM_FRAMES[claim])
    scale = power_scale(d, claim, groups, noise, rng) if scenario == "power" else 1.0
    truth = [level(offset(claim, scenario, g, d, scale)) for g in groups]
    exact = verdicts(claim, d, d.noise_free(groups, truth))
    if not any(checks for _, checks in exact):
        return None  # the profile does not test this claim
    tally = Tally(supported=np.zeros(len(exact), int), contradicted=np.zeros(len(exact), int),
                  variances=[[np.zeros(4) for _ in checks] for _, checks in exact], scale=scale)
    for _ in range(sims):
        got = verdicts(claim, d, simulate(d, groups, truth, noise, rng))
        covered = []
        for cell, ((verdict, checks), (_, true_checks)) in enumerate(zip(got, exact)):
            assert [c.label for c in checks] == [c.label for c in true_checks]
            far = [c.criterion.distance(t.estimate.mean) for c, t in zip(checks, true_checks)]
            if scenario == "power":
                tally.supported[cell] += verdict == SUPPORTED
                accumulate(tally.variances[cell], checks)
            else:
                tally.supported[cell] += verdict == SUPPORTED and min(far) <= 1e-9
                tally.contradicted[cell] += verdict == CONTRADICTED and min(far) >= -1e-9
            covered += [c.estimate.low <= t.estimate.mean <= c.estimate.high for c, t in zip(checks, true_checks)
                        if c.estimate.enough]
        tally.sims += 1
        if covered:
            tally.coverage += float(np.mean(covered))
            tally.intervals = len(covered)
    if scenario == "power":
        tally.stated = [stated_power(checks, tally.variances[cell], sims) for cell, (_, checks) in enumerate(exact)]
    return tally


def accumulate(sums: list, checks: list) -> None:
    """Add each comparison's variance components (seed var per arm, image var, seed × image var) to `sums`."""
    for acc, c in zip(sums, checks):
        e = c.estimate
        seed = np.square(e.seed_sds) if e.kind == WELCH else (e.std ** 2, 0.0)
        acc += [*seed, e.image_sd ** 2, float(np.sum(np.square(e.interaction_sds)))]


def power_scale(d: Design, claim: str, groups: list, noise: Noise, rng, pilot: int = 20) -> float:
    """The scale (`effect_offset`) at which the claim's stated power lies nearest 0.5, from a pilot's variance
    components: where a power check says most."""
    truth = [level(offset(claim, "power", g, d)) for g in groups]
    exact = verdicts(claim, d, d.noise_free(groups, truth))
    if not any(checks for _, checks in exact):
        return 1.0
    sums = [[np.zeros(4) for _ in checks] for _, checks in exact]
    for _ in range(pilot):
        for cell, (_, checks) in enumerate(verdicts(claim, d, simulate(d, groups, truth, noise, rng))):
            accumulate(sums[cell], checks)
    best, gap = 1.0, math.inf
    for scale in POWER_SCALES:
        scaled = verdicts(claim, d, d.noise_free(groups, [level(offset(claim, "power", g, d, scale))
                                                           for g in groups]))
        power = stated_power(scaled[0][1], sums[0], pilot)
        if abs(power - 0.5) < gap:
            best, gap = scale, abs(power - 0.5)
    return best


def stated_power(true_checks: list, sums: list, sims: int) -> float:
    """The claim's power as pipeline.analysis.power states it, from the simulations' mean variance components and
    the true differences (the noise-free checks' means)."""
    planned = []
    for c, acc in zip(true_checks, sums):
        seed_a, seed_b, image, inter = np.sqrt(acc / sims)
        e, n = c.estimate, c.rule.planned
        seed_sds = (seed_a, seed_b) if e.kind == WELCH else (seed_a,)
        planned.append(Planned(c.criterion, c.rule.alpha, n, seed_sds, image, inter, e.images, e.terms, e.kind))
    return claim_power(planned, [c.estimate.mean for c in true_checks])


def bound_fails(k: int, n: int, p: float, upper: bool, level: float) -> bool:
    """Whether an exact one-sided binomial test rejects 'rate <= p' (upper) or 'rate >= p' at `level`."""
    alternative = "greater" if upper else "less"
    return stats.binomtest(k, n, p, alternative=alternative).pvalue < level


def power_gap_fails(simulated: float, stated: float, sims: int, level: float) -> bool:
    """Whether simulated and stated power differ beyond their Monte-Carlo error at two-sided `level`."""
    p = min(max(stated, 1.0 / sims), 1 - 1.0 / sims)
    se = math.sqrt(p * (1 - p) / sims + p * (1 - p) / MC_DRAWS)
    return abs(simulated - stated) > stats.norm.ppf(1 - level / 2) * se


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--simulations", type=int, default=400, help="per claim and scenario (default 400)")
    parser.add_argument("--profiles", nargs="+", default=list(DEFAULT_RUNS),
                        help="cpu = params.yaml as it is; others: profiles/<name>.yaml merged onto it")
    parser.add_argument("--claims", nargs="+", default=None,
                        help="default: every seed-statistic claim the profile tests (imagenet-vit-b: headline, 2)")
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=SCENARIOS)
    parser.add_argument("--skew", action="store_true", help="skewed seed effects (the normality check)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng, noise, start = np.random.default_rng(args.seed), Noise(skew=args.skew), time.perf_counter()
    rows = []
    for profile in args.profiles:
        d = Design.of_profile(profile, ROOT)
        for claim in args.claims or DEFAULT_RUNS.get(profile, list(CLAIM_FRAMES)):
            tallies = {sc: run_claim(d, claim, sc, noise, args.simulations, rng) for sc in args.scenarios}
            if any(t is None for t in tallies.values()):
                print(f"{profile:>14} claim {claim:<8} not tested by this profile")
                continue
            rows.append((profile, claim, d, tallies))
    checks = sum(2 + bool(t.intervals) if sc != "power" else len(t.stated)
                 for *_, tallies in rows for sc, t in tallies.items())
    level = 0.05 / max(1, checks)
    worst = {"supported": 0.0, "contradicted": 0.0, "coverage": 1.0, "gap": 0.0}
    failed = []
    print(f"{'profile':>14} {'claim':<8} {'n':>7} {'comparisons':>11} {'false supported':>16}"
          f" {'false contradicted':>19} {'coverage':>9} {'scale':>6} {'power stated':>13} {'simulated':>10}")
    for profile, claim, d, tallies in rows:
        errors = {sc: t for sc, t in tallies.items() if sc != "power"}
        fs = max((t.rate("supported") for t in errors.values()), default=math.nan)
        fc = max((t.rate("contradicted") for t in errors.values()), default=math.nan)
        with_intervals = [t for t in tallies.values() if t.intervals]
        cov = min((t.coverage / t.sims for t in with_intervals), default=math.nan)
        for sc, t in errors.items():
            failed += [f"{profile} {claim} {sc}: false {w} {t.rate(w):.3f}" for w in ("supported", "contradicted")
                       if bound_fails(t.count(w), t.sims, ALPHA, True, level)]
        for sc, t in tallies.items():
            if t.intervals and bound_fails(round(t.coverage), t.sims, COVERAGE, False, level):
                failed.append(f"{profile} {claim} {sc}: coverage {t.coverage / t.sims:.3f}")
        stated = simulated = math.nan
        scale = math.nan
        if "power" in tallies:
            t = tallies["power"]
            cell = int(np.argmax([abs(s / t.sims - p) for s, p in zip(t.supported, t.stated)]))
            stated, simulated, scale = t.stated[cell], t.supported[cell] / t.sims, t.scale
            failed += [f"{profile} {claim} power (x{t.scale:g}): stated {p:.3f}, simulated {s / t.sims:.3f}"
                       for s, p in zip(t.supported, t.stated) if power_gap_fails(s / t.sims, p, t.sims, level)]
            worst["gap"] = max(worst["gap"], abs(simulated - stated))
        if math.isfinite(fs):
            worst["supported"], worst["contradicted"] = max(worst["supported"], fs), max(worst["contradicted"], fc)
        if math.isfinite(cov):
            worst["coverage"] = min(worst["coverage"], cov)
        plan = d.plans.get(claim)
        planned = sorted({"/".join(map(str, r.n)) for r in plan.rules.values()}) if plan else ["?"]
        n_cmp = max(t.intervals for t in tallies.values()) or "no interval"

        def cell(x: float, width: int) -> str:
            return f"{'n/a' if math.isnan(x) else f'{x:.3f}':>{width}}"
        print(f"{profile:>14} {claim:<8} {','.join(planned):>7} {n_cmp!s:>11} {cell(fs, 16)} {cell(fc, 19)}"
              f" {cell(cov, 9)} {'n/a' if math.isnan(scale) else f'{scale:g}':>6} {cell(stated, 13)}"
              f" {cell(simulated, 10)}")
    images = {name: n for *_, d, _ in rows for name, n in d.test_size.items()}
    print(f"Noise {noise}; base accuracy {BASE}; test images {images}; bounds: exact one-sided binomial tests (and"
          f" the power gaps) at 0.05 / {checks} = {level:.2g}; {time.perf_counter() - start:.0f} s.")
    for f in failed:
        print(f"BOUND FAILED: {f}")
    print(f"max false supported {worst['supported']:.3f}, max false contradicted {worst['contradicted']:.3f},"
          f" min coverage {worst['coverage']:.3f}, max power gap {worst['gap']:.3f} ({args.simulations} simulations)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

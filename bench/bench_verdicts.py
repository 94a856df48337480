"""Are the verdicts calibrated? False "supported", false "contradicted" and interval coverage, by simulation.

    .venv/bin/python bench/bench_verdicts.py                           # 1,000 simulations, profiles cpu, cpu-claims,
                                                                       #   imagenet-vit-b
    .venv/bin/python bench/bench_verdicts.py --simulations 200 --profiles cpu --seed 1

Each simulated experiment has a profile's structure (its datasets × variants × arms × seeds, the filter study and
its Gaussian grid, [CI]'s α grid, each dataset's whole test split) and goes through the pipeline's own checks: each
claim's function of `pipeline.analysis.claims`, `judge` (one-sided tests, Holm) and `claim_verdict`, with the plan
of paper/plan.yaml resolved for that profile; nothing here re-implements a test.

The data. A run's model gets image i right when μ_g + seed effect + image difficulty b_i + the group's own image
effect + noise > 0 (a probit model): the seed effect is shared in part by every run of that seed (same training
subset and data order) and is in part the run's own; b_i is shared by every run on the dataset (it cancels in a
paired difference); the group's own image effects do not (they make the image term of a difference); training
accuracy (claim 4) is a per-seed value with the same seed structure. A group's population accuracy is then
Φ(μ_g / τ) in closed form, so every comparison's true difference is known: the same claim code on noise-free data
gives it.

The scenarios, per claim. `boundary`: every comparison's true difference lies on its boundary (0, or the margin:
±2 for "≈", -2 for "clearly worse", ...), the least favourable case for a false "contradicted" (Holm's family-wise
rate) and for a false "supported". `one open`: one kind of comparison on its boundary, the others far on their
claimed side, the least favourable case for a false "supported" under the all-must-hold rule. A verdict counts as
false when the truth does not back it: "supported" while some comparison's true difference is not strictly on
its claimed side; "contradicted" while none is strictly on the reverse side.

Monte-Carlo error. Each rate is a binomial count over the simulations; a bound fails when the exact one-sided
binomial test (scipy.stats.binomtest) rejects "rate <= 2.5 %" (or "coverage >= 95 %") at 0.05 divided by the
number of bounds checked (Bonferroni over the table). Coverage is the mean over a claim's intervals, counted over
simulations (conservative: an average of correlated intervals varies less than one interval).
The last line reads `max false supported 0.0xx, max false contradicted 0.0xx, min coverage 0.9xx (N simulations)`;
the exit status is 1 when a bound fails.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.analysis.aggregate import Experiment  # noqa: E402
from pipeline.analysis.analysis_plan import load_plan, plan_for  # noqa: E402
from pipeline.analysis.claims import CLAIMS, Evidence, claim_verdict, headline, judge  # noqa: E402
from pipeline.analysis.runs import family_of  # noqa: E402
from pipeline.analysis.stats import CONTRADICTED, SUPPORTED  # noqa: E402
from pipeline.config import load_params  # noqa: E402
from pipeline.data.registry import DATASETS  # noqa: E402
from pipeline.profiles import apply_profile  # noqa: E402

BASE = 0.50  #: every group's accuracy before a scenario's offsets (all stay within 0.3 and 0.9)
FAR = 20.0  #: points by which a comparison lies "far" on its claimed side (several interval half-widths at n = 3)
ALPHA, COVERAGE = 0.025, 0.95
#: claims that are seed statistics, with the frames they read (7 is structural: no interval, nothing to calibrate)
FRAMES = {"headline": ("vit",), "1": ("vit",), "2": ("vit",), "3": ("vit",), "4": ("vit",), "5a": ("filters",),
          "5b": ("filters",), "6": ("vit", "filters"), "8": ("vit",), "9": ("ci",)}
SCENARIOS = ("boundary", "one open")
#: what runs by default: each profile with the claims it adds (imagenet-vit-b: claim 2's structure and n)
DEFAULT_RUNS = {"cpu": list(FRAMES), "cpu-claims": list(FRAMES), "imagenet-vit-b": ["headline", "2"]}


@dataclass(frozen=True)
class Noise:
    """Latent standard deviations of the probit model (the unit is the per-observation noise)."""

    seed_shared: float = 0.06  #: a seed's effect on every run of it (training subset, data order)
    seed_own: float = 0.06  #: a run's own seed effect (its init)
    difficulty: float = 1.0  #: an image's difficulty, shared by every run on the dataset
    own_image: float = 0.35  #: a run group's own per-image effect (the image term of a difference)
    train_sd: float = 1.5  #: training top-1 (claim 4): a seed's sd in points, half of it shared by the seed


def offset(claim: str, scenario: str, unit: dict, s: Structure) -> float:
    """Points added to BASE for one run group (unit) in a claim's scenario (see the module docstring). In `one
    open`, only the claim's first cell (first dataset and variant) holds the open comparison."""
    arm, first = unit.get("arm"), unit.get("dataset") == s.first_dataset(unit["kind"])
    if scenario == "boundary":
        return {"2": {"impulse": -1.0}, "5a": {"random": 2.0, "learned": 0.0, "gaussian": 0.0},
                "6": {"impulse": -2.0 if unit["kind"] == "vit" else 0.0}, "8": {"mimetic": 0.5}}.get(claim, {}).get(
            unit["variant"].split("-")[0] if claim == "5a" else arm, -2.0 if claim == "5a" else 0.0)
    cell = first and unit.get("variant") == s.first_variant(claim)
    if claim in ("1", "4", "headline"):  # impulse > mimetic > default far, except in the first cell:
        if cell:  # 1, 4: mimetic − default open; headline: impulse − mimetic open
            return {"impulse": 0.0 if claim == "headline" else FAR, "default": -FAR if claim == "headline" else 0.0
                    }.get(arm, 0.0)
        return {"impulse": FAR, "mimetic": 0.0, "default": -FAR}[arm]
    if claim == "2":
        return {"impulse": -1.0, "mimetic": -FAR}.get(arm, 0.0)  # impulse − default open
    if claim == "3":  # the gains grow by FAR per variant, except over default on the first dataset (open)
        rank = s.vit_variants.index(unit["variant"]) if unit["variant"] in s.vit_variants else 0
        return {"impulse": FAR * rank, "mimetic": 0.0, "default": FAR * rank if first else 0.0}[arm]
    if claim == "5a":  # frozen random at the edge of "≈", the others far on their side
        return {"random": 2.0, "impulse": 0.0, "learned": 0.0, "gaussian": 0.0}.get(unit["variant"].split("-")[0],
                                                                                    -FAR)
    if claim == "5b":  # heads at the largest σ open; every other comparison far
        small, many = unit.get("sigma") == unit.get("smallest_sigma"), (unit.get("heads") or 0) >= 8
        return FAR * small * (1 + many)
    if claim == "6":
        return -2.0 if unit["kind"] == "vit" and arm == "impulse" else 0.0
    if claim == "8":  # impulse far above default everywhere; mimetic at its +0.5 edge in the first cell only
        return {"impulse": FAR, "mimetic": 0.5 if cell else -FAR}.get(arm, 0.0)
    if claim == "9":  # the ordering far at every α; α 0.1 far ahead for mimetic, level for impulse (open)
        best = unit["alpha"] == plan_for(s.plans, "9").rule("best_alpha").extra.get("best")
        return {"impulse": 2 * FAR, "mimetic": FAR if best else 0.0}.get(arm, -FAR)
    raise ValueError(claim)


@dataclass
class Structure:
    """What one profile plans: the experiment, its plan, and the test-set size of each dataset."""

    name: str
    exp: Experiment
    plans: dict
    test_size: dict

    @property
    def vit_variants(self) -> list[str]:
        """ViT-family variants by head count (claim 3's order)."""
        vits = [(heads or 0, v) for v, name, heads in self.exp.models if family_of(name) == "vit"]
        return [v for _, v in sorted(vits)]

    def first_variant(self, claim: str) -> str | None:
        """The variant of a claim's first cell: the first ViT-family one, or for claim 8 the first Swin/Mixer."""
        families = ("swin", "mixer") if claim == "8" else ("vit",) if claim != "headline" else ("vit", "swin", "mixer")
        return next((v for v, name, _ in self.exp.models if family_of(name) in families), None)

    def first_dataset(self, kind: str) -> str:
        return {"vit": self.exp.datasets, "filters": (self.exp.filter_dataset,), "ci": self.exp.ci_datasets}[kind][0]


def structure(profile: str) -> Structure:
    """A profile merged onto params.yaml in a scratch copy (the repository's file is not touched)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "params.yaml"
        shutil.copy(ROOT / "params.yaml", path)
        params = load_params(path) if profile == "cpu" else apply_profile(profile, path)
    exp = Experiment.from_params(params)
    datasets = {*exp.datasets, exp.filter_dataset, *exp.ci_datasets}
    return Structure(profile, exp, load_plan(ROOT / "paper", exp.sizes()),
                     {d: DATASETS[d].eval_size for d in datasets if d in DATASETS})


def units(s: Structure, frames: tuple) -> list[dict]:
    """Every run group the claim's frames hold, with what its rows record."""
    e, out = s.exp, []
    models = {v: (name, heads) for v, name, heads in e.models}
    if "vit" in frames:
        out += [{"kind": "vit", "dataset": d, "variant": v, "arm": a, "model": models[v][0],
                 "family": family_of(models[v][0]), "num_heads": models[v][1], "params": 1e5 * (1 + i)}
                for d in e.datasets for i, v in enumerate(e.variants) for a in e.arms]
    if "filters" in frames:
        out += [{"kind": "filters", "dataset": e.filter_dataset, "variant": v, "sigma": None, "heads": None}
                for v in e.filters]
        smallest = min(e.sigmas, default=None)
        out += [{"kind": "filters", "dataset": e.filter_dataset, "variant": f"gaussian-{sg:g}-h{h}", "sigma": sg,
                 "heads": h, "smallest_sigma": smallest} for sg in e.sigmas for h in e.heads]
    if "ci" in frames:
        out += [{"kind": "ci", "dataset": d, "alpha": al, "arm": a} for d in e.ci_datasets for al in e.ci_alphas
                for a in e.ci_arms]
    return out


def seeds_of(s: Structure, kind: str) -> tuple:
    return {"vit": s.exp.seeds, "filters": s.exp.filter_seeds, "ci": s.exp.ci_seeds}[kind]


def simulate(s: Structure, groups: list[dict], truth: list[float], noise: Noise, rng) -> dict[str, pd.DataFrame]:
    """One experiment: per run, per-image correctness on its dataset's test split and a training-top-1 history."""
    tau = math.sqrt(1 + noise.seed_shared ** 2 + noise.seed_own ** 2 + noise.difficulty ** 2 + noise.own_image ** 2)
    seeds = sorted({seed for k in ("vit", "filters", "ci") for seed in seeds_of(s, k)})
    shared = dict(zip(seeds, rng.standard_normal(len(seeds))))
    train_shared = dict(zip(seeds, rng.standard_normal(len(seeds))))
    difficulty = {d: rng.standard_normal(n).astype(np.float32) * noise.difficulty for d, n in s.test_size.items()}
    epochs = max(s.exp.convergence_epochs, default=1)
    rows: dict[str, list] = {"vit": [], "filters": [], "ci": []}
    for g, p in zip(groups, truth):
        mu = np.float32(stats.norm.ppf(p) * tau)
        base = difficulty[g["dataset"]] + noise.own_image * rng.standard_normal(len(difficulty[g["dataset"]]),
                                                                                 dtype=np.float32)
        for seed in seeds_of(s, g["kind"]):
            effect = np.float32(noise.seed_shared * shared[seed] + noise.seed_own * rng.standard_normal())
            eps = rng.standard_normal(len(base), dtype=np.float32)
            correct = (mu + effect + base + eps) > 0
            train = p + noise.train_sd / 100 * (math.sqrt(0.5) * train_shared[seed] + math.sqrt(0.5)
                                                * rng.standard_normal())
            history = [{"epoch": e, "train_top1": train, "val_top1": p} for e in range(epochs)]
            rows[g["kind"]].append(g | {"seed": seed, "top1": float(correct.mean()), "correct": correct,
                                        "history": history, "params": g.get("params", 5e4)})
    return {k: pd.DataFrame(v) for k, v in rows.items()}


def noise_free(s: Structure, groups: list[dict], truth: list[float]) -> dict[str, pd.DataFrame]:
    """The same runs at their population accuracy (no per-image data): the checks' means are the true δ."""
    epochs = max(s.exp.convergence_epochs, default=1)
    rows: dict[str, list] = {"vit": [], "filters": [], "ci": []}
    for g, p in zip(groups, truth):
        rows[g["kind"]] += [g | {"seed": seed, "top1": p, "correct": None, "params": g.get("params", 5e4),
                                 "history": [{"epoch": e, "train_top1": p, "val_top1": p} for e in range(epochs)]}
                            for seed in seeds_of(s, g["kind"])]
    return {k: pd.DataFrame(v) for k, v in rows.items()}


EMPTY = {"vit": ["dataset", "variant", "arm", "seed", "top1", "correct", "history", "model", "family", "num_heads",
                 "params"],
         "filters": ["variant", "seed", "top1", "sigma", "heads", "params", "correct"],
         "ci": ["dataset", "alpha", "arm", "seed", "top1", "correct"]}


def evidence(s: Structure, frames: dict[str, pd.DataFrame]) -> Evidence:
    e = s.exp
    get = {k: frames[k] if len(frames[k]) else pd.DataFrame(columns=cols) for k, cols in EMPTY.items()}
    return Evidence(get["vit"], get["filters"], e.arms, e.datasets, s.plans, e.convergence_epochs, e.kernel_size,
                    e.filter_dataset, {}, get["ci"])


def verdicts(claim: str, ev: Evidence) -> list[tuple[str, list]]:
    """(verdict, checks) of the claim, through the pipeline's code; the headline gives one per (dataset, variant)."""
    if claim == "headline":
        cells: dict[tuple, list] = {}
        for d, v, check in headline(ev):
            cells.setdefault((d, v), []).append(check)
        return [(claim_verdict(checks), checks) for checks in cells.values()]
    found = CLAIMS[claim](ev, plan_for(ev.plans, claim))
    judge(found.checks)
    return [(claim_verdict(found.checks), found.checks)]


def distance(check, true_mean: float) -> float:
    """How far the true difference lies on the claimed side of the check's boundary (< 0: the reverse side)."""
    return check.criterion.distance(true_mean)


@dataclass
class Tally:
    """Counts over the simulations of one claim and scenario; a claim with several verdicts (the headline's
    cells) keeps one count per verdict, and the rates are the worst cell's."""

    sims: int = 0
    supported: np.ndarray | None = None  #: false "supported", per cell
    contradicted: np.ndarray | None = None
    coverage: float = 0.0  #: sum over simulations of the mean coverage of the claim's intervals
    intervals: int = 0

    def count(self, what: str) -> int:
        values = getattr(self, what)
        return int(values.max()) if values is not None else 0

    def rate(self, what: str) -> float:
        return self.count(what) / self.sims if self.sims else math.nan


def run_claim(s: Structure, claim: str, scenario: str, noise: Noise, sims: int, rng) -> Tally | None:
    groups = units(s, FRAMES[claim])
    truth = [BASE + offset(claim, scenario, g, s) / 100 for g in groups]
    exact = verdicts(claim, evidence(s, noise_free(s, groups, truth)))
    if not any(checks for _, checks in exact):
        return None  # the profile does not test this claim
    tally = Tally(supported=np.zeros(len(exact), int), contradicted=np.zeros(len(exact), int))
    for _ in range(sims):
        got = verdicts(claim, evidence(s, simulate(s, groups, truth, noise, rng)))
        covered = []
        for cell, ((verdict, checks), (_, true_checks)) in enumerate(zip(got, exact)):
            assert [c.label for c in checks] == [c.label for c in true_checks]
            far = [distance(c, t.estimate.mean) for c, t in zip(checks, true_checks)]
            tally.supported[cell] += verdict == SUPPORTED and min(far) <= 1e-9
            tally.contradicted[cell] += verdict == CONTRADICTED and min(far) >= -1e-9
            covered += [c.estimate.low <= t.estimate.mean <= c.estimate.high for c, t in zip(checks, true_checks)
                        if c.estimate.enough]
        tally.sims += 1
        if covered:
            tally.coverage += float(np.mean(covered))
            tally.intervals = len(covered)
    return tally


def bound_fails(k: int, n: int, p: float, upper: bool, level: float) -> bool:
    """Whether an exact one-sided binomial test rejects 'rate <= p' (upper) or 'rate >= p' at `level`."""
    alternative = "greater" if upper else "less"
    return stats.binomtest(k, n, p, alternative=alternative).pvalue < level


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--simulations", type=int, default=1000, help="per claim and scenario (default 1000)")
    parser.add_argument("--profiles", nargs="+", default=list(DEFAULT_RUNS),
                        help="cpu = params.yaml as it is; others: profiles/<name>.yaml merged onto it")
    parser.add_argument("--claims", nargs="+", default=None,
                        help="default: every seed-statistic claim (imagenet-vit-b: the headline and claim 2)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng, noise, start = np.random.default_rng(args.seed), Noise(), time.perf_counter()
    rows = []
    for profile in args.profiles:
        s = structure(profile)
        for claim in args.claims or DEFAULT_RUNS.get(profile, list(FRAMES)):
            tallies = {sc: run_claim(s, claim, sc, noise, args.simulations, rng) for sc in SCENARIOS}
            if any(t is None for t in tallies.values()):
                print(f"{profile:>14} claim {claim:<8} not tested by this profile")
                continue
            rows.append((profile, claim, s, tallies))
    checks = sum(2 + bool(t.intervals) for *_, tallies in rows for t in tallies.values())
    level = 0.05 / max(1, checks)
    worst = {"supported": 0.0, "contradicted": 0.0, "coverage": 1.0}
    failed = []
    print(f"{'profile':>14} {'claim':<8} {'n':>7} {'comparisons':>11} {'false supported':>16}"
          f" {'false contradicted':>19} {'coverage':>9}")
    for profile, claim, s, tallies in rows:
        fs = max(t.rate("supported") for t in tallies.values())
        fc = max(t.rate("contradicted") for t in tallies.values())
        with_intervals = [t for t in tallies.values() if t.intervals]
        cov = min((t.coverage / t.sims for t in with_intervals), default=math.nan)
        for sc, t in tallies.items():
            failed += [f"{profile} {claim} {sc}: false {w} {t.rate(w):.3f}" for w in ("supported", "contradicted")
                       if bound_fails(t.count(w), t.sims, ALPHA, True, level)]
            if t.intervals and bound_fails(round(t.coverage), t.sims, COVERAGE, False, level):
                failed.append(f"{profile} {claim} {sc}: coverage {t.coverage / t.sims:.3f}")
        worst["supported"], worst["contradicted"] = max(worst["supported"], fs), max(worst["contradicted"], fc)
        if math.isfinite(cov):
            worst["coverage"] = min(worst["coverage"], cov)
        plan = s.plans.get(claim)
        planned = sorted({"/".join(map(str, r.n)) for r in plan.rules.values()}) if plan else ["?"]
        n_cmp = max(t.intervals for t in tallies.values()) or "no interval"
        print(f"{profile:>14} {claim:<8} {','.join(planned):>7} {n_cmp!s:>11} {fs:>16.3f} {fc:>19.3f}"
              f" {'n/a' if math.isnan(cov) else f'{cov:.3f}':>9}")
    images = {d: n for *_, st, _ in rows for d, n in st.test_size.items()}
    print(f"Noise {noise}; base accuracy {BASE}; test images {images}; bounds: exact"
          f" one-sided binomial tests at 0.05 / {checks} = {level:.2g}; {time.perf_counter() - start:.0f} s.")
    for f in failed:
        print(f"BOUND FAILED: {f}")
    print(f"max false supported {worst['supported']:.3f}, max false contradicted {worst['contradicted']:.3f},"
          f" min coverage {worst['coverage']:.3f} ({args.simulations} simulations)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

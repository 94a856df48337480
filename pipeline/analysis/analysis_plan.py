"""paper/plan.yaml, the analysis plan (its format is documented at the top of that file): read once, checked (one
PipelineError per bad entry, naming the claim, the comparison and the fix) and resolved against the experiment
(a planned n given as a params key becomes the length of that seed list)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from pipeline.analysis.stats import DIRECTIONS, PAIRED, SEEDS, WELCH, Criterion
from pipeline.errors import PipelineError

PLAN = "plan.yaml"
INTERVALS = (PAIRED, WELCH, SEEDS)
#: what `defaults` and a claim may set for its comparisons
SHARED = ("alpha", "power", "interval", "n", "family", "seed_sd", "image_sd", "holdout")
RULE_KEYS = ("a", "b", "direction", "margin", "effect", "note", "extra", *SHARED)
#: what a claim's entry may hold besides the SHARED keys
CLAIM_KEYS = ("comparisons", "thresholds", "secondary", "requires")


@dataclass(frozen=True)
class Rule:
    """One planned comparison, a − b, and how it is tested (see paper/plan.yaml)."""

    claim: str
    name: str
    a: str
    b: str
    criterion: Criterion
    effect: float  #: smallest effect of interest: the true a − b, in points
    family: str
    alpha: float  #: one-sided
    power: float
    interval: str
    n: tuple  #: planned runs per arm (welch: of a, of b)
    n_from: str  #: where n was read: a params key or 'plan'
    note: str = ""
    extra: dict = field(default_factory=dict)
    seed_sd: float = 3.0  #: planning assumption: sd of one seed's difference a − b (points)
    image_sd: float = 20.0  #: planning assumption: sd of an image's own difference (points)
    #: read over the test images and the held-out pool (`data.holdout`) where every run of the comparison scored one
    holdout: bool = False

    @property
    def confidence(self) -> float:
        """The two-sided level whose interval reads the one-sided tests at alpha."""
        return 1 - 2 * self.alpha

    @property
    def planned(self) -> int | tuple[int, int]:
        return self.n if self.interval == WELCH else self.n[0]

    def row(self) -> dict:
        n = " / ".join(map(str, self.n))
        return {"claim": self.claim, "comparison": self.name, "a": self.a, "b": self.b,
                "needs": f"{self.a} − {self.b} {self.criterion.need}", "effect": self.effect, "family": self.family,
                "alpha": self.alpha, "interval": self.interval, "n": n, "n_from": self.n_from, "note": self.note,
                "seed_sd": self.seed_sd, "image_sd": self.image_sd, "holdout": self.holdout}


@dataclass(frozen=True)
class ClaimPlan:
    """A claim's entry: its comparisons by name and, for structural claims, thresholds."""

    claim: str
    rules: dict
    thresholds: dict
    secondary: dict = field(default_factory=dict)  #: name -> why: analyses shown, labelled, never deciding
    requires: dict = field(default_factory=dict)  #: params key -> the value the claim's verdict needs

    def rule(self, name: str) -> Rule:
        """The comparison `name`; a PipelineError naming the fix when the plan lacks it."""
        if name not in self.rules:
            raise PipelineError(f"paper/{PLAN}: claim {self.claim!r} has no comparison {name!r}, which its check"
                                f" needs; add it under claims.{self.claim}.comparisons")
        return self.rules[name]


def _planned_n(value, sizes: Mapping[str, int], where: str) -> tuple[tuple, str]:
    """(n per arm, where it was read) from a number, a params key, or a list of two (welch)."""
    values = value if isinstance(value, list) else [value]
    out, source = [], []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | str):
            raise PipelineError(f"{where}: n = {value!r}; give a number of seeds or a params key ({', '.join(sizes)})")
        if isinstance(v, str):
            if v not in sizes:
                raise PipelineError(f"{where}: n = {v!r} is not a params key the plan can read; use one of"
                                    f" {', '.join(sizes)}, or a number")
            out.append(sizes[v])
            source.append(v)
        else:
            out.append(v)
            source.append("plan")
    return tuple(out), " / ".join(source)


def _rule(claim: str, name: str, spec: dict, shared: dict, sizes: Mapping[str, int]) -> Rule:
    where = f"paper/{PLAN}, claim {claim!r}, comparison {name!r}"
    if not isinstance(spec, dict):
        raise PipelineError(f"{where}: expected a mapping of {', '.join(RULE_KEYS)}")
    unknown = sorted(set(spec) - set(RULE_KEYS))
    if unknown:
        raise PipelineError(f"{where}: unknown key {unknown[0]!r}; allowed are {', '.join(RULE_KEYS)}")
    missing = [k for k in ("a", "b", "direction", "effect") if k not in spec]
    if missing:
        raise PipelineError(f"{where}: missing {', '.join(missing)}")
    s = shared | spec
    if s["direction"] not in DIRECTIONS:
        raise PipelineError(f"{where}: direction {s['direction']!r}; use one of {', '.join(DIRECTIONS)}")
    try:
        margin, effect, alpha, power = (float(s.get("margin", 0.0)), float(s["effect"]), float(s["alpha"]),
                                        float(s["power"]))
        seed_sd, image_sd = float(s.get("seed_sd", 3.0)), float(s.get("image_sd", 20.0))
    except (TypeError, ValueError):
        raise PipelineError(f"{where}: margin, effect, alpha, power, seed_sd and image_sd must be numbers") from None
    if not (seed_sd > 0 and image_sd >= 0):
        raise PipelineError(f"{where}: the planning assumptions need seed_sd > 0 and image_sd >= 0 (points); got"
                            f" {seed_sd:g} and {image_sd:g}")
    if not (margin >= 0 and 0 < alpha < 0.5 and 0 < power < 1):
        raise PipelineError(f"{where}: needs margin >= 0, 0 < alpha < 0.5 (one-sided) and 0 < power < 1; got"
                            f" margin {margin:g}, alpha {alpha:g}, power {power:g}")
    criterion = Criterion(s["direction"], margin)
    if not criterion.distance(effect) > 0:
        raise PipelineError(f"{where}: effect {effect:+g} does not lie on the claimed side ({criterion.need}); the"
                            " smallest effect of interest is a true difference the claim holds at")
    if s["interval"] not in INTERVALS:
        raise PipelineError(f"{where}: interval {s['interval']!r}; use one of {', '.join(INTERVALS)}")
    if not isinstance(s.get("holdout", False), bool):
        raise PipelineError(f"{where}: holdout = {s['holdout']!r}; use true (over the test images and the held-out"
                            " pool of data.holdout) or false (the test images alone)")
    n, n_from = _planned_n(s["n"], sizes, where)
    if len(n) != (2 if s["interval"] == WELCH else 1):
        raise PipelineError(f"{where}: n = {s['n']!r}; a {s['interval']} interval plans "
                            + ("two numbers, [n of a, n of b]" if s["interval"] == WELCH else "one number"))
    return Rule(claim, name, str(s["a"]), str(s["b"]), criterion, effect, str(s.get("family", claim)), alpha, power,
                s["interval"], n, n_from, str(s.get("note", "")), dict(s.get("extra") or {}), seed_sd, image_sd,
                bool(s.get("holdout", False)))


def load_plan(paper_dir: str | Path, sizes: Mapping[str, int]) -> dict[str, ClaimPlan]:
    """paper/plan.yaml, checked and resolved: claim id -> its plan. `sizes` maps the params keys a planned n may name
    to the length of their seed lists, e.g. {'seeds': 5, 'ci_alpha.seeds': 3}."""
    path = Path(paper_dir) / PLAN
    if not path.is_file():
        raise PipelineError(f"{path}: not found; it is the analysis plan the claims are judged by")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise PipelineError(f"{path}: not valid YAML ({exc})") from None
    defaults = raw.get("defaults") or {}
    unknown = sorted(set(defaults) - set(SHARED))
    if unknown:
        raise PipelineError(f"{path}: defaults has unknown key {unknown[0]!r}; allowed are {', '.join(SHARED)}")
    plans = {}
    for claim, entry in (raw.get("claims") or {}).items():
        claim, entry = str(claim), entry or {}
        extra = sorted(set(entry) - {*SHARED, *CLAIM_KEYS})
        if extra:
            raise PipelineError(f"{path}: claim {claim!r} has unknown key {extra[0]!r}; allowed are"
                                f" {', '.join(SHARED)}, {', '.join(CLAIM_KEYS)}")
        for key in ("secondary", "requires"):
            if not isinstance(entry.get(key) or {}, dict):
                raise PipelineError(f"{path}: claim {claim!r}: {key} must be a mapping ({key}: {{name: ...}})")
        shared = defaults | {k: entry[k] for k in SHARED if k in entry}
        rules = {str(name): _rule(claim, str(name), spec, shared, sizes)
                 for name, spec in (entry.get("comparisons") or {}).items()}
        families: dict[str, set] = {}
        for r in rules.values():
            families.setdefault(r.family, set()).add(r.alpha)
        mixed = [f for f, alphas in families.items() if len(alphas) > 1]
        if mixed:
            raise PipelineError(f"{path}: claim {claim!r}, family {mixed[0]!r} mixes alpha levels; Holm runs at one"
                                " family-wise alpha, so give its comparisons the same alpha")
        plans[claim] = ClaimPlan(claim, rules, dict(entry.get("thresholds") or {}),
                                 {str(k): str(v) for k, v in (entry.get("secondary") or {}).items()},
                                 dict(entry.get("requires") or {}))
    return plans


@dataclass(frozen=True)
class Confirmatory:
    """The plan's confirmatory seeds: a profile whose every seed list is `seeds`, named before any of them ran."""

    profile: str
    seeds: tuple
    #: what the design measures and cannot decide, in a sentence or two from its pilot (the headline prints it)
    measures: str = ""

    def holds(self, profile: str, seed_lists: Mapping[str, Sequence[int]]) -> bool:
        used = [list(s) for s in seed_lists.values() if s]
        return profile == self.profile and bool(used) and all(sorted(s) == sorted(self.seeds) for s in used)


def load_confirmatory(paper_dir: str | Path, profile: str | None = None) -> Confirmatory | None:
    """paper/plan.yaml's `confirmatory` entry (one, or a list of them, one per profile), checked: the one of
    `profile` where it names one, else the first; None when the plan names none."""
    path = Path(paper_dir) / PLAN
    raw = (yaml.safe_load(path.read_text()) or {}).get("confirmatory") if path.is_file() else None
    if not raw:
        return None
    entries = []
    for entry in raw if isinstance(raw, list) else [raw]:
        seeds = entry.get("seeds") if isinstance(entry, dict) else None
        if not isinstance(entry.get("profile") if isinstance(entry, dict) else None, str) or not isinstance(
                seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
            raise PipelineError(f"{path}: each confirmatory entry needs a profile (a name) and seeds (a list of"
                                " integers)")
        measures = entry.get("measures") or ""
        if not isinstance(measures, str):
            raise PipelineError(f"{path}: confirmatory entry {entry['profile']!r}: measures must be a sentence (text)")
        entries.append(Confirmatory(entry["profile"], tuple(seeds), " ".join(measures.split())))
    return next((e for e in entries if e.profile == profile), entries[0])


def plan_for(plans: Mapping[str, ClaimPlan], claim: str) -> ClaimPlan:
    if claim not in plans:
        raise PipelineError(f"paper/{PLAN} has no entry for claim {claim!r}: add one under `claims` (the format is"
                            " at the top of the file)")
    return plans[claim]


def threshold(plan: ClaimPlan, key: str) -> float:
    value = plan.thresholds.get(key)
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise PipelineError(f"paper/{PLAN}: claim {plan.claim!r} needs thresholds.{key} (a number)")
    return float(value)


@dataclass(frozen=True)
class TrainingRule:
    """What a run must show before its final top-1 is evidence (paper/plan.yaml `training`; `analysis.trained`)."""

    chance_loss_ratio: float = 0.9  #: trained: final training loss below this × ln(classes), a uniform guess's loss
    min_top1_over_chance: float = 4.0  #: ... and final validation top-1 at least this × chance (1 / classes)
    plateau_fraction: float = 0.25  #: plateaued: over the last fraction of the evaluated epochs (at least 3) ...
    plateau_gain: float = 1.0  #: ... a line's rise of validation top-1 is below this many points, or
    plateau_z: float = 2.0  #: ... below this many standard errors of that rise (the line's residuals)


def load_training_rule(paper_dir: str | Path) -> TrainingRule:
    """paper/plan.yaml's `training` entry, checked; the defaults above where the plan names none."""
    path = Path(paper_dir) / PLAN
    raw = (yaml.safe_load(path.read_text()) or {}).get("training") if path.is_file() else None
    if raw is None:
        return TrainingRule()
    keys = [f.name for f in dataclasses.fields(TrainingRule)]
    if not isinstance(raw, dict) or set(raw) - set(keys):
        raise PipelineError(f"{path}: training takes {', '.join(keys)} (numbers); got {raw!r}")
    values = {k: raw[k] for k in keys if k in raw}
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values.values()):
        raise PipelineError(f"{path}: training's {', '.join(values)} must be numbers")
    rule = TrainingRule(**{k: float(v) for k, v in values.items()})
    if not (0 < rule.chance_loss_ratio <= 1 and 0 < rule.plateau_fraction <= 0.5 and rule.plateau_gain > 0
            and rule.plateau_z >= 0 and rule.min_top1_over_chance >= 1):
        raise PipelineError(f"{path}: training needs 0 < chance_loss_ratio <= 1, min_top1_over_chance >= 1,"
                            f" 0 < plateau_fraction <= 0.5, plateau_gain > 0 and plateau_z >= 0; got {rule}")
    return rule

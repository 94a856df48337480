"""An experiment's design before any run: its run groups, synthetic results of them, and each claim's comparisons.

Which comparisons a claim needs is decided by the claims' code from the runs it finds. To know them before any
run (`check`'s power, bench/bench_verdicts.py's simulations), this module builds the run groups a profile plans,
gives each seed a result, and runs the claims' own functions on them, so the comparisons are the ones a real
run gets. `plan_power` is each claim's power at paper/plan.yaml's assumed variance components.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.analysis.aggregate import Experiment
from pipeline.analysis.analysis_plan import load_plan, plan_for
from pipeline.analysis.claims import CLAIMS, Check, Evidence, headline, judge
from pipeline.analysis.power import planned_from_rule
from pipeline.analysis.power import summary as power_summary
from pipeline.analysis.stats import WELCH
from pipeline.datasets import DATASETS
from pipeline.experiments import seed_key
from pipeline.method.names import family_of
from pipeline.params import Params, load_params

#: the frames of a results tree, as `claims.Evidence` holds them
KINDS = ("vit", "filters", "ci", "m3", "configs", "sia", "weight_selection")
#: the frames each claim reads (7 is structural: no seed statistic)
CLAIM_FRAMES = {"headline": ("vit",), "1": ("vit",), "2": ("vit",), "3": ("vit",), "4": ("vit",),
                "5a": ("filters",), "5b": ("filters",), "6": ("vit", "filters"), "8": ("vit",), "9": ("ci",),
                "10": ("m3",), "11": ("vit", "configs"), "12": ("weight_selection",), "13": ("sia",),
                "14": ("sia",), "15": ("m3",)}
#: the columns of each frame besides a group's keys: what the claims read of a run
RUN_COLUMNS = ["seed", "top1", "correct", "pooled", "history", "params"]
KEYS = {"vit": ["dataset", "variant", "arm", "model", "family", "num_heads"],
        "filters": ["dataset", "variant", "sigma", "heads"],
        "ci": ["dataset", "alpha", "arm"], "m3": ["dataset", "form", "arm", "qk", "value"],
        "configs": ["dataset", "variant", "config", "arm"], "sia": ["dataset", "cell"],
        "weight_selection": ["dataset", "source"]}
#: every group's accuracy when nothing else is asked (the structure does not depend on it)
BASE = 0.5


@dataclass
class Design:
    """What one profile plans: the experiment, its plan, each dataset's test-split size and held-out pool."""

    name: str
    exp: Experiment
    plans: dict
    test_size: dict
    holdout: dict = field(default_factory=dict)  #: {dataset: images of its held-out pool} (`data.holdout`)

    @classmethod
    def of(cls, params: Params, paper: str | Path = "paper", name: str | None = None) -> Design:
        exp = Experiment.from_params(params)
        datasets = {*exp.datasets, exp.filter_study.dataset, *exp.ci.alpha.datasets, *exp.weight_selection.datasets}
        return cls(name or params.profile, exp, load_plan(paper, exp.sizes()),
                   {d: DATASETS[d].eval_size for d in datasets if d in DATASETS and DATASETS[d].eval_size},
                   {d: n for d, n in (params.data.holdout or {}).items() if n})

    @classmethod
    def of_profile(cls, profile: str, root: str | Path) -> Design:
        """A profile of root/profiles merged onto root/params.yaml in a scratch copy ('cpu': params.yaml as it is)."""
        from pipeline.profiles import apply_profile
        root = Path(root)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "params.yaml"
            shutil.copy(root / "params.yaml", path)
            params = load_params(path) if profile == "cpu" else apply_profile(profile, path)
        return cls.of(params, root / "paper", profile)

    def seeds(self, kind: str) -> tuple:
        """The seeds of frame `kind`'s cells: the seed list its stages' seed axis names (`experiments.seed_key`)."""
        return {key: seeds for key, seeds, _ in self.exp.seed_keys}.get(seed_key(kind), ())

    def groups(self, kinds: tuple = KINDS) -> list[dict]:
        """Every run group of the frames `kinds`: its kind and key fields (a group's runs differ only by seed), from
        the cells the declarations plan (`Experiment.cells`), with what the claims read of a run's model."""
        e, out, seen = self.exp, [], set()
        models = {v: (name, heads, 1e5 * (1 + i)) for i, (v, name, heads) in enumerate(e.models)}
        for stage, cell in e.cells:
            keys = {k: v for k, v in stage.row_keys(cell).items() if k != "seed"}
            if stage.frame not in kinds or (stage.frame, *keys.items()) in seen:
                continue
            seen.add((stage.frame, *keys.items()))
            group = {"kind": stage.frame, **keys}
            if stage.frame in ("vit", "configs"):
                name, heads, size = models.get(keys["variant"], ("", None, 1e5))
                group |= {"model": name, "family": family_of(name)}
                group |= {"num_heads": heads, "params": size} if stage.frame == "vit" else {}
            if stage.frame == "filters":
                group |= {"dataset": e.filter_study.dataset, "sigma": float(cell["sigma"]) if "sigma" in cell else None,
                          "heads": int(cell["heads"]) if "heads" in cell else None}
            out.append(group)
        return out

    def noise_free(self, groups: list[dict], truth: list[float]) -> dict[str, pd.DataFrame]:
        """Every seed of each group at its population accuracy (`truth`), scored on the dataset's whole test split where
        its size is known: the claims' means are then the true differences."""
        rows: dict[str, list] = {k: [] for k in KINDS}
        epochs = max(self.exp.convergence_epochs, default=1)
        for g, p in zip(groups, truth):
            size, pool = self.test_size.get(g["dataset"], 0), self.holdout.get(g["dataset"], 0)
            correct = np.arange(size) < round(p * size) if size else None
            pooled = np.concatenate([correct, np.arange(pool) < round(p * pool)]) if size and pool else None
            top1 = float(correct.mean()) if size else p
            history = [{"epoch": e, "train_top1": p, "val_top1": p} for e in range(epochs)]
            rows[g["kind"]] += [g | {"seed": s, "top1": top1, "correct": correct, "pooled": pooled,
                                     "history": history, "params": g.get("params", 5e4)}
                                for s in self.seeds(g["kind"])]
        return self.frames(rows)

    def frames(self, rows: dict[str, list]) -> dict[str, pd.DataFrame]:
        return {k: pd.DataFrame(rows.get(k) or [], columns=[*KEYS[k], *RUN_COLUMNS]) for k in KINDS}

    def evidence(self, frames: dict[str, pd.DataFrame]) -> Evidence:
        e = self.exp
        return Evidence(frames["vit"], frames["filters"], e.arms, e.datasets, self.plans, e.convergence_epochs,
                        e.kernel_size, e.filter_study.dataset, {}, frames["ci"], frames["m3"],
                        frozenset(e.alternatives), frames["configs"], frames["sia"], frames["weight_selection"],
                        dict(e.settings))

    def checks(self, claim: str) -> list[Check]:
        """The comparisons the claim needs in this design (judged on noise-free results at BASE)."""
        groups = self.groups(CLAIM_FRAMES[claim])
        ev = self.evidence(self.noise_free(groups, [BASE] * len(groups)))
        if claim == "headline":
            return [c for _, _, c in headline(ev)]
        found = CLAIMS[claim](ev, plan_for(self.plans, claim))
        judge(found.checks)
        return found.checks


def plan_power(design: Design, claim: str) -> dict | None:
    """The claim's power at the plan in this design; None when the design does not test the claim."""
    if claim not in CLAIM_FRAMES or claim not in CLAIMS:
        return None  # the headline is not a claim; 7 is structural
    checks = design.checks(claim)
    if not checks:
        return None
    planned = [planned_from_rule(c.rule, c.estimate.images, c.estimate.terms) for c in checks]
    if any(p.kind == WELCH for p in planned) and len(planned) > 1:
        return None
    if any(min(p.n if isinstance(p.n, tuple) else (p.n,)) < 2 for p in planned):
        return {"source": "the plan's assumptions", "comparisons": len(planned), "power": math.nan}
    return power_summary(planned, [c.rule for c in checks], "the plan's assumptions")

"""`python -m pipeline aggregate`: this experiment's tables, claims and DVC metrics, from results/ and paper/.

Reads only the runs params.yaml names (`pipeline.analysis.runs`: results/train/<dataset>/<variant>/<arm>/seed<k>/,
results/filter_study/<variant>/seed<k>/ and results/ci_alpha/<dataset>/alpha<α>/<arm>/seed<k>/ metrics.json;
results/attention/<variant>/<arm>/measures.json for claim 7) and the published numbers of paper/
(`pipeline.analysis.published`). Writes, all or nothing (`pipeline.outputs`):

    results/tables/<name>.csv          every table's numbers (percent), one file per table
    results/tables/tables.json         the tables in reading order, as the report renders them
    results/tables/claims.json         the analysis plan (paper/plan.yaml, resolved), the headline comparisons
                                       and each claim of paper/claims.yaml: its verdict (supported / contradicted /
                                       inconclusive / not tested), one summary line, the evidence and every
                                       comparison with its verdict, p-values and power
    results/tables/what_was_run.json   profile, models, datasets (with citation and licence), seeds, revisions,
                                       hardware, versions, wall times, missing runs
    results/summary.json               DVC metrics (git-tracked): {headline: {dataset: {variant: {method,
                                       baseline1, baseline2, method_vs_baseline1, method_vs_baseline2}}},
                                       dataset: {variant: {arm: {top1_mean, top1_std, n}}}, filter_study: ...}

`headline` is keyed by role (`role_metrics`), so experiments with another `init` share its columns in `dvc exp
show` and `dvc metrics diff main`; `python -m pipeline compare` prints it per experiment.
The report (`pipeline.analysis.report`) is the human-readable rendering of all of it.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from pipeline import entry
from pipeline.analysis import claims as claim_checks
from pipeline.analysis import plan_history, tables, trained
from pipeline.analysis.analysis_plan import load_confirmatory, load_plan, load_training_rule
from pipeline.analysis.filter_tables import filter_table, gaussian_table
from pipeline.analysis.published import load_claims, load_published
from pipeline.analysis.reproducibility import CROSS_CPU, cell_spread, load_cross_cpu
from pipeline.analysis.runs import check_images, planned_cells, read_floors, read_frames, read_metrics
from pipeline.analysis.stats import mean_std
from pipeline.datasets import DATASETS
from pipeline.errors import PipelineError
from pipeline.experiments import analysis_parts, attribute, default_part, seed_keys, stages
from pipeline.experiments.ci import MODEL3
from pipeline.outputs import folder_aside, write_text
from pipeline.params import Params
from pipeline.schema import digest

RESULTS, PAPER = Path("results"), Path("paper")
CI_FIT = Path("bench/ci_fit.yaml")  #: [CI] impulse fits recorded by bench/bench_ci_fit.py --yaml


@dataclass(frozen=True)
class Experiment:
    """What the current experiment consists of: the runs to read and how to judge them (from params.yaml)."""

    datasets: tuple
    arms: tuple  #: the method under study first, then the baselines
    seeds: tuple
    variants: tuple = ("vit",)  #: the model variants of the grid (params `models`)
    models: tuple = ()  #: (variant, timm name, num_heads or None) per variant, as params.yaml configures them
    convergence_epochs: tuple = (2, 4, 8)
    confidence: float = 0.95
    kernel_size: int = 3  #: the impulse filters' f (claim 3's f², claim 7's neighbourhood)
    profile: str = ""
    params_digest: str = ""
    alternatives: tuple = ()  #: variants whose `init_options` change a method's construction (claim 8's own lines)
    settings: tuple = ()  #: (params key, value) of the values a claim's plan `requires` may name
    #: (declared stage, cell) of every cell whose results are read (`runs.planned_cells`: the declarations decide)
    cells: tuple = ()
    #: (params key, its seeds, whether a planned cell runs them) of every experiment's seed lists (`seed_lists`)
    seed_keys: tuple = ()
    #: (variant, width, depth) per variant as params.yaml configures them: a model is named by what it is
    shapes: tuple = ()
    #: (experiment, its record) of each registered experiment's `analysis_part` (`experiments.analysis_parts`),
    #: read as attributes: `exp.filter_study.sigmas`, `exp.ci.alpha.seeds`, `exp.weight_selection.teachers`
    parts: tuple = ()

    def __getattr__(self, name: str):
        """An experiment's record by its module's name; the switched-off record where `parts` lacks it."""
        if not name.startswith("_"):
            for key, part in self.parts:
                if key == name:
                    return part
            part = default_part(name)
            if part is not None:
                return part
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def seed_lists(self) -> dict[str, tuple]:
        """Every seed list this experiment runs, by params key (the planned n's keys); () for a block that is off
        (its list runs nothing, so it is no part of the confirmatory design)."""
        return {key: seeds if on else () for key, seeds, on in self.seed_keys}

    def sizes(self) -> dict[str, int]:
        """The params keys a planned n in paper/plan.yaml may name, with the length of their seed lists."""
        return {key: len(seeds) for key, seeds, _ in self.seed_keys}

    @classmethod
    def from_params(cls, params: Params) -> Experiment:
        m3 = params.ci_model3
        settings = (("ci_model3.impulse_fit.sigma", m3.impulse_fit.sigma),
                    ("ci_model3.sensitivity_fit.sigma", m3.sensitivity_fit.sigma),
                    ("sia.tokens", sia_tokens(params)),
                    ("sia.width", params.models[params.sia.variant].embed_dim
                     if params.sia.variant in params.models else None),
                    ("sia.tokens_above_width", tokens_above_width(params)))
        return cls(tuple(params.datasets), tuple(params.arms), tuple(params.seeds), tuple(params.variants),
                   models=tuple((v, m.name, m.num_heads) for v, m in params.models.items()),
                   convergence_epochs=tuple(params.report.convergence_epochs), confidence=params.report.confidence,
                   kernel_size=params.impulse.kernel_size, profile=params.profile, params_digest=digest(params),
                   alternatives=tuple(v for v, m in params.models.items() if m.init_options), settings=settings,
                   cells=tuple(planned_cells(params)), seed_keys=seed_lists(params),
                   shapes=tuple((v, m.embed_dim, m.depth) for v, m in params.models.items()),
                   parts=analysis_parts(params))


def sia_tokens(params: Params) -> int | None:
    """Tokens N of the model [SIA]'s cells build (its grid variant's img_size / patch_size, squared); None unknown."""
    model = params.models.get(params.sia.variant)
    if model is None or not model.img_size or not model.patch_size:
        return None
    return (model.img_size // model.patch_size) ** 2


def tokens_above_width(params: Params) -> bool | None:
    """Whether [SIA]'s cells have more tokens than width (N > D), which claim 13's plan requires; None unknown."""
    model, tokens = params.models.get(params.sia.variant), sia_tokens(params)
    return None if tokens is None or model is None or not model.embed_dim else tokens > model.embed_dim


def seed_lists(params: Params) -> tuple:
    """(key, seeds, on) for every seed list of the registered experiments (`pipeline.experiments.seed_keys`): on when a
    declared stage that runs over the list (an axis `${key}`) plans a cell."""
    return tuple((key, tuple(attribute(params, key)),
                  any(stage.cells(params) for stage in stages() if f"${{{key}}}" in stage.axes.values()))
                 for key in seed_keys())


@dataclass
class Aggregate:
    """Everything the stage writes."""

    tables: list[tables.Table]
    claims: list[dict]
    headline: list[dict]
    plan: dict  #: the plan, resolved: {comparisons: [`analysis_plan.Rule.row`], thresholds: {claim: {...}}}
    summary: dict
    what_was_run: dict


def load_attention(attention_root: Path, variants, arms) -> dict:
    """variant -> arm -> measures.json of the attention stage, for the cells that have one."""
    paths = {(v, a): Path(attention_root) / v / a / "measures.json" for v in variants for a in arms}
    out: dict = {}
    for (v, a), p in paths.items():
        if p.is_file():
            out.setdefault(v, {})[a] = read_metrics(p)
    return out


def headline_rows(ev: claim_checks.Evidence) -> list[dict]:
    """The method against each baseline per (dataset, variant): the comparison and both arms' mean/std/n."""
    stats = tables.group_stats(ev.runs, ["dataset", "variant", "arm"])
    rows = []
    for d, v, check in claim_checks.headline(ev):
        sa = tables.lookup(stats, dataset=d, variant=v, arm=check.estimate.a)
        sb = tables.lookup(stats, dataset=d, variant=v, arm=check.estimate.b)
        cell = ev.runs[(ev.runs["dataset"] == d) & (ev.runs["variant"] == v)]
        rising = {side: trained.rising_label(cell[cell["arm"] == arm]) for side, arm in (("a", check.estimate.a),
                                                                                        ("b", check.estimate.b))}
        rows.append({"dataset": d, "variant": v, **check.as_dict(), "a_mean": sa["mean"], "a_std": sa["std"],
                     "a_n": sa["n"], "b_mean": sb["mean"], "b_std": sb["std"], "b_n": sb["n"],
                     "a_rising": rising["a"], "b_rising": rising["b"]})
    return rows


def load_fit_reference(path: str | Path) -> list[dict]:
    """The fits bench/bench_ci_fit.py recorded (its `--yaml` file), [] when there is none."""
    path = Path(path)
    if not path.is_file():
        return []
    return (yaml.safe_load(path.read_text()) or {}).get("fits", [])


def build_tables(runs: pd.DataFrame, filters: pd.DataFrame, ci: pd.DataFrame, published: pd.DataFrame,
                 exp: Experiment, headline: list[dict], fit_reference: Sequence[dict] = (),
                 m3: pd.DataFrame | None = None, floors: dict | None = None) -> list[tables.Table]:
    """Every table, in reading order; a table whose inputs do not exist is left out, not faked. `floors`: each
    dataset's logistic-regression floor (`pipeline.analysis.floor`), printed beside the grid's tables."""
    study = exp.filter_study
    small = [d for d in exp.datasets if d != "imagenet"]
    out = [tables.headline_table(headline, floors) if headline else None, tables.vit_table(runs, exp.arms, floors),
           tables.published_table(runs, published, small, exp.arms, file="vit_top1", name="vit_vs_published",
                                  title="ViT top-1 beside the published numbers"),
           tables.published_table(runs, published, ["imagenet"], exp.arms, file="imagenet", name="imagenet",
                                  title="ImageNet-1K beside [NeurIPS] Table 2"),
           tables.context_table(runs, filters, published, exp.arms, exp.filter_study.dataset),
           tables.convergence_table(runs, published, exp.arms, exp.convergence_epochs),
           tables.ci_alpha_table(ci, published, exp.ci.alpha.arms, exp.ci.alpha.alphas),
           tables.ci_fit_table(ci, exp.ci.alpha.setting, fit_reference),
           tables.ci_table2_table(m3, published, exp.ci.model3.arms) if m3 is not None else None,
           tables.model3_fit_table(m3, dict(exp.ci.model3.fits)),
           tables.ci_table1_table(m3, published) if m3 is not None else None,
           filter_table(filters, published, study.filters, study.dataset),
           gaussian_table(filters, published, study.sigmas, study.heads, study.dataset),
           tables.runs_table(runs, filters, ci)]
    return [t for t in out if t is not None]


def table_notes(built: list[tables.Table], exp: Experiment) -> list[str]:
    """What the tables leave out and why (shown above the tables in the report)."""
    names = {t.name for t in built}
    small = [d for d in exp.datasets if d != "imagenet"]
    notes = []
    if small and "vit_vs_published" not in names:
        notes.append(f"No published ViT number exists for {', '.join(small)} (paper/vit_top1.csv; the [NeurIPS]"
                     " Table 1 cells are n/p), so our ViT results stand beside reference models only.")
    if "imagenet" in exp.datasets and "imagenet" not in names:
        notes.append("ImageNet-1K is configured but no ImageNet run was found.")
    if exp.ci.alpha.datasets and "ci_alpha" not in names:
        notes.append("[CI] α grid: no run of the configured grid was found.")
    if exp.ci.model3.datasets and "ci_table2" not in names:
        notes.append("[CI] Model III grid (Table 2): no run of the configured grid was found.")
    if exp.ci.model3.datasets and exp.ci.model3.forms and "ci_table1" not in names:
        notes.append("[CI] Table 1's other columns: no run of the configured forms was found.")
    if exp.filter_study.filters and "filter_study" not in names:
        notes.append("Filter study: no run of the configured variants was found.")
    if exp.filter_study.sigmas and exp.filter_study.heads and "gaussian" not in names:
        notes.append("Gaussian σ × heads grid: no run was found.")
    return notes


def _stats(frame: pd.DataFrame) -> dict:
    mean, std, n = mean_std(list(frame["top1"]))
    return {"top1_mean": mean, "top1_std": std, "n": n}


def summary_metrics(runs: pd.DataFrame, filters: pd.DataFrame, ci: pd.DataFrame,
                    m3: pd.DataFrame | None = None) -> dict:
    """DVC metrics: mean/std/n of final top-1 (fractions, as metrics.json) per dataset, variant and arm; per
    filter-study variant; per [CI] dataset, α and arm; per Model III dataset, arm, qk and value; per [CI] Table 1
    dataset, form and value."""
    out: dict = {}
    for (d, v, a), frame in runs.groupby(["dataset", "variant", "arm"], sort=False):
        out.setdefault(d, {}).setdefault(v, {})[a] = _stats(frame)
    if len(filters):
        out["filter_study"] = {v: _stats(f) for v, f in filters.groupby("variant", sort=False)}
    if len(ci):
        out["ci_alpha"] = {}
        for (d, alpha, a), frame in ci.groupby(["dataset", "alpha", "arm"], sort=False):
            out["ci_alpha"].setdefault(d, {}).setdefault(f"{alpha:g}", {})[a] = _stats(frame)
    if m3 is not None and len(m3):
        forms = m3["form"] if "form" in m3.columns else pd.Series(MODEL3, index=m3.index)
        for (d, a, qk, v), frame in m3[forms == MODEL3].groupby(["dataset", "arm", "qk", "value"], sort=False):
            out.setdefault("ci_model3", {}).setdefault(d, {}).setdefault(a, {}).setdefault(qk, {})[v] = _stats(frame)
        for (d, f, v), frame in m3[forms != MODEL3].groupby(["dataset", "form", "value"], sort=False):
            out.setdefault("ci_table1", {}).setdefault(d, {}).setdefault(f, {})[v] = _stats(frame)
    return out


def role_metrics(headline: list[dict], arms: Sequence[str]) -> dict:
    """The headline by role: per dataset and variant the method's and each baseline's top-1 (%, with its arm's
    name) and the paired difference method - baseline (points, interval, verdict), whatever the arms are."""
    role = {arms[0]: "method"} | {b: f"baseline{i}" for i, b in enumerate(arms[1:], 1)}
    out: dict = {}
    for row in headline:
        cell = out.setdefault(row["dataset"], {}).setdefault(row["variant"], {})
        for side in ("a", "b"):
            cell[role[row[side]]] = {"arm": row[side], "top1_mean_pct": row[f"{side}_mean"],
                                     "top1_std_pct": row[f"{side}_std"], "n": row[f"{side}_n"]}
        cell[f"method_vs_{role[row['b']]}"] = {"diff_pts": row["mean"], "low_pts": row["low"],
                                               "high_pts": row["high"], "pairs": row["n"], "verdict": row["verdict"]}
    return out


def _unique(frames: list[pd.DataFrame], key: str) -> list:
    values = [v for f in frames if key in f.columns for v in f[key] if isinstance(v, str) or not pd.isna(v)]
    return sorted(dict.fromkeys(str(v) for v in values))


def dataset_facts(names) -> list[dict]:
    """Each dataset used, with its citation and licence (`pipeline.datasets`), for the report to cite."""
    return [{"name": d, "citation": DATASETS[d].citation, "licence": DATASETS[d].licence,
             "homepage": DATASETS[d].homepage} for d in dict.fromkeys(names) if d in DATASETS]


def what_was_run(runs: pd.DataFrame, filters: pd.DataFrame, ci: pd.DataFrame, missing: list[str],
                 exp: Experiment, m3: pd.DataFrame | None = None) -> dict:
    """What was run: profile, params digest, models, datasets (cited), revisions, hardware, versions, sizes, times."""
    m3 = m3 if m3 is not None else pd.DataFrame(columns=["wall_time_s"])
    frames = [runs, filters, ci, m3]
    recorded = {v: rows.iloc[0] for v, rows in runs.groupby("variant", sort=False)}
    shapes = {v: {"width": w, "depth": dp} for v, w, dp in exp.shapes}
    models = {v: {"model": name, "num_heads": heads} | shapes.get(v, {}) | (
        {"family": recorded[v]["family"], "params": recorded[v]["params"]}
        | ({"token_grid": recorded[v]["token_grid"]} if isinstance(recorded[v].get("token_grid"), str) else {})
        if v in recorded else {}) for v, name, heads in exp.models}
    wall = {f"{name}_total_s": float(frame["wall_time_s"].sum())
            for name, frame in (("vit", runs), ("filter_study", filters), ("ci_alpha", ci), ("ci_model3", m3))}
    wall["per_arm_mean_s"] = {f"{d}/{v}/{a}": float(f["wall_time_s"].mean())
                              for (d, v, a), f in runs.groupby(["dataset", "variant", "arm"], sort=False)}
    study, alpha, m3_grid = exp.filter_study, exp.ci.alpha, exp.ci.model3
    used = [*exp.datasets, *([study.dataset] if study.filters or study.sigmas else []), *alpha.datasets,
            *m3_grid.datasets]
    return {"profile": exp.profile, "params_digest": exp.params_digest, "models": models,
            "datasets": list(exp.datasets), "dataset_facts": dataset_facts(used), "arms": list(exp.arms),
            "seeds": list(exp.seeds),
            "filter_study": {"dataset": study.dataset, "variants": list(study.filters), "sigmas": list(study.sigmas),
                             "heads": list(study.heads), "seeds": list(study.seeds)},
            "ci_alpha": {"datasets": list(alpha.datasets), "alphas": list(alpha.alphas), "arms": list(alpha.arms),
                         "seeds": list(alpha.seeds)},
            "ci_model3": {"datasets": list(m3_grid.datasets), "arms": list(m3_grid.arms), "qk": list(m3_grid.qk),
                          "value": list(m3_grid.values), "seeds": list(m3_grid.seeds), "forms": list(m3_grid.forms)},
            "runs": {"vit": len(runs), "filter_study": len(filters), "ci_alpha": len(ci), "ci_model3": len(m3)},
            "missing": missing,
            "git_rev": _unique(frames, "git_rev"), "hardware": _unique(frames, "hardware"),
            "cpu_count": _unique(frames, "cpu_count"), "world_size": _unique(frames, "world_size"),
            "versions": {k: _unique(frames, k) for k in ("python", "torch", "torchvision", "timm")},
            "epochs": _unique([runs], "epochs"), "train_size": _unique(frames, "train_size"),
            "val_size": _unique(frames, "val_size"), "test_size": _unique(frames, "test_size"),
            "wall_time": wall, "confidence": exp.confidence}


def check_test_images(frames: dict[str, pd.DataFrame]) -> None:
    """The runs of one dataset that record per-image correctness were all scored on the same test images, whatever
    stage ran them."""
    scored = [(row.dataset, row.folder, row.images) for f in frames.values() if "dataset" in f.columns
              for row in f.itertuples()]
    for dataset in dict.fromkeys(d for d, _, _ in scored):
        check_images((folder, images) for d, folder, images in scored if d == dataset)


#: what a run records of how it computed that changes its numbers beyond the last bits (pipeline.training.run):
#: the precision `train.amp: auto` resolved to, and the data path (`resources.data_on_device`: batched augmentation
#: on the device, or timm's per image through DataLoader workers)
COMPUTED_BY = {"amp_dtype": "precision", "data_path": "data path"}
#: the tables whose comparisons stay within one value of a column: claim 11 compares the arms of the configs table
#: within one training configuration, and a configuration may set the data path itself (RandAugment runs timm's
#: per-image PIL path, `pipeline.data.load.transforms.resolve_backend`)
COMPARED_WITHIN = {"configs": "config"}


def check_computed_alike(frames: dict[str, pd.DataFrame]) -> None:
    """The runs of one table (an analysis frame, per dataset, and per COMPARED_WITHIN group) were computed alike: one
    precision and one data path; else a PipelineError naming a run of each kind and the fix."""
    for name, frame in frames.items():
        if frame.empty:
            continue
        datasets = frame["dataset"] if "dataset" in frame.columns else pd.Series("", index=frame.index)
        within = COMPARED_WITHIN.get(name)
        if within in frame.columns:
            datasets = datasets.astype(str) + ", " + frame[within].astype(str)
        for dataset in dict.fromkeys(datasets):
            rows = frame[datasets == dataset]
            for key, what in COMPUTED_BY.items():
                kinds = {v: folder for v, folder in zip(rows[key], rows["folder"]) if isinstance(v, str)}
                if len(kinds) > 1:
                    runs = "; ".join(f"{folder} ran with {key} {v}" for v, folder in kinds.items())
                    raise PipelineError(f"the {name} runs of {dataset or 'this experiment'} mix their {what} ({runs}):"
                                        " their differences would measure it, not the init; pin train.amp (precision)"
                                        " and resources.data_on_device (data path) in the profile and re-run the"
                                        " odd ones (dvc repro -f <stage>)")


def check_confidence(plans: dict, exp: Experiment) -> None:
    """params report.confidence is the level of the headline's intervals, which the plan's α also sets."""
    level = plans["headline"].rule("method_baseline").confidence if "headline" in plans else exp.confidence
    if not math.isclose(level, exp.confidence):
        raise PipelineError(f"params report.confidence = {exp.confidence:g} but paper/plan.yaml's headline alpha"
                            f" gives {level:g} (two-sided = 1 - 2 * one-sided alpha); change one to match the other")


def plan_record(plans: dict, paper: str | Path, exp: Experiment, claims: list[dict], revisions: list[str],
                repo: str | Path | None) -> dict:
    """The plan's history from the repository (`plan_history`), the confirmatory seeds' status, and per claim
    its post-hoc changes and whether this run answers it confirmatorily; {} without a repository to read."""
    if repo is None:
        return {}
    readers: dict[str, set] = {}
    for p in plans.values():
        for r in p.rules.values():
            for key in r.n_from.split(" / "):
                if key != "plan":
                    readers.setdefault(key, set()).add(p.claim)
    ids = [c["id"] for c in claims]
    record = plan_history.history(repo, ["headline", *ids], {k: tuple(sorted(v)) for k, v in readers.items()},
                                  revisions)
    confirmatory = load_confirmatory(paper, exp.profile)
    if record.get("available") and confirmatory is not None:
        record["confirmatory"] = plan_history.confirmatory_status(repo, confirmatory.seeds, confirmatory.profile,
                                                                  exp.profile, exp.seed_lists())
    holds = record.get("confirmatory", {}).get("holds", False)
    for c in claims:
        touching = [h for h in record.get("changes", [])
                    if c["id"] in h["claims"] and plan_history.concerns(h, exp.profile)]
        after = [h for h in touching if h.get("after_run") and h["kind"] == plan_history.VERDICT_KIND]
        c["plan"] = {"post_hoc": [h for h in touching if h["post_hoc"]], "after_run": after,
                     "confirmatory": holds and not after}
    return record


def aggregate(results: str | Path, paper: str | Path, exp: Experiment, ci_fit: str | Path = CI_FIT,
              repo: str | Path | None = None, cross_cpu: str | Path = CROSS_CPU) -> Aggregate:
    """Read the experiment's runs, paper/ and the plan, and build the tables, claims, metrics and what was run;
    with `repo` (a git work tree), the plan's history from it too; `cross_cpu`'s measured spread of a cell across CPU
    code paths marks the verdicts at the edge."""
    results = Path(results)
    plans = load_plan(paper, exp.sizes())
    check_confidence(plans, exp)
    frames, missing = read_frames(results, exp.cells)
    rule = load_training_rule(paper)
    frames = {name: trained.annotate(frame, rule, exp.filter_study.dataset) for name, frame in frames.items()}
    check_test_images(frames)
    check_computed_alike(frames)
    runs, filters, ci, m3, configs, sia, ws = (frames[f] for f in ("vit", "filters", "ci", "m3", "configs", "sia",
                                                                   "weight_selection"))
    published = load_published(paper)
    ev = claim_checks.Evidence(runs, filters, exp.arms, exp.datasets, plans, exp.convergence_epochs,
                               exp.kernel_size, exp.filter_study.dataset,
                               load_attention(results / "attention", exp.variants, exp.arms), ci, m3,
                               frozenset(exp.alternatives), configs, sia, ws, dict(exp.settings), published,
                               cell_spread(load_cross_cpu(cross_cpu)))
    head = headline_rows(ev)
    floors = read_floors(results / "floor")
    built = build_tables(runs, filters, ci, published, exp, head, load_fit_reference(ci_fit), m3, floors)
    built += [t for t in [tables.training_table(frames, rule), tables.init_diagnostics_table(ev.attention),
                          tables.train_config_table(runs, configs, exp.arms),
                          tables.weight_selection_table(ws),
                          tables.sia_table(sia, exp.sia.baseline_arm)]
              if t is not None]
    ran = what_was_run(runs, filters, ci, missing, exp, m3)
    ran["runs"]["weight_selection"] = len(ws)
    ran["floor"] = floors
    block = exp.weight_selection
    ran["weight_selection"] = {"datasets": list(block.datasets), "teachers": list(block.teachers),
                               "scratch": list(block.scratch), "seeds": list(block.seeds),
                               "dataset_facts": dataset_facts(block.datasets),
                               "wall_time_total_s": float(ws["wall_time_s"].sum())}
    plan = {"comparisons": [r.row() for p in plans.values() for r in p.rules.values()],
            "thresholds": {p.claim: p.thresholds for p in plans.values() if p.thresholds}}
    judged = claim_checks.check_claims(load_claims(paper), ev)
    plan["history"] = plan_record(plans, paper, exp, judged, ran["git_rev"], repo)
    summary = {"headline": role_metrics(head, exp.arms)} | summary_metrics(runs, filters, ci, m3)
    return Aggregate(built, judged, head, plan, summary,
                     ran | {"table_notes": table_notes(built, exp)})


def jsonable(obj):
    """NaN -> None and numpy scalars -> Python, recursively (JSON has no NaN)."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    return None if isinstance(obj, float) and math.isnan(obj) else obj


def _json(obj) -> str:
    return json.dumps(jsonable(obj), indent=2, ensure_ascii=False) + "\n"


def write_aggregate(agg: Aggregate, tables_dir: str | Path, summary_path: str | Path) -> None:
    """Write the tables folder and summary.json, each all or nothing (`pipeline.outputs`)."""
    with folder_aside(Path(tables_dir)) as tmp:
        for t in agg.tables:
            t.data.to_csv(tmp / f"{t.name}.csv", index=False, float_format="%.4f")
        (tmp / "tables.json").write_text(_json([t.manifest() for t in agg.tables]))
        (tmp / "claims.json").write_text(_json({"confidence": agg.what_was_run["confidence"],
                                                "verdicts": list(claim_checks.VERDICTS), "plan": agg.plan,
                                                "headline": agg.headline, "claims": agg.claims}))
        (tmp / "what_was_run.json").write_text(_json(agg.what_was_run))
    write_text(Path(summary_path), _json(agg.summary))


def add_arguments(parser) -> None:
    parser.add_argument("--results", default=str(RESULTS), help="results root (default: results)")
    parser.add_argument("--paper", default=str(PAPER), help="published numbers (default: paper)")


def main(params: Params, args) -> int:
    results = Path(getattr(args, "results", RESULTS))
    agg = aggregate(results, getattr(args, "paper", PAPER), Experiment.from_params(params), repo=Path("."))
    write_aggregate(agg, results / "tables", results / "summary.json")
    verdicts = ", ".join(f"{c['id']}: {c['verdict']}" for c in agg.claims)
    runs = agg.what_was_run["runs"]
    print(f"aggregate: {runs['vit']} ViT, {runs['filter_study']} filter-study, {runs['ci_alpha']} [CI] α-grid and"
          f" {runs['ci_model3']} Model III runs"
          f" ({len(agg.what_was_run['missing'])} missing); {len(agg.tables)} tables in {results / 'tables'};"
          f" claims {verdicts}")
    return 0


if __name__ == "__main__":
    sys.exit(entry.command(__spec__.name, add_arguments, main))

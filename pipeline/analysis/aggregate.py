"""`python -m pipeline aggregate`: this experiment's tables, claims and DVC metrics, from results/ and paper/.

Reads only the runs params.yaml names (`pipeline.analysis.runs`: results/train/<dataset>/<arm>/seed<k>/ and
results/filter_study/<variant>/seed<k>/ metrics.json; results/attention/<arm>/measures.json for claim 7) and the
published numbers of paper/ (`pipeline.analysis.published`). Writes, each into a temporary name moved into place:

    results/tables/<name>.csv, <name>.md   every table (CSV: numbers in percent; Markdown: as the report shows it)
    results/tables/tables.json             the tables in reading order, as the report renders them
    results/tables/claims.json, claims.md  the headline comparison and each claim of paper.md 2.10 with a verdict
    results/tables/provenance.json         what was run: revisions, hardware, versions, wall times, missing runs
    results/summary.json                   DVC metrics: {dataset: {arm: {top1_mean, top1_std, n}}, filter_study: ...}

so `dvc exp show` has one column per dataset/arm and `dvc metrics diff` compares experiments at a glance.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.analysis import claims as claim_checks
from pipeline.analysis import tables
from pipeline.analysis.filter_tables import filter_table, gaussian_table
from pipeline.analysis.published import load_claims, load_published
from pipeline.analysis.runs import load_filter_runs, load_vit_runs, read_metrics
from pipeline.analysis.stats import mean_std
from pipeline.config import Params, digest

RESULTS, PAPER = Path("results"), Path("paper")


@dataclass(frozen=True)
class Experiment:
    """What the current experiment consists of: the runs to read and how to judge them (from params.yaml)."""

    datasets: tuple
    arms: tuple  #: the method under study first, then the baselines
    seeds: tuple
    variants: tuple = ("vit",)  #: the model variants of the grid; the claims read the first (for now)
    filters: tuple = ()
    sigmas: tuple = ()
    heads: tuple = ()
    filter_seeds: tuple = ()
    filter_dataset: str = ""
    convergence_epochs: tuple = (2, 4, 8)
    confidence: float = 0.95
    model_name: str = "vit_tiny_patch16_224"
    num_heads: int | None = None
    kernel_size: int = 3  #: the impulse filters' f (claim 3's f², claim 7's neighbourhood)
    profile: str = ""
    params_digest: str = ""

    @classmethod
    def from_params(cls, params: Params) -> Experiment:
        study, model = params.filter_study, params.models[params.variants[0]]
        return cls(tuple(params.datasets), tuple(params.arms), tuple(params.seeds), tuple(params.variants),
                   tuple(study.filters), tuple(study.gaussian_sigmas), tuple(study.gaussian_heads), tuple(study.seeds),
                   study.dataset, tuple(params.report.convergence_epochs), params.report.confidence, model.name,
                   model.num_heads, params.impulse.kernel_size, params.profile, digest(params))


@dataclass
class Aggregate:
    """Everything the stage writes."""

    tables: list[tables.Table]
    claims: list[dict]
    headline: list[dict]
    summary: dict
    provenance: dict


def load_attention(attention_root: Path, arms) -> dict:
    """arm -> measures.json of the attention stage, for the arms that have one."""
    paths = {a: Path(attention_root) / a / "measures.json" for a in arms}
    return {a: read_metrics(p) for a, p in paths.items() if p.is_file()}


def build_tables(runs: pd.DataFrame, filters: pd.DataFrame, published: pd.DataFrame, exp: Experiment,
                 comparisons: list) -> list[tables.Table]:
    """Every table, in reading order; a table whose inputs do not exist is left out, not faked."""
    small = [d for d in exp.datasets if d != "imagenet"]
    out = [tables.headline_table(comparisons), tables.vit_table(runs, exp.datasets, exp.arms)]
    if small:
        out.append(tables.published_table(runs, published, small, exp.arms, file="vit_top1",
                                          name="vit_vs_published", title="ViT top-1 beside the published numbers",
                                          model_name=exp.model_name))
    if (runs["dataset"] == "imagenet").any():
        out.append(tables.published_table(runs, published, ["imagenet"], exp.arms, file="imagenet", name="imagenet",
                                          title="ImageNet-1K beside [NeurIPS] Table 2", model_name=exp.model_name))
    out += [tables.context_table(runs, filters, published, exp.datasets, exp.arms, exp.filter_dataset),
            tables.convergence_table(runs, published, exp.arms, exp.convergence_epochs),
            filter_table(filters, published, exp.filters),
            gaussian_table(filters, published, exp.sigmas, exp.heads),
            tables.runs_table(runs, filters)]
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
    if exp.filters and "filter_study" not in names:
        notes.append("Filter study: no run of the configured variants was found.")
    if exp.sigmas and exp.heads and "gaussian" not in names:
        notes.append("Gaussian σ × heads grid: no run was found.")
    return notes


def summary_metrics(runs: pd.DataFrame, filters: pd.DataFrame) -> dict:
    """DVC metrics: mean/std/n of final top-1 (fractions, as metrics.json) per dataset and arm, and per variant."""
    def stats(frame: pd.DataFrame) -> dict:
        mean, std, n = mean_std(list(frame["top1"]))
        return {"top1_mean": mean, "top1_std": std, "n": n}

    out = {d: {a: stats(f) for a, f in frame.groupby("arm", sort=False)} for d, frame in runs.groupby("dataset",
                                                                                                     sort=False)}
    if len(filters):
        out["filter_study"] = {v: stats(f) for v, f in filters.groupby("variant", sort=False)}
    return out


def _unique(frames: list[pd.DataFrame], key: str) -> list:
    values = [v for f in frames if key in f.columns for v in f[key] if isinstance(v, str) or not pd.isna(v)]
    return sorted(dict.fromkeys(str(v) for v in values))


def provenance(runs: pd.DataFrame, filters: pd.DataFrame, missing: list[str], exp: Experiment) -> dict:
    """What was run: revisions, params digest, profile, hardware, versions, sizes and wall times."""
    frames = [runs, filters]
    wall = {"vit_total_s": float(runs["wall_time_s"].sum()),
            "filter_study_total_s": float(filters["wall_time_s"].sum())}
    wall["per_arm_mean_s"] = {f"{d}/{a}": float(f["wall_time_s"].mean())
                              for (d, a), f in runs.groupby(["dataset", "arm"], sort=False)}
    return {"profile": exp.profile, "params_digest": exp.params_digest, "model": exp.model_name,
            "datasets": list(exp.datasets), "arms": list(exp.arms), "seeds": list(exp.seeds),
            "filter_study": {"dataset": exp.filter_dataset, "variants": list(exp.filters), "sigmas": list(exp.sigmas),
                             "heads": list(exp.heads), "seeds": list(exp.filter_seeds)},
            "runs": {"vit": len(runs), "filter_study": len(filters)}, "missing": missing,
            "git_rev": _unique(frames, "git_rev"), "hardware": _unique(frames, "hardware"),
            "cpu_count": _unique(frames, "cpu_count"), "world_size": _unique(frames, "world_size"),
            "versions": {k: _unique(frames, k) for k in ("python", "torch", "torchvision", "timm")},
            "epochs": _unique([runs], "epochs"), "train_size": _unique(frames, "train_size"),
            "val_size": _unique(frames, "val_size"), "wall_time": wall, "confidence": exp.confidence}


def aggregate(results: str | Path, paper: str | Path, exp: Experiment) -> Aggregate:
    """Read the experiment's runs and paper/, and build the tables, claims, metrics and provenance."""
    results = Path(results)
    runs, missing = load_vit_runs(results / "train", exp.datasets, exp.variants[:1], exp.arms, exp.seeds)
    filters, filters_missing = load_filter_runs(results / "filter_study", exp.filters, exp.sigmas, exp.heads,
                                                exp.filter_seeds)
    published = load_published(paper)
    ev = claim_checks.Evidence(runs, filters, exp.arms, exp.datasets, exp.confidence, exp.convergence_epochs,
                               exp.model_name, exp.num_heads, exp.kernel_size, exp.filter_dataset,
                               load_attention(results / "attention" / exp.variants[0], exp.arms))
    stats = tables.group_stats(runs, ["dataset", "arm"])
    comparisons = [(d, p, tables.lookup(stats, dataset=d, arm=p.a), tables.lookup(stats, dataset=d, arm=p.b))
                   for d, p in claim_checks.headline(ev)]
    head = [{"dataset": d, **p.as_dict(), "outcome": p.outcome(), "a_mean": sa["mean"], "a_std": sa["std"],
             "a_n": sa["n"], "b_mean": sb["mean"], "b_std": sb["std"], "b_n": sb["n"]} for d, p, sa, sb in comparisons]
    built = build_tables(runs, filters, published, exp, comparisons)
    prov = provenance(runs, filters, missing + filters_missing, exp) | {"table_notes": table_notes(built, exp)}
    return Aggregate(built, claim_checks.check_claims(load_claims(paper), ev), head, summary_metrics(runs, filters),
                     prov)


def jsonable(obj):
    """NaN -> None and numpy scalars -> Python, recursively (JSON has no NaN)."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    return None if isinstance(obj, float) and math.isnan(obj) else obj


def claims_markdown(claims: list[dict]) -> str:
    """claims.md: a verdict table, then each claim with its evidence lines."""
    lines = ["# Claims of paper.md 2.10, checked on this run", "", "| # | Claim | Verdict |", "| --- | --- | --- |"]
    lines += [f"| {c['id']} | {c['claim'].replace('|', '/')} | **{c['verdict']}** |" for c in claims]
    for c in claims:
        lines += ["", f"**Claim {c['id']}: {c['verdict']}.** {c['claim']}", "",
                  f"Published: {c['published'].rstrip('.')}. Source: {c['source'].rstrip('.')}.", "",
                  *(f"- {e}" for e in c["evidence"])]
    return "\n".join(lines) + "\n"


def _write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(jsonable(obj), indent=2, ensure_ascii=False) + "\n")


def write_aggregate(agg: Aggregate, tables_dir: str | Path, summary_path: str | Path) -> None:
    """Write every output into temporary names, then move them into place (never a half-written out)."""
    tables_dir, summary_path = Path(tables_dir), Path(summary_path)
    tmp = tables_dir.with_name(tables_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for t in agg.tables:
        t.data.to_csv(tmp / f"{t.name}.csv", index=False, float_format="%.4f")
        (tmp / f"{t.name}.md").write_text(f"## {t.title}\n\n{t.markdown()}\n\n{t.caption}\n")
    _write_json(tmp / "tables.json", [t.manifest() for t in agg.tables])
    _write_json(tmp / "claims.json", {"confidence": agg.provenance["confidence"], "headline": agg.headline,
                                      "claims": agg.claims})
    (tmp / "claims.md").write_text(claims_markdown(agg.claims))
    _write_json(tmp / "provenance.json", agg.provenance)
    shutil.rmtree(tables_dir, ignore_errors=True)
    os.replace(tmp, tables_dir)
    summary_path.parent.mkdir(parents=True, exist_ok=True)
    _write_json(summary_path.with_name(summary_path.name + ".partial"), agg.summary)
    os.replace(summary_path.with_name(summary_path.name + ".partial"), summary_path)


def add_arguments(parser) -> None:
    parser.add_argument("--results", default=str(RESULTS), help="results root (default: results)")
    parser.add_argument("--paper", default=str(PAPER), help="published numbers (default: paper)")


def main(params: Params, args) -> int:
    results = Path(getattr(args, "results", RESULTS))
    agg = aggregate(results, getattr(args, "paper", PAPER), Experiment.from_params(params))
    write_aggregate(agg, results / "tables", results / "summary.json")
    verdicts = ", ".join(f"{c['id']}: {c['verdict']}" for c in agg.claims)
    print(f"aggregate: {agg.provenance['runs']['vit']} ViT and {agg.provenance['runs']['filter_study']} filter-study"
          f" runs ({len(agg.provenance['missing'])} missing); {len(agg.tables)} tables in {results / 'tables'};"
          f" claims {verdicts}")
    return 0

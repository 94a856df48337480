"""The aggregate's tables, in the papers' layouts, each beside the published numbers where they exist.

Every table is a `Table`: display rows (strings, ``**bold**`` marks the best cell) for Markdown and the PDF, and a
numeric frame (percent) for its CSV. Our accuracies are fractions in metrics.json; tables show percent with two
decimals, as the papers do, and differences in percentage points ("pts").

Layouts: [NeurIPS] Table 1 (arms × datasets, mean ± std over seeds), its Table 2 for ImageNet, the rebuttal's
convergence table (Table 7 of the camera-ready), [CI] Fig. 4's bar data (filter variants) and [CI] Table 6
(Gaussian σ × heads). The published numbers come from paper/ (`pipeline.analysis.published`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from pipeline.analysis.published import select
from pipeline.analysis.runs import at_epoch
from pipeline.analysis.stats import Paired, mean_std

NA = "–"  #: a cell this run has no number for
NP = "n/p"  #: a cell the papers do not publish


@dataclass
class Table:
    """One table: what the report shows (columns, display rows) and what its CSV holds (data, percent)."""

    name: str
    title: str
    caption: str
    columns: list[str]
    rows: list[list[str]]
    data: pd.DataFrame = field(repr=False)
    section: str = "results"  #: headline | results | filter_study | provenance

    def markdown(self) -> str:
        """A GitHub-flavoured Markdown table (pipes in cells escaped)."""
        def line(cells):
            return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

        return "\n".join([line(self.columns), line(["---"] * len(self.columns)), *map(line, self.rows)])

    def manifest(self) -> dict:
        """The JSON entry of results/tables/tables.json the report renders from."""
        return {"name": self.name, "title": self.title, "caption": self.caption, "section": self.section,
                "columns": self.columns, "rows": self.rows, "csv": f"{self.name}.csv", "md": f"{self.name}.md"}


def num(x: float | None, signed: bool = False) -> str:
    """A percent or points value with two decimals ('+' for differences); NA when missing (None or NaN)."""
    if x is None or not math.isfinite(x):
        return NA
    return f"{x:+.2f}" if signed else f"{x:.2f}"


def mean_pm(mean: float, std: float, n: int | None = None) -> str:
    """'85.12 ± 0.31' (just the mean when n = 1; NA when there are no runs), with '(n=k)' when n is given."""
    if not math.isfinite(mean):
        return NA
    text = f"{mean:.2f} ± {std:.2f}" if math.isfinite(std) else f"{mean:.2f}"
    return f"{text} (n={n})" if n is not None else text


def interval(p: Paired) -> str:
    """'[-2.10, +3.94]', or NA with fewer than two pairs."""
    return f"[{num(p.low, True)}, {num(p.high, True)}]" if p.enough else NA


def bold_best(cells: list[str], values: list[float]) -> list[str]:
    """Bold the cells holding the largest finite value (ties all bold)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return cells
    return [f"**{c}**" if math.isfinite(v) and v == max(finite) else c for c, v in zip(cells, values)]


def display_arms(arms: Sequence[str]) -> list[str]:
    """Baselines first and the method under study (arms[0]) last, as the papers' tables list them."""
    return [*arms[1:], arms[0]]


def group_stats(runs: pd.DataFrame, keys: list[str], metric: str = "top1") -> pd.DataFrame:
    """Per group of `keys`: n, mean, std, min, max of `metric` in percent."""
    rows = []
    for group, frame in runs.groupby(keys, sort=False):
        values = [100 * v for v in frame[metric] if v is not None and math.isfinite(v)]
        mean, std, n = mean_std(values)
        rows.append(dict(zip(keys, group if isinstance(group, tuple) else (group,)))
                    | {"n": n, "mean": mean, "std": std, "min": min(values, default=math.nan),
                       "max": max(values, default=math.nan)})
    return pd.DataFrame(rows, columns=[*keys, "n", "mean", "std", "min", "max"])


def lookup(stats: pd.DataFrame, **keys) -> dict:
    """The stats row matching `keys`, or NaNs with n = 0."""
    rows = stats
    for k, v in keys.items():
        rows = rows[rows[k] == v]
    if len(rows):
        row = rows.iloc[0].to_dict()
        return row | {"n": int(row["n"])}
    return {"n": 0, "mean": math.nan, "std": math.nan, "min": math.nan, "max": math.nan}


def published_cell(rows: pd.DataFrame, named: bool = False) -> tuple[str, float]:
    """(display, first published number) of paper/ rows: numbers first, 'n/p' for unpublished cells.

    With `named`, each entry says its table, e.g. '92.82 ([SIA] ConvMixer); n/p ([CI] Fig. 4)'.
    """
    if rows.empty:
        return NA, math.nan
    rows = rows.assign(known=rows["value"].notna()).sort_values("known", ascending=False, kind="stable")
    shown = [(f"{v:.2f}" if k else NP) + (f" ({t})" if named else "")
             for v, k, t in zip(rows["value"], rows["known"], rows["table"])]
    finite = rows.loc[rows["known"], "value"]
    return "; ".join(dict.fromkeys(shown)), float(finite.iloc[0]) if len(finite) else math.nan


def vit_table(runs: pd.DataFrame, datasets: Sequence[str], arms: Sequence[str]) -> Table:
    """[NeurIPS] Table 1 layout: arms × datasets, final val top-1 mean ± std over seeds, best in bold, Δ vs default."""
    stats = group_stats(runs, ["dataset", "arm"])
    order = display_arms(arms)
    cells = {d: [lookup(stats, dataset=d, arm=a) for a in order] for d in datasets}
    shown = {d: bold_best([mean_pm(s["mean"], s["std"], s["n"]) for s in cells[d]], [s["mean"] for s in cells[d]])
             for d in datasets}
    rows = [[arm, *(shown[d][i] for d in datasets)] for i, arm in enumerate(order)]
    base = {d: lookup(stats, dataset=d, arm="default")["mean"] for d in datasets}
    deltas = [a for a in order if a != "default"] if "default" in arms else []
    rows += [[f"Δ {a} - default (pts)", *(num(lookup(stats, dataset=d, arm=a)["mean"] - base[d], True)
                                          for d in datasets)] for a in deltas]
    data = stats.assign(delta_vs_default=[s - base.get(d, math.nan) for d, s in zip(stats["dataset"], stats["mean"])])
    caption = ("Final validation top-1 (%), mean ± sample std over seeds, n = seeds run; best per dataset in bold."
               + (" Δ rows: difference of means to the default arm, in points." if deltas else
                  " No `default` arm in this experiment, so no Δ rows."))
    return Table("vit_top1", "ViT top-1 by arm and dataset ([NeurIPS] Table 1 layout)", caption,
                 ["Arm", *datasets], rows, data)


def ours_for(runs: pd.DataFrame, stats: dict, dataset: str, arm: str, metric: str) -> dict:
    """Our mean/std/n for a published row's metric: top1, best_top1, or delta_vs_default (mean difference)."""
    if metric == "delta_vs_default":
        s = group_stats(runs[runs["dataset"] == dataset], ["arm"])
        mean = lookup(s, arm=arm)["mean"] - lookup(s, arm="default")["mean"]
        return {"mean": mean, "std": math.nan, "n": lookup(s, arm=arm)["n"]}
    return lookup(stats[metric], dataset=dataset, arm=arm)


def comparable(rows: pd.DataFrame, model_name: str) -> pd.DataFrame:
    """Published rows to put beside our runs: full training sets only, and, where the row names a timm model,
    only our model (a ViT-B row is not set beside a ViT-T run). Other rows stay in paper/ for the record."""
    full = rows["data_fraction"].isna() | (rows["data_fraction"] == 1) if "data_fraction" in rows else True
    timm_name = rows["model"].str.match(r"^(vit|deit|swin|mixer)_\S+$")
    return rows[full & (~timm_name | (rows["model"] == model_name))]


def published_table(runs: pd.DataFrame, published: pd.DataFrame, datasets: Sequence[str], arms: Sequence[str], *,
                    file: str, name: str, title: str, model_name: str) -> Table | None:
    """Our arms beside every comparable published cell (incl. n/p) for the same dataset and arm in
    paper/<file>.csv (see `comparable`)."""
    stats = {m: group_stats(runs, ["dataset", "arm"], m) for m in ("top1", "best_top1")}
    rows, data = [], []
    for dataset in datasets:
        for arm in display_arms(arms):
            for _, pub in comparable(select(published, file, dataset=dataset, arm=arm), model_name).iterrows():
                ours = ours_for(runs, stats, dataset, arm, pub["metric"])
                diff = ours["mean"] - pub["value"]
                rows.append([dataset, arm, pub["metric"], mean_pm(ours["mean"], ours["std"], ours["n"]),
                             NP if pub["status"] == "n/p" else num(pub["value"]), num(diff, True),
                             f"{pub['table']}; {pub['source']}, {pub['status']}", f"{pub['model']}; {pub['setting']}"])
                data.append({"dataset": dataset, "arm": arm, "metric": pub["metric"], "ours_mean": ours["mean"],
                             "ours_std": ours["std"], "n": ours["n"], "published": pub["value"],
                             "ours_minus_published": diff, "table": pub["table"], "source": pub["source"],
                             "status": pub["status"], "version": pub["version"], "profile": pub["profile"]})
    if not rows:
        return None
    caption = ("Our mean ± std (n seeds) beside every published cell for the same dataset, arm and model (paper/"
               f"{file}.csv; rows on a fraction of the training data or another timm model are left out here)."
               " Published recipes differ from this run's unless its profile matches; the setting column says how."
               " n/p = not published in a reachable source.")
    return Table(name, title, caption, ["Dataset", "Arm", "Metric", "Ours %", "Published %", "Ours - published",
                                        "Published in", "Published setting"], rows, pd.DataFrame(data))


def reference_rows(published: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """Published numbers of other models on `dataset`: references.csv, arm-less ImageNet rows, ConvMixer vs ViT."""
    rows = published[(published["dataset"] == dataset) & published["value"].notna()]
    keep = (rows["file"].isin(["references", "convmixer_vs_vit"])
            | ((rows["file"] == "imagenet") & (rows["arm"] == "")))
    return rows[keep]


def context_table(runs: pd.DataFrame, filters: pd.DataFrame, published: pd.DataFrame, datasets: Sequence[str],
                  arms: Sequence[str], filter_dataset: str) -> Table | None:
    """Per dataset: our ViT arms, our learned ConvMixer, and outside reference models, with Δ to the method."""
    stats = group_stats(runs, ["dataset", "arm"])
    rows, data = [], []
    for dataset in datasets:
        method = lookup(stats, dataset=dataset, arm=arms[0])["mean"]
        entries = [(f"ViT, {a} init (ours)", lookup(stats, dataset=dataset, arm=a), "this run") for a in arms]
        learned = filters[filters["variant"] == "learned"] if len(filters) else filters
        if dataset == filter_dataset and len(learned):
            entries.append(("ConvMixer, learned filters (ours, filter study)",
                            lookup(group_stats(learned, ["variant"]), variant="learned"), "this run"))
        for _, pub in reference_rows(published, dataset).iterrows():
            label = pub["model"] + (f" [{pub['arm']}]" if pub["arm"] else "")
            entries.append((label, {"mean": pub["value"], "std": math.nan, "n": None},
                            f"{pub['table']} ({pub['source']}, {pub['status']})"))
        if len(entries) == len(arms):
            continue  # nothing to put our arms beside
        for label, s, source in entries:
            rows.append([dataset, label, mean_pm(s["mean"], s["std"]), str(s["n"] or ""), source,
                         num(s["mean"] - method, True)])
            data.append({"dataset": dataset, "model": label, "mean": s["mean"], "std": s["std"], "n": s["n"],
                         "source": source, f"delta_vs_{arms[0]}": s["mean"] - method})
    if not rows:
        return None
    caption = (f"Our ViT arms beside our learned ConvMixer and reference models not from the paper (paper/"
               f"references.csv; e.g. Fashion-MNIST's benchmark CNNs, trained on the full training set). Last"
               f" column: top-1 minus ViT {arms[0]} (ours), in points.")
    return Table("context", "Context: our runs beside reference models", caption,
                 ["Dataset", "Model", "Top-1 %", "n", "Source", f"Δ vs ViT {arms[0]} (pts)"], rows, pd.DataFrame(data))


def convergence_columns(runs: pd.DataFrame, epochs: Sequence[int]) -> pd.DataFrame:
    """`runs` with columns val_top1@e and train_top1@e (fractions) read from each run's history."""
    extra = {f"{k}@{e}": [at_epoch(h, e, k) for h in runs["history"]] for e in epochs for k in ("val_top1",
                                                                                                 "train_top1")}
    return runs.assign(**extra)


def clip_epochs(runs: pd.DataFrame, epochs: Sequence[int]) -> tuple[list[int], str]:
    """The requested epochs every run reached (the last epoch when none), and a note on what was clipped."""
    run_epochs = [len(h) for h in runs["history"]] or [0]
    last = min(run_epochs)
    kept = [e for e in epochs if 1 <= e <= last]
    note = "" if kept == list(epochs) else f" Requested epochs {list(epochs)} clipped to the {last} every run has."
    return (kept or ([last] if last else [])), note


def _convergence_cells(runs: pd.DataFrame, published: pd.DataFrame, dataset: str, arm: str,
                       epochs: Sequence[int]) -> dict:
    """One arm's val/train top-1 (mean, std, n) at each epoch, and the published training accuracy there."""
    sub = runs[(runs["dataset"] == dataset) & (runs["arm"] == arm)]
    out = {}
    for e in epochs:
        for key in ("val_top1", "train_top1"):
            out[(key, e)] = mean_std([100 * v for v in sub[f"{key}@{e}"]])
        out[("paper", e)] = published_cell(select(published, "convergence", dataset=dataset, arm=arm, epoch=e))[1]
    return out


def convergence_table(runs: pd.DataFrame, published: pd.DataFrame, arms: Sequence[str],
                      epochs: Sequence[int]) -> Table | None:
    """The rebuttal's convergence layout: per arm, val and train top-1 at given epochs (mean ± std over seeds)."""
    kept, note = clip_epochs(runs, epochs)
    if runs.empty or not kept:
        return None
    runs = convergence_columns(runs, kept)
    datasets = list(dict.fromkeys(runs["dataset"]))
    cells = {(d, a): _convergence_cells(runs, published, d, a, kept) for d in datasets for a in display_arms(arms)}
    paper_epochs = [e for e in kept if any(math.isfinite(c[("paper", e)]) for c in cells.values())]
    keys = [(k, e) for e in kept for k in ("val_top1", "train_top1")]
    rows = []
    for d in datasets:
        block = [[mean_pm(*cells[(d, a)][k][:2]) for k in keys] for a in display_arms(arms)]
        for j, k in enumerate(keys):  # best arm per column in bold
            bolded = bold_best([r[j] for r in block], [cells[(d, a)][k][0] for a in display_arms(arms)])
            for r, b in zip(block, bolded):
                r[j] = b
        rows += [[d, a, *r, *(num(cells[(d, a)][("paper", e)]) for e in paper_epochs)]
                 for a, r in zip(display_arms(arms), block)]
    data = pd.DataFrame([{"dataset": d, "arm": a, "epoch": e, "metric": k, "mean": c[(k, e)][0],
                          "std": c[(k, e)][1], "n": c[(k, e)][2], "published_train_top1": c[("paper", e)]}
                         for (d, a), c in cells.items() for k, e in keys])
    columns = ["Dataset", "Arm", *(f"{'val' if k == 'val_top1' else 'train'} @{e}" for k, e in keys),
               *(f"paper train @{e}" for e in paper_epochs)]
    caption = ("Top-1 (%) after the given number of epochs, mean ± std over seeds, on the validation set (val) and"
               " on the training batches as trained (train: with this run's augmentation); best arm per column in"
               " bold. The paper's table ([NeurIPS] camera-ready Table 7) gives training accuracy at epochs"
               " 10/50/100 of ViT-T on CIFAR-10 (paper/convergence.csv)." + note)
    return Table("convergence", "Convergence: top-1 at given epochs (rebuttal Table 7 layout)", caption, columns,
                 rows, data)


def runs_table(runs: pd.DataFrame, filters: pd.DataFrame) -> Table:
    """Every run read, with its final/best top-1, epochs, wall time, throughput and hardware."""
    frames = [runs.assign(study="ViT " + runs["dataset"], name=runs["arm"]),
              filters.assign(study="filter study", name=filters["variant"])]
    both = pd.concat([f for f in frames if len(f)], ignore_index=True) if len(runs) or len(filters) else runs
    rows, data = [], []
    for _, r in both.iterrows():
        best = f"{num(100 * r['best_top1'])} (ep {r['best_epoch']})" if math.isfinite(r["best_top1"]) else NA
        rows.append([r["study"], r["name"], str(r["seed"]), num(100 * r["top1"]), best, str(r["epochs"]),
                     f"{num(r['wall_time_s'] / 60)} min", num(r["images_per_s"]), str(r["hardware"])])
        data.append({"study": r["study"], "run": r["name"], "seed": r["seed"], "top1": 100 * r["top1"],
                     "best_top1": 100 * r["best_top1"], "best_epoch": r["best_epoch"], "epochs": r["epochs"],
                     "wall_time_s": r["wall_time_s"], "images_per_s": r["images_per_s"], "hardware": r["hardware"],
                     "git_rev": r["git_rev"], "config_digest": r["config_digest"]})
    return Table("runs", "Every run of this experiment", "From each run's metrics.json: final and best validation"
                 " top-1 (%), epochs, wall time and mean training throughput.",
                 ["Study", "Arm / variant", "Seed", "Top-1 %", "Best % (epoch)", "Epochs", "Wall time", "Images/s",
                  "Hardware"], rows, pd.DataFrame(data), section="provenance")


def headline_table(comparisons: list[tuple[str, Paired, dict, dict]]) -> Table:
    """The method against each baseline per dataset: both arms' mean ± std, the paired Δ and its interval."""
    rows, data = [], []
    for dataset, p, sa, sb in comparisons:
        rows.append([dataset, f"{p.a} vs {p.b}", mean_pm(sa["mean"], sa["std"], sa["n"]),
                     mean_pm(sb["mean"], sb["std"], sb["n"]), str(p.n), num(p.mean, True), interval(p), p.outcome()])
        data.append({"dataset": dataset, **p.as_dict(), "a_mean": sa["mean"], "a_std": sa["std"],
                     "b_mean": sb["mean"], "b_std": sb["std"]})
    level = f"{100 * comparisons[0][1].confidence:g}%" if comparisons else "95%"
    caption = ("Final validation top-1 (%): each arm's mean ± std over its seeds, and the paired difference over the"
               f" seeds both ran (same seed = same data order and augmentation) with its {level} t interval."
               " 'no significant difference' = the interval includes 0.")
    return Table("headline", "Headline: the method under study against each baseline", caption,
                 ["Dataset", "Comparison", "Method %", "Baseline %", "Pairs", "Δ (pts)", f"{level} CI", "Outcome"],
                 rows, pd.DataFrame(data), section="headline")

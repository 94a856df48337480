"""The aggregate's tables, in the papers' layouts, each beside the published numbers where they exist.

Every table is a `Table`: display rows (strings, ``**bold**`` marks the best cell) that the report renders to
Markdown and PDF, and a numeric frame (percent) for its CSV. Our accuracies are fractions in metrics.json; tables
show percent with two decimals, as the papers do, and differences in percentage points ("pts").

The ViT tables are per (dataset, model variant): a column or row group per pair, the variant named when the grid
has several. Layouts: [NeurIPS] Table 1 (arms × datasets, mean ± std over seeds), its Table 2 for ImageNet, the
rebuttal's convergence table (Table 7 of the camera-ready), [CI] Tables 3-8 (arms × α; `ci_alpha_table`), [CI]
Fig. 4's bar data and [CI] Table 6 (`pipeline.analysis.filter_tables`). The published numbers come from paper/
(`pipeline.analysis.published`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pandas as pd

from pipeline.analysis.numbers import NA, NP, mean_pm, num
from pipeline.analysis.published import select
from pipeline.analysis.runs import clip_epochs, convergence_columns, model3_rows
from pipeline.analysis.stats import mean_std
from pipeline.experiments.ci import MODEL3, fit_setting
from pipeline.experiments.weight_selection import SCRATCH
from pipeline.vocabulary import parse_sia_cell


@dataclass
class Table:
    """One table: what the report shows (columns, display rows) and what its CSV holds (data, percent)."""

    name: str
    title: str
    caption: str
    columns: list[str]
    rows: list[list[str]]
    data: pd.DataFrame = field(repr=False)
    section: str = "results"  #: headline | results | ci_alpha | ci_model3 | filter_study | init_diagnostics | appendix

    def manifest(self) -> dict:
        """The JSON entry of results/tables/tables.json the report renders from."""
        return {"name": self.name, "title": self.title, "caption": self.caption, "section": self.section,
                "columns": self.columns, "rows": self.rows, "csv": f"{self.name}.csv"}
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
    """Per group of `keys`: n, mean, std (ddof=1), min, max of the finite values of `metric`, in percent."""
    values = 100 * pd.to_numeric(runs[metric], errors="coerce").replace([math.inf, -math.inf], math.nan)
    stats = values.groupby([runs[k] for k in keys], sort=False).agg(["count", "mean", "std", "min", "max"])
    return stats.rename(columns={"count": "n"}).reset_index()[[*keys, "n", "mean", "std", "min", "max"]]


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


def cells(runs: pd.DataFrame) -> list[tuple[str, str]]:
    """The (dataset, variant) pairs that have runs, in the experiment's order."""
    return list(dict.fromkeys(zip(runs["dataset"], runs["variant"])))


def cell_label(dataset: str, variant: str, several: bool) -> str:
    """'cifar10' when the grid has one variant, 'cifar10, vit6' when it has several."""
    return f"{dataset}, {variant}" if several else dataset


def final_top1(frame: pd.DataFrame) -> str:
    """What a frame's `top1` is (`pipeline.analysis.runs`): test top-1 where the runs scored the whole test split."""
    scored = [c is not None for c in frame["correct"]] if "correct" in frame else []
    if scored and all(scored):
        return "final top-1 on the whole test split"
    return "final top-1 (on the whole test split where a run scored it, else validation)" if any(scored) else \
        "final validation top-1"


def floor_text(floor: dict) -> str:
    """A floor's mean ± std over its seeds (std null with one seed)."""
    std = floor["std"] if floor["std"] is not None else math.nan
    return mean_pm(floor["mean"], std, len(floor["seeds"]))


def floor_note(floors: dict, datasets: Sequence[str]) -> str:
    """The floor beside a table (`pipeline.analysis.floor`): a logistic regression on the same training images."""
    shown = [f"{floor_text(f)} on {d} ({f['train_images']:,} training images)" for d, f in floors.items()
             if f.get("computed") and d in datasets]
    return (" Reference (the floor): a logistic regression on the pixels of each seed's training images, scored on"
            f" the same test images, reaches {'; '.join(shown)} (results/floor); an arm below it does not beat a"
            " linear read of those pixels, a reference point and not a ceiling (a kernel machine on the same images"
            " does a few points better)." if shown else "")


def below_floor(comparisons: list[dict], floors: dict) -> str:
    """' Below the floor: ...' naming each headline arm whose mean is below its dataset's floor, or ''."""
    below = {}
    for c in comparisons:
        floor = floors.get(c["dataset"], {})
        for arm, mean in ((c["a"], c["a_mean"]), (c["b"], c["b_mean"])):
            if floor.get("computed") and mean is not None and mean < floor["mean"]:
                below.setdefault(cell_label(c["dataset"], c["variant"], True), {})[arm] = None
    return (" Below the floor: " + "; ".join(f"{', '.join(arms)} on {where}" for where, arms in below.items()) + "."
            if below else "")


def floor_row(floors: dict, groups: Sequence[tuple[str, str]]) -> list[str] | None:
    """A table row of each column's dataset floor, or None when no column has one."""
    cells = [floor_text(f) if (f := floors.get(d, {})).get("computed") else NA for d, _ in groups]
    return ["logistic regression (floor)", *cells] if any(c != NA for c in cells) else None


def vit_table(runs: pd.DataFrame, arms: Sequence[str], floors: dict | None = None) -> Table | None:
    """[NeurIPS] Table 1 layout: arms × (dataset, variant), final val top-1 mean ± std over seeds, best in bold,
    Δ vs default, and the floor a reader knows (`floor_row`)."""
    groups = cells(runs)
    if not groups:
        return None
    several = len({v for _, v in groups}) > 1
    stats = group_stats(runs, ["dataset", "variant", "arm"])
    order = display_arms(arms)
    found = {g: [lookup(stats, dataset=g[0], variant=g[1], arm=a) for a in order] for g in groups}
    shown = {g: bold_best([mean_pm(s["mean"], s["std"], s["n"]) for s in found[g]], [s["mean"] for s in found[g]])
             for g in groups}
    rows = [[arm, *(shown[g][i] for g in groups)] for i, arm in enumerate(order)]
    base = {g: lookup(stats, dataset=g[0], variant=g[1], arm="default")["mean"] for g in groups}
    deltas = [a for a in order if a != "default"] if "default" in arms else []
    rows += [[f"Δ {a} - default (pts)", *(num(found[g][order.index(a)]["mean"] - base[g], True) for g in groups)]
             for a in deltas]
    floors = floors or {}
    if (row := floor_row(floors, groups)) is not None:
        rows.append(row)
    data = stats.assign(delta_vs_default=[m - base.get((d, v), math.nan)
                                          for d, v, m in zip(stats["dataset"], stats["variant"], stats["mean"])])
    caption = (f"{final_top1(runs).capitalize()} (%), mean ± sample std over seeds, n = seeds run; best per column in"
               " bold."
               + (" Δ rows: difference of means to the default arm, in points." if deltas else
                  " No `default` arm in this experiment, so no Δ rows.")
               + (" Columns: dataset, model variant (params `models`)." if several else "")
               + floor_note(floors, [d for d, _ in groups]))
    return Table("vit_top1", "ViT top-1 by arm and dataset ([NeurIPS] Table 1 layout)", caption,
                 ["Arm", *(cell_label(d, v, several) for d, v in groups)], rows, data)


def ours_for(runs: pd.DataFrame, stats: dict, dataset: str, variant: str, arm: str, metric: str) -> dict:
    """Our mean/std/n for a published row's metric: top1, best_top1, or delta_vs_default (mean difference)."""
    if metric == "delta_vs_default":
        s = group_stats(runs[(runs["dataset"] == dataset) & (runs["variant"] == variant)], ["arm"])
        mean = lookup(s, arm=arm)["mean"] - lookup(s, arm="default")["mean"]
        return {"mean": mean, "std": math.nan, "n": lookup(s, arm=arm)["n"]}
    return lookup(stats[metric], dataset=dataset, variant=variant, arm=arm)


def comparable(rows: pd.DataFrame, model_name: str, first: bool) -> pd.DataFrame:
    """Published rows to put beside one variant's runs: full training sets only; a row naming a timm model only
    beside that model (a ViT-B row is not set beside a ViT-T run), a row naming none beside the `first` ViT-family
    variant only (so it is not repeated per variant). Other rows stay in paper/ for the record."""
    full = rows["data_fraction"].isna() | (rows["data_fraction"] == 1) if "data_fraction" in rows else True
    timm_name = rows["model"].str.match(r"^(vit|deit|swin|mixer)_\S+$")
    return rows[full & ((timm_name & (rows["model"] == model_name)) | (~timm_name & first))]


def published_table(runs: pd.DataFrame, published: pd.DataFrame, datasets: Sequence[str], arms: Sequence[str], *,
                    file: str, name: str, title: str) -> Table | None:
    """Our arms beside every comparable published cell (incl. n/p) for the same dataset, arm and model in
    paper/<file>.csv (see `comparable`), per (dataset, variant)."""
    stats = {m: group_stats(runs, ["dataset", "variant", "arm"], m) for m in ("top1", "best_top1")}
    models = dict(zip(runs["variant"], runs["model"]))
    vit = [v for v, f in dict(zip(runs["variant"], runs["family"])).items() if f == "vit"]
    rows, data = [], []
    for dataset, variant in [g for g in cells(runs) if g[0] in datasets]:
        for arm in display_arms(arms):
            pubs = comparable(select(published, file, dataset=dataset, arm=arm), str(models.get(variant)),
                              first=bool(vit) and variant == vit[0])
            for _, pub in pubs.iterrows():
                ours = ours_for(runs, stats, dataset, variant, arm, pub["metric"])
                diff = ours["mean"] - pub["value"]
                rows.append([dataset, variant, arm, pub["metric"], mean_pm(ours["mean"], ours["std"], ours["n"]),
                             NP if pub["status"] == "n/p" else num(pub["value"]), num(diff, True),
                             f"{pub['table']}; {pub['source']}, {pub['status']}", f"{pub['model']}; {pub['setting']}"])
                data.append({"dataset": dataset, "variant": variant, "arm": arm, "metric": pub["metric"],
                             "ours_mean": ours["mean"], "ours_std": ours["std"], "n": ours["n"],
                             "published": pub["value"], "ours_minus_published": diff, "table": pub["table"],
                             "source": pub["source"], "status": pub["status"], "version": pub["version"],
                             "profile": pub["profile"]})
    if not rows:
        return None
    caption = ("Our mean ± std (n seeds) beside every published cell for the same dataset, arm and model (paper/"
               f"{file}.csv; rows on a fraction of the training data or of another timm model are left out here;"
               " rows that name no timm model stand beside the first ViT-family variant). Published recipes differ"
               " from this run's unless its profile matches; the setting column says how. n/p = not published in a"
               " reachable source.")
    return Table(name, title, caption, ["Dataset", "Variant", "Arm", "Metric", "Ours %", "Published %",
                                        "Ours - published", "Published in", "Published setting"], rows,
                 pd.DataFrame(data))


def reference_rows(published: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """Published numbers of other models on `dataset`: references.csv, arm-less ImageNet rows, ConvMixer vs ViT."""
    rows = published[(published["dataset"] == dataset) & published["value"].notna()]
    keep = (rows["file"].isin(["references", "convmixer_vs_vit"])
            | ((rows["file"] == "imagenet") & (rows["arm"] == "")))
    return rows[keep]


def context_table(runs: pd.DataFrame, filters: pd.DataFrame, published: pd.DataFrame, arms: Sequence[str],
                  filter_dataset: str) -> Table | None:
    """Per dataset: our ViT arms (every variant), our learned ConvMixer, and outside reference models, with Δ to
    the method under study of the dataset's first variant."""
    stats = group_stats(runs, ["dataset", "variant", "arm"])
    groups = cells(runs)
    several = len({v for _, v in groups}) > 1
    rows, data = [], []
    for dataset in dict.fromkeys(d for d, _ in groups):
        variants = [v for d, v in groups if d == dataset]
        method = lookup(stats, dataset=dataset, variant=variants[0], arm=arms[0])["mean"]
        entries = [(f"ViT {v}, {a} init (ours)" if several else f"ViT, {a} init (ours)",
                    lookup(stats, dataset=dataset, variant=v, arm=a), "this run") for v in variants for a in arms]
        ours = len(entries)
        learned = filters[filters["variant"] == "learned"] if len(filters) else filters
        if dataset == filter_dataset and len(learned):
            entries.append(("ConvMixer, learned filters (ours, filter study)",
                            lookup(group_stats(learned, ["variant"]), variant="learned"), "this run"))
        for _, pub in reference_rows(published, dataset).iterrows():
            label = pub["model"] + (f" [{pub['arm']}]" if pub["arm"] else "")
            entries.append((label, {"mean": pub["value"], "std": math.nan, "n": None},
                            f"{pub['table']} ({pub['source']}, {pub['status']})"))
        if len(entries) == ours:
            continue  # nothing to put our arms beside
        for label, s, source in entries:
            rows.append([dataset, label, mean_pm(s["mean"], s["std"]), str(s["n"] or ""), source,
                         num(s["mean"] - method, True)])
            data.append({"dataset": dataset, "model": label, "mean": s["mean"], "std": s["std"], "n": s["n"],
                         "source": source, f"delta_vs_{arms[0]}": s["mean"] - method})
    if not rows:
        return None
    who = f"ViT {arms[0]} (ours" + (", the dataset's first variant)" if several else ")")
    caption = (f"Our ViT arms beside our learned ConvMixer and reference models not from the paper (paper/"
               f"references.csv; e.g. Fashion-MNIST's benchmark CNNs, trained on the full training set). Last"
               f" column: top-1 minus {who}, in points.")
    return Table("context", "Context: our runs beside reference models", caption,
                 ["Dataset", "Model", "Top-1 %", "n", "Source", f"Δ vs ViT {arms[0]} (pts)"], rows, pd.DataFrame(data))


def _convergence_cells(runs: pd.DataFrame, published: pd.DataFrame, group: tuple[str, str], arm: str,
                       epochs: Sequence[int]) -> dict:
    """One arm's val/train top-1 (mean, std, n) at each epoch, and the published training accuracy there."""
    dataset, variant = group
    sub = runs[(runs["dataset"] == dataset) & (runs["variant"] == variant) & (runs["arm"] == arm)]
    out = {}
    for e in epochs:
        for key in ("val_top1", "train_top1"):
            out[(key, e)] = mean_std([100 * v for v in sub[f"{key}@{e}"]])
        out[("paper", e)] = published_cell(select(published, "convergence", dataset=dataset, arm=arm, epoch=e))[1]
    return out


def convergence_table(runs: pd.DataFrame, published: pd.DataFrame, arms: Sequence[str],
                      epochs: Sequence[int]) -> Table | None:
    """The rebuttal's convergence layout: per (dataset, variant) and arm, val and train top-1 at given epochs."""
    kept, note = clip_epochs(runs, epochs)
    if runs.empty or not kept:
        return None
    runs = convergence_columns(runs, kept)
    groups, order = cells(runs), display_arms(arms)
    several = len({v for _, v in groups}) > 1
    found = {(g, a): _convergence_cells(runs, published, g, a, kept) for g in groups for a in order}
    paper_epochs = [e for e in kept if any(math.isfinite(c[("paper", e)]) for c in found.values())]
    keys = [(k, e) for e in kept for k in ("val_top1", "train_top1")]
    rows = []
    for g in groups:
        block = [[mean_pm(*found[(g, a)][k][:2]) for k in keys] for a in order]
        for j, k in enumerate(keys):  # best arm per column in bold
            bolded = bold_best([r[j] for r in block], [found[(g, a)][k][0] for a in order])
            for r, b in zip(block, bolded):
                r[j] = b
        rows += [[cell_label(*g, several), a, *r, *(num(found[(g, a)][("paper", e)]) for e in paper_epochs)]
                 for a, r in zip(order, block)]
    data = pd.DataFrame([{"dataset": g[0], "variant": g[1], "arm": a, "epoch": e, "metric": k, "mean": c[(k, e)][0],
                          "std": c[(k, e)][1], "n": c[(k, e)][2], "published_train_top1": c[("paper", e)]}
                         for (g, a), c in found.items() for k, e in keys])
    columns = ["Dataset, variant" if several else "Dataset", "Arm",
               *(f"{'val' if k == 'val_top1' else 'train'} @{e}" for k, e in keys),
               *(f"paper train @{e}" for e in paper_epochs)]
    caption = ("Top-1 (%) after the given number of epochs, mean ± std over seeds, on the validation set (val) and"
               " on the training batches as trained (train: with this run's augmentation); best arm per column in"
               " bold. The paper's table ([NeurIPS] camera-ready Table 7) gives training accuracy at epochs"
               " 10/50/100 of ViT-T on CIFAR-10 (paper/convergence.csv)." + note)
    return Table("convergence", "Convergence: top-1 at given epochs (rebuttal Table 7 layout)", caption, columns,
                 rows, data)


def ci_arm_order(arms: Sequence[str]) -> list[str]:
    """[CI]'s row order: random, mimetic, impulse, then any other arm."""
    known = ("random", "mimetic", "impulse")
    return [a for a in known if a in arms] + [a for a in arms if a not in known]


def ci_grid(frame: pd.DataFrame, arms: Sequence[str], cells: Sequence[dict],
            cell: Callable[[str, str, dict, dict], tuple[str, dict]]) -> tuple[list[list[str]], list[dict]]:
    """The [CI] tables' body: per dataset, arms down in [CI]'s order, `cells` (column keys) across; `cell(dataset,
    arm, keys, stats)` gives a cell's text and its data beyond the stats. Returns (rows, data records)."""
    keys = list(cells[0]) if cells else []
    stats = group_stats(frame, ["dataset", "arm", *keys])
    rows, data = [], []
    for dataset in dict.fromkeys(frame["dataset"]):
        for arm in ci_arm_order(arms):
            line = [dataset, arm]
            for where in cells:
                s = lookup(stats, dataset=dataset, arm=arm, **where)
                text, extra = cell(dataset, arm, where, s)
                line.append(text)
                data.append({"dataset": dataset, "arm": arm, **where, **{k: s[k] for k in ("n", "mean", "std")},
                             **extra})
            rows.append(line)
    return rows, data


def ci_alpha_table(ci: pd.DataFrame, published: pd.DataFrame, arms: Sequence[str],
                   alphas: Sequence[float]) -> Table | None:
    """[CI] Tables 3-8 layout: per dataset, arms down (random, mimetic, impulse), α across; each cell our mean ±
    std (n) and the published cell beside it (paper/ci_alpha.csv)."""
    if ci is None or ci.empty:
        return None

    def cell(dataset: str, arm: str, where: dict, s: dict) -> tuple[str, dict]:
        value = published_cell(select(published, "ci_alpha", dataset=dataset, arm=arm, **where))[1]
        diff = s["mean"] - value
        return (f"{mean_pm(s['mean'], s['std'], s['n'])}; paper "
                + (f"{value:.2f} (Δ {num(diff, True)})" if math.isfinite(value) else NP),
                {"published": value, "ours_minus_published": diff})

    rows, data = ci_grid(ci, arms, [{"alpha": float(a)} for a in alphas], cell)
    caption = (f"[CI]'s M′_I attention, Z = α·LN(x) + (1 − α)·PE: {final_top1(ci)} (%), mean ± std over seeds"
               " (n); beside it the published cell of [CI] Tables 3-8 (paper/ci_alpha.csv; Simple ViT on"
               " CIFAR-10/100, SVHN, Tiny-ImageNet; n/p where the paper has no such cell) and ours minus it, in"
               " points. The paper's Δ rows are relative % and are not repeated here.")
    return Table("ci_alpha", "[CI] α grid: init × α (Tables 3-8 layout)", caption,
                 ["Dataset", "Init", *(f"α {a:g}" for a in alphas)], rows, pd.DataFrame(data), section="ci_alpha")


#: [CI] Table 2's columns: (qk, value) and its header
CI_TABLE2_COLUMNS = ((("trained", "value"), "T w/ V"), (("trained", "novalue"), "T w/o V"),
                     (("frozen", "value"), "NT w/ V"), (("frozen", "novalue"), "NT w/o V"))


def ci_table2_table(m3: pd.DataFrame, published: pd.DataFrame, arms: Sequence[str]) -> Table | None:
    """[CI] Table 2 layout: per dataset, arms down (random, mimetic, impulse), Q/K trained (T) / frozen (NT) ×
    with / without value across; each cell our mean ± std (n) and the published CIFAR-10 cell beside it
    (paper/ci_table2.csv: the paper has Table 2 on CIFAR-10 only)."""
    m3 = model3_rows(m3)
    if m3 is None or m3.empty:
        return None

    def cell(dataset: str, arm: str, where: dict, s: dict) -> tuple[str, dict]:
        paper = published_cell(select(published, "ci_table2", table="[CI] Table 2", dataset="cifar10", arm=arm,
                                      qk=where["qk"], values=where["value"]))[1]
        return (f"{mean_pm(s['mean'], s['std'], s['n'])}; CIFAR-10 paper "
                + (f"{paper:.2f}" if math.isfinite(paper) else NP), {"published_cifar10": paper})

    rows, data = ci_grid(m3, arms, [{"qk": qk, "value": v} for (qk, v), _ in CI_TABLE2_COLUMNS], cell)
    caption = (f"[CI]'s Model III, attention softmax(scale·Q·K) that never reads the input: {final_top1(m3)} (%),"
               " mean ± std over seeds (n), Q/K trained (T) or frozen at init (NT), values LN(x)·W_v (w/ V) or"
               " LN(x) (w/o V), no augmentation; beside it the published CIFAR-10 cell of [CI] Table 2"
               " (paper/ci_table2.csv), a different dataset and scale, shown for the pattern, not the level.")
    return Table("ci_table2", "[CI] Model III: init × Q/K trained or frozen × value (Table 2 layout)", caption,
                 ["Dataset", "Init", *(h for _, h in CI_TABLE2_COLUMNS)], rows, pd.DataFrame(data),
                 section="ci_model3")


#: [CI] Table 1's columns: form and header (Model III (RT) is Model III's random / trained cell)
CI_TABLE1_COLUMNS = (("simple", "Simple ViT"), ("simple_nope", "Simple ViT, no PE"), ("model1", "Model I"),
                     ("model2", "Model II"), (MODEL3, "Model III (RT)"))


def ci_table1_table(m3: pd.DataFrame, published: pd.DataFrame) -> Table | None:
    """[CI] Table 1 layout: per dataset, with / without value down, the attention forms across (PyTorch's default
    init, trained; Model III (RT) = Model III's random / trained cells); each cell our mean ± std (n) and the
    published CIFAR-10 cell beside it (paper/ci_table2.csv)."""
    if m3 is None or m3.empty or "form" not in m3.columns or not (m3["form"] != MODEL3).any():
        return None
    rt = m3[(m3["arm"] == "random") & (m3["qk"] == "trained")]
    stats = group_stats(rt, ["dataset", "form", "value"])
    forms = [(f, h) for f, h in CI_TABLE1_COLUMNS if (rt["form"] == f).any()]
    rows, data = [], []
    for dataset in dict.fromkeys(rt["dataset"]):
        for value in dict.fromkeys(rt.loc[rt["dataset"] == dataset, "value"]):
            line = [dataset, "w/ V" if value == "value" else "w/o V"]
            for form, _ in forms:
                s = lookup(stats, dataset=dataset, form=form, value=value)
                paper = published_cell(select(published, "ci_table2", table="[CI] Table 1", dataset="cifar10",
                                              form=form, values=value))[1]
                line.append(f"{mean_pm(s['mean'], s['std'], s['n'])}; CIFAR-10 paper "
                            + (f"{paper:.2f}" if math.isfinite(paper) else NP))
                data.append({"dataset": dataset, "form": form, "value": value,
                             **{k: s[k] for k in ("n", "mean", "std")}, "published_cifar10": paper})
            rows.append(line)
    caption = (f"[CI]'s Simple ViT in Table 1's attention forms, PyTorch's default init, trained, no augmentation:"
               f" {final_top1(rt)} (%), mean ± std over seeds (n). Simple ViT: the PE added to the tokens; no PE:"
               " none anywhere; Model I: the PE only inside attention (α 0.5); Model II: positions only (α 0);"
               " Model III (RT): input-independent maps, random Q/K, trained. Values LN(x)·W_v (w/ V) or LN(x)"
               " (w/o V). Beside each cell the published CIFAR-10 cell of [CI] Table 1 (paper/ci_table2.csv), a"
               " different dataset and scale, shown for the pattern, not the level.")
    return Table("ci_table1", "[CI] Table 1: attention forms × value", caption,
                 ["Dataset", "Values", *(h for _, h in forms)], rows, pd.DataFrame(data), section="ci_model3")


def runs_table(runs: pd.DataFrame, filters: pd.DataFrame, ci: pd.DataFrame | None = None) -> Table:
    """Every run read, with its final/best top-1, epochs, wall time, throughput and hardware."""
    frames = [runs.assign(study="ViT " + runs["dataset"] + ", " + runs["variant"], name=runs["arm"]),
              filters.assign(study="filter study", name=filters["variant"])]
    if ci is not None and len(ci):
        frames.append(ci.assign(study="[CI] α " + ci["alpha"].map("{:g}".format) + ", " + ci["dataset"],
                                name=ci["arm"]))
    present = [f for f in frames if len(f)]
    both = pd.concat(present, ignore_index=True) if present else runs.assign(study=[], name=[])
    rows, data = [], []
    for _, r in both.iterrows():
        best = f"{num(100 * r['best_top1'])} (ep {r['best_epoch']})" if math.isfinite(r["best_top1"]) else NA
        tested = r.get("images") is not None and not (isinstance(r.get("images"), float) and math.isnan(r["images"]))
        rows.append([r["study"], r["name"], str(r["seed"]), num(100 * r["top1"]) + ("" if tested else " (val)"),
                     best, str(r["epochs"]),
                     f"{num(r['wall_time_s'] / 60)} min", num(r["images_per_s"]), str(r["hardware"])])
        data.append({"study": r["study"], "run": r["name"], "seed": r["seed"], "top1": 100 * r["top1"],
                     "best_top1": 100 * r["best_top1"], "best_epoch": r["best_epoch"], "epochs": r["epochs"],
                     "wall_time_s": r["wall_time_s"], "images_per_s": r["images_per_s"], "hardware": r["hardware"],
                     "git_rev": r["git_rev"], "config_digest": r["config_digest"]})
    return Table("runs", "Every run of this experiment", "From each run's metrics.json: final top-1 (%) on the"
                 " whole test split (marked 'val' where a run scored only its validation subset), the best"
                 " validation top-1 over its epochs (the per-epoch curves use data.val_subset), epochs, wall time"
                 " and mean training throughput.",
                 ["Study", "Arm / variant", "Seed", "Final test top-1 %", "Best validation % (epoch)", "Epochs",
                  "Wall time", "Images/s", "Hardware"], rows, pd.DataFrame(data), section="appendix")


def headline_table(comparisons: list[dict], floors: dict | None = None) -> Table:
    """The method against each baseline per (dataset, variant): both arms' mean ± std, the paired Δ, its interval
    and verdict (`aggregate.headline_rows`), and the floor a reader knows (`floor_note`)."""
    several = len({c["variant"] for c in comparisons}) > 1
    rows = [[cell_label(c["dataset"], c["variant"], several), f"{c['a']} > {c['b']}",
             mean_pm(c["a_mean"], c["a_std"], c["a_n"]), mean_pm(c["b_mean"], c["b_std"], c["b_n"]), str(c["n"]),
             num(c["mean"], True), f"[{num(c['low'], True)}, {num(c['high'], True)}]" if c["low"] is not None else NA,
             c["verdict"], c.get("regime") or NA] for c in comparisons]
    level = f"{100 * comparisons[0]['confidence']:g}%" if comparisons else "95%"
    images = {c["images"] for c in comparisons if c.get("images")}
    over = (f"seeds and the {', '.join(f'{n:,}' for n in sorted(images))} test images" if images else
            "seeds only (these runs record no per-image correctness)")
    what = "Final top-1 (%) on the whole test split" if images else "Final validation top-1 (%)"
    caption = (f"{what}, mean ± std over seeds; Δ = the paired difference over the seeds both ran (same training"
               f" subset, data order and augmentation) with its {level} interval over {over}. Regime: the training"
               " images per seed, optimizer steps, token grid and parameters the verdict was reached with."
               + floor_note(floors or {}, list(dict.fromkeys(c["dataset"] for c in comparisons)))
               + below_floor(comparisons, floors or {}))
    data = pd.DataFrame([{k: v for k, v in c.items() if k != "seeds"} for c in comparisons])
    return Table("headline", "The method under study against each baseline", caption,
                 ["Dataset, variant" if several else "Dataset", "Comparison", "Method %", "Baseline %", "Pairs",
                  "Δ (pts)", f"{level} CI", "Verdict", "Regime"], rows, data, section="headline")


def _span(values: Sequence[float], fmt: str = "{:.2f}") -> str:
    """'0.20–0.28' (or one value) over blocks."""
    low, high = min(values), max(values)
    return fmt.format(low) if fmt.format(low) == fmt.format(high) else f"{fmt.format(low)}–{fmt.format(high)}"


def train_config_table(runs: pd.DataFrame, configs: pd.DataFrame | None, arms: Sequence[str]) -> Table | None:
    """[NeurIPS] Fig. 5 / App. F Table 5's question at this scale: each arm's top-1 under the grid's own `train`
    and under each named training configuration (params `train_configs`), per dataset and variant."""
    if configs is None or configs.empty:
        return None
    frame = pd.concat([runs.assign(config="train"), configs], ignore_index=True)
    stats = group_stats(frame, ["dataset", "variant", "config", "arm"])
    rows, data = [], []
    for (d, v), group in frame.groupby(["dataset", "variant"], sort=False):
        for config in dict.fromkeys(group["config"]):
            cells = [lookup(stats, dataset=d, variant=v, config=config, arm=a) for a in arms]
            rows.append([d, v, config, *(mean_pm(c["mean"], c["std"], c["n"]) for c in cells)])
            data += [{"dataset": d, "variant": v, "config": config, "arm": a, **{k: c[k] for k in ("n", "mean", "std")}}
                     for a, c in zip(arms, cells)]
    caption = (f"Final top-1 (%) per training configuration: `train` is the grid's own recipe (the train@ cells), the"
               f" others params `train_configs` (`train` with their overrides); {final_top1(frame)}, mean ± std over"
               " seeds (n). Claim 11 tests impulse − default in each row.")
    return Table("train_configs", "Training configurations ([NeurIPS] Fig. 5, App. F Table 5)", caption,
                 ["Dataset", "Variant", "Configuration", *arms], rows, pd.DataFrame(data))


#: what each [SIA] cell is, for the table (pipeline.experiments.sia)
SIA_PSEUDO_NAMES = {"P": "PE", "U": "uniform", "G": "Gaussian", "A": "PE + uniform", "B": "PE + Gaussian"}


def sia_cell_text(cell: str, baseline_arm: str) -> str:
    """'cls token, learned PE, token pooling (timm init)' / '...; fit on PE (layer 0) → PE, shared' for a [SIA] cell."""
    parsed = parse_sia_cell(cell)
    if not parsed.fit:
        arch = {"cls_learned": "cls token, learned PE, token pooling",
                "avg_sincos": "avg pooling, fixed sin-cos PE"}[parsed.arch]
        return f"{arch} ({baseline_arm} init)"
    return (f"avg pooling, sin-cos PE; fit on {SIA_PSEUDO_NAMES[parsed.first]} (layer 0) →"
            f" {SIA_PSEUDO_NAMES[parsed.later]}, {'shared' if parsed.shared else 'per layer'}")


def _fit_span(records: pd.Series, key: str) -> str:
    """The range over a cell's runs and fits of one fit measure (target mass, peak)."""
    values = [r[key] for recs in records if isinstance(recs, list) for r in recs if key in r]
    return _span(values) if values else NA


def sia_table(sia: pd.DataFrame | None, baseline_arm: str) -> Table | None:
    """[SIA]'s ablations: the baseline change ((f)) and the pseudo-inputs of its impulse fit ((c)), per dataset and
    cell, with the fit's quality on its pseudo-input."""
    if sia is None or sia.empty:
        return None
    stats = group_stats(sia, ["dataset", "cell"])
    rows, data = [], []
    for d, group in sia.groupby("dataset", sort=False):
        for cell in dict.fromkeys(group["cell"]):
            c = lookup(stats, dataset=d, cell=cell)
            fits = group.loc[group["cell"] == cell, "impulse_fit"]
            rows.append([d, cell, sia_cell_text(cell, baseline_arm), mean_pm(c["mean"], c["std"], c["n"]),
                         _fit_span(fits, "target_mass"), _fit_span(fits, "peak")])
            data.append({"dataset": d, "cell": cell, **{k: c[k] for k in ("n", "mean", "std")}})
    caption = (f"[SIA] 2404.01139's ablations on the grid's ViT with the `train` recipe (params `sia`):"
               f" {final_top1(sia)}, mean ± std over seeds (n). base_*: the baseline change ((f): cls token +"
               " learned PE 81.23 → average pooling + sin-cos PE 85.30 on CIFAR-10 ViT-T; claim 14). fit_*: [SIA]'s"
               " impulse fit (code-2404's Algorithm 1) on the pseudo-inputs named, PyTorch's default elsewhere ((c):"
               " PE/PE 90.75 with shared Q/K, random pseudo-inputs 3-4 points lower; claim 13). Target mass / peak:"
               " the fitted maps' mean softmax weight on the target key and the fraction of queries peaking there, on"
               " the pseudo-input (range over fits and seeds).")
    return Table("sia", "[SIA] ablations: baseline change and pseudo-inputs", caption,
                 ["Dataset", "Cell", "What", "Top-1 %", "Target mass", "Peak"], rows, pd.DataFrame(data))
def weight_selection_table(ws: pd.DataFrame | None) -> Table | None:
    """[NeurIPS] Table 4 analogue: the student's top-1 per fine-tune dataset, weight-selected from each teacher
    (its init arm and pretraining-set size) or trained from scratch (params `weight_selection`)."""
    if ws is None or ws.empty:
        return None
    stats = group_stats(ws, ["dataset", "source"])
    datasets = list(dict.fromkeys(ws["dataset"]))
    rows, data = [], []
    for source in dict.fromkeys(ws["source"]):
        first = ws[ws["source"] == source].iloc[0]
        scratch = source.startswith(SCRATCH)
        how = (f"from scratch, {source.removeprefix(SCRATCH)} init" if scratch else
               f"selected from {first['teacher_arm']}-init teacher, {int(first['teacher_train_size']):,}"
               f" {first['pretrain_dataset']} images")
        cells = [lookup(stats, dataset=d, source=source) for d in datasets]
        rows.append([source, how, *(mean_pm(c["mean"], c["std"], c["n"]) for c in cells)])
        data += [{"dataset": d, "source": source, "description": how, **{k: c[k] for k in ("n", "mean", "std")}}
                 for d, c in zip(datasets, cells)]
    caption = (f"The student ({', '.join(dict.fromkeys(ws['variant'].astype(str)))}) fine-tuned on each dataset:"
               " weight-selected (Xu et al., ICLR 2024: first-N blocks, evenly spaced elements, head excluded) from"
               " each pretrained teacher, or trained from scratch with the same recipe; one teacher per name, so"
               f" mean ± std over fine-tune seeds (n) covers fine-tuning only; {final_top1(ws)}. [NeurIPS] Table 4's"
               " numbers are n/p; Weight Selection's README reports ViT-T on CIFAR-100 at 72.4 from random init and"
               " 81.4 selected from its ImageNet-21K ViT-S. Claim 12 tests the impulse teacher on less data against"
               " the default teacher on more.")
    return Table("weight_selection", "[NeurIPS] Table 4 analogue: weight selection", caption,
                 ["Source", "Student init", *datasets], rows, pd.DataFrame(data))


def init_diagnostics_table(attention: dict) -> Table | None:
    """Init diagnostics per variant and arm beside default's (issue 20, point 3), from the attention stage's
    records (`pipeline.analysis.attention`, `pipeline.method.inits.diagnostics`); None when none has them."""
    rows, data = [], []
    for variant, arms in attention.items():
        for arm, rec in sorted(arms.items(), key=lambda kv: kv[0] != "default"):
            diag = rec.get("diagnostics")
            if not diag:
                continue
            linear, layers = diag["linear_fraction"], [str(k) for k in rec["layers"]]
            built = (rec.get("init") or {}).get("mixer", "") if linear is not None and arm != "default" else ""
            local = {src: [sum(rec["measures"][src][k]["locality_mass"]) / len(rec["measures"][src][k]["locality_mass"])
                           for k in layers] for src in ("pseudo", "real") if src in rec["measures"]}  # fmt: skip
            uniform = rec["measures"]["pseudo"][layers[0]]["uniform_locality_mass"]
            rows.append([variant, arm, built or NA, _span([100 * v for v in linear], "{:.0f}%") if linear else NA,
                         _span(diag["branch_ratio"]), f"{diag['trunk_rms']:.2f}",
                         " / ".join(f"{v:.2f}" for v in local.get("real", [])) or NA,
                         " / ".join(f"{v:.2f}" for v in local["pseudo"]), f"{uniform:.2f}"])
            data.append({"variant": variant, "arm": arm, "construction": built, "layers": " ".join(layers),
                         "linear_fraction": " ".join(f"{v:.4f}" for v in linear) if linear else "",
                         "branch_ratio": " ".join(f"{v:.4f}" for v in diag["branch_ratio"]),
                         "trunk_rms": diag["trunk_rms"], "locality_real": " ".join(f"{v:.4f}" for v in local.get(
                             "real", [])), "locality_pseudo": " ".join(f"{v:.4f}" for v in local["pseudo"]),
                         "uniform_locality": uniform})
    if not rows:
        return None
    return Table("init_diagnostics", "Init diagnostics of every variant and arm, beside default's",
                 "Models at initialization (seed 0), on the attention stage's validation images. Construction:"
                 " a Mixer's impulse.mixer / mimetic.mixer (ours; no official code: 'filter' and 'default_gain'"
                 " write at PyTorch default's gain with GELU nonlinear, 'shift' and 'exact' at unit gain in"
                 " linear-regime units). Linear regime: token-MLP units whose GELU is affine to within 5% of"
                 " their pre-activation spread (pipeline/method/inits/diagnostics.py), range over blocks."
                 " Branch / residual: RMS of the token-mixing branch (Mixer token MLP, attention) over RMS of the"
                 " block's input, range over blocks. Trunk RMS: the last block's output, before the final norm."
                 " Locality: mixing mass inside the 3×3 neighbourhood, head mean, at the recorded layers"
                 " (report.attention_layers), on the images and on the positional pseudo-input.",
                 ["Variant", "Arm", "Construction", "Linear-regime units", "Branch / residual", "Trunk RMS",
                  "Locality (images)", "Locality (pseudo)", "Uniform"], rows, pd.DataFrame(data),
                 section="init_diagnostics")


def _spread(values: Sequence[float], fmt: str) -> str:
    """'0.0091 (0.0077–0.0111)': the mean and the range (one value when they print alike)."""
    mean, span = fmt.format(sum(values) / len(values)), _span(values, fmt)
    return mean if span == mean else f"{mean} ({span})"


def model3_fit_table(m3: pd.DataFrame | None, fits: dict) -> Table | None:
    """Claim 10 at both readings of σ: each Model III impulse arm's fit (`fits`: arm -> its fit settings), over every
    layer of every seed of this run; None when no such cell recorded a fit."""
    rows, data = [], []
    cells = model3_rows(m3) if m3 is not None and len(m3) else pd.DataFrame()
    for (d, arm), g in (cells[cells["arm"].isin(list(fits))].groupby(["dataset", "arm"], sort=False)
                        if len(cells) else []):
        layers = [layer for recs in g["impulse_fit"] if isinstance(recs, list) for layer in recs]
        if not layers:
            continue
        fit = fits[arm]
        values = {k: [float(layer[k]) for layer in layers] for k in ("mse", "target_mass", "peak")}
        rows.append([d, arm, f"{fit['sigma']:g}", f"{fit['steps']} steps at lr {fit['lr']:g}", str(len(layers)),
                     _spread(values["mse"], "{:.4f}"), _spread(values["target_mass"], "{:.3f}"),
                     _spread(values["peak"], "{:.3f}")])
        data.append({"dataset": d, "arm": arm, "sigma": fit["sigma"], "fits": len(layers)}
                    | {f"{k}_mean": sum(v) / len(v) for k, v in values.items()})
    if not rows:
        return None
    return Table("ci_model3_fit", "[CI] Model III: the impulse fit at both readings of σ",
                 "Each Model III impulse arm's fit of softmax(σ·Q·K) to its impulses (pipeline/method/ci_2401.py),"
                 " per layer of every seed: MSE, target mass (mean weight on the impulse's key; a uniform map gives"
                 " 1/N) and peak (fraction of queries whose largest weight is there), mean (range). impulse is fitted"
                 " at the σ paper/plan.yaml names for claim 10 (params ci_model3.impulse_fit); impulse_sens at the"
                 " other reading (ci_model3.sensitivity_fit), claim 10's sensitivity line.",
                 ["Dataset", "Arm", "σ", "Fit", "Layer fits", "MSE", "Target mass", "Peak"], rows,
                 pd.DataFrame(data), section="ci_model3")


def ci_fit_table(ci: pd.DataFrame, setting: str, reference: Sequence[dict]) -> Table | None:
    """How well [CI]'s impulse fit holds its impulses: per dataset and α of this run's impulse cells (every layer
    of every seed), beside the fits `bench/bench_ci_fit.py --yaml` recorded (code-2401's geometry among them);
    None when no cell recorded a fit."""
    fitted = ci[ci["arm"] == "impulse"] if ci is not None and len(ci) else pd.DataFrame()
    fitted = fitted[fitted["impulse_fit"].map(lambda f: isinstance(f, list) and bool(f))] if len(fitted) else fitted
    if fitted.empty:
        return None
    keys = ("mse", "target_mass", "peak")
    groups = [(f"this run: {d}, α {a:g}", setting, [layer for fits in g["impulse_fit"] for layer in fits])
              for (d, a), g in fitted.groupby(["dataset", "alpha"], sort=False)]
    for ref in reference:
        source = f"bench_ci_fit.py, {ref['geometry']} ({ref['device']}, {ref['date']})"
        shape = fit_setting(ref["tokens"], ref["dim"], ref["heads"], ref["head_dim"], ref["fit"])
        groups.append((source, shape, ref["layers"]))
    rows, data = [], []
    for source, shape, layers in groups:
        values = {k: [float(layer[k]) for layer in layers] for k in keys}
        rows.append([source, shape, str(len(layers)), _spread(values["mse"], "{:.4f}"),
                     _spread(values["target_mass"], "{:.3f}"), _spread(values["peak"], "{:.3f}")])
        data.append({"source": source, "setting": shape, "fits": len(layers)}
                    | {f"{k}_{stat}": f(values[k]) for k in keys
                       for stat, f in (("mean", lambda v: sum(v) / len(v)), ("min", min), ("max", max))})
    return Table("ci_fit", "[CI] impulse fit: how well each layer's attention holds its impulse",
                 "code-2401 fits each layer's Q/K so that softmax(σ·PE·Q·Kᵀ·PEᵀ) matches an impulse per head"
                 " (pipeline/method/ci_2401.py). Per layer fit: MSE to the 0/1 impulse matrices, target mass (mean"
                 " attention weight on the impulse's key) and peak (fraction of queries whose largest weight is"
                 " there); mean (range) over every layer of every seed. code-2401's own fit at its geometry"
                 " (16×16 tokens, D 512) is the reference a laptop geometry's fit should resemble; the bench rows"
                 " come from bench/ci_fit.yaml (`python bench/bench_ci_fit.py --yaml bench/ci_fit.yaml`).",
                 ["Source", "Geometry and fit", "Layer fits", "MSE", "Target mass", "Peak"], rows,
                 pd.DataFrame(data), section="ci_alpha")


#: the columns that name a run group in the analysis frames (the seed apart), in the order the table shows them
GROUP_COLUMNS = ("dataset", "variant", "config", "alpha", "arm", "qk", "value", "form", "cell", "source")
FRAME_NAMES = {"vit": "ViT grid", "filters": "filter study", "ci": "[CI] α grid", "m3": "[CI] Tables 1-2",
               "configs": "training configurations", "sia": "[SIA] ablations", "weight_selection": "weight selection"}


def training_table(frames: dict[str, pd.DataFrame], rule) -> Table | None:
    """Were the runs trained? Per run group (every seed of one cell of a frame): the final training loss against a
    uniform guess's ln(classes), the validation top-1 the last epochs added, and how many runs trained and reached a
    plateau by paper/plan.yaml `training` (`pipeline.analysis.trained`)."""
    rows, data = [], []
    for name, frame in frames.items():
        if frame.empty or "status" not in frame.columns:
            continue
        keys = [c for c in GROUP_COLUMNS if c in frame.columns]
        for values, group in frame.groupby(keys, sort=False, dropna=False):
            values = values if isinstance(values, tuple) else (values,)
            label = ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)
            ratio, gain = group["loss_ratio"].astype(float), group["plateau_gain"].astype(float)
            counts = group["status"].value_counts()
            status = "; ".join(f"{counts[s]} {s}" for s in ("plateaued", "still rising", "did not train", "unknown")
                               if s in counts)
            loss = f"{num(group['train_loss'].mean())} / {num(group['chance_loss'].iloc[0])}"
            rows.append([FRAME_NAMES.get(name, name), label, str(len(group)), loss,
                         num(gain.mean(), True) if gain.notna().any() else NA, status])
            data.append({"frame": name, "group": label, "n": len(group), "train_loss": group["train_loss"].mean(),
                         "chance_loss": group["chance_loss"].iloc[0], "loss_ratio": ratio.mean(),
                         "plateau_gain": gain.mean(), **{s.replace(" ", "_"): int(counts.get(s, 0)) for s in
                                                         ("plateaued", "still rising", "did not train", "unknown")}})
    if not rows:
        return None
    caption = (f"Each run group's mean final training loss against ln(classes), the loss of a uniform guess: a run"
               f" trained when its loss is below {rule.chance_loss_ratio:g} × that and its final validation top-1 is"
               f" at least {rule.min_top1_over_chance:g} × chance (else its comparisons are not tested); the rise"
               f" (points) of a line through its last {100 * rule.plateau_fraction:g}% of evaluated epochs'"
               " validation top-1 (at least 3): it is still rising, and its numbers are labelled so, when the rise"
               f" reaches {rule.plateau_gain:g} point(s) and {rule.plateau_z:g} standard errors of it (the line's"
               " residuals); else it plateaued (paper/plan.yaml `training`). The learning curves are in the figures.")
    return Table("training", "Were the runs trained?", caption,
                 ["Study", "Run group", "Runs", "Train loss / chance", "Last epochs' rise (pts)", "Status"], rows,
                 pd.DataFrame(data))

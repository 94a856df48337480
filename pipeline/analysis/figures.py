"""`python -m pipeline figures`: every figure of the report, the `figures` stage.

Reads only finished results of the current experiment (the runs params.yaml names, through the one results
reader `pipeline.analysis.runs`; other runs lying in results/ are ignored) and draws, with matplotlib's object API
(no pyplot state; PNG through the Agg canvas):

- attention maps of every model variant and arm at initialization, from results/attention/<variant>/<arm>/
  ([NeurIPS] Fig. 4), and after training, recomputed from results/train/<datasets[0]>/<variant>/<arm>/
  seed<first seed>/model.pt; on the positional pseudo-input and on a real validation batch, for every variant
  (claim 7 is judged on every ViT-family variant);
- training curves ([NeurIPS] Fig. 3), one figure per variant with a panel per dataset: validation and training
  top-1 per epoch, mean and min-max band over seeds;
- the filter study: top-1 per ConvMixer filter variant ([CI] 2401.12511 Fig. 4) and the Gaussian sigma x heads
  heat map ([CI] Table 6 layout);
- from the aggregate's results/tables: the forest plot of every planned comparison (claims.json) and ours against
  every published number on the same dataset (the tables' CSVs).
- [CI] Figs 6-9 from the alpha grid's alpha 0.2 cells (`pipeline.analysis.ci_figures`): accuracy by epoch, and one
  head's QK, PQK^TP^T and softmax maps at layers 1 / 3 / 6 before and after training.

Figures come in families that share one caption (all attention maps share one; the report prints it once before
them); each figure has a title and a one-line note with what is particular to it. A figure whose inputs do not
exist is skipped, never drawn from made-up data. The stage writes reports/figures/*.png and
reports/figures/figures.json, in reading order::

    {"families": [{"name", "section", "title", "caption"}],
     "figures": [{"file": "<name>.png" (relative to reports/figures), "family", "variant", "title", "note"}]}
     (an attention figure also has "input": "pseudo" or "real")

with section one of ``results``, ``curves``, ``attention``, ``filter_study``, ``ci``. The folder is written aside
and moved into place when complete.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from matplotlib import colormaps
from matplotlib.colors import PowerNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from pipeline import entry
from pipeline.analysis import attention
from pipeline.analysis.ci_figures import ci_figures
from pipeline.analysis.runs import planned_cells, read_frames
from pipeline.data.meta import dataset_meta
from pipeline.outputs import folder_aside
from pipeline.params import Params

FIGURES_DIR, PAPER = Path("reports") / "figures", Path("paper")
DPI = 170  #: the PDF prints a figure at >= 150 px per inch (pdf.MIN_PPI): a 4.4-inch figure is then >= 12 cm wide
ZOOM = 16  #: side of the zoomed upper-left corner of a map, as the paper's red box
MAX_HEADS = 12  #: heads drawn per layer (ViT-B has 12; Swin's deep stages have more)
ARM_COLOURS = {"impulse": "#d62728", "mimetic": "#1f77b4", "default": "#555555", "timm": "#8c564b"}
INPUT_TEXT = {"pseudo": "positional pseudo-input", "real": "real validation batch"}
STATE_TEXT = {"init": "at initialization", "trained": "after training"}


def family(name: str, section: str, title: str, caption: str) -> dict:
    """A figure family's manifest entry: the caption its figures share."""
    return {"name": name, "section": section, "title": title, "caption": caption}


def save(fig: Figure, out: Path, name: str, family_name: str, variant: str, title: str, note: str = "") -> dict:
    """Write `fig` as out/<name>.png and return its manifest entry."""
    fig.savefig(out / f"{name}.png", dpi=DPI)
    return {"file": f"{name}.png", "family": family_name, "variant": variant, "title": title, "note": note}


def colour(arm: str, i: int) -> str:
    return ARM_COLOURS.get(arm, f"C{i + 4}")

# ---------------------------------------------------------------------------------------------------- attention


def draw_map(ax, m: np.ndarray, norm: PowerNorm, zoom: int, grid_w: int, corner: bool) -> None:
    """One head's map: the full N x N map with the zoom box in red, or its zoom x zoom corner with the grid rows."""
    n = m.shape[0]
    if corner:
        ax.imshow(m[:zoom, :zoom], cmap="magma", norm=norm, interpolation="nearest")
        for k in range(grid_w, zoom, grid_w):  # one image row of the token grid per block of grid_w tokens
            ax.axhline(k - 0.5, color="white", lw=1.2)
            ax.axvline(k - 0.5, color="white", lw=1.2)
        ticks = list(range(0, zoom, grid_w))
    else:
        ax.imshow(m, cmap="magma", norm=norm, interpolation="nearest")
        ax.add_patch(Rectangle((-0.5, -0.5), zoom, zoom, fill=False, edgecolor="red", lw=1.5))
        ticks = [0, n - 1]
    ax.set_xticks(ticks)
    ax.set_yticks(ticks)
    ax.tick_params(labelsize=7, length=2)


def attention_figure(maps: dict[str, np.ndarray], record: dict, source: str, heading: str,
                     arm: str = "impulse") -> Figure | None:
    """Rows = heads (at most MAX_HEADS); per layer two columns: the full map (queries down, keys across) and its
    upper-left corner. The impulse arm's panels are titled with the head's intended offset and peak agreement,
    every arm's with its locality mass. None when `maps` lacks this input."""
    layers = [str(layer) for layer in record["layers"]]
    if any(f"{source}_L{layer}" not in maps for layer in layers):
        return None
    rows = min(MAX_HEADS, max(record["heads"][layer] for layer in layers))
    norm = PowerNorm(gamma=0.5, vmin=0.0, vmax=1.0)
    # a fixed grid (inches) instead of constrained layout, which costs seconds per figure for this many panels
    width, height = 2.0 * 2 * len(layers) + 1.2, 2.2 * rows + 0.7
    fig = Figure(figsize=(width, height))
    axes = fig.subplots(rows, 2 * len(layers), squeeze=False, gridspec_kw={
        "left": 0.35 / width, "right": 1 - 1.1 / width, "bottom": 0.3 / height, "top": 1 - 0.95 / height,
        "wspace": 0.3, "hspace": 0.55})
    for j, layer in enumerate(layers):
        m, measures = maps[f"{source}_L{layer}"], record["measures"][source][layer]
        zoom, grid_w = min(ZOOM, m.shape[-1]), record["grids"][layer][1]
        for h in range(rows):
            full, corner = axes[h, 2 * j], axes[h, 2 * j + 1]
            if h >= m.shape[0]:
                full.set_visible(False)
                corner.set_visible(False)
                continue
            draw_map(full, m[h], norm, zoom, grid_w, corner=False)
            draw_map(corner, m[h], norm, zoom, grid_w, corner=True)
            local = f"local {measures['locality_mass'][h]:.2f}"
            if arm == "impulse":
                dy, dx = record["offsets"][layer][h]
                full.set_title(f"layer {layer}, head {h}, offset ({dy:+d}, {dx:+d})\n"
                               f"peak {measures['peak_agreement'][h]:.2f}, {local}", fontsize=8.5)
            else:
                full.set_title(f"layer {layer}, head {h}\n{local}", fontsize=8.5)
            corner.set_title(f"layer {layer}, head {h}\nzoom {zoom}×{zoom}", fontsize=8.5)
            for ax in (full, corner):
                ax.set_xlabel("key token", fontsize=7, labelpad=1)
                ax.set_ylabel("query token", fontsize=7, labelpad=1)
    bar = fig.add_axes((1 - 0.8 / width, 0.25, 0.13 / width, 0.5))
    fig.colorbar(axes[0, 0].images[0], cax=bar, label="attention probability (√ scale)")
    fig.suptitle(heading, fontsize=11, y=1 - 0.15 / height, va="top")
    return fig


ATTENTION = family(
    "attention", "attention", "Attention maps at initialization and after training",
    "One figure per model variant, arm, state and input. Rows: heads (0-based, as in the code; at most"
    f" {MAX_HEADS}). For each layer shown, left: the full N×N map among the patch tokens (queries down, keys"
    " across, prefix tokens such as cls dropped), the red box marking the zoomed corner; right: that upper-left"
    " corner, white lines every w tokens = one row of the w-wide token grid (the paper's 8×8 sub-blocks on an"
    " 8-wide grid), so an impulse at offset (dy, dx) is a diagonal shifted by dy·w+dx. Colour: attention"
    " probability on a square-root scale from 0 to 1, shared by all panels. Panel titles: local = attention mass"
    " inside the query's f×f neighbourhood (each figure's note gives a uniform map's value); on the impulse arm's"
    " panels also the head's intended offset (dy, dx) and peak agreement = the fraction of queries whose strongest"
    " key is at that offset. Inputs: the positional pseudo-input is each block's norm1"
    " of the patch position embeddings, no image content (what the impulse init is fitted"
    " on); the real batch averages the maps over validation images. Compare [NeurIPS] Fig. 4: impulse heads peak"
    " off the diagonal at distinct offsets, mimetic heads strengthen the diagonal, default maps are flat.")


def attention_note(record: dict, source: str, state: str) -> str:
    """What is particular to one attention figure: model, grid, state, input and a uniform map's locality mass."""
    first = str(record["layers"][0])
    h, w = record["grids"][first]
    heads = max(record["heads"].values())
    shown = f"; the first {MAX_HEADS} of {heads} heads shown" if heads > MAX_HEADS else ""
    when = ("seed 0, before any training step" if state == "init" else
            f"final checkpoint of seed {record.get('seed')} on {record.get('dataset')}")
    on = ("pseudo-input" if source == "pseudo" else
          f"mean over {record.get('images')} validation images of {record.get('dataset')}")
    uniform = record["measures"][source][first]["uniform_locality_mass"]
    return (f"{record.get('model')}; {h}×{w} token grid (white lines every {w} tokens, zoom"
            f" {min(ZOOM, h * w)}×{min(ZOOM, h * w)}){shown}; {when}; {on}; a uniform map's locality mass"
            f" {uniform:.2f}.")


def trained_record(params: Params, results: Path, variant: str, arm: str) -> tuple[dict, dict] | None:
    """The attention record of the final weights of (datasets[0], variant, arm, seeds[0]); None if not trained.

    The model is rebuilt with the dataset's facts as fetched (`pipeline.data.meta`), as its run built it.
    """
    dataset, seed = params.datasets[0], params.seeds[0]
    path = results / "train" / dataset / variant / arm / f"seed{seed}" / "model.pt"
    if not path.is_file():
        return None
    model = attention.grid_model(params, variant, arm, dataset_meta(params.data.root, dataset), seed)
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    maps, record = attention.model_record(params, model, seed, attention.model_batch(params, dataset, model))
    head = {"variant": variant, "arm": arm, "state": "trained", "dataset": dataset, "seed": seed,
            "model": attention.model_label(params.models[variant])}
    return maps, head | record


def attention_figures(records: dict[tuple[str, str, str], tuple[dict, dict]], out: Path) -> list[dict]:
    """One figure per (variant, state, arm) of `records` (``{(variant, state, arm): (maps, record)}``) and input,
    in that order: grouped by variant."""
    entries = []
    for (variant, state, arm), (maps, record) in records.items():
        for source in attention.INPUTS:
            title = f"{variant}: {arm} {STATE_TEXT[state]}, {INPUT_TEXT[source]}"
            fig = attention_figure(maps, record, source, title, arm)
            if fig is not None:
                entries.append(save(fig, out, f"attention_{variant}_{state}_{arm}_{source}", "attention", variant,
                                    title, attention_note(record, source, state)) | {"input": source})
    return entries

# ------------------------------------------------------------------------------------------------------- curves


def curve_band(histories: list[list[dict]], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(epochs from 1, mean, min, max) in % of history[key] over runs, on the epochs every run has."""
    n = min(len(h) for h in histories)
    values = 100 * np.array([[row[key] for row in h[:n]] for h in histories], dtype=float)
    return np.arange(1, n + 1), values.mean(0), values.min(0), values.max(0)


def curves_figure(found: dict[str, dict[str, list]], arms: list[str], key: str, ylabel: str,
                  title: str) -> Figure | None:
    """One panel per dataset (`found`: {dataset: {arm: [histories]}}): mean line and min-max band over seeds per
    arm. None without runs."""
    if not found:
        return None
    cols = min(3, len(found))
    rows = math.ceil(len(found) / cols)
    fig = Figure(figsize=(4.3 * cols, 3.3 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, (dataset, per_arm) in zip(axes, found.items()):
        for i, arm in enumerate(a for a in arms if a in per_arm):
            epochs, mean, lo, hi = curve_band(per_arm[arm], key)
            c = colour(arm, i)
            ax.plot(epochs, mean, color=c, lw=1.8, marker="o" if len(epochs) <= 30 else None, ms=3,
                    label=f"{arm} (n={len(per_arm[arm])})")
            ax.fill_between(epochs, lo, hi, color=c, alpha=0.2, lw=0)
        ax.set_title(dataset, fontsize=10)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    for ax in axes[len(found):]:
        ax.set_visible(False)
    fig.suptitle(f"{title}\n(line = mean, band = min–max over seeds)", fontsize=9.5)
    return fig


def histories(runs: pd.DataFrame) -> dict[str, dict[str, dict[str, list]]]:
    """{variant: {dataset: {arm: [history of each finished seed]}}} of the runs that have a history."""
    found: dict = {}
    for (variant, dataset, arm), rows in runs.groupby(["variant", "dataset", "arm"], sort=False):
        kept = [h for h in rows["history"] if h]
        if kept:
            found.setdefault(variant, {}).setdefault(dataset, {})[arm] = kept
    return found


def curve_families(seeds: list[int]) -> list[dict]:
    band = (f"Line = mean over the finished seeds of {seeds}, band = min–max over them, n per arm in the legend;"
            " curves stop at the last epoch every seed of the arm has. One figure per model variant, one panel per"
            " dataset.")
    return [family("curves_val_top1", "curves", "Validation top-1 by epoch",
                   f"Validation top-1 (%) after each epoch. {band} Compare [NeurIPS] Fig. 3 (camera-ready; training"
                   " curves of ViT-T, impulse above mimetic above default early in training)."),
            family("curves_train_top1", "curves", "Training top-1 by epoch",
                   f"Training top-1 (%) of each epoch, measured on the augmented training batches as the model"
                   f" trains (with mixup on, against the unmixed label; how the papers measured theirs under mixup"
                   f" is n/p). {band} The"
                   " convergence claim (the rebuttal's Table 7, claim 4) is about this training accuracy.")]


def curve_figures(runs: pd.DataFrame, arms: list[str], out: Path) -> list[dict]:
    """Validation and training top-1 per epoch (Fig. 3 of [NeurIPS]): per family, one figure per variant."""
    found = histories(runs)
    entries = []
    for fam, key, ylabel in (("curves_val_top1", "val_top1", "validation top-1 (%)"),
                             ("curves_train_top1", "train_top1", "training top-1 (%)")):
        for variant, per_dataset in found.items():
            title = f"{variant}: {ylabel.split(' (')[0]} by epoch"
            fig = curves_figure(per_dataset, arms, key, ylabel, title)
            if fig is not None:
                entries.append(save(fig, out, f"{fam}_{variant}", fam, variant, title))
    return entries

# ------------------------------------------------------------------------------------------------- filter study


#: filter-study variants under [CI]'s names where they differ from ours
STUDY_NAMES = {"softmax": "rand*\n(softmax)"}


def filter_bars(found: dict[str, list[float]], title: str) -> Figure | None:
    """Bar per variant (`found`: {variant: [top-1 fraction of each seed]}, learned first): mean top-1 with min-max
    error bar and the seeds as dots; learned dashed across."""
    found = {v: tops for v, tops in found.items() if tops}
    if not found:
        return None
    names = list(found)
    tops = [100 * np.array(found[v], dtype=float) for v in names]
    means = np.array([t.mean() for t in tops])
    hi_all, bottom = max(t.max() for t in tops), 0.0  # bars from 0: a 2-point gap looks like one
    fig = Figure(figsize=(max(4.5, 1.0 * len(names) + 1.5), 3.6), layout="constrained")
    ax = fig.subplots()
    x = np.arange(len(names))
    colours = ["#2ca02c" if v.startswith("learned") else "#7f7fbf" for v in names]  # learned, learned-<family>
    err = np.array([[m - t.min(), t.max() - m] for m, t in zip(means, tops)]).T
    ax.bar(x, means - bottom, bottom=bottom, color=colours, yerr=err, capsize=4, width=0.65)
    for i, t in enumerate(tops):
        ax.scatter(np.full(len(t), x[i]), t, color="black", s=10, zorder=3)
        ax.text(x[i], t.max() + 0.02 * (hi_all - bottom), f"{means[i]:.1f}", ha="center", va="bottom", fontsize=8)
    if "learned" in found:
        ax.axhline(means[0], color="#2ca02c", ls="--", lw=1)
    ax.set_xticks(x, [f"{STUDY_NAMES.get(v, v)}\n(n={len(found[v])})" for v in names], fontsize=8)
    ax.set_ylim(bottom, min(100.0, hi_all + 0.12 * (hi_all - bottom)))
    ax.set_ylabel("final top-1 on the test split (%)")
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(title, fontsize=10)
    return fig


def gaussian_heatmap(found: dict, sigmas: list[float], heads: list[int], title: str) -> Figure | None:
    """Mean top-1 per (sigma, heads) cell (`found`: {(sigma, heads): [top-1 fraction of each seed]}), rows sigma
    and columns heads both descending as [CI] Table 6."""
    if not found:
        return None
    rows, cols = sorted(sigmas, reverse=True), sorted(heads, reverse=True)
    grid = np.full((len(rows), len(cols)), np.nan)
    for (s, h), runs in found.items():
        grid[rows.index(s), cols.index(h)] = 100 * np.mean(runs)
    fig = Figure(figsize=(1.1 * len(cols) + 2.2, 0.6 * len(rows) + 1.4), layout="constrained")
    ax = fig.subplots()
    image = ax.imshow(np.ma.masked_invalid(grid), cmap=colormaps["viridis"].with_extremes(bad="#dddddd"), aspect="auto")
    mid = np.nanmean(grid)
    for (i, j), v in np.ndenumerate(grid):
        runs = found.get((rows[i], cols[j]), [])
        text = "not run" if np.isnan(v) else f"{v:.1f}\nn={len(runs)}"
        ax.text(j, i, text, ha="center", va="center", fontsize=8,
                color="black" if np.isnan(v) or v >= mid else "white")
    ax.set_xticks(range(len(cols)), [str(h) for h in cols])
    ax.set_yticks(range(len(rows)), [f"{s:g}" for s in rows])
    ax.set_xlabel("heads (distinct filters)")
    ax.set_ylabel("σ (a variance, as in the code)")
    fig.colorbar(image, ax=ax, label="top-1 (%)")
    ax.set_title(title, fontsize=10)
    return fig


def filter_families(params: Params) -> list[dict]:
    study = params.filter_study
    where = (f"ConvMixer (dim {study.model.dim}, depth {study.model.depth}, kernel {study.model.kernel_size}, patch"
             f" {study.model.patch_size}) on {study.dataset}")
    return [family("filter_study_bars", "filter_study", "ConvMixer with learned vs frozen spatial filters",
                   f"Final top-1 (%) on the test split of the {where}: learned filters (green: learned,"
                   " learned-<family>) vs frozen filter families (purple)."
                   f" Bar = mean over the finished seeds of {study.seeds} (the number above it), error bar = min–max,"
                   " dots = single seeds, dashed line = learned mean; the y axis starts at 0."
                   " Compare [CI] 2401.12511 Fig. 4 (CIFAR-10): random ≈ impulse ≈ learned, box and rand* clearly"
                   " worse; rand* is code-2401's `softmax` family; perm and fullperm are arms beyond the paper."),
            family("filter_study_gaussian", "filter_study", "Frozen Gaussian filters: σ × heads",
                   f"Final top-1 (%) of the {where} with frozen Gaussian filters exp(−d²/(2σ)), one cell per σ and"
                   " number of distinct filters (heads), mean over the finished seeds (n in the cell); grey = not"
                   " run. Layout of [CI] Table 6: accuracy rises as σ shrinks and falls once fewer than ~8 distinct"
                   " filters remain.")]


def filter_figures(params: Params, results: Path, out: Path) -> list[dict]:
    """The filter-study bar chart and the Gaussian heat map, each if any of its runs finished."""
    study = params.filter_study
    frame = read_frames(results, planned_cells(params, ["filters"]))[0]["filters"]
    named = frame[frame["variant"].isin(study.filters)]
    order = sorted(dict.fromkeys(named["variant"]), key=lambda v: v != "learned")
    bars = {v: list(named.loc[named["variant"] == v, "top1"]) for v in order}
    grid = frame[frame["sigma"].notna() & frame["heads"].notna() & ~frame["variant"].isin(study.filters)]
    heat: dict = {}
    for sigma, heads, top1 in zip(grid["sigma"], grid["heads"], grid["top1"]):
        heat.setdefault((float(sigma), int(heads)), []).append(top1)
    entries = []
    fig = filter_bars(bars, f"ConvMixer on {study.dataset}: learned vs frozen spatial filters")
    if fig is not None:
        entries.append(save(fig, out, "filter_study_bars", "filter_study_bars", "", "Learned vs frozen filters"))
    fig = gaussian_heatmap(heat, study.gaussian_sigmas, study.gaussian_heads,
                           f"ConvMixer on {study.dataset}, frozen Gaussian filters: σ × heads (test top-1 %)")
    if fig is not None:
        entries.append(save(fig, out, "filter_study_gaussian", "filter_study_gaussian", "", "Gaussian σ × heads"))
    return entries

# ------------------------------------------------------------------------------------------------------ results

VERDICT_COLOURS = {"supported": "#2ca02c", "contradicted": "#d62728", "inconclusive": "#7f7f7f"}
FOREST_ROWS = 24  #: comparisons per forest-plot figure (a taller one would print too small on a page)


def thresholds(needs: str) -> list[float]:
    """The x positions a comparison must clear: '> 0' -> [0], '> -2' -> [-2], 'inside ±2' -> [-2, 2]."""
    text = needs.replace("−", "-").strip()
    if text.startswith("inside ±"):
        m = float(text.removeprefix("inside ±"))
        return [-m, m]
    return [float(text.lstrip("<>= "))] if text[:1] in "<>" else []


def _arm(name: str) -> str:
    """An arm or filter variant under the paper's name where ours differs ('softmax' is [CI]'s rand*)."""
    return "rand* (softmax)" if name == "softmax" else name


def forest_rows(claims: dict) -> list[dict]:
    """Every planned comparison of claims.json that has an estimate, in the claims' order."""
    rows = []
    for c in claims.get("claims", []):
        for comp in c.get("comparisons", []):
            if comp.get("mean") is not None:
                rows.append(comp | {"claim": c["id"]})
    return rows


def forest_figure(rows: list[dict], title: str, confidence: float) -> Figure:
    """One row per comparison: the paired difference (dot), its interval (bar), the threshold it must clear (red
    ticks) and its verdict (colour)."""
    fig = Figure(figsize=(8.6, 0.34 * len(rows) + 1.5), layout="constrained")
    ax = fig.subplots()
    y = np.arange(len(rows))[::-1]
    for yi, r in zip(y, rows):
        colour = VERDICT_COLOURS.get(r["verdict"], "black")
        if r.get("low") is not None and r.get("high") is not None:
            ax.plot([r["low"], r["high"]], [yi, yi], color=colour, lw=2.2, solid_capstyle="butt")
            ax.plot(r["mean"], yi, "o", color=colour, ms=5)
        else:
            ax.plot(r["mean"], yi, "o", mfc="white", color=colour, ms=5)
        for t in thresholds(r.get("needs", "")):
            ax.plot([t, t], [yi - 0.38, yi + 0.38], color="#d62728", lw=1.4)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(y, [f"{r['claim']}: {r['label']}: {_arm(r['a'])} − {_arm(r['b'])} ({r['needs']}"
                      + (f"; n={r['n']}" if r.get("n") else "") + ")" for r in rows], fontsize=7)
    ax.set_xlabel(f"difference a − b (points of top-1), {100 * confidence:g}% interval")
    ax.grid(axis="x", alpha=0.3)
    handles = [Line2D([], [], color=c, lw=2.2, marker="o", label=v) for v, c in VERDICT_COLOURS.items()]
    handles += [Line2D([], [], color="#d62728", lw=1.4, label="what the claim needs"),
                Line2D([], [], color="grey", marker="o", mfc="white", lw=0, label="too few seeds for an interval")]
    ax.legend(handles=handles, fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, frameon=False)
    ax.set_title(title, fontsize=10, pad=34)
    return fig


def forest_figures(claims: dict, out: Path) -> list[dict]:
    """The forest plot of every planned comparison, FOREST_ROWS per figure."""
    rows = forest_rows(claims)
    chunks = [rows[i:i + FOREST_ROWS] for i in range(0, len(rows), FOREST_ROWS)]
    entries = []
    for k, chunk in enumerate(chunks, 1):
        part = f" ({k} of {len(chunks)})" if len(chunks) > 1 else ""
        title = f"Every planned comparison{part}: the paired difference and its interval"
        fig = forest_figure(chunk, title, claims.get("confidence", 0.95))
        entries.append(save(fig, out, f"forest_{k}", "forest", "", title,
                            f"claims {chunk[0]['claim']} to {chunk[-1]['claim']}; {len(chunk)} comparisons"))
    return entries


def published_points(tables_dir: Path) -> list[dict]:
    """(label, published, ours, ours' std) of every table cell with a published number on the same dataset: the
    rows of results/tables/*.csv whose `published` and `ours_minus_published` are both numbers."""
    manifest = json.loads((tables_dir / "tables.json").read_text()) if (tables_dir / "tables.json").is_file() else []
    points = []
    for t in manifest:
        path = tables_dir / t["csv"]
        if not path.is_file():
            continue
        frame = pd.read_csv(path)
        if not {"published", "ours_minus_published"} <= set(frame.columns):
            continue
        frame = frame[frame["published"].notna() & frame["ours_minus_published"].notna()]
        for _, r in frame.iterrows():
            keys = [str(r[k]) for k in ("dataset", "variant", "arm", "alpha", "qk", "value", "metric", "sigma",
                                        "heads") if k in frame.columns and pd.notna(r[k]) and str(r[k]) != ""]
            std = next((r[k] for k in ("ours_std", "std") if k in frame.columns and pd.notna(r[k])), math.nan)
            points.append({"table": t["title"], "label": ", ".join(keys), "published": float(r["published"]),
                           "ours": float(r["published"] + r["ours_minus_published"]), "std": float(std)})
    return points


def published_figure(points: list[dict]) -> Figure | None:
    """Ours against the published number per cell (mean ± std over seeds), the diagonal = reproduced."""
    if not points:
        return None
    fig = Figure(figsize=(5.8, 5.0), layout="constrained")
    ax = fig.subplots()
    tables = list(dict.fromkeys(p["table"] for p in points))
    for i, table in enumerate(tables):
        mine = [p for p in points if p["table"] == table]
        ax.errorbar([p["published"] for p in mine], [p["ours"] for p in mine],
                    yerr=[0 if math.isnan(p["std"]) else p["std"] for p in mine], fmt="o", ms=4, capsize=2,
                    color=f"C{i}", label=table)
    lo = min(min(p["published"], p["ours"]) for p in points)
    hi = max(max(p["published"], p["ours"]) for p in points)
    pad = max(1.0, 0.05 * (hi - lo))
    ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="black", lw=0.8, ls="--", label="ours = published")
    ax.set_xlabel("published top-1 (%)")
    ax.set_ylabel("ours: mean ± std over seeds (%)")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)
    ax.set_title(f"Reproduction against the published numbers ({len(points)} cells)", fontsize=10)
    return fig


def results_families() -> list[dict]:
    return [family("forest", "results", "Every planned comparison",
                   "Each row is one comparison of the analysis plan (paper/plan.yaml), labelled claim: data and model:"
                   " a − b (what the claim needs). Dot = the paired difference of final top-1 (or of training top-1"
                   " at an epoch, claim 4) in points; bar = its interval over seeds and test images (at the level"
                   " of the plan, 95% two-sided); red ticks = the threshold the claim needs (0, or the plan's"
                   " margin); colour = the comparison's verdict. Hollow dot: too few seeds for an interval."),
            family("published", "results", "Reproduction against the published numbers",
                   "Every cell of the result tables with a published number for the same dataset, model, arm and"
                   " setting: the published top-1 across, ours (mean ± std over seeds) up; on the dashed diagonal"
                   " ours equals the paper. Which tables the points come from: the legend.")]


def results_figures(tables_dir: Path, out: Path) -> list[dict]:
    """The forest plot and the reproduction plot, from the aggregate's results/tables (skipped without them)."""
    claims_file = tables_dir / "claims.json"
    if not claims_file.is_file():
        return []
    entries = forest_figures(json.loads(claims_file.read_text()), out)
    fig = published_figure(published_points(tables_dir))
    if fig is not None:
        entries.append(save(fig, out, "published", "published", "", "Reproduction against the published numbers"))
    return entries

# --------------------------------------------------------------------------------------------------------- stage


def draw_all(params: Params, results: Path, out: Path, trained: bool = True, paper: Path = PAPER) -> dict:
    """Every figure whose inputs exist, written into `out`; returns the manifest (families and figures)."""
    arms = params.arms
    records = {}
    for variant in params.variants:
        for arm in arms:
            if rec := attention.read_attention(results / "attention" / variant / arm):
                records[(variant, "init", arm)] = rec
        for arm in arms if trained else []:
            if rec := trained_record(params, results, variant, arm):
                records[(variant, "trained", arm)] = rec
    runs = read_frames(results, planned_cells(params, ["vit"]))[0]["vit"]
    ci_families, ci_drawn = ci_figures(params, results, out, paper, save)
    figures = (results_figures(results / "tables", out) + curve_figures(runs, arms, out)
               + attention_figures(records, out) + filter_figures(params, results, out) + ci_drawn)
    families = [*results_families(), *curve_families(params.seeds), ATTENTION, *filter_families(params), *ci_families]
    drawn = {f["family"] for f in figures}
    return {"families": [f for f in families if f["name"] in drawn], "figures": figures}


def write_figures(params: Params, results: Path, out: Path, trained: bool = True) -> dict:
    """`draw_all` and figures.json into `out`, all or nothing."""
    with folder_aside(out) as tmp:
        manifest = draw_all(params, results, tmp, trained)
        (tmp / "figures.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return manifest


def add_arguments(parser) -> None:
    parser.add_argument("--results", default="results", help="the results folder to read (default: results)")
    parser.add_argument("--out", default=str(FIGURES_DIR), help="where to write (default: reports/figures)")


def main(params: Params, args) -> int:
    torch.set_num_threads(params.resources.threads)
    manifest = write_figures(params, Path(args.results), Path(args.out))
    for e in manifest["figures"]:
        print(f"[figures] {e['file']}: {e['title']}")
    print(f"[figures] {len(manifest['figures'])} figure(s) in {args.out} (figures.json lists them in reading order)")
    return 0


if __name__ == "__main__":
    sys.exit(entry.command(__spec__.name, add_arguments, main))

"""`python -m pipeline figures`: every figure of the report, the `figures` stage.

Reads only finished results of the current experiment (the paths params.yaml names: `init`, `baselines`, `seeds`,
`datasets`, `filter_study.*`; older runs lying in results/ are ignored) and draws, with matplotlib's object API
(no pyplot state; PNG through the Agg canvas):

- attention maps per arm at initialization, from results/attention/<arm>/ ([NeurIPS] Fig. 4), and after
  training, recomputed from results/train/<datasets[0]>/<arm>/seed<first seed>/model.pt;
- training curves ([NeurIPS] Fig. 3): validation and training top-1 per epoch, mean and min-max band over seeds;
- the filter study: top-1 per ConvMixer filter variant ([CI] 2401.12511 Fig. 4) and the Gaussian sigma x heads
  heat map ([CI] Table 6 layout).

A figure whose inputs do not exist is skipped, never drawn from made-up data. The stage writes
reports/figures/*.png and reports/figures/figures.json, the list of drawn figures in reading order:
``[{"file": "<name>.png" (relative to reports/figures), "title", "caption", "section"}]`` with section one of
``attention``, ``curves``, ``filter_study``. The folder is written aside and moved into place when complete.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch
from matplotlib import colormaps
from matplotlib.colors import PowerNorm
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from pipeline import builders
from pipeline.analysis import attention
from pipeline.config import Params
from pipeline.data.meta import dataset_meta
from pipeline.outputs import folder_aside

FIGURES_DIR = Path("reports") / "figures"
DPI = 170
ZOOM = 16  #: side of the zoomed upper-left corner of a map, as the paper's red box
MAX_HEADS = 12  #: heads drawn per layer (ViT-B has 12; Swin's deep stages have more)
ARM_COLOURS = {"impulse": "#d62728", "mimetic": "#1f77b4", "default": "#555555", "timm": "#8c564b"}
INPUT_TEXT = {
    "pseudo": "on the positional pseudo-input (each block's norm1 of the patch position embeddings, no image content:"
              " what the impulse init is fitted on, paper.md section 1.1)",
    "real": "averaged over {images} validation images of {dataset}",
}

# ---------------------------------------------------------------------------------------------------------- I/O


def read_metrics(path: Path) -> dict | None:
    """A run's metrics.json, or None when the run has not finished."""
    return json.loads(path.read_text()) if path.is_file() else None


def train_results(results: Path, datasets: list[str], variants: list[str], arms: list[str],
                  seeds: list[int]) -> dict:
    """``{panel: {arm: [metrics of each finished seed]}}`` of results/train/<dataset>/<variant>/<arm>/seed<k>/,
    one panel per dataset (and variant, when the grid has several)."""
    found = {}
    for dataset in datasets:
        for variant in variants:
            panel = dataset if len(variants) == 1 else f"{dataset}, {variant}"
            for arm in arms:
                runs = [read_metrics(results / "train" / dataset / variant / arm / f"seed{s}" / "metrics.json")
                        for s in seeds]
                runs = [r for r in runs if r is not None and r.get("history")]
                if runs:
                    found.setdefault(panel, {})[arm] = runs
    return found


def filter_results(results: Path, variants: list[str], seeds: list[int]) -> dict[str, list[dict]]:
    """``{variant: [metrics of each finished seed]}`` of results/filter_study/<variant>/seed<k>/, learned first."""
    order = sorted(variants, key=lambda v: v != "learned")
    found = {v: [read_metrics(results / "filter_study" / v / f"seed{s}" / "metrics.json") for s in seeds]
             for v in order}
    return {v: [r for r in runs if r is not None] for v, runs in found.items() if any(runs)}


def gaussian_results(results: Path, sigmas: list[float], heads: list[int], seeds: list[int]) -> dict:
    """``{(sigma, heads): [metrics]}`` of the Gaussian grid, read from results/filter_study/gaussian-*-h<heads>/.

    The folder spells sigma as the stage's command line did (0.1, 1.0 or 1), so the cell is matched on the
    `sigma` and `heads` its metrics.json records rather than on the folder name.
    """
    found = {}
    for h in heads:
        for s in seeds:
            cells = {}  # sigma -> this seed's run (the first folder wins if two spell one sigma differently)
            for path in sorted(results.glob(f"filter_study/gaussian-*-h{h}/seed{s}/metrics.json")):
                m = read_metrics(path)
                sigma = next((x for x in sigmas if m.get("sigma") is not None and math.isclose(m["sigma"], x)), None)
                if sigma is not None and m.get("heads") == h:
                    cells.setdefault(sigma, m)
            for sigma, m in cells.items():
                found.setdefault((sigma, h), []).append(m)
    return found


def save(fig: Figure, out: Path, name: str, title: str, caption: str, section: str) -> dict:
    """Write `fig` as out/<name>.png and return its manifest entry."""
    fig.savefig(out / f"{name}.png", dpi=DPI)
    return {"file": f"{name}.png", "title": title, "caption": caption, "section": section}


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


def attention_figure(maps: dict[str, np.ndarray], record: dict, source: str, heading: str) -> Figure | None:
    """Rows = heads (at most MAX_HEADS); per layer two columns: the full map, titled with the head's intended
    offset, peak agreement and locality mass, and its upper-left corner. None when `maps` lacks this input."""
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
            dy, dx = record["offsets"][layer][h]
            full.set_title(f"layer {layer}, head {h}, offset ({dy:+d}, {dx:+d})\n"
                           f"peak {measures['peak_agreement'][h]:.2f}, local {measures['locality_mass'][h]:.2f}",
                           fontsize=8.5)
            corner.set_title(f"layer {layer}, head {h}\nzoom {zoom}×{zoom}", fontsize=8.5)
    bar = fig.add_axes((1 - 0.8 / width, 0.25, 0.13 / width, 0.5))
    fig.colorbar(axes[0, 0].images[0], cax=bar, label="attention probability (√ scale)")
    fig.suptitle(heading, fontsize=11, y=1 - 0.15 / height, va="top")
    return fig


def attention_caption(record: dict, source: str, state: str) -> str:
    """What an attention figure shows, in words a reader of the report needs."""
    first = str(record["layers"][0])
    h, w = record["grids"][first]
    n, zoom, f = h * w, min(ZOOM, h * w), record["kernel_size"]
    heads = max(record["heads"].values())
    where = INPUT_TEXT[source].format(images=record.get("images"), dataset=record.get("dataset"))
    when = "at initialization (seed 0, before any training step)" if state == "init" else (
        f"after training (final checkpoint of seed {record.get('seed')})")
    blocks = "the paper's 8×8 sub-blocks correspond to an 8-wide grid" if w != 8 else "as the paper's 8×8 sub-blocks"
    shown = f"; the first {MAX_HEADS} of {heads} heads are shown" if heads > MAX_HEADS else ""
    uniform = record["measures"][source][first]["uniform_locality_mass"]
    return (
        f"Attention of the {record.get('arm')} arm ({record.get('model')}) {when}, {where}. Rows: heads (0-based, as in"
        f" the code{shown}). For each layer, left: the full {n}×{n} map among the {h}×{w} patch tokens (queries down,"
        f" keys across, cls token dropped), the red box marking the zoomed corner; right: its upper-left {zoom}×{zoom}"
        f" corner, white lines every {w} tokens = one row of the {w}-wide token grid ({blocks}), so an impulse at"
        f" offset (dy, dx) is a diagonal shifted by dy·{w}+dx. Colour: attention probability on a square-root scale"
        " from 0 to 1, shared by all panels. Titles: the head's intended impulse offset (dy, dx) (the impulse arm's,"
        " used as the yardstick for every arm), peak agreement = fraction of queries whose strongest key is at that"
        f" offset, and locality mass = attention inside the query's {f}×{f} neighbourhood (a uniform map gives"
        f" {uniform:.2f}). Compare [NeurIPS] Fig. 4: impulse heads peak off the diagonal at distinct offsets, mimetic"
        " heads strengthen the diagonal, default maps are flat."
    )


def trained_record(params: Params, results: Path, variant: str, arm: str) -> tuple[dict, dict] | None:
    """The attention record of the final weights of (datasets[0], variant, arm, seeds[0]); None if not trained.

    The model is rebuilt with the dataset's facts as fetched (`pipeline.data.meta`), as its run built it.
    """
    dataset, seed = params.datasets[0], params.seeds[0]
    path = results / "train" / dataset / variant / arm / f"seed{seed}" / "model.pt"
    if not path.is_file():
        return None
    model = builders.vit(params, variant, arm, dataset_meta(params.data.root, dataset), seed)
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    maps, record = attention.model_record(params, model, seed, attention.model_batch(params, dataset, model))
    head = {"variant": variant, "arm": arm, "state": "trained", "dataset": dataset, "seed": seed,
            "model": attention.model_label(params.models[variant])}
    return maps, head | record


def attention_figures(records: dict[tuple[str, str], tuple[dict, dict]], state: str, out: Path) -> list[dict]:
    """One figure per (variant, arm) and input of `records` (``{(variant, arm): (maps, record)}``)."""
    entries = []
    several = len({variant for variant, _ in records}) > 1
    for (variant, arm), (maps, record) in records.items():
        for source in attention.INPUTS:
            label = {"pseudo": "positional pseudo-input", "real": "real validation batch"}[source]
            when = {"init": "at initialization", "trained": "after training"}[state]
            who = f"{variant} {arm}" if several else arm
            title = f"Attention maps of {who} {when}, {label}"
            fig = attention_figure(maps, record, source, title)
            if fig is not None:
                entries.append(save(fig, out, f"attention_{state}_{variant}_{arm}_{source}", title,
                                    attention_caption(record, source, state), "attention"))
    return entries

# ------------------------------------------------------------------------------------------------------- curves


def curve_band(runs: list[dict], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(epochs from 1, mean, min, max) in % of history[key] over runs, on the epochs every run has."""
    n = min(len(r["history"]) for r in runs)
    values = 100 * np.array([[row[key] for row in r["history"][:n]] for r in runs], dtype=float)
    return np.arange(1, n + 1), values.mean(0), values.min(0), values.max(0)


def curves_figure(found: dict, arms: list[str], key: str, ylabel: str, title: str) -> Figure | None:
    """One panel per dataset: mean line and min-max band over seeds per arm. None without runs."""
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
    fig.suptitle(title, fontsize=11)
    return fig


def curve_figures(found: dict, arms: list[str], seeds: list[int], out: Path) -> list[dict]:
    """Validation and training top-1 per epoch (Fig. 3 of [NeurIPS])."""
    band = (f"line = mean over the finished seeds of {seeds}, band = min–max over them, n per arm in the legend;"
            " curves stop at the last epoch every seed of the arm has")
    specs = [
        ("curves_val_top1", "val_top1", "validation top-1 (%)", "Validation top-1 by epoch",
         f"Validation top-1 (%) after each epoch, one panel per dataset: {band}. Compare [NeurIPS] Fig. 3"
         " (camera-ready; training curves of ViT-T, impulse above mimetic above default early in training)."),
        ("curves_train_top1", "train_top1", "training top-1 (%)", "Training top-1 by epoch",
         f"Training top-1 (%) of each epoch, measured on the augmented training batches as the model trains (with"
         f" mixup on, against the unmixed label; paper.md section 4 item 12): {band}. The convergence claim"
         " (paper.md section 2.3, claim 4) is about this training accuracy."),
    ]
    entries = []
    for name, key, ylabel, title, caption in specs:
        fig = curves_figure(found, arms, key, ylabel, title)
        if fig is not None:
            entries.append(save(fig, out, name, title, caption, "curves"))
    return entries

# ------------------------------------------------------------------------------------------------- filter study


def filter_bars(found: dict[str, list[dict]], title: str) -> Figure | None:
    """Bar per variant: mean top-1 with min-max error bar and the seeds as dots; learned dashed across."""
    if not found:
        return None
    names = list(found)
    tops = [100 * np.array([r["top1"] for r in found[v]]) for v in names]
    means = np.array([t.mean() for t in tops])
    lo_all, hi_all = min(t.min() for t in tops), max(t.max() for t in tops)
    bottom = max(0.0, math.floor(lo_all - max(2.0, 0.5 * (hi_all - lo_all))))
    fig = Figure(figsize=(max(4.5, 1.0 * len(names) + 1.5), 3.6), layout="constrained")
    ax = fig.subplots()
    x = np.arange(len(names))
    colours = ["#2ca02c" if v == "learned" else "#7f7fbf" for v in names]
    err = np.array([[m - t.min(), t.max() - m] for m, t in zip(means, tops)]).T
    ax.bar(x, means - bottom, bottom=bottom, color=colours, yerr=err, capsize=4, width=0.65)
    for i, t in enumerate(tops):
        ax.scatter(np.full(len(t), x[i]), t, color="black", s=10, zorder=3)
        ax.text(x[i], t.max() + 0.02 * (hi_all - bottom), f"{means[i]:.1f}", ha="center", va="bottom", fontsize=8)
    if "learned" in found:
        ax.axhline(means[0], color="#2ca02c", ls="--", lw=1)
    ax.set_xticks(x, [f"{v}\n(n={len(found[v])})" for v in names], fontsize=8)
    ax.set_ylim(bottom, hi_all + 0.12 * (hi_all - bottom))
    ax.set_ylabel("top-1 (%)")
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(title, fontsize=10)
    return fig


def gaussian_heatmap(found: dict, sigmas: list[float], heads: list[int], title: str) -> Figure | None:
    """Mean top-1 per (sigma, heads) cell, rows sigma and columns heads both descending as [CI] Table 6."""
    if not found:
        return None
    rows, cols = sorted(sigmas, reverse=True), sorted(heads, reverse=True)
    grid = np.full((len(rows), len(cols)), np.nan)
    for (s, h), runs in found.items():
        grid[rows.index(s), cols.index(h)] = 100 * np.mean([r["top1"] for r in runs])
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


def filter_figures(params: Params, results: Path, out: Path) -> list[dict]:
    """The filter-study bar chart and the Gaussian heat map, each if any of its runs finished."""
    study = params.filter_study
    where = (f"ConvMixer (dim {study.model.dim}, depth {study.model.depth}, kernel {study.model.kernel_size}, patch"
             f" {study.model.patch_size}) on {study.dataset}")
    bars_title, heat_title = "ConvMixer with learned vs frozen spatial filters", "Frozen Gaussian filters: σ × heads"
    bars = filter_bars(filter_results(results, study.filters, study.seeds), bars_title)
    heat = gaussian_heatmap(gaussian_results(results, study.gaussian_sigmas, study.gaussian_heads, study.seeds),
                            study.gaussian_sigmas, study.gaussian_heads, heat_title)
    entries = []
    if bars is not None:
        entries.append(save(bars, out, "filter_study_bars", bars_title,
                            f"Final top-1 (%) of the {where}: learned filters (green) vs frozen filter families"
                            f" (purple). Bar = mean over the finished seeds of {study.seeds} (the number above it),"
                            " error bar = min–max, dots = single seeds, dashed line = learned mean; the y axis is cut"
                            " below the lowest seed. Compare [CI] 2401.12511 Fig. 4: random ≈ impulse ≈ learned, box"
                            " and rand* (perm) clearly worse.", "filter_study"))
    if heat is not None:
        entries.append(save(heat, out, "filter_study_gaussian", heat_title,
                            f"Final top-1 (%) of the {where} with frozen Gaussian filters exp(−d²/(2σ)), one cell per"
                            " σ and number of distinct filters (heads), mean over the finished seeds (n in the cell);"
                            " grey = not run. Layout of [CI] Table 6: accuracy rises as σ shrinks and falls once"
                            " fewer than ~8 distinct filters remain.", "filter_study"))
    return entries

# --------------------------------------------------------------------------------------------------------- stage


def draw_all(params: Params, results: Path, out: Path, trained: bool = True) -> list[dict]:
    """Every figure whose inputs exist, written into `out`; returns the manifest in reading order."""
    arms, cells = params.arms, [(v, a) for v in params.variants for a in params.arms]
    at_init = {(v, a): rec for v, a in cells if (rec := attention.read_attention(results / "attention" / v / a))}
    entries = attention_figures(at_init, "init", out)
    if trained:
        after = {(v, a): rec for v, a in cells if (rec := trained_record(params, results, v, a))}
        entries += attention_figures(after, "trained", out)
    found = train_results(results, params.datasets, params.variants, arms, params.seeds)
    entries += curve_figures(found, arms, params.seeds, out)
    entries += filter_figures(params, results, out)
    return entries


def write_figures(params: Params, results: Path, out: Path, trained: bool = True) -> list[dict]:
    """`draw_all` and figures.json into `out`, all or nothing."""
    with folder_aside(out) as tmp:
        entries = draw_all(params, results, tmp, trained)
        (tmp / "figures.json").write_text(json.dumps(entries, indent=2, ensure_ascii=False) + "\n")
    return entries


def add_arguments(parser) -> None:
    parser.add_argument("--results", default="results", help="the results folder to read (default: results)")
    parser.add_argument("--out", default=str(FIGURES_DIR), help="where to write (default: reports/figures)")


def main(params: Params, args) -> int:
    torch.set_num_threads(params.train.threads)
    entries = write_figures(params, Path(args.results), Path(args.out))
    for e in entries:
        print(f"[figures] {e['file']}: {e['title']}")
    print(f"[figures] {len(entries)} figure(s) in {args.out} (figures.json lists them in reading order)")
    return 0

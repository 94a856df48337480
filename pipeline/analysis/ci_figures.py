"""[CI] 2401.12511 Figs 6-9 from the α grid's own cells (results/ci_alpha), drawn by the figures stage.

- Fig. 6: each arm's validation top-1 per epoch at α = 0.2, mean and min-max band over the seeds.
- Figs 7-9: for [CI]'s head 3 at layers 1 / 3 / 6 (clipped to the depth), the head's QK map (D × D), its PQKᵀPᵀ
  map on the raw sin-cos PE, and that map's softmax at the layer's scale, before training (the model rebuilt
  from the cell's resolved configuration: the run's draws and fit) and after (its model.pt).

Captions carry the published figures' descriptions (paper/coverage.yaml, ci-fig-6 to ci-fig-9). A missing cell
draws nothing.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from pipeline.analysis.coverage import load_coverage
from pipeline.analysis.runs import planned_cells, read_frames
from pipeline.data.meta import dataset_meta
from pipeline.experiments import by_name
from pipeline.method.simple_vit import SimpleViT
from pipeline.params import Params
from pipeline.training.simple_vit import initialized

#: [CI]'s figures: α of Fig. 6 and the maps, the head (1-based) and layers (1-based) of Figs 7-9
FIG_ALPHA, FIG_HEAD, FIG_LAYERS = 0.2, 3, (1, 3, 6)
#: coverage.yaml ids of the figures, and the map each of Figs 7-9 draws
PUBLISHED = {"ci_curves": "ci-fig-6", "ci_qk": "ci-fig-7", "ci_pqkp": "ci-fig-8", "ci_softmax": "ci-fig-9"}
MAPS = {"ci_qk": "QK = W_q,hᵀ W_k,h", "ci_pqkp": "P QKᵀ Pᵀ", "ci_softmax": "softmax(scale · P QKᵀ Pᵀ)"}
ARM_COLOURS = {"impulse": "#d62728", "mimetic": "#1f77b4", "random": "#555555"}


def head_maps(model: SimpleViT, layer: int, head: int) -> dict[str, np.ndarray]:
    """The three maps of one head (0-based layer and head) of a Simple ViT with the α-mixed attention."""
    attn = model.blocks[layer].attn
    inner = attn.heads * attn.head_dim
    rows = slice(head * attn.head_dim, (head + 1) * attn.head_dim)
    with torch.no_grad():
        w = attn.to_qk.weight.float()
        qk = w[:inner][rows].T @ w[inner:][rows]  # z W_q,hᵀ (z W_k,hᵀ)ᵀ = z (W_q,hᵀ W_k,h) zᵀ
        pe = model.pos_embedding.float()
        logits = pe @ qk @ pe.T
        return {"ci_qk": qk.numpy(), "ci_pqkp": logits.numpy(), "ci_softmax": (logits * attn.scale).softmax(-1).numpy()}


def figure_runs(params: Params, results: Path) -> pd.DataFrame:
    """The finished cells of the α grid's first dataset at FIG_ALPHA."""
    cells = [(stage, cell) for stage, cell in planned_cells(params, ["ci"]) if cell["dataset"] ==
             params.ci_alpha.datasets[0] and math.isclose(float(cell["alpha"]), FIG_ALPHA)]
    return read_frames(results, cells)[0]["ci"]


def cell_config(params: Params, dataset: str, arm: str, seed: int) -> dict:
    cell = {"dataset": dataset, "alpha": str(FIG_ALPHA), "arm": arm, "seed": str(seed)}
    return by_name("ci_alpha").resolve(params, cell)


def cell_maps(params: Params, runs: pd.DataFrame, arm: str, layers: list[int], head: int) -> dict | None:
    """{state: {layer: maps}} of the first dataset's first-seed cell at FIG_ALPHA (of `runs`, `figure_runs`), before
    and after training."""
    ci = params.ci_alpha
    dataset, seed = ci.datasets[0], ci.seeds[0]
    row = runs[(runs["arm"] == arm) & (runs["seed"] == int(seed))]
    folder = Path(row["folder"].iloc[0]) if len(row) else None
    if folder is None or not (folder / "model.pt").is_file():
        return None
    model, _ = initialized(cell_config(params, dataset, arm, seed), dataset_meta(params.data.root, dataset))
    out = {"before": {layer: head_maps(model, layer, head) for layer in layers}}
    model.load_state_dict(torch.load(folder / "model.pt", map_location="cpu", weights_only=True))
    out["after"] = {layer: head_maps(model, layer, head) for layer in layers}
    return out


def maps_figure(kind: str, found: dict[str, dict], layers: list[int], head: int) -> Figure:
    """Rows: each arm before and after training; columns: the layers. A diverging scale per panel for QK and PQKᵀPᵀ,
    0 to 1 for the softmax."""
    rows = [(arm, state) for arm in found for state in ("before", "after")]
    fig = Figure(figsize=(2.3 * len(layers) + 0.6, 2.2 * len(rows)), layout="constrained")
    axes = fig.subplots(len(rows), len(layers), squeeze=False)
    for r, (arm, state) in enumerate(rows):
        for c, layer in enumerate(layers):
            m, ax = found[arm][state][layer][kind], axes[r][c]
            if kind == "ci_softmax":
                image = ax.imshow(m, cmap="viridis", vmin=0, vmax=1)
            else:
                bound = float(np.abs(m).max()) or 1.0
                image = ax.imshow(m, cmap="RdBu_r", norm=TwoSlopeNorm(0.0, -bound, bound))
            fig.colorbar(image, ax=ax, shrink=0.7)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"{arm}, {state}, layer {layer + 1}", fontsize=8)
    fig.suptitle(f"[CI] α = {FIG_ALPHA:g}: {MAPS[kind]} of head {head + 1}", fontsize=10)
    return fig


def curves(ci, arms: list[str]) -> Figure | None:
    cells = ci[np.isclose(ci["alpha"].astype(float), FIG_ALPHA)] if len(ci) else ci
    if not len(cells):
        return None
    fig = Figure(figsize=(5.0, 3.4), layout="constrained")
    ax = fig.subplots()
    for i, arm in enumerate(a for a in arms if (cells["arm"] == a).any()):
        runs = [h for h in cells.loc[cells["arm"] == arm, "history"] if h]
        if not runs:
            continue
        n = min(len(h) for h in runs)
        values = 100 * np.array([[row["val_top1"] for row in h[:n]] for h in runs], dtype=float)
        epochs, colour = np.arange(1, n + 1), ARM_COLOURS.get(arm, f"C{i}")
        ax.plot(epochs, values.mean(0), color=colour, marker="o", ms=3, label=f"{arm} (n={len(runs)})")
        ax.fill_between(epochs, values.min(0), values.max(0), color=colour, alpha=0.2, lw=0)
    ax.set_xlabel("epoch")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("validation top-1 (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(f"[CI] M′_I at α = {FIG_ALPHA:g}: accuracy over the first epochs", fontsize=10)
    return fig


def families(paper: Path, dataset: str, seeds: list[int], layers: list[int], head: int) -> list[dict]:
    published = {e.id: e for e in load_coverage(paper)}

    def beside(name: str) -> str:
        e = published.get(PUBLISHED[name])
        return f" Published ([CI] {e.item}): {e.title}." if e else ""
    shown = f"layers {', '.join(str(k + 1) for k in layers)} (1-based, as [CI] numbers them), head {head + 1}"
    return [
        {"name": "ci_curves", "section": "ci", "title": "[CI] Fig. 6: accuracy over the first epochs",
         "caption": f"Validation top-1 (%) after each epoch of the α grid's cells at α = {FIG_ALPHA:g} on {dataset}"
                    f" (data.val_subset; [CI] plots test accuracy), mean and min-max band over seeds {seeds}."
                    + beside("ci_curves")},
        *({"name": name, "section": "ci", "title": f"[CI] Fig. {7 + i}: {MAPS[name]} maps",
           "caption": f"{MAPS[name]} of one head of the α = {FIG_ALPHA:g} cell on {dataset}, seed {seeds[0]}:"
                      f" {shown}; each arm before training (rebuilt from the cell's config and seed) and after"
                      f" (its model.pt). QK is D × D over the attention input's channels; P QKᵀ Pᵀ and its softmax"
                      " are N × N over the token positions (queries down, keys across), P the raw sin-cos PE."
                      + beside(name)}
          for i, name in enumerate(("ci_qk", "ci_pqkp", "ci_softmax")))]


def ci_figures(params: Params, results: Path, out: Path, paper: Path, save) -> tuple[list[dict], list[dict]]:
    """(families, figures) of [CI] Figs 6-9, drawn with the figures stage's `save`; nothing without an α 0.2 cell."""
    ci = params.ci_alpha
    if not ci.datasets or not any(math.isclose(a, FIG_ALPHA) for a in ci.alphas):
        return [], []
    layers = sorted({min(k, ci.model.depth) - 1 for k in FIG_LAYERS})
    head = min(FIG_HEAD, ci.model.heads) - 1
    runs = figure_runs(params, results)
    figures = []
    fig = curves(runs, list(ci.arms))
    if fig is not None:
        figures.append(save(fig, out, "ci_fig6_curves", "ci_curves", "ci", f"α = {FIG_ALPHA:g}: accuracy by epoch"))
    found = {arm: m for arm in ci.arms if (m := cell_maps(params, runs, arm, layers, head))}
    if found:
        for name in ("ci_qk", "ci_pqkp", "ci_softmax"):
            figures.append(save(maps_figure(name, found, layers, head), out, f"ci_fig_{name}", name, "ci",
                                f"α = {FIG_ALPHA:g}: {MAPS[name]}, head {head + 1}"))
    drawn = {f["family"] for f in figures}
    return [f for f in families(paper, ci.datasets[0], list(ci.seeds), layers, head) if f["name"] in drawn], figures

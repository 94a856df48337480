"""The ConvMixer filter-study tables: [CI] Fig. 4's bar data and [CI] Table 6's Gaussian σ × heads grid.

The study (claims 5a, 5b of paper/claims.yaml) trains ConvMixers whose depthwise filters are learned or frozen
(random, impulse, box-n, softmax = [CI]'s rand*, Gaussian-σ with `heads` distinct filters). `perm` and `fullperm`
(code-2401's linear format, never swept) are arms beyond the paper: their rows say so. Fig. 4 of [CI] is a bar
chart only, so its cells are n/p; [SIA] quotes kernel-3 numbers. Table 6 is on augmented CIFAR-10 with 512
channels; the CPU default runs a far smaller ConvMixer on Fashion-MNIST, so the differences to it measure the
setting as much as the method.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from pipeline.analysis.numbers import NA, NP, mean_pm, num
from pipeline.analysis.published import select
from pipeline.analysis.tables import Table, final_top1, group_stats, lookup, published_cell
from pipeline.errors import PipelineError
from pipeline.method.names import parse_study_variant

BEYOND = "beyond the paper"


def published_family(variant: str) -> str:
    """Our variant name -> the family name paper/filter_study.csv uses ('box-9' -> 'box'; 'box-1' -> 'impulse', as
    code-2401's box1 is [CI]'s and [SIA]'s impulse). Trainable variants other than `learned` keep their name: no
    published bar."""
    try:
        parsed = parse_study_variant(variant)
    except PipelineError:
        return variant.split("-")[0]
    if parsed.learned:
        return parsed.name
    family = parsed.family
    return "impulse" if family.kind == "box" and family.param == 1 else family.kind


def beyond_paper(variant: str) -> bool:
    """True for a variant of a family code-2401 never swept (`pipeline.vocabulary.BEYOND_PAPER`)."""
    try:
        return parse_study_variant(variant).family.beyond_paper
    except PipelineError:
        return False


def prop1_note(filters: pd.DataFrame) -> str:
    """Proposition 1 (D >= k·f²) as measured on the learned ConvMixer's patch embeddings, or ''."""
    learned = filters[(filters["variant"] == "learned") & filters["effective_rank"].notna()]
    if learned.empty:
        return ""
    r = learned.iloc[0]
    holds = "holds" if bool(r["prop1_holds"]) else "does not hold"
    return (f" Learned ConvMixer (seed {r['seed']}): effective rank k = {r['effective_rank']:g} of the patch"
            f" embeddings; Proposition 1 needs D >= k·f² = {r['prop1_rhs']:g} with D = {r['dim']:g}: it {holds}.")


def distinct_filters(meta: dict) -> str:
    """'64' for `heads` shared filters, 'one per channel' when heads is unset (each channel its own)."""
    heads = meta.get("heads")
    if not meta:
        return NA
    return "one per channel" if heads is None or (isinstance(heads, float) and math.isnan(heads)) else str(int(heads))


def published_on(rows: pd.DataFrame, dataset: str) -> tuple[str, float]:
    """(display of every published cell with its table and dataset, the first number on `dataset` or NaN): a
    difference is taken only within one dataset."""
    if rows.empty:
        return NA, math.nan
    rows = rows.sort_values("value", key=lambda v: v.isna(), kind="stable")  # numbers first, then n/p
    shown = "; ".join(dict.fromkeys(
        f"{published_cell(r.to_frame().T, True)[0].rstrip(')')}, {r['dataset']})" for _, r in rows.iterrows()))
    return shown, published_cell(rows[rows["dataset"] == dataset])[1]


def _versus(ours: float, published: float) -> str:
    return num(ours - published, True) if math.isfinite(published) else "– (no cell on this dataset)"


def filter_table(filters: pd.DataFrame, published: pd.DataFrame, variants: Sequence[str],
                 dataset: str = "") -> Table | None:
    """[CI] Fig. 4 bar data: per variant (learned first), top-1 mean ± std, Δ vs learned, published beside (with
    its dataset; differenced only on the study's own `dataset`)."""
    frame = filters[filters["variant"].isin(variants)]
    if frame.empty:
        return None
    order = sorted(dict.fromkeys(variants), key=lambda v: v != "learned")
    stats = group_stats(frame, ["variant"])
    learned = lookup(stats, variant="learned")["mean"]
    rows, data = [], []
    for variant in order:
        s = lookup(stats, variant=variant)
        first = frame[frame["variant"] == variant].head(1).to_dict("records")
        meta = first[0] if first else {}
        shown, value = published_on(select(published, "filter_study", variant=published_family(variant)), dataset)
        label = f"{variant} ({BEYOND})" if beyond_paper(variant) else variant
        rows.append([label, "yes" if meta.get("frozen") else "no" if meta else NA, distinct_filters(meta),
                     mean_pm(s["mean"], s["std"], s["n"]), num(s["mean"] - learned, True), shown,
                     _versus(s["mean"], value)])
        data.append({"variant": variant, "beyond_paper": beyond_paper(variant), "frozen": meta.get("frozen"),
                     "heads": meta.get("heads"), **s, "delta_vs_learned": s["mean"] - learned, "published": value,
                     "ours_minus_published": s["mean"] - value})
    caption = (f"ConvMixer with learned or frozen depthwise filters on {dataset or 'the study dataset'}:"
               f" {final_top1(frame)} (%), mean ± std over seeds. Published, with its dataset: [CI] Fig. 4 is a bar"
               " chart (n/p); [SIA] quotes kernel 3, embedding 512 (presumably CIFAR-10; paper/filter_study.csv)."
               " Ours minus published only where the published cell is on the same dataset."
               + prop1_note(filters)
               + (f" Rows marked '{BEYOND}' are families code-2401 builds only in its linear format and never swept"
                  " (not [CI]'s rand*, which is softmax); they decide no claim." if any(map(beyond_paper, order))
                  else ""))
    return Table("filter_study", "Filter study: learned vs frozen filters ([CI] Fig. 4 bar data)", caption,
                 ["Variant", "Frozen", "Distinct filters", "Top-1 %", "Δ vs learned (pts)", "Published % (dataset)",
                  "Ours − published, same dataset"], rows, pd.DataFrame(data), section="filter_study")


def _gaussian_cell(frame: pd.DataFrame, published: pd.DataFrame, sigma: float, heads: int, dataset: str) -> dict:
    """Our mean/std/n at (σ, heads) and the [CI] Table 6 number there, differenced only on the same dataset."""
    sub = frame[frame["sigma"].astype(float).map(lambda s: math.isclose(s, sigma)) & (frame["heads"] == heads)]
    s = lookup(group_stats(sub.assign(cell=0), ["cell"]), cell=0)
    rows = select(published, "gaussian", sigma=sigma, heads=heads)
    value = published_cell(rows)[1]
    where = str(rows["dataset"].iloc[0]) if len(rows) else ""
    same = value if where == dataset else math.nan
    return {"sigma": sigma, "heads": heads, "n": s["n"], "mean": s["mean"], "std": s["std"], "published": value,
            "published_dataset": where, "ours_minus_published": s["mean"] - same}


def _gaussian_text(cell: dict) -> str:
    """'88.12 ± 0.20 (n=2); paper 91.70 on cifar10' (with Δ only on the same dataset)."""
    ours = mean_pm(cell["mean"], cell["std"], cell["n"])
    if not math.isfinite(cell["published"]):
        return f"{ours}; paper {NP}"
    delta = cell["ours_minus_published"]
    return (f"{ours}; paper {cell['published']:.2f} on {cell['published_dataset']}"
            + (f" (Δ {num(delta, True)})" if math.isfinite(delta) else ""))


def gaussian_table(filters: pd.DataFrame, published: pd.DataFrame, sigmas: Sequence[float],
                   heads: Sequence[int], dataset: str = "") -> Table | None:
    """[CI] Table 6 layout: σ down (largest first), heads across (most first); ours, and the paper's cell beside."""
    frame = filters[filters["variant"].str.startswith("gaussian") & filters["sigma"].notna()]
    if frame.empty:
        return None
    sigmas, heads = sorted(set(sigmas), reverse=True), sorted(set(heads), reverse=True)
    cells = [[_gaussian_cell(frame, published, s, h, dataset) for h in heads] for s in sigmas]
    rows = [[f"{s:g}", *(_gaussian_text(c) for c in line)] for s, line in zip(sigmas, cells)]
    caption = ("Frozen Gaussian filters exp(-d²/(2σ)) (σ acts as a variance, as in the official code), `heads`"
               f" distinct filters, on {dataset or 'the study dataset'}: {final_top1(frame)} (%), mean ± std over"
               " seeds; beside it the [CI] Table 6 cell (augmented CIFAR-10, 512 channels), and ours minus it only"
               " where that is the same dataset. A dash: not run.")
    return Table("gaussian", "Gaussian filters: σ × heads ([CI] Table 6 layout)", caption,
                 ["σ \\ heads", *(str(h) for h in heads)], rows, pd.DataFrame([c for line in cells for c in line]),
                 section="filter_study")

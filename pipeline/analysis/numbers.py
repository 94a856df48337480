"""How the analysis writes a number: percent and points with two decimals, mean ± std, an interval, and the marks
for a missing or an unpublished cell. Tables, claims, the report and the README's blocks all write them so."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a type only: writing numbers needs no statistics stack
    from pipeline.analysis.stats import Estimate

NA = "–"  #: a cell this run has no number for
NP = "n/p"  #: a cell the papers do not publish


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


def interval(p: Estimate) -> str:
    """'[-2.10, +3.94]', or NA with fewer than two pairs."""
    return f"[{num(p.low, True)}, {num(p.high, True)}]" if p.enough else NA

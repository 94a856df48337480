"""`python -m pipeline cells compare`: a reproduction on one's own machine against the committed cells.

After `make repro` (or `make repro PROFILE=<name>`) on another machine, results/ holds that machine's cells and
cells/<profile>/ the published run's. On a CPU of another kind the kernels differ, so cells land a little apart
(docs/reliability.md, "Reproducibility across CPUs": about a point per cell, bench/cross_cpu.yaml). This says, without
changing either, which cells moved and by how much against that measured spread, which comparisons moved, and whether
any verdict changed. Both runs are aggregated in memory by the aggregate stage's own code, so the two sides are judged
by one plan. The exit status is 1 when a verdict changed, 0 otherwise: numbers moving within the spread is what
another CPU does, and the committed cells stay the published run (`python -m pipeline readme` would paste this
machine's numbers over it: that is for a release, `make release-check`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.analysis.aggregate import PAPER, RESULTS, Aggregate, Experiment, aggregate
from pipeline.analysis.numbers import num
from pipeline.analysis.reproducibility import CROSS_CPU, cell_spread, load_cross_cpu
from pipeline.errors import PipelineError
from pipeline.params import Params

#: the final numbers of a cell compared, in the order shown (metrics.json keys, fractions)
TOPS = ("test_top1", "holdout_top1")
#: how many moved cells are listed by name (the rest are counted)
LISTED = 12


@dataclass(frozen=True)
class CellMove:
    """One cell in both runs: its final top-1 (points) in each, and the fraction of its scored images scored alike."""

    path: str
    committed: float
    mine: float
    alike: float | None  #: None when either run has no per-image scores

    @property
    def delta(self) -> float:
        return self.mine - self.committed

    @property
    def identical(self) -> bool:
        return self.delta == 0 and self.alike in (None, 1.0)


def _top1(metrics: dict) -> float | None:
    value = next((metrics[k] for k in TOPS if metrics.get(k) is not None), metrics.get("top1"))
    return None if value is None else 100 * float(value)


def _alike(a: Path, b: Path) -> float | None:
    if not (a.is_file() and b.is_file()):
        return None
    with np.load(a) as x, np.load(b) as y:
        if not np.array_equal(x["index"], y["index"]):
            return None
        return float(np.mean(x["correct"] == y["correct"]))


def cell_moves(committed: Path, mine: Path) -> tuple[list[CellMove], list[str]]:
    """Every committed cell with a final top-1 against the same cell under `mine`; and the committed cells `mine`
    lacks."""
    moves, missing = [], []
    for m in sorted(committed.rglob("metrics.json")):
        if "live" in m.parts:
            continue
        rel = m.parent.relative_to(committed)
        theirs = _top1(json.loads(m.read_text()))
        if theirs is None:
            continue
        other = mine / rel / "metrics.json"
        ours = _top1(json.loads(other.read_text())) if other.is_file() else None
        if ours is None:
            missing.append(str(RESULTS / rel))
            continue
        moves.append(CellMove(str(RESULTS / rel), theirs, ours,
                              _alike(m.parent / "test_correct.npz", other.parent / "test_correct.npz")))
    return moves, missing


def _interval(c: dict) -> str:
    if c.get("low") is None:
        return f"{num(c['mean'], True)} (no interval)"
    return f"{num(c['mean'], True)} [{num(c['low'], True)}, {num(c['high'], True)}]"


def _comparisons(agg: Aggregate) -> dict[str, dict]:
    """Every comparison of the run (the headline's, then each claim's), by a label that names it."""
    out = {f"headline, {c['dataset']}, {c['variant']}: {c['a']} − {c['b']}": c for c in agg.headline}
    for claim in agg.claims:
        for c in claim.get("comparisons", []):
            out.setdefault(f"claim {claim['id']}, {c['label']}: {c['a']} − {c['b']}", c)
    return out


def verdict_lines(theirs: Aggregate, mine: Aggregate) -> tuple[list[str], list[str]]:
    """(the comparisons whose estimate moved, with both; the verdicts that changed: the headline's, the claims')."""
    a, b = _comparisons(theirs), _comparisons(mine)
    moved, changed = [], []
    for label, c in a.items():
        d = b.get(label)
        if d is None:
            changed.append(f"{label}: {c['verdict']} committed, not computed in your run")
            continue
        if d["mean"] != c["mean"] or d.get("low") != c.get("low"):
            moved.append(f"{label}: {_interval(c)} {c['verdict']} → {_interval(d)} {d['verdict']}"
                         f" (mean {num(d['mean'] - c['mean'], True)} pts)")
        if label.startswith("headline") and d["verdict"] != c["verdict"]:
            changed.append(f"{label}: {c['verdict']} → {d['verdict']}")
    ours = {claim["id"]: claim for claim in mine.claims}
    for claim in theirs.claims:
        other = ours.get(claim["id"])
        if other is not None and other["verdict"] != claim["verdict"]:
            changed.append(f"claim {claim['id']} ({claim.get('short') or claim['claim']}): {claim['verdict']} →"
                           f" {other['verdict']}")
    return moved, changed


def report(moves: list[CellMove], missing: list[str], spread: float, moved: list[str], changed: list[str],
           where: str, mine: str = str(RESULTS)) -> list[str]:
    """The lines `cells compare` prints."""
    shifted = [m for m in moves if not m.identical]
    beyond = [m for m in shifted if spread and abs(m.delta) > spread + 1e-9]
    tolerance = (f"the cross-CPU spread measured for one cell, ±{num(spread)} pts (bench/cross_cpu.yaml)" if spread
                 else "no cross-CPU spread measured (bench/cross_cpu.yaml)")
    lines = [f"Your run ({mine}/) against the committed cells ({where}/), {len(moves)} cell(s) in both:",
             f"  cells: {len(moves) - len(shifted)} identical, {len(shifted)} moved"
             + (f", {len(beyond)} of them beyond {tolerance}" if spread else f"; {tolerance}")]
    if missing:
        lines.append(f"  {len(missing)} committed cell(s) not in your run, e.g. {', '.join(missing[:3])}")
    for m in sorted(shifted, key=lambda m: -abs(m.delta))[:LISTED]:
        alike = f"; {100 * m.alike:.1f} % of its images scored alike" if m.alike is not None else ""
        mark = " (beyond the measured spread)" if m in beyond else ""
        lines.append(f"    {m.path}: top-1 {num(m.committed)} → {num(m.mine)} % ({num(m.delta, True)} pts{alike})"
                     + mark)
    if len(shifted) > LISTED:
        lines.append(f"    … and {len(shifted) - LISTED} more")
    lines.append(f"  comparisons: {len(moved)} moved" + (":" if moved else ""))
    lines += [f"    {line}" for line in moved[:LISTED]]
    if len(moved) > LISTED:
        lines.append(f"    … and {len(moved) - LISTED} more")
    lines.append(f"  verdicts: {len(changed)} changed" + (":" if changed else " (the same answer)"))
    lines += [f"    {line}" for line in changed]
    lines.append(f"The committed cells stay the published run; yours are in {mine}/. Verdicts marked 'at the edge' in"
                 " the README and the report are those another CPU's spread could turn.")
    return lines


def compare(params: Params, committed: Path, mine: Path = RESULTS, paper: Path = PAPER,
            cross_cpu: Path = CROSS_CPU) -> tuple[list[str], bool]:
    """The report's lines and whether a verdict changed."""
    if not (committed / "results").is_dir():
        raise PipelineError(f"{committed}: no committed cells of profile {params.profile!r}; `python -m pipeline"
                            " profile <name>` picks a profile that has some (ls cells/)")
    if not mine.is_dir():
        raise PipelineError(f"{mine}: no run of your own to compare; run `make repro` first")
    exp = Experiment.from_params(params)
    theirs, ours = aggregate(committed / "results", paper, exp), aggregate(mine, paper, exp)
    moves, missing = cell_moves(committed / "results", mine)
    moved, changed = verdict_lines(theirs, ours)
    return report(moves, missing, cell_spread(load_cross_cpu(cross_cpu)), moved, changed, str(committed),
                  str(mine)), bool(changed)

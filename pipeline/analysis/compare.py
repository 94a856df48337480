"""`python -m pipeline compare`: per experiment, the method under study, its baselines and the paired differences.

    python -m pipeline compare              # the workspace, HEAD and the experiments made from it (dvc exp show)
    python -m pipeline compare -A           # every commit and its experiments
    python -m pipeline compare --rev main   # the experiments made from main

Reads what `dvc exp show` reads, through DVC's API (`dvc.api.exp_show`): each experiment's params `init` and
`baselines` and the `headline` block of results/summary.json, which the aggregate keys by role
(`pipeline.analysis.aggregate.role_metrics`), so experiments with different methods line up. DVC's own table
shows the same columns:

    dvc exp show --drop '.*' --keep 'Experiment|^init$|baselines|headline.*(arm|diff_pts|low_pts|high_pts|verdict)'
"""

from __future__ import annotations

import sys

from pipeline import entry
from pipeline.analysis.numbers import num
from pipeline.errors import PipelineError
from pipeline.params import Params

HEADLINE = "headline."


def _key(column: str) -> str:
    """A column of dvc.api.exp_show without its file prefix ('results/summary.json:headline.x' -> 'headline.x')."""
    return column.split(":", 1)[1] if ":" in column else column


def _cells(row: dict) -> dict[tuple[str, str], dict]:
    """{(dataset, variant): {role: {field: value}}} from one row's flattened headline columns."""
    cells: dict = {}
    for column, value in row.items():
        key = _key(column)
        if not key.startswith(HEADLINE):
            continue
        parts = key[len(HEADLINE):].split(".")
        if len(parts) == 4:
            dataset, variant, role, name = parts
            cells.setdefault((dataset, variant), {}).setdefault(role, {})[name] = value
    return cells


def _num(value, sign: bool = False) -> str:
    """`numbers.num` of a value read from DVC's table, which may be anything."""
    return num(value if isinstance(value, int | float) else None, sign)


def _versus(cell: dict, role: str) -> str:
    """'default: +13.65 [+11.04, +16.26] supported' for one baseline role of a cell."""
    arm, diff = cell.get(role, {}).get("arm"), cell.get(f"method_vs_{role}", {})
    if arm is None:
        return ""
    interval = (f" [{_num(diff.get('low_pts'), True)}, {_num(diff.get('high_pts'), True)}]"
                if isinstance(diff.get("low_pts"), int | float) else " (no interval)")
    return f"{arm}: {_num(diff.get('diff_pts'), True)}{interval} {diff.get('verdict', '')}".rstrip()


def _name(row: dict) -> str:
    """'workspace', the branch or commit, or 'exp-name (commit)'."""
    name, rev = row.get("Experiment") or "", str(row.get("rev") or "?")
    return f"{name} ({rev[:7]})" if name else rev


def comparison_rows(rows: list[dict]) -> list[list[str]]:
    """One line per experiment and (dataset, variant): experiment, method, cell, method top-1, each baseline's
    paired difference (points, 95% interval, verdict)."""
    out = []
    for row in rows:
        params = {_key(k): v for k, v in row.items() if _key(k) in ("init", "baselines")}
        cells = _cells(row)
        if not cells:
            out.append([_name(row), str(params.get("init", "?")), "no results/summary.json headline", "", "", ""])
        for (dataset, variant), cell in sorted(cells.items()):
            method = cell.get("method", {})
            n = method.get("n")
            top1 = (f"{_num(method.get('top1_mean_pct'))} ± {_num(method.get('top1_std_pct'))} (n={n:.0f})"
                    if method and isinstance(n, int | float) else "–")
            out.append([_name(row), str(method.get("arm", params.get("init", "?"))), f"{dataset}, {variant}", top1,
                        _versus(cell, "baseline1"), _versus(cell, "baseline2")])
    return out


def render(table: list[list[str]]) -> str:
    head = ["experiment", "method", "dataset, variant", "method top-1 %", "vs baseline 1 (pts, 95% CI)",
            "vs baseline 2"]
    widths = [max(len(r[i]) for r in [head, *table]) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [head, *table]]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def add_arguments(parser) -> None:
    parser.add_argument("--rev", default=None, help="the commit the experiments were made from (default: HEAD)")
    parser.add_argument("-A", "--all-commits", action="store_true", help="every commit and its experiments")


def main(params: Params, args) -> int:
    del params
    import dvc.api
    from dvc.exceptions import DvcException

    try:
        rows = dvc.api.exp_show(revs=args.rev, num=-1 if args.all_commits else 1)
    except DvcException as exc:
        raise PipelineError(f"compare: dvc exp show failed ({exc}); run it from the repository root") from None
    print(render(comparison_rows(rows)))
    print("\nPaired differences method − baseline of final top-1 on the whole test split (same seeds), in points,"
          " with 95% intervals over seeds and test images (results/summary.json `headline`, from `python -m pipeline"
          " aggregate`). A row without numbers has no committed or computed summary.json.")
    return 0


if __name__ == "__main__":
    sys.exit(entry.command(__spec__.name, add_arguments, main))

"""`python -m pipeline resolve` (dvc.yaml's first stage, `configs`): validate params.yaml (`pipeline.validation`, as
`check` does), then write each training cell's resolved configuration, configs/<stage>/<cell>.json, each runtime
module's code stamp, configs/code/<module>.json, and configs/runtime.json.

A cell depends on its own configuration and its runtime's stamp, never on params.yaml or this code: a change that
leaves both files byte for byte the same leaves the cell up to date. The stamp lists the sha256 of every file the
runtime module imports (`pipeline.closure`), so an edit of that code re-runs its cells, while dvc.lock holds each
closure once (in this stage's deps) instead of once per cell: DVC re-reads the whole lock in Python for every stage
it records, so a long list per cell makes a large grid's run quadratic. runtime.json (params `resources`,
`data.root`) is read by `pipeline.cell` and no cell's dep.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from pipeline import entry
from pipeline.closure import file_digests
from pipeline.experiments import stages
from pipeline.outputs import folder_aside

CONFIGS = Path("configs")
CODE = "code"  #: configs/code/<runtime module>.json: the code stamps


def resolved(params) -> dict[str, dict]:
    """configs/-relative path -> content, for every training cell params plans and every runtime module."""
    files = {"runtime.json": {"resources": dataclasses.asdict(params.resources), "data_root": params.data.root}}
    for runtime in sorted({stage.runtime for stage in stages()}):
        files[code_stamp(runtime)] = {"module": runtime, "files": file_digests(runtime)}
    for stage in stages():
        for cell in stage.cells(params):
            files[f"{stage.name}/{stage.cell_id(cell)}.json"] = stage.resolve(params, cell)
    return files


def code_stamp(runtime: str) -> str:
    """The configs/-relative path of runtime module `runtime`'s code stamp."""
    return f"{CODE}/{runtime}.json"


def is_stamp(name: str) -> bool:
    return name.startswith(f"{CODE}/")


def write(params, root: Path = CONFIGS) -> int:
    """Write configs/ all or nothing; returns the number of cells."""
    files = resolved(params)
    with folder_aside(root) as tmp:
        for name, content in files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(json.dumps(content, indent=1) + "\n")
    return sum(1 for name in files if name != "runtime.json" and not is_stamp(name))


def add_arguments(parser) -> None:
    parser.add_argument("--no-check", action="store_true", help="skip the model builds on the meta device")


def main(params, args) -> int:
    if not args.no_check:
        from pipeline.validation import validate

        validate(params)
    cells = write(params)
    print(f"params valid; wrote the resolved configuration of {cells} training cell(s) to {CONFIGS}/")
    return 0


if __name__ == "__main__":
    sys.exit(entry.command(__spec__.name, add_arguments, main))

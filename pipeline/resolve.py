"""`python -m pipeline resolve` (dvc.yaml's first stage, `configs`): validate params.yaml as `check` does, then
write each training cell's resolved configuration, configs/<stage>/<cell>.json, and configs/runtime.json.

A cell depends on its own file, never on params.yaml or this code: a change that leaves the file byte for byte
the same leaves the cell up to date. runtime.json (params `resources`, `data.root`) is read by `pipeline.cell`
and no cell's dep.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from pipeline import entry
from pipeline.experiments import stages
from pipeline.outputs import folder_aside

CONFIGS = Path("configs")


def resolved(params) -> dict[str, dict]:
    """configs/-relative path -> content, for every training cell params plans."""
    files = {"runtime.json": {"resources": dataclasses.asdict(params.resources), "data_root": params.data.root}}
    for stage in stages():
        for cell in stage.cells(params):
            files[f"{stage.name}/{stage.cell_id(cell)}.json"] = stage.resolve(params, cell)
    return files


def write(params, root: Path = CONFIGS) -> int:
    """Write configs/ all or nothing; returns the number of cells."""
    files = resolved(params)
    with folder_aside(root) as tmp:
        for name, content in files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(json.dumps(content, indent=1) + "\n")
    return len(files) - 1


def add_arguments(parser) -> None:
    parser.add_argument("--no-check", action="store_true", help="skip the model builds on the meta device")


def main(params, args) -> int:
    if not args.no_check:
        from pipeline.check import validate

        validate(params)
    cells = write(params)
    print(f"params valid; wrote the resolved configuration of {cells} training cell(s) to {CONFIGS}/")
    return 0


if __name__ == "__main__":
    sys.exit(entry.command(__spec__.name, add_arguments, main))

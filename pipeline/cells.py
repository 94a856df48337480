"""`python -m pipeline cells save`, `restore` or `rederive`: a run's cells in a compact form that is committed with the
repository, so that anyone can re-derive every published number without training.

A run's cells are the outs under results/ of the stages dvc.yaml plans for params.yaml, except those the light
stages re-derive (the aggregate's tables and summary, the plan's history). Of each out the committed form keeps
everything but the checkpoint (`*.pt`) and dvclive's logs (`live/`): per training cell metrics.json (final and
per-epoch numbers, provenance), config.json (its resolved configuration) and the per-image test correctness
(test_correct.npz, a few kB); the attention@ and floor@ outs whole. Checkpoints travel through a DVC remote
(docs/scale-out.md).

    python -m pipeline cells save        # after a run: cells/<profile>/ from results/ (commit it)
    python -m pipeline cells restore     # put cells/<profile>/ back where the stages write them
    python -m pipeline cells rederive    # restore, then the plan history, aggregate, figures, report and README
                                         #   blocks from them: no training, a few minutes on 2 cores (the figures'
                                         #   example images need the dataset: fetched first where it is missing)

`save` refuses a run with a planned cell missing (a partial run is not what a document quotes); `restore` refuses a
cell whose resolved configuration is not the one params.yaml now plans (`configs/`), naming it, so a committed cell
never stands in for another recipe.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.params import Params

CELLS = Path("cells")
RESULTS = Path("results")
#: outs the light stages re-derive: never committed as cells
DERIVED = (RESULTS / "tables", RESULTS / "summary.json", RESULTS / "plan_history.json")
#: what the compact form leaves out of an out: checkpoints and dvclive's per-step logs
DROPPED_SUFFIXES, DROPPED_DIRS = (".pt",), ("live",)
#: the light stages, in order, that turn cells into the report (as dvc.yaml runs them), then the README's blocks
REDERIVE = ("pipeline.analysis.plan_history", "pipeline.analysis.aggregate", "pipeline.analysis.figures",
            "pipeline.analysis.report")


def planned_outs(root: Path = Path(".")) -> list[Path]:
    """The results/ outs of every stage dvc.yaml defines for params.yaml, less the derived ones (module docstring)."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        outs = [Path(out.fs_path).relative_to(Path(repo.root_dir).resolve()) for stage in repo.index.stages
                for out in stage.outs]
    return sorted(o for o in outs if o.parts[0] == RESULTS.name and o not in DERIVED)


def kept(path: Path) -> bool:
    return path.suffix not in DROPPED_SUFFIXES and not set(path.parts) & set(DROPPED_DIRS)


def compact_files(out: Path) -> list[Path]:
    """The files of one out the compact form keeps, relative to the working directory."""
    if out.is_file():
        return [out]
    return sorted(p for p in out.rglob("*") if p.is_file() and kept(p.relative_to(out)))


def store(params: Params) -> Path:
    return CELLS / params.profile


def save(params: Params, root: Path = Path(".")) -> Path:
    """Copy the compact form of every planned cell into cells/<profile>/, replacing what was there; refuses (naming
    them) when a planned cell has not run."""
    outs = planned_outs(root)
    missing = [str(o) for o in outs if not (root / o).exists()]
    if missing:
        raise PipelineError(f"{len(missing)} planned cell(s) have not run, e.g. {', '.join(missing[:3])}; run `python"
                            " -m pipeline repro` first (cells save keeps whole runs only)")
    dest = root / store(params)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    for out in outs:
        for f in compact_files(root / out):
            target = tmp / f.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, target)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


def resolved_config(root: Path, out: Path) -> dict | None:
    """The configuration params.yaml resolves for the cell whose out is `out` (configs/, the configs stage's), or None
    for an out that is no training cell."""
    path = root / out / "config.json"
    if not path.is_file():
        return None
    results = json.loads(path.read_text()).get("results")
    for config in (root / "configs").rglob("*.json"):
        try:
            value = json.loads(config.read_text())
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and value.get("results") == results:
            return value
    return None


def restore(params: Params, root: Path = Path(".")) -> list[Path]:
    """Put cells/<profile>/ back under results/; refuses a cell whose recorded configuration differs from the one
    params.yaml now resolves (configs/, written by `python -m pipeline resolve`)."""
    source = root / store(params)
    if not source.is_dir():
        raise PipelineError(f"{source}: no committed cells for profile {params.profile!r}; `python -m pipeline cells"
                            " save` after its run writes them")
    outs = planned_outs(root)
    absent = [str(o) for o in outs if not (source / o).exists()]
    if absent:
        raise PipelineError(f"{source} lacks {len(absent)} planned cell(s), e.g. {', '.join(absent[:3])}: params.yaml"
                            f" plans another run than the one committed for {params.profile!r}")
    moved = []
    for out in outs:
        recorded = source / out / "config.json"
        if recorded.is_file():
            planned = resolved_config(root, out)
            if planned is not None and planned != json.loads(recorded.read_text()):
                raise PipelineError(f"{out}: the committed cell was made with another configuration than params.yaml"
                                    " plans now (configs/); restore the params of its run or re-run it")
        shutil.rmtree(root / out, ignore_errors=True)
        if (source / out).is_file():
            (root / out).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / out, root / out)
        else:
            shutil.copytree(source / out, root / out)
        moved.append(out)
    return moved


def run(*argv: str) -> None:
    done = subprocess.run([sys.executable, *argv], check=False)
    if done.returncode:
        raise PipelineError(f"`python {' '.join(argv)}` exited {done.returncode}; its output above says why")


def rederive(params: Params) -> None:
    """Restore the committed cells, then the light stages and the README's blocks from them (module docstring)."""
    run("-m", "pipeline", "resolve")
    for dataset in params.datasets:  # the figures draw example images (offline for the default's Fashion-MNIST)
        if not (Path(params.data.root) / dataset).is_dir():
            run("-m", "pipeline.stage", "pipeline.data.fetch.fingerprint")
            run("-m", "pipeline.stage", "pipeline.data.fetch", dataset)
    moved = restore(params)
    print(f"cells: restored {len(moved)} cell(s) of profile {params.profile!r} from {store(params)}", flush=True)
    for module in REDERIVE:
        run("-m", "pipeline.stage", module)
    run("-m", "pipeline", "readme")


def add_arguments(parser) -> None:
    parser.add_argument("action", choices=("save", "restore", "rederive"), help="see the module docstring")


def main(params: Params, args) -> int:
    if args.action == "save":
        print(f"cells: wrote {save(params)} (commit it)")
    elif args.action == "restore":
        print(f"cells: restored {len(restore(params))} cell(s) from {store(params)}")
    else:
        rederive(params)
    return 0

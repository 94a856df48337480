"""`python -m pipeline.cell <runtime module> <config.json>`: run one training cell from its resolved configuration.

    python -m pipeline.cell pipeline.training.train configs/train/fashion_mnist-vit-impulse-0.json

dvc.yaml's training stages run this. It only starts the run (torchrun, the CUDA preflight, the checkpoint's
attempt key) and reads configs/runtime.json, so it is no dep of a cell. The attempt key digests the
configuration, the runtime's import closure, the library versions and the run's other inputs. A cell of an init of
your own (params `inits`) starts only on the code its configuration records (`same_plugin`). While a cell trains,
its checkpoint folder holds `running.json` (`in_flight`), and the launcher removes the folders it leaves empty.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import socket
import sys
import time
from functools import cache
from pathlib import Path
from types import SimpleNamespace

from pipeline.closure import file_digests, local_closure
from pipeline.errors import PipelineError
from pipeline.schema import digest
from pipeline.training import launch

CONFIGS = Path("configs")
RUNTIME = CONFIGS / "runtime.json"


@cache
def code_digest(module: str) -> str:
    """A digest of the source files runtime module `module` loads (its code stamp's files) and the library versions."""
    from pipeline.training.run import versions

    return digest({"files": file_digests(module), "libraries": versions()})


def preflight(resources) -> None:
    """`resources.device: cuda` never trains on the CPU: stop, saying why CUDA cannot run; 'auto' says so when it falls
    back."""
    needed = int(os.environ.get("LOCAL_RANK", 0)) + 1
    if resources.device == "cuda":
        launch.require_cuda(needed)
    elif resources.device == "auto" and launch.driver_version() and int(os.environ.get("RANK", 0)) == 0:
        reason = launch.cuda_unusable(needed)
        if reason:
            print(f"resources.device = 'auto': training on the CPU, because CUDA cannot run here: {reason}", flush=True)


def provenance(config: dict) -> dict:
    return {"config_digest": digest(config), "slurm": launch.slurm_job()}


def same_plugin(config: dict) -> None:
    """Stop before a cell of your own init trains on code other than its configuration records: the plug-in's file
    edited since the `configs` stage ran (`dvc repro <cell>` with --single-item, or by hand) would otherwise leave a
    result under a configuration that did not make it."""
    plugin = config.get("plugin")
    if not plugin:
        return
    now = local_closure(plugin["function"].split(":")[0], Path.cwd())
    changed = sorted(f for f in {*now, *plugin["files"]} if now.get(f) != plugin["files"].get(f))
    if changed:
        raise PipelineError(f"inits.{config['arm']}: {', '.join(changed)} changed since the configs stage recorded"
                            f" {config['cell']}'s configuration; run `dvc repro` (or `python -m pipeline repro`),"
                            " which records it again and re-runs the cells of this arm")


#: in a cell's checkpoint folder while it trains: which process trains it, on which attempt
RUNNING = "running.json"


def tidy(folder: Path, stop: Path) -> None:
    """Remove `folder` and its parents below `stop` while they are empty. Cells finishing together share parents
    (scratch/train/<dataset>/<model>/...): another cell's tidy-up may remove a parent first, and so may create a
    file in one, so neither a vanished nor a filled folder is an error."""
    below = [folder, *folder.parents]
    for path in below[:below.index(stop)] if stop in below else []:
        try:
            path.rmdir()
        except FileNotFoundError:
            continue
        except OSError:
            return


@contextlib.contextmanager
def in_flight(checkpoint: Path, attempt: str):
    """Mark `checkpoint`'s folder as a cell in flight (on rank 0, which checkpoints) until the run ends, then tidy
    the folders it leaves empty. The runtime's own tidy-up (`run.remove_checkpoint`) walks up from the checkpoint
    removing empty folders and fails when a concurrent cell's walk removed a parent first (two cells of one model
    finishing together, `repro` running two at once): the mark keeps the folder non-empty, so that walk stops at
    it, and `tidy` does the walk here, where a concurrent removal is no error. The mark is outside the cells' code
    stamp: this re-runs no cell."""
    from pipeline.training.run import SCRATCH

    if int(os.environ.get("RANK", 0)) != 0:
        yield
        return
    mark = checkpoint.parent / RUNNING
    text = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "attempt": attempt,
                       "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}) + "\n"
    for tries in range(3, 0, -1):  # a finishing cell's `tidy` may remove a parent between mkdir and write
        try:
            mark.parent.mkdir(parents=True, exist_ok=True)
            mark.write_text(text)
            break
        except FileNotFoundError:
            if tries == 1:
                raise
    try:
        yield
    finally:
        mark.unlink(missing_ok=True)
        tidy(checkpoint.parent, SCRATCH.parent)


def start(module: str, config: dict, resources, root: str, relaunch: list[str]) -> int:
    """Run the cell of `config` with runtime module `module` here, or re-run `python <relaunch>` under torchrun."""
    same_plugin(config)
    if launch.needs_launch(resources):
        return launch.launch(resources, relaunch)
    preflight(resources)
    from pipeline.training.run import execute

    run = importlib.import_module(module).build_run(config)
    attempt = digest({"config": config, "code": code_digest(module), "inputs": run.inputs})
    with in_flight(run.checkpoint, attempt):
        execute(run, root, resources, attempt, provenance(config))
    return 0


def read_runtime() -> tuple[SimpleNamespace, str]:
    if not RUNTIME.is_file():
        raise PipelineError(f"{RUNTIME}: missing; run `dvc repro configs` (or `python -m pipeline.resolve`) first")
    runtime = json.loads(RUNTIME.read_text())
    return SimpleNamespace(**runtime["resources"]), runtime["data_root"]


def run_planned(params, stage: str, values: list[str], relaunch: list[str]) -> int:
    """`python -m pipeline <command> <axis values>`: the cell of declared stage `stage`, from params."""
    from pipeline.experiments import by_name

    declared = by_name(stage)
    config = declared.resolve(params, declared.find(params, values))
    resources = SimpleNamespace(**vars(params.resources))
    return start(declared.runtime, config, resources, params.data.root, relaunch)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m pipeline.cell <runtime module> <config.json>", file=sys.stderr)
        return 2
    module, path = argv
    try:
        if not Path(path).is_file():
            raise PipelineError(f"{path}: no such configuration; run `dvc repro configs` first")
        resources, root = read_runtime()
        return start(module, json.loads(Path(path).read_text()), resources, root, ["-m", "pipeline.cell", *argv])
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""`python -m pipeline.cell <runtime module> <config.json>`: run one training cell from its resolved configuration.

    python -m pipeline.cell pipeline.training.train configs/train/fashion_mnist-vit-impulse-0.json

dvc.yaml's training stages run this. It only starts the run (torchrun, the CUDA preflight, the checkpoint's
attempt key) and reads configs/runtime.json, so it is no dep of a cell. The attempt key digests the
configuration, the runtime's import closure, the library versions and the run's other inputs. A cell of an init of
your own (params `inits`) starts only on the code its configuration records (`same_plugin`).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
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


def start(module: str, config: dict, resources, root: str, relaunch: list[str]) -> int:
    """Run the cell of `config` with runtime module `module` here, or re-run `python <relaunch>` under torchrun."""
    same_plugin(config)
    if launch.needs_launch(resources):
        return launch.launch(resources, relaunch)
    preflight(resources)
    from pipeline.training.run import execute

    run = importlib.import_module(module).build_run(config)
    attempt = digest({"config": config, "code": code_digest(module), "inputs": run.inputs})
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

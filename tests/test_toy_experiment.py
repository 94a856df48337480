"""A new experiment is its module, one line of the registry and its params section: a toy (the filter study's
ConvMixer under a params section of its own, `toy_study`) added to a copy of the package is loaded and validated with
params, written into dvc.yaml (aggregate depending on its results), built by `check` (which catches a mistyped
optimizer in its recipe), listed with its cells, given to the plan's history as a seed list; one of its cells trains
on a tiny dataset, `aggregate` reads it and the report prints it (the "Were the runs trained?" table). Nothing else
of the package is edited (the copy's other files are compared with the repository's)."""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent

TOY = '''"""A toy experiment: the filter study's learned ConvMixer under a params section of its own."""

from __future__ import annotations

import dataclasses
from dataclasses import field

from pipeline.config import TrainConfig
from pipeline.experiments import CellStage, data_section
from pipeline.experiments.filter_study import RECORDS, FilterStudyConfig


def cell_config(params, cell: dict) -> dict:
    toy = params.toy_study
    return {"dataset": toy.dataset, "seed": int(cell["seed"]), "variant": cell["variant"], "heads": None,
            "model": dataclasses.asdict(toy.model), "train": dataclasses.asdict(params.toy_recipe),
            "data": data_section(params, toy.dataset)}


STAGES = [CellStage("toy_study", "pipeline.training.filter_study",
                    {"variant": "${toy_study.filters}", "seed": "${toy_study.seeds}"},
                    "results/toy_study/{variant}/seed{seed}", cell_config, ("data/${toy_study.dataset}",),
                    command="toy-study", help="one toy cell: <variant> <seed>", frame="toy", records=RECORDS)]
FIELDS = [("toy_study", FilterStudyConfig, field(default_factory=FilterStudyConfig)),
          ("toy_recipe", TrainConfig, field(init=False, repr=False))]
SEED_KEYS = ("toy_study.seeds",)
SWITCH_ON = ()


def validate(params) -> None:
    params.toy_recipe = params.recipe("toy_study.train", params.toy_study.train)


def check_builds(params, check) -> int:
    runtime, toy = check.module(STAGES[0].runtime), params.toy_study
    meta, model = check.meta(toy.dataset), dataclasses.asdict(toy.model)
    built = runtime.build_model(model, "learned", None, meta, seed=0)
    check.recipe("toy_study.train", params.toy_recipe, built, toy.dataset, *runtime.model_input(model, meta),
                 check.train_images(toy.dataset))
    return 1
'''
SECTION = """
toy_study:
  dataset: fashion_mnist
  filters: [learned]
  gaussian_sigmas: []
  gaussian_heads: [1]
  seeds: [5]
  model: {dim: 16, depth: 1, kernel_size: 3, patch_size: 4}
  train: {epochs: 1, batch_size: 16, warmup_epochs: 0}
"""
#: what the subprocess checks, with the copy's package first on sys.path (the working directory)
SCRIPT = '''
import json, sys
import yaml
from pipeline.analysis import plan_history
from pipeline.cell import run_planned
from pipeline.check import cell_counts
from pipeline.validation import validate
from pipeline.errors import PipelineError
from pipeline.params import load_params
from pipeline.stages import render

tiny = ["data.train_subset=0", "data.val_subset=0"]
params = load_params("params.yaml", tiny)
out = {"recipe_epochs": params.toy_recipe.epochs, "built": validate(params, devices=False),
       "counts": cell_counts(params), "dvc": "toy_study:" in render() and "pipeline.training.filter_study" in render(),
       "aggregate_deps": yaml.safe_load(render())["stages"]["aggregate"]["deps"],
       "seed_keys": list(plan_history.SEED_KEYS)}
for override in ("toy_study.train.opt=nosuchopt", "toy_study.seeds=[-1]", "toy_study.model.dim=0"):
    try:
        validate(load_params("params.yaml", [*tiny, override]), devices=False)
        out[override] = "passed"
    except PipelineError as exc:
        out[override] = str(exc)
out["cell"] = run_planned(params, "toy_study", ["learned", "5"], [])
from argparse import Namespace
from pipeline.analysis import aggregate
out["aggregate"] = aggregate.main(params, Namespace(results="results", paper=sys.argv[1]))
from pipeline.analysis import report
out["report"] = report.main(params, Namespace(tables="results/tables", figures="reports/figures", out="reports",
                                              paper=sys.argv[1], cross_cpu=sys.argv[2]))
print(json.dumps(out))
'''


def test_an_experiment_is_a_module_a_registry_line_and_a_params_section(workdir):
    package = workdir / "pipeline"
    shutil.copytree(ROOT / "pipeline", package, ignore=shutil.ignore_patterns("__pycache__"))
    (package / "experiments" / "toy_study.py").write_text(TOY)
    registry = package / "experiments" / "__init__.py"
    text = registry.read_text()
    line = next(s for s in text.splitlines() if s.startswith("MODULES = ("))
    registry.write_text(text.replace(line, line.replace(")", ', "toy_study")')))
    (workdir / "params.yaml").write_text((ROOT / "params.yaml").read_text() + SECTION)
    (workdir / "bench").mkdir()
    shutil.copy(ROOT / "bench" / "throughput.yaml", workdir / "bench")
    shutil.copytree(ROOT / "profiles", workdir / "profiles")  # the report names the plan's confirmatory profile

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT / "paper"), str(ROOT / "bench/cross_cpu.yaml")],
                         cwd=workdir, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])

    assert out["recipe_epochs"] == 1 and out["built"] == 2  # the grid's variant and the toy's ConvMixer
    assert out["counts"][-1] == "  toy_study: 1 = 1 variant x 1 seed"
    assert out["dvc"] and "toy_study.seeds" in out["seed_keys"]
    assert "results/toy_study" in out["aggregate_deps"]  # aggregate waits for its cells and re-runs on them
    assert out["toy_study.train.opt=nosuchopt"].startswith("toy_study.train: opt = 'nosuchopt'")
    assert out["toy_study.seeds=[-1]"] == "toy_study.seeds: -1 is not a non-negative integer seed"
    assert out["toy_study.model.dim=0"].startswith("toy_study.model.dim = 0: must be positive")  # its own key
    assert out["cell"] == 0
    metrics = json.loads((workdir / "results/toy_study/learned/seed5/metrics.json").read_text())
    assert (metrics["epochs"], metrics["seed"], metrics["dim"], metrics["test_size"]) == (1, 5, 16, 32)
    # aggregate reads its cell as the declarations say (frame "toy") and asks whether it trained, as of every run
    assert out["aggregate"] == 0
    training = pd.read_csv(workdir / "results/tables/training.csv")
    assert training[training["frame"] == "toy"][["group", "n"]].values.tolist() == [["fashion_mnist, learned", 1]]
    # and the report prints it, with no edit of the report's code either
    assert out["report"] == 0 and "| toy | fashion_mnist, learned | 1 |" in (workdir / "reports/report.md").read_text()

    # the module and one line: every other file of the package is the repository's
    changed = filecmp.dircmp(ROOT / "pipeline", package, ignore=["__pycache__"])

    def differing(d: filecmp.dircmp, prefix: str = "") -> list[str]:
        out = [prefix + f for f in d.diff_files] + [prefix + f for f in d.right_only]
        return out + [f for name, sub in d.subdirs.items() for f in differing(sub, f"{prefix}{name}/")]

    assert sorted(differing(changed)) == ["experiments/__init__.py", "experiments/toy_study.py"]

"""dvc.yaml, written from the declarations: `python -m pipeline dvc-yaml` (`--check`: exit 1 when the file is stale).

Training stages come from `pipeline.experiments`; the others are declared in `STATIC` and `ANALYSIS` below. Every
stage's code deps are the import closure of the module it runs (`pipeline.closure`); a training cell's reach it
through its runtime's code stamp, which the `configs` stage writes (`pipeline.resolve`). dvc.yaml stays a plain,
committed file; tests/test_stages.py keeps it equal to what this module writes.
"""

from __future__ import annotations

import re
import sys

import yaml

from pipeline import entry
from pipeline.closure import ROOT, closure
from pipeline.experiments import TRAINING, CellStage, analysis_deps, stages
from pipeline.resolve import CONFIGS, code_stamp

DVC_YAML = ROOT / "dvc.yaml"
ARMS = ["${init}", "${baselines[0]}", "${baselines[1]}"]
DATA_PARAMS = ["data.train_subset", "data.val_subset", "data.normalization"]

HEADER = """\
# Written by `python -m pipeline dvc-yaml` from the experiments' declarations (pipeline/experiments/,
# pipeline/stages.py): edit those, not this file (tests/test_stages.py fails when it is stale).
#
# params.yaml -> configs (every cell's resolved configuration) -> the training cells -> aggregate -> report.
# A training cell depends on its own configs/<stage>/<cell>.json, its data and configs/code/<runtime>.json (the
# sha256 of each file its runtime module imports), and on nothing else: a change that leaves its configuration and
# its code equal leaves it up to date. The configs stage depends on all that code and writes both.
"""

#: The stages that are not training cells: (name, their module, the rest of the stage with the module's "args"). Each
#: runs as `python -m pipeline.stage <module> <args>`, so its code deps are the closure of its module and of
#: `pipeline.stage`.
LAUNCHER = "pipeline.stage"
STATIC: list[tuple[str, str, dict]] = [
    # what each dataset is read from, checked on every run (a user's folder changes outside DVC's view):
    # data/sources/<dataset>.json, which fetch@<dataset> depends on, so an edited folder is fetched again
    ("sources", "pipeline.data.fetch.fingerprint", {
        "always_changed": True,
        "outs": [{"data/sources": {"cache": False}}]}),
    ("fetch", "pipeline.data.fetch", {
        "matrix": {"dataset": "${datasets}"}, "args": "${item.dataset}",
        "deps": ["data/sources/${item.dataset}.json"],
        "params": ["data.download", "data.fashion_mnist_mirror", "data.imagenet_path", "data.folder_path"],
        "outs": ["data/${item.dataset}"]}),
    ("fetch_ws", "pipeline.data.fetch", {
        "matrix": {"dataset": "${weight_selection.fetch}"}, "args": "${item.dataset}",
        "deps": ["data/sources/${item.dataset}.json"],
        "params": ["data.download", "data.fashion_mnist_mirror", "data.imagenet_path", "data.folder_path"],
        "outs": ["data/${item.dataset}"]}),
    # the commits the plan's history is read from (pipeline.analysis.plan_history): git is outside DVC's view
    ("plan_history", "pipeline.analysis.plan_history", {
        "always_changed": True,
        "outs": [{"results/plan_history.json": {"cache": False}}]}),
    # every cell's configuration; data/sources/inits carries the code of your own inits (params `inits`), which is
    # outside pipeline/ and so in no code deps (`pipeline.experiments.plugin_section`)
    ("configs", "pipeline.resolve", {
        "deps": ["data/sources/inits"], "params": [{"params.yaml": None}], "outs": ["configs"]}),
]
ANALYSIS: list[tuple[str, str, dict]] = [
    ("attention", "pipeline.analysis.attention", {
        "matrix": {"variant": "${models}", "arm": ARMS},
        # the arm's params section through data/sources/inits/<arm>.json: your own arm has no section of its name
        "args": "${item.variant} ${item.arm}", "deps": ["data/${datasets[0]}", "data/sources/inits/${item.arm}.json"],
        "params": ["models.${item.variant}", "datasets", "impulse.kernel_size", "impulse.offsets",
                   "report.attention_layers", "train", "data.val_subset", "data.normalization"],
        "outs": ["results/attention/${item.variant}/${item.arm}"]}),
    # a logistic regression on each seed's training images: the floor printed beside the grid's tables
    ("floor", "pipeline.analysis.floor", {
        "matrix": {"dataset": "${datasets}"}, "args": "${item.dataset}", "deps": ["data/${item.dataset}"],
        "params": ["seeds", "data.train_subset", "data.holdout"], "outs": ["results/floor/${item.dataset}"]}),
    # the results folders each of the next two reads are added from the experiments' declarations (`analysis_deps`)
    ("figures", "pipeline.analysis.figures", {
        "deps": ["data/${datasets[0]}", "results/attention", "paper/coverage.yaml", "results/tables"],
        "params": ["init", "baselines", "seeds", "datasets", "models", "filter_study", "report", "train",
                   "impulse.kernel_size", "impulse.offsets", "data.val_subset", "data.normalization", "ci_alpha"],
        "outs": ["reports/figures"]}),
    ("aggregate", "pipeline.analysis.aggregate", {
        "deps": ["paper", "bench/ci_fit.yaml", "bench/cross_cpu.yaml", "results/plan_history.json",
                 "results/attention", "results/floor"],
        "params": [{"params.yaml": None}], "outs": ["results/tables"],
        "metrics": [{"results/summary.json": {"cache": False}}]}),
    ("report", "pipeline.analysis.report", {
        "deps": ["paper/coverage.yaml", "paper/fidelity.yaml", "paper/plan.yaml", "bench/cross_cpu.yaml",
                 "results/tables", "reports/figures"],
        "params": ["report", "profile"],
        "outs": ["reports/report.md", "reports/report.pdf", "reports/appendix.md", "reports/headline.md",
                 "reports/claims.md"]}),
]
PLOTS = [
    {f"{metric}": {
        "template": "linear", "x": "step",
        "y": {f"results/train/${{datasets[0]}}/vit/{arm}/seed${{seeds[0]}}/live/plots/metrics/{metric}.tsv": metric
              for arm in ARMS},
        "title": f"{title} by epoch (first dataset and seed, variant `vit`; one line per arm)",
        "x_label": "epoch - 1 (dvclive step)", "y_label": label}}
    for metric, title, label in (("val_top1", "Test top-1", "test top-1"),
                                 ("train_loss", "Training loss", "training loss"))
]


def code_deps(*modules: str) -> list[str]:
    return sorted(f.relative_to(ROOT).as_posix() for f in closure(*modules))


def item(template: str, axes) -> str:
    return re.sub(r"(?<!\$)\{(\w+)\}", lambda m: f"${{item.{m[1]}}}" if m[1] in axes else m[0], template)


def cell_stage(stage: CellStage) -> dict:
    config = f"configs/{stage.name}/" + "-".join(f"${{item.{a}}}" for a in stage.axes) + ".json"
    return {"desc": f"{TRAINING}: {stage.help}", "matrix": dict(stage.axes),
            "cmd": f"python -m pipeline.cell {stage.runtime} {config}",
            "deps": [config, *(item(i, stage.axes) for i in stage.inputs), f"{CONFIGS}/{code_stamp(stage.runtime)}"],
            "outs": [item(stage.outs, stage.axes)]}


def static_stage(module: str, spec: dict) -> dict:
    out = dict(spec)
    out["cmd"] = " ".join(["python", "-m", LAUNCHER, module, *([out.pop("args")] if "args" in out else [])])
    # the configs stage digests every runtime module's code into its stamps: it depends on all of it
    runtimes = sorted({stage.runtime for stage in stages()}) if module == "pipeline.resolve" else []
    reads = {"pipeline.analysis.aggregate": "aggregate", "pipeline.analysis.figures": "figures"}.get(module)
    results = analysis_deps(reads) if reads else []
    out["deps"] = [*spec.get("deps", []), *results, *code_deps(module, LAUNCHER, *runtimes)]
    return {k: out[k] for k in ("matrix", "cmd", "always_changed", "deps", "params", "outs", "metrics") if k in out}


class Dumper(yaml.SafeDumper):
    """YAML without anchors: every matrix spells its lists out."""

    def ignore_aliases(self, data) -> bool:
        return True


def render() -> str:
    stages_ = {name: static_stage(module, spec) for name, module, spec in STATIC}
    stages_ |= {stage.name: cell_stage(stage) for stage in stages()}
    stages_ |= {name: static_stage(module, spec) for name, module, spec in ANALYSIS}
    body = yaml.dump({"stages": stages_, "plots": PLOTS}, Dumper=Dumper, sort_keys=False, width=120,
                     default_flow_style=False)
    return HEADER + body


def add_arguments(parser) -> None:
    parser.add_argument("--check", action="store_true", help="exit 1 if dvc.yaml differs from what would be written")


def main(params, args) -> int:
    text = render()
    if args.check:
        stale = not DVC_YAML.is_file() or DVC_YAML.read_text() != text
        print(f"{DVC_YAML.name} is {'stale: run `python -m pipeline dvc-yaml`' if stale else 'up to date'}")
        return int(stale)
    DVC_YAML.write_text(text)
    print(f"wrote {DVC_YAML.name}")
    return 0


if __name__ == "__main__":
    sys.exit(entry.command(__spec__.name, add_arguments, main))

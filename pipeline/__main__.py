"""Command line: one thin command per DVC stage, each over a library function, plus the tools around them.

    python -m pipeline --help
    python -m pipeline check                     # validate params.yaml, print the planned runs
    python -m pipeline profile paper-small       # apply profiles/paper-small.yaml onto params.yaml
    python -m pipeline repro                     # the stale stages of dvc.yaml, in parallel
    python -m pipeline readme                    # the report's headline, coverage and fidelity into README.md
    python -m pipeline compare                   # per experiment: method, baselines, paired differences

Every command (and the bare `python -m pipeline`) reads params.yaml (or --params PATH) with optional
`--set key.sub=value` overrides and validates it before doing any work (`pipeline.entry`). dvc.yaml runs the
stage modules directly (`python -m pipeline.training.train ...`): the same code, without this file.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from pipeline import entry

#: command -> (module, help). Each module has `add_arguments(parser)` and `main(params, args)`.
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("pipeline.check", "validate params.yaml and print the runs it plans"),
    "sources": ("pipeline.data.fetch.fingerprint",
                "stage sources: what each dataset is read from (data/sources/, checked on every run)"),
    "fetch": ("pipeline.data.fetch", "stage fetch@<dataset>: download, verify and store one dataset"),
    "profile": ("pipeline.profiles", "apply a recipe from profiles/ onto params.yaml"),
    "filter-study": ("pipeline.training.filter_study", "stage filter_study@/filter_gaussian@: one ConvMixer run"),
    "train": ("pipeline.training.train", "stage train@<dataset>-<variant>-<arm>-<seed>: one cell of the model grid"),
    "train-config": ("pipeline.training.train_config",
                     "stage train_config@<dataset>-<variant>-<config>-<arm>-<seed>: one training-configuration cell"),
    "pretrain": ("pipeline.training.pretrain", "stage pretrain@<teacher>: pretrain one weight-selection teacher"),
    "select-finetune": ("pipeline.training.select_finetune",
                        "stage select_finetune@<dataset>-<teacher>-<seed>: weight-select a teacher, fine-tune"),
    "ws-scratch": ("pipeline.training.ws_scratch",
                   "stage ws_scratch@<dataset>-<arm>-<seed>: the weight-selection student from scratch"),
    "ci-alpha": ("pipeline.training.ci_alpha",
                 "stage ci_alpha@<dataset>-<alpha>-<arm>-<seed>: one cell of [CI]'s alpha grid"),
    "ci-model3": ("pipeline.training.ci_model3",
                  "stage ci_model3@<dataset>-<arm>-<qk>-<value>-<seed>: one cell of [CI]'s Model III grid"),
    "ci-table1": ("pipeline.training.ci_table1",
                  "stage ci_table1@<dataset>-<form>-<value>-<seed>: one cell of [CI] Table 1's other columns"),
    "sia": ("pipeline.training.sia",
            "stages sia_base@<dataset>-<arch>-<seed> / sia_fit@<dataset>-<fit>-<seed>: one cell of [SIA]'s ablations"),
    "attention": ("pipeline.analysis.attention", "stage attention@<variant>-<arm>: attention maps at init"),
    "figures": ("pipeline.analysis.figures", "stage figures: every figure of the report"),
    "aggregate": ("pipeline.analysis.aggregate", "stage aggregate: tables, claims and DVC metrics from results/"),
    "report": ("pipeline.analysis.report", "stage report: reports/report.md, report.pdf and headline.md"),
    "compare": ("pipeline.analysis.compare",
                "per experiment (dvc exp show): the method, its baselines and the paired differences"),
    "readme": ("pipeline.analysis.readme", "README.md's generated blocks (--check: exit 1 if stale)"),
    "repro": ("pipeline.scale.repro", "run the stale stages of dvc.yaml in parallel: local processes or SLURM jobs"),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m pipeline", description=__doc__.split("\n")[0])
    entry.add_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    argv = sys.argv[1:] if argv is None else argv
    for name, (module, help_text) in COMMANDS.items():
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        if name in argv:  # import only the chosen command's module (the others may pull in torch)
            importlib.import_module(module).add_arguments(cmd)
    args = parser.parse_args(argv)
    args.print_help = parser.print_help
    args.relaunch = ["-m", "pipeline", *argv]  # this command line, for re-running it under torchrun
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command is None:  # validate the params; then say what can be done with them
        return entry.run(lambda params, args: args.print_help(), args)
    return entry.run(importlib.import_module(COMMANDS[args.command][0]).main, args)


if __name__ == "__main__":
    sys.exit(main())

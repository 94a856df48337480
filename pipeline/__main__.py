"""Command line: one thin command per DVC stage, each over a library function, plus the tools around them.

    python -m pipeline --help
    python -m pipeline check                     # validate params.yaml, print the planned runs
    python -m pipeline profile paper-small       # apply profiles/paper-small.yaml onto params.yaml
    python -m pipeline repro                     # the stale stages of dvc.yaml, in parallel
    python -m pipeline readme                    # the report's headline, coverage and fidelity into README.md
    python -m pipeline train fashion_mnist vit impulse 0     # one training cell, by its axis values
    python -m pipeline compare                   # per experiment: method, baselines, paired differences

Every command (and the bare `python -m pipeline`) reads params.yaml (or --params PATH) with optional
`--set key.sub=value` overrides and validates it before doing any work (`pipeline.entry`). The training commands
are the declared stages of `pipeline.experiments`; dvc.yaml runs their cells as `python -m pipeline.cell <runtime>
<configs/...json>`, the same code without this file.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from pipeline import entry

#: command -> (module, help). Each module has `add_arguments(parser)` and `main(params, args)`.
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("pipeline.check", "validate params.yaml and print the runs it plans"),
    "resolve": ("pipeline.resolve", "stage configs: validate params.yaml, write every cell's resolved configuration"),
    "dvc-yaml": ("pipeline.stages", "write dvc.yaml from the experiments' declarations (--check: exit 1 if stale)"),
    "sources": ("pipeline.data.fetch.fingerprint",
                "stage sources: what each dataset is read from (data/sources/, checked on every run)"),
    "plan-history": ("pipeline.analysis.plan_history",
                     "stage plan_history: the commits the plan's history is read from (checked on every run)"),
    "fetch": ("pipeline.data.fetch", "stage fetch@<dataset>: download, verify and store one dataset"),
    "profile": ("pipeline.profiles", "apply a recipe from profiles/ onto params.yaml"),
    "attention": ("pipeline.analysis.attention", "stage attention@<variant>-<arm>: attention maps at init"),
    "floor": ("pipeline.analysis.floor", "stage floor@<dataset>: a logistic regression on each seed's training images"),
    "figures": ("pipeline.analysis.figures", "stage figures: every figure of the report"),
    "aggregate": ("pipeline.analysis.aggregate", "stage aggregate: tables, claims and DVC metrics from results/"),
    "report": ("pipeline.analysis.report", "stage report: reports/report.md, report.pdf, appendix.md and headline.md"),
    "compare": ("pipeline.analysis.compare",
                "per experiment (dvc exp show): the method, its baselines and the paired differences"),
    "readme": ("pipeline.analysis.readme", "README.md's generated blocks (--check: exit 1 if stale)"),
    "cells": ("pipeline.cells", "a run's cells in their committed form: save, restore, or rederive every README"
                                " block from them without training"),
    "repro": ("pipeline.scale.repro", "run the stale stages of dvc.yaml in parallel: local processes or SLURM jobs"),
}


def cell_commands() -> dict:
    """command -> declared stage of training cells (`pipeline.experiments`): `python -m pipeline <command> <axis
    values>` trains one cell."""
    from pipeline.experiments import stages

    return {stage.command: stage for stage in stages() if stage.command}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m pipeline", description=__doc__.split("\n")[0])
    entry.add_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    argv = sys.argv[1:] if argv is None else argv
    for name, (module, help_text) in COMMANDS.items():
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        if name in argv:  # import only the chosen command's module (the others may pull in torch)
            importlib.import_module(module).add_arguments(cmd)
    for name, stage in cell_commands().items():
        cmd = sub.add_parser(name, help=f"stage {stage.name}@: {stage.help}", description=stage.help)
        for axis in stage.axes:
            cmd.add_argument(axis)
    args = parser.parse_args(argv)
    args.print_help = parser.print_help
    args.relaunch = ["-m", "pipeline", *argv]  # this command line, for re-running it under torchrun
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # a mistyped value stops here, before the command's module is imported (check's imports torch and timm: seconds)
    if not {"-h", "--help"} & set(argv):
        options = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
        entry.add_options(options)
        if rc := entry.run(lambda params, args: 0, options.parse_known_args(argv)[0]):
            return rc
    args = parse_args(argv)
    if args.command is None:  # validate the params; then say what can be done with them
        return entry.run(lambda params, args: args.print_help(), args)
    if args.command in COMMANDS:
        return entry.run(importlib.import_module(COMMANDS[args.command][0]).main, args)
    stage = cell_commands()[args.command]

    def train_cell(params, args):
        from pipeline.cell import run_planned

        return run_planned(params, stage.name, [getattr(args, axis) for axis in stage.axes], args.relaunch)

    return entry.run(train_cell, args)


if __name__ == "__main__":
    sys.exit(main())

"""A module as a command: `python -m <module> [--params FILE] [--set KEY=VALUE]... ARGS`.

Every tool module (and every command of `python -m pipeline`) has `add_arguments(parser)` and `main(params, args)`:
it reads params.yaml (or --params) with the overrides, validates it before any work, and turns a user's mistake
(`PipelineError`) into one line on stderr and exit code 2. Training cells do not come here: dvc.yaml runs them as
`python -m pipeline.cell <runtime> <config>` on their resolved configuration.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Callable

from pipeline.errors import PipelineError


def add_options(parser: argparse.ArgumentParser) -> None:
    """The options every command shares: the parameters file and overrides."""
    parser.add_argument("--params", default="params.yaml", help="parameters file (default: params.yaml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a parameter, e.g. --set train.epochs=2 (repeatable)")


#: set by `dvc exp run` in its stages' environment (dvc.env.DVC_EXP_NAME)
DVC_EXPERIMENT = "DVC_EXP_NAME"


def restore_hint(path: str) -> str:
    """What to say after a bad value under `dvc exp run -S`: DVC wrote it into params.yaml and, rewriting git's index,
    leaves `git status` calling the file clean, so `git checkout` alone restores nothing (DVC 3.67)."""
    if not os.environ.get(DVC_EXPERIMENT):
        return ""
    return (f"\n  `dvc exp run -S` wrote this value into {path}, which keeps it; git may call the file unchanged (DVC"
            f" rewrote its index): `touch {path} && git checkout {path}` restores it (docs/pipeline.md)")


def run(main: Callable, args: argparse.Namespace) -> int:
    """Load and validate the params, then `main(params, args)`; a PipelineError becomes one line and exit 2."""
    from pipeline.params import load_params

    try:
        params = load_params(args.params, args.overrides)
    except PipelineError as exc:
        print(f"error: {exc}{restore_hint(args.params)}", file=sys.stderr)
        return 2
    try:
        return main(params, args) or 0
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a full disk outside pipeline.outputs' writers (which say more): one line, too
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        print(f"error: no space left on the disk holding {exc.filename or 'what this command writes'}; free space"
              " there and run it again", file=sys.stderr)
        return 2


def command(module: str, add_arguments: Callable, main: Callable, argv: list[str] | None = None) -> int:
    """Parse `argv` for the stage module `module` and run it (the `if __name__ == "__main__"` of a stage).

    `args.relaunch` is how to start this same command again (`-m <module> <argv>`), for torchrun.
    """
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog=f"python -m {module}")
    add_options(parser)
    add_arguments(parser)
    args = parser.parse_args(argv)
    args.relaunch = ["-m", module, *argv]
    return run(main, args)

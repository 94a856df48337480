"""`python -m pipeline.stage <module> [args]`: how dvc.yaml runs a stage that trains nothing (fetch, configs,
attention, figures, aggregate, report), e.g. `python -m pipeline.stage pipeline.analysis.figures`, and how the runner
starts each stage's DVC (`python -m pipeline.stage dvc repro --single-item <stage>`).

It runs `python -m <module> [args]` in this process, as `python -m` would: one launcher for every stage, so that a
stage's code deps are its module's closure and this file's.
"""

from __future__ import annotations

import runpy
import sys


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m pipeline.stage <module> [args]", file=sys.stderr)
        return 2
    module, *args = argv
    sys.argv = [module, *args]  # run_module puts the module's file first
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""`python -m pipeline check`: validate params.yaml and print what `dvc repro` would train.

Loading the params already validated them (`pipeline.config`); this prints the grid so a user sees the size
of a recipe before starting it.
"""

from __future__ import annotations

from pipeline.config import Params


def train_runs(params: Params) -> list[str]:
    """Run ids `<dataset>-<arm>-<seed>` of every ViT training cell, as the train@ stages name them."""
    return [f"{d}-{a}-{s}" for d in params.datasets for a in params.arms for s in params.seeds]


def add_arguments(parser) -> None:
    del parser  # no options beyond the global ones


def main(params: Params, args) -> int:
    runs = train_runs(params)
    print(f"params valid (profile {params.profile!r})")
    print(f"method under study: {params.init}; baselines: {', '.join(params.baselines)}")
    print(f"ViT training runs: {len(runs)} = {len(params.datasets)} dataset(s) x {len(params.arms)} arm(s)"
          f" x {len(params.seeds)} seed(s), {params.train.epochs} epochs each")
    return 0

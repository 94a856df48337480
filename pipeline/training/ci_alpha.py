"""`python -m pipeline.training.ci_alpha <dataset> <alpha> <arm> <seed>`: one cell of [CI]'s alpha grid, the stage
`ci_alpha@<dataset>-<alpha>-<arm>-<seed>` (also `python -m pipeline ci-alpha ...`).

[CI] 2401.12511 Tables 3, 4, 5, 7, 8 (paper.md section 2.6) train a ViT whose attention input is
Z = alpha X + (1 - alpha) P for alpha in 0, 0.1, ..., 0.5, with impulse, mimetic and random initial attention.
This stage builds params `ci_alpha.model` with that attention (`pipeline.method.mixed_attention`), applies the arm's
init, trains it with the grid's recipe (`train` updated by `ci_alpha.train`) through the shared run skeleton
(`pipeline.training.run`) and writes `results/ci_alpha/<dataset>/alpha<alpha>/<arm>/seed<k>/` (metrics.json records
`alpha`).
"""

from __future__ import annotations

import dataclasses
import sys

from pipeline import entry
from pipeline.config import Params
from pipeline.errors import PipelineError
from pipeline.method.mixed_attention import mix_attention_input
from pipeline.training import builders
from pipeline.training.run import Run, data_identity, start
from pipeline.vocabulary import INIT_METHODS


def parse_alpha(text: str) -> float:
    """alpha as the stage's command line spells it (its results folder keeps that spelling: alpha0.0, alpha0.1)."""
    try:
        alpha = float(text)
    except ValueError:
        raise PipelineError(f"alpha {text!r}: not a number; give one in [0, 1]") from None
    if not 0 <= alpha <= 1:
        raise PipelineError(f"alpha = {text}: must lie in [0, 1] (0: positions only, 1: the stock ViT)")
    return alpha


def ci_run(params: Params, dataset: str, alpha_text: str, arm: str, seed: int) -> Run:
    """The grid cell (dataset, alpha, arm, seed) as a `Run`; `alpha_text` names its results folder."""
    model_cfg, options, alpha = params.ci_alpha.model, params.method_options(arm), parse_alpha(alpha_text)
    config = {"grid": "ci_alpha", "dataset": dataset, "alpha": alpha, "arm": arm, "seed": seed,
              "model": dataclasses.asdict(model_cfg), "init": options, "train": dataclasses.asdict(params.ci_recipe),
              "data": data_identity(params.data)}
    return Run(module=__spec__.name, kind="ci_alpha", key=(dataset, f"alpha{alpha_text}", arm, f"seed{seed}"),
               dataset=dataset, seed=seed,
               recipe=params.ci_recipe, config=config,
               build=lambda meta: builders.initialized(model_cfg, arm, options, meta, seed,
                                                       adapt=lambda m: mix_attention_input(m, alpha)),
               input_size=lambda meta: builders.input_size(model_cfg, meta),
               facts=lambda model: builders.model_facts("ci", model_cfg, model) | {"arm": arm, "alpha": alpha})


def add_arguments(parser) -> None:
    parser.add_argument("dataset", help="a dataset of params `ci_alpha.datasets`")
    parser.add_argument("alpha", help="the weight of content in the attention input, in [0, 1]")
    parser.add_argument("arm", choices=INIT_METHODS, help="the init method")
    parser.add_argument("seed", type=int)


def main(params: Params, args) -> int:
    cell = ci_run(params, args.dataset, args.alpha, args.arm, args.seed)
    return start(cell, params.data, params.resources, args.relaunch)


if __name__ == "__main__":
    sys.exit(entry.command(__spec__.name, add_arguments, main))

"""`python -m pipeline.training.train <dataset> <variant> <arm> <seed>`: one cell of the model grid, the stage
`train@<dataset>-<variant>-<arm>-<seed>` (also `python -m pipeline train ...`). The trainer is `engine.py`.

Builds model variant `variant` of params `models` (a timm ViT/DeiT, Swin or MLP-Mixer, built with
`weight_init='skip'`, i.e. PyTorch's default init, as the official code does), applies the arm's
initialization (`pipeline.method.inits.apply_init`, seeded), trains it and writes
`results/train/<dataset>/<variant>/<arm>/seed<k>/` through the shared run skeleton (`pipeline.training.run`):

    metrics.json   final and best top-1/top-5, losses, epochs, wall time, images/s, parameter count, the
                   variant, timm model, family and heads, config digest, git revision, library versions
    config.json    the resolved configuration of this run
    model.pt       the final weights (the figures draw the attention maps after training from them)
    live/          dvclive's per-epoch logs
"""

from __future__ import annotations

import dataclasses
import sys

from pipeline import entry
from pipeline.config import Params
from pipeline.errors import PipelineError
from pipeline.method.names import INIT_METHODS
from pipeline.training import builders
from pipeline.training.run import Run, data_identity, start


def train_run(params: Params, dataset: str, variant: str, arm: str, seed: int, train_config: str | None = None,
              module: str = __spec__.name) -> Run:
    """The grid cell (dataset, variant, arm, seed) as a `Run`; with `train_config`, the cell of that named training
    configuration (params `train_configs`: `train` with its overrides; stage module `module`)."""
    model_cfg = params.models[variant]
    recipe = params.train if train_config is None else params.config_recipes[train_config]
    named = {} if train_config is None else {"train_config": train_config}
    config = {"dataset": dataset, "variant": variant, **named, "arm": arm, "seed": seed,
              "model": dataclasses.asdict(model_cfg), "init": params.method_options(arm, variant),
              "train": dataclasses.asdict(recipe),
              "data": data_identity(params.data)}
    kind, key = ("train", (dataset, variant, arm, f"seed{seed}")) if train_config is None else (
        "train_config", (dataset, variant, train_config, arm, f"seed{seed}"))
    return Run(module=module, kind=kind, key=key, dataset=dataset, seed=seed, recipe=recipe, config=config,
               build=lambda meta: builders.vit(params, variant, arm, meta, seed),
               input_size=lambda meta: builders.input_size(model_cfg, meta),
               facts=lambda model: builders.model_facts(variant, model_cfg, model) | {"arm": arm} | named)


def add_arguments(parser) -> None:
    parser.add_argument("dataset", help="a dataset of params `datasets`")
    parser.add_argument("variant", help="a model variant: a key of params `models`")
    parser.add_argument("arm", choices=INIT_METHODS, help="the init method")
    parser.add_argument("seed", type=int)


def main(params: Params, args) -> int:
    if args.variant not in params.models:
        raise PipelineError(f"variant {args.variant!r}: not a key of params `models` ({', '.join(params.models)})")
    cell = train_run(params, args.dataset, args.variant, args.arm, args.seed)
    return start(cell, params.data, params.resources, args.relaunch)


if __name__ == "__main__":
    sys.exit(entry.command(__spec__.name, add_arguments, main))

"""`python -m pipeline.training.ws_scratch <dataset> <arm> <seed>`: the weight-selection block's student trained from
scratch, the stage `ws_scratch@<dataset>-<arm>-<seed>` (also `python -m pipeline ws-scratch ...`).

Context for [NeurIPS] Table 4 (paper.md section 2.5; Weight Selection's README reports ViT-T on CIFAR-100 at 72.4
from random init against 81.4 selected from ImageNet-21K ViT-S): grid variant `weight_selection.student`, initialized
by `arm` as a train@ cell is (`pipeline.training.train`), trained with the fine-tune cells' recipe (`train` updated
by `weight_selection.finetune`) on the same data and seeds, written to
`results/weight_selection/<dataset>/scratch/<arm>/seed<k>/`.
"""

from __future__ import annotations

import dataclasses
import sys

from pipeline import entry
from pipeline.config import Params
from pipeline.method.names import INIT_METHODS
from pipeline.training import builders
from pipeline.training.run import Run, data_identity, start


def scratch_run(params: Params, dataset: str, arm: str, seed: int) -> Run:
    """The cell (dataset, arm, seed) as a `Run`."""
    variant = params.weight_selection.student
    model_cfg, recipe = params.models[variant], params.ws_finetune_recipe
    config = {"dataset": dataset, "variant": variant, "arm": arm, "seed": seed,
              "model": dataclasses.asdict(model_cfg), "init": params.method_options(arm, variant),
              "train": dataclasses.asdict(recipe), "data": data_identity(params.data)}
    return Run(module=__spec__.name, kind="weight_selection", key=(dataset, "scratch", arm, f"seed{seed}"),
               dataset=dataset, seed=seed, recipe=recipe, config=config,
               build=lambda meta: builders.vit(params, variant, arm, meta, seed),
               input_size=lambda meta: builders.input_size(model_cfg, meta),
               facts=lambda model: builders.model_facts(variant, model_cfg, model) | {"arm": arm})


def add_arguments(parser) -> None:
    parser.add_argument("dataset", help="a fine-tune dataset of params `weight_selection.datasets`")
    parser.add_argument("arm", choices=INIT_METHODS, help="the student's init")
    parser.add_argument("seed", type=int)


def main(params: Params, args) -> int:
    return start(scratch_run(params, args.dataset, args.arm, args.seed), params.data, params.resources,
                 args.relaunch)


if __name__ == "__main__":
    sys.exit(entry.command(__spec__.name, add_arguments, main))

"""The model grid ([NeurIPS] Tables 1-3, Figs. 2-5), runtime `pipeline.training.train`: dataset x model variant x
arm x seed (`train@`), and the same under named training configurations (params `train_configs`; [NeurIPS]
Fig. 5 / App. F; `train_config@`). The arms are `init` and the two `baselines`, built-in arms or your own (params
`inits`), whose cells also record their code (`plugin_section`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.experiments import (
    MODEL_RECORDS,
    CellStage,
    data_section,
    init_section,
    model_section,
    plugin_section,
    train_section,
)

ARMS = ["${init}", "${baselines[0]}", "${baselines[1]}"]


def cell_config(params, cell: dict, recipe, labels: dict) -> dict:
    variant, arm = cell["variant"], cell["arm"]
    return {"dataset": cell["dataset"], "seed": int(cell["seed"]), "variant": variant, "arm": arm,
            "model": model_section(params.models[variant]), "init": init_section(params, arm, variant),
            **plugin_section(params, arm), "train": train_section(recipe, cell["dataset"]),
            "data": data_section(params, cell["dataset"]), "labels": {"arm": arm} | labels}


def train_config(params, cell: dict) -> dict:
    return cell_config(params, cell, params.train, {})


def configured(params, cell: dict) -> dict:
    name = cell["config"]
    return cell_config(params, cell, params.config_recipes[name], {"train_config": name})


STAGES = [
    CellStage("train", "pipeline.training.train",
              {"dataset": "${datasets}", "variant": "${models}", "arm": ARMS, "seed": "${seeds}"},
              "results/train/{dataset}/{variant}/{arm}/seed{seed}", train_config, command="train",
              help="one cell of the model grid: train <dataset> <variant> <arm> <seed>", frame="vit",
              records=MODEL_RECORDS),
    CellStage("train_config", "pipeline.training.train",
              {"dataset": "${train_config_cells.datasets}", "variant": "${train_config_cells.variants}",
               "config": "${train_configs}", "arm": ARMS,
               "seed": "${seeds}"},
              "results/train_config/{dataset}/{variant}/{config}/{arm}/seed{seed}", configured,
              command="train-config",
              help="one training-configuration cell: <dataset> <variant> <config> <arm> <seed>", frame="configs",
              records=MODEL_RECORDS),
]


# --- the part of the grid the named training configurations run on: params `train_config_cells` -------------------


@dataclass
class TrainConfigCells:
    """Which grid cells the named training configurations run on (stages train_config@...): a part of the grid, so
    a profile with many variants need not run every configuration on each."""

    datasets: list = field(default_factory=lambda: ["fashion_mnist"])  #: each one of `datasets`
    variants: list = field(default_factory=lambda: ["vit"])  #: each a key of `models`

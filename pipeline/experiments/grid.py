"""The model grid ([NeurIPS] Tables 1-3, Figs. 2-5), runtime `pipeline.training.train`: dataset x model variant x
arm x seed (`train@`), and the same under named training configurations (params `train_configs`; [NeurIPS]
Fig. 5 / App. F; `train_config@`). The arms are `init` and the two `baselines`, built-in arms or your own (params
`inits`), whose cells also record their code (`plugin_section`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.config import VARIANT_NAME
from pipeline.errors import PipelineError
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
              records=MODEL_RECORDS, figures=True),
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


# --- how `Params` holds it (`pipeline.experiments.MODULES`): the grid's seeds are the core's `seeds` ----------------

FIELDS = [
    #: named training configurations: `train` overrides per name (stages train_config@...); {} switches them off
    ("train_configs", dict, field(default_factory=dict)),
    #: the grid cells the configurations run on: datasets and variants (subsets of `datasets` and `models`)
    ("train_config_cells", TrainConfigCells, field(default_factory=TrainConfigCells)),
    #: each training configuration's recipe: `train` updated by `train_configs.<name>` (not a YAML key)
    ("config_recipes", dict, field(init=False, repr=False)),
]
SEED_KEYS = ("seeds",)
#: overrides of the default params.yaml that switch every stage of it on (the tests' all-stages setting)
SWITCH_ON = ("train_configs={lr_half: {lr: 0.0005}}",)


@dataclass(frozen=True)
class AnalysisPart:
    """What the analysis reads of the training-configuration block (`exp.grid`); the grid itself is the
    `Experiment`'s own (datasets, arms, seeds, variants)."""

    configs: tuple = ()  #: the named training configurations (params `train_configs`)
    datasets: tuple = ()  #: the grid cells they run on (params `train_config_cells`)
    variants: tuple = ()


def analysis_part(params) -> AnalysisPart:
    cells = params.train_config_cells
    return AnalysisPart(tuple(params.train_configs), tuple(cells.datasets), tuple(cells.variants))


def validate(params) -> None:
    """The training configurations' names and recipes, and the grid cells they run on."""
    params.config_recipes = {}
    for name, overrides in params.train_configs.items():
        if not isinstance(name, str) or not VARIANT_NAME.match(name):
            raise PipelineError(f"train_configs: name {name!r} may use only letters, digits, '_' and '.' (it appears"
                                " in stage names, where '-' separates the fields)")
        if not isinstance(overrides, dict) or not overrides:
            raise PipelineError(f"train_configs.{name}: give the `train` keys it changes, e.g. {{lr: 0.002}} (the"
                                " grid's own `train` is the train@ cells already)")
        params.config_recipes[name] = params.recipe(f"train_configs.{name}", overrides)
    cells = params.train_config_cells
    for key, names, known in (("train_config_cells.datasets", cells.datasets, params.datasets),
                              ("train_config_cells.variants", cells.variants, list(params.models))):
        for name in names if params.train_configs else []:
            if name not in known:
                raise PipelineError(f"{key}: {name!r} is not one of {known}; the cells run on the grid's own"
                                    " datasets and variants, so name one of those")


def check_builds(params, check) -> int:
    """`python -m pipeline check`: each variant built on each dataset with `train` and every training
    configuration's recipe, through the runtime's builders (on the meta device `check` sets)."""
    builders, built = check.module("pipeline.training.builders"), 0
    for dataset in dict.fromkeys(params.datasets):
        meta = check.meta(dataset)
        for variant, cfg in params.models.items():
            with check.keyed(f"models.{variant}"):
                model = builders.timm_model(cfg, meta)
            size = builders.input_size(cfg, meta)
            check.recipe("train", params.train, model, dataset, *size, check.train_images(dataset))
            for name, recipe in params.config_recipes.items():
                check.recipe(f"train_configs.{name}", recipe, model, dataset, *size, check.train_images(dataset))
            built += 1
    return built

"""[CI] 2401.12511's grids on its Simple ViT (code-2401's `vit.py`), runtime `pipeline.training.simple_vit`:
`ci_alpha@` (params `ci_alpha`; Tables 3-8: M'_I over alpha and arm), `ci_model3@` (params `ci_model3`; Table 2:
Model III, Q/K trained or frozen, with or without W_v) and `ci_table1@` (`ci_model3.forms`; Table 1's other
columns, with PyTorch's default init and Model III's recipe and seeds)."""

from __future__ import annotations

import dataclasses

from pipeline.experiments import FIT_RECORDS, MODEL_RECORDS, CellStage, data_section, train_section
from pipeline.vocabulary import SENSITIVITY_ARM

#: Model III's form among [CI] Table 1's columns: its rows and the other forms' share one analysis frame
MODEL3 = "model3"
RECORDS = MODEL_RECORDS + FIT_RECORDS
#: Each Table 1 form's Simple ViT arguments (code-2401's `mytrain_vit.py` flags; `--alpha` left at its default 0.5)
FORMS = {"simple": {"input_pe": True, "alpha": 0.5}, "simple_nope": {"alpha": 1.0},
         "model1": {"alpha": 0.5}, "model2": {"alpha": 0.0}}


def cell_config(params, grid, recipe, cell: dict, variant: str, arm: str, attention: dict, labels: dict) -> dict:
    return {"dataset": cell["dataset"], "seed": int(cell["seed"]), "variant": variant, "arm": arm,
            "model": dataclasses.asdict(grid.model), "attention": attention,
            "impulse_fit": dataclasses.asdict(grid.impulse_fit) if arm == "impulse" else None,
            "train": train_section(recipe, cell["dataset"]), "data": data_section(params, cell["dataset"]),
            "labels": labels}


def alpha_cell(params, cell: dict) -> dict:
    alpha = float(cell["alpha"])
    return cell_config(params, params.ci_alpha, params.ci_recipe, cell, "ci", cell["arm"], {"alpha": alpha},
                       {"alpha": alpha})


def model3_attention(qk: str, value: str) -> dict:
    return {"attention": "model3", "value": value == "value", "trainable_qk": qk == "trained"}


def model3_cell(params, cell: dict) -> dict:
    """Model III's cell; the arm `impulse_sens` is the impulse arm fitted as `ci_model3.sensitivity_fit` says (the
    other reading of sigma, a sensitivity line of claim 10)."""
    grid, arm = params.ci_model3, cell["arm"]
    labels = {"qk": cell["qk"], "value": cell["value"]}
    config = cell_config(params, grid, params.ci_model3_recipe, cell, "ci_model3",
                         "impulse" if arm == SENSITIVITY_ARM else arm, model3_attention(cell["qk"], cell["value"]),
                         labels | {"arm": arm})
    if arm == SENSITIVITY_ARM:
        config["impulse_fit"] = dataclasses.asdict(grid.sensitivity_fit)
    return config


def table1_attention(form: str, value: str) -> dict:
    return FORMS[form] | {"value": value == "value"}


def table1_cell(params, cell: dict) -> dict:
    return cell_config(params, params.ci_model3, params.ci_model3_recipe, cell, "ci_table1", "random",
                       table1_attention(cell["form"], cell["value"]), {"form": cell["form"], "value": cell["value"]})


STAGES = [
    CellStage("ci_alpha", "pipeline.training.simple_vit",
              {"dataset": "${ci_alpha.datasets}", "alpha": "${ci_alpha.alphas}", "arm": "${ci_alpha.arms}",
               "seed": "${ci_alpha.seeds}"},
              "results/ci_alpha/{dataset}/alpha{alpha}/{arm}/seed{seed}", alpha_cell, command="ci-alpha",
              help="one cell of [CI]'s alpha grid: <dataset> <alpha> <arm> <seed>", frame="ci", records=RECORDS,
              keys=lambda c: {"dataset": c["dataset"], "alpha": float(c["alpha"]), "arm": c["arm"],
                              "seed": int(c["seed"])}),
    CellStage("ci_model3", "pipeline.training.simple_vit",
              {"dataset": "${ci_model3.datasets}", "arm": "${ci_model3.arms}", "qk": "${ci_model3.qk}",
               "value": "${ci_model3.value}", "seed": "${ci_model3.seeds}"},
              "results/ci_model3/{dataset}/{arm}/{qk}/{value}/seed{seed}", model3_cell, command="ci-model3",
              help="one cell of [CI]'s Model III grid: <dataset> <arm> <qk> <value> <seed>", frame="m3",
              records=RECORDS, keys=lambda c: {"form": MODEL3, **c, "seed": int(c["seed"])}),
    CellStage("ci_table1", "pipeline.training.simple_vit",
              {"dataset": "${ci_model3.datasets}", "form": "${ci_model3.forms}", "value": "${ci_model3.value}",
               "seed": "${ci_model3.seeds}"},
              "results/ci_table1/{dataset}/{form}/{value}/seed{seed}", table1_cell, command="ci-table1",
              help="one cell of [CI] Table 1's other columns: <dataset> <form> <value> <seed>", frame="m3",
              records=RECORDS, keys=lambda c: {"form": c["form"], "dataset": c["dataset"], "arm": "random",
                                               "qk": "trained", "value": c["value"], "seed": int(c["seed"])}),
]

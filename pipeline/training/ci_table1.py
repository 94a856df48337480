"""`python -m pipeline.training.ci_table1 <dataset> <form> <value> <seed>`: one cell of [CI] Table 1's other
columns, the stage `ci_table1@<dataset>-<form>-<value>-<seed>` (also `python -m pipeline ci-table1 ...`).

[CI] 2401.12511 Table 1 (paper.md section 2.6) trains code-2401's Simple ViT with PyTorch's default init, without
augmentation, in four attention forms beside Model III (RT, the random / trained cell of `ci_model3`): the Simple
ViT (`--input_pe --spatial_x`), the same without any PE, Model I (`--spatial_pe --spatial_x`, alpha 0.5) and Model II
(`--spatial_pe`), each with values LN(x) W_v or LN(x) (`--use_value` or not). The cells share `ci_model3`'s model,
recipe and seeds, and write `results/ci_table1/<dataset>/<form>/<value>/seed<k>/` through the shared run skeleton.
"""

from __future__ import annotations

import sys

from pipeline import entry
from pipeline.config import Params
from pipeline.errors import PipelineError
from pipeline.training.ci_alpha import simple_vit_cell
from pipeline.training.run import Run, start
from pipeline.vocabulary import CI_FORMS, CI_VALUE

#: Each form's Simple ViT arguments (code-2401's `mytrain_vit.py` flags; `--alpha` left at its default 0.5)
FORMS = {"simple": {"input_pe": True, "alpha": 0.5}, "simple_nope": {"alpha": 1.0},
         "model1": {"alpha": 0.5}, "model2": {"alpha": 0.0}}


def attention_form(form: str, value: str) -> dict:
    """The Simple ViT's arguments for Table 1's column `form` with values `value`."""
    for name, got, allowed in (("form", form, CI_FORMS), ("value", value, CI_VALUE)):
        if got not in allowed:
            raise PipelineError(f"{name} {got!r}: [CI] Table 1's grid has {', '.join(allowed)}")
    return FORMS[form] | {"value": value == "value"}


def ci_table1_run(params: Params, dataset: str, form: str, value: str, seed: int) -> Run:
    """The cell (dataset, form, value, seed) as a `Run`: PyTorch's default init (code-2401's `--init none`, the
    law of its random arm)."""
    return simple_vit_cell(__spec__.name, "ci_table1", (dataset, form, value, f"seed{seed}"), params,
                           params.ci_model3, params.ci_model3_recipe, dataset, "random", seed,
                           {"form": form, "value": value}, **attention_form(form, value))


def add_arguments(parser) -> None:
    parser.add_argument("dataset", help="a dataset of params `ci_model3.datasets`")
    parser.add_argument("form", choices=CI_FORMS, help="the attention form (Table 1's column)")
    parser.add_argument("value", choices=CI_VALUE, help="values LN(x) W_v (w/ V) or LN(x) (w/o V)")
    parser.add_argument("seed", type=int)


def main(params: Params, args) -> int:
    cell = ci_table1_run(params, args.dataset, args.form, args.value, args.seed)
    return start(cell, params.data, params.resources, args.relaunch)


if __name__ == "__main__":
    sys.exit(entry.command(__spec__.name, add_arguments, main))

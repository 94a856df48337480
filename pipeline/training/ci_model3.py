"""`python -m pipeline.training.ci_model3 <dataset> <arm> <qk> <value> <seed>`: one cell of [CI]'s Model III grid,
the stage `ci_model3@<dataset>-<arm>-<qk>-<value>-<seed>` (also `python -m pipeline ci-model3 ...`).

[CI] 2401.12511 Table 2 (and Table 1's Model III column; paper.md section 2.6) trains code-2401's Simple ViT whose
attention maps are per-layer, per-head learnable factors softmax(scale Q K) that never read the input (Model III,
`pipeline.method.simple_vit`), with impulse, mimetic and random Q, K (`pipeline.method.ci_2401`; the impulse fit
from `ci_model3.impulse_fit`, sigma 1.0; the arm `impulse_sens` is the same arm fitted as `ci_model3.sensitivity_fit`
says, the other reading of sigma), Q/K trained (T) or frozen at init (NT), and values LN(x) W_v (w/ V) or
LN(x) (w/o V), without augmentation (`train` updated by `ci_model3.train`). It writes
`results/ci_model3/<dataset>/<arm>/<qk>/<value>/seed<k>/` through the shared run skeleton
(`pipeline.training.run`); metrics.json records `arm`, `qk`, `value` and, for the impulse arm, `impulse_fit` per
layer (MSE, `target_mass`, `peak`, offsets) as `ci_alpha` does.
"""

from __future__ import annotations

import sys

from pipeline import entry
from pipeline.config import Params
from pipeline.errors import PipelineError
from pipeline.training.ci_alpha import simple_vit_cell
from pipeline.training.run import Run, start
from pipeline.vocabulary import CI_MODEL3_ARMS, CI_QK, CI_VALUE


def attention_form(qk: str, value: str) -> dict:
    """The Simple ViT's arguments for Model III with Q/K `qk` (trained | frozen) and values `value`."""
    for name, got, allowed in (("qk", qk, CI_QK), ("value", value, CI_VALUE)):
        if got not in allowed:
            raise PipelineError(f"{name} {got!r}: Model III's grid has {', '.join(allowed)}")
    return {"attention": "model3", "value": value == "value", "trainable_qk": qk == "trained"}


def ci_model3_run(params: Params, dataset: str, arm: str, qk: str, value: str, seed: int) -> Run:
    """The grid cell (dataset, arm, qk, value, seed) as a `Run`."""
    form = attention_form(qk, value)
    return simple_vit_cell(__spec__.name, "ci_model3", (dataset, arm, qk, value, f"seed{seed}"), params,
                           params.ci_model3, params.ci_model3_recipe, dataset, arm, seed, {"qk": qk, "value": value},
                           **form)


def add_arguments(parser) -> None:
    parser.add_argument("dataset", help="a dataset of params `ci_model3.datasets`")
    parser.add_argument("arm", choices=CI_MODEL3_ARMS, help="the init arm (impulse_sens: the impulse arm fitted as"
                        " ci_model3.sensitivity_fit says)")
    parser.add_argument("qk", choices=CI_QK, help="Q/K trained (Table 2's T) or frozen at init (NT)")
    parser.add_argument("value", choices=CI_VALUE, help="values LN(x) W_v (w/ V) or LN(x) (w/o V)")
    parser.add_argument("seed", type=int)


def main(params: Params, args) -> int:
    cell = ci_model3_run(params, args.dataset, args.arm, args.qk, args.value, args.seed)
    return start(cell, params.data, params.resources, args.relaunch)


if __name__ == "__main__":
    sys.exit(entry.command(__spec__.name, add_arguments, main))

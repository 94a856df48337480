"""`python -m pipeline.training.pretrain <teacher>`: pretrain one teacher of the weight-selection block, the stage
`pretrain@<teacher>` (also `python -m pipeline pretrain ...`).

[NeurIPS] Table 4 (paper.md section 2.5) pretrains ViT-S on ImageNet-1K from impulse init and weight-selects it into
ViT-T. Here teacher `<teacher>` of params `weight_selection.teachers` is the model `weight_selection.teacher`,
initialized by its `arm` (seed 0: one teacher per name), trained with `train` updated by `weight_selection.pretrain`
on the first `train_size` images of `weight_selection.pretrain_dataset` (the class-stratified shuffle of seed 0 that
`data.train_subset` takes, `pipeline.data.load.loaders`), and written to `results/pretrain/<teacher>/` through the
shared run skeleton (`pipeline.training.run`): metrics.json, config.json, model.pt (what
`pipeline.training.select_finetune` selects from), live/.
"""

from __future__ import annotations

import dataclasses
import sys

from pipeline import entry
from pipeline.config import DataConfig, Params
from pipeline.errors import PipelineError
from pipeline.training import builders
from pipeline.training.run import Run, data_identity, start

SEED = 0  #: one teacher per name


def pretrain_data(params: Params, teacher: str) -> DataConfig:
    """params `data` with the teacher's pretraining-set size as its `train_subset`."""
    return dataclasses.replace(params.data, train_subset=params.weight_selection.teachers[teacher].train_size)


def pretrain_run(params: Params, teacher: str) -> Run:
    """Teacher `teacher` of params `weight_selection.teachers` as a `Run`."""
    ws = params.weight_selection
    if teacher not in ws.teachers:
        raise PipelineError(f"teacher {teacher!r}: not a key of params `weight_selection.teachers`"
                            f" ({', '.join(ws.teachers) or 'none configured'})")
    arm, model_cfg = ws.teachers[teacher].arm, ws.teacher
    options = params.method_options(arm)
    config = {"teacher": teacher, "dataset": ws.pretrain_dataset, "arm": arm, "seed": SEED,
              "train_size": ws.teachers[teacher].train_size, "model": dataclasses.asdict(model_cfg),
              "init": options, "train": dataclasses.asdict(params.ws_pretrain_recipe),
              "data": data_identity(pretrain_data(params, teacher))}
    return Run(module=__spec__.name, kind="pretrain", key=(teacher,), dataset=ws.pretrain_dataset, seed=SEED,
               recipe=params.ws_pretrain_recipe, config=config,
               build=lambda meta: builders.initialized(model_cfg, arm, options, meta, SEED),
               input_size=lambda meta: builders.input_size(model_cfg, meta),
               facts=lambda model: builders.model_facts("teacher", model_cfg, model) | {"arm": arm, "teacher": teacher})


def add_arguments(parser) -> None:
    parser.add_argument("teacher", help="a teacher: a key of params `weight_selection.teachers`")


def main(params: Params, args) -> int:
    return start(pretrain_run(params, args.teacher), pretrain_data(params, args.teacher), params.resources,
                 args.relaunch)


if __name__ == "__main__":
    sys.exit(entry.command(__spec__.name, add_arguments, main))

"""[NeurIPS] Table 4's weight selection (params `weight_selection`; [NeurIPS] Sec. 5.5; claim 12): teachers
pretrained from an init (`pretrain@`), each selected into the grid's student and fine-tuned (`select_finetune@`),
and the student from scratch for context (`ws_scratch@`). One teacher per name (seed 0): the fine-tune seeds
sample fine-tuning only."""

from __future__ import annotations

import dataclasses

from pipeline.experiments import MODEL_RECORDS, CellStage, data_section, model_section, train_section

TEACHER_SEED = 0  #: one teacher per name
#: the `source` of a row trained from scratch in the weight-selection frame: SCRATCH + its arm ('scratch:default')
SCRATCH = "scratch:"
#: what a fine-tuned or scratch student records (pipeline.training.select_finetune): its variant, model and teacher
RECORDS = ("variant", *MODEL_RECORDS, "teacher_arm", "teacher_train_size", "pretrain_dataset")


def teacher_config(params, cell: dict) -> dict:
    ws, name = params.weight_selection, cell["teacher"]
    teacher = ws.teachers[name]
    return {"dataset": ws.pretrain_dataset, "seed": TEACHER_SEED, "variant": "teacher", "arm": teacher.arm,
            "train_size": teacher.train_size, "model": model_section(ws.teacher),
            "init": params.method_options(teacher.arm), "train": dataclasses.asdict(params.ws_pretrain_recipe),
            "data": data_section(params, ws.pretrain_dataset, train_subset=teacher.train_size),
            "labels": {"arm": teacher.arm, "teacher": name}}


def finetune_config(params, cell: dict) -> dict:
    ws, name = params.weight_selection, cell["teacher"]
    teacher = ws.teachers[name]
    return {"dataset": cell["dataset"], "seed": int(cell["seed"]), "variant": ws.student,
            "teacher": {"name": name, "arm": teacher.arm, "train_size": teacher.train_size},
            "model": model_section(params.models[ws.student]),
            "train": train_section(params.ws_finetune_recipe, cell["dataset"]),
            "data": data_section(params, cell["dataset"])}


def scratch_config(params, cell: dict) -> dict:
    ws, arm = params.weight_selection, cell["arm"]
    return {"dataset": cell["dataset"], "seed": int(cell["seed"]), "variant": ws.student, "arm": arm,
            "model": model_section(params.models[ws.student]), "init": params.method_options(arm, ws.student),
            "train": train_section(params.ws_finetune_recipe, cell["dataset"]),
            "data": data_section(params, cell["dataset"]),
            "labels": {"arm": arm}}


STAGES = [
    CellStage("pretrain", "pipeline.training.train", {"teacher": "${weight_selection.teachers}"},
              "results/pretrain/{teacher}", teacher_config, ("data/${weight_selection.pretrain_dataset}",),
              command="pretrain", help="pretrain one weight-selection teacher: <teacher>"),
    CellStage("select_finetune", "pipeline.training.select_finetune",
              {"dataset": "${weight_selection.datasets}", "teacher": "${weight_selection.teachers}",
               "seed": "${weight_selection.seeds}"},
              "results/weight_selection/{dataset}/{teacher}/seed{seed}", finetune_config,
              ("data/{dataset}", "results/pretrain/{teacher}"), command="select-finetune",
              help="weight-select a teacher into the student and fine-tune it: <dataset> <teacher> <seed>",
              frame="weight_selection", records=RECORDS,
              keys=lambda c: {"dataset": c["dataset"], "source": c["teacher"], "seed": int(c["seed"])}),
    CellStage("ws_scratch", "pipeline.training.train",
              {"dataset": "${weight_selection.datasets}", "arm": "${weight_selection.scratch}",
               "seed": "${weight_selection.seeds}"},
              "results/weight_selection/{dataset}/scratch/{arm}/seed{seed}", scratch_config, command="ws-scratch",
              help="the weight-selection student from scratch: <dataset> <arm> <seed>", frame="weight_selection",
              records=RECORDS,
              keys=lambda c: {"dataset": c["dataset"], "source": SCRATCH + c["arm"], "seed": int(c["seed"])}),
]

"""`python -m pipeline.training.select_finetune <dataset> <teacher> <seed>`: weight-select a pretrained teacher into
the student and fine-tune it, the stage `select_finetune@<dataset>-<teacher>-<seed>` (also
`python -m pipeline select-finetune ...`).

[NeurIPS] Table 4 (paper.md section 2.5): ViT-S pretrained from impulse init, weight-selected into ViT-T (Xu et al.,
ICLR 2024: first-N blocks, evenly spaced elements; `pipeline.method.weight_selection`), fine-tuned on small datasets.
Here the student is grid variant `weight_selection.student` for the dataset's classes, built by timm's constructor
(seeded by `seed`); every tensor but its classifier head (the classes differ) is selected from
`results/pretrain/<teacher>/model.pt` (stage pretrain@<teacher>); it is then trained with `train` updated by
`weight_selection.finetune` and written to `results/weight_selection/<dataset>/<teacher>/seed<k>/` through the shared
run skeleton (`pipeline.training.run`). Its config records a digest of the teacher's weights, so a re-trained teacher
makes a new attempt.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path

import torch
from torch import nn

from pipeline import entry
from pipeline.config import ModelConfig, Params
from pipeline.data.meta import DatasetMeta
from pipeline.errors import PipelineError
from pipeline.method.weight_selection import select_weights
from pipeline.training import builders
from pipeline.training.run import RESULTS, Run, data_identity, start

HEAD = ("head.",)  #: the student keeps its own classifier: the fine-tune classes are not the teacher's


def teacher_folder(teacher: str) -> Path:
    return RESULTS / "pretrain" / teacher


def read_teacher(params: Params, teacher: str) -> tuple[dict, str]:
    """(the teacher's config.json, a digest of its model.pt), checked against params `weight_selection.teachers`."""
    if teacher not in params.weight_selection.teachers:
        raise PipelineError(f"teacher {teacher!r}: not a key of params `weight_selection.teachers`"
                            f" ({', '.join(params.weight_selection.teachers) or 'none configured'})")
    folder = teacher_folder(teacher)
    if not (folder / "model.pt").is_file() or not (folder / "config.json").is_file():
        raise PipelineError(f"{folder}: no pretrained teacher (model.pt, config.json); run `dvc repro"
                            f" pretrain@{teacher}` first")
    config = json.loads((folder / "config.json").read_text())
    want = params.weight_selection.teachers[teacher]
    if (config.get("arm"), config.get("train_size")) != (want.arm, want.train_size):
        raise PipelineError(f"{folder} holds a teacher of arm {config.get('arm')!r}, train_size"
                            f" {config.get('train_size')!r}, but params weight_selection.teachers.{teacher} asks for"
                            f" {want.arm!r}, {want.train_size}; re-run `dvc repro pretrain@{teacher}`")
    return config, hashlib.sha256((folder / "model.pt").read_bytes()).hexdigest()[:16]


def selected_student(model_cfg: ModelConfig, meta: DatasetMeta, seed: int, teacher_state: dict) -> nn.Module:
    """The student for this dataset (timm's constructor init, seeded), every tensor but the head selected from
    `teacher_state`."""
    torch.manual_seed(seed)
    student = builders.timm_model(model_cfg, meta)
    student.load_state_dict(select_weights(teacher_state, student.state_dict(), head_prefixes=HEAD))
    return student


def select_finetune_run(params: Params, dataset: str, teacher: str, seed: int) -> Run:
    """The cell (dataset, teacher, seed) as a `Run`."""
    ws = params.weight_selection
    model_cfg = params.models[ws.student]
    teacher_config, weights = read_teacher(params, teacher)
    facts = {"teacher": teacher, "teacher_arm": teacher_config["arm"],
             "teacher_train_size": teacher_config["train_size"], "pretrain_dataset": teacher_config["dataset"]}
    config = {"dataset": dataset, "variant": ws.student, **facts, "teacher_weights": weights, "seed": seed,
              "model": dataclasses.asdict(model_cfg), "train": dataclasses.asdict(params.ws_finetune_recipe),
              "data": data_identity(params.data)}

    def build(meta: DatasetMeta) -> nn.Module:
        state = torch.load(teacher_folder(teacher) / "model.pt", map_location="cpu", weights_only=True)
        return selected_student(model_cfg, meta, seed, state)

    return Run(module=__spec__.name, kind="weight_selection", key=(dataset, teacher, f"seed{seed}"), dataset=dataset,
               seed=seed, recipe=params.ws_finetune_recipe, config=config, build=build,
               input_size=lambda meta: builders.input_size(model_cfg, meta),
               facts=lambda model: builders.model_facts(ws.student, model_cfg, model) | facts)


def add_arguments(parser) -> None:
    parser.add_argument("dataset", help="a fine-tune dataset of params `weight_selection.datasets`")
    parser.add_argument("teacher", help="a teacher: a key of params `weight_selection.teachers`")
    parser.add_argument("seed", type=int)


def main(params: Params, args) -> int:
    cell = select_finetune_run(params, args.dataset, args.teacher, args.seed)
    return start(cell, params.data, params.resources, args.relaunch)


if __name__ == "__main__":
    sys.exit(entry.command(__spec__.name, add_arguments, main))

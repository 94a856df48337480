"""A teacher weight-selected into the grid's student and fine-tuned: the cells of `select_finetune@` ([NeurIPS] Table 4;
`pipeline.method.weight_selection`). The teacher's results folder is a dep of the cell; metrics.json records a digest of
its model.pt."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from pipeline.data.meta import DatasetMeta
from pipeline.errors import PipelineError
from pipeline.method.weight_selection import select_weights
from pipeline.training import builders
from pipeline.training.run import RESULTS, Run

HEAD = ("head.",)  #: the student keeps its own classifier: the fine-tune classes are not the teacher's


def teacher_folder(teacher: str) -> Path:
    return RESULTS / "pretrain" / teacher


def read_teacher(teacher: dict) -> tuple[dict, str]:
    """(the teacher's config.json, a digest of its model.pt), checked against the arm and size the cell asks for."""
    name, folder = teacher["name"], teacher_folder(teacher["name"])
    if not (folder / "model.pt").is_file() or not (folder / "config.json").is_file():
        raise PipelineError(f"{folder}: no pretrained teacher (model.pt, config.json); run `dvc repro"
                            f" pretrain@{name}` first")
    config = json.loads((folder / "config.json").read_text())
    if (config.get("arm"), config.get("train_size")) != (teacher["arm"], teacher["train_size"]):
        raise PipelineError(f"{folder} holds a teacher of arm {config.get('arm')!r}, train_size"
                            f" {config.get('train_size')!r}, but params weight_selection.teachers.{name} asks for"
                            f" {teacher['arm']!r}, {teacher['train_size']}; re-run `dvc repro pretrain@{name}`")
    return config, hashlib.sha256((folder / "model.pt").read_bytes()).hexdigest()[:16]


def selected_student(model_cfg, meta: DatasetMeta, seed: int, teacher_state: dict) -> nn.Module:
    """The student for this dataset (constructor init, seeded), every tensor but the head from `teacher_state`."""
    torch.manual_seed(seed)
    student = builders.timm_model(model_cfg, meta)
    student.load_state_dict(select_weights(teacher_state, student.state_dict(), head_prefixes=HEAD))
    return student


def build_run(config: dict) -> Run:
    model_cfg, teacher = SimpleNamespace(**config["model"]), config["teacher"]
    teacher_config, weights = read_teacher(teacher)
    facts = {"teacher": teacher["name"], "teacher_arm": teacher_config["arm"],
             "teacher_train_size": teacher_config["train_size"], "pretrain_dataset": teacher_config["dataset"],
             "teacher_weights": weights}

    def build(meta: DatasetMeta, device: torch.device) -> nn.Module:
        state = torch.load(teacher_folder(teacher["name"]) / "model.pt", map_location="cpu", weights_only=True)
        return selected_student(model_cfg, meta, config["seed"], state)

    return Run(config=config, build=build, input_size=lambda meta: builders.input_size(model_cfg, meta),
               facts=lambda model: builders.model_facts(config["variant"], model_cfg, model) | facts,
               inputs={"teacher_weights": weights})

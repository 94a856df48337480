"""[NeurIPS] Table 4's weight selection (params `weight_selection`; [NeurIPS] Sec. 5.5; claim 12): teachers
pretrained from an init (`pretrain@`), each selected into the grid's student and fine-tuned (`select_finetune@`),
and the student from scratch for context (`ws_scratch@`). One teacher per name (seed 0): the fine-tune seeds
sample fine-tuning only."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from pipeline.config import VARIANT_NAME, ModelConfig, TrainConfig
from pipeline.datasets import DATASETS
from pipeline.errors import PipelineError
from pipeline.experiments import MODEL_RECORDS, CellStage, data_section, model_section, train_section
from pipeline.method.names import INIT_METHODS, InitMethod
from pipeline.schema import choice

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


# --- its params section: `weight_selection` ([NeurIPS] Table 4) ----------------------------------------------------


@dataclass
class TeacherConfig:
    """One pretrained teacher of the weight-selection block: its init arm and pretraining-set size."""

    arm: InitMethod = "impulse"  #: the init the teacher is pretrained from (its section, e.g. `impulse`, applies)
    train_size: int = 0  #: the first n images of the pretraining set (a class-stratified shuffle); 0 = all

    def check(self, key: str) -> None:
        if isinstance(self.train_size, bool) or self.train_size < 0:
            raise PipelineError(f"{key}.train_size = {self.train_size!r}: give the images of the pretraining set"
                                " (a positive integer; 0 = the whole split)")


@dataclass
class WeightSelectionConfig:
    """[NeurIPS] Table 4 (Sec. 5.5): a larger ViT pretrained from an init (`teachers`), weight-selected
    into the grid variant `student` (Xu et al., ICLR 2024; `pipeline.method.weight_selection`) and fine-tuned on
    `datasets` (stages pretrain@<teacher>, select_finetune@<dataset>-<teacher>-<seed> and, for context,
    ws_scratch@<dataset>-<arm>-<seed>). One teacher per name (seed 0): the fine-tune seeds sample fine-tuning only.
    """

    teachers: dict[str, TeacherConfig] = field(default_factory=dict)  #: name -> teacher; {} switches the block off
    #: the teachers' model (one for all of them): 4 heads of dimension 24, the CPU student's depth
    teacher: ModelConfig = field(default_factory=lambda: ModelConfig(img_size=28, patch_size=4, embed_dim=96, depth=6,
                                                                     num_heads=4, drop_path_rate=0.0))
    pretrain_dataset: str = "fashion_mnist"
    pretrain: dict = field(default_factory=dict)  #: overrides of the `train` section for pretraining
    student: str = "vit"  #: the grid variant (a key of `models`) the teachers are selected into
    datasets: list = field(default_factory=list)  #: fine-tune datasets; [] switches the fine-tune cells off
    fetch: list = field(default_factory=list)  #: datasets of this block that `datasets` lacks (stage fetch_ws@)
    finetune: dict = field(default_factory=dict)  #: overrides of `train` for the fine-tune and scratch cells
    seeds: list = field(default_factory=lambda: [0, 1, 2])  #: fine-tune seeds
    scratch: list = field(default_factory=lambda: ["impulse", "default"])  #: student arms trained from scratch

    @property
    def enabled(self) -> bool:
        return bool(self.teachers or self.datasets)


# --- how `Params` holds it (`pipeline.experiments.MODULES`) ---------------------------------------------------------

FIELDS = [
    #: [NeurIPS] Table 4: pretrain, weight-select, fine-tune (stages pretrain@, select_finetune@, ws_scratch@)
    ("weight_selection", WeightSelectionConfig, field(default_factory=WeightSelectionConfig)),
    #: the teachers' recipe: `train` updated by `weight_selection.pretrain` (not a YAML key)
    ("ws_pretrain_recipe", TrainConfig, field(init=False, repr=False)),
    #: the fine-tune and scratch cells' recipe: `train` updated by `weight_selection.finetune` (not a YAML key)
    ("ws_finetune_recipe", TrainConfig, field(init=False, repr=False)),
]
SEED_KEYS = ("weight_selection.seeds",)
#: overrides of the default params.yaml that switch every stage of it on (the tests' all-stages setting)
SWITCH_ON = ("weight_selection.teachers={small: {arm: impulse, train_size: 500}}",
             "weight_selection.datasets=[digits]", "weight_selection.fetch=[digits]")


@dataclass(frozen=True)
class AnalysisPart:
    """What the analysis reads of this block (`exp.weight_selection`)."""

    datasets: tuple = ()  #: fine-tune datasets
    teachers: tuple = ()  #: teacher names
    scratch: tuple = ()  #: student arms trained from scratch
    seeds: tuple = ()  #: fine-tune seeds


def analysis_part(params) -> AnalysisPart:
    ws = params.weight_selection
    return AnalysisPart(tuple(ws.datasets), tuple(ws.teachers), tuple(ws.scratch), tuple(ws.seeds))


def validate(params) -> None:
    """params `weight_selection`: names, datasets, the student variant and both recipes."""
    ws, key = params.weight_selection, "weight_selection"
    params.ws_pretrain_recipe = params.recipe(f"{key}.pretrain", ws.pretrain)
    params.ws_finetune_recipe = params.recipe(f"{key}.finetune", ws.finetune)
    if ws.teacher.init_options:
        raise PipelineError(f"{key}.teacher.init_options: not read for teachers; set the arm's own section (e.g."
                            " `impulse`) or leave it {}")
    for arm in ws.scratch:
        choice(f"{key}.scratch", arm, INIT_METHODS)
    for name in ws.fetch:
        choice(f"{key}.fetch", name, sorted(DATASETS))
        if name in params.datasets:
            raise PipelineError(f"{key}.fetch: {name!r} is in datasets already (its fetch@ stage fetches it);"
                                " drop it from weight_selection.fetch")
    fetched = [*params.datasets, *ws.fetch]
    for name, teacher in ws.teachers.items():
        if not isinstance(name, str) or not VARIANT_NAME.match(name) or name == "scratch":
            raise PipelineError(f"{key}.teachers: name {name!r} may use only letters, digits, '_' and '.' and"
                                " may not be 'scratch' (it appears in stage names and results folders)")
        split = DATASETS[ws.pretrain_dataset].train_size if ws.pretrain_dataset in DATASETS else None
        if split and teacher.train_size > split:
            raise PipelineError(f"{key}.teachers.{name}.train_size = {teacher.train_size} exceeds the {split}"
                                f" training images of {ws.pretrain_dataset}; lower it (0 = all)")
    if not ws.enabled:
        return
    if ws.student not in params.models:
        raise PipelineError(f"{key}.student = {ws.student!r}: not a key of `models` ({', '.join(params.models)});"
                            " name the grid variant the teachers are selected into")
    for name in ([ws.pretrain_dataset] if ws.teachers else []) + list(ws.datasets):
        choice(f"{key}.datasets / pretrain_dataset", name, sorted(DATASETS))
        if name not in fetched:
            raise PipelineError(f"{key}: dataset {name!r} is neither in datasets nor in weight_selection.fetch:"
                                " no stage fetches it; add it to weight_selection.fetch (only this block uses"
                                " it) or to datasets (the grid trains on it too)")


def check_builds(params, check) -> int:
    """`python -m pipeline check`: each teacher and the student built with their recipes by the runtime's builders,
    and each teacher selected into the student (a teacher too small or of another patch size stops here)."""
    builders = check.module("pipeline.training.builders")
    select_weights = check.module("pipeline.method.weight_selection").select_weights
    ws, built = params.weight_selection, 0
    if not ws.teachers and not ws.datasets:
        return 0
    teacher = None
    if ws.teachers:
        meta = check.meta(ws.pretrain_dataset)
        with check.keyed("weight_selection.teacher"):
            teacher = builders.timm_model(ws.teacher, meta)
        smallest = min(t.train_size or DATASETS[ws.pretrain_dataset].train_size for t in ws.teachers.values())
        check.recipe("weight_selection.pretrain", params.ws_pretrain_recipe, teacher, ws.pretrain_dataset,
                     *builders.input_size(ws.teacher, meta), smallest or None)
        built += 1
    cfg = params.models[ws.student]
    for dataset in ws.datasets:
        meta = check.meta(dataset)
        with check.keyed(f"models.{ws.student}"):
            student = builders.timm_model(cfg, meta)
        check.recipe("weight_selection.finetune", params.ws_finetune_recipe, student, dataset,
                     *builders.input_size(cfg, meta), check.train_images(dataset))
        if teacher is not None:
            with check.keyed(f"weight_selection.teacher -> models.{ws.student} on {dataset}"):
                select_weights(teacher.state_dict(), student.state_dict())
        built += 1
    return built

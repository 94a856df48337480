"""The ConvMixer filter study ([CI] Fig. 4 and Table 6; params `filter_study`), runtime
`pipeline.training.filter_study`: learned vs frozen filter families (`filter_study@`) and the frozen Gaussian
grid over sigma and the number of distinct filters (`filter_gaussian@`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from pipeline.config import TrainConfig
from pipeline.datasets import DATASETS
from pipeline.errors import PipelineError
from pipeline.experiments import CellStage, data_section
from pipeline.method.names import (
    ConvMixerBlock,
    check_convmixer_block,
    check_kernel_size,
    parse_filter,
    parse_study_variant,
)
from pipeline.schema import choice, positive

DATA = ("data/${filter_study.dataset}",)
#: what a ConvMixer cell records beyond every run's fields (pipeline.training.filter_study)
RECORDS = ("dataset", "family", "frozen", "heads", "sigma", "kernel_size", "dim", "effective_rank", "prop1_holds",
           "prop1_rhs")


def cell_config(params, variant: str, heads: int | None, seed: str) -> dict:
    study = params.filter_study
    return {"dataset": study.dataset, "seed": int(seed), "variant": variant, "heads": heads,
            "model": dataclasses.asdict(study.model), "train": dataclasses.asdict(params.filter_recipe),
            "data": data_section(params, study.dataset)}


STAGES = [
    CellStage("filter_study", "pipeline.training.filter_study",
              {"variant": "${filter_study.filters}", "seed": "${filter_study.seeds}"},
              "results/filter_study/{variant}/seed{seed}",
              lambda params, cell: cell_config(params, cell["variant"], None, cell["seed"]), DATA,
              command="filter-study", help="one ConvMixer of the filter study: <variant> <seed>", frame="filters",
              records=RECORDS, figures=True),
    CellStage("filter_gaussian", "pipeline.training.filter_study",
              {"sigma": "${filter_study.gaussian_sigmas}", "heads": "${filter_study.gaussian_heads}",
               "seed": "${filter_study.seeds}"},
              "results/filter_study/gaussian-{sigma}-h{heads}/seed{seed}",
              lambda params, cell: cell_config(params, f"gaussian-{cell['sigma']}", int(cell["heads"]), cell["seed"]),
              DATA, command="filter-gaussian", help="one cell of the Gaussian filter grid: <sigma> <heads> <seed>",
              frame="filters", records=RECORDS, figures=True,
              keys=lambda c: {"variant": f"gaussian-{c['sigma']}-h{c['heads']}", "seed": int(c["seed"])}),
]


# --- its params section: `filter_study` ([CI] Sec. 3, Fig. 4, Table 6) --------------------------------------------


@dataclass
class ConvMixerConfig:
    """ConvMixer of the filter study (code-2401's: dim 512, depth 6, kernel 5, patch 2; profile convmixer-2401)."""

    dim: int = 128
    depth: int = 4
    kernel_size: int = 3
    patch_size: int = 4
    img_size: int | None = None  #: input side; null = the dataset's stored (typical) image side
    #: spatial block: 'ci' = code-2401's ([CI] Fig. 4, Table 6: conv -> BatchNorm, no GELU), 'sia' = code-2404's
    #: and timm's (conv -> GELU -> BatchNorm); see pipeline.vocabulary.ConvMixerBlock
    block: ConvMixerBlock = "ci"

    def check(self, key: str) -> None:
        for name in ("dim", "depth", "patch_size"):
            positive(f"{key}.{name}", getattr(self, name))
        positive(f"{key}.img_size", self.img_size, allow_none=True)
        check_kernel_size(self.kernel_size, f"{key}.kernel_size")
        check_convmixer_block(self.block, f"{key}.block")


@dataclass
class FilterStudyConfig:
    """ConvMixer with learned vs frozen spatial filters ([CI] Fig. 4 and Table 6)."""

    dataset: str = "fashion_mnist"
    filters: list = field(default_factory=list)
    seeds: list = field(default_factory=lambda: [50, 51, 52])
    gaussian_sigmas: list = field(default_factory=list)
    gaussian_heads: list = field(default_factory=lambda: [64, 4])
    model: ConvMixerConfig = field(default_factory=ConvMixerConfig)
    #: overrides of the `train` section for this study: [CI]'s Adam 1e-3, no augmentation
    train: dict = field(default_factory=lambda: {"epochs": 3, "opt": "adam", "lr": 0.001, "weight_decay": 0.0,
                                                 "warmup_epochs": 0, "cooldown_epochs": 0, "smoothing": 0.0,
                                                 "scale": [1.0, 1.0], "ratio": [1.0, 1.0], "hflip": 0.0})

    @property
    def enabled(self) -> bool:
        return bool(self.filters or self.gaussian_sigmas)

    def check(self, key: str) -> None:
        for name in self.filters:
            try:
                parse_study_variant(name, self.model.kernel_size)
            except PipelineError as exc:
                raise PipelineError(f"{key}.filters: {exc}") from None
        for sigma in self.gaussian_sigmas:
            try:
                parse_filter(f"gaussian-{sigma}", self.model.kernel_size)
            except PipelineError as exc:
                raise PipelineError(f"{key}.gaussian_sigmas: {exc}") from None
        for heads in self.gaussian_heads:
            if isinstance(heads, bool) or not isinstance(heads, int) or not 1 <= heads <= self.model.dim:
                raise PipelineError(f"{key}.gaussian_heads: {heads!r} must be an integer between 1 and"
                                    f" {key}.model.dim = {self.model.dim}")


# --- how `Params` holds it (`pipeline.experiments.MODULES`) ---------------------------------------------------------

FIELDS = [
    ("filter_study", FilterStudyConfig, field(default_factory=FilterStudyConfig)),
    #: the study's recipe: `train` updated by `filter_study.train`, validated at load (not a YAML key)
    ("filter_recipe", TrainConfig, field(init=False, repr=False)),
]
SEED_KEYS = ("filter_study.seeds",)
#: overrides of the default params.yaml that switch every stage of it on (the tests' all-stages setting)
SWITCH_ON = ("filter_study.gaussian_sigmas=[1.0]", "filter_study.filters=[learned]")


@dataclass(frozen=True)
class AnalysisPart:
    """What the analysis reads of this block (`pipeline.analysis.aggregate.Experiment`, as `exp.filter_study`)."""

    dataset: str = ""
    filters: tuple = ()
    sigmas: tuple = ()
    heads: tuple = ()
    seeds: tuple = ()


def analysis_part(params) -> AnalysisPart:
    study = params.filter_study
    return AnalysisPart(study.dataset, tuple(study.filters), tuple(study.gaussian_sigmas),
                        tuple(study.gaussian_heads), tuple(study.seeds))


def validate(params) -> None:
    """Checks across sections: the study's dataset is fetched (one of `datasets`); its recipe."""
    study = params.filter_study
    choice("filter_study.dataset", study.dataset, sorted(DATASETS))
    params.filter_recipe = params.recipe("filter_study.train", study.train)
    if study.enabled and study.dataset not in params.datasets:
        raise PipelineError(
            f"filter_study.dataset = {study.dataset!r} is not in datasets {params.datasets}: the fetch@ stages fetch"
            " only `datasets`; add it there, or switch the study off with filter_study.filters: [] and"
            " filter_study.gaussian_sigmas: []"
        )


def check_builds(params, check) -> int:
    """`python -m pipeline check`: the study's ConvMixer built with its recipe by the runtime's own builder."""
    study = params.filter_study
    if not study.enabled:
        return 0
    runtime = check.module(STAGES[0].runtime)
    meta, model_cfg = check.meta(study.dataset), dataclasses.asdict(study.model)
    with check.keyed("filter_study.model"):
        model = runtime.build_model(model_cfg, "learned", None, meta, seed=0)
    check.recipe("filter_study.train", params.filter_recipe, model, study.dataset,
                 *runtime.model_input(model_cfg, meta), check.train_images(study.dataset))
    return 1

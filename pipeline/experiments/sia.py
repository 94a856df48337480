"""[SIA] 2404.01139's ablations on a grid ViT variant (params `sia`), runtime
`pipeline.training.sia`: `sia_base@` (claim 14: timm's ViT head against [SIA]'s average pooling and fixed sin-cos
PE) and `sia_fit@` (claim 13: [SIA]'s architecture and fit on the pseudo-inputs the cell names)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import SimpleNamespace

from pipeline.errors import PipelineError
from pipeline.experiments import FIT_RECORDS, MODEL_RECORDS, CellStage, data_section, model_section, train_section
from pipeline.experiments.ci import check_fit_loop
from pipeline.method.names import InitMethod, check_kernel_size
from pipeline.method.options import SiaFitOptions
from pipeline.vocabulary import SiaCell, parse_sia_base, parse_sia_fit

#: the init under [SIA]'s fit: PyTorch's default, as code-2404's impulse mode leaves every other weight
FIT_BASE_ARM = "default"


def sia_model(model, arch: str) -> dict:
    """The variant's model section with architecture `arch`'s head: cls token and token pooling, or neither."""
    section = model_section(model)
    if arch == "cls_learned":  # timm's own ViT: the cls token has a row of the position embedding too
        extra = {k: v for k, v in model.extra.items() if k != "no_embed_class"}
        return section | {"class_token": True, "global_pool": "token", "extra": extra}
    return section | {"class_token": False, "global_pool": "avg"}


def cell_config(params, cell: dict, sia_cell: SiaCell) -> dict:
    sia, variant = params.sia, params.sia.variant
    arm = FIT_BASE_ARM if sia_cell.fit else sia.baseline_arm
    labels = {"cell": sia_cell.name, "arch": sia_cell.arch, "arm": arm}
    fit = {"fit": dataclasses.asdict(sia.fit), "first": sia_cell.first, "later": sia_cell.later,
           "shared": sia_cell.shared} if sia_cell.fit else {"fit": None}
    return {"dataset": cell["dataset"], "seed": int(cell["seed"]), "variant": variant, "arch": sia_cell.arch,
            "arm": arm, "model": sia_model(params.models[variant], sia_cell.arch),
            "init": params.method_options(arm, variant), **fit, "train": train_section(params.train, cell["dataset"]),
            "data": data_section(params, cell["dataset"]), "labels": labels}


STAGES = [
    CellStage("sia_base", "pipeline.training.sia",
              {"dataset": "${sia.datasets}", "arch": "${sia.bases}", "seed": "${sia.seeds}"},
              "results/sia/{dataset}/base_{arch}/seed{seed}",
              lambda params, cell: cell_config(params, cell, parse_sia_base(cell["arch"])), command="sia-base",
              help="one cell of [SIA]'s baseline change: <dataset> <arch> <seed>", frame="sia",
              records=MODEL_RECORDS + FIT_RECORDS,
              keys=lambda c: {"dataset": c["dataset"], "cell": f"base_{c['arch']}", "seed": int(c["seed"])}),
    CellStage("sia_fit", "pipeline.training.sia",
              {"dataset": "${sia.datasets}", "fit": "${sia.fits}", "seed": "${sia.seeds}"},
              "results/sia/{dataset}/fit_{fit}/seed{seed}",
              lambda params, cell: cell_config(params, cell, parse_sia_fit(cell["fit"])), command="sia-fit",
              help="one cell of [SIA]'s fits: <dataset> <fit> <seed>",
              cost_note="the fit's Adam steps (sia.fit.steps) not included", frame="sia",
              records=MODEL_RECORDS + FIT_RECORDS,
              keys=lambda c: {"dataset": c["dataset"], "cell": f"fit_{c['fit']}", "seed": int(c["seed"])}),
]


# --- its params section: `sia` ([SIA]'s ablations) ------------------------------------------------------------------


@dataclass
class SiaFitConfig(SiaFitOptions):
    """[SIA]'s impulse fit (code-2404's 'impulse3'; `pipeline.method.options.SiaFitOptions`)."""

    def check(self, key: str) -> None:
        check_fit_loop(self, key)
        check_kernel_size(self.kernel_size, f"{key}.kernel_size")


@dataclass
class SiaConfig:
    """[SIA] 2404.01139's ablations on a grid ViT variant, its model and `train` recipe (its tables are labelled (a)-(f)
    as in paper/coverage.yaml): the baseline change ((f): cls token + learned PE vs average pooling + fixed 2-D
    sin-cos PE; stages sia_base@<dataset>-<arch>-<seed>) and the pseudo-inputs of its impulse fit ((c); stages
    sia_fit@<dataset>-<fit>-<seed>, on [SIA]'s architecture). Both lists empty switch it off.
    """

    variant: str = "vit"  #: the key of `models` every cell builds (a timm ViT); [SIA]'s cells change its head only
    datasets: list = field(default_factory=lambda: ["fashion_mnist"])  #: each one of `datasets`
    seeds: list = field(default_factory=lambda: [0, 1, 2])
    bases: list = field(default_factory=list)  #: architectures of the baseline change: cls_learned, avg_sincos
    baseline_arm: InitMethod = "timm"  #: the init of the base cells ([SIA]'s baselines are Trunc Normal, timm's)
    #: pseudo-inputs of the fit cells, <layer 0><later layers> of P U G A B (e.g. PP, UU, GP), plus _layer for
    #: a fit per layer instead of code-2404's shared one (init_once)
    fits: list = field(default_factory=list)
    fit: SiaFitConfig = field(default_factory=SiaFitConfig)

    def check(self, key: str) -> None:
        for arch in self.bases:
            parse_sia_base(arch)
        for name in self.fits:
            parse_sia_fit(name)

    @property
    def enabled(self) -> bool:
        return bool(self.bases or self.fits)


# --- how `Params` holds it (`pipeline.experiments.MODULES`) ---------------------------------------------------------

FIELDS = [("sia", SiaConfig, field(default_factory=SiaConfig))]
SEED_KEYS = ("sia.seeds",)
#: overrides of the default params.yaml that switch every stage of it on (the tests' all-stages setting)
SWITCH_ON = ("sia.bases=[avg_sincos]", "sia.fits=[PP]")


@dataclass(frozen=True)
class AnalysisPart:
    """What the analysis reads of [SIA]'s ablations (`exp.sia`)."""

    cells: tuple = ()  #: base_<arch> and fit_<fit>
    seeds: tuple = ()
    baseline_arm: str = "timm"
    datasets: tuple = ()  #: the datasets its cells run on; () when it is off


def analysis_part(params) -> AnalysisPart:
    sia = params.sia
    return AnalysisPart(tuple([f"base_{a}" for a in sia.bases] + [f"fit_{f}" for f in sia.fits]), tuple(sia.seeds),
                        sia.baseline_arm, tuple(sia.datasets) if sia.enabled else ())


def validate(params) -> None:
    """The variant [SIA]'s cells build is one of `models`, its datasets of `datasets`."""
    sia = params.sia
    if not sia.enabled:
        return
    if sia.variant not in params.models:
        raise PipelineError(f"sia.variant = {sia.variant!r}: not a key of `models` ({', '.join(params.models)}); name"
                            " the ViT variant [SIA]'s cells build")
    for name in sia.datasets:
        if name not in params.datasets:
            raise PipelineError(f"sia.datasets: {name!r} is not one of {params.datasets}; the cells run on the grid's"
                                " own datasets and variants, so name one of those")


def check_builds(params, check) -> int:
    """`python -m pipeline check`: each architecture of [SIA]'s cells built with the `train` recipe, per dataset,
    by the runtime's builders; a variant that is not a ViT stops here."""
    builders, arch_of = check.module("pipeline.training.builders"), check.module("pipeline.method.inits.arch")
    sia, built = params.sia, 0
    if not sia.enabled:
        return 0
    archs = dict.fromkeys([*sia.bases, *(parse_sia_fit(f).arch for f in sia.fits)])
    for dataset in sia.datasets:
        meta = check.meta(dataset)
        for arch in archs:
            cfg = SimpleNamespace(**sia_model(params.models[sia.variant], arch))
            with check.keyed(f"sia.variant = {sia.variant!r} (models.{sia.variant}, {arch})"):
                model = builders.timm_model(cfg, meta)
                if arch_of.family(model) != arch_of.VIT:
                    raise PipelineError(f"a {arch_of.family(model)} model; [SIA]'s cells change a ViT's cls token,"
                                        " pooling and position embedding: name a timm ViT/DeiT variant")
            check.recipe("train", params.train, model, dataset, *builders.input_size(cfg, meta),
                         check.train_images(dataset))
            built += 1
    return built

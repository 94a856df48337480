"""[CI] 2401.12511's grids on its Simple ViT (code-2401's `vit.py`), runtime `pipeline.training.simple_vit`:
`ci_alpha@` (params `ci_alpha`; Tables 3-8: M'_I over alpha and arm), `ci_model3@` (params `ci_model3`; Table 2:
Model III, Q/K trained or frozen, with or without W_v) and `ci_table1@` (`ci_model3.forms`; Table 1's other
columns, with PyTorch's default init and Model III's recipe and seeds)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from pipeline.config import TrainConfig
from pipeline.errors import PipelineError
from pipeline.experiments import FIT_RECORDS, MODEL_RECORDS, CellStage, data_section, train_section
from pipeline.method.names import CI_ARMS, check_kernel_size
from pipeline.method.options import MODEL3_SIGMA, CiFitOptions
from pipeline.schema import choice, positive
from pipeline.vocabulary import CI_FORMS, CI_MODEL3_ARMS, CI_QK, CI_VALUE, SENSITIVITY_ARM

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
              figures=True, keys=lambda c: {"dataset": c["dataset"], "alpha": float(c["alpha"]), "arm": c["arm"],
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


# --- its params sections: `ci_alpha`, `ci_model3` ([CI] Tables 1-2, Figs. 6-9) ------------------------------------


@dataclass
class SimpleVitConfig:
    """[CI]'s Simple ViT (`pipeline.method.simple_vit`); defaults are code-2401's (`vit.py`, `vit_pex.sh`)."""

    image_size: int = 32  #: images are resized to it
    patch_size: int = 2  #: 16 x 16 tokens at 32 px
    dim: int = 512  #: a multiple of 4 (the 2-D sin-cos embedding)
    depth: int = 6
    heads: int = 8
    head_dim: int = 64  #: also the rank of each head's Q/K factors (at most dim)
    mlp_dim: int = 512
    channels: int | None = None  #: null = the dataset's (1 or 3)

    def check(self, key: str) -> None:
        for name in ("image_size", "patch_size", "dim", "depth", "heads", "head_dim", "mlp_dim"):
            value = getattr(self, name)
            if value <= 0:
                raise PipelineError(f"{key}.{name} = {value}: must be a positive integer")
        if self.image_size % self.patch_size:
            raise PipelineError(f"{key}.patch_size = {self.patch_size} does not divide {key}.image_size ="
                                f" {self.image_size}; choose a divisor (the border pixels would be dropped)")
        if self.dim % 4:
            raise PipelineError(f"{key}.dim = {self.dim}: the 2-D sin-cos position embedding needs a multiple of 4")
        if self.head_dim > self.dim:
            raise PipelineError(f"{key}.head_dim = {self.head_dim} exceeds {key}.dim = {self.dim}: each head's Q/K"
                                " factors have rank head_dim, at most dim; lower it")
        if self.channels not in (None, 1, 3):
            raise PipelineError(f"{key}.channels = {self.channels}: set 1, 3 or null (the dataset's own)")


def check_fit_loop(fit, key: str) -> None:
    """The Adam loop both impulse fits share (code-2401's and code-2404's `impulse_init`): positive integer steps and
    renormalisation period, a positive lr."""
    for name in ("steps", "renorm_every"):
        if isinstance(getattr(fit, name), bool) or getattr(fit, name) < 1:
            raise PipelineError(f"{key}.{name} = {getattr(fit, name)!r}: must be a positive integer")
    positive(f"{key}.lr", fit.lr)


@dataclass
class ImpulseFitConfig(CiFitOptions):
    """code-2401's impulse fit (`impulse16_64_5_0.1_100`; `pipeline.method.options.CiFitOptions`)."""

    def check(self, key: str) -> None:
        check_fit_loop(self, key)
        positive(f"{key}.sigma", self.sigma)
        check_kernel_size(self.window, f"{key}.window")

    def check_window(self, key: str, model: SimpleVitConfig) -> None:
        """The window fits the model's token grid (at most 2 * side - 1 wide): a check of the fit beside its model."""
        grid = model.image_size // model.patch_size
        if self.window > 2 * grid - 1:
            raise PipelineError(f"{key}.window = {self.window}: wider than the {grid}x{grid} token grid allows (at"
                                f" most {2 * grid - 1}); lower it or raise the model's image_size / patch_size ratio")


@dataclass
class Model3FitConfig(ImpulseFitConfig):
    """code-2401's impulse fit for Model III: directly on Q, K (no PE), at the sigma [CI]'s text gives Model III."""

    sigma: float = MODEL3_SIGMA  #: softmax scale of the fit, kept as the impulse layers' attention scale


@dataclass
class CiAlphaConfig:
    """[CI] 2401.12511 Tables 3-8: code-2401's Simple ViT whose attention input mixes content and position,
    Z = alpha LN(x) + (1 - alpha) PE (`pipeline.method.simple_vit`), with its impulse, mimetic and random arms
    (`pipeline.method.ci_2401`), trained per alpha, arm and seed (stages ci_alpha@<dataset>-<alpha>-<arm>-<seed>).
    """

    datasets: list = field(default_factory=list)  #: [] switches the grid off; each must be in `datasets`
    alphas: list = field(default_factory=lambda: [0.0, 0.1, 0.5])  #: [CI]'s grid is 0, 0.1, ..., 0.5
    arms: list = field(default_factory=lambda: list(CI_ARMS))
    seeds: list = field(default_factory=lambda: [0, 1, 2])
    model: SimpleVitConfig = field(default_factory=SimpleVitConfig)
    impulse_fit: ImpulseFitConfig = field(default_factory=ImpulseFitConfig)
    train: dict = field(default_factory=dict)  #: overrides of the `train` section for this grid

    def check(self, key: str) -> None:
        for alpha in self.alphas:
            if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 <= alpha <= 1:
                raise PipelineError(f"{key}.alphas: {alpha!r} must be a number in [0, 1]")
        for arm in self.arms:
            choice(f"{key}.arms", arm, CI_ARMS)
        if "impulse" in self.arms:
            self.impulse_fit.check_window(f"{key}.impulse_fit", self.model)


@dataclass
class CiModel3Config:
    """[CI] 2401.12511 Tables 1-2 (Model III): code-2401's Simple ViT whose attention maps are learnable per-layer,
    per-head factors softmax(scale Q K) that never read the input (`pipeline.method.simple_vit`), with its impulse,
    mimetic and random arms (`pipeline.method.ci_2401`), Q/K trained or frozen and values LN(x) W_v or LN(x)
    (stages ci_model3@<dataset>-<arm>-<qk>-<value>-<seed>); and Table 1's other columns (`forms`, PyTorch's default
    init, trained: stages ci_table1@<dataset>-<form>-<value>-<seed>).
    """

    datasets: list = field(default_factory=list)  #: [] switches the grid off; each must be in `datasets`
    arms: list = field(default_factory=lambda: list(CI_ARMS))
    qk: list = field(default_factory=lambda: list(CI_QK))  #: trained (Table 2's T) / frozen (NT)
    value: list = field(default_factory=lambda: list(CI_VALUE))  #: value (w/ V) / novalue (w/o V)
    seeds: list = field(default_factory=lambda: [0, 1, 2])
    #: [CI] Table 1's other columns at the same model, recipe, values and seeds (stages ci_table1@...); [] = off
    forms: list = field(default_factory=lambda: list(CI_FORMS))
    model: SimpleVitConfig = field(default_factory=SimpleVitConfig)
    impulse_fit: Model3FitConfig = field(default_factory=Model3FitConfig)
    #: the fit of the arm `impulse_sens`, the other reading of sigma (claim 10's sensitivity line; plan.yaml says
    #: which decides): code-2401's own steps and lr at sigma 100, one of the values [CI] Fig. 5 shows
    sensitivity_fit: Model3FitConfig = field(default_factory=lambda: Model3FitConfig(sigma=100.0))
    #: overrides of the `train` section for this grid: [CI] Tables 1-2 use no augmentation
    train: dict = field(default_factory=lambda: {"aa": None, "mixup": 0.0, "cutmix": 0.0, "reprob": 0.0,
                                                 "color_jitter": None, "scale": [1.0, 1.0], "ratio": [1.0, 1.0],
                                                 "hflip": 0.0})

    def check(self, section: str) -> None:
        for key, values, allowed in (("arms", self.arms, CI_MODEL3_ARMS), ("qk", self.qk, CI_QK),
                                     ("value", self.value, CI_VALUE), ("forms", self.forms, CI_FORMS)):
            for value in values:
                choice(f"{section}.{key}", value, allowed)
        for name, fit, arm in (("impulse_fit", self.impulse_fit, "impulse"),
                               ("sensitivity_fit", self.sensitivity_fit, SENSITIVITY_ARM)):
            if arm in self.arms:
                fit.check_window(f"{section}.{name}", self.model)
        if "novalue" in self.value and self.model.heads * self.model.head_dim != self.model.dim:
            raise PipelineError(f"{section}.value: 'novalue' reads LN(x) as the heads' values, so {section}.model's"
                                f" heads x head_dim ({self.model.heads} x {self.model.head_dim}) must equal its dim"
                                f" ({self.model.dim}); change them or drop 'novalue'")


# --- how `Params` holds them (`pipeline.experiments.MODULES`) -------------------------------------------------------

FIELDS = [
    ("ci_alpha", CiAlphaConfig, field(default_factory=CiAlphaConfig)),
    ("ci_model3", CiModel3Config, field(default_factory=CiModel3Config)),
    #: the α grid's recipe: `train` updated by `ci_alpha.train`, validated at load (not a YAML key)
    ("ci_recipe", TrainConfig, field(init=False, repr=False)),
    #: Model III's recipe: `train` updated by `ci_model3.train` (not a YAML key)
    ("ci_model3_recipe", TrainConfig, field(init=False, repr=False)),
]
SEED_KEYS = ("ci_alpha.seeds", "ci_model3.seeds")
#: overrides of the default params.yaml that switch every stage of it on (the tests' all-stages setting)
SWITCH_ON = ("ci_alpha.datasets=[fashion_mnist]", "ci_model3.datasets=[fashion_mnist]")


def fit_setting(tokens: int, dim: int, heads: int, head_dim: int, fit: dict) -> str:
    """'7×7 tokens, D 72, 3 heads × 24; 1000 steps, lr 0.003, σ 0.1, renorm 100, f 5': a geometry and its fit."""
    return (f"{tokens}×{tokens} tokens, D {dim}, {heads} heads × {head_dim}; {fit['steps']} steps, lr {fit['lr']:g},"
            f" σ {fit['sigma']:g}, renorm {fit['renorm_every']}, f {fit['window']}")


@dataclass(frozen=True)
class AlphaPart:
    """What the analysis reads of the α grid (`exp.ci.alpha`)."""

    datasets: tuple = ()  #: () when the grid is off
    alphas: tuple = ()
    arms: tuple = ()
    seeds: tuple = ()
    setting: str = ""  #: its geometry and impulse fit, as the fit table names it (`fit_setting`)


@dataclass(frozen=True)
class Model3Part:
    """What the analysis reads of the Model III grid and Table 1's forms (`exp.ci.model3`)."""

    datasets: tuple = ()  #: () when the grid is off
    arms: tuple = ()
    qk: tuple = ()
    values: tuple = ()
    seeds: tuple = ()
    forms: tuple = ()  #: () when the grid is off
    fits: tuple = ()  #: (impulse arm, its fit's settings) of the grid's impulse arms


@dataclass(frozen=True)
class AnalysisPart:
    """What the analysis reads of [CI]'s two grids (`exp.ci`)."""

    alpha: AlphaPart = AlphaPart()
    model3: Model3Part = Model3Part()


def analysis_part(params) -> AnalysisPart:
    ci, m3 = params.ci_alpha, params.ci_model3
    m = ci.model
    setting = fit_setting(m.image_size // m.patch_size, m.dim, m.heads, m.head_dim, dataclasses.asdict(ci.impulse_fit))
    fits = tuple((arm, dataclasses.asdict(fit)) for arm, fit in (("impulse", m3.impulse_fit),
                                                                 (SENSITIVITY_ARM, m3.sensitivity_fit))
                 if arm in m3.arms)
    return AnalysisPart(
        AlphaPart(tuple(ci.datasets), tuple(float(a) for a in ci.alphas), tuple(ci.arms), tuple(ci.seeds), setting),
        Model3Part(tuple(m3.datasets), tuple(m3.arms), tuple(m3.qk), tuple(m3.value), tuple(m3.seeds),
                   tuple(m3.forms) if m3.datasets else (), fits))


def validate(params) -> None:
    """Both grids' recipes, and their datasets fetched (each one of `datasets`)."""
    params.ci_recipe = params.recipe("ci_alpha.train", params.ci_alpha.train)
    params.ci_model3_recipe = params.recipe("ci_model3.train", params.ci_model3.train)
    for grid, names in (("ci_alpha", params.ci_alpha.datasets), ("ci_model3", params.ci_model3.datasets)):
        for name in names:
            if name not in params.datasets:
                raise PipelineError(f"{grid}.datasets: {name!r} is not in datasets {params.datasets}: the fetch@"
                                    " stages fetch only `datasets`; add it there (or switch the grid off with"
                                    f" {grid}.datasets: [])")


def check_builds(params, check) -> int:
    """`python -m pipeline check`: each grid's Simple ViT (its first α; Model III's first Q/K and value setting,
    Table 1's first form) built with the grid's recipe by the runtime's own builder."""
    simple_vit = check.module(STAGES[0].runtime)
    built, alpha, m3 = 0, params.ci_alpha, params.ci_model3
    builds = [("ci_alpha", alpha, params.ci_recipe, alpha.datasets if alpha.alphas else [],
               lambda: {"alpha": alpha.alphas[0]}),
              ("ci_model3", m3, params.ci_model3_recipe, m3.datasets if m3.qk and m3.value else [],
               lambda: model3_attention(m3.qk[0], m3.value[0])),
              ("ci_model3", m3, params.ci_model3_recipe, m3.datasets if m3.forms and m3.value else [],
               lambda: table1_attention(m3.forms[0], m3.value[0]))]
    for key, grid, recipe, datasets, attention in builds:
        for dataset in datasets:
            meta, model_cfg = check.meta(dataset), dataclasses.asdict(grid.model)
            with check.keyed(f"{key}.model"):
                model = simple_vit.simple_vit(model_cfg, meta, **attention())
            check.recipe(f"{key}.train", recipe, model, dataset, *simple_vit.input_size(model_cfg, meta),
                         check.train_images(dataset))
            built += 1
    return built

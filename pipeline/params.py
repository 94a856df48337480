"""params.yaml -> `Params`, the whole of it: the shared core sections of `pipeline.config` and each experiment's own
section, declared in its module under `pipeline/experiments/` (as a timm model module declares its model), checked
together where one section names another's values (a dataset in `datasets`, a variant in `models`).

`load_params()` reads params.yaml (plus `key.sub=value` overrides, as `dvc exp run -S` writes them) and returns a
validated `Params`; a mistake stops with one `PipelineError` naming the key. Loading params does not import torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.config import (
    VARIANT_NAME,
    DataConfig,
    DefaultInitConfig,
    ImpulseConfig,
    MimeticConfig,
    ModelConfig,
    OwnInit,
    RandomInitConfig,
    ReportConfig,
    Resources,
    SlurmConfig,
    TimmInitConfig,
    TrainConfig,
    own_init,
)
from pipeline.datasets import DATASETS
from pipeline.errors import PipelineError
from pipeline.experiments.ci import CiAlphaConfig, CiModel3Config
from pipeline.experiments.filter_study import FilterStudyConfig
from pipeline.experiments.grid import TrainConfigCells
from pipeline.experiments.sia import SiaConfig
from pipeline.experiments.weight_selection import WeightSelectionConfig
from pipeline.method.names import INIT_METHODS
from pipeline.schema import apply_overrides, choice, from_mapping, yaml_errors, yaml_load

__all__ = ["Params", "load_params"]


def _default_models() -> dict:
    """The CPU default's grid: ViT-Tiny's 3 heads at Fashion-MNIST's 28 px, a 7 x 7 token grid."""
    return {"vit": ModelConfig(img_size=28, patch_size=4, embed_dim=72, depth=6, num_heads=3, drop_path_rate=0.0)}


@dataclass
class Params:
    """The whole of params.yaml."""

    init: str = "impulse"  #: the method under study: a built-in arm or one of `inits`
    baselines: list = field(default_factory=lambda: ["default", "mimetic"])
    seeds: list = field(default_factory=lambda: [20, 21, 22])
    datasets: list = field(default_factory=lambda: ["fashion_mnist"])
    profile: str = "cpu"  #: name of the recipe in use, shown in the report
    models: dict[str, ModelConfig] = field(default_factory=_default_models)  #: variant name -> model
    default: DefaultInitConfig = field(default_factory=DefaultInitConfig)
    timm: TimmInitConfig = field(default_factory=TimmInitConfig)
    mimetic: MimeticConfig = field(default_factory=MimeticConfig)
    impulse: ImpulseConfig = field(default_factory=ImpulseConfig)
    random: RandomInitConfig = field(default_factory=RandomInitConfig)
    #: your own inits as arms: name -> '<module>:<function>' or {function: ..., options: {...}} (docs/own-init.md)
    inits: dict = field(default_factory=dict)
    train: TrainConfig = field(default_factory=TrainConfig)
    resources: Resources = field(default_factory=Resources)
    data: DataConfig = field(default_factory=DataConfig)
    filter_study: FilterStudyConfig = field(default_factory=FilterStudyConfig)
    ci_alpha: CiAlphaConfig = field(default_factory=CiAlphaConfig)
    ci_model3: CiModel3Config = field(default_factory=CiModel3Config)
    sia: SiaConfig = field(default_factory=SiaConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    #: named training configurations: `train` overrides per name (stages train_config@...); {} switches them off
    train_configs: dict = field(default_factory=dict)
    #: the grid cells the configurations run on: datasets and variants (subsets of `datasets` and `models`)
    train_config_cells: TrainConfigCells = field(default_factory=lambda: TrainConfigCells())
    #: [NeurIPS] Table 4: pretrain, weight-select, fine-tune (stages pretrain@, select_finetune@, ws_scratch@)
    weight_selection: WeightSelectionConfig = field(default_factory=WeightSelectionConfig)
    #: the filter study's recipe: `train` updated by `filter_study.train`, validated at load (not a YAML key)
    filter_recipe: TrainConfig = field(init=False, repr=False)
    #: the [CI] grid's recipe: `train` updated by `ci_alpha.train`, validated at load (not a YAML key)
    ci_recipe: TrainConfig = field(init=False, repr=False)
    #: [CI]'s Model III grid's recipe: `train` updated by `ci_model3.train` (not a YAML key)
    ci_model3_recipe: TrainConfig = field(init=False, repr=False)
    #: each training configuration's recipe: `train` updated by `train_configs.<name>` (not a YAML key)
    config_recipes: dict = field(init=False, repr=False)
    #: the teachers' recipe: `train` updated by `weight_selection.pretrain` (not a YAML key)
    ws_pretrain_recipe: TrainConfig = field(init=False, repr=False)
    #: the fine-tune and scratch cells' recipe: `train` updated by `weight_selection.finetune` (not a YAML key)
    ws_finetune_recipe: TrainConfig = field(init=False, repr=False)
    #: `inits` validated: arm -> OwnInit, its module found under the working directory (not a YAML key)
    own_inits: dict[str, OwnInit] = field(init=False, repr=False)

    def __post_init__(self):
        self.own_inits = {arm: own_init(arm, value, Path.cwd()) for arm, value in self.inits.items()}
        for key, value in (("init", self.init), *(("baselines", b) for b in self.baselines)):
            if value not in self.arm_names:
                raise PipelineError(f"{key} = {value!r}: unknown arm; expected one of"
                                    f" {', '.join(map(repr, self.arm_names))}, or an init of your own declared in"
                                    " `inits` (docs/own-init.md)")
        if len(self.baselines) != 2:
            raise PipelineError(
                f"baselines = {self.baselines}: give exactly two (repeat one to train a single baseline, e.g."
                " [default, default]); dvc.yaml's train matrix reads ${baselines[0]} and ${baselines[1]}"
            )
        if self.init in self.baselines:
            others = [m for m in ("impulse", "default", "mimetic", "timm") if m != self.init][:2]
            raise PipelineError(
                f"init = {self.init} is also one of baselines {self.baselines}: the method under study would be"
                f" compared with itself. Choose baselines without it, e.g. `dvc exp run -S init={self.init}"
                f" -S 'baselines=[{others[0]},{others[1]}]'` (or set both keys in params.yaml)"
            )
        for key, seeds in (("seeds", self.seeds), ("filter_study.seeds", self.filter_study.seeds),
                           ("ci_alpha.seeds", self.ci_alpha.seeds), ("ci_model3.seeds", self.ci_model3.seeds),
                           ("sia.seeds", self.sia.seeds)):
            for s in seeds:
                if isinstance(s, bool) or not isinstance(s, int) or s < 0:
                    raise PipelineError(f"{key}: {s!r} is not a non-negative integer seed")
        for name in self.datasets:
            choice("datasets", name, sorted(DATASETS))
        choice("filter_study.dataset", self.filter_study.dataset, sorted(DATASETS))
        if not self.models:
            raise PipelineError("models: give at least one model variant (e.g. `vit: {name: vit_tiny_patch16_224}`)")
        for variant, model in self.models.items():
            if not VARIANT_NAME.match(variant):
                raise PipelineError(f"models: variant name {variant!r} may use only letters, digits, '_' and '.'"
                                    " (it appears in stage names, where '-' separates the fields)")
            model.validate(f"models.{variant}")
            for arm in model.init_options:
                self.method_options(arm, variant)
        self.train.validate("train")
        self.train.check_split("train", self.resources.ranks)
        self.filter_recipe = self._recipe("filter_study.train", self.filter_study.train)
        self.ci_recipe = self._recipe("ci_alpha.train", self.ci_alpha.train)
        self.ci_model3_recipe = self._recipe("ci_model3.train", self.ci_model3.train)
        self.config_recipes = {}
        for name, overrides in self.train_configs.items():
            if not isinstance(name, str) or not VARIANT_NAME.match(name):
                raise PipelineError(f"train_configs: name {name!r} may use only letters, digits, '_' and '.' (it"
                                    " appears in stage names, where '-' separates the fields)")
            if not isinstance(overrides, dict) or not overrides:
                raise PipelineError(f"train_configs.{name}: give the `train` keys it changes, e.g. {{lr: 0.002}}"
                                    " (the grid's own `train` is the train@ cells already)")
            self.config_recipes[name] = self._recipe(f"train_configs.{name}", overrides)
        if self.filter_study.enabled and self.filter_study.dataset not in self.datasets:
            raise PipelineError(
                f"filter_study.dataset = {self.filter_study.dataset!r} is not in datasets {self.datasets}: the"
                " fetch@ stages fetch only `datasets`; add it there, or switch the study off with"
                " filter_study.filters: [] and filter_study.gaussian_sigmas: []"
            )
        for grid, names in (("ci_alpha", self.ci_alpha.datasets), ("ci_model3", self.ci_model3.datasets)):
            for name in names:
                if name not in self.datasets:
                    raise PipelineError(f"{grid}.datasets: {name!r} is not in datasets {self.datasets}: the fetch@"
                                        " stages fetch only `datasets`; add it there (or switch the grid off with"
                                        f" {grid}.datasets: [])")
        if self.sia.enabled and self.sia.variant not in self.models:
            raise PipelineError(f"sia.variant = {self.sia.variant!r}: not a key of `models` ({', '.join(self.models)});"
                                " name the ViT variant [SIA]'s cells build")
        cells = self.train_config_cells
        for key, names, known in (("sia.datasets", self.sia.datasets if self.sia.enabled else [], self.datasets),
                                  ("train_config_cells.datasets", cells.datasets if self.train_configs else [],
                                   self.datasets),
                                  ("train_config_cells.variants", cells.variants if self.train_configs else [],
                                   list(self.models))):
            for name in names:
                if name not in known:
                    raise PipelineError(f"{key}: {name!r} is not one of {known}; the cells run on the grid's own"
                                        " datasets and variants, so name one of those")
        self._check_weight_selection()

    def _check_weight_selection(self) -> None:
        """params `weight_selection`: names, datasets, the student variant and both recipes."""
        ws, key = self.weight_selection, "weight_selection"
        self.ws_pretrain_recipe = self._recipe(f"{key}.pretrain", ws.pretrain)
        self.ws_finetune_recipe = self._recipe(f"{key}.finetune", ws.finetune)
        ws.teacher.validate(f"{key}.teacher")
        if ws.teacher.init_options:
            raise PipelineError(f"{key}.teacher.init_options: not read for teachers; set the arm's own section (e.g."
                                " `impulse`) or leave it {}")
        for s in ws.seeds:
            if isinstance(s, bool) or not isinstance(s, int) or s < 0:
                raise PipelineError(f"{key}.seeds: {s!r} is not a non-negative integer seed")
        for arm in ws.scratch:
            choice(f"{key}.scratch", arm, INIT_METHODS)
        for name in ws.fetch:
            choice(f"{key}.fetch", name, sorted(DATASETS))
            if name in self.datasets:
                raise PipelineError(f"{key}.fetch: {name!r} is in datasets already (its fetch@ stage fetches it);"
                                    " drop it from weight_selection.fetch")
        fetched = [*self.datasets, *ws.fetch]
        for name, teacher in ws.teachers.items():
            if not isinstance(name, str) or not VARIANT_NAME.match(name) or name == "scratch":
                raise PipelineError(f"{key}.teachers: name {name!r} may use only letters, digits, '_' and '.' and"
                                    " may not be 'scratch' (it appears in stage names and results folders)")
            teacher.validate(f"{key}.teachers.{name}")
            split = DATASETS[ws.pretrain_dataset].train_size if ws.pretrain_dataset in DATASETS else None
            if split and teacher.train_size > split:
                raise PipelineError(f"{key}.teachers.{name}.train_size = {teacher.train_size} exceeds the {split}"
                                    f" training images of {ws.pretrain_dataset}; lower it (0 = all)")
        if not ws.enabled:
            return
        if ws.student not in self.models:
            raise PipelineError(f"{key}.student = {ws.student!r}: not a key of `models` ({', '.join(self.models)});"
                                " name the grid variant the teachers are selected into")
        for name in ([ws.pretrain_dataset] if ws.teachers else []) + list(ws.datasets):
            choice(f"{key}.datasets / pretrain_dataset", name, sorted(DATASETS))
            if name not in fetched:
                raise PipelineError(f"{key}: dataset {name!r} is neither in datasets nor in weight_selection.fetch:"
                                    " no stage fetches it; add it to weight_selection.fetch (only this block uses"
                                    " it) or to datasets (the grid trains on it too)")

    def _recipe(self, key: str, overrides: dict) -> TrainConfig:
        """`train` updated by a sub-experiment's overrides, validated under `key`."""
        recipe = from_mapping(TrainConfig, dataclasses.asdict(self.train) | overrides, key)
        recipe.validate(key)
        recipe.check_split(key, self.resources.ranks)
        return recipe

    @property
    def arm_names(self) -> list[str]:
        """Every arm `init` and `baselines` may name: the built-in ones, then your own (`inits`)."""
        return [*INIT_METHODS, *self.own_inits]

    @property
    def arms(self) -> list[str]:
        """The method under study followed by the baselines, without repeats."""
        return list(dict.fromkeys([self.init, *self.baselines]))

    @property
    def variants(self) -> list[str]:
        """The model variants of the grid, in params.yaml's order."""
        return list(self.models)

    def method_options(self, method: str, variant: str | None = None) -> dict:
        """The keyword options `apply_init` takes for `method`, from its params section updated by
        `models.<variant>.init_options.<method>` (validated here, like the section itself; your own init's options
        are checked against its function by `check`)."""
        own = self.own_inits.get(method)
        if variant is None:
            return dict(own.options) if own else dataclasses.asdict(getattr(self, method))
        key = f"models.{variant}.init_options"
        overrides = self.models[variant].init_options
        for arm, value in overrides.items():
            choice(key, arm, self.arm_names)
            if not isinstance(value, dict):
                raise PipelineError(f"{key}.{arm} = {value!r}: expected a mapping of {arm} options, e.g."
                                    " {impulse: {mixer: shift}}")
        if own:
            return dict(own.options) | overrides.get(method, {})
        section = getattr(self, method)
        merged = dataclasses.asdict(section) | overrides.get(method, {})
        return dataclasses.asdict(from_mapping(type(section), merged, f"{key}.{method}"))


def load_params(path: str | Path = "params.yaml", overrides: list[str] | None = None) -> Params:
    """Read, override and validate params.yaml."""
    path = Path(path)
    if not path.exists():
        raise PipelineError(f"{path}: not found; run from the repository root or pass --params PATH")
    try:
        data = yaml_load(path.read_text()) or {}
    except yaml_errors() as exc:
        raise PipelineError(f"{path}: not valid YAML ({exc})") from None
    return from_mapping(Params, apply_overrides(data, overrides or []))

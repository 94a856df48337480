"""params.yaml -> `Params`, the whole of it: the shared core sections of `pipeline.config`, then each experiment's
own fields, declared in its module under `pipeline/experiments/` (`FIELDS`, as a timm model module declares its
model) and checked there (`validate`) where one section names another's values (a dataset in `datasets`, a variant
in `models`). Adding an experiment adds no line here: `Params` is assembled from the registry
(`pipeline.experiments.MODULES`).

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
from pipeline.experiments import attribute, experiment_modules, seed_keys
from pipeline.method.names import INIT_METHODS
from pipeline.schema import YAMLError, apply_overrides, choice, from_mapping, yaml_load

__all__ = ["Params", "load_params"]


def _default_models() -> dict:
    """The CPU default's grid: ViT-Tiny's 3 heads at Fashion-MNIST's 28 px, a 7 x 7 token grid."""
    return {"vit": ModelConfig(img_size=28, patch_size=4, embed_dim=72, depth=6, num_heads=3, drop_path_rate=0.0)}


@dataclass
class CoreParams:
    """The shared core of params.yaml: the grid's arms, seeds, datasets and models, the recipe, resources, data,
    report and SLURM (`Params` adds each experiment's fields)."""

    init: str = "impulse"  #: the method under study: a built-in arm or one of `inits`
    baselines: list = field(default_factory=lambda: ["default", "mimetic"])
    seeds: list = field(default_factory=lambda: [50, 51, 52])
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
    report: ReportConfig = field(default_factory=ReportConfig)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    #: `inits` validated: arm -> OwnInit, its module found under the working directory (not a YAML key)
    own_inits: dict[str, OwnInit] = field(init=False, repr=False)

    def __post_init__(self):
        self.own_inits = {arm: own_init(arm, value, Path.cwd()) for arm, value in self.inits.items()}

    def check(self, path: str = "") -> None:
        """Checks across sections (each section's own ran first, `pipeline.schema.check_sections`), then each
        experiment's (`validate` of its module), which also derives its recipes."""
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
        for name in self.datasets:
            choice("datasets", name, sorted(DATASETS))
        if not self.models:
            raise PipelineError("models: give at least one model variant (e.g. `vit: {name: vit_tiny_patch16_224}`)")
        for variant, model in self.models.items():
            if not VARIANT_NAME.match(variant):
                raise PipelineError(f"models: variant name {variant!r} may use only letters, digits, '_' and '.'"
                                    " (it appears in stage names, where '-' separates the fields)")
            for arm in model.init_options:
                self.method_options(arm, variant)
        self.train.check_split("train", self.resources.ranks)
        for key in seed_keys():
            for seed in attribute(self, key):
                if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
                    raise PipelineError(f"{key}: {seed!r} is not a non-negative integer seed")
        for module in experiment_modules():
            module.validate(self)

    def recipe(self, key: str, overrides: dict) -> TrainConfig:
        """`train` updated by a sub-experiment's overrides, validated under `key`."""
        recipe = from_mapping(TrainConfig, dataclasses.asdict(self.train) | overrides, key)
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


#: params.yaml, whole: the core, then each experiment's fields in the registry's order (`FIELDS` of its module)
Params = dataclasses.make_dataclass(
    "Params", [spec for module in experiment_modules() for spec in module.FIELDS], bases=(CoreParams,),
    namespace={"__doc__": "The whole of params.yaml: `CoreParams` and each experiment's own fields.",
               "__module__": __name__})


def load_params(path: str | Path = "params.yaml", overrides: list[str] | None = None) -> Params:
    """Read, override and validate params.yaml."""
    path = Path(path)
    if not path.exists():
        raise PipelineError(f"{path}: not found; run from the repository root or pass --params PATH")
    try:
        data = yaml_load(path.read_text()) or {}
    except YAMLError as exc:
        raise PipelineError(f"{path}: not valid YAML ({exc})") from None
    return from_mapping(Params, apply_overrides(data, overrides or []))

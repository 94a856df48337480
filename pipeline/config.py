"""params.yaml -> typed, validated dataclasses. Configuration enters the pipeline here and nowhere else.

`load_params()` reads params.yaml (plus `key.sub=value` overrides, as `dvc exp run -S` writes them), checks
every key and type, and returns a `Params`. A mistake stops with one `PipelineError` that names the key, the
bad value and what is allowed, before any work starts. Library functions never see this object whole: each
stage passes them the explicit values they need.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML, YAMLError

from pipeline.errors import PipelineError

#: Initialization methods `pipeline.inits.apply_init` implements (tests check the two lists agree).
INIT_METHODS = ("default", "timm", "mimetic", "impulse")


@dataclass
class ModelConfig:
    """The ViT under study, built with `timm.create_model(name, **overrides)`.

    A field left `null` keeps the timm model's own value; `in_chans: null` takes the dataset's channels.
    """

    name: str = "vit_tiny_patch16_224"  #: any timm ViT/DeiT, Swin or MLP-Mixer name
    img_size: int | None = None  #: input resolution; images are resized to it
    patch_size: int | None = None
    embed_dim: int | None = None
    depth: int | None = None
    num_heads: int | None = None
    mlp_ratio: float | None = None
    in_chans: int | None = None
    class_token: bool | None = None
    global_pool: str | None = None
    drop_rate: float = 0.0
    drop_path_rate: float = 0.1
    weight_init: str = "skip"  #: timm's own init; 'skip' = PyTorch defaults, as the official code builds models
    extra: dict = field(default_factory=dict)  #: any other create_model keyword

    def __post_init__(self):
        for key in ("img_size", "patch_size", "embed_dim", "depth", "num_heads", "in_chans"):
            value = getattr(self, key)
            if value is not None and value <= 0:
                raise PipelineError(f"model.{key} = {value}: must be a positive integer (or null for timm's)")
        if self.weight_init not in ("skip", "", "jax", "jax_nlhb", "moco"):
            raise PipelineError(
                f"model.weight_init = {self.weight_init!r}: allowed are 'skip' (PyTorch defaults), '' (timm's)"
                ", 'jax', 'jax_nlhb', 'moco'"
            )


@dataclass
class DefaultInitConfig:
    """`default` arm: PyTorch's init; the official code's optional norm rescaling (all 1 = unchanged)."""

    norm_p: float = 1.0
    norm_q: float = 1.0
    norm_v: float = 1.0


@dataclass
class TimmInitConfig:
    """`timm` arm: timm's truncated-normal init (the paper text's description of its baseline)."""


@dataclass
class MimeticConfig:
    """Trockman & Kolter 2023: W_q W_k^T ~ alpha_qk Z + beta_qk I, W_v W_o ~ alpha_vo Z - beta_vo I."""

    alpha_qk: float = 0.7
    beta_qk: float = 0.7
    alpha_vo: float = 0.4
    beta_vo: float = 0.4


@dataclass
class ImpulseConfig:
    """The paper's method; constants are code-2505's (paper.md section 1.1)."""

    kernel_size: int = 3  #: odd; f x f impulse offsets
    norm_p: float = 18.0  #: pos_embed multiplier
    norm_q: float = 7.0  #: Frobenius norm of each head's Q and K
    norm_v: float = 1.0  #: V/proj multiplier
    scale: float = 1000.0  #: weight of the impulse in the target
    noise_std: float = 0.6  #: std of the truncated-normal noise off the impulse (times 3)
    offsets: str = "official"  #: 'official' fixed order, or 'random' per head

    def __post_init__(self):
        if self.kernel_size < 1 or self.kernel_size % 2 == 0:
            raise PipelineError(
                f"impulse.kernel_size = {self.kernel_size}: must be an odd positive integer (3, 5, ...)"
            )
        if self.offsets not in ("official", "random"):
            raise PipelineError(f"impulse.offsets = {self.offsets!r}: allowed are 'official', 'random'")


@dataclass
class TrainConfig:
    """One training run's recipe: timm's optimizer, scheduler, mixup and transforms, by their own names."""

    epochs: int = 8
    batch_size: int = 128  #: global batch, split over processes
    opt: str = "adamw"
    lr: float = 1e-3
    weight_decay: float = 0.05
    opt_eps: float = 1e-8
    momentum: float = 0.9
    layer_decay: float | None = None
    sched: str = "cosine"
    warmup_epochs: int = 1
    warmup_lr: float = 1e-6
    min_lr: float = 1e-6
    cooldown_epochs: int = 0
    clip_grad: float | None = None
    smoothing: float = 0.1
    mixup: float = 0.0
    cutmix: float = 0.0
    mixup_prob: float = 1.0
    mixup_switch_prob: float = 0.5
    aa: str | None = None  #: RandAugment policy, e.g. 'rand-m9-mstd0.5-inc1'
    reprob: float = 0.0
    remode: str = "pixel"
    color_jitter: float | None = None
    scale: list = field(default_factory=lambda: [0.08, 1.0])  #: RandomResizedCrop scale
    ratio: list = field(default_factory=lambda: [3 / 4, 4 / 3])
    hflip: float = 0.5
    crop_pct: float = 0.875
    aug_repeats: float = 0  #: repeated augmentation (DeiT); 0 = off
    ema: bool = False
    ema_decay: float = 0.9999
    amp: str = "auto"  #: 'auto' (bf16 on CUDA, off on CPU), 'bf16', 'fp16', 'off'
    compile: bool = False
    channels_last: bool = False
    nproc: int = 1  #: processes (GPUs) per node, launched by torchrun
    nnodes: int = 1
    rdzv_endpoint: str = ""  #: host:port of the c10d rendezvous for multi-node runs
    rdzv_id: str = "structured-init"
    threads: int = 1  #: torch threads per process on CPU
    workers: int = 0  #: data-loader workers per process
    device: str = "auto"  #: 'auto', 'cpu', 'cuda'

    def __post_init__(self):
        for key in ("epochs", "batch_size", "nproc", "nnodes", "threads"):
            if getattr(self, key) <= 0:
                raise PipelineError(f"train.{key} = {getattr(self, key)}: must be a positive integer")
        if self.lr <= 0:
            raise PipelineError(f"train.lr = {self.lr}: must be positive")
        if self.amp not in ("auto", "bf16", "fp16", "off"):
            raise PipelineError(f"train.amp = {self.amp!r}: allowed are 'auto', 'bf16', 'fp16', 'off'")
        if self.device not in ("auto", "cpu", "cuda"):
            raise PipelineError(f"train.device = {self.device!r}: allowed are 'auto', 'cpu', 'cuda'")
        if self.warmup_epochs < 0 or self.cooldown_epochs < 0 or self.workers < 0:
            raise PipelineError("train.warmup_epochs, train.cooldown_epochs and train.workers must be >= 0")


@dataclass
class DataConfig:
    """Where datasets live and how much of them the runs use."""

    root: str = "data"  #: fetch stages write data/<dataset>/
    download: bool = True  #: allow downloads from the canonical sources
    fashion_mnist_mirror: str = "/usr/share/datasets/fashion-mnist"  #: Debian's dataset-fashion-mnist
    imagenet_path: str = ""  #: an extracted ImageNet-1K (train/ and val/ class folders); never downloaded
    folder_path: str = ""  #: the `folder` dataset: an ImageFolder tree with train/ and val/ (or test/)
    train_subset: int = 0  #: use the first n images of a fixed per-seed-independent shuffle; 0 = all
    val_subset: int = 0
    normalization: str = "dataset"  #: mean/std: the dataset's own, or 'imagenet' (the [NeurIPS] recipe's)

    def __post_init__(self):
        if self.train_subset < 0 or self.val_subset < 0:
            raise PipelineError("data.train_subset / data.val_subset must be >= 0 (0 = the whole split)")
        if self.normalization not in ("dataset", "imagenet"):
            raise PipelineError(f"data.normalization = {self.normalization!r}: allowed are 'dataset', 'imagenet'")


@dataclass
class ConvMixerConfig:
    """ConvMixer of the filter study (code-2401: dim 512, depth 6, kernel 5, patch 2)."""

    dim: int = 256
    depth: int = 8
    kernel_size: int = 5
    patch_size: int = 2


@dataclass
class FilterStudyConfig:
    """ConvMixer with learned vs frozen spatial filters ([CI] Fig. 4 and Table 6)."""

    dataset: str = "fashion_mnist"
    filters: list = field(default_factory=lambda: ["learned", "random", "impulse", "box-9", "perm"])
    seeds: list = field(default_factory=lambda: [0])
    gaussian_sigmas: list = field(default_factory=lambda: [0.1, 1.0])
    gaussian_heads: list = field(default_factory=lambda: [64, 4])
    model: ConvMixerConfig = field(default_factory=ConvMixerConfig)
    train: dict = field(default_factory=dict)  #: overrides of the `train` section for this study


@dataclass
class ReportConfig:
    """What the aggregate and the report show."""

    title: str = "Structured Initialization for Vision Transformers: reproduction report"
    convergence_epochs: list = field(default_factory=lambda: [2, 4, 8])
    confidence: float = 0.95
    attention_layers: list = field(default_factory=lambda: [0, -1])


@dataclass
class SlurmConfig:
    """What `python -m pipeline repro --executor slurm` asks SLURM for, per training cell (see pipeline.repro).

    Nodes and GPUs come from `train` (train.nnodes; train.nproc GPUs per node). No stage reads this section for
    its result, so changing it re-runs nothing but `aggregate`, which reads the whole of params.yaml.
    """

    partition: str = ""  #: sbatch --partition; '' = the cluster's default
    account: str = ""  #: sbatch --account; '' = your default account
    time: int = 240  #: minutes per cell (sbatch --time); SLURM ends a cell past it and the runner reports it
    cpus_per_task: int = 0  #: CPUs per node; 0 = train.nproc x (train.threads + train.workers)
    gpus: bool = True  #: ask for train.nproc GPUs per node (false for a CPU partition; train.device cpu never asks)

    def __post_init__(self):
        if self.time <= 0:
            raise PipelineError(f"slurm.time = {self.time}: give the minutes one cell may run (a positive integer)")
        if self.cpus_per_task < 0:
            raise PipelineError(f"slurm.cpus_per_task = {self.cpus_per_task}: must be >= 0 (0 = from train)")


@dataclass
class Params:
    """The whole of params.yaml."""

    init: str = "impulse"  #: the method under study
    baselines: list = field(default_factory=lambda: ["default", "mimetic"])
    seeds: list = field(default_factory=lambda: [0, 1])
    datasets: list = field(default_factory=lambda: ["fashion_mnist"])
    profile: str = "cpu"  #: name of the recipe in use, shown in the report
    model: ModelConfig = field(default_factory=ModelConfig)
    default: DefaultInitConfig = field(default_factory=DefaultInitConfig)
    timm: TimmInitConfig = field(default_factory=TimmInitConfig)
    mimetic: MimeticConfig = field(default_factory=MimeticConfig)
    impulse: ImpulseConfig = field(default_factory=ImpulseConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig = field(default_factory=DataConfig)
    filter_study: FilterStudyConfig = field(default_factory=FilterStudyConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)

    def __post_init__(self):
        for key, value in [("init", self.init)] + [("baselines", b) for b in self.baselines]:
            if value not in INIT_METHODS:
                raise PipelineError(
                    f"{key}: unknown init method {value!r}; valid choices are {', '.join(INIT_METHODS)}"
                )
        if len(self.baselines) != 2:
            raise PipelineError(
                f"baselines = {self.baselines}: give exactly two (repeat one to train a single baseline, e.g."
                " [default, default]); dvc.yaml's train matrix reads ${baselines[0]} and ${baselines[1]}"
            )
        for s in self.seeds + self.filter_study.seeds:
            if not isinstance(s, int) or isinstance(s, bool) or s < 0:
                raise PipelineError(f"seeds: {s!r} is not a non-negative integer seed")
        from pipeline.data.registry import DATASETS

        for key, name in [("datasets", d) for d in self.datasets] + [
            ("filter_study.dataset", self.filter_study.dataset)
        ]:
            if name not in DATASETS:
                raise PipelineError(
                    f"{key}: unknown dataset {name!r}; valid choices are {', '.join(sorted(DATASETS))}"
                )

        study = self.filter_study
        if study.filters or study.gaussian_sigmas:
            from pipeline.filters import parse_filter

            for name in study.filters:
                if name != "learned":
                    parse_filter(name, study.model.kernel_size)
            for sigma in study.gaussian_sigmas:
                parse_filter(f"gaussian-{sigma}", study.model.kernel_size)
        if (study.filters or study.gaussian_sigmas) and study.dataset not in self.datasets:
            raise PipelineError(
                f"filter_study.dataset = {study.dataset!r} is not in datasets {self.datasets}: the fetch@ stages"
                " fetch only `datasets`; add it there, or switch the study off with filter_study.filters: []"
                " and filter_study.gaussian_sigmas: []"
            )

    @property
    def arms(self) -> list[str]:
        """The method under study followed by the baselines, without repeats."""
        return list(dict.fromkeys([self.init, *self.baselines]))

    def method_options(self, method: str) -> dict:
        """The keyword options `apply_init` takes for `method`, from its params section."""
        return dataclasses.asdict(getattr(self, method))


def _type_ok(value: Any, annotation: Any) -> bool:
    """Whether a YAML value fits a dataclass field annotation (ints are accepted where floats are)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, a) for a in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation in (list, dict, str, bool):
        return isinstance(value, annotation)
    return True


def build(cls: type, data: Any, path: str = "") -> Any:
    """Build dataclass `cls` from a mapping, naming the first unknown key or wrongly typed value."""
    where = path or "params.yaml"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PipelineError(f"{where}: expected a mapping of keys, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        name = f"{path}.{key}" if path else str(key)
        if key not in fields:
            raise PipelineError(f"{name}: unknown key; allowed keys here are {', '.join(fields)}")
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            kwargs[key] = build(hint, value, name)
        elif not _type_ok(value, hint):
            allowed = getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
            raise PipelineError(f"{name} = {value!r}: wrong type, expected {allowed}")
        else:
            kwargs[key] = value
    return cls(**kwargs)


def yaml_load(text: str) -> Any:
    """YAML 1.2, as DVC reads params.yaml (so `2e-3` is a float, which YAML 1.1 readers take for a string)."""
    return YAML(typ="safe", pure=True).load(text)


def parse_override(text: str) -> tuple[list[str], Any]:
    """`train.lr=0.002` -> (['train', 'lr'], 0.002); the value is parsed as YAML, as `dvc exp run -S` does."""
    if "=" not in text:
        raise PipelineError(f"override {text!r}: write it as key.subkey=value (e.g. train.epochs=2)")
    key, value = text.split("=", 1)
    return key.strip().split("."), yaml_load(value)


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Set each `key.sub=value` in a nested mapping (in place) and return it."""
    for text in overrides:
        keys, value = parse_override(text)
        node = data
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise PipelineError(f"override {text!r}: {k} is not a section")
        node[keys[-1]] = value
    return data


def load_params(path: str | Path = "params.yaml", overrides: list[str] | None = None) -> Params:
    """Read, override and validate params.yaml."""
    path = Path(path)
    if not path.exists():
        raise PipelineError(f"{path}: not found; run from the repository root or pass --params PATH")
    try:
        data = yaml_load(path.read_text()) or {}
    except YAMLError as exc:
        raise PipelineError(f"{path}: not valid YAML ({exc})") from None
    return build(Params, apply_overrides(data, overrides or []))


def digest(obj: Any) -> str:
    """A short content hash of a dataclass or mapping: what the run's results record as 'config digest'."""
    if dataclasses.is_dataclass(obj):
        obj = dataclasses.asdict(obj)
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]

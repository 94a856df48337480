"""params.yaml -> typed, validated dataclasses. Configuration enters the pipeline here and nowhere else.

`load_params()` reads params.yaml (plus `key.sub=value` overrides, as `dvc exp run -S` writes them), checks
every key, type, choice and range, and returns a `Params`. A mistake stops with one `PipelineError` that names
the key, the bad value and what is allowed, before any work starts: this module is the one place a param is
validated (choices are `Literal` types, ranges are checked in `__post_init__`). What only the libraries can
judge (a timm model name, a keyword it takes, an optimizer name) is checked by `python -m pipeline check`,
which builds every planned run on the meta device. Loading params does not import torch.

Library functions never see this object whole: each stage passes them the explicit values they need.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from pipeline.datasets import DATASETS
from pipeline.errors import PipelineError
from pipeline.method.names import (
    CI_ARMS,
    INIT_METHODS,
    ConvMixerBlock,
    InitMethod,
    WeightInit,
    check_convmixer_block,
    check_kernel_size,
    parse_filter,
    parse_study_variant,
)
from pipeline.method.options import (
    MODEL3_SIGMA,
    CiFitOptions,
    DefaultOptions,
    ImpulseOptions,
    MimeticOptions,
    SiaFitOptions,
)
from pipeline.schema import apply_overrides, choice, from_mapping, positive, within, yaml_errors, yaml_load
from pipeline.vocabulary import (
    CI_FORMS,
    CI_MODEL3_ARMS,
    CI_QK,
    CI_VALUE,
    SENSITIVITY_ARM,
    parse_sia_base,
    parse_sia_fit,
)

__all__ = ["INIT_METHODS", "Params", "TrainConfig", "Resources", "ModelConfig", "load_params"]

#: A model variant's name appears in stage names (`train@<dataset>-<variant>-<arm>-<seed>`) and paths.
VARIANT_NAME = re.compile(r"^[A-Za-z0-9_.]+$")


@dataclass
class ModelConfig:
    """A model of the grid, built with `timm.create_model(name, **fields that are not null)`.

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
    weight_init: WeightInit = "skip"  #: 'skip' = PyTorch defaults, as the official code builds models
    extra: dict = field(default_factory=dict)  #: any other create_model keyword
    #: per-arm overrides of the init sections for this variant only, e.g. {impulse: {mixer: shift}} (validated by
    #: `Params`; not a create_model keyword)
    init_options: dict = field(default_factory=dict)

    def validate(self, key: str) -> None:
        named = {f.name for f in dataclasses.fields(self)} - {"extra", "init_options"}
        both = sorted(k for k in self.extra if k in named and getattr(self, k) is not None)
        if both:
            raise PipelineError(f"{key}.extra sets {', '.join(both)}, which {key} sets too; keep one (null the field to"
                                " pass a value of another type, e.g. Swin's per-stage num_heads, through extra)")
        for name in ("img_size", "patch_size", "embed_dim", "depth", "num_heads", "in_chans"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise PipelineError(f"{key}.{name} = {value}: must be a positive integer (or null for timm's)")
        if self.in_chans not in (None, 1, 3):
            raise PipelineError(f"{key}.in_chans = {self.in_chans}: the data has 1 or 3 channels, which feed 1- or"
                                " 3-channel models only; set it to 1, 3 or null (the dataset's own)")
        positive(f"{key}.mlp_ratio", self.mlp_ratio, allow_none=True)
        within(f"{key}.drop_rate", self.drop_rate, 0, 1, open_high=True)
        within(f"{key}.drop_path_rate", self.drop_path_rate, 0, 1, open_high=True)
        if self.img_size and self.patch_size and self.img_size % self.patch_size:
            raise PipelineError(f"{key}.patch_size = {self.patch_size} does not divide {key}.img_size ="
                                f" {self.img_size}; choose a divisor (the border pixels would be dropped)")
        if self.embed_dim and self.num_heads and self.embed_dim % self.num_heads:
            raise PipelineError(f"{key}.num_heads = {self.num_heads} does not divide {key}.embed_dim ="
                                f" {self.embed_dim}; choose a divisor")


@dataclass
class DefaultInitConfig(DefaultOptions):
    """`default` arm (`pipeline.method.options.DefaultOptions`)."""

    def __post_init__(self):
        for name in ("norm_p", "norm_q", "norm_v"):
            positive(f"default.{name}", getattr(self, name))


@dataclass
class TimmInitConfig:
    """`timm` arm: timm's truncated-normal init (the paper text's description of its baseline)."""


@dataclass
class RandomInitConfig:
    """`random` arm: [CI]'s random query/key factors sqrt(1/D) U(-1, 1) (2401.12511 `random512_64`; no options)."""


@dataclass
class MimeticConfig(MimeticOptions):
    """`mimetic` arm (`pipeline.method.options.MimeticOptions`)."""

    def __post_init__(self):
        for name in ("alpha_qk", "beta_qk", "alpha_vo", "beta_vo"):
            within(f"mimetic.{name}", getattr(self, name), 0, float("inf"))


@dataclass
class ImpulseConfig(ImpulseOptions):
    """`impulse` arm, the paper's method (`pipeline.method.options.ImpulseOptions`)."""

    def __post_init__(self):
        check_kernel_size(self.kernel_size, "impulse.kernel_size")
        within("impulse.noise_std", self.noise_std, 0, float("inf"))
        for name in ("norm_p", "norm_q", "norm_v", "scale"):
            positive(f"impulse.{name}", getattr(self, name))


@dataclass
class TrainConfig:
    """One training run's recipe: timm's optimizer, scheduler, mixup and transforms, by their own names.

    Choices timm owns (`opt`, `sched`, the `aa` policy string) are checked by `python -m pipeline check`,
    which builds the optimizer, schedule and transforms of every planned run before any stage starts.
    """

    epochs: int = 20
    batch_size: int = 64  #: global batch, split over processes
    opt: str = "adamw"  #: any timm optimizer name
    lr: float = 1e-3
    weight_decay: float = 0.05
    opt_eps: float = 1e-8
    momentum: float = 0.9
    layer_decay: float | None = None
    sched: str = "cosine"  #: any timm scheduler name
    warmup_epochs: int = 2
    warmup_lr: float = 1e-6
    min_lr: float = 1e-5
    cooldown_epochs: int = 0
    clip_grad: float | None = None
    smoothing: float = 0.1
    mixup: float = 0.0
    cutmix: float = 0.0
    mixup_prob: float = 1.0
    mixup_switch_prob: float = 0.5
    aa: str | None = None  #: RandAugment policy, e.g. 'rand-m9-mstd0.5-inc1'
    reprob: float = 0.0
    remode: Literal["pixel", "rand", "const"] = "pixel"
    color_jitter: float | None = None
    scale: list = field(default_factory=lambda: [0.8, 1.0])  #: RandomResizedCrop scale
    ratio: list = field(default_factory=lambda: [3 / 4, 4 / 3])
    hflip: float = 0.5
    crop_pct: float = 1.0
    aug_repeats: float = 0  #: repeated augmentation (DeiT); 0 = off
    ema: bool = False
    ema_decay: float = 0.9999
    #: 'auto': bf16 on a GPU with native bf16 (compute capability >= 8.0), fp16 + scaler on older GPUs, off on
    #: CPU; 'bf16' runs on CPU too; 'fp16' needs CUDA. A results knob: the precision changes the numbers by more
    #: than their last bits, and a checkpoint's gradient-scaler state belongs to it
    amp: Literal["auto", "bf16", "fp16", "off"] = "auto"
    eval_every: int = 1  #: evaluate every k epochs and always after the last (the history records those epochs)
    #: the data-parallel world size whose sampler and batches the run reproduces, e.g. 8 for the official 8 GPUs x
    #: 64 on one GPU at batch 512: each rank's shard padded as torch's DistributedSampler pads it, a step of
    #: batch_size / sampler_ranks images from each shard (each rank's last partial batch dropped, as timm's loader
    #: does), mixup/cutmix drawn per rank's chunk. 1: the processes are the ranks (resources.nproc x nnodes)
    sampler_ranks: int = 1

    #: keys that moved to `resources` (where and how fast a run goes), for the error that says so
    MOVED: ClassVar[tuple] = ("compile", "channels_last", "sync_every", "data_on_device", "nproc", "nnodes",
                              "rdzv_endpoint", "rdzv_id", "threads", "workers", "device")

    def validate(self, key: str) -> None:
        for name in ("epochs", "batch_size", "lr", "eval_every", "sampler_ranks"):
            positive(f"{key}.{name}", getattr(self, name))
        for name in ("warmup_epochs", "cooldown_epochs", "weight_decay", "warmup_lr", "min_lr",
                     "mixup", "cutmix", "opt_eps"):
            within(f"{key}.{name}", getattr(self, name), 0, float("inf"))
        positive(f"{key}.clip_grad", self.clip_grad, allow_none=True)
        positive(f"{key}.layer_decay", self.layer_decay, allow_none=True)
        for name in ("mixup_prob", "mixup_switch_prob"):
            within(f"{key}.{name}", getattr(self, name), 0, 1)
        within(f"{key}.smoothing", self.smoothing, 0, 1, open_high=True)
        within(f"{key}.momentum", self.momentum, 0, 1, open_high=True)
        within(f"{key}.ema_decay", self.ema_decay, 0, 1, open_low=True, open_high=True)
        within(f"{key}.color_jitter", self.color_jitter, 0, float("inf"))
        if self.warmup_epochs >= self.epochs - self.cooldown_epochs and self.warmup_epochs:
            raise PipelineError(f"{key}.warmup_epochs = {self.warmup_epochs} is not below {key}.epochs -"
                                f" {key}.cooldown_epochs = {self.epochs - self.cooldown_epochs}; the learning rate"
                                " would never leave its warm-up")
        if self.cooldown_epochs >= self.epochs:
            raise PipelineError(f"{key}.cooldown_epochs = {self.cooldown_epochs} is not below {key}.epochs ="
                                f" {self.epochs}; epochs counts the cooldown (timm's 300 + 10 is epochs: 310)")
        for name, pair in (("scale", self.scale), ("ratio", self.ratio)):
            if (len(pair) != 2 or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in pair)
                    or not 0 < pair[0] <= pair[1]):
                raise PipelineError(f"{key}.{name} = {pair!r}: must be two numbers [low, high] with 0 < low <= high")
        if self.scale[1] > 1:
            raise PipelineError(f"{key}.scale = {self.scale!r}: a crop cannot cover more than the image (high <= 1)")
        for name in ("hflip", "reprob"):
            within(f"{key}.{name}", getattr(self, name), 0, 1)
        choice(f"{key}.remode", self.remode, ("pixel", "rand", "const"))
        within(f"{key}.crop_pct", self.crop_pct, 0, 1, open_low=True)
        within(f"{key}.aug_repeats", self.aug_repeats, 0, float("inf"))

    def check_split(self, key: str, ranks: int) -> None:
        """The global batch over `ranks` processes (and `sampler_ranks` emulated ranks): whole, and even per rank
        when mixup/cutmix pair images."""
        if self.batch_size % ranks:
            raise PipelineError(f"{key}.batch_size = {self.batch_size} does not split over {ranks} processes"
                                " (resources.nproc x resources.nnodes); make it a multiple of that")
        if self.sampler_ranks > 1 and (self.sampler_ranks % ranks or self.batch_size % self.sampler_ranks):
            raise PipelineError(f"{key}.sampler_ranks = {self.sampler_ranks}: each of the {ranks} process(es)"
                                " (resources.nproc x resources.nnodes) emulates a whole number of ranks, each with a"
                                f" whole share of {key}.batch_size = {self.batch_size}; make sampler_ranks a multiple"
                                " of the processes and a divisor of the batch (or 1)")
        per_rank = self.batch_size // max(self.sampler_ranks, ranks)  # the engine's `rank_batch`
        if (self.mixup > 0 or self.cutmix > 0) and per_rank % 2:
            raise PipelineError(f"{key}.batch_size = {self.batch_size} over {max(ranks, self.sampler_ranks)} rank(s)"
                                f" is not an even batch per rank ({per_rank}), which mixup/cutmix need (timm's Mixup"
                                " pairs images); make it a multiple of 2 x the ranks (resources.nproc x"
                                f" resources.nnodes, or {key}.sampler_ranks)")



@dataclass(frozen=True)
class Resources:
    """Where and how fast a run goes, never what it computes (params.yaml `resources`).

    No training stage lists this section as a DVC param, and no checkpoint key contains it: changing a knob re-runs
    nothing, and a killed run resumes across the change. Each run records the values it ran with in its
    metrics.json. Knobs that change numbers in their last bits (float reduction order): threads, compile,
    channels_last, nproc/nnodes (DDP's all-reduce). Knobs that change the random draws: nproc/nnodes (each rank
    draws its own mixup pairs, drop-path masks) and data_on_device (the batched augmentation on the device instead of
    timm's per image); device (with amp: auto, CPU float32 vs GPU bf16/fp16). workers, sync_every and
    checkpoint_minutes change nothing.
    """

    device: Literal["auto", "cpu", "cuda"] = "auto"  #: 'cuda' stops at once where CUDA cannot run
    nproc: int = 1  #: processes (GPUs) per node, launched by torchrun
    nnodes: int = 1
    rdzv_endpoint: str = ""  #: host:port of the c10d rendezvous for multi-node runs
    rdzv_id: str = ""  #: c10d rendezvous id; '' = derived from the run's command, so concurrent runs never meet
    threads: int = 1  #: torch threads per process (on a GPU: its host work and compile workers)
    workers: int = 0  #: data-loader workers per process (persistent; each image's draws are seeded by its place)
    compile: bool = False  #: torch.compile (inductor; on CPU it needs a C++ compiler)
    channels_last: bool = False
    sync_every: int = 32  #: training steps between reads of the loss to the host (the NaN guard's delay)
    #: keep a dataset stored as tensors on the device and augment whole batches there (`pipeline.data.load.device`);
    #: 'auto': on a GPU when it fits; true also on CPU; false: DataLoader
    data_on_device: Literal["auto", True, False] = "auto"
    #: torch's fused Adam/AdamW kernel: one launch per step instead of foreach's hundreds (the same update to rounding)
    fused_optimizer: bool = False
    #: torch.compile's cache folder ('' = inductor's default, node-local): a path every cell shares (the project's, or
    #: the cluster's shared storage) compiles each distinct cell once instead of once per node
    compile_cache: str = ""
    #: minutes of training between resume checkpoints (written at an epoch's end); 0: after every epoch. SIGUSR1
    #: asks for one at the current epoch's end, SIGTERM for one and a stop (a cluster's time limit or preemption)
    checkpoint_minutes: float = 0.0

    def __post_init__(self):
        for name in ("nproc", "nnodes", "threads", "sync_every"):
            positive(f"resources.{name}", getattr(self, name))
        within("resources.workers", self.workers, 0, float("inf"))
        within("resources.checkpoint_minutes", self.checkpoint_minutes, 0, float("inf"))

    @property
    def ranks(self) -> int:
        return self.nproc * self.nnodes


#: One process on the machine's default device: what library calls that are not given resources use.
DEFAULT_RESOURCES = Resources()


@dataclass
class DataConfig:
    """Where datasets live and how much of them the runs use."""

    root: str = "data"  #: fetch stages write data/<dataset>/
    download: bool = True  #: allow downloads from the canonical sources
    fashion_mnist_mirror: str = "/usr/share/datasets/fashion-mnist"  #: Debian's dataset-fashion-mnist
    imagenet_path: str = ""  #: an extracted ImageNet-1K (train/ and val/ class folders); never downloaded
    folder_path: str = ""  #: the `folder` dataset: an ImageFolder tree with train/ and val/ (or test/)
    train_subset: int = 2000  #: the first n images of a class-stratified shuffle seeded by the run's seed; 0 = all
    val_subset: int = 1000  #: the first n of a fixed class-stratified shuffle of the eval split; 0 = all
    normalization: Literal["dataset", "imagenet"] = "dataset"  #: mean/std: the dataset's own, or ImageNet's

    def __post_init__(self):
        if self.train_subset < 0 or self.val_subset < 0:
            raise PipelineError("data.train_subset / data.val_subset must be >= 0 (0 = the whole split)")


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

    def __post_init__(self):
        for name in ("dim", "depth", "patch_size"):
            positive(f"filter_study.model.{name}", getattr(self, name))
        positive("filter_study.model.img_size", self.img_size, allow_none=True)
        check_kernel_size(self.kernel_size, "filter_study.model.kernel_size")
        check_convmixer_block(self.block, "filter_study.model.block")


@dataclass
class FilterStudyConfig:
    """ConvMixer with learned vs frozen spatial filters ([CI] Fig. 4 and Table 6)."""

    dataset: str = "fashion_mnist"
    filters: list = field(default_factory=list)
    seeds: list = field(default_factory=lambda: [20, 21, 22])
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

    def __post_init__(self):
        for name in self.filters:
            try:
                parse_study_variant(name, self.model.kernel_size)
            except PipelineError as exc:
                raise PipelineError(f"filter_study.filters: {exc}") from None
        for sigma in self.gaussian_sigmas:
            try:
                parse_filter(f"gaussian-{sigma}", self.model.kernel_size)
            except PipelineError as exc:
                raise PipelineError(f"filter_study.gaussian_sigmas: {exc}") from None
        for heads in self.gaussian_heads:
            if isinstance(heads, bool) or not isinstance(heads, int) or not 1 <= heads <= self.model.dim:
                raise PipelineError(f"filter_study.gaussian_heads: {heads!r} must be an integer between 1 and"
                                    f" filter_study.model.dim = {self.model.dim}")


@dataclass
class ReportConfig:
    """What the aggregate and the report show."""

    title: str = "Structured Initialization for Vision Transformers: reproduction report"
    convergence_epochs: list = field(default_factory=lambda: [2, 7])
    confidence: float = 0.95
    attention_layers: list = field(default_factory=lambda: [0, -1])

    def __post_init__(self):
        within("report.confidence", self.confidence, 0, 1, open_low=True, open_high=True)
        for e in self.convergence_epochs:
            if isinstance(e, bool) or not isinstance(e, int) or e < 1:
                raise PipelineError(f"report.convergence_epochs: {e!r} is not an epoch number >= 1")
        for layer in self.attention_layers:
            if isinstance(layer, bool) or not isinstance(layer, int):
                raise PipelineError(f"report.attention_layers: {layer!r} is not a layer index (0, 1, ..., -1)")


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

    def validate(self, key: str) -> None:
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

    def validate(self, key: str, grid: int | None) -> None:
        """Checks under `key`; `grid` is the token grid's side, which bounds the window (None: no impulse arm)."""
        check_fit_loop(self, key)
        positive(f"{key}.sigma", self.sigma)
        check_kernel_size(self.window, f"{key}.window")
        if grid is not None and self.window > 2 * grid - 1:
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

    def __post_init__(self):
        for alpha in self.alphas:
            if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 <= alpha <= 1:
                raise PipelineError(f"ci_alpha.alphas: {alpha!r} must be a number in [0, 1]")
        for arm in self.arms:
            choice("ci_alpha.arms", arm, CI_ARMS)
        self.model.validate("ci_alpha.model")
        grid = self.model.image_size // self.model.patch_size
        self.impulse_fit.validate("ci_alpha.impulse_fit", grid if "impulse" in self.arms else None)


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

    def __post_init__(self):
        for key, values, allowed in (("arms", self.arms, CI_MODEL3_ARMS), ("qk", self.qk, CI_QK),
                                     ("value", self.value, CI_VALUE), ("forms", self.forms, CI_FORMS)):
            for value in values:
                choice(f"ci_model3.{key}", value, allowed)
        self.model.validate("ci_model3.model")
        grid = self.model.image_size // self.model.patch_size
        self.impulse_fit.validate("ci_model3.impulse_fit", grid if "impulse" in self.arms else None)
        self.sensitivity_fit.validate("ci_model3.sensitivity_fit", grid if SENSITIVITY_ARM in self.arms else None)
        if "novalue" in self.value and self.model.heads * self.model.head_dim != self.model.dim:
            raise PipelineError(f"ci_model3.value: 'novalue' reads LN(x) as the heads' values, so ci_model3.model's"
                                f" heads x head_dim ({self.model.heads} x {self.model.head_dim}) must equal its dim"
                                f" ({self.model.dim}); change them or drop 'novalue'")


@dataclass
class SiaFitConfig(SiaFitOptions):
    """[SIA]'s impulse fit (code-2404's 'impulse3'; `pipeline.method.options.SiaFitOptions`)."""

    def validate(self, key: str) -> None:
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

    def __post_init__(self):
        for arch in self.bases:
            parse_sia_base(arch)
        for name in self.fits:
            parse_sia_fit(name)
        self.fit.validate("sia.fit")

    @property
    def enabled(self) -> bool:
        return bool(self.bases or self.fits)


@dataclass
class TeacherConfig:
    """One pretrained teacher of the weight-selection block: its init arm and pretraining-set size."""

    arm: InitMethod = "impulse"  #: the init the teacher is pretrained from (its section, e.g. `impulse`, applies)
    train_size: int = 0  #: the first n images of the pretraining set (a class-stratified shuffle); 0 = all

    def validate(self, key: str) -> None:
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


@dataclass
class TrainConfigCells:
    """Which grid cells the named training configurations run on (stages train_config@...): a part of the grid, so
    a profile with many variants need not run every configuration on each."""

    datasets: list = field(default_factory=lambda: ["fashion_mnist"])  #: each one of `datasets`
    variants: list = field(default_factory=lambda: ["vit"])  #: each a key of `models`


def _default_models() -> dict:
    """The CPU default's grid: ViT-Tiny's 3 heads at Fashion-MNIST's 28 px, a 7 x 7 token grid."""
    return {"vit": ModelConfig(img_size=28, patch_size=4, embed_dim=72, depth=6, num_heads=3, drop_path_rate=0.0)}


@dataclass
class SlurmConfig:
    """What `python -m pipeline repro --executor slurm` asks SLURM for, per training cell (see pipeline.scale.repro).

    Nodes and GPUs come from `resources` (resources.nnodes; resources.nproc GPUs per node). No stage reads this
    section for its result, so changing it re-runs nothing but `aggregate`, which reads the whole of params.yaml.
    A cell still running `signal_s` before its time limit is requeued (submitit's `max_num_timeout`, up to
    `requeues` times) and resumes from its last epoch's checkpoint.
    """

    partition: str = ""  #: sbatch --partition; '' = the cluster's default
    account: str = ""  #: sbatch --account; '' = your default account
    time: int = 240  #: minutes per job (sbatch --time); a cell that needs longer is requeued and resumes
    requeues: int = 3  #: times a cell is requeued at its time limit (then the runner reports it failed)
    signal_s: int = 90  #: seconds before the limit that SLURM signals the job to requeue itself (sbatch --signal)
    cpus_per_task: int = 0  #: CPUs per node; 0 = resources.nproc x (resources.threads + resources.workers)
    gpus: bool = True  #: ask for resources.nproc GPUs per node (false for a CPU partition; device cpu never asks)

    def __post_init__(self):
        if self.time <= 0:
            raise PipelineError(f"slurm.time = {self.time}: give the minutes one cell may run (a positive integer)")
        if self.requeues < 0 or self.signal_s < 0:
            raise PipelineError(f"slurm.requeues = {self.requeues}, slurm.signal_s = {self.signal_s}: must be >= 0")
        if self.cpus_per_task < 0:
            raise PipelineError(f"slurm.cpus_per_task = {self.cpus_per_task}: must be >= 0 (0 = from train)")


@dataclass
class Params:
    """The whole of params.yaml."""

    init: InitMethod = "impulse"  #: the method under study
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

    def __post_init__(self):
        for value in self.baselines:
            choice("baselines", value, INIT_METHODS)
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
    def arms(self) -> list[str]:
        """The method under study followed by the baselines, without repeats."""
        return list(dict.fromkeys([self.init, *self.baselines]))

    @property
    def variants(self) -> list[str]:
        """The model variants of the grid, in params.yaml's order."""
        return list(self.models)

    def method_options(self, method: str, variant: str | None = None) -> dict:
        """The keyword options `apply_init` takes for `method`, from its params section updated by
        `models.<variant>.init_options.<method>` (validated here, like the section itself)."""
        if variant is None:
            return dataclasses.asdict(getattr(self, method))
        key = f"models.{variant}.init_options"
        overrides = self.models[variant].init_options
        for arm, value in overrides.items():
            choice(key, arm, INIT_METHODS)
            if not isinstance(value, dict):
                raise PipelineError(f"{key}.{arm} = {value!r}: expected a mapping of {arm} options, e.g."
                                    " {impulse: {mixer: shift}}")
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

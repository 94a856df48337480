"""The shared core of params.yaml as typed, validated dataclasses: a model (`models.<variant>`), a training recipe
(`train`), where runs go (`resources`), the data (`data`), each init arm's section, your own inits (`inits`), the
report and SLURM.

Each section's keys and types are checked when built (`pipeline.schema.from_mapping`, by pydantic; choices are
`Literal` types), its ranges by its `check(key)` (run by `pipeline.schema.check_sections` with the key path it was
read from); a mistake stops with one `PipelineError` naming the key, the bad value and what is allowed. Each
experiment declares its own section in its module (`pipeline.experiments`);
`pipeline.params` assembles them into `Params` and loads params.yaml. What only the libraries can judge (a timm
model name, a keyword it takes, an optimizer name) is checked by `python -m pipeline check`, which builds every
planned run on the meta device. Nothing here imports torch.

Library functions never see params whole: each stage passes them the explicit values they need.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from pipeline.errors import PipelineError
from pipeline.method.names import (
    INIT_METHODS,
    WeightInit,
    check_kernel_size,
)
from pipeline.method.options import (
    DefaultOptions,
    ImpulseOptions,
    MimeticOptions,
)
from pipeline.method.plugins import locate
from pipeline.schema import choice, positive, within

__all__ = ["INIT_METHODS", "TrainConfig", "Resources", "ModelConfig", "DataConfig"]

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

    def check(self, key: str) -> None:
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

    def check(self, key: str) -> None:
        for name in ("norm_p", "norm_q", "norm_v"):
            positive(f"{key}.{name}", getattr(self, name))


@dataclass
class TimmInitConfig:
    """`timm` arm: timm's truncated-normal init (the paper text's description of its baseline)."""


@dataclass
class RandomInitConfig:
    """`random` arm: [CI]'s random query/key factors sqrt(1/D) U(-1, 1) (2401.12511 `random512_64`; no options)."""


@dataclass
class MimeticConfig(MimeticOptions):
    """`mimetic` arm (`pipeline.method.options.MimeticOptions`)."""

    def check(self, key: str) -> None:
        for name in ("alpha_qk", "beta_qk", "alpha_vo", "beta_vo"):
            within(f"{key}.{name}", getattr(self, name), 0, float("inf"))


@dataclass
class ImpulseConfig(ImpulseOptions):
    """`impulse` arm, the paper's method (`pipeline.method.options.ImpulseOptions`)."""

    def check(self, key: str) -> None:
        check_kernel_size(self.kernel_size, f"{key}.kernel_size")
        within(f"{key}.noise_std", self.noise_std, 0, float("inf"))
        for name in ("norm_p", "norm_q", "norm_v", "scale"):
            positive(f"{key}.{name}", getattr(self, name))


@dataclass(frozen=True)
class OwnInit:
    """An init of your own, an arm beside the built-in ones (params `inits.<arm>`; docs/own-init.md): the function
    `pipeline.method.plugins` describes, and the keyword options it is called with."""

    arm: str
    function: str  #: '<module>:<function>', a file of the repository
    options: dict = field(default_factory=dict)
    key: str = ""  #: the params key that names the function: inits.<arm>, or inits.<arm>.function

    @property
    def module(self) -> str:
        return self.function.split(":")[0]


def own_init(arm: object, value: object, root: Path) -> OwnInit:
    """params `inits.<arm>`: '<module>:<function>' or {function: '<module>:<function>', options: {...}}, the module a
    file under `root`, read but not run (params load without torch; `check` imports it)."""
    key = f"inits.{arm}"
    if not isinstance(arm, str) or not VARIANT_NAME.match(arm):
        raise PipelineError(f"inits: arm name {arm!r} may use only letters, digits, '_' and '.' (it appears in stage"
                            " names, where '-' separates the fields, and in results folders)")
    if arm in INIT_METHODS:
        raise PipelineError(f"{key}: {arm!r} is a built-in arm ({', '.join(INIT_METHODS)}); give your init a name of"
                            f" its own, e.g. my_{arm}")
    function, options, where = value, {}, key
    if isinstance(value, dict):
        unknown = sorted(map(str, set(value) - {"function", "options"}))
        if unknown or "function" not in value:
            raise PipelineError(f"{key}: {'unknown key(s) ' + ', '.join(unknown) if unknown else 'no function'};"
                                " write {function: '<module>:<function>', options: {...}}, or only"
                                " '<module>:<function>'")
        function, options, where = value["function"], value.get("options") or {}, f"{key}.function"
        if not isinstance(options, dict):
            raise PipelineError(f"{key}.options = {options!r}: expected a mapping of the function's keyword arguments,"
                                " e.g. {taps: 3}")
    locate(function, where, root)
    return OwnInit(arm, function, dict(options), where)


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
    #: step the schedule after every optimizer update (timm train.py's `--sched-on-updates`); false steps it once per
    #: epoch, as the official runs (timm's train.py without that flag; code-2401's CosineAnnealingLR) do: with a
    #: warm-up, the first epoch then runs at warmup_lr throughout
    sched_on_updates: bool = False
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
    #: with mixup or cutmix on, erase the mixed batch, as timm's PrefetchLoader does after FastCollateMixup (the
    #: official GPU runs); false: each image before the mix, as timm's train.py with --no-prefetcher does
    erase_after_mix: bool = True
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

    def check(self, key: str) -> None:
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

    def check(self, key: str) -> None:
        for name in ("nproc", "nnodes", "threads", "sync_every"):
            positive(f"{key}.{name}", getattr(self, name))
        within(f"{key}.workers", self.workers, 0, float("inf"))
        within(f"{key}.checkpoint_minutes", self.checkpoint_minutes, 0, float("inf"))

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
    #: {dataset: n}: n train-split images held out from every cell of that dataset (a fixed class-stratified draw,
    #: the same for every seed) and scored beside the test split; the comparisons the plan marks `holdout: true` are
    #: read over both. {} = none (the official code scores the test split alone)
    holdout: dict = field(default_factory=dict)
    normalization: Literal["dataset", "imagenet"] = "dataset"  #: mean/std: the dataset's own, or ImageNet's

    def check(self, key: str) -> None:
        if self.train_subset < 0 or self.val_subset < 0:
            raise PipelineError(f"{key}.train_subset / {key}.val_subset must be >= 0 (0 = the whole split)")
        bad = {k: v for k, v in (self.holdout or {}).items() if isinstance(v, bool) or not isinstance(v, int) or v < 0}
        if bad:
            name, value = next(iter(bad.items()))
            raise PipelineError(f"{key}.holdout.{name} = {value!r}: a number of training images >= 0 (0 = no"
                                " held-out pool)")


@dataclass
class ReportConfig:
    """What the aggregate and the report show."""

    title: str = "Structured Initialization for Vision Transformers: reproduction report"
    convergence_epochs: list = field(default_factory=lambda: [2, 7])
    confidence: float = 0.95
    attention_layers: list = field(default_factory=lambda: [0, -1])

    def check(self, key: str) -> None:
        within(f"{key}.confidence", self.confidence, 0, 1, open_low=True, open_high=True)
        for e in self.convergence_epochs:
            if isinstance(e, bool) or not isinstance(e, int) or e < 1:
                raise PipelineError(f"{key}.convergence_epochs: {e!r} is not an epoch number >= 1")
        for layer in self.attention_layers:
            if isinstance(layer, bool) or not isinstance(layer, int):
                raise PipelineError(f"{key}.attention_layers: {layer!r} is not a layer index (0, 1, ..., -1)")


#: sbatch options the runner sets from its own keys: where to say them instead
SBATCH_OWN = {"nodes": "set resources.nnodes", "ntasks-per-node": "one task per node, always",
              "cpus-per-task": "set slurm.cpus_per_task", "time": "set slurm.time", "signal": "set slurm.signal_s",
              "job-name": "each job is named after its stage", "gpus-per-node": "set resources.nproc",
              "partition": "set slurm.partition", "account": "set slurm.account",
              "output": "the runner's log of the stage is submitit's", "error": "stderr joins the stage's log",
              "array": "each cell is a job of its own"}


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
    #: CPUs per node; 0 = resources.nproc x (resources.threads + the loader workers its data path starts: none
    #: where the batches are built on the GPU, `resources.data_on_device`)
    cpus_per_task: int = 0
    gpus: bool = True  #: ask for resources.nproc GPUs per node (false for a CPU partition; device cpu never asks)
    #: any other sbatch option your site asks for, as {long option: value}, e.g. {qos: high, constraint: a100,
    #: mem: 64G, gres: 'gpu:a100:8'}; true for a flag (exclusive: true). The options this section or `resources`
    #: set are refused here (say them through their own key)
    options: dict = field(default_factory=dict)

    def check(self, key: str) -> None:
        if self.time <= 0:
            raise PipelineError(f"{key}.time = {self.time}: give the minutes one cell may run (a positive integer)")
        if self.requeues < 0 or self.signal_s < 0:
            raise PipelineError(f"{key}.requeues = {self.requeues}, {key}.signal_s = {self.signal_s}: must be >= 0")
        if self.cpus_per_task < 0:
            raise PipelineError(f"{key}.cpus_per_task = {self.cpus_per_task}: must be >= 0 (0 = from train)")
        for option, value in (self.options or {}).items():
            flag = str(option).replace("_", "-")
            if not re.fullmatch(r"[a-z][a-z0-9-]*", flag):
                raise PipelineError(f"{key}.options.{option}: not an sbatch long option (e.g. qos, constraint, mem)")
            if flag in SBATCH_OWN:
                raise PipelineError(f"{key}.options.{option}: the runner sets --{flag} itself; {SBATCH_OWN[flag]}")
            if value is False or value is None or isinstance(value, dict | list):
                raise PipelineError(f"{key}.options.{option} = {value!r}: give a string or number (true for a flag);"
                                    " remove the key to leave the option out")

"""From validated params to the objects a run uses: models, loaders, the model's facts.

The glue between `pipeline.config` and the libraries (`pipeline.models`, `pipeline.inits`, `pipeline.data`):
every stage that builds a model (train, filter study, attention, figures, check) builds it here, from the
dataset's facts as `fetch` recorded them (`pipeline.data.meta.dataset_meta`), so a model is built the same way
wherever it is rebuilt.
"""

from __future__ import annotations

import dataclasses

import timm
import torch
from torch import nn

from pipeline.config import ConvMixerConfig, DataConfig, ModelConfig, Params, TrainConfig
from pipeline.data import device as device_data
from pipeline.data.loaders import Loaders, build_loaders
from pipeline.data.meta import DatasetMeta
from pipeline.data.transforms import Augment
from pipeline.engine import Dist
from pipeline.errors import PipelineError
from pipeline.inits import apply_init
from pipeline.inits.arch import attention_layers, family
from pipeline.mixed_attention import mix_attention_input
from pipeline.models import ConvMixer, build_convmixer, create_timm_model

#: The ModelConfig fields passed to `timm.create_model` by name (None values keep timm's own).
TIMM_FIELDS = ("img_size", "patch_size", "embed_dim", "depth", "num_heads", "mlp_ratio", "class_token",
               "global_pool")


def input_size(model: ModelConfig, meta: DatasetMeta) -> tuple[int, int]:
    """(image side, channels) the model takes: the variant's, else timm's default size and the data's channels."""
    size = model.img_size or timm.models.get_pretrained_cfg(model.name).input_size[-1]
    return size, model.in_chans or meta.channels


def timm_model(model: ModelConfig, meta: DatasetMeta) -> nn.Module:
    """The variant's timm model for this dataset, with the constructor's own init (apply an arm next)."""
    overrides = {k: getattr(model, k) for k in TIMM_FIELDS} | model.extra  # e.g. Swin's per-stage num_heads
    return create_timm_model(model.name, num_classes=meta.num_classes, in_chans=input_size(model, meta)[1],
                             weight_init=model.weight_init, drop_rate=model.drop_rate,
                             drop_path_rate=model.drop_path_rate, **overrides)


def vit(params: Params, variant: str, arm: str, meta: DatasetMeta, seed: int) -> nn.Module:
    """Model variant `variant` of the grid for this dataset, initialized by `arm` (seeded by `seed`)."""
    return initialized(params.models[variant], arm, params.method_options(arm), meta, seed)


def initialized(model_cfg: ModelConfig, arm: str, options: dict, meta: DatasetMeta, seed: int,
                alpha: float | None = None) -> nn.Module:
    """The timm model of `model_cfg` for this dataset, initialized by `arm` with `options` from a generator seeded
    by `seed`; with `alpha`, its attention input is [CI]'s alpha-mixed one (`pipeline.mixed_attention`), swapped in
    before the init so that the init sees the model it will train."""
    torch.manual_seed(seed)  # anything the constructor draws; apply_init redefines what the method depends on
    model = timm_model(model_cfg, meta)
    if alpha is not None:
        mix_attention_input(model, alpha)
    return apply_init(model, arm, generator=torch.Generator().manual_seed(seed), **options)


def model_facts(variant: str, model_cfg: ModelConfig, model: nn.Module) -> dict:
    """What a ViT-family run records about its model: variant, timm name, family and (first-stage) heads."""
    kind = family(model)
    layers = attention_layers(model, kind)
    return {"variant": variant, "model": model_cfg.name, "family": kind,
            "num_heads": int(layers[0].num_heads) if layers else None}


def convmixer_input(cfg: ConvMixerConfig, meta: DatasetMeta) -> tuple[int, int]:
    """(image side, channels) the filter study's ConvMixer takes: its img_size, else the data's stored side."""
    return cfg.img_size or meta.image_size, meta.channels


def convmixer(cfg: ConvMixerConfig, variant: str, heads: int | None, meta: DatasetMeta, seed: int) -> ConvMixer:
    """The filter study's ConvMixer for this dataset (learned or frozen `variant` filters), seeded by `seed`."""
    torch.manual_seed(seed)
    return build_convmixer(variant, dim=cfg.dim, depth=cfg.depth, kernel_size=cfg.kernel_size,
                           patch_size=cfg.patch_size, in_chans=meta.channels, num_classes=meta.num_classes,
                           img_size=convmixer_input(cfg, meta)[0], heads=heads,
                           generator=torch.Generator().manual_seed(seed))


def loaders(data: DataConfig, dataset: str, img_size: int, in_chans: int, seed: int, recipe: TrainConfig,
            d: Dist) -> Loaders:
    """The dataset's train/val loaders for one process of a run (the global batch split over processes): DataLoaders,
    or for an in-memory dataset under `train.data_on_device` the device-resident batches of `pipeline.data.device`."""
    if recipe.batch_size % d.world_size:
        raise PipelineError(f"train.batch_size = {recipe.batch_size} is not divisible by the {d.world_size}"
                            " processes; make it a multiple of train.nproc x train.nnodes")
    augment = Augment.from_train(recipe)
    built = build_loaders(dataset, data.root, img_size=img_size, in_chans=in_chans,
                          batch_size=recipe.batch_size // d.world_size, seed=seed, augment=augment,
                          rank=d.rank, world_size=d.world_size, workers=recipe.workers,
                          train_subset=data.train_subset, val_subset=data.val_subset,
                          normalization=data.normalization, pin_memory=d.device.type == "cuda")
    if device_data.choose(recipe.data_on_device, built, augment, d.device):  # train.data_on_device
        return device_data.device_loaders(built, img_size=img_size, augment=augment, device=d.device)
    return built


def with_batch(recipe: TrainConfig, batch_size: int) -> TrainConfig:
    """The recipe with another batch size (evaluation-only uses such as the attention stage's image batch)."""
    return dataclasses.replace(recipe, batch_size=batch_size)

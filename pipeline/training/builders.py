"""From validated params to the grid's models: the initialized timm models and what a run records about them.

The glue between `pipeline.config` and the libraries (`pipeline.method`, `pipeline.data.load`): every stage that
builds a grid model (train, attention, figures, check) builds it here, from the dataset's facts as
`fetch` recorded them (`pipeline.data.meta.dataset_meta`), so a model is built the same way wherever it is rebuilt.
The filter study's ConvMixer and [CI]'s Simple ViT are built in their stage modules (`pipeline.training.filter_study`,
`pipeline.training.ci_alpha`).
"""

from __future__ import annotations

import dataclasses

import timm
import torch
from torch import nn

from pipeline.config import ModelConfig, Params, TrainConfig
from pipeline.data.meta import DatasetMeta
from pipeline.method.inits import apply_init
from pipeline.method.inits.arch import attention_layers, family
from pipeline.method.models import create_timm_model

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
    return initialized(params.models[variant], arm, params.method_options(arm, variant), meta, seed)


def initialized(model_cfg: ModelConfig, arm: str, options: dict, meta: DatasetMeta, seed: int) -> nn.Module:
    """The timm model of `model_cfg` for this dataset, initialized by `arm` with `options` from a generator seeded
    by `seed`."""
    torch.manual_seed(seed)  # anything the constructor draws; apply_init redefines what the method depends on
    model = timm_model(model_cfg, meta)
    return apply_init(model, arm, generator=torch.Generator().manual_seed(seed), **options)


def model_facts(variant: str, model_cfg: ModelConfig, model: nn.Module) -> dict:
    """What a ViT-family run records about its model: variant, timm name, family and (first-stage) heads."""
    kind = family(model)
    layers = attention_layers(model, kind)
    return {"variant": variant, "model": model_cfg.name, "family": kind,
            "num_heads": int(layers[0].num_heads) if layers else None}


def with_batch(recipe: TrainConfig, batch_size: int) -> TrainConfig:
    """The recipe with another batch size (evaluation-only uses such as the attention stage's image batch)."""
    return dataclasses.replace(recipe, batch_size=batch_size)

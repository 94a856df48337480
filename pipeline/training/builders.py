"""The grid's timm models, initialized, built in one place from a model section and the dataset's facts
(`pipeline.data.meta`), so a model is the same wherever it is rebuilt."""

from __future__ import annotations

import timm
import torch
from torch import nn

from pipeline.data.meta import DatasetMeta
from pipeline.method.inits import apply_init
from pipeline.method.inits.arch import attention_layers, family
from pipeline.method.models import create_timm_model

#: The ModelConfig fields passed to `timm.create_model` by name (None values keep timm's own).
TIMM_FIELDS = ("img_size", "patch_size", "embed_dim", "depth", "num_heads", "mlp_ratio", "class_token",
               "global_pool")


def input_size(model, meta: DatasetMeta) -> tuple[int, int]:
    """(image side, channels) the model takes: the variant's, else timm's default size and the data's channels."""
    size = model.img_size or timm.models.get_pretrained_cfg(model.name).input_size[-1]
    return size, model.in_chans or meta.channels


def timm_model(model, meta: DatasetMeta) -> nn.Module:
    """The variant's timm model for this dataset, with the constructor's own init (apply an arm next)."""
    overrides = {k: getattr(model, k) for k in TIMM_FIELDS} | model.extra  # e.g. Swin's per-stage num_heads
    return create_timm_model(model.name, num_classes=meta.num_classes, in_chans=input_size(model, meta)[1],
                             weight_init=model.weight_init, drop_rate=model.drop_rate,
                             drop_path_rate=model.drop_path_rate, **overrides)


def initialized(model_cfg, arm: str, options: dict, meta: DatasetMeta, seed: int) -> nn.Module:
    """The timm model of `model_cfg` for this dataset, initialized by `arm` with `options`, seeded by `seed`."""
    torch.manual_seed(seed)  # anything the constructor draws; apply_init redefines what the method depends on
    model = timm_model(model_cfg, meta)
    return apply_init(model, arm, generator=torch.Generator().manual_seed(seed), **options)


def model_facts(variant: str, model_cfg, model: nn.Module) -> dict:
    kind = family(model)
    layers = attention_layers(model, kind)
    return {"variant": variant, "model": model_cfg.name, "family": kind,
            "num_heads": int(layers[0].num_heads) if layers else None}

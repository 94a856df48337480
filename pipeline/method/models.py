"""The model factory: `create_timm_model`, timm's `create_model` with the project's error messages."""

from __future__ import annotations

import difflib
import inspect
import re
import sys

import timm
import torch
from timm.layers import PatchEmbed
from timm.models import build_model_with_cfg
from timm.models.mlp_mixer import MixerBlock, MlpMixer
from timm.models.swin_transformer import SwinTransformer
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from pipeline.errors import PipelineError
from pipeline.method.names import WEIGHT_INIT_MODES

#: The timm families the initialization methods handle (DeiT models are VisionTransformer subclasses).
SUPPORTED_FAMILIES = (VisionTransformer, SwinTransformer, MlpMixer)


def create_timm_model(name: str, *, num_classes: int, in_chans: int, weight_init: str = "skip",
                      **overrides) -> nn.Module:
    """`timm.create_model(name, pretrained=False, ...)` for a ViT/DeiT, Swin or MLP-Mixer, with PipelineErrors that name
    a bad name or keyword (and close matches) or an impossible shape. weight_init 'skip' (code-2505's) leaves
    PyTorch's defaults and an uninitialised pos_embed: apply an init before running it. Overrides that are None are
    dropped, so a params.yaml `null` keeps timm's value."""
    if not timm.is_model(name):
        close = difflib.get_close_matches(name, timm.list_models(), n=5, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see timm.list_models('vit_*')"
        raise PipelineError(f"model {name!r}: not a timm model name{hint}")
    if weight_init not in WEIGHT_INIT_MODES:
        raise PipelineError(
            f"weight_init = {weight_init!r}: allowed are {', '.join(map(repr, WEIGHT_INIT_MODES))} "
            "('skip' = PyTorch defaults as in the official code, '' = timm's own init)"
        )
    kwargs = {k: v for k, v in overrides.items() if v is not None}
    kwargs.update(num_classes=num_classes, in_chans=in_chans)
    try:
        model = _build(name, kwargs, weight_init)
    except TypeError as exc:
        raise _keyword_error(name, exc) from None
    except AssertionError as exc:
        raise _combination_error(name, kwargs, exc) from None
    _check_family(name, model)
    _check_patch_grid(name, model)
    return model


def _build(name: str, kwargs: dict, weight_init: str) -> nn.Module:
    try:
        return timm.create_model(name, pretrained=False, weight_init=weight_init, **kwargs)
    except TypeError as exc:
        no_weight_init = "unexpected keyword argument 'weight_init'" in str(exc)
        if not no_weight_init and "got multiple values for keyword argument" not in str(exc):
            raise
        if weight_init not in ("skip", "reset", ""):
            raise PipelineError(
                f"weight_init = {weight_init!r}: {name} has no timm init modes; use 'skip' (PyTorch defaults) "
                "or '' (timm's own init)"
            ) from None
        if no_weight_init:
            model = timm.create_model(name, pretrained=False, **kwargs)
        else:
            model = _build_mixer(name, kwargs, exc)
    return _emulate_weight_init(model, weight_init)


def _build_mixer(name: str, kwargs: dict, exc: TypeError) -> nn.Module:
    with torch.device("meta"):
        reference = timm.create_model(name, pretrained=False)
    if type(reference) is not MlpMixer or type(reference.blocks[0]) is not MixerBlock:
        raise PipelineError(f"model {name!r}: timm's entrypoint fixes an argument you override ({exc})")
    block, dim = reference.blocks[0], reference.embed_dim
    arch = dict(
        patch_size=reference.stem.patch_size[0],
        num_blocks=len(reference.blocks),
        embed_dim=dim,
        mlp_ratio=(block.mlp_tokens.fc1.out_features / dim, block.mlp_channels.fc1.out_features / dim),
    )
    return build_model_with_cfg(MlpMixer, name, False, **{**arch, **kwargs})


def _emulate_weight_init(model: nn.Module, weight_init: str) -> nn.Module:
    """For models without a weight_init option: '' keeps timm's init, 'skip'/'reset' reset to PyTorch's."""
    if weight_init in ("skip", "reset"):
        for module in model.modules():
            if module is not model and hasattr(module, "reset_parameters"):
                module.reset_parameters()
    return model


def _check_family(name: str, model: nn.Module) -> None:
    if not isinstance(model, SUPPORTED_FAMILIES):
        raise PipelineError(
            f"model {name!r} is a {type(model).__name__}; the initialization methods handle timm "
            "ViT/DeiT (VisionTransformer), Swin (SwinTransformer) and MLP-Mixer (MlpMixer) models only"
        )


def _keyword_error(name: str, exc: TypeError) -> Exception:
    found = re.search(r"(\w+)\.__init__\(\) got an unexpected keyword argument '(\w+)'", str(exc))
    if not found:
        return exc
    cls_name, keyword = found.groups()
    accepted = _keywords_of(name, cls_name)
    close = difflib.get_close_matches(keyword, accepted, n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    listing = f"; it takes: {', '.join(accepted)}" if accepted else ""
    return PipelineError(
        f"model {name!r} ({cls_name}) does not take the keyword {keyword!r}{hint}: remove or rename it in "
        f"the model section / model.extra{listing}"
    )


def _keywords_of(name: str, cls_name: str) -> list[str]:
    module = sys.modules[timm.models.model_entrypoint(name).__module__]
    cls = getattr(module, cls_name, None)
    names: set[str] = set()
    for base in getattr(cls, "__mro__", ()):
        if "__init__" in vars(base) and base is not nn.Module and base is not object:
            params = inspect.signature(base.__init__).parameters.values()
            names |= {p.name for p in params if p.kind is p.KEYWORD_ONLY or p.kind is p.POSITIONAL_OR_KEYWORD}
    return sorted(names - {"self", "device", "dtype"})


def _combination_error(name: str, kwargs: dict, exc: AssertionError) -> PipelineError:
    shown = {k: kwargs[k] for k in ("embed_dim", "num_heads", "depths", "window_size") if k in kwargs}
    fix = "choose values timm accepts"
    if "divisible by num_heads" in str(exc):
        fix = "choose num_heads that divides embed_dim"
        if isinstance(kwargs.get("embed_dim"), int):
            dim = kwargs["embed_dim"]
            fix += f" (divisors of {dim}: {', '.join(str(d) for d in range(1, 25) if dim % d == 0)})"
    return PipelineError(f"model {name!r} with {shown}: timm refused the combination ({exc}); {fix}")


def _check_patch_grid(name: str, model: nn.Module) -> None:
    """img_size must be a multiple of patch_size: timm would silently drop the border pixels otherwise."""
    embed = next((m for m in model.modules() if isinstance(m, PatchEmbed)), None)
    if embed is None or embed.img_size is None:
        return
    for size, patch in zip(embed.img_size, embed.patch_size):
        if size % patch:
            raise PipelineError(
                f"model {name!r}: img_size {size} is not divisible by patch_size {patch} (the last "
                f"{size % patch} pixels would be dropped); use img_size {size - size % patch} or "
                f"{size - size % patch + patch}, or a patch_size that divides {size}"
            )

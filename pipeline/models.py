"""Model factories: timm ViT/DeiT, Swin and MLP-Mixer (`create_timm_model`), and the filter study's ConvMixer.

`create_timm_model` is `timm.create_model` with the project's error messages; the initialization methods
(`pipeline.inits`) are applied to its result. `build_convmixer` builds [CI]'s ConvMixer with learned or frozen
spatial filters from `pipeline.filters` (paper.md section 1.3).
"""

from __future__ import annotations

import difflib
import inspect
import math
import re
import sys
from collections.abc import Callable

import timm
import torch
import torch.nn.functional as F
from timm.layers import PatchEmbed
from timm.models import build_model_with_cfg
from timm.models.convmixer import ConvMixer as TimmConvMixer
from timm.models.mlp_mixer import MixerBlock, MlpMixer
from timm.models.swin_transformer import SwinTransformer
from timm.models.vision_transformer import VisionTransformer
from torch import Tensor, nn

from pipeline.errors import PipelineError
from pipeline.filters import check_heads, head_assignment, make_filters, make_perm
from pipeline.vocabulary import (
    WEIGHT_INIT_MODES,
    FilterFamily,
    check_kernel_size,
    parse_filter,
    parse_study_variant,
)

#: The timm families the initialization methods handle (DeiT models are VisionTransformer subclasses).
SUPPORTED_FAMILIES = (VisionTransformer, SwinTransformer, MlpMixer)


def create_timm_model(name: str, *, num_classes: int, in_chans: int, weight_init: str = "skip",
                      **overrides) -> nn.Module:
    """Build a timm ViT/DeiT, Swin or MLP-Mixer from scratch: `timm.create_model(name, pretrained=False, ...)`.

    Args:
        name: a timm model name, e.g. `vit_tiny_patch16_224`, `swin_tiny_patch4_window7_224`, `mixer_s16_224`.
        num_classes: classifier outputs.
        in_chans: image channels.
        weight_init: timm's init mode. 'skip' (the official code's choice, paper.md section 1.1) leaves every
            layer at PyTorch's default (Linear/conv kaiming_uniform(a=sqrt 5)). '' is timm's own init;
            'reset' (timm >= 1.0.2x) is PyTorch's defaults plus timm's pos_embed/cls_token init.
        **overrides: any other create_model keyword (img_size, patch_size, embed_dim, depth, num_heads;
            Swin's depths/num_heads tuples and window_size; Mixer's num_blocks). None values are dropped,
            so a params.yaml `null` keeps timm's value.

    Notes:
        - In timm 1.0.31, 'skip' leaves a ViT's `pos_embed` and `cls_token` as *uninitialised memory* (timm
          1.0.22, which code-2505 used, drew pos_embed ~ 0.02*randn and zeroed cls_token). The init methods
          in `pipeline.inits` set both; do not run a ViT built with 'skip' before applying one.
        - MLP-Mixer takes no `weight_init` and its timm entrypoints fix patch_size, num_blocks and
          embed_dim. We emulate 'skip' by resetting every layer to PyTorch's default, and build timm's
          `MlpMixer` class directly when one of the fixed arguments is overridden.

    Raises:
        PipelineError: unknown name (with close names), a keyword the model does not take (named, with
            close keywords), embed_dim not divisible by num_heads, img_size not divisible by patch_size, or a
            model outside the supported families.
    """
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
    """create_model, falling back to the model class for Mixer's fixed arguments and missing weight_init."""
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
    """Build a plain MLP-Mixer whose entrypoint fixes an overridden argument (e.g. patch_size)."""
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
    """Turn timm's 'unexpected keyword argument' TypeError into a PipelineError naming the keyword."""
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
    """The constructor keywords of the timm class `cls_name` behind `name` (following **kwargs to bases)."""
    module = sys.modules[timm.models.model_entrypoint(name).__module__]
    cls = getattr(module, cls_name, None)
    names: set[str] = set()
    for base in getattr(cls, "__mro__", ()):
        if "__init__" in vars(base) and base is not nn.Module and base is not object:
            params = inspect.signature(base.__init__).parameters.values()
            names |= {p.name for p in params if p.kind is p.KEYWORD_ONLY or p.kind is p.POSITIONAL_OR_KEYWORD}
    return sorted(names - {"self", "device", "dtype"})


def _combination_error(name: str, kwargs: dict, exc: AssertionError) -> PipelineError:
    """Turn timm's assertion about an impossible shape combination into a PipelineError."""
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


class SharedFilters(nn.Module):
    """`heads` distinct spatial-mixing weights shared over C channels (code-2401 `SpatialConv2d`).

    Channel c uses `weight[choice[c]]`. Frozen weights and biases are parameters with requires_grad=False:
    they stay in the state dict and move with `.to()`, but get no gradient, so every optimizer leaves them
    unchanged (timm's `create_optimizer_v2` leaves them out of its groups).

    Args:
        weight: (heads, ...) the distinct filters or matrices.
        choice: (C,) long, which filter each channel uses (`pipeline.filters.head_assignment`).
        bias: (C,) per-channel bias (code-2401 has one; frozen with the filters, as there).
        trainable: False freezes weight and bias.
    """

    def __init__(self, weight: Tensor, choice: Tensor, bias: Tensor, trainable: bool):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=trainable)
        self.bias = nn.Parameter(bias, requires_grad=trainable)
        self.register_buffer("choice", choice.long())

    def per_channel(self) -> Tensor:
        """The (C, ...) weights each channel applies."""
        return self.weight[self.choice]


class SpatialConv(SharedFilters):
    """Depthwise k x k conv with zero 'same' padding; the weight is (heads, k, k)."""

    def forward(self, x: Tensor) -> Tensor:
        k = self.weight.shape[-1]
        return F.conv2d(x, self.per_channel().unsqueeze(1), self.bias, padding=k // 2, groups=len(self.choice))


class SpatialLinear(SharedFilters):
    """Token mixing by N x N matrices, code-2401's linear format: y[b, c] = x[b, c] @ M[choice[c]]^T + bias[c].

    Needed for `perm`, which has no convolutional structure; any conv filter can be run this way too
    (`pipeline.filters.linear_format`). The weight is (heads, N, N) for an H x W grid, N = H*W.
    """

    def __init__(self, weight: Tensor, choice: Tensor, bias: Tensor, trainable: bool, grid: tuple[int, int]):
        super().__init__(weight, choice, bias, trainable)
        self.grid = tuple(grid)

    def forward(self, x: Tensor) -> Tensor:
        if tuple(x.shape[-2:]) != self.grid:
            raise PipelineError(
                f"SpatialLinear mixes a fixed {self.grid[0]}x{self.grid[1]} token grid, got "
                f"{x.shape[-2]}x{x.shape[-1]}: build the model with the img_size of the data"
            )
        y = torch.einsum("bcn,cmn->bcm", x.flatten(2), self.per_channel()) + self.bias[:, None]
        return y.reshape(x.shape)


class ConvMixer(TimmConvMixer):
    """Trockman & Kolter's ConvMixer (timm's `ConvMixer`) with a pluggable spatial-mixing layer.

    stem: conv patch x patch, stride patch -> GELU -> BatchNorm; then depth x [Residual(spatial mixing ->
    GELU -> BatchNorm), 1x1 conv -> GELU -> BatchNorm]; global average pooling; linear head. The GELU after
    the spatial mixing follows [SIA] (code-2404) and timm; [CI]'s conv-format block omits it, which its own
    code comment calls a bug, while [CI]'s linear-format block has it (paper.md sections 1.3 and 4.16).

    Args:
        dim, depth, kernel_size, patch_size, in_chans, num_classes: as in timm's ConvMixer.
        spatial: called once per block (in order) to make its spatial-mixing layer, e.g. a `SpatialConv`;
            None keeps timm's learned depthwise `nn.Conv2d`.
        generator: if given, the stem, the 1x1 convs and the head are drawn from it with PyTorch's default
            init (kaiming_uniform(a=sqrt 5), bias U(+-1/sqrt(fan_in))), and the global RNG is left as it was.
    """

    def __init__(self, dim: int, depth: int, kernel_size: int, patch_size: int, in_chans: int, num_classes: int,
                 spatial: Callable[[], nn.Module] | None = None, generator: torch.Generator | None = None):
        with torch.random.fork_rng(devices=[], enabled=generator is not None):  # leave the global RNG alone
            super().__init__(dim, depth, kernel_size, patch_size, in_chans, num_classes)
        if spatial is not None:
            for block in self.blocks:
                block[0].fn[0] = spatial()
        if generator is not None:
            for module in self.modules():
                if isinstance(module, nn.Conv2d | nn.Linear):
                    _pytorch_default_init(module, generator)

    def spatial_layers(self) -> list[nn.Module]:
        """The spatial-mixing layer of each block."""
        return [block[0].fn[0] for block in self.blocks]


def _pytorch_default_init(layer: nn.Conv2d | nn.Linear, generator: torch.Generator) -> None:
    """PyTorch's `reset_parameters` for Linear/Conv, drawn from `generator`."""
    nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=generator)
    if layer.bias is not None:
        bound = 1 / math.sqrt(layer.weight[0].numel())
        nn.init.uniform_(layer.bias, -bound, bound, generator=generator)


def build_convmixer(
    variant: str,
    *,
    dim: int,
    depth: int,
    kernel_size: int,
    patch_size: int,
    in_chans: int,
    num_classes: int,
    img_size: int,
    heads: int | None = None,
    generator: torch.Generator | None = None,
) -> ConvMixer:
    """The ConvMixer of the filter study ([CI] Fig. 4 and Table 6; code-2401 `convmixer.py`).

    Args:
        variant: 'learned' (trainable filters drawn U(-1/k, 1/k), which is code-2401's `random` init and
            also PyTorch's default conv init for a depthwise k x k conv), or a frozen family understood by
            `pipeline.filters.parse_filter`: random, impulse, box-<n>, gaussian-<sigma>, perm.
        dim, depth, kernel_size, patch_size: the ConvMixer (paper: 512, 6, 5, 2).
        in_chans, num_classes, img_size: the data; img_size sets the token grid of `perm`.
        heads: number of distinct filters shared over the dim channels; None = one per channel.
        generator: the only source of randomness; None uses a fresh generator seeded 0.

    Each block draws its own filters. Spatial biases are drawn U(+-1/k) (conv) or U(+-1/dim) (perm), as in
    code-2401, and are frozen with the filters.
    """
    generator = generator if generator is not None else torch.Generator().manual_seed(0)
    _check_sizes(dim=dim, depth=depth, patch_size=patch_size, in_chans=in_chans, num_classes=num_classes,
                 img_size=img_size)
    check_kernel_size(kernel_size)
    heads = dim if heads is None else heads
    check_heads(dim, heads)
    family, trainable = _spatial_family(variant, kernel_size)
    grid = (img_size // patch_size,) * 2

    def spatial() -> nn.Module:
        choice = head_assignment(dim, heads, generator)
        if family.linear_format:
            weight = torch.stack([make_perm(grid[0] * grid[1], generator) for _ in range(heads)])
            return SpatialLinear(weight, choice, _uniform(dim, 1 / dim, generator), trainable, grid)
        weight = make_filters(family, heads, kernel_size, generator)
        return SpatialConv(weight, choice, _uniform(dim, 1 / kernel_size, generator), trainable)

    return ConvMixer(dim, depth, kernel_size, patch_size, in_chans, num_classes, spatial, generator)


def _uniform(n: int, bound: float, generator: torch.Generator) -> Tensor:
    return (2 * torch.rand(n, generator=generator) - 1) * bound


def _check_sizes(**sizes: int) -> None:
    for key, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise PipelineError(f"ConvMixer {key} = {value!r}: must be a positive integer")
    if sizes["img_size"] % sizes["patch_size"]:
        raise PipelineError(
            f"img_size {sizes['img_size']} is not divisible by patch_size {sizes['patch_size']}: choose a "
            "patch_size that divides it (the stem would drop the border pixels)"
        )


def _spatial_family(variant: str, kernel_size: int) -> tuple[FilterFamily, bool]:
    """(family, trainable) of a study variant: 'learned' is code-2401's `random` init, trained."""
    family = parse_study_variant(variant, kernel_size)
    return (parse_filter("random"), True) if family is None else (family, False)

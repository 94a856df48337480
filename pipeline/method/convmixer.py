"""The filter study's ConvMixer with learned or frozen spatial filters ([CI] Fig. 4, Table 6), in
[CI]'s block (spatial conv -> BatchNorm, code-2401) or [SIA]'s (spatial conv -> GELU -> BatchNorm, code-2404)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from timm.models.convmixer import ConvMixer as TimmConvMixer
from torch import Tensor, nn

from pipeline.errors import PipelineError
from pipeline.method.filters import check_heads, head_assignment, make_filters, make_token_mixer, softmax_taps
from pipeline.method.names import check_convmixer_block, check_kernel_size, parse_study_variant


class SharedFilters(nn.Module):
    """`heads` distinct spatial-mixing weights shared over C channels (code-2401 `SpatialConv2d`); channel c uses
    `weight[choice[c]]`. trainable=False stores weight and bias (code-2401 has one per channel) with
    requires_grad=False, so no optimizer moves them."""

    def __init__(self, weight: Tensor, choice: Tensor, bias: Tensor, trainable: bool):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=trainable)
        self.bias = nn.Parameter(bias, requires_grad=trainable)
        self.register_buffer("choice", choice.long())

    def per_channel(self) -> Tensor:
        return self.weight[self.choice]


class SpatialConv(SharedFilters):
    """Depthwise k x k conv with zero 'same' padding on (heads, k, k) weights. With `softmax=True` ([CI]'s rand*) every
    forward applies `softmax_taps` of the stored taps, as code-2401's `SpatialConv2d.forward`."""

    def __init__(self, weight: Tensor, choice: Tensor, bias: Tensor, trainable: bool, softmax: bool = False):
        super().__init__(weight, choice, bias, trainable)
        self.softmax = softmax

    def per_channel(self) -> Tensor:
        """The (C, k, k) filters each channel applies (after the softmax over taps, for `softmax`)."""
        weight = softmax_taps(self.weight) if self.softmax else self.weight
        return weight[self.choice]

    def forward(self, x: Tensor) -> Tensor:
        k = self.weight.shape[-1]
        return F.conv2d(x, self.per_channel().unsqueeze(1), self.bias, padding=k // 2, groups=len(self.choice))


class SpatialLinear(SharedFilters):
    """Token mixing by N x N matrices, code-2401's linear format: y[b, c] = x[b, c] @ M[choice[c]]^T + bias[c]; needed
    for `perm` and `fullperm`, which have no convolutional form."""

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
    """Trockman & Kolter's ConvMixer (timm's `ConvMixer`) with a pluggable spatial-mixing layer (`spatial`, called once
    per block; None keeps timm's learned depthwise conv). The GELU after the spatial mixing is [SIA]'s (code-2404) and
    timm's; [CI]'s conv-format block omits it, which its own code comment calls a bug (code-2401's "missing GeLU
    here"): `spatial_gelu=False` gives [CI]'s block."""

    def __init__(self, dim: int, depth: int, kernel_size: int, patch_size: int, in_chans: int, num_classes: int,
                 spatial: Callable[[], nn.Module] | None = None, generator: torch.Generator | None = None,
                 spatial_gelu: bool = True):
        with torch.random.fork_rng(devices=[], enabled=generator is not None):  # leave the global RNG alone
            super().__init__(dim, depth, kernel_size, patch_size, in_chans, num_classes)
        for block in self.blocks:
            mixing, _gelu, norm = block[0].fn
            block[0].fn = nn.Sequential(spatial() if spatial is not None else mixing,
                                        *([_gelu] if spatial_gelu else []), norm)
        if generator is not None:
            for module in self.modules():
                if isinstance(module, nn.Conv2d | nn.Linear):
                    _pytorch_default_init(module, generator)

    def spatial_layers(self) -> list[nn.Module]:
        return [block[0].fn[0] for block in self.blocks]


def _pytorch_default_init(layer: nn.Conv2d | nn.Linear, generator: torch.Generator) -> None:
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
    block: str = "ci",
    generator: torch.Generator | None = None,
) -> ConvMixer:
    """The ConvMixer of the filter study ([CI] Fig. 4 and Table 6; code-2401 `convmixer.py`; paper: dim 512, depth 6,
    kernel 5, patch 2). `variant` is 'learned' (trainable U(-1/k, 1/k) filters, code-2401's `random`),
    'learned-<family>' or a frozen family (`filters`); `heads` distinct filters are shared over the channels (None: one
    per channel); `block` is 'ci' (no spatial GELU) or 'sia'. Each block draws its own filters; the spatial biases are
    drawn as in code-2401 and frozen with them."""
    generator = generator if generator is not None else torch.Generator().manual_seed(0)
    _check_sizes(dim=dim, depth=depth, patch_size=patch_size, in_chans=in_chans, num_classes=num_classes,
                 img_size=img_size)
    check_kernel_size(kernel_size)
    heads = dim if heads is None else heads
    check_heads(dim, heads)
    check_convmixer_block(block)
    study = parse_study_variant(variant, kernel_size)
    family, trainable = study.family, study.learned
    grid = (img_size // patch_size,) * 2

    def spatial() -> nn.Module:
        choice = head_assignment(dim, heads, generator)
        if family.linear_format:
            weight = torch.stack([make_token_mixer(family, grid[0] * grid[1], generator) for _ in range(heads)])
            return SpatialLinear(weight, choice, _uniform(dim, 1 / dim, generator), trainable, grid)
        weight = make_filters(family, heads, kernel_size, generator)
        return SpatialConv(weight, choice, _uniform(dim, 1 / kernel_size, generator), trainable,
                           softmax=family.softmax_taps)

    gelu = block == "sia" or family.linear_format  # code-2401's linear-format block has the GELU
    return ConvMixer(dim, depth, kernel_size, patch_size, in_chans, num_classes, spatial, generator, gelu)


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

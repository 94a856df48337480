"""Impulse initialization for timm's SwinTransformer: our design, code-2505 covers ViT only.

Swin's positional path is its per-head relative-position bias, already a convolution-shaped logit, so the
impulse goes there: table[delta, h] = c * M_h(delta) with M_h the ViT target at offset o_h and c = ln(scale) /
scale, so that before content logits the attention at the offset is `scale` times that elsewhere. Q/K keep
PyTorch's default; V/proj as the ViT arm. An offset outside a window sees only noise (zero padding). The first
stage's window must hold the kernel (else PipelineError); smaller later windows keep the offsets they can hold.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from pipeline.errors import PipelineError
from pipeline.method.inits.arch import SWIN, attention_layers, check_fused_qkv
from pipeline.method.inits.lowrank import IMPULSE_VALUE_ALPHA, IMPULSE_VALUE_BETA, ortho_like_value_proj_
from pipeline.method.inits.rng import truncated_normal
from pipeline.method.inits.targets import check_kernel


def bias_table_index(offset: tuple[int, int], window: tuple[int, int]) -> int | None:
    """Row of the relative-position bias table for key = query + offset; None if the window cannot hold it
    (timm's get_relative_position_index layout)."""
    dy, dx = offset
    if abs(dy) >= window[0] or abs(dx) >= window[1]:
        return None
    return (-dy + window[0] - 1) * (2 * window[1] - 1) + (-dx + window[1] - 1)


def impulse_bias_table(
    offsets: list[tuple[int, int]], window: tuple[int, int], *, scale: float, noise_std: float, generator
) -> torch.Tensor:
    """The ((2 Wh - 1)(2 Ww - 1), heads) bias table c * M_h of the module docstring, float64."""
    rows = (2 * window[0] - 1) * (2 * window[1] - 1)
    target = 3.0 * truncated_normal((rows, len(offsets)), noise_std, generator)
    for h, offset in enumerate(offsets):
        row = bias_table_index(offset, window)
        if row is not None:
            target[row, h] = scale
    return target * (math.log(scale) / scale)


def swin_impulse_(
    model: nn.Module,
    offsets: list[list[tuple[int, int]]],
    generator: torch.Generator,
    *,
    kernel_size: int,
    norm_v: float,
    scale: float,
    noise_std: float,
) -> list[torch.Tensor]:
    """Impulse bias tables and V/proj in every window attention; returns the parameters written."""
    layers = attention_layers(model, SWIN)
    check_kernel(kernel_size, tuple(layers[0].window_size), "first-stage window")
    if scale <= 1:
        raise PipelineError(f"impulse.scale = {scale}: Swin's impulse logit is ln(scale), so scale must be > 1")
    for i, (attn, heads) in enumerate(zip(layers, offsets)):
        check_fused_qkv(attn, f"Swin block {i}")
        table = impulse_bias_table(heads, tuple(attn.window_size), scale=scale, noise_std=noise_std,
                                   generator=generator)  # fmt: skip
        with torch.no_grad():
            attn.relative_position_bias_table.copy_(table)
        ortho_like_value_proj_(attn, generator, IMPULSE_VALUE_ALPHA, IMPULSE_VALUE_BETA, norm_v)
    return [p for attn in layers for p in (attn.relative_position_bias_table, attn.qkv.weight, attn.proj.weight)]

"""Impulse initialization for timm's SwinTransformer (our design; code-2505 covers ViT only, paper.md 2.5).

Reasoning. The ViT method makes softmax(P Q K^T P^T) an impulse, P being the position embedding, because the
position embedding is the only place a ViT knows where tokens are. Swin has no absolute position embedding;
its positional path is the per-head relative-position bias added to the window-attention logits,
B_h[i, j] = table[rel(i, j), h], a function of the key-minus-query offset only, shared by all windows. That is
already a per-head convolution-shaped logit, so the natural equivalent puts the impulse there directly:

    table[delta, h] = c * M_h(delta),   M_h = scale * [delta == o_h] + 3 T (.) [delta != o_h],
    T ~ trunc-normal(0, noise_std) (as the ViT target),   c = ln(scale) / scale.

c makes the impulse logit ln(scale): with no content logits the attention is proportional to `scale` at the
head's offset against ~1 everywhere else, i.e. the attention *is* the target's impulse-to-background ratio
(scale 1000 in a 7x7 window: 1000 / (1000 + 48) = 95% of the mass on the offset). Noise enters the logits with
the ViT target's relative size, 3 * noise_std / scale. Q/K keep PyTorch's default (content logits start at
std ~0.3, well below ln(1000) = 6.9), so norm_p and norm_q do not apply; V/proj are set as in the ViT impulse
arm (get_ortho_like(dim, 0.4, 0.4, -1), times norm_v).

Heads use `targets.layer_offsets`: the official order, each stage's blocks taking as many as they have heads.
A query whose offset key lies outside its window (or is masked in a shifted window) sees only noise and
attends almost uniformly, the window's analogue of the ViT impulse's zero padding. The first stage's window
must hold the kernel (else PipelineError); later stages whose windows shrink below the kernel (small inputs)
keep only the offsets their bias table can represent (|dy| < window rows, |dx| < window cols).
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
    """Row of the relative-position bias table for key = query + offset; None if the window cannot hold it.

    timm's get_relative_position_index stores (query - key) + (window - 1) per axis, row-major over
    (2 Wh - 1) x (2 Ww - 1).
    """
    dy, dx = offset
    if abs(dy) >= window[0] or abs(dx) >= window[1]:
        return None
    return (-dy + window[0] - 1) * (2 * window[1] - 1) + (-dx + window[1] - 1)


def impulse_bias_table(
    offsets: list[tuple[int, int]], window: tuple[int, int], *, scale: float, noise_std: float, generator
) -> torch.Tensor:
    """The ((2 Wh - 1)(2 Ww - 1), heads) bias table c * M_h described in the module doc, float64."""
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
    """Impulse bias tables and V/proj for every window attention (other weights: PyTorch defaults); returns the
    parameters written."""
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

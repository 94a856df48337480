"""Impulse (and mimetic) token mixing for timm's MlpMixer (our design; no official code: paper.md 2.5, Table 3).

Two constructions, the init option `impulse.mixer` (`CONSTRUCTIONS`):

- 'filter' (the default): block b's token map is the 2-D convolution with its own random f x f filter
  k_b ~ N(0, 1) (zero padding), written by `write_default_gain_`: fc1 = a O V_r^T, fc2 = U_r S_r O^T / a, biases 0
  (U_r S_r V_r^T the top r = min(N, tokens_dim) SVD of the map, O a random orthogonal tokens_dim x tokens_dim),
  scaled so that ||fc2 fc1||_F = sqrt(N) / 3 and E|fc1 row|^2 = 1/3, PyTorch's default's expected values
  (U(+-1/sqrt(fan_in)) draws). Each unit's pre-activation then has default's spread, GELU stays in its
  nonlinear regime, and since GELU'(z) + GELU'(-z) = 1 the block's Jacobian at 0 (and its mean over inputs
  symmetric about 0) is half the written map, as default's is half of its fc2 fc1. One filter per block spans all
  f^2 offsets at once (the token MLP is shared by all channels, so per-channel filters are not expressible).
  It uses kernel_size only (not scale, noise_std or offsets). When tokens_dim < N the map is cut to rank
  tokens_dim (the CPU Mixer: 48 of 49), which leaves its 3x3 locality mass at 0.97-1.00.
- 'shift': one impulse offset per block at unit gain, written exactly (`write_token_mixing_`, below). It leaves
  most token-MLP units in GELU's linear regime and the token branch above the residual (issue 20, point 3;
  `diagnostics.py` measures both), so it is kept as an option, not the default.

Mimetic's Mixer arm (`mimetic.mixer`) writes its map alpha Z + beta I with the same two writers: 'default_gain'
(the default) or 'exact'. The rest of this docstring is the 'shift' construction.

Reasoning. A MixerBlock mixes tokens with one MLP shared by all channels: for every channel c,
y[:, c] = fc2(act(fc1 x[:, c] + b1)) + b2 over the N tokens. Its mixing weights are the Jacobian
J = W2 diag(act'(W1 x + b1)) W1 (N x N), the same map for every channel: one "head" per block. The natural
equivalent of a ViT head's impulse is therefore to make each block's token mixing an impulse convolution at
an offset o_b, applied to every channel (a depthwise conv whose filter all channels share). With a single map
per block, the f^2 offsets are spread over depth (block b takes the b-th offset of `targets.layer_offsets`,
official order) instead of over heads. The map is the ViT target with unit impulse gain,
J_b = M_b / scale = H_b + (3 / scale) T (.) [H_b == 0], T ~ trunc-normal(0, noise_std).

How the prior compares with the ViT's. A ViT layer holds all its heads' offsets at once (ViT-B: the nine 3x3
offsets and three repeats in every layer), each with its own value/proj channels, so one layer can express a
full 3x3 convolution. A Mixer block holds one offset, shared by every channel, and a 3x3 neighbourhood only
arises by composing blocks through the residual stream: Mixer-S/16 (8 blocks) gets the first 8 offsets of the
official order and never (+1, +1); Mixer-B/16 (12 blocks) gets all nine; a 6-block CPU Mixer misses (-1, +1),
(+1, -1) and (+1, +1). Block (0, 0) is an identity map on the layer-normed tokens, close to what the residual
already carries.

Exact realisation, in two kinds of hidden units (`write_token_mixing_`); J_b is first cut to its top
r = min(N, tokens_dim) singular triplets, split into balanced factors W1 = sqrt(S_r) V_r^T, W2 = U_r sqrt(S_r):

- Pairs. For act(z) = z s(z) with s(z) + s(-z) = 1 (GELU, SiLU, ReLU), act(z) - act(-z) = z, so two units
  (w, -w) with output columns (a, -a) and zero biases compute a w^T x exactly, for every input, while each unit
  stays nonlinear (training separates the two at once). Pairs cost two units per rank.
- Linear-regime units. One unit w with bias c = LINEAR_BIAS * (1 + |w|) sits where GELU is the identity to
  ~1e-4 (GELU(z) = z Phi(z), Phi(4) = 1 - 3e-5) for every input with |w^T x| < 4 |w| (LayerNormed token rows:
  ~4 standard deviations); fc2 takes a / act'(c) and b2 cancels act(c). The Jacobian at x = 0 (the pseudo-input)
  is exact; on real token rows the MLP is the linear map to within 1% (measured on Fashion-MNIST: 0.5% relative
  error at S/16, where correlated tokens push a few inputs beyond 4 |w|; 0.04% on the CPU Mixer;
  `tests/test_inits_mixer.py`). They cost one unit per rank, but start linear and leave that regime only as
  their biases train down.

The top directions get pairs, as many as the width allows after reaching rank r (tokens_dim >= 2N: all pairs, the
old construction); the rest are linear-regime units. Pairs alone leave rank tokens_dim / 2: on Mixer-S/16
(tokens_dim 256, N = 196) that is 128 < 169-196, so which part of the impulse survived was decided by the noise.
3x3 locality mass on the pseudo-input, per block, pairs only (commit 8fb727c) -> now (`bench_inits.py --figures`; flat
map: 0.04 on 14 x 14, 0.15 on 7 x 7): Mixer-S/16 0.14-0.16 -> 0.69-0.79 (60 pairs + 136 linear units, rank 196);
Mixer-B/16 0.42-0.74 -> 0.69-0.79; CPU Mixer (7 x 7 tokens) with embed_dim 96 0.26-0.30 -> 0.69-0.83 and with
128 0.30-0.40 -> 0.73-0.94. That is the target's own level (|J_b| row-normalised: 0.68-0.79 on 14 x 14, 0.72-0.94
on 7 x 7; its noise, 3 T / scale, spreads over every key), except block (0, 0) at embed_dim 96, whose identity
needs rank 49 of the 48 units (0.69).
If fewer than half the queries still peak at the offset (tokens_dim far below N), tokens_dim is below the rank
the impulse needs and we raise PipelineError. The channel MLP keeps PyTorch's default; norm_p/norm_q/norm_v do
not apply.
"""

from __future__ import annotations

import torch
from torch import nn

from pipeline.errors import PipelineError
from pipeline.method.inits.arch import MIXER, token_grid
from pipeline.method.inits.lowrank import balanced_factors, canonical_signs, top_factors
from pipeline.method.inits.rng import normal
from pipeline.method.inits.targets import (
    check_kernel,
    check_peaks,
    hit_rate,
    impulse_matrices,
    impulse_targets,
)

#: A linear-regime unit with fc1 row w gets bias LINEAR_BIAS * (1 + |w|): GELU's input stays >= 4 within 4 |w|.
LINEAR_BIAS = 4.0
#: The activation must be this close to linear over that range (relative to the range), else PipelineError.
LINEAR_TOL = 1e-3
#: `impulse.mixer` choices: the default first.
CONSTRUCTIONS = ("filter", "shift")
#: `mimetic.mixer` choices (the writer of its map): the default first.
WRITERS = ("default_gain", "exact")


def check_token_mlp(mlp: nn.Module, where: str) -> None:
    """A plain fc1 -> act -> fc2 token MLP, as timm's MixerBlock builds it."""
    if not all(hasattr(mlp, n) for n in ("fc1", "act", "fc2")) or not isinstance(mlp.norm, nn.Identity):
        raise PipelineError(f"{where}: the token MLP is not timm's plain Mlp (fc1, act, fc2); unsupported")


def check_odd_part(act: nn.Module, where: str) -> None:
    """Pairs need act(z) - act(-z) == z."""
    z = torch.linspace(-4, 4, 17, dtype=torch.float64)
    with torch.no_grad():
        odd = act(z) - act(-z)
    if not torch.allclose(odd, z, atol=1e-4):
        raise PipelineError(
            f"{where}: activation {act} does not satisfy act(z) - act(-z) = z, so the token MLP cannot be set to "
            f"an exact linear map; use GELU, SiLU or ReLU"
        )


def linear_regime(act: nn.Module, norms: torch.Tensor, where: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Bias c, act(c) and act'(c) of linear-regime units with fc1 rows of norms `norms`; PipelineError unless the
    activation is the identity plus a constant (within LINEAR_TOL) over c +- 4 |w|."""
    bias = LINEAR_BIAS * (1 + norms)
    step = 1e-4
    with torch.no_grad():
        value = act(bias)
        slope = (act(bias + step) - act(bias - step)) / (2 * step)
        span = torch.linspace(-4, 4, 33, dtype=torch.float64)[:, None] * norms
        error = (act(bias + span) - value - span * slope).abs().max() / span.abs().max().clamp_min(1e-12)
    if error > LINEAR_TOL or (slope - 1).abs().max() > 0.1:  # the identity for large inputs, as GELU and ReLU
        raise PipelineError(
            f"{where}: activation {act} is not linear for large inputs (error {error:.1e}), so the token MLP "
            f"cannot reach the rank the map needs; use GELU or ReLU, or tokens_dim >= 2 x tokens"
        )
    return bias, value, slope


def write_token_mixing_(mlp: nn.Module, mixing: torch.Tensor, where: str) -> torch.Tensor:
    """Make the token MLP compute x -> mixing_r x (pairs and linear-regime units, see the module doc).

    Returns mixing_r (N x N float64), the rank-min(N, tokens_dim) truncated SVD of `mixing` that the MLP's
    Jacobian at 0 equals.
    """
    check_token_mlp(mlp, where)
    hidden, tokens = mlp.fc1.out_features, mixing.shape[0]
    rank = min(hidden, tokens)
    pairs = min(rank, hidden - rank)
    left, right = balanced_factors(mixing) if rank == tokens else top_factors(mixing, rank)
    fc1 = torch.zeros(hidden, tokens, dtype=torch.float64)
    fc2 = torch.zeros(tokens, hidden, dtype=torch.float64)
    b1 = torch.zeros(hidden, dtype=torch.float64)
    b2 = torch.zeros(tokens, dtype=torch.float64)
    if pairs:
        check_odd_part(mlp.act, where)
        fc1[:pairs], fc1[pairs : 2 * pairs] = right[:pairs], -right[:pairs]
        fc2[:, :pairs], fc2[:, pairs : 2 * pairs] = left[:, :pairs], -left[:, :pairs]
    if rank > pairs:
        w, a = right[pairs:], left[:, pairs:]
        bias, value, slope = linear_regime(mlp.act, w.norm(dim=1), where)
        units = slice(2 * pairs, 2 * pairs + rank - pairs)
        fc1[units], b1[units], fc2[:, units] = w, bias, a / slope
        b2 = -(a / slope) @ value
    with torch.no_grad():
        for layer, weight, bias in ((mlp.fc1, fc1, b1), (mlp.fc2, fc2, b2)):
            layer.weight.copy_(weight.to(layer.weight.device, layer.weight.dtype))
            if layer.bias is not None:
                layer.bias.copy_(bias.to(layer.bias.device, layer.bias.dtype))
            elif bias.abs().max() > 0:
                raise PipelineError(f"{where}: the token MLP has no biases; linear-regime units need them")
    return left @ right


def mixer_impulse_(
    model: nn.Module,
    offsets: list[list[tuple[int, int]]],
    generator: torch.Generator,
    *,
    kernel_size: int,
    scale: float,
    noise_std: float,
) -> list[torch.Tensor]:
    """Impulse token mixing in every MixerBlock (other weights: PyTorch defaults), see the module doc; returns
    the parameters written."""
    grid = token_grid(model, MIXER)
    check_kernel(kernel_size, grid, "token grid")
    for b, (block, (offset,)) in enumerate(zip(model.blocks, offsets)):
        target = impulse_targets([offset], grid, scale=scale, noise_std=noise_std, generator=generator)[0]
        mixing = write_token_mixing_(block.mlp_tokens, target / scale, f"Mixer block {b}")
        hidden = block.mlp_tokens.fc1.out_features
        check_peaks(
            hit_rate(mixing, grid, offset)[None],
            f"tokens_dim {hidden} (rank {min(hidden, mixing.shape[0])})",
            grid,
            "raise mlp_ratio[0] (tokens_dim) or use a smaller token grid",
        )
    return [p for block in model.blocks for p in block.mlp_tokens.parameters()]


def random_orthogonal(n: int, generator: torch.Generator) -> torch.Tensor:
    """A Haar-random n x n orthogonal matrix (QR of a Gaussian, signs fixed by R's diagonal), float64."""
    q, r = torch.linalg.qr(normal((n, n), 1.0, generator))
    return q * torch.sign(torch.diagonal(r))


def write_default_gain_(mlp: nn.Module, mixing: torch.Tensor, generator: torch.Generator, where: str) -> torch.Tensor:
    """fc1 = a O V_r^T, fc2 = U_r S_r O^T / a, zero biases, at PyTorch's default gain (see the module doc).

    Returns the written fc2 fc1 (N x N float64): the top-r map rescaled to Frobenius norm sqrt(N) / 3; the MLP's
    Jacobian at 0 is half of it (GELU'(0) = 1/2).
    """
    check_token_mlp(mlp, where)
    hidden, tokens = mlp.fc1.out_features, mixing.shape[0]
    rank = min(hidden, tokens)
    u, s, vh = torch.linalg.svd(mixing)
    left, right = canonical_signs(u[:, :rank] * s[:rank], vh[:rank])  # U_r S_r, V_r^T
    left = left * (tokens**0.5 / 3) / s[:rank].norm().clamp_min(1e-300)
    mix = random_orthogonal(hidden, generator)[:, :rank]  # orthonormal columns: fc2 fc1 = U_r S_r V_r^T
    gain = (max(hidden, tokens) / (3 * tokens)) ** 0.5  # E|fc1 row|^2 = 1/3, as U(+-1/sqrt(N)) gives
    with torch.no_grad():
        for layer, weight in ((mlp.fc1, gain * mix @ right), (mlp.fc2, left @ mix.T / gain)):
            layer.weight.copy_(weight.to(layer.weight.device, layer.weight.dtype))
            if layer.bias is not None:
                layer.bias.zero_()
    return left @ right


def filter_matrix(kernel: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """(N x N float64) the map y[q] = sum_o kernel[o] x[q + o] of an f x f kernel on the grid, zero padding."""
    size = kernel.shape[0]
    half = size // 2
    offsets = [(dy, dx) for dy in range(-half, half + 1) for dx in range(-half, half + 1)]
    return torch.einsum("o,onm->nm", kernel.reshape(-1).double(), impulse_matrices(offsets, grid))


def mixer_filter_(model: nn.Module, generator: torch.Generator, *, kernel_size: int) -> list[torch.Tensor]:
    """The 'filter' construction: a random f x f filter per MixerBlock at default gain (see the module doc);
    returns the parameters written."""
    grid = token_grid(model, MIXER)
    check_kernel(kernel_size, grid, "token grid")
    for b, block in enumerate(model.blocks):
        kernel = normal((kernel_size, kernel_size), 1.0, generator)
        write_default_gain_(block.mlp_tokens, filter_matrix(kernel, grid), generator, f"Mixer block {b}")
    return [p for block in model.blocks for p in block.mlp_tokens.parameters()]

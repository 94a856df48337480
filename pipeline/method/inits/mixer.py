"""Impulse (and mimetic) token mixing for timm's MlpMixer: our design, no official code ([NeurIPS] Table 3 gives none).

A MixerBlock's token MLP is shared by all channels, so each block has one N x N map, one "head".
`impulse.mixer` picks the construction:
- 'filter' (default): the convolution with a random f x f filter per block, written at PyTorch's default gain
  (`write_default_gain_`), so GELU stays nonlinear and the Jacobian at 0 is half the map, as default's is.
- 'shift': block b an impulse at the b-th offset of `targets.layer_offsets`, written exactly
  (`write_token_mixing_`: unit pairs (w, -w) exact since act(z) - act(-z) = z, the rest biased into GELU's
  linear regime). Its token branch starts mostly linear and above the residual (`diagnostics`), hence an option.
Mimetic's Mixer arm writes alpha Z + beta I with the same two writers. A tokens_dim too small for the map to peak
at its offset raises PipelineError. The channel MLP keeps PyTorch's default.
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
    if not all(hasattr(mlp, n) for n in ("fc1", "act", "fc2")) or not isinstance(mlp.norm, nn.Identity):
        raise PipelineError(f"{where}: the token MLP is not timm's plain Mlp (fc1, act, fc2); unsupported")


def check_odd_part(act: nn.Module, where: str) -> None:
    z = torch.linspace(-4, 4, 17, dtype=torch.float64)
    with torch.no_grad():
        odd = act(z) - act(-z)
    if not torch.allclose(odd, z, atol=1e-4):
        raise PipelineError(
            f"{where}: activation {act} does not satisfy act(z) - act(-z) = z, so the token MLP cannot be set to "
            f"an exact linear map; use GELU, SiLU or ReLU"
        )


def linear_regime(act: nn.Module, norms: torch.Tensor, where: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Bias c, act(c) and act'(c) of linear-regime units with fc1 rows of norms `norms`; PipelineError unless act is
    linear within LINEAR_TOL over c +- 4 |w|."""
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
    """Make the token MLP compute x -> mixing_r x exactly (module docstring); returns mixing_r (N x N float64), the
    rank-min(N, tokens_dim) truncated SVD of `mixing`."""
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
    """The 'shift' construction in every MixerBlock; returns the parameters written."""
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
    """fc1 = a O V_r^T, fc2 = U_r S_r O^T / a (O random orthogonal), zero biases, at PyTorch's default gain; returns the
    written fc2 fc1 (N x N float64), of Frobenius norm sqrt(N) / 3."""
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
    """The 'filter' construction in every MixerBlock; returns the parameters written."""
    grid = token_grid(model, MIXER)
    check_kernel(kernel_size, grid, "token grid")
    for b, block in enumerate(model.blocks):
        kernel = normal((kernel_size, kernel_size), 1.0, generator)
        write_default_gain_(block.mlp_tokens, filter_matrix(kernel, grid), generator, f"Mixer block {b}")
    return [p for block in model.blocks for p in block.mlp_tokens.parameters()]

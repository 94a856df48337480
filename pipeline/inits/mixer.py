"""Impulse (and mimetic) initialization for timm's MlpMixer (our design; code-2505 covers ViT only).

Reasoning. A MixerBlock mixes tokens with one MLP shared by all channels: for every channel c,
y[:, c] = fc2(act(fc1 x[:, c] + b1)) + b2 over the N tokens. Its mixing weights are the Jacobian
J = W2 diag(act'(W1 x + b1)) W1 (N x N), the same map for every channel: one "head" per block. The natural
equivalent of a ViT head's impulse is therefore to make each block's token mixing an impulse convolution at
an offset o_b, applied to every channel (a depthwise conv whose filter all channels share). With a single map
per block, the f^2 offsets are spread over depth (block b takes the b-th offset of `impulse.layer_offsets`,
official order) instead of over heads.

Exact realisation. For act(z) = z s(z) with s(z) + s(-z) = 1 (GELU exact or tanh, SiLU, ReLU), act(z) -
act(-z) = z. With hidden units in pairs (w, -w), output columns (a, -a) and zero biases,
fc2(act(fc1 x)) = sum_k a_k (act(w_k . x) - act(-w_k . x)) = (sum_k a_k w_k^T) x: the MLP computes the linear map
W2 W1 exactly for every input, while each unit is still nonlinear (the two units of a pair get different
gradients, so training separates them at once). The map is the ViT target with unit impulse gain,
J_b = M_b / scale = H_b + (3 / scale) T (.) [H_b == 0], T ~ trunc-normal(0, noise_std). Pairs leave
r = min(tokens_dim // 2, N) units, so J_b is the rank-r truncated SVD of that target, split in balanced
factors W1 = sqrt(S_r) V_r^T, W2 = U_r sqrt(S_r) (the ViT's Q/K split). The impulse is exact when r reaches
its rank ((rows - |dy|)(cols - |dx|) <= N); below that the map keeps its peak but spreads (figures in the
report). If fewer than half the queries still peak at the offset, tokens_dim is below the rank the impulse
needs and we raise PipelineError. The channel MLP keeps PyTorch's default; norm_p/norm_q/norm_v do not apply.
"""

from __future__ import annotations

import torch
from torch import nn

from pipeline.errors import PipelineError
from pipeline.inits.arch import MIXER, token_grid
from pipeline.inits.impulse import check_kernel, check_peaks, hit_rate, impulse_targets


def check_odd_activation(mlp: nn.Module, where: str) -> None:
    """The pair trick needs act(z) - act(-z) == z and a plain fc1 -> act -> fc2 token MLP."""
    if not all(hasattr(mlp, n) for n in ("fc1", "act", "fc2")) or not isinstance(mlp.norm, nn.Identity):
        raise PipelineError(f"{where}: the token MLP is not timm's plain Mlp (fc1, act, fc2); unsupported")
    z = torch.linspace(-4, 4, 17, dtype=torch.float64)
    with torch.no_grad():
        odd = mlp.act(z) - mlp.act(-z)
    if not torch.allclose(odd, z, atol=1e-4):
        raise PipelineError(
            f"{where}: activation {mlp.act} does not satisfy act(z) - act(-z) = z, so the token MLP cannot "
            f"be set to an exact linear map; use GELU, SiLU or ReLU"
        )


def write_token_mixing_(mlp: nn.Module, mixing: torch.Tensor, where: str) -> torch.Tensor:
    """Make the token MLP compute x -> mixing_r x exactly (pairs of units); returns mixing_r (N x N, float64).

    mixing_r is the rank-min(tokens_dim // 2, N) truncated SVD of `mixing`.
    """
    check_odd_activation(mlp, where)
    hidden = mlp.fc1.out_features
    rank = min(hidden // 2, mixing.shape[0])
    if rank < 1:
        raise PipelineError(f"{where}: tokens_dim = {hidden} leaves no pair of hidden units; need >= 2")
    u, s, vh = torch.linalg.svd(mixing)
    root = s[:rank].sqrt()
    w1, w2 = root[:, None] * vh[:rank], u[:, :rank] * root
    fc1 = torch.zeros(hidden, mixing.shape[0], dtype=torch.float64)
    fc2 = torch.zeros(mixing.shape[0], hidden, dtype=torch.float64)
    fc1[:rank], fc1[rank : 2 * rank] = w1, -w1
    fc2[:, :rank], fc2[:, rank : 2 * rank] = w2, -w2
    with torch.no_grad():
        for layer, weight in ((mlp.fc1, fc1), (mlp.fc2, fc2)):
            layer.weight.copy_(weight.to(layer.weight.device, layer.weight.dtype))
            if layer.bias is not None:
                layer.bias.zero_()
    return w2 @ w1


def mixer_impulse_(
    model: nn.Module,
    offsets: list[list[tuple[int, int]]],
    generator: torch.Generator,
    *,
    kernel_size: int,
    scale: float,
    noise_std: float,
) -> None:
    """Impulse token mixing in every MixerBlock (other weights: PyTorch defaults), see the module doc."""
    grid = token_grid(model, MIXER)
    check_kernel(kernel_size, grid, "token grid")
    for b, (block, (offset,)) in enumerate(zip(model.blocks, offsets)):
        target = impulse_targets([offset], grid, scale=scale, noise_std=noise_std, generator=generator)[0]
        mixing = write_token_mixing_(block.mlp_tokens, target / scale, f"Mixer block {b}")
        hidden = block.mlp_tokens.fc1.out_features
        check_peaks(
            hit_rate(mixing, grid, offset)[None],
            f"tokens_dim {hidden} (rank {min(hidden // 2, mixing.shape[0])} after pairing)",
            grid,
            "raise mlp_ratio[0] (tokens_dim) or use a smaller token grid",
        )

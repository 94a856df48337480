"""Impulse initialization (Zheng, Li, Saratchandran, Lucey, NeurIPS 2025), as code-2505 builds it for a ViT.

Source: code-2505 @7cd02f1, `impulse_init` and `post_init_weights('impulse')`:
1. `pos_embed *= norm_p`; the pseudo-input P is LayerNorm(pe) of the patch rows, without affine.
2. Per layer and head, the target M_h (`targets.impulse_targets`) at the head's offset.
3. A_h = P_inv M_h P_inv^T, P_inv = (P^T P)^+_r P^T, r = head_dim; its SVD gives Q_h = U_r sqrt(S_r) and
   K_h = (V_r sqrt(S_r))^T, each of Frobenius norm 1, times norm_q.
4. V/proj: get_ortho_like(D, 0.4, 0.4, -1) times norm_v; everything else keeps PyTorch's default.
With the thin SVD of P, one N x D SVD per model and an r x r factorisation per head give the official D x D
route's factors to rounding (`impulse_qk`; `official_route()` runs code-2505's).

Where we deliberately differ from code-2505:
- Singular values of P below s_max * RANK_RTOL are not inverted (code-2505 inverts the top head_dim): a sin-cos
  embedding has such values, and inverting them flattens every map. Heads that cannot peak at their offset for
  half the queries raise PipelineError (`projected_peaks`).
- Offsets for kernel_size > 3 and `offsets='random'`: see `targets`.
- Draws come from a torch.Generator (code-2505: the global RNGs): values differ, laws do not.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.errors import PipelineError
from pipeline.method.inits.arch import SWIN, VIT, attention_layers, check_fused_qkv, patch_pos_embed, token_grid
from pipeline.method.inits.default import pytorch_default_
from pipeline.method.inits.lowrank import (
    IMPULSE_VALUE_ALPHA,
    IMPULSE_VALUE_BETA,
    balanced_factors,
    canonical_signs,
    ortho_like_value_proj_,
    svd_factors,
    using_official_route,
    write_qk_heads_,
)
from pipeline.method.inits.mixer import CONSTRUCTIONS, mixer_filter_, mixer_impulse_
from pipeline.method.inits.swin import swin_impulse_
from pipeline.method.inits.targets import (
    check_kernel,
    check_peaks,
    hit_rate,
    impulse_matrices,
    impulse_targets,
    layer_offsets,
)
from pipeline.method.options import IMPULSE

#: Singular values of the pseudo-input below this fraction of the largest are not inverted (see module doc).
RANK_RTOL = 1 / 30


class PseudoInverse(NamedTuple):
    """The top-r part of the thin SVD of P = LayerNorm(pe): P_inv = basis @ whiten.T, with r = `rank`."""

    points: torch.Tensor  #: P (N x D), float64
    left: torch.Tensor  #: U_r (N x r)
    whiten: torch.Tensor  #: U_r S_r^-1 (N x r)
    basis: torch.Tensor  #: V_r (D x r)
    rank: int


def pseudo_inverse(pe: torch.Tensor, head_dim: int) -> PseudoInverse:
    p = F.layer_norm(pe.detach().to("cpu", torch.float64), [pe.shape[-1]])  # all construction runs on the CPU
    u, s, vh = torch.linalg.svd(p, full_matrices=False)
    rank = min(head_dim, int((s > s[0] * RANK_RTOL).sum()))
    return PseudoInverse(p, u[:, :rank], u[:, :rank] / s[:rank], vh[:rank].T, rank)


def impulse_qk(pinv: PseudoInverse, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q (H, D, r) and K (H, r, D), each of Frobenius norm 1, with Q_h K_h = A_h / ||A_h||_* (module docstring)."""
    if using_official_route():
        return official_qk(pinv, targets)
    left, right = balanced_factors(pinv.whiten.T @ targets @ pinv.whiten)  # B_h = W^T M_h W, (H, r, r)
    norm = left.norm(dim=(-2, -1), keepdim=True)  # ||X sqrt(S)||_F = sqrt(sum s) = ||sqrt(S) Y^T||_F
    return canonical_signs(pinv.basis @ left / norm, right @ pinv.basis.T / norm)  # signs fixed in D-space


def official_qk(pinv: PseudoInverse, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """code-2505's construction, transcribed in float64: eigen-solve of the D x D P^T P, the D x D
    A_h = P_inv M_h P_inv^T, and a full D x D SVD per head (rank as `pseudo_inverse` chose)."""
    p, rank = pinv.points, pinv.rank
    u, s, v = torch.svd(p.T @ p)
    s_inv = torch.zeros_like(s)
    s_inv[:rank] = 1 / s[:rank]
    p_inv = v @ torch.diag(s_inv) @ u.T @ p.T
    left, right = svd_factors(p_inv @ targets @ p_inv.T, rank)
    norm = left.norm(dim=(-2, -1), keepdim=True)
    return left / norm, right / norm


def projected_peaks(pinv: PseudoInverse, offsets: list[tuple[int, int]], grid: tuple[int, int]) -> torch.Tensor:
    """Per head, the fraction of queries whose noise-free logits U_r U_r^T H U_r U_r^T peak at the offset: whether
    rank r through this pseudo-input can express the impulse at all."""
    proj = pinv.left @ pinv.left.T
    logits = proj @ impulse_matrices(offsets, grid) @ proj
    return torch.stack([hit_rate(lg, grid, o) for lg, o in zip(logits, offsets)])


def vit_impulse_(
    model: nn.Module,
    offsets: list[list[tuple[int, int]]],
    generator: torch.Generator,
    *,
    kernel_size: int,
    norm_p: float,
    norm_q: float,
    norm_v: float,
    scale: float,
    noise_std: float,
) -> list[torch.Tensor]:
    """Steps 1-4 of the module docstring on a ViT holding PyTorch's defaults; returns the parameters written."""
    grid = token_grid(model, VIT)
    check_kernel(kernel_size, grid, "token grid")
    if model.pos_embed is None:
        raise PipelineError("impulse init needs a position embedding (the pseudo-input); build the ViT with one")
    layers = attention_layers(model, VIT)
    for i, attn in enumerate(layers):
        check_fused_qkv(attn, f"block {i}")
    with torch.no_grad():
        model.pos_embed *= norm_p
    head_dim = model.embed_dim // layers[0].num_heads
    pinv = pseudo_inverse(patch_pos_embed(model), head_dim)
    check_peaks(
        projected_peaks(pinv, offsets[0], grid),
        f"head_dim {head_dim} (usable rank {pinv.rank})",
        grid,
        "use fewer heads (a larger head_dim) or a smaller token grid",
    )
    for attn, heads in zip(layers, offsets):
        targets = impulse_targets(heads, grid, scale=scale, noise_std=noise_std, generator=generator)
        q, k = impulse_qk(pinv, targets)
        write_qk_heads_(attn, norm_q * q.mT, norm_q * k)
        ortho_like_value_proj_(attn, generator, IMPULSE_VALUE_ALPHA, IMPULSE_VALUE_BETA, norm_v)
    return [model.pos_embed] + [p for attn in layers for p in (attn.qkv.weight, attn.proj.weight)]


def impulse_init(
    model: nn.Module,
    kind: str,
    generator: torch.Generator,
    *,
    kernel_size: int = IMPULSE.kernel_size,
    norm_p: float = IMPULSE.norm_p,
    norm_q: float = IMPULSE.norm_q,
    norm_v: float = IMPULSE.norm_v,
    scale: float = IMPULSE.scale,
    noise_std: float = IMPULSE.noise_std,
    offsets: str = IMPULSE.offsets,
    mixer: str = IMPULSE.mixer,
) -> list[torch.Tensor]:
    """The `impulse` arm on a ViT, Swin or Mixer (`swin.py`, `mixer.py`): norm_p, norm_q, norm_v as in the module
    docstring, scale, noise_std and offsets as in `targets`, `mixer` as in `mixer.py`. Returns the parameters
    written."""
    if mixer not in CONSTRUCTIONS:
        raise PipelineError(f"impulse.mixer = {mixer!r}: allowed are {', '.join(CONSTRUCTIONS)}")
    if scale <= 0 or noise_std < 0:
        raise PipelineError(f"impulse.scale = {scale}, noise_std = {noise_std}: need scale > 0 and noise_std >= 0")
    heads = layer_offsets(model, kernel_size, offsets, generator)
    pytorch_default_(model, kind, generator)
    if kind == VIT:
        return vit_impulse_(model, heads, generator, kernel_size=kernel_size, norm_p=norm_p, norm_q=norm_q,
                            norm_v=norm_v, scale=scale, noise_std=noise_std)  # fmt: skip
    if kind == SWIN:
        return swin_impulse_(model, heads, generator, kernel_size=kernel_size, norm_v=norm_v, scale=scale,
                             noise_std=noise_std)  # fmt: skip
    if mixer == "filter":
        return mixer_filter_(model, generator, kernel_size=kernel_size)
    return mixer_impulse_(model, heads, generator, kernel_size=kernel_size, scale=scale, noise_std=noise_std)

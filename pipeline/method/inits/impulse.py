"""Impulse initialization (Zheng, Li, Saratchandran, Lucey, NeurIPS 2025), as code-2505 builds it for a ViT.

paper.md section 1.1 (code-2505 @7cd02f1, `impulse_init` and `post_init_weights('impulse')`), per model:

1. `pos_embed *= norm_p` (18). The pseudo-input is the patch rows of pos_embed, P = LayerNorm(pe) over D without
   affine (eps 1e-5), so the x18 only matters through eps and for training.
2. Offsets: head i uses the impulse at (dy, dx) = `impulse_offsets(...)[i]`; the official order for a 3x3
   kernel is (0,0), (-1,0), (0,+1), (0,-1), (+1,0), (-1,-1), (-1,+1), (+1,-1), (+1,+1), repeated after 9 heads.
3. Per layer (fresh noise, same offsets), per head: the target M_h = scale * H_h + 3 T (.) [H_h == 0], where H_h
   is the N x N impulse matrix (zero padding) and T ~ trunc-normal(0, noise_std) cut at +-2 (timm's trunc_normal_).
4. Pseudo-inverse through the top r = head_dim singular values: P_inv = (P^T P)^+_r P^T (D x N), and the
   D x D target A_h = P_inv M_h P_inv^T. Split A_h by SVD into Q_h = U_r sqrt(S_r), K_h = (V_r sqrt(S_r))^T, each
   scaled to Frobenius norm 1; q rows of head h = norm_q Q_h^T, k rows = norm_q K_h. Then
   x W_q,h^T W_k,h x^T = norm_q^2 x A_h x^T / ||A_h||_* (nuclear norm), and timm scales by head_dim^-0.5.
5. V/proj: (L, R) = get_ortho_like(D, 0.4, 0.4, -1); v rows = norm_v L^T, proj = norm_v R^T, so value-then-proj is
   exactly x -> norm_v^2 x A with A = 0.4 Z - 0.4 I. Everything else keeps PyTorch's default, qkv biases included.

Check (ours): P A_h P^T = U_r U_r^T M_h U_r U_r^T, so before any noise the rank-r logits of head h peak at its
offset for a computable fraction of queries (`projected_peaks`). Below one half, head_dim is below the rank the
impulse needs on this grid (measured: 12 heads of 8 dims on 7x7 reach 14-31% off-centre, 24 heads of 4 dims
2-14%) and apply_init raises PipelineError instead of writing heads that cannot express their filter. ViT-T/S/B
at 224 and the CPU default (3 heads of 32 on 7x7) score 0.99-1.0.

Speed (the maths behind `impulse_qk`). With the thin SVD P = U S V^T, (P^T P)^+_r P^T = V_r S_r^-1 U_r^T, so
A_h = V_r B_h V_r^T with the r x r matrix B_h = W^T M_h W, W = U_r S_r^-1. If B_h = X S Y^T then
A_h = (V_r X) S (V_r Y)^T is already A_h's SVD (V_r X has orthonormal columns) and A_h has rank <= r. So one
N x D SVD per model and one r x r factorisation per head replace the official D x D eigen-solve and D x D SVD per
head (ViT-B/16: 144 of 64 x 64 instead of 768 x 768). V/proj use the symmetric route of `lowrank` (their product
is exactly A whatever the signs). `official_route()` runs code-2505's D x D construction instead; the tests and
`bench/bench_inits.py` compare the two: Q_h K_h, V proj and the logits agree to rounding.

Where we deliberately differ from code-2505:
- Singular values of P below s_max / 30 are not inverted: r = min(head_dim, #{s_i >= s_max / 30}). code-2505
  inverts the top head_dim values whatever they are. With a learned (random) embedding that never differs:
  s_r / s_1 is 0.43-0.82 for every shape we tried (N = 49-576, D = 96-768, r = 16-64). But when P has tiny
  singular values among its top head_dim (a fixed sin-cos embedding, whose spectrum decays geometrically from
  rank ~rows + cols; one head with N >= D; fewer tokens than head_dim), the 1/s^2 of the pseudo-inverse lets
  them dominate A_h's nuclear norm and the normalised logits collapse to ~0: a flat map (measured on a 7x7
  sin-cos grid: max logit 0.03, every head uniform). With the cut, sin-cos embeddings give peak agreement 1.0
  on 7x7 and 14x14 grids, with 3x3 locality mass 0.89-0.99 and 0.41-0.47 (flat: 0.15 and 0.04). It does not
  rescue one head with N >= D (r = D - 2 keeps a spread spectrum): peaks stay right but the maps stay soft
  (3x3 mass 0.17 against 0.15 for a flat map).
- Offsets for kernel_size > 3 and `offsets='random'`: see `targets`.
- All draws come from a torch.Generator (code-2505: global torch/NumPy RNGs), so values differ, not laws; one
  seed gives one model per thread count (see `rng`).
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
    """SVD of the layer-normed pseudo-input (N x D), truncated at min(head_dim, #{s >= s_max * RANK_RTOL})."""
    p = F.layer_norm(pe.detach().to("cpu", torch.float64), [pe.shape[-1]])  # all construction runs on the CPU
    u, s, vh = torch.linalg.svd(p, full_matrices=False)
    rank = min(head_dim, int((s > s[0] * RANK_RTOL).sum()))
    return PseudoInverse(p, u[:, :rank], u[:, :rank] / s[:rank], vh[:rank].T, rank)


def impulse_qk(pinv: PseudoInverse, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q (H, D, r) and K (H, r, D), each of Frobenius norm 1, with Q_h K_h = A_h / ||A_h||_* (see module doc)."""
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
    """Per head, the fraction of queries whose noise-free logits U_r U_r^T H U_r U_r^T peak at the offset.

    P A_h P^T = U_r U_r^T M_h U_r U_r^T, so this says whether rank r (head_dim) through this pseudo-input can
    express the impulse at all, before any noise or scaling.
    """
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
    """Steps 1-5 of the module doc on a ViT whose other weights already hold PyTorch's defaults; returns the
    parameters written."""
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
    """The `impulse` arm on a ViT, Swin or Mixer (the latter two: see `swin.py`, `mixer.py`).

    Args:
        model: a supported timm model, changed in place; kind: its `arch.family`.
        generator: source of every random draw ('random' offsets first, then PyTorch defaults, then noise).
        kernel_size: odd f of the f x f impulse filters.
        norm_p: ViT pos_embed multiplier. norm_q: Frobenius norm of each ViT head's Q and K.
        norm_v: V/proj multiplier (ViT, Swin). scale: impulse weight in the target; noise_std: std of the
            trunc-normal noise (times 3) off the impulse. offsets: 'official' or 'random' (see `targets`).
        mixer: the Mixer construction, 'filter' (a random f x f filter per block at default gain; the
            default, ours: no official code) or 'shift' (one impulse offset per block, exact); see `mixer.py`.

    Returns:
        The parameters it wrote beyond PyTorch's defaults (apply_init checks only these for non-finite values).
    """
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

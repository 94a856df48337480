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
N x D SVD per model and one r x r SVD per head replace the official D x D eigen-solve and D x D SVD per head
(ViT-B/16: 144 SVDs of 64 x 64 instead of 768 x 768; `bench/bench_inits.py` measures both). The product
Q_h K_h is unique, so the attention logits equal the official ones up to rounding; Q_h and K_h themselves agree
up to a rotation inside degenerate singular subspaces, as any two SVD routines do.

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
- kernel_size > 3: code-2505 indexes its 9-entry order list with i mod f^2 and decodes it in base f, which is
  wrong for f != 3; we use the official 3x3 order first and then the rest of the f x f kernel, nearest first.
- `offsets='random'`: code-2505's offsets are deterministic; [SIA]/[CI] drew `randint(0, f^2)` per head. Ours
  draws one offset per head, uniformly with replacement, once per model (every layer uses the same ones, as
  with the official order); they are the generator's first draws, so `layer_offsets` can recover them.
- All draws come from a torch.Generator (code-2505: global torch/NumPy RNGs), so values differ, not laws.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.errors import PipelineError
from pipeline.inits.arch import (
    MIXER,
    SWIN,
    VIT,
    attention_layers,
    check_fused_qkv,
    family,
    patch_pos_embed,
    token_grid,
)
from pipeline.inits.default import as_generator
from pipeline.inits.geometry import shifted_index
from pipeline.inits.mimetic import ortho_like, write_rows_

#: code-2505's head order as 3x3 kernel indices k: (dy, dx) = (k // 3 - 1, k % 3 - 1).
OFFICIAL_ORDER = (4, 1, 5, 3, 7, 0, 2, 6, 8)
#: Singular values of the pseudo-input below this fraction of the largest are not inverted (see module doc).
RANK_RTOL = 1 / 30
#: A head whose noise-free projected impulse peaks at its offset for fewer queries than this cannot express it.
MIN_PEAK = 0.5
#: code-2505's V/proj constants for the impulse arm (get_ortho_like(D, 0.4, 0.4, -1)).
VALUE_ALPHA = VALUE_BETA = 0.4


def check_kernel(kernel_size: int, grid: tuple[int, int], what: str) -> None:
    """An odd kernel that fits in the grid, or PipelineError."""
    if not isinstance(kernel_size, int) or kernel_size < 1 or kernel_size % 2 == 0:
        raise PipelineError(f"impulse.kernel_size = {kernel_size!r}: must be an odd positive integer (3, 5, ...)")
    if kernel_size > min(grid):
        raise PipelineError(
            f"impulse.kernel_size = {kernel_size} does not fit the {grid[0]}x{grid[1]} {what}; use a kernel "
            f"of at most {min(grid) - (min(grid) + 1) % 2} or a larger {what}"
        )


def kernel_offsets(kernel_size: int) -> list[tuple[int, int]]:
    """All f x f offsets: code-2505's 3x3 order first, then the others nearest first (row-major on ties)."""
    core = [(k // 3 - 1, k % 3 - 1) for k in OFFICIAL_ORDER] if kernel_size >= 3 else [(0, 0)]
    half = kernel_size // 2
    rest = [(dy, dx) for dy in range(-half, half + 1) for dx in range(-half, half + 1) if (dy, dx) not in core]
    return core + sorted(rest, key=lambda o: (o[0] ** 2 + o[1] ** 2, o))


def impulse_offsets(
    num_heads: int, kernel_size: int = 3, order: str = "official", generator: torch.Generator | None = None
) -> list[tuple[int, int]]:
    """The (dy, dx) impulse offset of each head.

    Args:
        num_heads: how many heads (or, for a Mixer, blocks) get an offset.
        kernel_size: odd f; offsets range over [-f//2, f//2]^2.
        order: 'official' = code-2505's fixed order, cycling after f^2 heads (for f = 3: (0,0), (-1,0), (0,+1),
            (0,-1), (+1,0), (-1,-1), (-1,+1), (+1,-1), (+1,+1)); 'random' = uniform with replacement.
        generator: source of the 'random' draws (None = seed 0).
    """
    check_kernel(kernel_size, (kernel_size, kernel_size), "kernel")
    base = kernel_offsets(kernel_size)
    if order == "official":
        return [base[i % len(base)] for i in range(num_heads)]
    if order == "random":
        picks = torch.randint(len(base), (num_heads,), generator=as_generator(generator))
        return [base[i] for i in picks.tolist()]
    raise PipelineError(f"impulse.offsets = {order!r}: allowed are 'official', 'random'")


def layer_offsets(
    model: nn.Module, kernel_size: int = 3, order: str = "official", generator: torch.Generator | None = None
) -> list[list[tuple[int, int]]]:
    """The intended offsets of every mixing layer (one list per block, one offset per head), as apply_init uses.

    ViT: the same head offsets in every block. Swin: one offset sequence for the widest stage, each block
    taking its first num_heads. Mixer: one offset per block (its single token-mixing map), in block order.
    For order='random', pass a fresh generator seeded like apply_init's to recover its draws.
    """
    kind = family(model)
    if kind == MIXER:
        base = impulse_offsets(len(model.blocks), kernel_size, order, generator)
        return [[o] for o in base]
    layers = attention_layers(model, kind)
    base = impulse_offsets(max(a.num_heads for a in layers), kernel_size, order, generator)
    return [base[: a.num_heads] for a in layers]


def impulse_matrices(offsets: list[tuple[int, int]], grid: tuple[int, int]) -> torch.Tensor:
    """(len(offsets), N, N) float64 0/1 impulse matrices H: H[h, q, key(q + offset_h)] = 1 inside the grid."""
    n = grid[0] * grid[1]
    out = torch.zeros(len(offsets), n, n, dtype=torch.float64)
    for h, offset in enumerate(offsets):
        keys = shifted_index(grid, offset)
        inside = keys >= 0
        out[h, torch.arange(n)[inside], keys[inside]] = 1.0
    return out


def truncated_normal(shape: tuple[int, ...], std: float, generator: torch.Generator, bound: float = 2.0):
    """N(0, std^2) cut at +-bound (absolute, like timm's trunc_normal_), by exact rejection sampling; float64.

    Same law as torch/timm `trunc_normal_`, but one float32 normal draw plus a redraw of the few rejects: 0.68 s
    -> 0.06 s for ViT-B's 5.5M noise entries on one core here (torch's inverse-CDF version makes several passes).
    """
    out = torch.randn(shape, generator=generator) * std
    bad = out.abs() > bound
    while bad.any():
        out[bad] = torch.randn(int(bad.sum()), generator=generator) * std
        bad = out.abs() > bound
    return out.double()


def impulse_targets(
    offsets: list[tuple[int, int]],
    grid: tuple[int, int],
    *,
    scale: float,
    noise_std: float,
    generator: torch.Generator,
) -> torch.Tensor:
    """code-2505's target logits M = scale H + 3 T [H == 0], T ~ trunc-normal(0, noise_std); (H, N, N) float64."""
    impulses = impulse_matrices(offsets, grid)
    noise = truncated_normal(tuple(impulses.shape), noise_std, generator)
    return scale * impulses + 3.0 * noise * (impulses == 0)


class PseudoInverse(NamedTuple):
    """The top-r part of the thin SVD of P = LayerNorm(pe): P_inv = basis @ whiten.T, with r = `rank`."""

    left: torch.Tensor  #: U_r (N x r)
    whiten: torch.Tensor  #: U_r S_r^-1 (N x r)
    basis: torch.Tensor  #: V_r (D x r)
    rank: int


def pseudo_inverse(pe: torch.Tensor, head_dim: int) -> PseudoInverse:
    """SVD of the layer-normed pseudo-input (N x D), truncated at min(head_dim, #{s >= s_max * RANK_RTOL})."""
    p = F.layer_norm(pe.detach().to(torch.float64), [pe.shape[-1]])
    u, s, vh = torch.linalg.svd(p, full_matrices=False)
    rank = min(head_dim, int((s > s[0] * RANK_RTOL).sum()))
    return PseudoInverse(u[:, :rank], u[:, :rank] / s[:rank], vh[:rank].T, rank)


def impulse_qk(pinv: PseudoInverse, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q (H, D, r) and K (H, r, D), each of Frobenius norm 1, with Q_h K_h = A_h / ||A_h||_* (see module doc)."""
    reduced = pinv.whiten.T @ targets @ pinv.whiten  # B_h = W^T M_h W, (H, r, r)
    x, s, yh = torch.linalg.svd(reduced)
    root = s.sqrt()
    norm = root.norm(dim=-1)[:, None, None]  # ||U sqrt(S)||_F = sqrt(sum s)
    q = pinv.basis @ (x * root[:, None, :]) / norm
    k = (root[:, :, None] * yh) @ pinv.basis.T / norm
    return q, k


def projected_peaks(pinv: PseudoInverse, offsets: list[tuple[int, int]], grid: tuple[int, int]) -> torch.Tensor:
    """Per head, the fraction of queries whose noise-free logits U_r U_r^T H U_r U_r^T peak at the offset.

    P A_h P^T = U_r U_r^T M_h U_r U_r^T, so this says whether rank r (head_dim) through this pseudo-input can
    express the impulse at all, before any noise or scaling.
    """
    proj = pinv.left @ pinv.left.T
    logits = proj @ impulse_matrices(offsets, grid) @ proj
    return torch.stack([hit_rate(lg, grid, o) for lg, o in zip(logits, offsets)])


def hit_rate(mixing: torch.Tensor, grid: tuple[int, int], offset: tuple[int, int]) -> torch.Tensor:
    """Fraction of queries (rows of an N x N map) whose largest entry sits at `offset` (queries with a key)."""
    keys = shifted_index(grid, offset)
    inside = keys >= 0
    return (mixing.argmax(-1)[inside] == keys[inside]).double().mean()


def check_peaks(peaks: torch.Tensor, width: str, grid: tuple[int, int], fix: str) -> None:
    """PipelineError when some head cannot express its impulse (see MIN_PEAK)."""
    if peaks.min() < MIN_PEAK:
        raise PipelineError(
            f"{width} is below the rank the impulse needs on the {grid[0]}x{grid[1]} grid: without noise only "
            f"{peaks.min():.0%} of the queries of some head can peak at its offset (need {MIN_PEAK:.0%}); {fix}"
        )


def write_impulse_heads_(attn: nn.Module, q: torch.Tensor, k: torch.Tensor, norm_q: float) -> None:
    """q rows of head h = norm_q Q_h^T, k rows = norm_q K_h; rows beyond rank r (if r < head_dim) are zero."""
    dim, heads = attn.qkv.in_features, attn.num_heads
    head_dim = dim // heads
    with torch.no_grad():
        attn.qkv.weight[: 2 * dim] = 0.0
        for h in range(heads):
            write_rows_(attn.qkv.weight, h * head_dim, norm_q * q[h].T)
            write_rows_(attn.qkv.weight, dim + h * head_dim, norm_q * k[h])


def write_impulse_value_(attn: nn.Module, generator: torch.Generator, norm_v: float) -> None:
    """code-2505's impulse V/proj: v rows = norm_v L^T, proj = norm_v R^T from get_ortho_like(D, .4, .4, -1)."""
    left, right = ortho_like(attn.qkv.in_features, VALUE_ALPHA, VALUE_BETA, -1, generator)
    with torch.no_grad():
        write_rows_(attn.qkv.weight, 2 * attn.qkv.in_features, norm_v * left[0].T)
        write_rows_(attn.proj.weight, 0, norm_v * right[0].T)


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
) -> None:
    """Steps 1-5 of the module doc on a ViT whose other weights already hold PyTorch's defaults."""
    grid = token_grid(model, VIT)
    check_kernel(kernel_size, grid, "token grid")
    if model.pos_embed is None:
        raise PipelineError("impulse init needs a position embedding (the pseudo-input); build the ViT with one")
    layers = attention_layers(model, VIT)
    for i, attn in enumerate(layers):
        check_fused_qkv(attn, f"block {i}")
    with torch.no_grad():
        model.pos_embed *= norm_p
    pinv = pseudo_inverse(patch_pos_embed(model), model.embed_dim // layers[0].num_heads)
    check_peaks(
        projected_peaks(pinv, offsets[0], grid),
        f"head_dim {model.embed_dim // layers[0].num_heads} (usable rank {pinv.rank})",
        grid,
        "use fewer heads (a larger head_dim) or a smaller token grid",
    )
    for attn, heads in zip(layers, offsets):
        targets = impulse_targets(heads, grid, scale=scale, noise_std=noise_std, generator=generator)
        write_impulse_heads_(attn, *impulse_qk(pinv, targets), norm_q)
        write_impulse_value_(attn, generator, norm_v)


def impulse_init(
    model: nn.Module,
    kind: str,
    generator: torch.Generator,
    *,
    kernel_size: int = 3,
    norm_p: float = 18.0,
    norm_q: float = 7.0,
    norm_v: float = 1.0,
    scale: float = 1000.0,
    noise_std: float = 0.6,
    offsets: str = "official",
) -> None:
    """The `impulse` arm on a ViT, Swin or Mixer (the latter two: see `swin.py`, `mixer.py`).

    Args:
        model: a supported timm model, changed in place; kind: its `arch.family`.
        generator: source of every random draw ('random' offsets first, then PyTorch defaults, then noise).
        kernel_size: odd f of the f x f impulse filters.
        norm_p: ViT pos_embed multiplier. norm_q: Frobenius norm of each ViT head's Q and K.
        norm_v: V/proj multiplier (ViT, Swin). scale: impulse weight in the target; noise_std: std of the
            trunc-normal noise (times 3) off the impulse. offsets: 'official' or 'random' (see module doc).
    """
    from pipeline.inits.default import pytorch_default_
    from pipeline.inits.mixer import mixer_impulse_
    from pipeline.inits.swin import swin_impulse_

    if scale <= 0 or noise_std < 0:
        raise PipelineError(f"impulse.scale = {scale}, noise_std = {noise_std}: need scale > 0 and noise_std >= 0")
    heads = layer_offsets(model, kernel_size, offsets, generator)
    pytorch_default_(model, kind, generator)
    if kind == VIT:
        vit_impulse_(model, heads, generator, kernel_size=kernel_size, norm_p=norm_p, norm_q=norm_q,
                     norm_v=norm_v, scale=scale, noise_std=noise_std)  # fmt: skip
    elif kind == SWIN:
        swin_impulse_(model, heads, generator, kernel_size=kernel_size, norm_v=norm_v, scale=scale,
                      noise_std=noise_std)  # fmt: skip
    else:
        mixer_impulse_(model, heads, generator, kernel_size=kernel_size, scale=scale, noise_std=noise_std)


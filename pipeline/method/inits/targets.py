"""What an impulse head is meant to do: its offset, its target logits, and whether a low-rank map still peaks there.

Source: code-2505 @7cd02f1, `impulse_init`; grid and offsets as in `geometry`.

- Offsets: code-2505's fixed 3x3 head order, repeated after 9 heads. For kernel_size > 3 code-2505 decodes its
  9-entry list in base f, which is wrong for f != 3; we differ: the 3x3 order first, then the rest of the kernel,
  nearest first. `offsets='random'` draws one offset per head with replacement, as [SIA]/[CI] did.
- Target of head h: M_h = scale * H_h + 3 T (.) [H_h == 0], T ~ trunc-normal(0, noise_std) cut at +-2;
  code-2505's constants are scale 1000, noise_std 0.6.
- `check_peaks`: a low-rank construction must still peak at the offset for MIN_PEAK of the queries.
"""

from __future__ import annotations

import torch
from torch import nn

from pipeline.errors import PipelineError
from pipeline.method.inits.arch import MIXER, attention_layers, family
from pipeline.method.inits.geometry import shifted_index
from pipeline.method.inits.rng import as_generator, truncated_normal
from pipeline.method.names import check_kernel_size, kernel_offsets, official_offsets

#: A head whose noise-free low-rank map peaks at its offset for fewer queries than this cannot express it.
MIN_PEAK = 0.5


def check_kernel(kernel_size: int, grid: tuple[int, int], what: str) -> None:
    check_kernel_size(kernel_size, "impulse.kernel_size")
    if kernel_size > min(grid):
        raise PipelineError(
            f"impulse.kernel_size = {kernel_size} does not fit the {grid[0]}x{grid[1]} {what}; use a kernel "
            f"of at most {min(grid) - (min(grid) + 1) % 2} or a larger {what}"
        )


def impulse_offsets(
    num_heads: int, kernel_size: int = 3, order: str = "official", generator: torch.Generator | None = None
) -> list[tuple[int, int]]:
    """The (dy, dx) impulse offset of each head (or Mixer block) for an odd `kernel_size`: 'official' order
    (code-2505's, cycling after f^2 heads) or 'random' (uniform with replacement, from `generator`)."""
    check_kernel(kernel_size, (kernel_size, kernel_size), "kernel")
    if order == "official":
        return official_offsets(num_heads, kernel_size)
    base = kernel_offsets(kernel_size)
    if order == "random":
        picks = torch.randint(len(base), (num_heads,), generator=as_generator(generator))
        return [base[i] for i in picks.tolist()]
    raise PipelineError(f"impulse.offsets = {order!r}: allowed are 'official', 'random'")


def layer_offsets(
    model: nn.Module, kernel_size: int = 3, order: str = "official", generator: torch.Generator | None = None
) -> list[list[tuple[int, int]]]:
    """The intended offsets of every mixing layer (one list per block, one offset per head), as apply_init uses them.
    ViT: the same in every block; Swin: the widest stage's sequence, each block taking its first num_heads; Mixer:
    one per block. For order='random', pass a generator seeded like apply_init's."""
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


def hit_rate(mixing: torch.Tensor, grid: tuple[int, int], offset: tuple[int, int]) -> torch.Tensor:
    """Fraction of queries (rows of an N x N map) whose largest entry sits at `offset` (queries with a key)."""
    keys = shifted_index(grid, offset)
    inside = keys >= 0
    return (mixing.argmax(-1)[inside] == keys[inside]).double().mean()


def check_peaks(peaks: torch.Tensor, width: str, grid: tuple[int, int], fix: str) -> None:
    if peaks.min() < MIN_PEAK:
        raise PipelineError(
            f"{width} is below the rank the impulse needs on the {grid[0]}x{grid[1]} grid: without noise only "
            f"{peaks.min():.0%} of the queries of some head can peak at its offset (need {MIN_PEAK:.0%}); {fix}"
        )

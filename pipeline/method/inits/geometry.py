"""Token-grid geometry: tokens row-major as timm flattens patches; offset (dy, dx) names the key (r + dy, c + dx)
of query (r, c), zero padding outside the grid (code-2505's `impulse_init`)."""

from __future__ import annotations

import torch


def grid_coords(grid: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    rows, cols = grid
    index = torch.arange(rows * cols)
    return index // cols, index % cols


def shifted_index(grid: tuple[int, int], offset: tuple[int, int]) -> torch.Tensor:
    """(N,) index of each query's key at `offset`, or -1 where that key falls outside the grid."""
    r, c = grid_coords(grid)
    r2, c2 = r + offset[0], c + offset[1]
    inside = (r2 >= 0) & (r2 < grid[0]) & (c2 >= 0) & (c2 < grid[1])
    return torch.where(inside, r2 * grid[1] + c2, torch.full_like(r2, -1))


def neighbourhood_mask(grid: tuple[int, int], kernel_size: int) -> torch.Tensor:
    r, c = grid_coords(grid)
    half = kernel_size // 2
    return ((r[:, None] - r[None, :]).abs() <= half) & ((c[:, None] - c[None, :]).abs() <= half)

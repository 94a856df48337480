"""Balanced low-rank factors L = U_r sqrt(S_r), R = sqrt(S_r) V_r^T of a target, and the writers of a layer.

Every structured init ends this way (code-2505 `get_ortho_like`, code-2401 `mimetic512_64`). The official code
takes a full SVD per target; we differ in route, not result: eigh of A^T A (`balanced_factors`) or a partial
eigensolver (`top_factors`, scipy's syevr on one thread), about half the work (`bench/bench_inits.py`), with each
pair's sign fixed by `canonical_signs`, so every layer output equals the SVD route's to rounding (`official_route()`
switches back). code-2505's mimetic V/proj keeps LAPACK's own signs.
"""

from __future__ import annotations

import contextlib
import contextvars

import torch
from torch import nn

from pipeline.method.inits.rng import normal, uniform

try:  # optional (absent from a stock PyTorch image): torch's eigensolver then, the same factors
    import scipy.linalg
    from threadpoolctl import threadpool_limits
except ImportError:
    scipy = threadpool_limits = None

#: code-2505's V/proj target of the impulse arm: get_ortho_like(D, 0.4, 0.4, -1) (ViT, and our Swin equivalent).
IMPULSE_VALUE_ALPHA = IMPULSE_VALUE_BETA = 0.4

#: Matrices of this size and larger go to scipy's eigensolvers, smaller ones to one batched torch call.
SCIPY_FROM = 384

_OFFICIAL = contextvars.ContextVar("official_route", default=False)


@contextlib.contextmanager
def official_route():
    """Within this block every factorisation (and the impulse Q/K) uses code-2505's full-SVD construction."""
    token = _OFFICIAL.set(True)
    try:
        yield
    finally:
        _OFFICIAL.reset(token)


def one_blas_thread() -> contextlib.AbstractContextManager:
    """scipy's LAPACK on one thread within the block (threadpoolctl), where both are installed."""
    if threadpool_limits is None:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def scipy_linalg():
    """scipy.linalg, or None where scipy is not installed."""
    return scipy.linalg if scipy is not None else None


def using_official_route() -> bool:
    return _OFFICIAL.get()


def canonical_signs(left: torch.Tensor, right: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Flip each pair (column of L, row of R) so that the row's largest-magnitude entry is positive (sklearn's
    `svd_flip`). LAPACK's signs are an artefact the layer sees through its biases; this rule makes every route give
    the same network and, the default biases being symmetric, leaves the network's law unchanged."""
    peak = right.gather(-1, right.abs().argmax(-1, keepdim=True))
    sign = torch.where(peak < 0, -1.0, 1.0).to(right.dtype)
    return left * sign.mT, right * sign


def svd_factors(
    a: torch.Tensor, rank: int | None = None, lapack_signs: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """(L, R) of the top `rank` (default all) triplets by full SVD (gesdd), matrix by matrix; `a` (..., m, n).
    Signs follow `canonical_signs`, or LAPACK's with lapack_signs=True (code-2505's mimetic V/proj)."""
    if a.dim() > 2:
        pairs = [svd_factors(m, rank, lapack_signs) for m in a.reshape(-1, *a.shape[-2:])]
        left, right = (torch.stack(p).reshape(*a.shape[:-2], *p[0].shape) for p in zip(*pairs))
        return left, right
    u, s, vh = torch.linalg.svd(a)
    root = s[:rank].sqrt()
    left, right = u[:, : root.numel()] * root, root[:, None] * vh[: root.numel()]
    return (left, right) if lapack_signs else canonical_signs(left, right)


def right_vectors(a: torch.Tensor, rank: int) -> torch.Tensor:
    """The top `rank` right singular vectors of square float64 `a` (..., n, n), descending: (..., n, rank), as
    eigenvectors of A^T A (torch below SCIPY_FROM, scipy's syevd/syevr from it on)."""
    n = a.shape[-1]
    gram = a.mT @ a
    linalg = scipy_linalg() if n >= SCIPY_FROM else None
    if linalg is None:
        return torch.linalg.eigh(gram)[1][..., n - rank :].flip(-1)
    out = torch.empty(*a.shape[:-1], rank, dtype=a.dtype)
    subset, driver = (None, "evd") if rank == n else ([n - rank, n - 1], "evr")
    for vectors, matrix in zip(out.reshape(-1, n, rank), gram.reshape(-1, n, n)):
        _, v = linalg.eigh(matrix.numpy(), subset_by_index=subset, driver=driver, overwrite_a=True,
                           check_finite=False)  # fmt: skip
        vectors.copy_(torch.from_numpy(v[:, ::-1].copy()))
    return out


def from_right_vectors(a: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(L, R) from A and orthonormal right singular vectors V (..., n, r), descending: s_i = |A v_i|,
    L = A V / sqrt(s) (= U sqrt(S)), R = sqrt(S) V^T, with `canonical_signs`."""
    av = a @ v
    root = av.norm(dim=-2, keepdim=True).sqrt()
    return canonical_signs(av / root.clamp_min(1e-150), root.mT * v.mT)  # s = 0: A v = 0, so L's column is 0


def balanced_factors(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(L, R) with L R = A for square float64 `a` (..., n, n): every singular triplet, symmetric route."""
    if using_official_route():
        return svd_factors(a)
    return from_right_vectors(a, right_vectors(a, a.shape[-1]))


def top_factors(a: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    if using_official_route():
        return svd_factors(a, rank)
    return from_right_vectors(a, right_vectors(a, rank))


def write_rows_(weight: torch.Tensor, start: int, rows: torch.Tensor) -> None:
    with torch.no_grad():
        weight[start : start + rows.shape[0]] = rows.to(weight.device, weight.dtype)


def write_qk_heads_(attn: nn.Module, q_rows: torch.Tensor, k_rows: torch.Tensor) -> None:
    """q rows of head h = q_rows[h] and k rows = k_rows[h] (each (heads, r, D), r <= head_dim); the other
    head_dim - r rows of each head are zero. Biases are left as they are."""
    dim, heads = attn.qkv.in_features, attn.num_heads
    head_dim = dim // heads
    with torch.no_grad():
        attn.qkv.weight[: 2 * dim] = 0.0
    for h in range(heads):
        write_rows_(attn.qkv.weight, h * head_dim, q_rows[h])
        write_rows_(attn.qkv.weight, dim + h * head_dim, k_rows[h])


def write_value_proj_(attn: nn.Module, left: torch.Tensor, right: torch.Tensor, scale: float = 1.0) -> None:
    """v rows = scale L^T and proj = scale R^T, so value-then-proj is exactly x -> scale^2 x L R."""
    write_rows_(attn.qkv.weight, 2 * attn.qkv.in_features, scale * left.T)
    write_rows_(attn.proj.weight, 0, scale * right.T)


def ortho_like_target(
    dim: int, alpha: float, beta: float, sign: int, generator: torch.Generator, count: int = 1, law: str = "uniform"
) -> torch.Tensor:
    """`count` draws of code-2505 get_ortho_like's A = alpha Z + sign beta I, (count, dim, dim) float64; law 'uniform'
    (code-2505's default) or 'normal' (Trockman & Kolter), both with Var Z_ij = 1 / dim."""
    shape = (count, dim, dim)
    z = uniform(shape, (3.0 / dim) ** 0.5, generator) if law == "uniform" else normal(shape, dim**-0.5, generator)
    return alpha * z + sign * beta * torch.eye(dim, dtype=torch.float64)


def ortho_like_value_proj_(
    attn: nn.Module, generator: torch.Generator, alpha: float, beta: float, scale: float = 1.0, law: str = "uniform"
) -> None:
    """V/proj of one attention layer with value-then-proj exactly x -> scale^2 x (alpha Z - beta I): code-2505's
    impulse arm (get_ortho_like(D, 0.4, 0.4, -1); [NeurIPS]'s text keeps V/proj at the default)."""
    target = ortho_like_target(attn.qkv.in_features, alpha, beta, -1, generator, law=law)[0]
    write_value_proj_(attn, *balanced_factors(target), scale)

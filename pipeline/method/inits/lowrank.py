"""Balanced low-rank factors (L, R) of a matrix, L R = its (truncated) SVD, and the writers that put them in a layer.

Every structured init ends the same way (paper.md sections 1.1-1.2; code-2505 `get_ortho_like`, code-2401
`mimetic512_64`): a target A = U S V^T is split into the balanced factors L = U_r sqrt(S_r) and
R = sqrt(S_r) V_r^T of its top r singular triplets, and L, R become the rows of two linear layers. The official
code computes a full D x D SVD (LAPACK gesdd) for each; that is most of an init's time (ViT-B/16 mimetic: 156
SVDs of 768 x 768). The routes here give the same factors from less work:

- `balanced_factors` (all D triplets): the symmetric route, eigh of A^T A (V and S^2), then s_i = |A v_i| and
  u_i = A v_i / s_i. About half an SVD's time (`bench/bench_inits.py`).
- `top_factors` (the top r triplets): a partial symmetric eigensolver (LAPACK syevr through scipy, eigenpairs
  n - r .. n - 1 of A^T A only). Where scipy is not installed (a stock PyTorch image), torch's full eigh gives
  the same vectors to rounding (`tests/test_inits_lowrank.py`), more slowly at ViT-S/B widths. Randomized or
  Krylov SVDs are not an option: the gaps s_r / s_{r+1} - 1 of these random matrices are ~1e-3, so they do not
  converge in useful time.

Why keep them: the full-SVD route (`official_route()`) gives these factors only to rounding, so switching to it
would change every init, and every metric already computed; on speed alone (seconds per init, bench/bench_inits.py,
against hours of training per cell) they would not earn their code.

Exactness. Both routes give the SVD's singular vectors up to the sign of each *pair* (u_i, v_i), and every route
then fixes those signs the same way (`canonical_signs`), so the factors, every product L R (Q_h K_h, V proj) and
the layer's output, biases included, equal the SVD route's to rounding (`tests/test_inits_lowrank.py`, at ViT-B
size too). Only code-2505's mimetic V/proj keeps LAPACK's own signs (`svd_factors(..., lapack_signs=True)`): its
R L mixes the pairs, so its law depends on that convention. `official_route()` switches every factorisation
back to full SVDs (the tests and the bench compare the two routes with it).

Accuracy: A^T A squares the condition number, so the smallest singular vectors carry relative errors of about
eps * s_max^2 / (s_i * gap_i); measured for 0.4 Z - 0.4 I at D = 768 (s_min ~ 2e-3): every singular vector within
1e-12 of gesdd's, L R within 2e-15 of A, far below float32 rounding.
Threads: `apply_init` runs scipy's LAPACK (OpenBLAS) on one thread, whatever torch's count (`one_blas_thread`):
OpenBLAS threads spin against torch's OpenMP threads on a busy machine, and one thread makes the eigensolves
independent of the thread count (see `rng`).
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
    """scipy's LAPACK on one thread within the block (threadpoolctl); nothing to limit where scipy and threadpoolctl
    are not installed (the eigensolves then run in torch)."""
    if threadpool_limits is None:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def scipy_linalg():
    """scipy.linalg, or None where scipy is not installed."""
    return scipy.linalg if scipy is not None else None


def using_official_route() -> bool:
    """Whether `official_route()` is active."""
    return _OFFICIAL.get()


def canonical_signs(left: torch.Tensor, right: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Flip each pair (column of L, row of R) so that the row's largest-magnitude entry is positive.

    An SVD fixes each pair (u_i, v_i) only up to a joint sign, and LAPACK's choice is an artefact of its
    algorithm (MKL's and OpenBLAS's gesdd need not agree). L R does not see it, but the layer does, through its
    biases: b_q . (K_h x) flips with row i of K_h. Fixing the signs by this rule (sklearn's `svd_flip`) makes
    the routes give the same network; and since PyTorch's default biases are independent and symmetric, it
    leaves the law of the initialised network unchanged.
    """
    peak = right.gather(-1, right.abs().argmax(-1, keepdim=True))
    sign = torch.where(peak < 0, -1.0, 1.0).to(right.dtype)
    return left * sign.mT, right * sign


def svd_factors(
    a: torch.Tensor, rank: int | None = None, lapack_signs: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """(L, R) of the top `rank` (default all) triplets by full SVD (gesdd), matrix by matrix; `a` (..., m, n).

    Signs follow `canonical_signs`, or LAPACK's own with lapack_signs=True (code-2505's mimetic V/proj, whose
    R L depends on them). One call per matrix: torch's batched CPU SVD runs its batch in parallel on top of a
    threaded LAPACK, which oversubscribes the cores (bench/bench_inits.py compares the routes).
    """
    if a.dim() > 2:
        pairs = [svd_factors(m, rank, lapack_signs) for m in a.reshape(-1, *a.shape[-2:])]
        left, right = (torch.stack(p).reshape(*a.shape[:-2], *p[0].shape) for p in zip(*pairs))
        return left, right
    u, s, vh = torch.linalg.svd(a)
    root = s[:rank].sqrt()
    left, right = u[:, : root.numel()] * root, root[:, None] * vh[: root.numel()]
    return (left, right) if lapack_signs else canonical_signs(left, right)


def right_vectors(a: torch.Tensor, rank: int) -> torch.Tensor:
    """The top `rank` right singular vectors of square float64 `a` (..., n, n), descending: (..., n, rank).

    Eigenvectors of A^T A. Below SCIPY_FROM (or without scipy), one batched torch (MKL) call; from it on, scipy's
    LAPACK matrix by matrix, syevd for all n vectors and syevr for fewer, which beats torch's full syevd at ViT sizes
    and loses below (bench/bench_inits.py).
    """
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
    """(L, R), L (..., n, rank) and R (..., rank, n), of the top `rank` triplets of square float64 `a`."""
    if using_official_route():
        return svd_factors(a, rank)
    return from_right_vectors(a, right_vectors(a, rank))


def write_rows_(weight: torch.Tensor, start: int, rows: torch.Tensor) -> None:
    """Copy `rows` (float64, any device) into weight[start : start + len(rows)]."""
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
    """`count` draws of code-2505 get_ortho_like's A = alpha Z + sign beta I, (count, dim, dim) float64.

    law 'uniform': Z_ij ~ U(+-sqrt(3 / dim)) (code-2505's default); 'normal': Z_ij ~ N(0, 1 / dim) (its
    dist='normal', and Trockman & Kolter's paper). Both have Var Z_ij = 1 / dim.
    """
    shape = (count, dim, dim)
    z = uniform(shape, (3.0 / dim) ** 0.5, generator) if law == "uniform" else normal(shape, dim**-0.5, generator)
    return alpha * z + sign * beta * torch.eye(dim, dtype=torch.float64)


def ortho_like_value_proj_(
    attn: nn.Module, generator: torch.Generator, alpha: float, beta: float, scale: float = 1.0, law: str = "uniform"
) -> None:
    """V/proj of one attention layer with value-then-proj exactly x -> scale^2 x (alpha Z - beta I).

    code-2505's impulse arm (get_ortho_like(D, 0.4, 0.4, -1), v rows = L^T, proj = R^T; paper.md section 4, item
    4) and Trockman & Kolter's W_v W_proj = alpha Z - beta I. The product is sign-free, so the fast route is exact.
    """
    target = ortho_like_target(attn.qkv.in_features, alpha, beta, -1, generator, law=law)[0]
    write_value_proj_(attn, *balanced_factors(target), scale)

"""ConvMixer spatial-filter families of [CI] (its Fig. 4 and Table 6) and the rank check of Proposition 1.

Source: code-2401 (github.com/osiriszjq/impulse_init @154e3fb, `convmixer.py`: `SpatialConv2d_init`,
`SpatialConv2d.forward`, `SpatialConv2d_Linear_init`). Each family is a pure function of a torch.Generator, scaled
by [CI]'s constant 3 (`CI_GAIN`; [SIA]'s code-2404 puts k there): `random` U(-1/k, 1/k); `softmax` ([CI] Fig. 4's
rand*, inferred from `convmixer.sh`) the same taps through a softmax in every forward; `impulse` one random tap;
`box-<n>` n random taps; `gaussian-<s>` around a random tap; and the N x N token-mixing matrices `perm` and
`fullperm`, never swept: arms beyond the paper.

Deliberate differences from code-2401:
- `gaussian-<s>`: `s` is a variance, as in the code, though [CI]'s text says standard deviation (docs/fidelity.md);
  the norm is averaged over the `heads` filters kept, not over all C drawn.
- `head_assignment` gives each filter floor or ceil(C/heads) channels; the code draws with replacement, so
  fewer distinct filters than stated could be in use. With heads = C both give a permutation.
- Not implemented: code-2401's `lowrank*` and fitted `qk` linear formats (never swept).
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import Tensor

from pipeline.errors import PipelineError
from pipeline.method.names import FilterFamily, check_kernel_size, parse_filter

#: The constant of code-2401's scalings: impulse x sqrt(1/3), box-n x sqrt(1/(3n)), (full)perm x sqrt(1/3).
CI_GAIN = 3.0


def _random(heads: int, k: int, param: float | None, g: torch.Generator) -> Tensor:
    return (2 * torch.rand(heads, k, k, generator=g) - 1) / k


def _impulse(heads: int, k: int, param: float | None, g: torch.Generator) -> Tensor:
    taps = torch.randint(0, k * k, (heads,), generator=g)
    return F.one_hot(taps, k * k).float().reshape(heads, k, k) * math.sqrt(1 / CI_GAIN)


def _box(heads: int, k: int, param: float | None, g: torch.Generator) -> Tensor:
    n = int(param)
    taps = torch.rand(heads, k * k, generator=g).argsort(dim=1)[:, :n]  # n distinct taps per filter
    ones = torch.zeros(heads, k * k).scatter_(1, taps, 1.0)
    return ones.reshape(heads, k, k) * math.sqrt(1 / (CI_GAIN * n))


def _gaussian(heads: int, k: int, param: float | None, g: torch.Generator) -> Tensor:
    centre = torch.randint(0, k, (heads, 2), generator=g).float()
    rows, cols = torch.meshgrid(torch.arange(k).float(), torch.arange(k).float(), indexing="ij")
    d2 = (rows - centre[:, :1, None]) ** 2 + (cols - centre[:, 1:, None]) ** 2
    w = torch.exp(-d2 / (2 * param))  # param is a variance, as in code-2401
    return w / (w.flatten(1).pow(2).sum(1).mean() * CI_GAIN).sqrt()


# `softmax` stores the same U(-1/k, 1/k) taps as `random`; its layer passes them through `softmax_taps`.
_MAKERS = {"random": _random, "softmax": _random, "impulse": _impulse, "box": _box, "gaussian": _gaussian}


def softmax_taps(weight: Tensor) -> Tensor:
    """The filters a `softmax` layer applies: a softmax over each filter's k*k taps, (..., k, k) in and out (code-2401
    `SpatialConv2d.forward` with init 'softmax')."""
    return weight.flatten(-2).softmax(-1).reshape(weight.shape)


def make_filters(
    family: str | FilterFamily, heads: int, kernel_size: int, generator: torch.Generator
) -> Tensor:
    """Draw `heads` distinct k x k spatial filters of one family, scaled as in code-2401; (heads, k, k) float32 (for
    `softmax`, the stored taps). PipelineError for a bad family or value, an even kernel or a linear-format family."""
    check_kernel_size(kernel_size)
    fam = parse_filter(family, kernel_size) if isinstance(family, str) else family
    if fam.linear_format:
        raise PipelineError(
            f"filter family {fam.name!r} has no k x k convolutional form: it is an N x N token-mixing matrix "
            "(code-2401's linear format); draw it with make_token_mixer(family, num_tokens, generator), or let "
            "pipeline.method.convmixer.build_convmixer build it"
        )
    if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1:
        raise PipelineError(f"heads = {heads!r}: need a whole number >= 1 of distinct filters")
    return _MAKERS[fam.kind](heads, kernel_size, fam.param, generator)


def make_perm(num_tokens: int, generator: torch.Generator) -> Tensor:
    """The `perm` token-mixing matrix (N, N): one sqrt(1/3) per row at a column drawn with replacement (code-2401
    `SpatialConv2d_Linear_init('perm')`), so generally not a permutation."""
    _check_tokens(num_tokens)
    cols = torch.randint(0, num_tokens, (num_tokens,), generator=generator)
    return F.one_hot(cols, num_tokens).float() * math.sqrt(1 / CI_GAIN)


def make_fullperm(num_tokens: int, generator: torch.Generator) -> Tensor:
    """The `fullperm` token-mixing matrix (N, N): a random permutation matrix x sqrt(1/3) (code-2401
    `SpatialConv2d_Linear_init('fullperm')`)."""
    _check_tokens(num_tokens)
    cols = torch.randperm(num_tokens, generator=generator)
    return F.one_hot(cols, num_tokens).float() * math.sqrt(1 / CI_GAIN)


def make_token_mixer(family: str | FilterFamily, num_tokens: int, generator: torch.Generator) -> Tensor:
    fam = parse_filter(family) if isinstance(family, str) else family
    makers = {"perm": make_perm, "fullperm": make_fullperm}
    if fam.kind not in makers:
        raise PipelineError(f"filter family {fam.name!r} is a k x k filter, not a token-mixing matrix: draw it with"
                            " make_filters (or pipeline.method.filters.linear_format for its matrix form)")
    return makers[fam.kind](num_tokens, generator)


def _check_tokens(num_tokens: int) -> None:
    if num_tokens < 1:
        raise PipelineError(f"num_tokens = {num_tokens}: a token grid needs at least one token")


def head_assignment(channels: int, heads: int, generator: torch.Generator) -> Tensor:
    """Which of the `heads` distinct filters each of the `channels` channels uses: LongTensor (channels,), each filter
    serving floor or ceil(channels/heads) channels in random order."""
    check_heads(channels, heads)
    return torch.randperm(channels, generator=generator) % heads


def check_heads(channels: int, heads: int) -> None:
    if isinstance(heads, bool) or not isinstance(heads, int) or not 1 <= heads <= channels:
        raise PipelineError(
            f"heads = {heads!r}: the number of distinct filters must be an integer between 1 and the "
            f"{channels} channels (null/None for one filter per channel)"
        )


def linear_format(filters: Tensor, grid: tuple[int, int]) -> Tensor:
    """Each k x k filter (heads, k, k) as the N x N matrix that applies it to an H x W token grid: (heads, N, N) with
    `x.flatten(-2) @ M.T` equal to `conv2d(x, filter, padding=k//2)` flattened (code-2401's linear format)."""
    heads, k = filters.shape[0], filters.shape[-1]
    h, w = grid
    basis = torch.eye(h * w, dtype=filters.dtype).reshape(h * w, 1, h, w).expand(-1, heads, -1, -1)
    columns = F.conv2d(basis, filters.unsqueeze(1), padding=k // 2, groups=heads)  # (N_in, heads, H, W)
    return columns.flatten(2).permute(1, 2, 0)


def effective_rank(X: Tensor, energy: float = 0.99) -> int:
    """The smallest r whose top singular values of X (n, D) hold `energy` of its squared Frobenius norm: the k of
    Proposition 1 ([CI] eq. 4), X not centred; 0 for an all-zero X."""
    if X.dim() != 2:
        raise PipelineError(f"effective_rank needs a 2-D (n, D) matrix, got shape {tuple(X.shape)}")
    if not 0 < energy <= 1:
        raise PipelineError(f"energy = {energy}: must be in (0, 1], e.g. 0.99")
    s2 = torch.linalg.svdvals(X.detach().double()).pow(2)
    if s2.sum() == 0:
        return 0
    cumulative = s2.cumsum(0) / s2.sum()
    first = torch.searchsorted(cumulative, torch.tensor(energy - 1e-12, dtype=torch.double))
    return min(int(first) + 1, len(s2))


def proposition1_holds(D: int, k: int, f: int) -> bool:
    """Proposition 1 ([CI] eq. 4): frozen f x f filters lose nothing when D >= k*f^2, with D the channels and k the rank
    of the patch embeddings."""
    return k * f * f <= D


@torch.no_grad()
def patch_embeddings(model: torch.nn.Module, images: Tensor) -> Tensor:
    """The ConvMixer's patch embeddings X, (B*N, D): its stem's output, run on an eval-mode copy so that the model
    and its BatchNorm statistics are untouched."""
    x = copy.deepcopy(model.stem).eval()(images)
    return x.flatten(2).transpose(1, 2).reshape(-1, x.shape[1])

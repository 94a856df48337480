"""The names params.yaml may use, and their torch-free checks: one place for each.

`pipeline.config` validates params.yaml with these before any work; the libraries (`pipeline.method.inits`,
`pipeline.method.filters`, `pipeline.method.models`) validate their own arguments with the same functions, so a
researcher who imports them without params gets the same message. Nothing here imports torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

from pipeline.errors import PipelineError

#: The initialization methods `pipeline.method.inits.apply_init` implements (a test checks that the two agree).
InitMethod = Literal["default", "timm", "mimetic", "impulse", "random"]
INIT_METHODS: tuple[str, ...] = get_args(InitMethod)

#: timm's `weight_init` modes: 'skip' = PyTorch's defaults, as the official code builds its models; '' = timm's
#: own init; 'reset' = PyTorch's defaults plus timm's pos_embed/cls_token init (MLP-Mixer: 'skip' and '' only).
WeightInit = Literal["skip", "", "reset", "jax", "jax_nlhb", "moco"]
WEIGHT_INIT_MODES: tuple[str, ...] = get_args(WeightInit)


def check_kernel_size(kernel_size: object, key: str = "kernel_size") -> int:
    """`kernel_size` if it is an odd positive integer (a centre tap, symmetric 'same' padding); else a
    PipelineError naming `key`."""
    is_int = isinstance(kernel_size, int) and not isinstance(kernel_size, bool)
    if not is_int or kernel_size < 1 or kernel_size % 2 == 0:
        raise PipelineError(
            f"{key} = {kernel_size!r}: must be an odd positive integer (3, 5, ...) so that each filter has a"
            " centre tap and 'same' padding is symmetric"
        )
    return kernel_size


# --- ConvMixer filter families ([CI] paper.md section 1.3; the tensors are drawn in pipeline.method.filters) ---------

#: The filter-family registry: kind -> the form its name is written in (tests parametrize over it).
FILTER_FAMILIES: dict[str, str] = {
    "random": "random",
    "impulse": "impulse",
    "box": "box-<n>",
    "gaussian": "gaussian-<sigma>",
    "perm": "perm",
}
#: Families with no convolutional structure: an N x N token-mixing matrix ("linear format" in code-2401).
LINEAR_FAMILIES = ("perm",)

_VALID_FORMS = (
    "random, impulse, box-<n> (n taps set to 1, 1 <= n <= k*k), gaussian-<sigma> (sigma > 0, a variance), "
    "perm (N x N random one-per-row matrix)"
)


@dataclass(frozen=True)
class FilterFamily:
    """A parsed filter-family name, e.g. `box-9` -> FilterFamily('box-9', 'box', 9).

    Attributes:
        name: canonical spelling (`gaussian-0.10` becomes `gaussian-0.1`); use it in run ids.
        kind: key of `FILTER_FAMILIES`.
        param: n of `box-<n>` or sigma (a variance) of `gaussian-<sigma>`; None for the other kinds.
    """

    name: str
    kind: str
    param: float | None = None

    @property
    def linear_format(self) -> bool:
        """True for families that are N x N token-mixing matrices rather than k x k filters."""
        return self.kind in LINEAR_FAMILIES


def _bad(name: object, why: str) -> PipelineError:
    return PipelineError(f"filter family {name!r}: {why}; valid forms are {_VALID_FORMS}")


def parse_filter(name: str, kernel_size: int | None = None) -> FilterFamily:
    """Parse a family name such as `impulse`, `box-9` or `gaussian-0.1`.

    Args:
        name: the family as written in params.yaml (case and surrounding spaces are ignored).
        kernel_size: if given, also check that `box-<n>` fits a k x k filter (n <= k*k).

    Raises:
        PipelineError: unknown family or bad value, naming the value and the valid forms.
    """
    if not isinstance(name, str):
        raise _bad(name, "not a string")
    kind, _, arg = name.strip().lower().partition("-")
    if kind not in FILTER_FAMILIES:
        raise _bad(name, f"unknown family {kind!r}")
    if kind == "box":
        if not arg.isdigit() or int(arg) < 1:
            raise _bad(name, f"box needs a whole number of taps n >= 1, got {arg!r}")
        if kernel_size is not None and int(arg) > kernel_size**2:
            raise _bad(name, f"a {kernel_size}x{kernel_size} filter has only {kernel_size**2} taps, n={arg}")
        return FilterFamily(f"box-{int(arg)}", kind, int(arg))
    if kind == "gaussian":
        try:
            sigma = float(arg)
        except ValueError:
            raise _bad(name, f"sigma {arg!r} is not a number") from None
        if not (math.isfinite(sigma) and sigma > 0):
            raise _bad(name, f"sigma must be a finite number > 0, got {arg!r}")
        return FilterFamily(f"gaussian-{sigma:g}", kind, sigma)
    if arg:
        raise _bad(name, f"{kind!r} takes no value, got {arg!r}")
    return FilterFamily(kind, kind)


def parse_study_variant(variant: str, kernel_size: int | None = None) -> FilterFamily | None:
    """A filter-study variant: None for `learned` (trainable filters), else its frozen `FilterFamily`."""
    if variant == "learned":
        return None
    try:
        return parse_filter(variant, kernel_size)
    except PipelineError as exc:
        raise PipelineError(f"filter-study variant: {exc}; or 'learned' (trainable filters)") from None

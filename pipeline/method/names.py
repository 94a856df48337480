"""The method's names and their torch-free checks (init arms, filter families, the ConvMixer block), shared by the
method library and params validation so both give the same message."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

from pipeline.errors import PipelineError

#: The initialization methods `pipeline.method.inits.apply_init` implements (a test checks that the two agree).
InitMethod = Literal["default", "timm", "mimetic", "impulse", "random"]
INIT_METHODS: tuple[str, ...] = get_args(InitMethod)

#: The arms of [CI]'s alpha grid, with code-2401's laws on its Simple ViT (`pipeline.method.ci_2401`).
CiArm = Literal["impulse", "mimetic", "random"]
CI_ARMS: tuple[str, ...] = get_args(CiArm)

#: [SIA]'s pseudo-inputs of its impulse fit (code-2404's `get_pseudo_input`): P the position embedding, U = U(-1, 1),
#: G = TN(0, 1/2), A = P + U, B = P + G.
SiaPseudoInput = Literal["P", "U", "G", "A", "B"]
SIA_PSEUDO_INPUTS: tuple[str, ...] = get_args(SiaPseudoInput)
#: timm's `weight_init` modes: 'skip' = PyTorch's defaults, as the official code builds its models; '' = timm's
#: own init; 'reset' = PyTorch's defaults plus timm's pos_embed/cls_token init (MLP-Mixer: 'skip' and '' only).
WeightInit = Literal["skip", "", "reset", "jax", "jax_nlhb", "moco"]
WEIGHT_INIT_MODES: tuple[str, ...] = get_args(WeightInit)


#: The ConvMixer's spatial-mixing block. 'ci': code-2401's, as [CI] ran it: in its conv format depthwise conv ->
#: BatchNorm with no GELU between (its own comment calls the GELU missing), in its linear format (perm, fullperm)
#: mixing -> GELU -> BatchNorm. 'sia': code-2404's and timm's, spatial mixing -> GELU -> BatchNorm in both formats.
ConvMixerBlock = Literal["ci", "sia"]
CONVMIXER_BLOCKS: tuple[str, ...] = get_args(ConvMixerBlock)


def check_convmixer_block(block: object, key: str = "block") -> str:
    if block not in CONVMIXER_BLOCKS:
        raise PipelineError(
            f"{key} = {block!r}: use 'ci' (code-2401, [CI]: spatial conv -> BatchNorm, no GELU) or 'sia' (code-2404"
            " and timm, [SIA]: spatial conv -> GELU -> BatchNorm)"
        )
    return block


def check_kernel_size(kernel_size: object, key: str = "kernel_size") -> int:
    is_int = isinstance(kernel_size, int) and not isinstance(kernel_size, bool)
    if not is_int or kernel_size < 1 or kernel_size % 2 == 0:
        raise PipelineError(
            f"{key} = {kernel_size!r}: must be an odd positive integer (3, 5, ...) so that each filter has a"
            " centre tap and 'same' padding is symmetric"
        )
    return kernel_size



#: how a timm model name maps to a family (its first word: vit_tiny_patch16_224 -> vit)
FAMILY_PREFIXES = {"vit": "vit", "deit": "vit", "swin": "swin", "mixer": "mixer"}


def family_of(model: str) -> str:
    """A timm model name's family ('vit', 'swin', 'mixer'), or '' for another model."""
    return FAMILY_PREFIXES.get(str(model).split("_")[0], "")

# --- impulse offsets ([NeurIPS] Sec. 3: one 3x3 offset per head) ----------------------------------------------------

#: code-2505's head order as 3x3 kernel indices k: (dy, dx) = (k // 3 - 1, k % 3 - 1).
OFFICIAL_ORDER = (4, 1, 5, 3, 7, 0, 2, 6, 8)


def kernel_offsets(kernel_size: int) -> list[tuple[int, int]]:
    """All f x f offsets: code-2505's 3x3 order first, then the others nearest first (row-major on ties)."""
    core = [(k // 3 - 1, k % 3 - 1) for k in OFFICIAL_ORDER] if kernel_size >= 3 else [(0, 0)]
    half = kernel_size // 2
    rest = [(dy, dx) for dy in range(-half, half + 1) for dx in range(-half, half + 1) if (dy, dx) not in core]
    return core + sorted(rest, key=lambda o: (o[0] ** 2 + o[1] ** 2, o))


def official_offsets(num_heads: int, kernel_size: int) -> list[tuple[int, int]]:
    """Each head's offset in code-2505's order for an f x f kernel, cycling after f^2 heads."""
    base = kernel_offsets(kernel_size)
    return [base[i % len(base)] for i in range(num_heads)]


def smallest_kernel(num_heads: int, kernel_size: int) -> int:
    """The smallest odd kernel (3 or more) whose official offsets for `num_heads` heads are `kernel_size`'s: a larger
    kernel only appends offsets after the 3x3 order's nine, so up to 9 heads take the same offsets from 5x5 as from
    3x3 and train the same model."""
    want = official_offsets(num_heads, kernel_size)
    return next((k for k in range(3, kernel_size, 2) if official_offsets(num_heads, k) == want), kernel_size)

# --- ConvMixer filter families ([CI] Fig. 4, Table 6; the tensors are drawn in pipeline.method.filters) ---------------

#: The filter-family registry: kind -> the form its name is written in (tests parametrize over it).
FILTER_FAMILIES: dict[str, str] = {
    "random": "random",
    "impulse": "impulse",
    "box": "box-<n>",
    "gaussian": "gaussian-<sigma>",
    "softmax": "softmax",
    "perm": "perm",
    "fullperm": "fullperm",
}
#: Families with no convolutional structure: an N x N token-mixing matrix ("linear format" in code-2401).
LINEAR_FAMILIES = ("perm", "fullperm")
#: Families code-2401 builds but never swept (its linear format, "Out of Memory!!!"): arms
#: beyond the paper, reported on their own line and never deciding a claim of [CI].
BEYOND_PAPER = ("perm", "fullperm")

_VALID_FORMS = (
    "random, impulse, box-<n> (n taps set to 1, 1 <= n <= k*k), gaussian-<sigma> (sigma > 0, a variance), "
    "softmax (random taps passed through a softmax), perm (N x N random one-per-row matrix), fullperm (N x N random "
    "permutation matrix)"
)


@dataclass(frozen=True)
class FilterFamily:
    """A parsed filter-family name, e.g. `box-9` -> FilterFamily('box-9', 'box', 9): `name` canonical (use it in run
    ids), `param` the n of `box-<n>` or the variance of `gaussian-<sigma>`."""

    name: str
    kind: str
    param: float | None = None

    @property
    def linear_format(self) -> bool:
        return self.kind in LINEAR_FAMILIES

    @property
    def softmax_taps(self) -> bool:
        return self.kind == "softmax"

    @property
    def beyond_paper(self) -> bool:
        return self.kind in BEYOND_PAPER


def _bad(name: object, why: str) -> PipelineError:
    return PipelineError(f"filter family {name!r}: {why}; valid forms are {_VALID_FORMS}")


def parse_filter(name: str, kernel_size: int | None = None) -> FilterFamily:
    """Parse a family name such as `impulse`, `box-9` or `gaussian-0.1` (case and spaces ignored); with
    `kernel_size`, also check that `box-<n>` fits (n <= k*k). Raises PipelineError naming the valid forms."""
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


@dataclass(frozen=True)
class StudyVariant:
    """A filter-study variant: the family its spatial filters are drawn from and whether training updates them.
    `learned` is code-2401's `--init random` without `--fix_spatial`, `learned-<family>` is `--init <family>`
    without it, and a bare family is that family frozen (`--fix_spatial`)."""

    name: str
    family: FilterFamily
    learned: bool


def parse_study_variant(variant: str, kernel_size: int | None = None) -> StudyVariant:
    if not isinstance(variant, str):
        raise PipelineError(f"filter-study variant {variant!r}: not a string; write 'learned', 'learned-<family>'"
                            " or a frozen family")
    text = variant.strip().lower()
    if text == "learned":
        return StudyVariant("learned", parse_filter("random"), True)
    learned, rest = (True, text[len("learned-"):]) if text.startswith("learned-") else (False, text)
    try:
        family = parse_filter(rest, kernel_size)
    except PipelineError as exc:
        raise PipelineError(f"filter-study variant {variant!r}: {exc}; or 'learned' (trainable random filters, "
                            "code-2401's default), or 'learned-<family>' (trainable, drawn from that family)") from None
    if learned and family.kind == "random":
        raise PipelineError(f"filter-study variant {variant!r}: trainable random filters are the variant 'learned';"
                            " write 'learned'")
    return StudyVariant(f"learned-{family.name}" if learned else family.name, family, learned)

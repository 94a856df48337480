"""The names params.yaml gives to grid cells that the method library does not know: [CI]'s Model III and Table 1
axes, [SIA]'s cells. The method's own names are `pipeline.method.names`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

from pipeline.errors import PipelineError
from pipeline.method.names import CI_ARMS

#: Model III's arms: [CI]'s three, and `impulse_sens`, the impulse arm fitted as `ci_model3.sensitivity_fit` says
#: (the other reading of [CI]'s sigma: claim 10's sensitivity line, never deciding it)
SENSITIVITY_ARM = "impulse_sens"
CI_MODEL3_ARMS: tuple[str, ...] = (*CI_ARMS, SENSITIVITY_ARM)

#: [CI] Table 2's columns for Model III: Q/K trained (T) or frozen at init (NT); values LN(x) W_v (w/ V) or LN(x).
CiQk = Literal["trained", "frozen"]
CI_QK: tuple[str, ...] = get_args(CiQk)
CiValue = Literal["value", "novalue"]
CI_VALUE: tuple[str, ...] = get_args(CiValue)

#: [CI] Table 1's other columns: the Simple ViT with its PE on the tokens and with none ("without input PE"),
#: Model I (alpha 0.5) and Model II (alpha 0); Model III (RT) is ci_model3's random / trained cell.
CiForm = Literal["simple", "simple_nope", "model1", "model2"]
CI_FORMS: tuple[str, ...] = get_args(CiForm)

#: [SIA]'s baseline change (its table (f) in paper/coverage.yaml): timm's ViT (cls token, learned PE, token
#: pooling) and [SIA]'s own (no cls token, average pooling, fixed 2-D sin-cos PE).
SiaArch = Literal["cls_learned", "avg_sincos"]
SIA_ARCHS: tuple[str, ...] = get_args(SiaArch)
_SIA_FIT = re.compile(r"^(?P<first>[PUGAB])(?P<later>[PUGAB])(?P<layer>_layer)?$")


@dataclass(frozen=True)
class SiaCell:
    """A [SIA] cell: `base_<arch>` (the baseline arm on architecture `arch`) or `fit_<first><later>[_layer]`
    ([SIA]'s fit, pseudo-inputs `first` for layer 0 and `later` for the rest, shared by the later layers unless
    `_layer`)."""

    name: str
    arch: str
    first: str | None = None
    later: str | None = None
    shared: bool = True

    @property
    def fit(self) -> bool:
        return self.first is not None


def parse_sia_base(arch: object, key: str = "sia.bases") -> SiaCell:
    if arch not in SIA_ARCHS:
        raise PipelineError(f"{key}: {arch!r} is not a [SIA] architecture; use {' or '.join(SIA_ARCHS)}")
    return SiaCell(f"base_{arch}", arch)


def parse_sia_fit(name: object, key: str = "sia.fits") -> SiaCell:
    """The fit cell an entry of params `sia.fits` names, e.g. PP, GP or PP_layer."""
    match = _SIA_FIT.match(name) if isinstance(name, str) else None
    if match is None:
        raise PipelineError(
            f"{key}: {name!r} is not a [SIA] fit; write <first><later> with pseudo-inputs P (the PE), U (uniform),"
            " G (Gaussian), A (P+U), B (P+G) for layer 0 and the later layers, e.g. PP, plus _layer for a fit per"
            " layer (PP_layer)"
        )
    return SiaCell(f"fit_{name}", "avg_sincos", match["first"], match["later"], match["layer"] is None)


def parse_sia_cell(name: str) -> SiaCell:
    if name.startswith("base_"):
        return parse_sia_base(name.removeprefix("base_"))
    return parse_sia_fit(name.removeprefix("fit_"))

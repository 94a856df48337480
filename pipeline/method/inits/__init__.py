"""Initialization methods for timm ViT/DeiT, Swin and MLP-Mixer: `apply_init(model, method, ...)`.

    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, weight_init="skip")
    apply_init(model, "impulse", generator=torch.Generator().manual_seed(0), kernel_size=3)

Each method's module has its sources and deliberate differences (docs/fidelity.md): `default.py`, `mimetic.py`,
`ci_random.py`, `impulse.py` (with our Swin and Mixer equivalents, `swin.py`, `mixer.py`). `apply_init` sets every value
the method depends on, whatever the constructor did; it is pure, and one seed gives one model bit for bit per thread
count (`rng`). An init of your own (params `inits`) is applied by `own.apply_own_init`.
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

from pipeline.errors import PipelineError
from pipeline.method.inits.arch import family, mixing_grid
from pipeline.method.inits.ci_random import random_init
from pipeline.method.inits.default import default_init, timm_init
from pipeline.method.inits.diagnostics import init_diagnostics
from pipeline.method.inits.impulse import impulse_init
from pipeline.method.inits.lowrank import one_blas_thread
from pipeline.method.inits.measures import attention_maps, locality_mass, peak_agreement, uniform_locality_mass
from pipeline.method.inits.mimetic import mimetic_init
from pipeline.method.inits.rng import as_generator
from pipeline.method.inits.targets import impulse_offsets, layer_offsets

#: Method name -> implementation; the keyword-only arguments of each are its options.
ARMS = {
    "default": default_init,
    "timm": timm_init,
    "mimetic": mimetic_init,
    "impulse": impulse_init,
    "random": random_init,
}
#: The methods apply_init implements (equal to pipeline.config.INIT_METHODS).
METHODS = tuple(ARMS)


def method_options(method: str) -> dict:
    """The options `method` takes, with their defaults (the fields of its params.yaml section)."""
    if method not in ARMS:
        raise PipelineError(f"unknown init method {method!r}; valid choices are {', '.join(METHODS)}")
    params = inspect.signature(ARMS[method]).parameters.values()
    return {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}


def apply_init(
    model: nn.Module, method: str, *, generator: torch.Generator | int | None = None, **options
) -> nn.Module:
    """Initialise `model` (a timm ViT/DeiT, Swin or MLP-Mixer, best built with weight_init='skip') in place with
    `method` and return it. `generator`: a torch.Generator, an integer seed or None (seed 0); `options`: the
    method's (`method_options`). PipelineError for an unknown option or a non-finite value written."""
    allowed = method_options(method)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise PipelineError(
            f"init {method!r}: unknown option(s) {', '.join(unknown)}; allowed are {', '.join(allowed) or 'none'}"
        )
    kind = family(model)
    with one_blas_thread():  # scipy's LAPACK on one thread (lowrank.one_blas_thread)
        written = {id(p) for p in ARMS[method](model, kind, as_generator(generator), **options)}
    bad = [name for name, p in model.named_parameters() if id(p) in written and not torch.isfinite(p).all()]
    if bad:
        raise PipelineError(f"init {method!r} with {options} left non-finite values in {', '.join(bad[:3])}")
    return model


__all__ = [
    "METHODS",
    "apply_init",
    "attention_maps",
    "family",
    "init_diagnostics",
    "impulse_offsets",
    "layer_offsets",
    "locality_mass",
    "method_options",
    "mixing_grid",
    "peak_agreement",
    "uniform_locality_mass",
]

"""Initialization methods for timm ViT/DeiT, Swin and MLP-Mixer: `apply_init(model, method, ...)`.

    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, weight_init="skip")
    apply_init(model, "impulse", generator=torch.Generator().manual_seed(0), kernel_size=3)

Methods (paper.md sections 1 and 4; each module's docstring has the maths, sources and deliberate differences):
- `default` (`default.py`): PyTorch's default init, what code-2505 trains as "Default", with its optional
  norm_p / norm_q / norm_v rescaling. `timm`: timm's own trunc-normal init, a second baseline.
- `mimetic` (`mimetic.py`): Trockman & Kolter's W_q W_k^T ~ 0.7 Z + 0.7 I, W_v W_o ~ 0.4 Z - 0.4 I, in
  code-2505's form (default) or the paper's (`form='paper'`).
- `random` (`ci_random.py`): [CI]'s random query/key factors (`random512_64`), the control of its grid.
- `impulse` (`impulse.py`): the paper's method, per head an impulse attention map built through the
  pseudo-inverse of the layer-normed position embedding. Swin (`swin.py`) and MLP-Mixer (`mixer.py`) get our
  equivalents (impulse in the relative-position bias; impulse token-mixing maps), documented there.

`apply_init` defines every initial value the method depends on, whatever the constructor did (timm 1.0.31's
`weight_init='skip'` leaves pos_embed and cls_token uninitialised). It is pure: no files, no printing, and all
randomness comes from `generator`; every global RNG state (CPU, and CUDA on every device) is left as it was.
One seed gives one model bit for bit *per thread count* (and CPU kind): the linear algebra's rounding depends
on the number of threads (ViT-B/16 weights differ by up to 7.5e-9 between 1 and 2), never the draws; see `rng`.

The modules, in the one direction they import each other: primitives `geometry`, `rng`, `arch`, `lowrank`
(factorisations and row writers), `targets` (offsets, impulse targets, peak checks); `default` (baselines and
PyTorch's init); the architecture-specific constructions `swin`, `mixer`; the methods `impulse`, `mimetic`,
`ci_random`; and `measures`, `diagnostics`.

`attention_maps`, `peak_agreement` and `locality_mass` (`measures.py`) check the result on the positional
pseudo-input or on images; `init_diagnostics` (`diagnostics.py`) says on images whether a token MLP sits in
GELU's linear regime and how loud each mixing branch is against the residual (issue 20); `impulse_offsets` /
`layer_offsets` give each head's intended offset.
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
    """Initialise `model` in place with `method` and return it.

    Args:
        model: a timm VisionTransformer/DeiT, SwinTransformer or MlpMixer (best built with weight_init='skip';
            the constructor's values do not matter).
        method: one of METHODS.
        generator: a torch.Generator, an integer seed, or None (seed 0).
        **options: the method's options (`method_options(method)`); an unknown one raises PipelineError.

    Only the values the method computed are checked for non-finite entries (PyTorch's and timm's draws are
    finite by construction); a non-finite one raises PipelineError.
    """
    allowed = method_options(method)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise PipelineError(
            f"init {method!r}: unknown option(s) {', '.join(unknown)}; allowed are {', '.join(allowed) or 'none'}"
        )
    kind = family(model)
    with one_blas_thread():  # scipy's LAPACK on one thread: see lowrank, Threads
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

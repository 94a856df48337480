"""An init of your own (params `inits`, docs/own-init.md) applied to a grid model: PyTorch's default init, then your
function (its contract: `pipeline.method.plugins`).

Its own module, imported by the runtime that trains the grid's cells (`pipeline.training.train`) and not by this
package's __init__: the other runtimes ([CI]'s Simple ViT, [SIA]'s cells, weight selection) load the init library
but never run a plug-in, and a file added to a runtime's import closure re-runs every cell of it.
"""

from __future__ import annotations

import torch
from torch import nn

from pipeline.errors import PipelineError
from pipeline.method.inits.arch import family
from pipeline.method.inits.default import pytorch_default_
from pipeline.method.inits.lowrank import one_blas_thread
from pipeline.method.inits.rng import as_generator
from pipeline.method.plugins import check_call, load


def apply_own_init(model: nn.Module, arm: str, spec: str, *, generator: torch.Generator | int | None = None,
                   **options) -> nn.Module:
    """Initialise `model` in place with `spec` ('<module>:<function>', imported from the working directory), the arm
    params call `arm`, and return it: PyTorch's default init (the `default` arm at its options of 1) drawn from
    `generator`, then the function on it without gradients. Every parameter must come out finite, since the function
    may write any of them; a PipelineError naming `inits.<arm>` otherwise, or where the function cannot be imported
    or called with `options`."""
    key, generator = f"inits.{arm}", as_generator(generator)
    fn = load(spec, key)
    check_call(fn, options, key)
    with one_blas_thread():  # scipy's LAPACK on one thread, as for the built-in arms
        pytorch_default_(model, family(model), generator)
        with torch.no_grad():
            fn(model, generator, **options)
    bad = [name for name, p in model.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        raise PipelineError(f"{key} = {spec!r} with options {options} left non-finite values in {', '.join(bad[:3])};"
                            " make it write finite numbers (a division by a zero norm or a log of 0 is the usual"
                            " cause)")
    return model

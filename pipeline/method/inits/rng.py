"""Where every random number of an init comes from, and what "one seed, one model" means.

All draws come from the caller's CPU `torch.Generator`. Library code that draws from torch's global RNG
(`reset_parameters`, timm's `init_weights`) runs in `seeded_global_rng`, a fork of the global CPU RNG (and of the
CUDA RNG of each device holding parameters) seeded from the generator, so every global state is left as it was.

The same seed gives the same model bit for bit on the same CPU kind, software stack and thread count: the draws
never depend on threads, but torch's linear algebra rounds differently with them. Fix `torch.set_num_threads`
to reproduce a model exactly; the weights' laws never depend on it.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from pipeline.errors import PipelineError


def as_generator(generator: torch.Generator | int | None) -> torch.Generator:
    """A CPU generator from a generator, an integer seed, or None (= seed 0, so calls are reproducible)."""
    if isinstance(generator, torch.Generator):
        return generator
    if generator is None or (isinstance(generator, int) and not isinstance(generator, bool)):
        return torch.Generator().manual_seed(generator or 0)
    raise PipelineError(f"generator = {generator!r}: pass a torch.Generator, an integer seed or None")


def cuda_devices(model: nn.Module) -> list[int]:
    kinds = {p.device.type for p in model.parameters()} - {"cpu", "cuda"}
    if kinds:
        raise PipelineError(
            f"the model has parameters on {', '.join(sorted(kinds))}; pipeline.method.inits initialises models on the"
            f" CPU or CUDA only: initialise on the CPU, then move the model"
        )
    return sorted({p.device.index or 0 for p in model.parameters() if p.device.type == "cuda"})


@contextlib.contextmanager
def seeded_global_rng(generator: torch.Generator, model: nn.Module):
    """Run library code that draws from the global RNG deterministically, restoring every global state after.
    Only the CPU generator and the CUDA generators of the model's devices are forked; `torch.manual_seed` would
    leave every CUDA device reseeded."""
    devices = cuda_devices(model)
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    with torch.random.fork_rng(devices=devices):
        torch.default_generator.manual_seed(seed)
        for index in devices:
            with torch.cuda.device(index):
                torch.cuda.manual_seed(seed)
        yield


def uniform(shape: tuple[int, ...], bound: float, generator: torch.Generator) -> torch.Tensor:
    """U(-bound, bound) entries, float64 (NumPy's `uniform(low=-bound, high=bound)` law)."""
    return (torch.rand(shape, generator=generator, dtype=torch.float64) * 2 - 1) * bound


def normal(shape: tuple[int, ...], std: float, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, generator=generator, dtype=torch.float64) * std


def truncated_normal(shape: tuple[int, ...], std: float, generator: torch.Generator, bound: float = 2.0):
    """N(0, std^2) cut at +-bound (absolute, as timm's trunc_normal_), by rejection sampling; float64."""
    out = torch.randn(shape, generator=generator) * std
    bad = out.abs() > bound
    while bad.any():
        out[bad] = torch.randn(int(bad.sum()), generator=generator) * std
        bad = out.abs() > bound
    return out.double()

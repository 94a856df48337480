"""Init diagnostics on a stated input: is the token mixing in GELU's nonlinear regime, how loud is each branch.

Issue 20, point 3: our 'shift' Mixer construction left its token-MLP units in GELU's linear regime and its token
branch above the residual. These measures say so for any construction (`mixer.py`, Swin's `swin.py`, ViT), on
an image batch x run through `forward_features` (the Mixer's pseudo-input, zeros, has no residual to compare):

- `branch_ratios`: per block, RMS of the token-mixing branch's output (Mixer `mlp_tokens`, ViT/Swin `attn`,
  before drop-path) over RMS of the residual stream entering the block. Above 1 the branch drowns the residual.
- `trunk_rms`: RMS of the last block's output, the residual stream before the final norm (the logits hide it:
  the final LayerNorm rescales whatever the trunk carries).
- `linear_fractions` (Mixer): per block, the fraction of token-MLP hidden units in a linear regime.
  Definition: over the unit's pre-activations z on x (one value per image, channel and unit), the residual of
  the best affine fit a z + b of act(z), in RMS, is at most LINEAR_TOL times the spread std(z). Measured against
  the input's spread, this covers GELU's three linear regimes at once: large positive z (the identity: the 'shift'
  writer's biased units), large negative z (a dead unit: constant) and a narrow spread about any point. For
  z ~ N(0, s^2) the residual is ~ s^2 / sqrt(pi) (GELU ~ z/2 + z^2 / sqrt(2 pi)), so LINEAR_TOL = 0.05 calls a
  centred unit linear below s ~ 0.09; PyTorch's default (s ~ 0.58 on unit-RMS rows) gives ~0.2-0.3. A unit
  whose pre-activation is constant on x counts as linear.
- `locality_mass` of the mixing maps lives in `measures.py`.
"""

from __future__ import annotations

import torch
from torch import nn

from pipeline.method.inits.arch import MIXER, blocks, family

#: A unit is in a linear regime when its activation's affine-fit residual is at most this share of std(z).
LINEAR_TOL = 0.05


def unit_nonlinearity(pre: torch.Tensor, act: nn.Module) -> torch.Tensor:
    """Per unit (units,), RMS residual of the best affine fit of act(z) on z over std(z); `pre` is (samples, units).
    """
    z = pre.double()
    with torch.no_grad():
        y = act(z)
    zc, yc = z - z.mean(0), y - y.mean(0)
    var_z = (zc**2).mean(0)
    slope = (zc * yc).mean(0) / var_z.clamp_min(1e-300)
    residual = (yc - slope * zc).pow(2).mean(0).sqrt()
    return torch.where(var_z > 0, residual / var_z.sqrt().clamp_min(1e-300), torch.zeros_like(var_z))


def linear_fraction(pre: torch.Tensor, act: nn.Module, tol: float = LINEAR_TOL) -> float:
    """The fraction of units whose nonlinearity (`unit_nonlinearity`) is at most `tol` (see the module doc)."""
    return (unit_nonlinearity(pre, act) <= tol).double().mean().item()


def trace(model: nn.Module, x: torch.Tensor) -> dict[str, list[torch.Tensor]]:
    """One `forward_features(x)` (eval mode, no grad), recording per block its input, its mixing module's output,
    its output and (Mixer) the token MLP's fc1 output: {"input", "branch", "output", "pre"}."""
    kind = family(model)
    chosen = blocks(model, kind)
    mixers = [b.mlp_tokens if kind == MIXER else b.attn for b in chosen]
    seen: dict[str, list] = {"input": [None] * len(chosen), "branch": [None] * len(chosen),
                             "output": [None] * len(chosen), "pre": [None] * len(chosen)}  # fmt: skip

    def keep(name, i, use_input=False):
        def hook(module, args, out):
            seen[name][i] = (args[0] if use_input else out).detach()
        return hook

    handles = []
    for i, (block, mixer) in enumerate(zip(chosen, mixers)):
        handles += [block.register_forward_hook(keep("input", i, use_input=True)),
                    block.register_forward_hook(keep("output", i)), mixer.register_forward_hook(keep("branch", i))]
        if kind == MIXER and hasattr(mixer, "fc1"):
            handles.append(mixer.fc1.register_forward_hook(keep("pre", i)))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model.forward_features(x)
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    return seen


def rms(t: torch.Tensor) -> float:
    return t.double().pow(2).mean().sqrt().item()


def branch_ratios(signals: dict) -> list[float]:
    """Per block, RMS(mixing branch output) / RMS(block input), from `trace`."""
    return [rms(b) / max(rms(i), 1e-300) for i, b in zip(signals["input"], signals["branch"])]


def trunk_rms(signals: dict) -> float:
    """RMS of the last block's output (the residual stream before the final norm), from `trace`."""
    return rms(signals["output"][-1])


def linear_fractions(model: nn.Module, signals: dict, tol: float = LINEAR_TOL) -> list[float] | None:
    """Mixer: per block, the fraction of token-MLP units in a linear regime on the traced input; None otherwise."""
    if family(model) != MIXER:
        return None
    return [linear_fraction(pre.reshape(-1, pre.shape[-1]), block.mlp_tokens.act, tol)
            for pre, block in zip(signals["pre"], model.blocks) if pre is not None]


def init_diagnostics(model: nn.Module, x: torch.Tensor) -> dict:
    """{"branch_ratio": [per block], "trunk_rms", "linear_fraction": [per block] or None} of `model` on images x."""
    signals = trace(model, x)
    return {"branch_ratio": branch_ratios(signals), "trunk_rms": trunk_rms(signals),
            "linear_fraction": linear_fractions(model, signals)}

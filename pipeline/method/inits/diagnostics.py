"""Init diagnostics on a batch of images: is the token mixing nonlinear, how loud is each branch.

Ours: the 'shift' Mixer construction left its token-MLP units linear and its token branch above the residual;
these measures say so for any construction.
- `branch_ratios`: per block, RMS of the mixing branch's output over RMS of the residual entering the block.
- `trunk_rms`: RMS of the residual stream before the final norm (which hides it from the logits).
- `linear_fractions` (Mixer): per block, the fraction of token-MLP units whose act(z) is fit by an affine map
  of z to within LINEAR_TOL of std(z); this covers GELU's identity, dead and small-spread regimes at once.
"""

from __future__ import annotations

import torch
from torch import nn

from pipeline.method.inits.arch import MIXER, blocks, family

#: A unit is in a linear regime when its activation's affine-fit residual is at most this share of std(z).
LINEAR_TOL = 0.05


def unit_nonlinearity(pre: torch.Tensor, act: nn.Module) -> torch.Tensor:
    """Per unit (units,), RMS residual of the best affine fit of act(z) on z over std(z); `pre` is (samples, units)."""
    z = pre.double()
    with torch.no_grad():
        y = act(z)
    zc, yc = z - z.mean(0), y - y.mean(0)
    var_z = (zc**2).mean(0)
    slope = (zc * yc).mean(0) / var_z.clamp_min(1e-300)
    residual = (yc - slope * zc).pow(2).mean(0).sqrt()
    return torch.where(var_z > 0, residual / var_z.sqrt().clamp_min(1e-300), torch.zeros_like(var_z))


def linear_fraction(pre: torch.Tensor, act: nn.Module, tol: float = LINEAR_TOL) -> float:
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
    return [rms(b) / max(rms(i), 1e-300) for i, b in zip(signals["input"], signals["branch"])]


def trunk_rms(signals: dict) -> float:
    return rms(signals["output"][-1])


def linear_fractions(model: nn.Module, signals: dict, tol: float = LINEAR_TOL) -> list[float] | None:
    if family(model) != MIXER:
        return None
    return [linear_fraction(pre.reshape(-1, pre.shape[-1]), block.mlp_tokens.act, tol)
            for pre, block in zip(signals["pre"], model.blocks) if pre is not None]


def init_diagnostics(model: nn.Module, x: torch.Tensor) -> dict:
    """{"branch_ratio": [per block], "trunk_rms", "linear_fraction": [per block] or None} of `model` on images x."""
    signals = trace(model, x)
    return {"branch_ratio": branch_ratios(signals), "trunk_rms": trunk_rms(signals),
            "linear_fraction": linear_fractions(model, signals)}

"""[SIA]'s ViT (no cls token, average pooling, fixed 2-D sin-cos PE) and its impulse fit ("Algorithm 1") on timm ViTs.

Source: code-2404 (osiriszjq/structured_init @48b59c3), `timm/models/vision_transformer.py`: `sin_pe`,
`_init_weights` ('impulse<f>'), `impulse_init`, `get_pseudo_input`; [SIA]'s tables (c), (f), as
paper/coverage.yaml labels them.

- `use_sincos_pos_embed`: code-2404 replaces `pos_embed` by a plain sin-cos tensor; we keep the parameter,
  with the same values, frozen, so timm's forward, state dicts and optimizers are unchanged.
- `sia_fit`: [CI]'s fit loop (`ci_2401.fit_impulse_qk`) with [SIA]'s input and scale: Q, K fitted so that
  softmax(head_dim^-0.5 P Q K P^T) matches the impulse matrices, P = LayerNorm(pseudo-input) without affine, then
  written into the query and key rows of `qkv`; everything else keeps the model's values.
- Pseudo-inputs: P (the position embedding), U(-1, 1), G = TN(0, 1/2), A = P + U, B = P + G, drawn afresh per
  fit. Layer 0 is fitted on `first`, the rest on `later`; `shared` (code-2404's `init_once=True`) has the later
  layers reuse one fit.

Deliberate differences: draws come from the caller's generator (code-2404: the global RNG), and the fit runs on
the device given.
"""

from __future__ import annotations

import torch
from timm.layers import build_sincos2d_pos_embed
from timm.models.vision_transformer import VisionTransformer
from torch import Tensor

from pipeline.errors import PipelineError
from pipeline.method.ci_2401 import fit_impulse_qk, fit_quality, window_offsets
from pipeline.method.inits.rng import truncated_normal, uniform
from pipeline.method.inits.targets import impulse_matrices
from pipeline.method.names import SIA_PSEUDO_INPUTS
from pipeline.method.options import SIA_FIT


def token_grid(model: VisionTransformer) -> tuple[int, int]:
    return tuple(int(s) for s in model.patch_embed.grid_size)


def _check(model: VisionTransformer) -> None:
    if not isinstance(model, VisionTransformer):
        raise PipelineError(f"[SIA]'s construction needs a timm VisionTransformer, not {type(model).__name__}")
    rows, cols = token_grid(model)
    if model.pos_embed is None or model.pos_embed.shape[1] != rows * cols:
        raise PipelineError("[SIA]'s construction needs a position embedding over the patch tokens only: build the"
                            " ViT with class_token=False (or no_embed_class=True)")


@torch.no_grad()
def use_sincos_pos_embed(model: VisionTransformer) -> VisionTransformer:
    """Set `pos_embed` to the fixed 2-D sin-cos embedding of the token grid (code-2404's `sin_pe`) and freeze it."""
    _check(model)
    dim = model.pos_embed.shape[-1]
    if dim % 4:
        raise PipelineError(f"a 2-D sin-cos position embedding needs embed_dim divisible by 4, not {dim}")
    pe = build_sincos2d_pos_embed(list(token_grid(model)), dim=dim)
    model.pos_embed.copy_(pe[None].to(model.pos_embed))
    model.pos_embed.requires_grad_(False)
    return model


def pseudo_input(kind: str, pe: Tensor, generator: torch.Generator) -> Tensor:
    """One of code-2404's pseudo-inputs (N, D), float64, from the position embedding `pe` (N, D)."""
    if kind not in SIA_PSEUDO_INPUTS:
        raise PipelineError(f"pseudo-input {kind!r}: use one of {', '.join(SIA_PSEUDO_INPUTS)}")
    pe = pe.double()
    noise = {"U": lambda: uniform(tuple(pe.shape), 1.0, generator),
             "G": lambda: truncated_normal(tuple(pe.shape), 0.5**0.5, generator)}
    if kind == "P":
        return pe
    if kind in noise:
        return noise[kind]()
    return pe + noise["U" if kind == "A" else "G"]()


def sia_fit(model: VisionTransformer, first: str, later: str, *, shared: bool = True,
            kernel_size: int = SIA_FIT.kernel_size, steps: int = SIA_FIT.steps, lr: float = SIA_FIT.lr,
            renorm_every: int = SIA_FIT.renorm_every, generator: torch.Generator,
            device: torch.device | str = "cpu") -> list[dict]:
    """[SIA]'s impulse fit of every attention layer's Q, K, in place (module docstring; code-2404's defaults: kernel 3,
    10000 steps, lr 1e-4, renorm every 100). Returns one record per fit: {layers, pseudo_input, mse, target_mass,
    peak, offsets}."""
    _check(model)
    grid = token_grid(model)
    pe = model.pos_embed.detach()[0].to(device)
    blocks = list(model.blocks)
    heads, dim = blocks[0].attn.num_heads, pe.shape[-1]
    head_dim = dim // heads
    if kernel_size > 2 * min(grid) - 1:
        raise PipelineError(f"impulse kernel {kernel_size} is wider than the {grid[0]}x{grid[1]} token grid allows")

    def fit(kind: str) -> tuple[Tensor, Tensor, dict]:
        p = torch.nn.functional.layer_norm(pseudo_input(kind, pe, generator).float().to(device), [dim])
        offsets = window_offsets(heads, kernel_size, generator)
        targets = impulse_matrices(offsets, grid).float().to(device)
        q, k, maps = fit_impulse_qk(p, targets, head_dim, steps=steps, lr=lr, sigma=head_dim**-0.5,
                                    renorm_every=renorm_every, generator=generator)
        record = {"pseudo_input": kind, "mse": float(torch.nn.functional.mse_loss(maps, targets))}
        return q, k, record | fit_quality(maps.cpu(), offsets, grid) | {"offsets": [list(o) for o in offsets]}

    plan = [first] + [later] * (len(blocks) - 1)
    records: list[dict] = []
    current = None
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the fit's tensors are tiny: more threads only wait on each other (and vary the bits)
    try:
        for layer, kind in enumerate(plan):
            refit = layer == 0 or not shared or (layer == 1 and first != later)
            if refit:
                current = fit(kind)
                records.append(current[2] | {"layers": [layer]})
            else:
                records[-1]["layers"].append(layer)
            write_qk(blocks[layer].attn, current[0], current[1])
    finally:
        torch.set_num_threads(threads)
    return records


@torch.no_grad()
def write_qk(attn, q: Tensor, k: Tensor) -> None:
    """Write Q (h, D, d) into timm's query rows (h, d) = Q_h[:, d] and K (h, d, D) into its key rows K_h[d, :]."""
    heads, dim, head_dim = q.shape
    weight = attn.qkv.weight
    weight[:dim] = q.transpose(1, 2).reshape(heads * head_dim, dim).to(weight)
    weight[dim:2 * dim] = k.reshape(heads * head_dim, dim).to(weight)

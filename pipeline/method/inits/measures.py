"""Mixing maps of a model and the two measures the tests and the report's figures use.

A mixing map, (batch, heads, N, N) with prefix tokens first, says how much each query takes from each key:
- ViT and Swin: the attention probabilities recomputed from the block's own qkv (fused attention never
  materialises them); Swin's are per window.
- MlpMixer: the token MLP's Jacobian |J|, averaged over channels and row-normalised (one "head").

`peak_agreement`: per head, the fraction of queries whose strongest weight sits at the head's offset (queries
whose offset key is off the grid are left out). `locality_mass`: per head, the mean weight inside the f x f
neighbourhood of the query; a flat map gives `uniform_locality_mass`, about f^2 / N.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.errors import PipelineError
from pipeline.method.inits.arch import MIXER, SWIN, blocks, family, patch_pos_embed
from pipeline.method.inits.geometry import neighbourhood_mask, shifted_index


class _Captured(Exception):
    """Raised by the last capture hook to stop the forward pass early."""


def attention_probs(attn: nn.Module, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Attention probabilities (B, heads, N, N) of a timm Attention / WindowAttention on its input x (B, N, C)."""
    batch, tokens, _ = x.shape
    if hasattr(attn, "qk_input"):  # [CI]'s mixed attention: queries and keys see alpha x + (1 - alpha) PE
        x = attn.qk_input(x)
    qkv = attn.qkv(x).reshape(batch, tokens, 3, attn.num_heads, -1).permute(2, 0, 3, 1, 4)
    q = getattr(attn, "q_norm", nn.Identity())(qkv[0])
    k = getattr(attn, "k_norm", nn.Identity())(qkv[1])
    logits = (q * attn.scale) @ k.transpose(-2, -1)
    table = getattr(attn, "relative_position_bias_table", None)
    if table is not None:  # Swin: bias[h, i, j] = table[index[i, j], h]
        logits = logits + table[attn.relative_position_index.view(-1)].view(tokens, tokens, -1).permute(2, 0, 1)
    if mask is not None and table is not None:  # Swin's (windows, N, N) shifted-window mask
        windows = mask.shape[0]
        logits = (logits.view(-1, windows, attn.num_heads, tokens, tokens) + mask[None, :, None]).flatten(0, 1)
    elif mask is not None:
        logits = logits + mask
    return logits.softmax(-1)


def token_mixing_maps(mlp: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Row-normalised channel-mean |Jacobian| (B, 1, N, N) of a Mixer token MLP on its input x (B, C, N)."""
    batch, channels, tokens = x.shape
    rows = x.reshape(batch * channels, tokens)
    jac = torch.func.vmap(torch.func.jacrev(mlp))
    chunk = max(1, 2**22 // tokens**2)
    total = torch.cat([jac(rows[i : i + chunk]).abs() for i in range(0, rows.shape[0], chunk)])
    mean = total.view(batch, channels, tokens, tokens).mean(1)
    return (mean / mean.sum(-1, keepdim=True)).unsqueeze(1)


def capture_inputs(model: nn.Module, modules: list[nn.Module], x: torch.Tensor) -> dict[int, tuple]:
    seen: dict[int, tuple] = {}

    def hook(module, args, kwargs):
        seen[id(module)] = (args[0], kwargs.get("mask", kwargs.get("attn_mask")))
        if len(seen) == len({id(m) for m in modules}):
            raise _Captured

    handles = [m.register_forward_pre_hook(hook, with_kwargs=True) for m in modules]
    try:
        model.forward_features(x)
    except _Captured:
        pass
    finally:
        for handle in handles:
            handle.remove()
    return seen


def pseudo_input(model: nn.Module, kind: str, block: nn.Module) -> torch.Tensor:
    """The positional pseudo-input of one block's mixing layer: the block's norm1 of the ViT position embedding's
    patch rows (as code-2505's `impulse_init`); zeros for Swin (the map is softmax of the bias) and Mixer (the
    Jacobian at 0)."""
    if kind == SWIN:
        return torch.zeros(1, block.attn.window_area, block.attn.qkv.in_features)
    if kind == MIXER:
        return torch.zeros(1, 1, block.mlp_tokens.fc1.in_features)
    pe = patch_pos_embed(model)
    if pe is None:
        raise PipelineError("this ViT has no position embedding, so there is no pseudo-input; pass images x")
    return block.norm1(pe[None])


def attention_maps(
    model: nn.Module, x: torch.Tensor | None = None, layers: tuple[int, ...] = (0,)
) -> dict[int, torch.Tensor]:
    """Mixing maps of the blocks `layers` (negative from the end; Swin counts across stages), keyed as given, on images
    `x` (B, C, H, W) or, for None, the positional pseudo-input."""
    kind = family(model)
    chosen = blocks(model, kind)
    depth = len(chosen)
    for layer in layers:
        if not -depth <= layer < depth:
            raise PipelineError(f"layer {layer}: the model has {depth} blocks; use -{depth} to {depth - 1}")
    mixers = {layer: chosen[layer].mlp_tokens if kind == MIXER else chosen[layer].attn for layer in layers}
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            if x is None:
                inputs = {id(mixers[l]): (pseudo_input(model, kind, chosen[l]), None) for l in layers}
            else:
                inputs = capture_inputs(model, list(mixers.values()), x)
            if kind == MIXER:
                return {l: token_mixing_maps(m, inputs[id(m)][0]) for l, m in mixers.items()}
            return {l: attention_probs(m, *inputs[id(m)]) for l, m in mixers.items()}
    finally:
        model.train(was_training)


def patch_queries(maps: torch.Tensor, grid: tuple[int, int]) -> tuple[torch.Tensor, int]:
    tokens = grid[0] * grid[1]
    prefix = maps.shape[-1] - tokens
    if maps.dim() < 3 or maps.shape[-2] != maps.shape[-1] or prefix < 0:
        raise PipelineError(
            f"maps of shape {tuple(maps.shape)} do not fit a {grid[0]}x{grid[1]} grid: expected ([batch,] heads, "
            f"N, N) with N >= {tokens} (prefix tokens first)"
        )
    rows = maps[..., prefix:, :]
    return rows.reshape(-1, *rows.shape[-3:]), prefix


def peak_agreement(maps: torch.Tensor, offsets: list[tuple[int, int]], grid: tuple[int, int]) -> torch.Tensor:
    """Per head (heads,), the fraction of queries whose largest weight in `maps` ((batch,) heads, N, N) is at the
    head's offset (`targets.layer_offsets`) on the (rows, cols) `grid` (`arch.mixing_grid`)."""
    rows, prefix = patch_queries(maps, grid)
    if len(offsets) != rows.shape[1]:
        raise PipelineError(f"{len(offsets)} offsets for maps with {rows.shape[1]} heads: give one per head")
    best = rows.argmax(-1)
    hits = []
    for h, offset in enumerate(offsets):
        keys = shifted_index(grid, offset)
        inside = keys >= 0
        hits.append((best[:, h, inside] == keys[inside] + prefix).double().mean())
    return torch.stack(hits)


def locality_mass(maps: torch.Tensor, grid: tuple[int, int], kernel_size: int) -> torch.Tensor:
    """Per head (heads,), the mean mixing weight inside each query's kernel_size x kernel_size neighbourhood."""
    rows, prefix = patch_queries(maps, grid)
    mask = F.pad(neighbourhood_mask(grid, kernel_size), (prefix, 0)).to(rows.dtype)
    return (rows * mask).sum(-1).mean(dim=(0, 2)).double()


def uniform_locality_mass(grid: tuple[int, int], kernel_size: int, prefix: int = 0) -> float:
    """`locality_mass` of maps spread evenly over all N + prefix keys (the 'no structure' reference)."""
    tokens = grid[0] * grid[1]
    return neighbourhood_mask(grid, kernel_size).sum().item() / tokens / (tokens + prefix)

"""Which timm family a model belongs to, and where its token-mixing layers are.

Supported (timm 1.0.x, any size or grid): `VisionTransformer` and its DeiT variants with pre-norm `Block`s,
`SwinTransformer` V1, and `MlpMixer`. Anything else raises PipelineError before any weight is touched.
"""

from __future__ import annotations

import torch
from timm.layers import Attention
from timm.models.mlp_mixer import MixerBlock, MlpMixer
from timm.models.swin_transformer import SwinTransformer, WindowAttention
from timm.models.vision_transformer import Block, VisionTransformer
from torch import nn

from pipeline.errors import PipelineError

VIT, SWIN, MIXER = "vit", "swin", "mixer"
SUPPORTED = "timm VisionTransformer/DeiT, SwinTransformer (V1) and MlpMixer (MixerBlock) models"


def family(model: nn.Module) -> str:
    """'vit', 'swin' or 'mixer' for a supported timm model; PipelineError otherwise."""
    name = type(model).__name__
    if isinstance(model, VisionTransformer):
        bad = [i for i, b in enumerate(model.blocks) if type(b) is not Block or not isinstance(b.attn, Attention)]
        if bad:
            raise PipelineError(
                f"{name}: block {bad[0]} is {type(model.blocks[bad[0]]).__name__} with "
                f"{type(model.blocks[bad[0]].attn).__name__}; only pre-norm timm Block + Attention ViTs are "
                f"supported (use the default block_fn/attn_layer)"
            )
        return VIT
    if isinstance(model, SwinTransformer):
        if not all(isinstance(b.attn, WindowAttention) for b in blocks(model, SWIN)):
            raise PipelineError(f"{name}: a block lacks timm's WindowAttention; supported are {SUPPORTED}")
        return SWIN
    if isinstance(model, MlpMixer):
        if not all(isinstance(b, MixerBlock) for b in model.blocks):
            raise PipelineError(f"{name}: blocks are not MixerBlocks (gMLP/ResMLP?); supported are {SUPPORTED}")
        return MIXER
    raise PipelineError(f"{name} is not supported by pipeline.method.inits; supported are {SUPPORTED}")


def blocks(model: nn.Module, kind: str) -> list[nn.Module]:
    """The model's token-mixing blocks in forward order (Swin: all stages flattened)."""
    if kind == SWIN:
        return [b for stage in model.layers for b in stage.blocks]
    return list(model.blocks)


def attention_layers(model: nn.Module, kind: str) -> list[nn.Module]:
    return [] if kind == MIXER else [b.attn for b in blocks(model, kind)]


def token_grid(model: nn.Module, kind: str) -> tuple[int, int]:
    embed = model.stem if kind == MIXER else model.patch_embed
    return tuple(int(g) for g in embed.grid_size)


def mixing_grid(model: nn.Module, layer: int) -> tuple[int, int]:
    """The (rows, cols) grid of one block's mixing maps: the patch grid (ViT, Mixer) or the window (Swin)."""
    kind = family(model)
    if kind == SWIN:
        return tuple(int(w) for w in blocks(model, kind)[layer].attn.window_size)
    return token_grid(model, kind)


def patch_pos_embed(model: nn.Module) -> torch.Tensor | None:
    """A ViT's position embedding rows of the patch tokens (N, D), without class/register rows; or None."""
    if model.pos_embed is None:
        return None
    start = 0 if model.no_embed_class else model.num_prefix_tokens
    return model.pos_embed[0, start:]


def check_fused_qkv(attn: nn.Module, where: str) -> None:
    dim = attn.qkv.in_features
    head_dim = attn.qkv.out_features // (3 * attn.num_heads)
    if head_dim * attn.num_heads != dim or attn.proj.weight.shape != (dim, dim):
        raise PipelineError(
            f"{where}: attention width {head_dim * attn.num_heads} != embedding width {dim}; the structured "
            f"inits need num_heads * head_dim == embed_dim (leave attn_head_dim unset)"
        )
    if not isinstance(getattr(attn, "q_norm", nn.Identity()), nn.Identity):
        raise PipelineError(
            f"{where}: the model normalises q and k (qk_norm=True), which rescales every designed logit; "
            f"build it with qk_norm=False"
        )

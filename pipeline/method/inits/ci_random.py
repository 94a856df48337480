"""[CI]'s `random` arm (arXiv 2401.12511: `random512_64`), the control of its impulse/mimetic grid.

Source: code-2401 `vit.py` (`Attention.__init__`, init strings `random{D}_{d}`): per layer, all heads' Q ~ sqrt(1/D)
U(-1, 1) (heads, D, d), then all heads' K ~ sqrt(1/D) U(-1, 1) (heads, d, D), written as q rows of head h = Q_h^T and k
rows = K_h: a random rank-d map, no target, no SVD. Everything else keeps PyTorch's default, as in code-2401.

[CI]'s constants differ from code-2505's mimetic (`mimetic.py`): Var Z_ij = 1/(3D) against 1/D, and no V/proj
step. ViT and Swin (Swin's bias keeps its default); an MlpMixer has no query/key factors, so PipelineError.
"""

from __future__ import annotations

import torch
from torch import nn

from pipeline.errors import PipelineError
from pipeline.method.inits.arch import MIXER, attention_layers, check_fused_qkv
from pipeline.method.inits.default import pytorch_default_
from pipeline.method.inits.lowrank import write_qk_heads_
from pipeline.method.inits.rng import uniform


def random_qk_(attn: nn.Module, generator: torch.Generator) -> None:
    dim, heads = attn.qkv.in_features, attn.num_heads
    head_dim, bound = dim // heads, dim**-0.5
    q = uniform((heads, dim, head_dim), bound, generator)
    k = uniform((heads, head_dim, dim), bound, generator)
    write_qk_heads_(attn, q.mT, k)


def random_init(model: nn.Module, kind: str, generator: torch.Generator) -> list[torch.Tensor]:
    """The `random` arm: PyTorch defaults, then [CI]'s random Q/K in every attention layer; returns the parameters
    it wrote beyond PyTorch's defaults."""
    if kind == MIXER:
        raise PipelineError(
            f"init 'random' is [CI]'s random query/key factors; {type(model).__name__} has no attention (use "
            f"'default', whose token mixing is already random, or a ViT/Swin)"
        )
    pytorch_default_(model, kind, generator)
    layers = attention_layers(model, kind)
    for i, attn in enumerate(layers):
        check_fused_qkv(attn, f"block {i}")
        random_qk_(attn, generator)
    return [attn.qkv.weight for attn in layers]

"""[CI]'s `random` arm (Zheng, Li, Lucey, arXiv 2401.12511: `random512_64`), the control of its impulse/mimetic grid.

paper.md section 1.2 "[CI]"; code-2401 `vit.py` (`Attention.__init__`, init strings `random{D}_{d}`): per layer,
the query and key factors of every head are drawn directly, with no target matrix and no SVD:

    Q ~ sqrt(1/D) U(-1, 1)   (heads, D, d),   then   K ~ sqrt(1/D) U(-1, 1)   (heads, d, D),

d = head_dim, and written as q rows of head h = Q_h^T, k rows = K_h (code-2401: `to_qk.weight[:inner] =
rearrange(Q, 'h n d -> n (h d)').T`), so head h's logits are x Q_h K_h x^T / sqrt(d): a random rank-d map with
Var Q_ij = Var K_ij = 1/(3D). Everything else keeps PyTorch's default (code-2401 leaves to_v / to_out at
nn.Linear's default too). Draw order as code-2401: all heads' Q, then all heads' K, layer by layer.

How [CI]'s constants differ from the mimetic arm that [NeurIPS] trains (`mimetic.py`): [CI]'s `mimetic512_64`
is 0.7 sqrt(1/D) U(-1, 1) + 0.7 I split by SVD, so its noise is U(+-sqrt(1/D)) with variance 1/(3D); code-2505's
get_ortho_like draws U(+-sqrt(3/D)) with variance 1/D (three times larger, sqrt(3) in std), and adds the V/proj
step that [CI] does not have. [CI]'s `random` is not "mimetic without the identity" split by SVD: the two factors
are independent uniforms; measured for D = 512, d = 64, the singular values of Q_h K_h span 0.19-0.51, where the
top-d triplets of sqrt(1/D) U(-1, 1) would span 0.89-1.15.

Architectures: ViT and Swin (every WindowAttention, per head as above; the relative-position bias keeps its
default). An MlpMixer has no query/key factors, so `random` raises PipelineError there (its `default` arm already
starts the token mixing at a random dense map).
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
    """code-2401's random512_64 Q/K of one attention layer, in place."""
    dim, heads = attn.qkv.in_features, attn.num_heads
    head_dim, bound = dim // heads, dim**-0.5
    q = uniform((heads, dim, head_dim), bound, generator)
    k = uniform((heads, head_dim, dim), bound, generator)
    write_qk_heads_(attn, q.mT, k)


def random_init(model: nn.Module, kind: str, generator: torch.Generator) -> list[torch.Tensor]:
    """The `random` arm: PyTorch defaults, then [CI]'s random Q/K in every attention layer (see the module doc).

    Returns:
        The parameters it wrote beyond PyTorch's defaults.
    """
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

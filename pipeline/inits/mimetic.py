"""Mimetic initialization (Trockman & Kolter, ICML 2023), exactly as code-2505 builds its `mimetic` arm.

paper.md section 1.1 (code-2505, `get_ortho_like` and `post_init_weights('mimetic')`):

    A = alpha * Z + sign * beta * I,   Z_ij ~ U(-sqrt(3/D), +sqrt(3/D))  (so Var Z_ij = 1/D)
    A = U S V^T (SVD),   L = U sqrt(S),   R = sqrt(S) V^T,   so L R = A.

- Q/K, per layer and per head h, an independent draw of (L, R) with (alpha_qk, beta_qk, +1):
  q rows of head h = L[:, :d]^T and k rows = R[:d, :], so x W_q,h^T W_k,h x^T = x L[:, :d] R[:d, :] x^T, the
  rank-d (= head_dim) truncation of 0.7 Z + 0.7 I.
- V/proj, per layer, one draw with (alpha_vo, beta_vo, -1): v rows = L and proj = R. The value-then-proj map is
  therefore x -> x (R L)^T, *not* x A (the impulse arm transposes both and gets exactly A; paper.md section 4,
  item 4). We keep this convention difference because it is the official code's.
- Everything else keeps PyTorch's default (`default.pytorch_default_` runs first); pos_embed is not scaled.

Architectures. ViT and Swin: every attention layer as above (Swin's relative-position bias keeps its default).
MlpMixer has no attention; its token-mixing MLP plays the role of the attention map (see `mixer.py`), so
`mimetic` sets each block's token-mixing map to alpha_qk Z + beta_qk I on the N tokens ("attention close to
identity plus noise", the QK half of the recipe), written exactly with `mixer.write_token_mixing_`.
Draws come from the caller's generator in float64 (code-2505 uses NumPy float64 and the global NumPy RNG).
"""

from __future__ import annotations

import torch
from torch import nn

from pipeline.inits.arch import MIXER, attention_layers, blocks, check_fused_qkv
from pipeline.inits.default import pytorch_default_


def mimetic_matrix(
    dim: int, alpha: float, beta: float, sign: int, generator: torch.Generator, count: int = 1
) -> torch.Tensor:
    """`count` draws of A = alpha Z + sign beta I with Z ~ U(+-sqrt(3/dim)): (count, dim, dim) float64."""
    bound = (3.0 / dim) ** 0.5
    z = (torch.rand(count, dim, dim, generator=generator, dtype=torch.float64) * 2 - 1) * bound
    return alpha * z + sign * beta * torch.eye(dim, dtype=torch.float64)


def ortho_like(
    dim: int, alpha: float, beta: float, sign: int, generator: torch.Generator, count: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """`count` independent draws of code-2505's get_ortho_like: (L, R), each (count, dim, dim) float64."""
    u, s, vh = torch.linalg.svd(mimetic_matrix(dim, alpha, beta, sign, generator, count))
    root = s.sqrt()
    return u * root.unsqueeze(-2), root.unsqueeze(-1) * vh


def write_rows_(weight: torch.Tensor, start: int, rows: torch.Tensor) -> None:
    """Copy `rows` (float64, any device) into weight[start : start + len(rows)]."""
    weight[start : start + rows.shape[0]] = rows.to(weight.device, weight.dtype)


def mimetic_attention_(
    attn: nn.Module, generator: torch.Generator, alpha_qk: float, beta_qk: float, alpha_vo: float, beta_vo: float
) -> None:
    """Mimetic Q/K (per head) and V/proj of one timm Attention or WindowAttention, in place."""
    dim, heads = attn.qkv.in_features, attn.num_heads
    head_dim = dim // heads
    left, right = ortho_like(dim, alpha_qk, beta_qk, +1, generator, count=heads)
    value, proj = ortho_like(dim, alpha_vo, beta_vo, -1, generator)
    with torch.no_grad():
        for h in range(heads):
            write_rows_(attn.qkv.weight, h * head_dim, left[h, :, :head_dim].T)
            write_rows_(attn.qkv.weight, dim + h * head_dim, right[h, :head_dim, :])
        write_rows_(attn.qkv.weight, 2 * dim, value[0])
        write_rows_(attn.proj.weight, 0, proj[0])


def mimetic_init(
    model: nn.Module,
    kind: str,
    generator: torch.Generator,
    *,
    alpha_qk: float = 0.7,
    beta_qk: float = 0.7,
    alpha_vo: float = 0.4,
    beta_vo: float = 0.4,
) -> None:
    """The `mimetic` arm: PyTorch defaults, then the mimetic attention (or token-mixing) weights.

    Args:
        model: a supported timm model, changed in place; kind: its `arch.family`.
        generator: source of every random draw.
        alpha_qk, beta_qk: W_q W_k^T ~ alpha_qk Z + beta_qk I (per head, rank head_dim).
        alpha_vo, beta_vo: value/proj product ~ alpha_vo Z - beta_vo I (in code-2505's R L convention).
    """
    from pipeline.inits.mixer import write_token_mixing_

    pytorch_default_(model, kind, generator)
    if kind == MIXER:
        for block in blocks(model, kind):
            tokens = block.mlp_tokens.fc1.in_features
            mixing = mimetic_matrix(tokens, alpha_qk, beta_qk, +1, generator)[0]
            write_token_mixing_(block.mlp_tokens, mixing, "mimetic")
        return
    for i, attn in enumerate(attention_layers(model, kind)):
        check_fused_qkv(attn, f"block {i}")
        mimetic_attention_(attn, generator, alpha_qk, beta_qk, alpha_vo, beta_vo)

"""[CI]'s Simple ViT with the alpha-mixed attention M'_I (its alpha sweep) or Model III (its Tables 1-2).

Source: code-2401 (osiriszjq/impulse_init @154e3fb) `vit.py` (`SimpleViT`, `Attention`, `posemb_sincos_2d`) as
`vit_pex.sh` runs it (`--spatial_pe --spatial_x --use_value`). In every layer

    Z = alpha * LN(x) + (1 - alpha) * PE,   attention = softmax(scale * (Z W_q)(Z W_k)^T),   values = LN(x) W_v,

PE the fixed 2-D sin-cos embedding, which enters only here. `scale` is head_dim^-0.5 unless an init sets it
(`ci_2401`). [CI] Table 1's other columns are forms of this model: the Simple ViT (`input_pe=True`: the tokens
carry alpha * x + (1 - alpha) * PE), with no PE (alpha 1), Model I (alpha 0.5) and Model II (alpha 0).

Model III (`attention='model3'`, code-2401's "Q K format") uses per-head learnable maps softmax(scale Q_h K_h),
Q_h (N, r), K_h (r, N), that never read the input; `trainable_qk=False` freezes them (Table 2's NT). Without
`value` the values are LN(x) itself (code-2401's `v = x`). code-2401 requires an init string for Q, K; our
default is its `random{N}_{r}` law.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from pipeline.errors import PipelineError


def posemb_sincos_2d(h: int, w: int, dim: int, temperature: float = 10000.0) -> Tensor:
    """(h*w, dim) fixed 2-D sin-cos position embedding, rows in raster order; columns x-sin, x-cos, y-sin, y-cos
    (code-2401's `posemb_sincos_2d`)."""
    if dim % 4:
        raise PipelineError(f"dim = {dim}: the 2-D sin-cos embedding needs a multiple of 4")
    y, x = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    omega = 1.0 / temperature ** (torch.arange(dim // 4) / (dim // 4 - 1))
    y = y.flatten()[:, None] * omega[None, :]
    x = x.flatten()[:, None] * omega[None, :]
    return torch.cat((x.sin(), x.cos(), y.sin(), y.cos()), dim=1).float()


ATTENTION_FORMS = ("mixed", "model3")


def split_heads(t: Tensor, heads: int, head_dim: int) -> Tensor:
    return t.unflatten(-1, (heads, head_dim)).transpose(-3, -2)


def check_novalue(value: bool, inner: int, dim: int) -> None:
    if not value and inner != dim:
        raise PipelineError(f"attention without value reads LN(x) as values: heads x head_dim = {inner} must equal"
                            f" dim = {dim}")


class MixedAttention(nn.Module):
    """One layer of M'_I: queries and keys from alpha * LN(x) + (1 - alpha) * PE, values LN(x) W_v (or LN(x))."""

    def __init__(self, dim: int, heads: int, head_dim: int, alpha: float, value: bool = True):
        super().__init__()
        inner = heads * head_dim
        check_novalue(value, inner, dim)
        self.heads, self.head_dim, self.alpha = heads, head_dim, float(alpha)
        self.scale = head_dim**-0.5
        self.norm = nn.LayerNorm(dim)
        self.to_qk = nn.Linear(dim, 2 * inner, bias=False)  # rows [0, inner) are queries, [inner, 2 inner) keys
        self.to_v = nn.Linear(dim, inner, bias=False) if value else None
        self.to_out = nn.Linear(inner, dim, bias=False)

    def split(self, t: Tensor) -> Tensor:
        return split_heads(t, self.heads, self.head_dim)

    def maps(self, h: Tensor, pe: Tensor) -> Tensor:
        z = self.alpha * h + (1.0 - self.alpha) * pe.to(h.dtype)
        q, k = map(self.split, self.to_qk(z).chunk(2, dim=-1))
        return (q @ k.transpose(-1, -2) * self.scale).softmax(dim=-1)

    def attention(self, x: Tensor, pe: Tensor) -> Tensor:
        return self.maps(self.norm(x), pe)

    def forward(self, x: Tensor, pe: Tensor) -> Tensor:
        h = self.norm(x)
        v = h if self.to_v is None else self.to_v(h)
        out = self.maps(h, pe) @ self.split(v)
        return self.to_out(out.transpose(-3, -2).flatten(-2))


class FixedAttention(nn.Module):
    """One layer of Model III: maps softmax(scale Q_h K_h) that do not depend on the input."""

    def __init__(self, dim: int, heads: int, head_dim: int, tokens: int, value: bool, trainable_qk: bool):
        super().__init__()
        inner = heads * head_dim
        check_novalue(value, inner, dim)
        self.heads, self.head_dim, self.scale = heads, head_dim, head_dim**-0.5
        bound = tokens**-0.5
        self.q = nn.Parameter(torch.empty(heads, tokens, head_dim).uniform_(-bound, bound), requires_grad=trainable_qk)
        self.k = nn.Parameter(torch.empty(heads, head_dim, tokens).uniform_(-bound, bound), requires_grad=trainable_qk)
        self.norm = nn.LayerNorm(dim)
        self.to_v = nn.Linear(dim, inner, bias=False) if value else None
        self.to_out = nn.Linear(inner, dim, bias=False)

    def maps(self) -> Tensor:
        return (self.q @ self.k * self.scale).softmax(dim=-1)

    def attention(self, x: Tensor, pe: Tensor) -> Tensor:
        return self.maps().expand(x.shape[0], -1, -1, -1)

    def forward(self, x: Tensor, pe: Tensor) -> Tensor:
        h = self.norm(x)
        v = h if self.to_v is None else self.to_v(h)
        out = self.maps().to(v.dtype) @ split_heads(v, self.heads, self.head_dim)
        return self.to_out(out.transpose(-3, -2).flatten(-2))


class FeedForward(nn.Sequential):
    def __init__(self, dim: int, hidden: int):
        super().__init__(nn.LayerNorm(dim), nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))


class Block(nn.Module):
    def __init__(self, attn: nn.Module, dim: int, mlp_dim: int):
        super().__init__()
        self.attn = attn
        self.ff = FeedForward(dim, mlp_dim)

    def forward(self, x: Tensor, pe: Tensor) -> Tensor:
        x = self.attn(x, pe) + x
        return self.ff(x) + x


class SimpleViT(nn.Module):
    """code-2401's Simple ViT with M'_I (`attention='mixed'`, content weight `alpha`) or Model III (`'model3'`) in every
    block; `input_pe`: the tokens carry the PE ([CI] Table 1's Simple ViT); `value`: values LN(x) W_v, else LN(x)."""

    def __init__(self, *, image_size: int, patch_size: int, num_classes: int, dim: int, depth: int, heads: int,
                 head_dim: int, mlp_dim: int, channels: int = 3, alpha: float = 0.5, attention: str = "mixed",
                 value: bool = True, trainable_qk: bool = True, input_pe: bool = False):
        super().__init__()
        if attention not in ATTENTION_FORMS:
            raise PipelineError(f"attention = {attention!r}: use one of {', '.join(ATTENTION_FORMS)}")
        if image_size % patch_size:
            raise PipelineError(f"patch_size = {patch_size} does not divide image_size = {image_size}")
        if not 0.0 <= alpha <= 1.0:
            raise PipelineError(f"alpha = {alpha}: must lie in [0, 1]")
        self.patch_size, self.grid = patch_size, image_size // patch_size
        patch_dim = channels * patch_size**2
        self.to_patch_embedding = nn.Sequential(nn.LayerNorm(patch_dim), nn.Linear(patch_dim, dim), nn.LayerNorm(dim))
        self.register_buffer("pos_embedding", posemb_sincos_2d(self.grid, self.grid, dim), persistent=False)
        self.attention, self.input_pe, self.alpha = attention, input_pe, float(alpha)

        def attn() -> nn.Module:
            if attention == "model3":
                return FixedAttention(dim, heads, head_dim, self.grid**2, value, trainable_qk)
            return MixedAttention(dim, heads, head_dim, 1.0 if input_pe else alpha, value)

        self.blocks = nn.ModuleList(Block(attn(), dim, mlp_dim) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.linear_head = nn.Linear(dim, num_classes)

    def patches(self, img: Tensor) -> Tensor:
        """(B, C, H, W) -> (B, tokens, p*p*C), each patch flattened as (p1, p2, c) like code-2401's Rearrange."""
        b, c, p, g = img.shape[0], img.shape[1], self.patch_size, self.grid
        return img.reshape(b, c, g, p, g, p).permute(0, 2, 4, 3, 5, 1).reshape(b, g * g, p * p * c)

    def forward(self, img: Tensor) -> Tensor:
        x = self.to_patch_embedding(self.patches(img))
        if self.input_pe:
            x = self.alpha * x + (1.0 - self.alpha) * self.pos_embedding.to(x.dtype)
        for block in self.blocks:
            x = block(x, self.pos_embedding)
        return self.linear_head(self.norm(x).mean(dim=1))

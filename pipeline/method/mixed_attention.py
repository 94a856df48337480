"""[CI]'s alpha-mixed attention M'_I on timm's ViT, as a module swap: `mix_attention_input(model, alpha)`.

[CI] (arXiv 2401.12511, paper.md section 1.2) trains its Simple ViT with the attention form

    M'_I = softmax(Z Q K^T Z^T),  Z = alpha * X + (1 - alpha) * P,

in every layer: alpha = 0 is M_II (the attention map depends on positions only), alpha = 0.5 is M_I
(softmax((X+P) Q K^T (X+P)^T) up to scale), and the values stay content (X W_v). In code-2401,
x' = alpha * LN(x) + (1 - alpha) * PE. Here each block's `attn` of a timm `VisionTransformer` is replaced by a
`MixedInputAttention` that computes queries and keys from

    z = alpha * norm1(x) + (1 - alpha) * norm1(PE)

and values from norm1(x), with the block's own weights, so alpha = 1 is exactly timm's block.

Deliberate differences from code-2401 (documented where the report shows [CI]'s table):
- The PE enters attention through the block's `norm1` (without its affine at init: the same LayerNorm the
  tokens pass). code-2401 mixes its raw fixed sin-cos PE; our PE is timm's learned `pos_embed` (which the impulse
  arm scales by 18), so normalising it keeps both terms on one scale, and it makes the pseudo-input of the
  [NeurIPS] impulse construction (norm1 of the PE, `pipeline.method.inits`) exactly the attention input at alpha = 0:
  the impulse heads peak at their offsets by construction.
- timm's ViT still adds the PE to the input tokens (code-2401's Model I adds it only inside attention); keeping
  it is what makes alpha = 1 the stock model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from timm.models.vision_transformer import Attention, VisionTransformer
from torch import Tensor, nn

from pipeline.errors import PipelineError


class MixedInputAttention(Attention):
    """timm's `Attention` whose queries and keys see z = alpha * x + (1 - alpha) * norm(PE); values see x.

    Built from an existing `Attention` (`from_attention`), sharing its parameters. The position embedding is
    read from the owning model at each call (`position_tokens`), so training updates it as usual.
    """

    alpha: float

    @classmethod
    def from_attention(cls, attn: Attention, alpha: float, position_tokens) -> MixedInputAttention:
        if attn.gate is not None or attn.attn_dim != attn.qkv.in_features:
            raise PipelineError("the alpha-mixed attention supports timm's plain ViT attention (no gate, attn_dim ="
                                " embed_dim)")
        attn.__class__ = cls
        attn.alpha = float(alpha)
        object.__setattr__(attn, "position_tokens", position_tokens)  # a callable, not a submodule
        return attn

    def qk_input(self, x: Tensor) -> Tensor:
        """The attention's query/key input for block input `x` (already through the block's norm1)."""
        if self.alpha == 1.0:
            return x
        return self.alpha * x + (1.0 - self.alpha) * self.position_tokens(x)

    def forward(self, x: Tensor, attn_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        B, N, C = x.shape
        w_q, w_k, w_v = self.qkv.weight.chunk(3)
        b_q, b_k, b_v = self.qkv.bias.chunk(3) if self.qkv.bias is not None else (None, None, None)
        z = self.qk_input(x)

        def heads(t: Tensor) -> Tensor:
            return t.reshape(B, N, self.num_heads, self.head_dim).transpose(1, 2)

        q, k, v = heads(F.linear(z, w_q, b_q)), heads(F.linear(z, w_k, b_k)), heads(F.linear(x, w_v, b_v))
        q, k = self.q_norm(q), self.k_norm(k)
        if self.fused_attn:
            x = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal,
                                               dropout_p=self.attn_drop.p if self.training else 0.0)
        else:
            attn = (q * self.scale) @ k.transpose(-2, -1)
            if attn_mask is not None:
                attn = attn + attn_mask
            x = self.attn_drop(attn.softmax(dim=-1)) @ v
        x = self.norm(x.transpose(1, 2).reshape(B, N, self.attn_dim))
        return self.proj_drop(self.proj(x))


def _position_tokens(model: VisionTransformer, norm: nn.Module):
    """norm(PE) for every token of the sequence: the prefix (cls) tokens get their PE row, or zeros when the
    model does not embed them (no_embed_class)."""

    def tokens(x: Tensor) -> Tensor:
        pe = model.pos_embed
        missing = x.shape[1] - pe.shape[1]
        if missing:
            pe = torch.cat([pe.new_zeros(1, missing, pe.shape[-1]), pe], dim=1)
        return norm(pe).expand(x.shape[0], -1, -1)

    return tokens


def mix_attention_input(model: nn.Module, alpha: float) -> nn.Module:
    """Give every block of a timm ViT [CI]'s alpha-mixed attention input (in place); returns the model.

    Args:
        model: a timm `VisionTransformer` with a learned absolute position embedding.
        alpha: in [0, 1]; 1 leaves the model exactly as timm computes it.
    """
    if not isinstance(model, VisionTransformer) or model.pos_embed is None:
        raise PipelineError(f"the alpha-mixed attention ([CI] M'_I) needs a timm ViT with a position embedding;"
                            f" got {type(model).__name__}")
    if not 0.0 <= alpha <= 1.0:
        raise PipelineError(f"alpha = {alpha}: must lie in [0, 1] (0: positions only, 1: the stock ViT)")
    for block in model.blocks:
        MixedInputAttention.from_attention(block.attn, alpha, _position_tokens(model, block.norm1))
    return model

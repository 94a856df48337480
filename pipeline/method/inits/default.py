"""The two baselines: PyTorch's default init (`default`) and timm's own init (`timm`).

`default` is code-2505's "Default": PyTorch's Linear and conv init, LayerNorms (1, 0),
`pos_embed ~ N(0, 0.02^2)`, `cls_token = 0` (and any other prefix token), then the optional norm_p / norm_q /
norm_v multipliers of `post_init_weights('default<p>_<q>_<v>')`. We set these ourselves: timm's
`weight_init='skip'` leaves pos_embed and cls_token uninitialised. `timm` is timm's `init_weights('')`, the
truncated normal the paper's text describes as its Default (the code runs PyTorch's). A frozen position embedding
is architecture, not init: every arm keeps it.
"""

from __future__ import annotations

import torch
from torch import nn

from pipeline.errors import PipelineError
from pipeline.method.inits.arch import MIXER, VIT, attention_layers
from pipeline.method.inits.rng import seeded_global_rng
from pipeline.method.options import DEFAULT

#: ViT token parameters that no reset_parameters defines; `default` starts them at 0 (code-2505: cls_token = 0).
VIT_TOKENS = ("cls_token", "reg_token", "dist_token")


def pytorch_default_(model: nn.Module, kind: str, generator: torch.Generator) -> None:
    """Give every parameter its PyTorch-default value (in place), whatever the constructor left there."""
    covered = set()
    with seeded_global_rng(generator, model), torch.no_grad():
        for module in model.modules():
            if hasattr(module, "reset_parameters"):
                module.reset_parameters()
                covered.update(id(p) for p in module.parameters(recurse=False))
    if kind == VIT:
        with torch.no_grad():
            if model.pos_embed is not None:
                if model.pos_embed.requires_grad:  # a frozen (e.g. sin-cos) embedding is architecture: kept
                    model.pos_embed.copy_(torch.randn(model.pos_embed.shape, generator=generator) * 0.02)
                covered.add(id(model.pos_embed))
            for name in VIT_TOKENS:
                token = getattr(model, name, None)
                if token is not None:
                    token.zero_()
                    covered.add(id(token))
    missing = [name for name, p in model.named_parameters() if id(p) not in covered]
    if missing:
        raise PipelineError(
            f"{type(model).__name__}: no default init is known for parameter(s) {', '.join(missing[:5])}; "
            f"pipeline.method.inits supports plain timm ViT/DeiT, Swin and MlpMixer models"
        )


def rescale_attention_(attn: nn.Module, norm_q: float, norm_v: float) -> None:
    """code-2505's norm matching: q and k rows of qkv times norm_q, v rows and proj times norm_v."""
    width = attn.qkv.out_features // 3
    with torch.no_grad():
        attn.qkv.weight[: 2 * width] *= norm_q
        attn.qkv.weight[2 * width :] *= norm_v
        attn.proj.weight *= norm_v


def default_init(
    model: nn.Module,
    kind: str,
    generator: torch.Generator,
    *,
    norm_p: float = DEFAULT.norm_p,
    norm_q: float = DEFAULT.norm_q,
    norm_v: float = DEFAULT.norm_v,
) -> list[torch.Tensor]:
    """The `default` arm: PyTorch's init, then code-2505's optional norm_p / norm_q / norm_v multipliers (ViT/Swin
    attention only); returns the parameters it rescaled (the only values that could overflow)."""
    pytorch_default_(model, kind, generator)
    written = []
    if kind == VIT and model.pos_embed is not None and norm_p != 1:
        with torch.no_grad():
            model.pos_embed *= norm_p
        written.append(model.pos_embed)
    if norm_q != 1 or norm_v != 1:
        for attn in attention_layers(model, kind):
            rescale_attention_(attn, norm_q, norm_v)
            written += [attn.qkv.weight, attn.proj.weight]
    return written


def timm_init(model: nn.Module, kind: str, generator: torch.Generator) -> list[torch.Tensor]:
    """The `timm` arm: the model's own timm init in its default ('') mode, seeded from `generator`; returns [].
    A model built with weight_init='skip' remembers 'reset' as its mode, so the mode is set to '' for the call."""
    with seeded_global_rng(generator, model), torch.no_grad():
        if kind == MIXER:
            model.init_weights()
            return []
        saved = model.weight_init_mode
        frozen = frozen_pos_embed(model)
        model.weight_init_mode = ""
        try:
            model.init_weights()
        finally:
            model.weight_init_mode = saved
        if frozen is not None:
            model.pos_embed.copy_(frozen)
    return []


def frozen_pos_embed(model: nn.Module) -> torch.Tensor | None:
    """A copy of a ViT's fixed (requires_grad=False, e.g. sin-cos) position embedding, which no init changes."""
    pos = getattr(model, "pos_embed", None)
    return None if pos is None or pos.requires_grad else pos.detach().clone()

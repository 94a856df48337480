"""Mimetic initialization (Trockman & Kolter, ICML 2023): code-2505's `mimetic` arm, or the paper's own form.

`form='official'` (the default: what the reproduced paper trains; paper.md section 1.1, code-2505
`get_ortho_like` and `post_init_weights('mimetic')`):

    A = alpha Z + sign beta I,   Z_ij ~ U(-sqrt(3/D), +sqrt(3/D))  (so Var Z_ij = 1/D)
    A = U S V^T (SVD),   L = U sqrt(S),   R = sqrt(S) V^T,   so L R = A.

- Q/K, per layer and per head h, an independent draw of (L, R) with (alpha_qk, beta_qk, +1):
  q rows of head h = L[:, :d]^T and k rows = R[:d, :], so x W_q,h^T W_k,h x^T = x L[:, :d] R[:d, :] x^T, the
  rank-d (= head_dim) truncation of 0.7 Z + 0.7 I.
- V/proj, per layer, one draw with (alpha_vo, beta_vo, -1): v rows = L and proj = R. The value-then-proj map is
  therefore x -> x (R L)^T, *not* x A (the impulse arm transposes both and gets exactly A; paper.md section 4,
  item 4). In the singular basis R L has diagonal s_i (v_i . u_i): measured for D = 768, alpha = beta = 0.4, a
  gain of about -0.9 on the top singular direction falling to ~0 on the last, not the flat -0.4 + noise of
  alpha Z - beta I; its off-diagonal entries depend on the SVD's sign convention, so this step keeps LAPACK's
  gesdd and its signs (`lowrank.svd_factors(..., lapack_signs=True)`), as the official code does (NumPy's gesdd
  there, MKL's through torch here: measured to give the same signs as NumPy's and scipy's at D = 96 and 768).

`form='paper'` (Trockman & Kolter's definition, section 3 of their paper): Z ~ N(0, 1/D) (Gaussian, same variance;
code-2505's get_ortho_like offers it as dist='normal'), the same Q/K split, and V/proj written so that
value-then-proj is exactly x -> x (alpha_vo Z - beta_vo I) (v rows = L^T, proj = R^T, as the impulse arm).
The report can train both to see whether the baseline's form changes the paper's ordering.

Everything else keeps PyTorch's default (`default.pytorch_default_` runs first); pos_embed is not scaled.
Draws come from the caller's generator in float64 (code-2505 uses NumPy float64 and the global NumPy RNG).
[CI]'s `mimetic512_64` (code-2401) differs in its constants: Z = sqrt(1/D) U(-1, 1), i.e. Var Z_ij = 1/(3D),
a third of this Z's variance, and no V/proj step (see `ci_random`).

Speed: Q/K need only the top head_dim triplets of each D x D draw (`lowrank.top_factors`, a partial symmetric
eigensolver); the product Q_h K_h equals the full SVD's to rounding (`lowrank.official_route()` runs the SVDs).

Architectures. ViT and Swin: every attention layer as above (Swin's relative-position bias keeps its default).
MlpMixer has no attention; its token-mixing MLP plays the role of the attention map (see `mixer.py`), so
`mimetic` sets each block's token-mixing map to alpha_qk Z + beta_qk I on the N tokens ("attention close to
identity plus noise", the QK half of the recipe), written by `mixer.write_default_gain_` (option
`mixer='default_gain'`, the default: default's gain, GELU nonlinear, the Jacobian at 0 half the map rescaled) or
exactly, at the map's own gain, by `mixer.write_token_mixing_` (`mixer='exact'`: linear-regime units).
"""

from __future__ import annotations

import torch
from torch import nn

from pipeline.errors import PipelineError
from pipeline.method.inits.arch import MIXER, attention_layers, blocks, check_fused_qkv
from pipeline.method.inits.default import pytorch_default_
from pipeline.method.inits.lowrank import (
    ortho_like_target,
    ortho_like_value_proj_,
    svd_factors,
    top_factors,
    write_qk_heads_,
    write_rows_,
)
from pipeline.method.inits.mixer import WRITERS, write_default_gain_, write_token_mixing_
from pipeline.method.options import MIMETIC

#: form -> law of Z.
FORMS = {"official": "uniform", "paper": "normal"}


def mimetic_attention_(
    attn: nn.Module,
    generator: torch.Generator,
    alpha_qk: float,
    beta_qk: float,
    alpha_vo: float,
    beta_vo: float,
    form: str = MIMETIC.form,
) -> None:
    """Mimetic Q/K (per head) and V/proj of one timm Attention or WindowAttention, in place."""
    dim, heads = attn.qkv.in_features, attn.num_heads
    law = FORMS[form]
    targets = ortho_like_target(dim, alpha_qk, beta_qk, +1, generator, count=heads, law=law)
    left, right = top_factors(targets, dim // heads)
    write_qk_heads_(attn, left.mT, right)
    if form == "paper":
        ortho_like_value_proj_(attn, generator, alpha_vo, beta_vo, law=law)
        return
    value, proj = svd_factors(ortho_like_target(dim, alpha_vo, beta_vo, -1, generator, law=law)[0], lapack_signs=True)
    write_rows_(attn.qkv.weight, 2 * dim, value)
    write_rows_(attn.proj.weight, 0, proj)


def mimetic_init(
    model: nn.Module,
    kind: str,
    generator: torch.Generator,
    *,
    alpha_qk: float = MIMETIC.alpha_qk,
    beta_qk: float = MIMETIC.beta_qk,
    alpha_vo: float = MIMETIC.alpha_vo,
    beta_vo: float = MIMETIC.beta_vo,
    form: str = "official",
    mixer: str = MIMETIC.mixer,
) -> list[torch.Tensor]:
    """The `mimetic` arm: PyTorch defaults, then the mimetic attention (or token-mixing) weights.

    Args:
        model: a supported timm model, changed in place; kind: its `arch.family`.
        generator: source of every random draw.
        alpha_qk, beta_qk: W_q W_k^T ~ alpha_qk Z + beta_qk I (per head, rank head_dim).
        alpha_vo, beta_vo: value/proj product ~ alpha_vo Z - beta_vo I (exactly so for form 'paper'; in
            code-2505's R L convention for 'official').
        form: 'official' (code-2505, uniform Z, v = L and proj = R) or 'paper' (Trockman & Kolter: Gaussian Z,
            value-then-proj = alpha_vo Z - beta_vo I); see the module doc.
        mixer: MlpMixer only, the writer of the token map: 'default_gain' or 'exact' (see the module doc).

    Returns:
        The parameters it wrote beyond PyTorch's defaults.
    """
    if form not in FORMS:
        raise PipelineError(f"mimetic.form = {form!r}: allowed are {', '.join(FORMS)}")
    if mixer not in WRITERS:
        raise PipelineError(f"mimetic.mixer = {mixer!r}: allowed are {', '.join(WRITERS)}")
    pytorch_default_(model, kind, generator)
    if kind == MIXER:
        for block in blocks(model, kind):
            tokens = block.mlp_tokens.fc1.in_features
            mixing = ortho_like_target(tokens, alpha_qk, beta_qk, +1, generator, law=FORMS[form])[0]
            if mixer == "exact":
                write_token_mixing_(block.mlp_tokens, mixing, "mimetic")
            else:
                write_default_gain_(block.mlp_tokens, mixing, generator, "mimetic")
        return [p for block in blocks(model, kind) for p in block.mlp_tokens.parameters()]
    layers = attention_layers(model, kind)
    for i, attn in enumerate(layers):
        check_fused_qkv(attn, f"block {i}")
        mimetic_attention_(attn, generator, alpha_qk, beta_qk, alpha_vo, beta_vo, form)
    return [p for attn in layers for p in (attn.qkv.weight, attn.proj.weight)]

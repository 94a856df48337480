"""Mimetic initialization (Trockman & Kolter, ICML 2023): code-2505's `mimetic` arm, or the paper's own form.

`form='official'` (default; code-2505 `get_ortho_like`, `post_init_weights('mimetic')`):
A = alpha Z + sign beta I, Z_ij ~ U(+-sqrt(3/D)), split as L = U sqrt(S), R = sqrt(S) V^T. Q/K per head: a fresh
draw of 0.7 Z + 0.7 I, q rows = L[:, :d]^T, k rows = R[:d, :]. V/proj per layer: v rows = L, proj = R, so
value-then-proj is x (R L)^T, not x A (code-2505's impulse arm writes x A); R L depends on the SVD's signs, so
this step keeps LAPACK's, as the official code does. `form='paper'` (their section 3): Z ~ N(0, 1/D), and
value-then-proj exactly alpha_vo Z - beta_vo I.

Everything else keeps PyTorch's default. A Mixer's token map becomes alpha_qk Z + beta_qk I (ours, no official
code; `mixer.py`). [CI]'s `mimetic512_64` differs in its constants (`ci_random`).
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
    """The `mimetic` arm: PyTorch defaults, then W_q W_k^T ~ alpha_qk Z + beta_qk I per head and value/proj from
    (alpha_vo, beta_vo) as `form` says; `mixer`: a Mixer's writer. Returns the parameters it wrote."""
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

"""The init diagnostics on hand-built cases with known answers."""

from __future__ import annotations

import pytest
import torch
from timm.models.mlp_mixer import MlpMixer
from torch import nn

from pipeline.method.inits import apply_init
from pipeline.method.inits.diagnostics import (
    branch_ratios,
    init_diagnostics,
    linear_fraction,
    trace,
    trunk_rms,
    unit_nonlinearity,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def mixer(embed_dim=96):
    return MlpMixer(img_size=28, patch_size=4, num_blocks=3, embed_dim=embed_dim, mlp_ratio=(0.5, 4.0), in_chans=1,
                    num_classes=10)  # fmt: skip


def test_linear_regime_of_gelu_units():
    z = torch.randn(4000, 1, generator=torch.Generator().manual_seed(0))
    gelu = nn.GELU()
    assert linear_fraction(z + 8.0, gelu) == 1.0  # a huge bias: GELU is the identity there
    assert linear_fraction(z - 8.0, gelu) == 1.0  # dead: constant ~0
    assert linear_fraction(0.01 * z, gelu) == 1.0  # a narrow spread about 0: slope 1/2
    assert linear_fraction(z, gelu) == 0.0  # unit spread about 0: curved
    assert linear_fraction(torch.zeros(10, 1), gelu) == 1.0  # constant activation
    # residual / spread ~ s / sqrt(pi) for a small centred spread s
    assert unit_nonlinearity(0.05 * z, gelu).item() == pytest.approx(0.05 / torch.pi**0.5, rel=0.1)
    mixed = torch.cat([z + 8.0, z, 0.01 * z, z - 0.3], dim=1)
    assert linear_fraction(mixed, gelu) == 0.5


def test_identity_branch_has_ratio_one_and_trunk_rms_is_the_last_block_output(fashion_mnist):
    model = mixer()
    for block in model.blocks:
        block.norm1, block.mlp_tokens = nn.Identity(), nn.Identity()
    x = fashion_mnist[:4]
    signals = trace(model, x)
    assert branch_ratios(signals) == pytest.approx([1.0] * 3, abs=1e-6)
    with torch.no_grad():
        h = model.stem(x)
        for block in model.blocks:
            h = block(h)
    assert trunk_rms(signals) == pytest.approx(h.pow(2).mean().sqrt().item(), rel=1e-6)


def test_biased_token_mlp_is_all_linear(fashion_mnist):
    model = apply_init(mixer(), "default", generator=0)
    with torch.no_grad():
        for block in model.blocks:
            block.mlp_tokens.fc1.bias.fill_(50.0)
    found = init_diagnostics(model, fashion_mnist[:4])
    assert found["linear_fraction"] == [1.0] * 3
    default = init_diagnostics(apply_init(mixer(), "default", generator=0), fashion_mnist[:4])
    assert default["linear_fraction"] == [0.0] * 3 and all(0.1 < r < 0.6 for r in default["branch_ratio"])


def test_swin_has_a_branch_ratio_per_block_and_no_linear_regime(fashion_mnist):
    import timm

    swin = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, weight_init="skip", img_size=28,
                             patch_size=2, embed_dim=48, depths=(2, 2), num_heads=(3, 6), window_size=7, in_chans=1,
                             num_classes=10)  # fmt: skip
    found = {arm: init_diagnostics(apply_init(swin, arm, generator=0), fashion_mnist[:2]) for arm in
             ("default", "impulse")}  # fmt: skip
    assert all(f["linear_fraction"] is None and len(f["branch_ratio"]) == 4 for f in found.values())
    # the impulse arm's V/proj (0.4 Z - 0.4 I) and peaked attention carry more than default's averaging maps
    assert min(found["impulse"]["branch_ratio"]) > max(found["default"]["branch_ratio"][:2])

"""The Mixer's impulse token mixing on the configurations the profiles train, not only on a toy one: Mixer-S/16 at
224 px (tokens_dim 256 < 2 x 196 tokens, where pairs alone reached 3x3 mass 0.14-0.16) and the CPU-scale Mixer
(28 px, patch 4: 7 x 7 tokens; embed_dim 96 and 128, tokens_dim 48 and 64 < 2 x 49). Both constructions: 'shift'
(local, exact, linear regime) and 'filter' (local, GELU nonlinear, default's gain).
"""

from __future__ import annotations

import pytest
import timm
import torch
import torch.nn.functional as F
from timm.models.mlp_mixer import MlpMixer
from torch import nn

from pipeline.errors import PipelineError
from pipeline.method.inits import (
    apply_init,
    attention_maps,
    layer_offsets,
    locality_mass,
    peak_agreement,
    uniform_locality_mass,
)
from pipeline.method.inits.diagnostics import init_diagnostics
from pipeline.method.inits.measures import capture_inputs
from pipeline.method.inits.mixer import CONSTRUCTIONS, filter_matrix


def cpu_mixer(embed_dim):
    """The CPU-scale Mixer: mixer_s16_224's recipe (mlp_ratio (0.5, 4)) on 28 px, patch 4, 6 blocks."""
    return MlpMixer(img_size=28, patch_size=4, num_blocks=6, embed_dim=embed_dim, mlp_ratio=(0.5, 4.0), in_chans=1,
                    num_classes=10)  # fmt: skip


def mixer_s16():
    return timm.create_model("mixer_s16_224", pretrained=False, in_chans=1, num_classes=10)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def images(fashion_mnist):
    return fashion_mnist[:2]


CONFIGS = {
    "S16-224": (mixer_s16, 224),
    "cpu-e96": (lambda: cpu_mixer(96), 28),
    "cpu-e128": (lambda: cpu_mixer(128), 28),
}


@pytest.mark.parametrize("build, size", CONFIGS.values(), ids=CONFIGS.keys())
def test_impulse_token_mixing_is_local_on_the_profiles_mixers(build, size, images):
    model = apply_init(build(), "impulse", generator=0, mixer="shift")
    grid, offsets, depth = tuple(model.stem.grid_size), layer_offsets(model), len(model.blocks)
    x = images[:1] if size == 28 else F.interpolate(images[:1], size=size, mode="bilinear")
    pseudo, real = attention_maps(model, None, tuple(range(depth))), attention_maps(model, x, (1, depth - 1))
    for layer in range(depth):
        assert peak_agreement(pseudo[layer], offsets[layer], grid).item() == 1.0
        assert locality_mass(pseudo[layer], grid, 3).item() >= 0.65, layer  # uniform: 0.04 (14x14), 0.15 (7x7)
    for layer, maps in real.items():
        assert locality_mass(maps, grid, 3).item() >= 0.65, layer


@pytest.mark.parametrize("build", [mixer_s16, lambda: cpu_mixer(96)], ids=["S16-224", "cpu-e96"])
def test_token_mlp_is_the_designed_linear_map(build, images):
    """Jacobian at 0 = the written map exactly; on real token rows the MLP is that linear map to < 1%."""
    model = apply_init(build(), "impulse", generator=0, mixer="shift")
    mlp = model.blocks[1].mlp_tokens
    tokens = mlp.fc1.in_features
    jacobian = torch.func.jacrev(mlp)(torch.zeros(tokens))
    keys = torch.arange(tokens) - model.stem.grid_size[1]  # offset (-1, 0): the key one row up
    inside = keys >= 0
    assert torch.allclose(jacobian[inside, keys[inside]], torch.ones(int(inside.sum())), atol=1e-5)
    x = images[:1] if model.stem.img_size[0] == 28 else F.interpolate(images[:1], size=224, mode="bilinear")
    rows = capture_inputs(model, [mlp], x)[id(mlp)][0].reshape(-1, tokens)
    with torch.no_grad():
        error = (mlp(rows) - rows @ jacobian.T).norm() / (rows @ jacobian.T).norm()
    assert error < 0.01, error


def test_pairs_where_the_width_allows_linear_units_for_the_rest():
    model = apply_init(mixer_s16(), "impulse", generator=0, mixer="shift")  # 196 tokens: 60 pairs + 136 units
    fc1 = model.blocks[0].mlp_tokens.fc1
    assert torch.equal(fc1.weight[:60], -fc1.weight[60:120]) and (fc1.bias[:120] == 0).all()
    assert (fc1.bias[120:] >= 4).all() and (fc1.weight[120:].norm(dim=1) > 0).all()
    wide = apply_init(cpu_mixer(196), "impulse", generator=0, mixer="shift")  # tokens_dim 98 = 2 x 49: pairs only
    assert (wide.blocks[0].mlp_tokens.fc1.bias == 0).all()


ACTIVATIONS = {  # tokens_dim = ratio x 96: >= 98 uses pairs only, < 49 linear-regime units only
    "tanh-pairs": (nn.Tanh, 2.0, "act\\(z\\) - act\\(-z\\) = z"),
    "sigmoid-pairs": (nn.Sigmoid, 2.0, "act\\(z\\) - act\\(-z\\) = z"),
    "tanh-linear": (nn.Tanh, 0.25, "not linear for large inputs"),
    "silu-linear": (nn.SiLU, 0.25, "not linear for large inputs"),
}


@pytest.mark.parametrize("act, ratio, message", ACTIVATIONS.values(), ids=ACTIVATIONS.keys())
def test_activation_that_cannot_be_made_linear_raises(act, ratio, message):
    model = MlpMixer(img_size=28, patch_size=4, num_blocks=2, embed_dim=96, mlp_ratio=(ratio, 4.0), in_chans=1,
                     act_layer=act)  # fmt: skip
    with pytest.raises(PipelineError, match=message):
        apply_init(model, "impulse", generator=0, mixer="shift")


# --- the 'filter' construction (the default) ----------------------------------------------------------------


def test_filter_matrix_is_the_convolution():
    kernel = torch.randn(3, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    x = torch.randn(5, 1, 7, 6, dtype=torch.float64)
    conv = F.conv2d(x, kernel[None, None], padding=1)  # cross-correlation: y[q] = sum_o k[o] x[q + o]
    assert torch.allclose(x.reshape(5, -1) @ filter_matrix(kernel, (7, 6)).T, conv.reshape(5, -1))


def test_filter_token_map_is_half_the_written_convolution_at_default_gain():
    """tokens_dim 64 >= 49 tokens: the Jacobian at 0 is exactly 1/2 x (conv scaled to ||.||_F = sqrt(49) / 3)."""
    model = apply_init(cpu_mixer(128), "impulse", generator=0)
    mlp = model.blocks[0].mlp_tokens
    jacobian = torch.func.jacrev(mlp)(torch.zeros(49)).double()
    assert (mlp.fc1.bias == 0).all() and (mlp.fc2.bias == 0).all()
    assert jacobian.norm().item() == pytest.approx(0.5 * 7 / 3, rel=1e-5)
    support = filter_matrix(torch.ones(3, 3), (7, 7)) != 0
    assert jacobian[~support].abs().max() < 1e-6  # only the 3x3 neighbourhood: a convolution
    assert mlp.fc1.weight.pow(2).sum(1).mean().item() == pytest.approx(1 / 3, rel=1e-5)  # default's E|row|^2


@pytest.mark.parametrize("build, size", CONFIGS.values(), ids=CONFIGS.keys())
def test_filter_is_local_nonlinear_and_at_default_gain(build, size, images):
    """Bounds against PyTorch's default on Fashion-MNIST images: at most 5% of units in the linear regime
    (S/16, block 0: 1%), every branch below the residual
    and within 0.5-2x default's block mean, trunk RMS within 0.5-1.5x default's; the shift construction fails."""
    x = images[:2] if size == 28 else F.interpolate(images[:1], size=size, mode="bilinear")
    found = {c: init_diagnostics(apply_init(build(), "impulse", generator=0, mixer=c), x) for c in CONSTRUCTIONS}
    default = init_diagnostics(apply_init(build(), "default", generator=0), x)
    mean = sum(default["branch_ratio"]) / len(default["branch_ratio"])
    filt, shift = found["filter"], found["shift"]
    assert max(filt["linear_fraction"]) <= 0.05 and max(default["linear_fraction"]) <= 0.05
    assert all(0.5 * mean <= r <= min(1.0, 2 * mean) for r in filt["branch_ratio"]), (filt, mean)
    assert 0.5 * default["trunk_rms"] <= filt["trunk_rms"] <= 1.5 * default["trunk_rms"]
    assert min(shift["linear_fraction"]) >= 0.5 and shift["branch_ratio"][0] > 1 and shift["trunk_rms"] > 3
    model = apply_init(build(), "impulse", generator=0)
    grid, depth = tuple(model.stem.grid_size), len(model.blocks)
    flat = uniform_locality_mass(grid, 3)
    for layer, maps in attention_maps(model, None, tuple(range(depth))).items():
        assert locality_mass(maps, grid, 3).item() >= 0.95, layer
    for layer, maps in attention_maps(model, x[:1], (0, depth - 1)).items():
        assert locality_mass(maps, grid, 3).item() >= 2 * flat, layer  # GELU' varies per unit on images


def test_filter_and_default_gain_mimetic_are_deterministic_per_generator():
    for method in ("impulse", "mimetic"):
        a, b, c = (apply_init(cpu_mixer(96), method, generator=s) for s in (0, 0, 1))
        for p, q in zip(a.parameters(), b.parameters()):
            assert torch.equal(p, q)
        assert not torch.equal(a.blocks[0].mlp_tokens.fc1.weight, c.blocks[0].mlp_tokens.fc1.weight)


def test_unknown_construction_raises():
    with pytest.raises(PipelineError, match="impulse.mixer"):
        apply_init(cpu_mixer(96), "impulse", generator=0, mixer="box")
    with pytest.raises(PipelineError, match="mimetic.mixer"):
        apply_init(cpu_mixer(96), "mimetic", generator=0, mixer="filter")

"""Model factories: create_timm_model's builds and errors; the ConvMixer's spatial paths, freezing, sharing, seeding."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from timm.models.mlp_mixer import MlpMixer
from timm.models.swin_transformer import SwinTransformer
from timm.models.vision_transformer import VisionTransformer
from timm.optim import create_optimizer_v2

from pipeline.errors import PipelineError
from pipeline.method.convmixer import ConvMixer, SpatialConv, SpatialLinear, build_convmixer
from pipeline.method.filters import (
    effective_rank,
    head_assignment,
    linear_format,
    make_filters,
    make_perm,
    patch_embeddings,
    softmax_taps,
)
from pipeline.method.models import create_timm_model

torch.set_num_threads(1)

CPU_VIT = dict(img_size=28, patch_size=4, embed_dim=96, depth=6, num_heads=3)
SMALL = dict(dim=16, depth=2, kernel_size=3, patch_size=2, in_chans=1, num_classes=10, img_size=12)


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def batch(n=4, size=12, seed=0):
    g = gen(seed)
    return torch.randn(n, 1, size, size, generator=g), torch.randint(0, 10, (n,), generator=g)


# --- create_timm_model -------------------------------------------------------------------------------------------


def test_create_timm_model_builds_the_cpu_default_vit_with_pytorch_default_init():
    model = create_timm_model("vit_tiny_patch16_224", num_classes=10, in_chans=1, mlp_ratio=None, **CPU_VIT)
    assert isinstance(model, VisionTransformer)
    assert model.patch_embed.grid_size == (7, 7) and model.pos_embed.shape == (1, 50, 96)
    assert len(model.blocks) == 6 and model.blocks[0].attn.num_heads == 3
    assert model.patch_embed.proj.in_channels == 1 and model.head.out_features == 10
    qkv = model.blocks[0].attn.qkv.weight  # 'skip': kaiming_uniform(a=sqrt 5) = U(+-1/sqrt(fan_in))
    assert qkv.abs().max() <= 1 / math.sqrt(96) and qkv.abs().max() > 0.95 / math.sqrt(96)
    with torch.no_grad():  # 'skip' leaves pos_embed/cls_token uninitialised (documented): set them to run it
        model.pos_embed.normal_(std=0.02)
        model.cls_token.zero_()
    assert torch.isfinite(model(torch.randn(2, 1, 28, 28))).all()


def test_create_timm_model_passes_weight_init_to_timm():
    model = create_timm_model("vit_tiny_patch16_224", num_classes=10, in_chans=1, weight_init="", **CPU_VIT)
    qkv = model.blocks[0].attn.qkv  # timm's init: trunc_normal(std .02), zero biases
    assert qkv.weight.std().item() == pytest.approx(0.02, rel=0.1) and not qkv.bias.any()


def test_create_timm_model_builds_a_small_swin():
    model = create_timm_model(
        "swin_tiny_patch4_window7_224", num_classes=10, in_chans=1, img_size=32, patch_size=2,
        embed_dim=32, depths=(2, 2), num_heads=(2, 4), window_size=4,
    )
    assert isinstance(model, SwinTransformer) and len(model.layers) == 2
    assert model.layers[1].blocks[0].attn.num_heads == 4
    assert torch.isfinite(model(torch.randn(2, 1, 32, 32))).all()


@pytest.mark.parametrize("weight_init", ["skip", ""])
def test_create_timm_model_builds_a_small_mixer_overriding_its_fixed_arguments(weight_init):
    model = create_timm_model(
        "mixer_s16_224", num_classes=10, in_chans=1, img_size=28, patch_size=4, num_blocks=2, embed_dim=64,
        weight_init=weight_init,
    )
    assert isinstance(model, MlpMixer) and len(model.blocks) == 2 and model.stem.grid_size == (7, 7)
    assert model.blocks[0].mlp_channels.fc1.out_features == 4 * 64  # mixer_s's mlp_ratio (0.5, 4.0) kept
    bias = model.blocks[0].mlp_tokens.fc1.bias  # PyTorch default U(+-1/sqrt 49) vs timm's N(0, 1e-6)
    assert (bias.abs().max() > 0.05) == (weight_init == "skip")
    assert torch.isfinite(model(torch.randn(2, 1, 28, 28))).all()


@pytest.mark.parametrize(
    "name, overrides, fragments",
    [
        ("vit_tiny_patch16_22", {}, ["'vit_tiny_patch16_22'", "did you mean vit_tiny_patch16_224"]),
        ("vit_tiny_patch16_224", {"num_head": 3}, ["'num_head'", "did you mean num_heads"]),
        ("swin_tiny_patch4_window7_224", {"depth": 2}, ["'depth'", "depths"]),
        ("vit_tiny_patch16_224", {"img_size": 30, "patch_size": 4}, ["img_size 30", "patch_size 4", "28 or 32"]),
        ("vit_tiny_patch16_224", {"embed_dim": 96, "num_heads": 5, "depth": 1}, ["num_heads", "1, 2, 3, 4, 6"]),
        ("vit_tiny_patch16_224", {"weight_init": "xavier"}, ["'xavier'", "'skip'"]),
        ("mixer_s16_224", {"weight_init": "jax"}, ["'jax'", "'skip'"]),
        ("resnet18", {}, ["ResNet", "VisionTransformer"]),
    ],
)
def test_create_timm_model_errors_are_pipeline_errors_with_the_fix(name, overrides, fragments):
    with pytest.raises(PipelineError) as err:
        create_timm_model(name, num_classes=10, in_chans=1, **overrides)
    for fragment in fragments:
        assert fragment in str(err.value)


def test_create_timm_model_drops_none_overrides():
    model = create_timm_model("vit_tiny_patch16_224", num_classes=3, in_chans=1, embed_dim=None, depth=1, img_size=32)
    assert model.embed_dim == 192  # timm's value kept


# --- ConvMixer spatial paths ------------------------------------------------------------------------------


def test_spatial_linear_with_perm_equals_the_explicit_matrix_product():
    n_tok, channels, heads = 12, 6, 3
    perms = torch.stack([make_perm(n_tok, gen(h)) for h in range(heads)])
    choice, bias = head_assignment(channels, heads, gen()), torch.randn(channels, generator=gen(1))
    layer = SpatialLinear(perms, choice, bias, trainable=False, grid=(3, 4))
    x = torch.randn(2, channels, 3, 4, generator=gen(2))
    expected = torch.empty(2, channels, n_tok)
    for b in range(2):
        for c in range(channels):
            expected[b, c] = perms[choice[c]] @ x[b, c].flatten() + bias[c]
    assert torch.allclose(layer(x), expected.reshape(2, channels, 3, 4), atol=1e-6)


def test_conv_path_equals_its_matrix_form_in_the_linear_path():
    channels, heads, grid = 8, 3, (5, 6)
    filters = make_filters("random", heads, 3, gen())
    choice, bias = head_assignment(channels, heads, gen()), torch.randn(channels, generator=gen(1))
    conv = SpatialConv(filters, choice, bias, trainable=True)
    linear = SpatialLinear(linear_format(filters, grid), choice, bias, trainable=True, grid=grid)
    x = torch.randn(2, channels, *grid, generator=gen(2))
    assert torch.allclose(conv(x), linear(x), atol=1e-5)
    reference = F.conv2d(x, filters[choice].unsqueeze(1), bias, padding=1, groups=channels)
    assert torch.allclose(conv(x), reference)


def test_spatial_linear_refuses_another_grid():
    layer = SpatialLinear(make_perm(4, gen())[None], torch.zeros(2), torch.zeros(2), False, (2, 2))
    with pytest.raises(PipelineError, match="2x2 token grid"):
        layer(torch.randn(1, 2, 3, 3))


@pytest.mark.parametrize("variant", ["learned", "random", "softmax", "learned-softmax", "impulse", "box-9",
                                     "learned-box-1", "gaussian-0.1", "perm", "fullperm"])
def test_convmixer_forward_backward_finite_on_28px_grey_images(variant):
    model = build_convmixer(variant, **{**SMALL, "img_size": 28}, heads=4, generator=gen())
    x, y = batch(4, 28)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.requires_grad)
    expected = SpatialLinear if variant in ("perm", "fullperm") else SpatialConv
    assert all(type(layer) is expected for layer in model.spatial_layers())


def layer_types(module):
    return [type(m).__name__ for m in module]


@pytest.mark.parametrize("block, branch", [("ci", ["SpatialConv", "BatchNorm2d"]),
                                           ("sia", ["SpatialConv", "GELU", "BatchNorm2d"])])
def test_convmixer_block_option_changes_only_the_gelu_after_the_spatial_conv(block, branch):
    """[CI] (code-2401 conv format): spatial conv -> BN; [SIA] (code-2404, timm): spatial conv -> GELU -> BN."""
    model = build_convmixer("impulse", **SMALL, block=block, generator=gen())
    for mixer in model.blocks:
        assert layer_types(mixer[0].fn) == branch
        assert layer_types(mixer) == ["Residual", "Conv2d", "GELU", "BatchNorm2d"]  # channel mixing keeps its GELU
    assert layer_types(model.stem) == ["Conv2d", "GELU", "BatchNorm2d"]
    assert model.stem[0].stride == (2, 2) and model.head.out_features == 10
    # the same seed draws the same weights in either form: the GELU is the only difference
    other = build_convmixer("impulse", **SMALL, block="sia" if block == "ci" else "ci", generator=gen())
    assert [p.shape for p in model.parameters()] == [p.shape for p in other.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), other.parameters()))


def test_ci_block_without_gelu_is_bn_of_conv_plus_the_input():
    model = build_convmixer("random", **SMALL, block="ci", generator=gen()).eval()
    x = torch.randn(2, SMALL["dim"], 6, 6, generator=gen(1))
    branch = model.blocks[0][0].fn
    spatial, norm = branch
    assert torch.allclose(model.blocks[0][0](x), norm(spatial(x)) + x)


def test_linear_format_keeps_the_gelu_in_cis_block_as_code_2401_builds_it():
    model = build_convmixer("perm", **SMALL, block="ci", generator=gen())
    assert layer_types(model.blocks[0][0].fn) == ["SpatialLinear", "GELU", "BatchNorm2d"]


@pytest.mark.parametrize("block", ["CI", "gelu", None])
def test_bad_block_is_refused(block):
    with pytest.raises(PipelineError, match="'ci'.*'sia'"):
        build_convmixer("impulse", **SMALL, block=block)


def test_frozen_softmax_applies_the_softmax_of_its_stored_taps_and_gets_no_gradient():
    model = build_convmixer("softmax", **SMALL, heads=4, generator=gen())
    layer = model.spatial_layers()[0]
    assert not layer.weight.requires_grad and not layer.bias.requires_grad
    x = torch.randn(2, SMALL["dim"], 6, 6, generator=gen(1))
    raw = layer.weight.detach()
    k = raw.shape[-1]
    applied = (raw.flatten(1).exp() / raw.flatten(1).exp().sum(1, keepdim=True)).reshape(raw.shape)
    reference = F.conv2d(x, applied[layer.choice].unsqueeze(1), layer.bias, padding=k // 2, groups=SMALL["dim"])
    assert torch.allclose(layer(x), reference, atol=1e-6)
    assert torch.allclose(layer.per_channel().flatten(1).sum(1), torch.ones(SMALL["dim"]))
    before = [(l.weight.clone(), l.bias.clone()) for l in model.spatial_layers()]
    step(model)
    for l, (weight, bias) in zip(model.spatial_layers(), before):
        assert l.weight.grad is None and torch.equal(l.weight, weight) and torch.equal(l.bias, bias)


def test_learned_softmax_trains_the_raw_taps_through_the_softmax():
    model = build_convmixer("learned-softmax", **SMALL, generator=gen())
    layer = model.spatial_layers()[0]
    before = layer.weight.clone()
    step(model)
    assert layer.weight.requires_grad and layer.weight.grad is not None and not torch.equal(layer.weight, before)
    assert torch.allclose(layer.per_channel(), softmax_taps(layer.weight)[layer.choice])  # softmax still applied


def step(model, lr=1e-2):
    """One Adam step through timm's optimizer factory (as the trainer builds it)."""
    opt = create_optimizer_v2(model, "adam", lr=lr, weight_decay=0.0)
    x, y = batch()
    F.cross_entropy(model(x), y).backward()
    opt.step()
    return opt


@pytest.mark.parametrize("variant", ["impulse", "perm", "fullperm", "softmax"])
def test_frozen_filters_do_not_change_in_a_training_step(variant):
    model = build_convmixer(variant, **SMALL, generator=gen())
    spatial = [(l.weight.clone(), l.bias.clone()) for l in model.spatial_layers()]
    pointwise = model.blocks[0][1].weight.clone()
    step(model)
    for layer, (weight, bias) in zip(model.spatial_layers(), spatial):
        assert not layer.weight.requires_grad and layer.weight.grad is None
        assert torch.equal(layer.weight, weight) and torch.equal(layer.bias, bias)
    assert not torch.equal(model.blocks[0][1].weight, pointwise)  # channel mixing still learns


def test_learned_filters_change_in_a_training_step():
    model = build_convmixer("learned", **SMALL, generator=gen())
    before = [layer.weight.clone() for layer in model.spatial_layers()]
    step(model)
    for layer, weight in zip(model.spatial_layers(), before):
        assert layer.weight.requires_grad and not torch.equal(layer.weight, weight)


def test_frozen_parameters_stay_out_of_the_optimizer():
    model = build_convmixer("box-3", **SMALL, generator=gen())
    in_opt = {id(p) for group in step(model).param_groups for p in group["params"]}
    frozen = [p for layer in model.spatial_layers() for p in (layer.weight, layer.bias)]
    assert frozen and all(id(p) not in in_opt for p in frozen)
    assert len(model.state_dict()["blocks.0.0.fn.0.weight"]) == SMALL["dim"]  # still saved with the model


def distinct_filters(layer):
    return len({tuple(f.flatten().tolist()) for f in layer.per_channel()})


def test_heads_fewer_than_channels_really_share_filters():
    model = build_convmixer("random", **SMALL, heads=4, generator=gen())
    for layer in model.spatial_layers():
        assert layer.weight.shape[0] == 4 and distinct_filters(layer) == 4
        assert torch.bincount(layer.choice).tolist() == [4, 4, 4, 4]  # 16 channels, 4 each
    one_per_channel = build_convmixer("random", **SMALL, generator=gen())
    assert all(distinct_filters(layer) == SMALL["dim"] for layer in one_per_channel.spatial_layers())
    shared_perm = build_convmixer("perm", **SMALL, heads=2, generator=gen())
    assert all(distinct_filters(layer) == 2 for layer in shared_perm.spatial_layers())


def test_learned_shared_filters_stay_tied_after_a_step():
    model = build_convmixer("learned", **SMALL, heads=2, generator=gen())
    step(model)
    assert all(distinct_filters(layer) == 2 for layer in model.spatial_layers())


def test_same_seed_same_model_other_seed_different_and_no_global_rng():
    state = torch.random.get_rng_state()
    a = build_convmixer("gaussian-0.5", **SMALL, heads=4, generator=gen(7)).state_dict()
    b = build_convmixer("gaussian-0.5", **SMALL, heads=4, generator=gen(7)).state_dict()
    c = build_convmixer("gaussian-0.5", **SMALL, heads=4, generator=gen(8)).state_dict()
    assert torch.equal(state, torch.random.get_rng_state())
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["blocks.0.0.fn.0.weight"], c["blocks.0.0.fn.0.weight"])
    assert not torch.equal(a["stem.0.weight"], c["stem.0.weight"])  # stem and 1x1 convs come from it too
    assert not torch.equal(a["blocks.0.0.fn.0.weight"], a["blocks.1.0.fn.0.weight"])  # fresh filters per block


@pytest.mark.parametrize(
    "variant, overrides, fragment",
    [
        ("sobel", {}, "'learned'"),
        ("learned-random", {}, "write 'learned'"),
        ("box-10", {}, "only 9 taps"),
        ("gaussian--1", {}, "'-1'"),
        ("impulse", {"kernel_size": 4}, "odd"),
        ("impulse", {"heads": 17}, "between 1 and the 16 channels"),
        ("impulse", {"img_size": 13}, "img_size 13"),
        ("impulse", {"dim": 0}, "dim = 0"),
    ],
)
def test_build_convmixer_errors(variant, overrides, fragment):
    with pytest.raises(PipelineError) as err:
        build_convmixer(variant, **{**SMALL, **overrides})
    assert fragment in str(err.value)


def test_plain_convmixer_keeps_timms_learned_depthwise_conv():
    model = ConvMixer(16, 2, 3, 2, 1, 10, generator=gen())
    assert all(isinstance(layer, torch.nn.Conv2d) and layer.groups == 16 for layer in model.spatial_layers())
    assert model.spatial_layers()[0].weight.abs().max() <= 1 / 3  # PyTorch default: U(+-1/k)


def test_patch_embeddings_are_the_stem_output_and_leave_the_model_untouched():
    model = build_convmixer("impulse", **SMALL, generator=gen())
    model.train()
    stats = model.stem[2].running_mean.clone()
    x, _ = batch(3)
    X = patch_embeddings(model, x)
    assert X.shape == (3 * 36, SMALL["dim"])
    with torch.no_grad():
        expected = model.eval().stem(x)
    assert torch.allclose(X, expected.permute(0, 2, 3, 1).reshape(-1, SMALL["dim"]))
    assert torch.equal(model.stem[2].running_mean, stats)
    assert 1 <= effective_rank(X) <= SMALL["dim"]

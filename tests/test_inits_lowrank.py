"""The fast factorisation routes against the official SVD route (pipeline.method.inits.lowrank), the two mimetic forms
and [CI]'s random arm.

Exactness is judged on what the network computes: for the same draws, every head's W_q,h^T W_k,h, every layer's
value-then-proj map and the attention logits on the pseudo-input equal the SVD route's to float tolerance; the
factors themselves equal the SVD's up to the sign of each (u_i, v_i) pair. Shapes: small, and ViT-B/16's
(D = 768, head_dim 64, N = 196).
"""

from __future__ import annotations

import sys

import pytest
import timm
import torch

from pipeline.method.inits import apply_init, attention_maps
from pipeline.method.inits.impulse import impulse_qk, official_qk, pseudo_inverse
from pipeline.method.inits.lowrank import balanced_factors, official_route, ortho_like_target, svd_factors, top_factors
from pipeline.method.inits.targets import impulse_offsets, impulse_targets

VIT = dict(img_size=28, patch_size=4, embed_dim=96, depth=3, num_heads=3, in_chans=1, num_classes=10)


pytestmark = pytest.mark.usefixtures("one_thread")


def draw(shape, seed=0):
    return ortho_like_target(shape[-1], 0.4, 0.4, -1, torch.Generator().manual_seed(seed), count=shape[0])


def assert_same_up_to_pair_signs(fast, slow, tol):
    """(L, R) pairs equal after flipping the sign of each singular pair to match."""
    (left, right), (ref_left, ref_right) = fast, slow
    signs = torch.sign((left * ref_left).sum(-2, keepdim=True))  # one sign per column of L / row of R
    scale = ref_left.abs().max()
    assert torch.allclose(left * signs, ref_left, rtol=0, atol=tol * scale)
    assert torch.allclose(right * signs.mT, ref_right, rtol=0, atol=tol * scale)


@pytest.mark.parametrize("shape", [(3, 24, 24), (1, 768, 768)], ids=["3x24", "768"])
def test_balanced_factors_are_the_svd_factors_up_to_pair_signs(shape):
    a = draw(shape)
    fast, slow = balanced_factors(a), svd_factors(a)
    assert torch.allclose(fast[0] @ fast[1], a, rtol=0, atol=1e-12)
    assert_same_up_to_pair_signs(fast, slow, 1e-8)


@pytest.mark.parametrize("shape, rank", [((4, 24, 24), 8), ((1, 768, 768), 64)], ids=["24r8", "768r64"])
def test_top_factors_are_the_truncated_svd(shape, rank):
    a = ortho_like_target(shape[-1], 0.7, 0.7, +1, torch.Generator().manual_seed(1), count=shape[0])
    fast, slow = top_factors(a, rank), svd_factors(a, rank)
    product, expected = fast[0] @ fast[1], slow[0] @ slow[1]
    assert torch.allclose(product, expected, rtol=0, atol=1e-10 * expected.abs().max())
    assert_same_up_to_pair_signs(fast, slow, 1e-7)


def test_without_scipy_torch_gives_the_same_factors(monkeypatch):
    """A stock PyTorch image has no scipy: the wide matrices' eigensolves then run in torch, to the same factors."""
    a = ortho_like_target(768, 0.7, 0.7, +1, torch.Generator().manual_seed(1), count=1)
    with_scipy = top_factors(a, 64), balanced_factors(a)
    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "scipy.linalg", None)
    for (left, right), (ref_left, ref_right) in zip((top_factors(a, 64), balanced_factors(a)), with_scipy):
        assert torch.allclose(left, ref_left, rtol=0, atol=1e-9) and torch.allclose(right, ref_right, rtol=0, atol=1e-9)


def test_mimetic_rl_product_depends_on_the_sign_convention():
    """Why the official mimetic V/proj keeps gesdd: R L (not L R) changes with the pairs' signs."""
    a = draw((1, 96, 96))[0]
    (left, right), (ref_left, ref_right) = balanced_factors(a), svd_factors(a, lapack_signs=True)
    assert torch.allclose(left @ right, ref_left @ ref_right, atol=1e-12)
    assert (right @ left - ref_right @ ref_left).abs().max() > 0.05
    fixed = svd_factors(a)  # canonical signs: the two routes agree on R L too
    assert torch.allclose(right @ left, fixed[1] @ fixed[0], atol=1e-12)


@pytest.mark.parametrize("grid, dim, heads", [((5, 4), 24, 3), ((14, 14), 768, 3)], ids=["small", "ViT-B"])
def test_impulse_qk_equals_code_2505s_construction(grid, dim, heads):
    gen = torch.Generator().manual_seed(1)
    pe = torch.randn(grid[0] * grid[1], dim, generator=gen, dtype=torch.float64) * 0.36
    pinv = pseudo_inverse(pe, 64 if dim == 768 else dim // heads)
    targets = impulse_targets(impulse_offsets(heads), grid, scale=1000.0, noise_std=0.6, generator=gen)
    (q, k), (ref_q, ref_k) = impulse_qk(pinv, targets), official_qk(pinv, targets)
    expected = ref_q @ ref_k
    assert torch.allclose(q @ k, expected, rtol=0, atol=1e-9 * expected.abs().max())
    logits, ref_logits = pinv.points @ q @ k @ pinv.points.T, pinv.points @ expected @ pinv.points.T
    assert torch.allclose(logits, ref_logits, rtol=0, atol=1e-9 * ref_logits.abs().max())


def qk_and_value_maps(model):
    """Per layer: W_q,h^T W_k,h of every head (H, D, D) and the value-then-proj matrix P (x -> x P)."""
    out = []
    for block in model.blocks:
        attn = block.attn
        dim, heads = attn.qkv.in_features, attn.num_heads
        w = attn.qkv.weight.detach().double().view(3, heads, dim // heads, dim)
        out.append((w[0].mT @ w[1], w[2].reshape(dim, dim).T @ attn.proj.weight.detach().double().T))
    return out


METHODS = {
    "impulse": {},
    "mimetic-official": {},
    "mimetic-paper": {"form": "paper"},
    "random": {},
}


@pytest.mark.parametrize("arm", METHODS, ids=METHODS)
def test_whole_model_equals_the_official_route(arm):
    method, options = arm.split("-")[0], METHODS[arm]
    build = lambda: timm.create_model("vit_tiny_patch16_224", pretrained=False, weight_init="skip", **VIT)  # noqa: E731
    fast = apply_init(build(), method, generator=3, **options)
    with official_route():
        slow = apply_init(build(), method, generator=3, **options)
    tol = 2e-6  # float32 weights: both routes round their float64 factors
    for (qk, value), (ref_qk, ref_value) in zip(qk_and_value_maps(fast), qk_and_value_maps(slow)):
        assert torch.allclose(qk, ref_qk, rtol=0, atol=tol * ref_qk.abs().max())
        assert torch.allclose(value, ref_value, rtol=0, atol=tol * ref_value.abs().max())
    for layer in (0, -1):
        maps, ref_maps = attention_maps(fast, layers=(layer,))[layer], attention_maps(slow, layers=(layer,))[layer]
        assert torch.allclose(maps, ref_maps, atol=1e-4)
    if arm == "mimetic-official":  # v = L, proj = R from the same gesdd: identical, R L included
        for a, b in zip(fast.blocks, slow.blocks):
            assert torch.equal(a.attn.qkv.weight[192:], b.attn.qkv.weight[192:])
            assert torch.equal(a.attn.proj.weight, b.attn.proj.weight)
    designed = ("attn.qkv.weight", "attn.proj.weight")
    for name, p in fast.named_parameters():  # everything else: the same PyTorch-default draws
        assert name.endswith(designed) or torch.equal(p, slow.get_parameter(name)), name


def excess_kurtosis(x: torch.Tensor) -> float:
    x = (x - x.mean()) / x.std()
    return (x**4).mean().item() - 3.0


def test_mimetic_paper_form_is_trockman_and_kolters():
    """value-then-proj = alpha Z - beta I exactly, with Gaussian Z ~ N(0, 1/D); the official form differs."""
    dim = 96
    build = lambda: timm.create_model("vit_tiny_patch16_224", pretrained=False, weight_init="skip", **VIT)  # noqa: E731
    paper, official = (apply_init(build(), "mimetic", generator=0, form=f) for f in ("paper", "official"))
    for _, value in qk_and_value_maps(paper):
        z = (value + 0.4 * torch.eye(dim)) / 0.4 * dim**0.5  # ~ N(0, 1) entries, the diagonal included
        assert abs(z.std().item() - 1) < 0.05 and abs(z.diagonal().mean().item()) < 0.3
        assert abs(excess_kurtosis(z)) < 0.3  # Gaussian: 0 (uniform: -1.2)
    _, value = qk_and_value_maps(official)[0]
    z = (value + 0.4 * torch.eye(dim)) / 0.4 * dim**0.5
    off = z[~torch.eye(dim, dtype=torch.bool)]
    assert off.std() < 0.85 and z.diagonal().std() > 2  # (R L)^T: gains from -0.9 to 0 along the diagonal


def test_mimetic_official_draws_are_uniform_and_paper_draws_gaussian():
    gen = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    uniform, normal = (ortho_like_target(96, 1.0, 0.0, 1, gen(), law=law)[0] * 96**0.5 for law in ("uniform", "normal"))
    assert uniform.abs().max() <= 3**0.5 and abs(excess_kurtosis(uniform) + 1.2) < 0.1
    assert abs(excess_kurtosis(normal)) < 0.2 and abs(normal.std().item() - 1) < 0.03


def test_random_arm_is_ci_random512_64():
    """q rows of head h = Q_h^T, k rows = K_h, entries sqrt(1/D) U(-1, 1); V/proj and the rest at the default."""
    build = lambda: timm.create_model("vit_tiny_patch16_224", pretrained=False, weight_init="skip", **VIT)  # noqa: E731
    model, default = apply_init(build(), "random", generator=0), apply_init(build(), "default", generator=0)
    bound = 96**-0.5
    for block, ref in zip(model.blocks, default.blocks):
        qk = block.attn.qkv.weight[:192]
        assert qk.abs().max() <= bound and abs(qk.std().item() / (bound / 3**0.5) - 1) < 0.05
        assert torch.equal(block.attn.qkv.weight[192:], ref.attn.qkv.weight[192:])
        assert torch.equal(block.attn.proj.weight, ref.attn.proj.weight)
        assert torch.equal(block.attn.qkv.bias, ref.attn.qkv.bias)
    assert torch.equal(model.pos_embed, default.pos_embed)


def test_random_arm_on_swin():
    model = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, weight_init="skip", img_size=56,
                              embed_dim=48, depths=(2, 2), num_heads=(3, 6), in_chans=1, num_classes=10)  # fmt: skip
    apply_init(model, "random", generator=0)
    for stage in model.layers:
        for block in stage.blocks:
            dim = block.attn.qkv.in_features
            assert block.attn.qkv.weight[: 2 * dim].abs().max() <= dim**-0.5
    assert torch.isfinite(model(torch.randn(1, 1, 56, 56))).all()

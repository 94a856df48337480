"""[CI]'s arms on the Simple ViT with code-2401's laws: the impulse fit, mimetic512_64, random = PyTorch default."""

from __future__ import annotations

import pytest
import torch

from pipeline.errors import PipelineError
from pipeline.method.ci_2401 import fit_quality, init_arm, mimetic_factors, window_offsets
from pipeline.method.simple_vit import SimpleViT

#: a fit that converges in a fraction of a second at 5x5 tokens, D 32, 2 heads of 16
FIT = dict(steps=300, lr=1e-2, sigma=0.1, renorm_every=100, window=3)


def model(seed: int = 0, depth: int = 2, alpha: float = 0.0) -> SimpleViT:
    torch.manual_seed(seed)
    return SimpleViT(image_size=10, patch_size=2, num_classes=3, dim=32, depth=depth, heads=2, head_dim=16,
                     mlp_dim=32, channels=1, alpha=alpha)


def layer_maps(m: SimpleViT, layer: int) -> torch.Tensor:
    """(heads, N, N) attention maps of `layer` at alpha = 0 (they depend on positions only)."""
    with torch.no_grad():
        return m.blocks[layer].attn.attention(torch.zeros(1, 25, 32), m.pos_embedding)[0]


def test_the_impulse_fit_converges_and_the_model_attends_at_its_offsets(one_thread):
    m = model()
    records = init_arm(m, "impulse", torch.Generator().manual_seed(0), **FIT)
    start = init_arm(model(), "impulse", torch.Generator().manual_seed(0), **FIT | {"steps": 1})
    assert [r["layer"] for r in records] == [0, 1]
    for r, r0 in zip(records, start, strict=True):
        assert r["mse"] < 0.5 * r0["mse"] and r["target_mass"] > 0.4 and r["peak"] > 0.9, (r, r0)
        # the model's own attention (at alpha = 0, with the layer's scale set to sigma) is the fitted map
        assert m.blocks[r["layer"]].attn.scale == FIT["sigma"]
        quality = fit_quality(layer_maps(m, r["layer"]), [tuple(o) for o in r["offsets"]], (5, 5))
        assert quality["target_mass"] == pytest.approx(r["target_mass"], abs=1e-4)
    unfitted = fit_quality(layer_maps(model(), 0), [tuple(o) for o in records[0]["offsets"]], (5, 5))
    assert unfitted["target_mass"] < 0.1  # PyTorch's default spreads the weight over the 25 keys


def test_offsets_are_drawn_per_head_and_layer_and_are_deterministic():
    def offsets(seed):
        m = model(depth=4)
        return [r["offsets"] for r in init_arm(m, "impulse", torch.Generator().manual_seed(seed), **FIT | {
            "steps": 1})]

    a = offsets(0)
    assert a == offsets(0)
    assert len({str(o) for o in a}) > 1  # not one set of offsets reused in every layer
    assert a != offsets(1)
    drawn = window_offsets(2000, 5, torch.Generator().manual_seed(0))
    assert set(drawn) == {(dy, dx) for dy in range(-2, 3) for dx in range(-2, 3)}


def test_the_fit_leaves_values_and_projections_at_the_default():
    reference, fitted = model(), model()
    init_arm(fitted, "impulse", torch.Generator().manual_seed(0), **FIT | {"steps": 5})
    for b_ref, b_fit in zip(reference.blocks, fitted.blocks, strict=True):
        torch.testing.assert_close(b_fit.attn.to_v.weight, b_ref.attn.to_v.weight)
        torch.testing.assert_close(b_fit.attn.to_out.weight, b_ref.attn.to_out.weight)
        assert not torch.equal(b_fit.attn.to_qk.weight, b_ref.attn.to_qk.weight)


def test_mimetic_is_code_2401s_law():
    dim, rank = 256, 32
    g = torch.Generator().manual_seed(0)
    q, k = mimetic_factors(4, dim, rank, g)
    assert q.shape == (4, dim, rank) and k.shape == (4, rank, dim)
    g = torch.Generator().manual_seed(0)  # the same draw: W = 0.7 sqrt(1/D) U(-1, 1) + 0.7 I
    noise = (torch.rand((4, dim, dim), generator=g, dtype=torch.float64) * 2 - 1) * dim**-0.5
    assert noise.var().item() == pytest.approx(1 / (3 * dim), rel=0.02)  # 1/(3D), not code-2505's 1/D
    w = 0.7 * noise + 0.7 * torch.eye(dim, dtype=torch.float64)
    u, s, vh = torch.linalg.svd(w)
    best = u[:, :, :rank] @ torch.diag_embed(s[:, :rank]) @ vh[:, :rank]  # the best rank-d approximation
    torch.testing.assert_close(q @ k, best)


def test_mimetic_is_written_into_every_layer_with_head_dim_scale():
    m = model(depth=2)
    assert init_arm(m, "mimetic", torch.Generator().manual_seed(0), **FIT) == []
    q, k = mimetic_factors(2, 32, 16, torch.Generator().manual_seed(0))
    attn = m.blocks[0].attn
    w_q, w_k = attn.to_qk.weight.detach().double().chunk(2)
    product = torch.stack([w_q[h * 16:(h + 1) * 16].T @ w_k[h * 16:(h + 1) * 16] for h in range(2)])
    torch.testing.assert_close(product, q @ k, atol=1e-5, rtol=1e-5)  # head h's Z Q_h K_h Z^T
    assert attn.scale == 16**-0.5
    assert not torch.equal(m.blocks[1].attn.to_qk.weight, attn.to_qk.weight)


def test_random_is_pytorch_default_whose_law_is_random512_64():
    m = model()
    assert init_arm(m, "random", torch.Generator().manual_seed(0), **FIT) == []
    for a, b in zip(m.state_dict().values(), model().state_dict().values(), strict=True):
        assert torch.equal(a, b)
    wide = SimpleViT(image_size=8, patch_size=1, num_classes=2, dim=512, depth=1, heads=8, head_dim=64, mlp_dim=4)
    w = wide.blocks[0].attn.to_qk.weight
    assert w.abs().max() <= 512**-0.5 and w.var().item() == pytest.approx(1 / (3 * 512), rel=0.02)


def test_bad_arms_and_windows_are_refused():
    with pytest.raises(PipelineError, match="arms impulse, mimetic, random"):
        init_arm(model(), "default", torch.Generator(), **FIT)
    with pytest.raises(PipelineError, match="wider than the 5x5"):
        init_arm(model(), "impulse", torch.Generator(), **FIT | {"window": 11})

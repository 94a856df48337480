"""code-2401's Simple ViT with M'_I: shapes, the PE only inside attention, alpha = 0 vs 1, no biases."""

from __future__ import annotations

import pytest
import torch

from pipeline.errors import PipelineError
from pipeline.method.simple_vit import SimpleViT, posemb_sincos_2d


def model(alpha: float, seed: int = 0, **kw) -> SimpleViT:
    torch.manual_seed(seed)
    args = dict(image_size=16, patch_size=4, num_classes=5, dim=32, depth=2, heads=2, head_dim=8, mlp_dim=48,
                channels=3, alpha=alpha) | kw
    return SimpleViT(**args).eval()


def images(seed: int, n: int = 3) -> torch.Tensor:
    return torch.randn(n, 3, 16, 16, generator=torch.Generator().manual_seed(seed))


def maps(m: SimpleViT, x: torch.Tensor) -> list[torch.Tensor]:
    """Every layer's attention maps in a real forward pass."""
    seen = []
    hooks = [b.attn.register_forward_hook(lambda mod, inp, out: seen.append(mod.attention(*inp))) for b in m.blocks]
    with torch.no_grad():
        m(x)
    for h in hooks:
        h.remove()
    return seen


def test_shapes_and_no_biases_in_attention():
    m = model(0.5)
    assert m(images(0)).shape == (3, 5)
    assert maps(m, images(0))[0].shape == (3, 2, 16, 16)  # (batch, heads, 4x4 tokens, tokens)
    for block in m.blocks:
        attn = block.attn
        assert attn.to_qk.bias is None and attn.to_v.bias is None and attn.to_out.bias is None
        assert attn.to_qk.weight.shape == (2 * 16, 32) and attn.scale == 8**-0.5


def test_the_pe_is_fixed_and_absent_from_the_tokens():
    m = model(0.5)
    assert "pos_embedding" not in m.state_dict() and not any("pos" in n for n, _ in m.named_parameters())
    torch.testing.assert_close(m.pos_embedding, posemb_sincos_2d(4, 4, 32))
    x = images(0)
    with torch.no_grad():
        tokens = m.to_patch_embedding(m.patches(x))
        # alpha = 1 never reads the PE: scrambling it changes nothing, so the tokens themselves do not carry it
        one = model(1.0)
        before = one(x)
        one.pos_embedding.copy_(torch.randn_like(one.pos_embedding))
        torch.testing.assert_close(one(x), before)
    assert tokens.shape == (3, 16, 32)


def test_alpha_zero_attends_by_position_only_and_alpha_one_by_content():
    zero, one = model(0.0), model(1.0)
    a, b = maps(zero, images(1)), maps(zero, images(2) * 3 + 1)
    for pa, pb in zip(a, b, strict=True):
        torch.testing.assert_close(pa, pb)
    assert not torch.allclose(maps(one, images(1))[0], maps(one, images(2))[0])
    attn, pe = zero.blocks[0].attn, zero.pos_embedding  # the raw PE, not layer-normed, as code-2401 mixes it
    q, k = (pe @ w.T for w in attn.to_qk.weight.detach().chunk(2))
    q, k = (t.unflatten(-1, (2, 8)).transpose(0, 1) for t in (q, k))
    torch.testing.assert_close(a[0][0], (q @ k.transpose(-1, -2) * 8**-0.5).softmax(-1))
    with torch.no_grad():  # the values still carry content at alpha = 0
        assert not torch.allclose(zero(images(1)), zero(images(2)))


def test_values_and_queries_read_the_layer_normed_tokens():
    """LN(c x) = LN(x): at alpha 0.5 a layer's output is the same for tokens scaled by 5 (raw x would scale it)."""
    attn, pe = model(0.5).blocks[0].attn, posemb_sincos_2d(4, 4, 32)
    x = torch.randn(2, 16, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(attn(5 * x, pe), attn(x, pe), rtol=1e-4, atol=1e-5)


def test_the_sincos_pe_matches_its_closed_form():
    pe = posemb_sincos_2d(3, 5, 8)
    omega = 1.0 / 10000 ** torch.tensor([0.0, 1.0])
    r, c = 2, 4  # token 2 * 5 + 4
    torch.testing.assert_close(pe[14], torch.cat([(c * omega).sin(), (c * omega).cos(), (r * omega).sin(),
                                                  (r * omega).cos()]))


def test_gradients_reach_every_parameter():
    m = model(0.3).train()
    m(images(0)).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in m.parameters())


def test_bad_geometry_is_refused():
    with pytest.raises(PipelineError, match="does not divide"):
        model(0.5, patch_size=5)
    with pytest.raises(PipelineError, match="multiple of 4"):
        model(0.5, dim=30)
    with pytest.raises(PipelineError, match="alpha"):
        model(1.5)

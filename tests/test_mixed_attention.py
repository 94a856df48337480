"""[CI]'s alpha-mixed attention on timm's ViT: alpha = 1 is the stock block, alpha = 0 attends by position only."""

from __future__ import annotations

import copy

import pytest
import torch

from pipeline.config import ModelConfig
from pipeline.data.meta import DatasetMeta
from pipeline.errors import PipelineError
from pipeline.method.inits import layer_offsets, peak_agreement
from pipeline.method.mixed_attention import MixedInputAttention, mix_attention_input
from pipeline.training import builders

META = DatasetMeta("fashion_mnist", 10, 1, 28)
MODEL = ModelConfig(name="vit_tiny_patch16_224", img_size=28, patch_size=4, embed_dim=72, depth=3, num_heads=3,
                    drop_path_rate=0.0)


def stock(seed: int = 0) -> torch.nn.Module:
    return builders.initialized(MODEL, "default", {}, META, seed).eval()


def images(seed: int, n: int = 4) -> torch.Tensor:
    return torch.randn(n, 1, 28, 28, generator=torch.Generator().manual_seed(seed))


def attention_probs(model: torch.nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """The softmax maps every block computes in a real forward pass (unfused path, read at attn_drop)."""
    seen = []
    hooks = []
    for block in model.blocks:
        block.attn.fused_attn = False
        hooks.append(block.attn.attn_drop.register_forward_hook(lambda m, inp, out: seen.append(inp[0].detach())))
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return seen


def test_alpha_one_is_the_stock_model():
    reference = stock()
    mixed = mix_attention_input(copy.deepcopy(reference), 1.0)
    assert all(isinstance(b.attn, MixedInputAttention) for b in mixed.blocks)
    assert list(mixed.state_dict()) == list(reference.state_dict())  # same weights, same names
    x = images(0)
    with torch.no_grad():
        torch.testing.assert_close(mixed(x), reference(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fused", [True, False])
def test_an_intermediate_alpha_changes_the_output_but_not_the_parameters(fused):
    reference = stock()
    mixed = mix_attention_input(copy.deepcopy(reference), 0.5)
    for block in mixed.blocks:
        block.attn.fused_attn = fused
    x = images(0)
    with torch.no_grad():
        assert not torch.allclose(mixed(x), reference(x), atol=1e-4)
    assert sum(p.numel() for p in mixed.parameters()) == sum(p.numel() for p in reference.parameters())


def test_alpha_zero_attends_by_position_only():
    model = mix_attention_input(stock(), 0.0)
    a, b = attention_probs(model, images(1)), attention_probs(model, images(2) * 3 + 1)
    for pa, pb in zip(a, b, strict=True):  # every layer: the same maps for any content
        torch.testing.assert_close(pa, pb)
    half = mix_attention_input(stock(), 0.5)
    assert not torch.allclose(attention_probs(half, images(1))[0], attention_probs(half, images(2))[0])


def test_the_impulse_init_on_the_mixed_model_still_peaks_at_its_offsets():
    model = builders.initialized(MODEL, "impulse", {}, META, seed=0,
                                 adapt=lambda m: mix_attention_input(m, 0.0)).eval()
    maps = attention_probs(model, images(3))
    offsets = layer_offsets(model)
    grid = model.patch_embed.grid_size
    for layer, probs in enumerate(maps):
        assert peak_agreement(probs, offsets[layer], grid).min() > 0.9, layer
    default = builders.initialized(MODEL, "default", {}, META, seed=0,
                                   adapt=lambda m: mix_attention_input(m, 0.0)).eval()
    flat = attention_probs(default, images(3))[0]
    assert peak_agreement(flat, offsets[0], grid).max() < 0.5


def test_the_training_gradient_reaches_the_position_embedding_through_attention():
    model = mix_attention_input(stock(), 0.0).train()
    model(images(0)).sum().backward()
    assert model.pos_embed.grad is not None and model.pos_embed.grad.abs().sum() > 0


def test_bad_alphas_and_models_are_refused():
    with pytest.raises(PipelineError, match="alpha = 1.5"):
        mix_attention_input(stock(), 1.5)
    mixer = builders.timm_model(ModelConfig(name="mixer_s16_224", img_size=32, patch_size=4), META)
    with pytest.raises(PipelineError, match="needs a timm ViT"):
        mix_attention_input(mixer, 0.5)


def test_a_ci_alpha_cell_trains_and_records_its_alpha(workdir, params_file):
    """`python -m pipeline ci-alpha fashion_mnist 0.0 impulse 0` on the tiny dataset: the out spells alpha as the
    stage's command line does (dvc.yaml declares results/ci_alpha/<dataset>/alpha${item.alpha}/...)."""
    import json

    from pipeline.__main__ import main

    overrides = ["ci_alpha.datasets=[fashion_mnist]", "ci_alpha.model.img_size=8", "ci_alpha.model.patch_size=2",
                 "ci_alpha.model.embed_dim=24", "ci_alpha.model.depth=1", "ci_alpha.train={epochs: 1, batch_size: 16,"
                 " warmup_epochs: 0}"]
    argv = ["--params", str(params_file), *[w for o in overrides for w in ("--set", o)]]
    assert main([*argv, "ci-alpha", "fashion_mnist", "0.0", "impulse", "0"]) == 0
    out = workdir / "results" / "ci_alpha" / "fashion_mnist" / "alpha0.0" / "impulse" / "seed0"
    m = json.loads((out / "metrics.json").read_text())
    assert m["alpha"] == 0.0 and m["arm"] == "impulse" and m["variant"] == "ci" and m["epochs"] == 1
    assert main([*argv, "ci-alpha", "fashion_mnist", "1.5", "impulse", "0"]) == 2

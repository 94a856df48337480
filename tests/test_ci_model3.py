"""[CI]'s Model III (Tables 1-2): input-independent maps, frozen vs trained Q/K, values with and without W_v, the
arms' laws on Q, K, and one cell of the stage; Table 1's other forms (Simple ViT with and without its PE, Models
I / II) and one cell of theirs."""

from __future__ import annotations

import json

import pytest
import torch

from pipeline.__main__ import main
from pipeline.errors import PipelineError
from pipeline.method.ci_2401 import fit_quality, init_arm
from pipeline.method.simple_vit import SimpleViT
from pipeline.params import load_params

#: a fit that reaches its impulses in about a second at 5x5 tokens, 2 heads of rank 16
FIT = dict(steps=300, lr=1e-2, sigma=1.0, renorm_every=100, window=3)


def model3(seed: int = 0, value: bool = True, trainable_qk: bool = True) -> SimpleViT:
    torch.manual_seed(seed)
    return SimpleViT(image_size=10, patch_size=2, num_classes=3, dim=32, depth=2, heads=2, head_dim=16, mlp_dim=32,
                     channels=1, attention="model3", value=value, trainable_qk=trainable_qk)


def test_model3_maps_do_not_depend_on_the_input():
    m = model3()
    attn = m.blocks[0].attn
    x = torch.randn(4, 25, 32)
    maps = attn.attention(x, m.pos_embedding)
    assert torch.equal(maps[0], maps[3]) and torch.equal(maps[0], attn.attention(5 * x + 1, m.pos_embedding)[0])
    assert torch.allclose(maps.sum(-1), torch.ones(4, 2, 25))
    # a mixed-attention layer's maps do depend on it (so the check above can fail)
    torch.manual_seed(0)
    mixed = SimpleViT(image_size=10, patch_size=2, num_classes=3, dim=32, depth=1, heads=2, head_dim=16, mlp_dim=32,
                      channels=1, alpha=0.5).blocks[0].attn
    assert not torch.allclose(mixed.attention(x, m.pos_embedding)[0], mixed.attention(x, m.pos_embedding)[1])


@pytest.mark.parametrize("trainable", [True, False])
def test_frozen_qk_get_no_gradient_and_stay_while_trained_ones_change(trainable):
    m = model3(trainable_qk=trainable)
    before = [(b.attn.q.detach().clone(), b.attn.k.detach().clone()) for b in m.blocks]
    optimizer = torch.optim.Adam(m.parameters(), lr=1e-2)
    torch.nn.functional.cross_entropy(m(torch.randn(8, 1, 10, 10)), torch.randint(0, 3, (8,))).backward()
    optimizer.step()
    for block, (q, k) in zip(m.blocks, before, strict=True):
        assert (block.attn.q.grad is not None) is trainable and (block.attn.k.grad is not None) is trainable
        assert torch.equal(block.attn.q, q) is not trainable and torch.equal(block.attn.k, k) is not trainable
        assert block.attn.to_out.weight.grad is not None  # the rest of the layer trains in both columns


def test_without_value_the_heads_read_the_layer_normed_input():
    """code-2401 without --use_value: v = LN(x) split into heads, then the output projection."""
    attn = model3(value=False).blocks[0].attn
    assert attn.to_v is None
    x = torch.randn(2, 25, 32)
    h = attn.norm(x)
    mixed = (attn.maps() @ h.unflatten(-1, (2, 16)).transpose(1, 2)).transpose(1, 2).flatten(-2)
    assert torch.allclose(attn(x, None), attn.to_out(mixed), atol=1e-6)
    with pytest.raises(PipelineError, match="heads x head_dim = 16 must equal dim = 32"):
        SimpleViT(image_size=10, patch_size=2, num_classes=3, dim=32, depth=1, heads=1, head_dim=16, mlp_dim=32,
                  channels=1, attention="model3", value=False)


def test_the_impulse_fit_on_q_k_reaches_its_impulses(one_thread):
    m = model3()
    records = init_arm(m, "impulse", torch.Generator().manual_seed(0), **FIT)
    start = init_arm(model3(), "impulse", torch.Generator().manual_seed(0), **FIT | {"steps": 1})
    for r, r0 in zip(records, start, strict=True):
        attn = m.blocks[r["layer"]].attn
        assert r["mse"] < 0.2 * r0["mse"] and r["target_mass"] > 0.5 and r["peak"] == 1.0, (r, r0)
        assert attn.scale == FIT["sigma"]  # the layer attends with the fit's sigma, so its maps are the fit's
        quality = fit_quality(attn.maps().detach(), [tuple(o) for o in r["offsets"]], (5, 5))
        assert quality["target_mass"] == pytest.approx(r["target_mass"], abs=1e-4)
    assert fit_quality(model3().blocks[0].attn.maps().detach(), [tuple(o) for o in records[0]["offsets"]],
                       (5, 5))["target_mass"] < 0.1


def test_mimetic_and_random_keep_head_dim_scale_and_follow_code_2401s_laws():
    mim, rnd = model3(), model3()
    assert init_arm(mim, "mimetic", torch.Generator().manual_seed(0), **FIT) == []
    assert init_arm(rnd, "random", torch.Generator().manual_seed(0), **FIT) == []
    for m in (mim, rnd):
        assert m.blocks[0].attn.scale == 16**-0.5
    qk = (mim.blocks[0].attn.q @ mim.blocks[0].attn.k).detach()  # rank-16 part of 0.7 sqrt(1/N) U + 0.7 I, N = 25
    assert qk.diagonal(dim1=-2, dim2=-1).mean() > 0.5 and qk.abs().max() < 1.5
    q = rnd.blocks[0].attn.q.detach()  # random{N}_{r}: sqrt(1/N) U(-1, 1)
    assert q.abs().max() <= 25**-0.5 and q.std() == pytest.approx(25**-0.5 / 3**0.5, rel=0.15)


TINY = ["ci_model3.datasets=[fashion_mnist]", "ci_model3.model={image_size: 8, patch_size: 2, dim: 16, depth: 2,"
        " heads: 2, head_dim: 8, mlp_dim: 16, channels: null}", "ci_model3.impulse_fit.steps=200",
        "ci_model3.impulse_fit.lr=0.01", "ci_model3.impulse_fit.window=3",
        "ci_model3.train={epochs: 1, batch_size: 16, warmup_epochs: 0, scale: [1.0, 1.0], hflip: 0.0}"]


def test_a_ci_model3_cell_trains_and_records_its_columns_and_fit(workdir, params_file):
    argv = ["--params", str(params_file), *[w for o in TINY for w in ("--set", o)]]
    assert main([*argv, "ci-model3", "fashion_mnist", "impulse", "frozen", "novalue", "0"]) == 0
    out = workdir / "results" / "ci_model3" / "fashion_mnist" / "impulse" / "frozen" / "novalue" / "seed0"
    m = json.loads((out / "metrics.json").read_text())
    assert (m["arm"], m["qk"], m["value"], m["model"], m["epochs"]) == ("impulse", "frozen", "novalue",
                                                                        "simple_vit", 1)
    assert [f["layer"] for f in m["impulse_fit"]] == [0, 1]
    assert all(f["peak"] > 0.9 and f["mse"] < 0.01 for f in m["impulse_fit"])
    assert json.loads((out / "config.json").read_text())["impulse_fit"]["sigma"] == 1.0
    assert main([*argv, "ci-model3", "fashion_mnist", "random", "trained", "value", "0"]) == 0
    assert main([*argv, "ci-model3", "fashion_mnist", "random", "thawed", "value", "0"]) == 2  # names the cells


def test_table1_forms_build_as_code_2401s_flags_say():
    """--input_pe: the tokens carry 0.5 x + 0.5 PE and attention reads LN(x) alone; Model I / II: the PE only inside
    attention at alpha 0.5 / 0; no PE: alpha 1 and nothing added."""
    from pipeline.experiments.ci import table1_attention as attention_form

    def build(form: str, value: str = "value") -> SimpleViT:
        torch.manual_seed(0)
        return SimpleViT(image_size=10, patch_size=2, num_classes=3, dim=32, depth=2, heads=2, head_dim=16,
                         mlp_dim=32, channels=1, **attention_form(form, value))

    x = torch.randn(2, 1, 10, 10)
    seen = {}
    simple = build("simple")
    simple.blocks[0].register_forward_pre_hook(lambda mod, inp: seen.update(tokens=inp[0]))
    with torch.no_grad():
        simple(x)
        embedded = simple.to_patch_embedding(simple.patches(x))
    torch.testing.assert_close(seen["tokens"], 0.5 * embedded + 0.5 * simple.pos_embedding)
    assert all(b.attn.alpha == 1.0 for b in simple.blocks)
    assert [build(f).blocks[0].attn.alpha for f in ("simple_nope", "model1", "model2")] == [1.0, 0.5, 0.0]
    assert not any(build(f).input_pe for f in ("simple_nope", "model1", "model2"))
    nope = build("simple_nope", "novalue")
    assert nope.blocks[0].attn.to_v is None
    with torch.no_grad():
        before = nope(x)
        nope.pos_embedding.copy_(torch.randn_like(nope.pos_embedding))
        torch.testing.assert_close(nope(x), before)  # no PE anywhere


def test_a_ci_table1_cell_trains_and_records_its_form(workdir, params_file):
    argv = ["--params", str(params_file), *[w for o in TINY for w in ("--set", o)]]
    assert main([*argv, "ci-table1", "fashion_mnist", "model2", "novalue", "0"]) == 0
    out = workdir / "results" / "ci_table1" / "fashion_mnist" / "model2" / "novalue" / "seed0"
    m = json.loads((out / "metrics.json").read_text())
    assert (m["arm"], m["form"], m["value"], m["model"], m["epochs"]) == ("random", "model2", "novalue",
                                                                         "simple_vit", 1)
    assert "impulse_fit" not in m


@pytest.mark.parametrize("override, message", [
    ("ci_model3.qk=[thawed]", "ci_model3.qk: unknown value 'thawed'"),
    ("ci_model3.value=[v]", "ci_model3.value: unknown value 'v'"),
    ("ci_model3.arms=[default]", "ci_model3.arms: unknown value 'default'"),
    ("ci_model3.forms=[model4]", "ci_model3.forms: unknown value 'model4'"),
    ("ci_model3.impulse_fit.sigma=0", "ci_model3.impulse_fit.sigma = 0"),
    ("ci_model3.impulse_fit.window=33", "ci_model3.impulse_fit.window = 33: wider than the 16x16"),
    ("ci_model3.model.head_dim=32", "ci_model3.value: 'novalue' reads LN"),
    ("ci_model3.datasets=[cifar10]", "ci_model3.datasets: 'cifar10' is not in datasets"),
    ("ci_model3.seeds=[-1]", "ci_model3.seeds: -1"),
])
def test_bad_model3_params_name_their_key(params_file, override, message):
    with pytest.raises(PipelineError, match=message):
        load_params(params_file, [override])


def test_model3_fit_defaults_to_sigma_one(params_file):
    assert load_params(params_file, ["ci_model3.impulse_fit={steps: 5}"]).ci_model3.impulse_fit.sigma == 1.0

"""[SIA]'s ablations (params `sia`, stages sia_base@ / sia_fit@, `pipeline.method.sia`): validation, the sin-cos
embedding, the fit's layer plan and what it writes, one cell of each kind, the stages' params, claims 13 and 14."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import timm
import torch
from test_claims import CLAIMS, ORDERED, evidence
from timm.layers import build_sincos2d_pos_embed

from pipeline.__main__ import main
from pipeline.analysis.claims import Evidence, check_claims
from pipeline.analysis.tables import sia_table
from pipeline.errors import PipelineError
from pipeline.method.ci_2401 import fit_quality
from pipeline.method.sia import pseudo_input, sia_fit, use_sincos_pos_embed
from pipeline.params import load_params
from pipeline.resolve import resolved

ROOT = Path(__file__).resolve().parent.parent

TINY = ["models={vit: {name: vit_tiny_patch16_224, img_size: 12, patch_size: 4, embed_dim: 12, depth: 2,"
        " num_heads: 3, drop_path_rate: 0.0}}",
        "train={epochs: 1, batch_size: 16, warmup_epochs: 0, scale: [1.0, 1.0], hflip: 0.0}",
        "data.train_subset=0", "data.val_subset=0",
        "sia={bases: [cls_learned, avg_sincos], fits: [PP, GP_layer], seeds: [0], fit: {steps: 30, lr: 0.01}}"]


def tiny_vit(depth: int = 3) -> torch.nn.Module:
    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", img_size=20, patch_size=4, embed_dim=24, depth=depth,
                             num_heads=3, num_classes=10, class_token=False, global_pool="avg", weight_init="skip")


@pytest.mark.parametrize("override, message", [
    ("sia.fits=[PX]", "sia.fits: 'PX' is not a \\[SIA\\] fit; .* e.g. PP,"),
    ("sia.bases=[avg_learned]", "sia.bases: 'avg_learned' is not a \\[SIA\\] architecture"),
    ("sia={variant: vit9, fits: [PP]}", "sia.variant = 'vit9': not a key of `models`"),
    ("sia.fit.steps=0", "sia.fit.steps = 0: must be a positive integer"),
    ("sia.fit.kernel_size=4", "sia.fit.kernel_size = 4"),
    ("sia.baseline_arm=kaiming", "sia.baseline_arm"),
])
def test_bad_sia_params_name_their_key(params_file, override, message):
    with pytest.raises(PipelineError, match=message):
        load_params(params_file, [override])


def test_the_sincos_embedding_is_timms_and_frozen():
    model = use_sincos_pos_embed(tiny_vit())
    assert torch.equal(model.pos_embed[0], build_sincos2d_pos_embed([5, 5], dim=24))
    assert not model.pos_embed.requires_grad
    with pytest.raises(PipelineError, match="class_token=False"):
        use_sincos_pos_embed(timm.create_model("vit_tiny_patch16_224", img_size=20, patch_size=4, embed_dim=24,
                                               depth=1, num_heads=3))


def test_pseudo_inputs_follow_code_2404():
    pe, g = torch.randn(25, 24), torch.Generator().manual_seed(0)
    assert torch.equal(pseudo_input("P", pe, g), pe.double())
    u, gauss = pseudo_input("U", pe, g), pseudo_input("G", pe, g)
    assert u.abs().max() <= 1 and 0.4 < u.std() < 0.7  # U(-1, 1): std 0.577
    assert gauss.abs().max() <= 2 and 0.6 < gauss.std() < 0.8  # TN(0, 1/2) cut at +-2
    assert not torch.equal(pseudo_input("A", pe, g) - pe.double(), u)  # a fresh draw per fit
    with pytest.raises(PipelineError, match="pseudo-input 'Z'"):
        pseudo_input("Z", pe, g)


@pytest.mark.parametrize("first, later, shared, layers", [
    ("P", "P", True, [[0, 1, 2]]),  # code-2404's init_once: one fit for every layer
    ("G", "P", True, [[0], [1, 2]]),  # layer 0 on G, the later layers share one fit on P
    ("P", "P", False, [[0], [1], [2]]),  # a fit per layer
])
def test_the_fit_plan_follows_init_once(first, later, shared, layers):
    model = use_sincos_pos_embed(tiny_vit())
    records = sia_fit(model, first, later, shared=shared, steps=5, lr=0.01, generator=torch.Generator().manual_seed(0))
    assert [r["layers"] for r in records] == layers
    assert [r["pseudo_input"] for r in records] == [first if r["layers"][0] == 0 else later for r in records]
    blocks = model.blocks
    shared_qk = [torch.equal(blocks[1].attn.qkv.weight[:48], blocks[2].attn.qkv.weight[:48])]
    assert shared_qk == [shared]


def test_the_fit_is_written_into_the_query_and_key_rows():
    model = use_sincos_pos_embed(tiny_vit(depth=1))
    before = model.blocks[0].attn.qkv.weight.detach().clone()
    (record,) = sia_fit(model, "P", "P", steps=300, lr=0.02, generator=torch.Generator().manual_seed(1))
    attn = model.blocks[0].attn
    w = attn.qkv.weight.detach()
    assert torch.equal(w[48:], before[48:])  # values untouched
    p = torch.nn.functional.layer_norm(model.pos_embed[0].detach(), [24])
    q, k = (p @ w[:24].T).view(25, 3, 8).transpose(0, 1), (p @ w[24:48].T).view(25, 3, 8).transpose(0, 1)
    maps = torch.softmax(q @ k.transpose(1, 2) * attn.scale, -1)
    measured = fit_quality(maps, [tuple(o) for o in record["offsets"]], (5, 5))
    assert measured["target_mass"] == pytest.approx(record["target_mass"], abs=1e-4)
    assert record["peak"] > 0.9


def test_the_fit_is_deterministic_and_leaves_the_thread_count():
    threads = torch.get_num_threads()
    a, b = (sia_fit(use_sincos_pos_embed(tiny_vit()), "U", "P", steps=5, lr=0.01,
                    generator=torch.Generator().manual_seed(3)) for _ in range(2))
    assert a == b and torch.get_num_threads() == threads


def test_a_fit_cell_and_a_base_cell_train(workdir, params_file, capsys):
    argv = ["--params", str(params_file), *[w for o in TINY for w in ("--set", o)]]
    assert main([*argv, "sia-fit", "fashion_mnist", "GP_layer", "0"]) == 0
    out = workdir / "results" / "sia" / "fashion_mnist" / "fit_GP_layer" / "seed0"
    m = json.loads((out / "metrics.json").read_text())
    assert (m["cell"], m["arch"], m["arm"], m["epochs"]) == ("fit_GP_layer", "avg_sincos", "default", 1)
    assert [(r["layers"], r["pseudo_input"]) for r in m["impulse_fit"]] == [([0], "G"), ([1], "P")]
    state = torch.load(out / "model.pt", map_location="cpu")
    state = state.get("model", state)
    assert torch.allclose(state["pos_embed"][0], build_sincos2d_pos_embed([3, 3], dim=12))  # trained, still fixed
    assert main([*argv, "sia-base", "fashion_mnist", "cls_learned", "0"]) == 0
    m = json.loads((workdir / "results/sia/fashion_mnist/base_cls_learned/seed0/metrics.json").read_text())
    assert (m["arch"], m["arm"]) == ("cls_learned", "timm") and "impulse_fit" not in m
    assert main([*argv, "sia-fit", "fashion_mnist", "UU", "0"]) == 2
    assert "sia_fit@fashion_mnist-UU-0: fit 'UU' is not one params.yaml plans for this stage (PP, GP_layer)" \
        in capsys.readouterr().err


def configs(sia: dict) -> dict[str, dict]:
    """The [SIA] cells' resolved configurations for the repository's params.yaml with params `sia`."""
    params = load_params(ROOT / "params.yaml", [f"sia={json.dumps(sia)}"])
    return {k: v for k, v in resolved(params).items() if k.startswith("sia")}


def test_each_cell_reads_only_what_it_uses():
    assert configs({}) == {}
    cells = configs({"bases": ["cls_learned", "avg_sincos"], "fits": ["PP", "UU"], "seeds": [0, 1]})
    assert len(cells) == 8
    fit, base = cells["sia_fit/fashion_mnist-PP-0.json"], cells["sia_base/fashion_mnist-avg_sincos-1.json"]
    assert fit["arm"] == "default" and fit["fit"]["steps"] == 10000 and (fit["first"], fit["later"]) == ("P", "P")
    assert base["arm"] == "timm" and base["fit"] is None and base["model"]["global_pool"] == "avg"
    steps = configs({"bases": ["avg_sincos"], "fits": ["PP"], "seeds": [0], "fit": {"steps": 50}})
    assert steps["sia_base/fashion_mnist-avg_sincos-0.json"] == cells["sia_base/fashion_mnist-avg_sincos-0.json"]
    assert steps["sia_fit/fashion_mnist-PP-0.json"] != cells["sia_fit/fashion_mnist-PP-0.json"]


def sia_frame(top1: dict) -> pd.DataFrame:
    """{cell: top-1 in %} -> [SIA] rows on cifar10, seeds 0-2 (seed noise shared by the cells)."""
    return pd.DataFrame([{"dataset": "cifar10", "cell": cell, "seed": s, "top1": (v + 0.4 * s) / 100,
                          "correct": None, "impulse_fit": None} for cell, v in top1.items() for s in range(3)])


def judged(ev: Evidence, cid: str) -> dict:
    return next(c for c in check_claims(CLAIMS, ev) if c["id"] == cid)


def test_claims_13_and_14_as_published():
    published = {"fit_PP": 90.75, "fit_UU": 87.0, "fit_GG": 86.9, "base_cls_learned": 81.23, "base_avg_sincos": 85.30}
    ev = evidence({("cifar10", "vit"): ORDERED}, sia=sia_frame(published))
    c13, c14 = judged(ev, "13"), judged(ev, "14")
    assert c13["verdict"] == "supported" and [(x["a"], x["b"]) for x in c13["comparisons"]] == [
        ("fit_PP", "fit_UU"), ("fit_PP", "fit_GG")]
    assert c14["verdict"] == "supported" and c14["comparisons"][0]["a"] == "base_avg_sincos"
    flipped = published | {"fit_UU": 93.0}
    assert judged(evidence({("cifar10", "vit"): ORDERED}, sia=sia_frame(flipped)), "13")["verdict"] == "contradicted"
    table = sia_table(sia_frame(published), "timm")
    assert [r[1] for r in table.rows] == list(published) and table.rows[0][3].startswith("91.15 ± 0.40")


def test_claims_13_and_14_are_not_tested_without_their_cells():
    assert judged(evidence({("cifar10", "vit"): ORDERED}), "13")["verdict"] == "not tested"
    c = judged(evidence({("cifar10", "vit"): ORDERED}, sia=sia_frame({"fit_PP": 90.0, "fit_UU": 87.0})), "13")
    assert c["verdict"] == "supported" and any("fit_GG" in e for e in c["evidence"])
    c = judged(evidence({("cifar10", "vit"): ORDERED}, sia=sia_frame({"fit_PP": 90.0})), "14")
    assert c["verdict"] == "not tested" and any("sia.bases" in e for e in c["evidence"])

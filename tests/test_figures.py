"""The attention stage and the figures: fake results trees in tmp_path, a tiny real timm ViT for the maps."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.image import imread

from pipeline.analysis import attention, ci_figures, figures, tables
from pipeline.analysis.ci_figures import head_maps
from pipeline.analysis.document import FigureBlock
from pipeline.analysis.pdf import MIN_PPI, ReportPDF, _figure_size
from pipeline.data.meta import DatasetMeta
from pipeline.errors import PipelineError
from pipeline.method.simple_vit import SimpleViT
from pipeline.params import load_params
from pipeline.training.simple_vit import initialized

META = DatasetMeta("fashion_mnist", 10, 1, 28)  #: the fetched dataset's facts, as the stages read them
PAPER = Path(__file__).resolve().parent.parent / "paper"
STAGE_DPI = figures.DPI  #: what the stage draws at (the tests draw at 60 dpi, see low_dpi)

GRID = (7, 7)
N = GRID[0] * GRID[1]


def write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def run_metrics(val: list[float], train: list[float], **extra) -> dict:
    history = [{"epoch": i, "val_top1": v, "train_top1": t} for i, (v, t) in enumerate(zip(val, train))]
    return {"top1": val[-1], "best_top1": max(val), "epochs": len(val), "history": history} | extra


def shifted_maps(heads: int, offsets: list[int]) -> np.ndarray:
    """(heads, N, N) maps whose head h puts all mass on key query + offsets[h] (clipped to the grid's tokens)."""
    maps = np.zeros((heads, N, N), np.float32)
    for h, off in enumerate(offsets):
        maps[h, np.arange(N), np.clip(np.arange(N) + off, 0, N - 1)] = 1.0
    return maps


def fake_record(layers=(0, 5), heads=3, sources=attention.INPUTS) -> dict:
    """A measures.json as the attention stage writes it for a 7x7-token ViT."""
    per_head = {"peak_agreement": [1.0, 0.9, 0.8][:heads], "locality_mass": [1.0, 1.0, 0.95][:heads],
                "uniform_locality_mass": 0.15}
    keyed = {str(layer) for layer in layers}
    return {"arm": "impulse", "state": "init", "dataset": "fashion_mnist", "model": "vit_tiny_patch16_224", "seed": 0,
            "layers": list(layers), "grids": dict.fromkeys(keyed, list(GRID)), "heads": dict.fromkeys(keyed, heads),
            "offsets": dict.fromkeys(keyed, [[0, 0], [-1, 0], [0, 1]][:heads]), "kernel_size": 3, "images": 64,
            "measures": {src: dict.fromkeys(keyed, per_head) for src in sources}}


def fake_attention(directory: Path, arm: str, layers=(0, 5)) -> None:
    maps = {f"{src}_L{layer}": shifted_maps(3, [0, -GRID[1], 1]) for src in attention.INPUTS for layer in layers}
    attention.write_attention(directory / arm, maps, fake_record(layers) | {"arm": arm})


@pytest.fixture(autouse=True)
def low_dpi(monkeypatch):
    """Draw at 60 dpi: the layout is the same and the tests run in seconds on a shared CPU."""
    monkeypatch.setattr(figures, "DPI", 60)


@pytest.fixture
def params(params_file):
    return load_params(params_file, ["seeds=[0, 1]", "filter_study.seeds=[0, 1]",
                                     "filter_study.filters=[learned, random, impulse, box-9, softmax]",
                                     "filter_study.gaussian_sigmas=[0.1, 1.0]", "filter_study.gaussian_heads=[64, 4]"])


def make_results(root: Path, attention_arms: list[str]) -> Path:
    """A results tree of the experiment in params.yaml, plus a stale arm and a stale Gaussian cell to be ignored."""
    for arm, base in [("impulse", 0.80), ("default", 0.70), ("mimetic", 0.75), ("timm", 0.1)]:
        for seed in (0, 1):
            val = [base - 0.1 + 0.02 * e + 0.01 * seed for e in range(4)]
            write_json(root / "train/fashion_mnist/vit" / arm / f"seed{seed}/metrics.json",
                       run_metrics(val, [v + 0.05 for v in val], arm=arm, seed=seed))
    for i, variant in enumerate(["random", "impulse", "box-9", "perm", "learned"]):
        for seed in (0, 1):
            write_json(root / "filter_study" / variant / f"seed{seed}/metrics.json",
                       {"top1": 0.9 - 0.03 * i + 0.005 * seed, "variant": variant})
    for folder, sigma, heads, top1 in [("gaussian-0.1-h64", 0.1, 64, 0.91), ("gaussian-1-h4", 1.0, 4, 0.85),
                                       ("gaussian-1.0-h4", 1.0, 4, 0.1), ("gaussian-10.0-h4", 10.0, 4, 0.5)]:
        write_json(root / "filter_study" / folder / "seed0/metrics.json",
                   {"top1": top1, "variant": folder, "family": "gaussian", "sigma": sigma, "heads": heads})
    for arm in attention_arms:
        fake_attention(root / "attention" / "vit", arm)
    return root


@pytest.fixture
def results(tmp_path, params) -> Path:
    return make_results(tmp_path / "results", ["impulse", "default"])  # mimetic's attention stage "has not run"


def test_resolve_layers_adds_layer0_and_counts_negative_from_the_end():
    assert attention.resolve_layers(6, [0, -1]) == [0, 5]
    assert attention.resolve_layers(6, [3, 3, -6]) == [0, 3]
    with pytest.raises(PipelineError, match="layer 6 does not exist"):
        attention.resolve_layers(6, [6])


def test_attention_files_round_trip(tmp_path):
    fake_attention(tmp_path, "impulse")
    maps, record = attention.read_attention(tmp_path / "impulse")
    np.testing.assert_array_equal(maps["real_L5"], shifted_maps(3, [0, -GRID[1], 1]))
    assert record["measures"]["pseudo"]["0"]["peak_agreement"] == [1.0, 0.9, 0.8]
    assert attention.read_attention(tmp_path / "missing") is None
    assert not (tmp_path / "impulse.partial").exists()


def test_curve_band_is_mean_min_max_in_percent_on_common_epochs():
    runs = [run_metrics([0.5, 0.6, 0.7], [0, 0, 0]), run_metrics([0.3, 0.4], [0, 0])]
    epochs, mean, lo, hi = figures.curve_band([r["history"] for r in runs], "val_top1")
    np.testing.assert_array_equal(epochs, [1, 2])
    np.testing.assert_allclose(mean, [40, 50])
    np.testing.assert_allclose(lo, [30, 40])
    np.testing.assert_allclose(hi, [50, 60])


def test_the_stage_draws_only_the_experiments_runs(results, params, tmp_path):
    runs = figures.read_frames(results, figures.planned_cells(params, ["vit"]))[0]["vit"]
    found = figures.histories(runs)
    assert list(found["vit"]["fashion_mnist"]) == ["impulse", "default", "mimetic"]  # the stale `timm` arm ignored
    assert [len(h) for h in found["vit"]["fashion_mnist"].values()] == [2, 2, 2]
    params.filter_study.filters = ["random", "learned", "perm", "box-25"]
    entries = figures.filter_figures(params, results, tmp_path)
    assert [e["file"] for e in entries] == ["filter_study_bars.png", "filter_study_gaussian.png"]
    bars = figures.filter_bars({"learned": [0.8], "random": [0.7], "box-25": []}, "t")
    assert [t.get_text() for t in bars.axes[0].get_xticklabels()] == ["learned\n(n=1)", "random\n(n=1)"]


def test_figures_print_legibly_at_the_stage_dpi(monkeypatch, tmp_path):
    """At the stage's dpi the PDF shows even the smallest figures (a 2 x 2 heat map, one curve panel, two bars)
    at least 12 cm wide and never below MIN_PPI pixels per inch."""
    monkeypatch.setattr(figures, "DPI", STAGE_DPI)
    run = run_metrics([0.5, 0.6], [0.4, 0.5])["history"]
    small = {"heat": figures.gaussian_heatmap({(0.1, 4): [0.9]}, [0.1, 1.0], [4, 64], "t"),
             "curves": figures.curves_figure({"d": {"impulse": [run]}}, ["impulse"], "val_top1", "y", "t"),
             "bars": figures.filter_bars({"learned": [0.8], "random": [0.7]}, "t")}
    pdf = ReportPDF("t")
    for name, fig in small.items():
        entry = figures.save(fig, tmp_path, name, name, "", name)
        width, _ = _figure_size(pdf, FigureBlock(entry["file"], name), tmp_path)
        pixels = imread(tmp_path / entry["file"]).shape[1]
        assert width >= 120 and pixels / (width / 25.4) >= MIN_PPI - 1e-6, name


def test_figures_stage_writes_every_figure_and_its_manifest(results, params, tmp_path):
    out = tmp_path / "reports" / "figures"
    manifest = figures.write_figures(params, results, out, trained=False)
    assert json.loads((out / "figures.json").read_text()) == manifest
    files = [e["file"] for e in manifest["figures"]]
    assert files == ["curves_val_top1_vit.png", "curves_train_top1_vit.png",
                     "attention_vit_init_impulse_pseudo.png", "attention_vit_init_impulse_real.png",
                     "attention_vit_init_default_pseudo.png", "attention_vit_init_default_real.png",
                     "filter_study_bars.png", "filter_study_gaussian.png"]
    families = {f["name"]: f for f in manifest["families"]}
    assert list(families) == ["curves_val_top1", "curves_train_top1", "attention", "filter_study_bars",
                              "filter_study_gaussian"]
    assert [families[e["family"]]["section"] for e in manifest["figures"]] == (
        ["curves"] * 2 + ["attention"] * 4 + ["filter_study"] * 2)
    assert sorted(p.name for p in out.glob("*.png")) == sorted(files)
    for e in manifest["figures"]:
        image = imread(out / e["file"])
        assert min(image.shape[:2]) > 150 and image[..., :3].std() > 0.05, e["file"]  # drawn, not blank
    attention_entries = [e for e in manifest["figures"] if e["family"] == "attention"]
    assert attention_entries[0]["title"] == "vit: impulse at initialization, positional pseudo-input"
    assert "7×7 token grid (white lines every 7 tokens" in attention_entries[0]["note"]
    assert "mean over 64 validation images of fashion_mnist" in attention_entries[1]["note"]
    assert len(families["attention"]["caption"]) > 500 and "white lines" not in attention_entries[0]["title"]


def test_each_figure_is_skipped_without_its_inputs(results, params, tmp_path):
    import shutil

    shutil.rmtree(results / "filter_study")
    (results / "attention" / "vit" / "default" / "maps.npz").unlink()
    manifest = figures.write_figures(params, results, tmp_path / "figs", trained=False)
    assert [e["file"] for e in manifest["figures"]] == [
        "curves_val_top1_vit.png", "curves_train_top1_vit.png", "attention_vit_init_impulse_pseudo.png",
        "attention_vit_init_impulse_real.png"]
    assert [f["name"] for f in manifest["families"]] == ["curves_val_top1", "curves_train_top1", "attention"]
    empty = figures.write_figures(params, tmp_path / "nothing", tmp_path / "figs", trained=False)
    assert empty == {"families": [], "figures": []}
    assert list((tmp_path / "figs").iterdir()) == [tmp_path / "figs" / "figures.json"]


def test_figures_are_grouped_by_variant(results, params, tmp_path, monkeypatch):
    """Two variants: every attention figure of the first before the second's, one curves figure per variant."""
    import shutil

    from matplotlib.figure import Figure

    shutil.rmtree(results / "filter_study")
    monkeypatch.setattr(figures, "attention_figure", lambda *args: Figure(figsize=(1, 1)))  # the order is tested
    for arm in ("impulse", "default", "mimetic"):
        for seed in (0, 1):
            write_json(results / "train/fashion_mnist/vit6" / arm / f"seed{seed}/metrics.json",
                       run_metrics([0.5, 0.6], [0.4, 0.5]))
    fake_attention(results / "attention" / "vit6", "impulse")
    params.models["vit6"] = params.models["vit"]
    entries = figures.draw_all(params, results, tmp_path, trained=False)["figures"]
    assert [(e["family"], e["variant"]) for e in entries if e["family"] == "attention"][:6] == [
        ("attention", "vit")] * 4 + [("attention", "vit6")] * 2
    assert [e["file"] for e in entries if e["family"] == "curves_val_top1"] == ["curves_val_top1_vit.png",
                                                                                 "curves_val_top1_vit6.png"]


def test_zoom_panel_marks_one_grid_row_per_block():
    record = fake_record(layers=(0,), heads=1, sources=("pseudo",))
    fig = figures.attention_figure({"pseudo_L0": shifted_maps(1, [-GRID[1]])}, record, "pseudo", "t")
    full, zoom = fig.axes[:2]
    assert zoom.images[0].get_array().shape == (16, 16)
    vertical = {round(line.get_xdata()[0], 1) for line in zoom.lines if line.get_xdata()[0] == line.get_xdata()[1]}
    assert sorted(vertical) == [6.5, 13.5]
    assert full.patches[0].get_width() == 16  # the red box around the zoomed corner
    assert "offset (+0, +0)" in full.get_title() and "peak 1.00" in full.get_title()
    assert figures.attention_figure({}, record, "real", "t") is None


def test_only_the_impulse_arm_is_titled_with_offsets_and_every_map_has_query_and_key_axes():
    record = fake_record(layers=(0,), heads=1, sources=("pseudo",))
    maps = {"pseudo_L0": shifted_maps(1, [0])}
    impulse = figures.attention_figure(maps, record, "pseudo", "t", "impulse")
    default = figures.attention_figure(maps, record, "pseudo", "t", "default")
    assert "offset" in impulse.axes[0].get_title() and "peak" in impulse.axes[0].get_title()
    assert default.axes[0].get_title() == "layer 0, head 0\nlocal 1.00"
    for ax in (*impulse.axes[:2], *default.axes[:2]):
        assert (ax.get_xlabel(), ax.get_ylabel()) == ("key token", "query token")


def test_the_filter_bars_start_at_zero_and_call_softmax_rand_star():
    fig = figures.filter_bars({"learned": [0.90, 0.91], "softmax": [0.88]}, "t")
    ax = fig.axes[0]
    assert ax.get_ylim()[0] == 0 and "test split" in ax.get_ylabel()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["learned\n(n=2)", "rand*\n(softmax)\n(n=1)"]


def test_the_forest_plot_has_a_row_per_planned_comparison_with_its_threshold(tmp_path):
    claims = {"confidence": 0.95, "claims": [
        {"id": "1", "comparisons": [
            {"label": "fm, vit", "a": "impulse", "b": "default", "mean": 3.0, "low": 1.0, "high": 5.0,
             "needs": "> 0", "verdict": "supported"},
            {"label": "fm, vit", "a": "mimetic", "b": "default", "mean": 0.5, "low": None, "high": None,
             "needs": "> 0", "verdict": "inconclusive"}]},
        {"id": "5a", "comparisons": [{"label": "frozen ≈ learned", "a": "random", "b": "learned", "mean": -0.4,
                                      "low": -1.0, "high": 0.2, "needs": "inside ±2", "verdict": "supported"}]},
        {"id": "2", "comparisons": []}]}
    assert [figures.thresholds(n) for n in ("> 0", "> -2", "inside ±2", "< −1")] == [[0.0], [-2.0], [-2.0, 2.0],
                                                                                     [-1.0]]
    entries = figures.forest_figures(claims, tmp_path)
    assert [e["file"] for e in entries] == ["forest_1.png"] and entries[0]["note"].endswith("3 comparisons")
    fig = figures.forest_figure(figures.forest_rows(claims), "t", 0.95)
    ticks = sorted(((t.get_position()[1], t.get_text()) for t in fig.axes[0].get_yticklabels()), reverse=True)
    assert [text for _, text in ticks] == ["1: fm, vit: impulse − default (> 0)", "1: fm, vit: mimetic − default (> 0)",
                                           "5a: frozen ≈ learned: random − learned (inside ±2)"]  # top to bottom


def test_only_published_numbers_on_the_same_dataset_are_plotted_against_ours(tmp_path):
    tables_dir = tmp_path / "tables"
    tables_dir.mkdir()
    (tables_dir / "tables.json").write_text(json.dumps([
        {"title": "ViT beside published", "csv": "vit.csv"}, {"title": "Filter study", "csv": "filter.csv"}]))
    (tables_dir / "vit.csv").write_text("dataset,arm,ours_std,published,ours_minus_published\n"
                                        "cifar10,impulse,0.5,80.0,-2.0\ncifar10,default,0.4,,\n")
    (tables_dir / "filter.csv").write_text("variant,std,published,ours_minus_published\nrandom,0.3,92.2,\n")
    points = figures.published_points(tables_dir)
    assert points == [{"table": "ViT beside published", "label": "cifar10, impulse", "published": 80.0,
                       "ours": 78.0, "std": 0.5}]
    assert figures.published_figure(points) is not None and figures.published_figure([]) is None


def test_layers_with_fewer_heads_leave_their_panels_empty():
    record = fake_record(layers=(0, 1), heads=3, sources=("pseudo",))
    record["heads"]["1"] = 1
    maps = {"pseudo_L0": shifted_maps(3, [0, 0, 0]), "pseudo_L1": shifted_maps(1, [0])}
    fig = figures.attention_figure(maps, record, "pseudo", "t")
    visible = [[ax.get_visible() for ax in fig.axes[4 * h: 4 * h + 4]] for h in range(3)]
    assert visible == [[True] * 4, [True, True, False, False], [True, True, False, False]]


def test_heatmap_cells_follow_table6_order():
    found = {(0.1, 64): [0.9, 0.8], (1.0, 4): [0.5]}
    fig = figures.gaussian_heatmap(found, [0.1, 1.0], [4, 64], "t")
    grid = fig.axes[0].images[0].get_array()
    assert grid[0, 1] == pytest.approx(50) and grid[1, 0] == pytest.approx(85)  # rows sigma 1.0, 0.1; cols 64, 4
    assert grid.mask[0, 0] and grid.mask[1, 1]


def test_attention_record_of_tiny_vits_tells_the_arms_apart(params):
    """The fashion_mnist ViT of params.yaml (7x7 tokens, 3 heads, depth 6) at init: impulse peaks, default is flat."""
    import torch

    torch.manual_seed(123)  # grid_model reseeds: the global state must not matter
    images = torch.randn(4, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    records = {}
    for arm in ("impulse", "default"):
        model = attention.grid_model(params, "vit", arm, META, seed=0)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        maps, records[arm] = attention.model_record(params, model, 0, images)
        assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    assert set(maps) == {"pseudo_L0", "pseudo_L5", "real_L0", "real_L5"}
    assert maps["real_L0"].shape == (3, N, N) and np.all(maps["real_L0"].sum(-1) <= 1 + 1e-5)
    impulse, default = records["impulse"], records["default"]
    assert impulse["grids"]["0"] == [7, 7] and impulse["images"] == 4
    assert impulse["offsets"]["0"] == [[0, 0], [-1, 0], [0, 1]]  # code-2505's head order
    assert min(impulse["measures"]["pseudo"]["0"]["peak_agreement"]) > 0.9
    assert max(default["measures"]["pseudo"]["0"]["peak_agreement"]) < 0.5
    uniform = default["measures"]["pseudo"]["0"]["uniform_locality_mass"]
    assert min(impulse["measures"]["pseudo"]["0"]["locality_mass"]) > 0.8 > 3 * uniform


def no_data(monkeypatch):
    """Stand in for a fetched Fashion-MNIST: its facts, and a batch of zeros for the real-image maps."""
    import torch

    monkeypatch.setattr(attention, "val_batch", lambda params, dataset, img_size, in_chans, n: torch.zeros(
        n, in_chans, img_size, img_size))
    for module in (attention, figures):
        monkeypatch.setattr(module, "dataset_meta", lambda root, name: META)


def test_attention_stage_writes_its_outs(params, tmp_path, monkeypatch):
    """`python -m pipeline attention vit impulse` end to end, with the data stubbed (no fetched data here)."""
    monkeypatch.chdir(tmp_path)
    no_data(monkeypatch)
    parser = argparse.ArgumentParser()
    attention.add_arguments(parser)
    assert attention.main(params, parser.parse_args(["vit", "impulse", "--images", "2"])) == 0
    maps, record = attention.read_attention(tmp_path / "results" / "attention" / "vit" / "impulse")
    assert record["arm"] == "impulse" and record["variant"] == "vit" and record["images"] == 2
    assert record["layers"] == [0, 5] and maps["pseudo_L5"].shape == (3, N, N)
    with pytest.raises(PipelineError, match="variant 'nope'"):
        attention.main(params, parser.parse_args(["nope", "impulse"]))


def test_attention_stage_records_a_mixer_construction_and_its_diagnostics(params_file, tmp_path, monkeypatch):
    """A Mixer variant whose init_options pick 'shift': the record names it, its diagnostics say every token-MLP
    unit is in the linear regime, and the report's table shows it beside default's."""
    mixer = ("models.mixs={name: mixer_s16_224, img_size: 28, patch_size: 4, embed_dim: 96, extra: {num_blocks: 2},"
             " init_options: {impulse: {mixer: shift}}}")
    params = load_params(params_file, [mixer])
    monkeypatch.chdir(tmp_path)
    no_data(monkeypatch)
    parser = argparse.ArgumentParser()
    attention.add_arguments(parser)
    records = {}
    for arm in ("impulse", "default"):
        assert attention.main(params, parser.parse_args(["mixs", arm, "--images", "2"])) == 0
        records[arm] = attention.read_attention(tmp_path / "results" / "attention" / "mixs" / arm)[1]
    impulse = records["impulse"]
    assert impulse["init"]["mixer"] == "shift" and records["default"]["init"] == params.method_options("default")
    assert impulse["diagnostics"]["linear_fraction"] == [1.0, 1.0]
    assert len(impulse["diagnostics"]["branch_ratio"]) == 2 and impulse["diagnostics"]["trunk_rms"] > 0
    table = tables.init_diagnostics_table({"mixs": records})
    assert [r[:4] for r in table.rows] == [["mixs", "default", tables.NA, table.rows[0][3]],
                                           ["mixs", "impulse", "shift", "100%"]]
    assert tables.init_diagnostics_table({"vit": {"impulse": impulse | {"diagnostics": None}}}) is None


def test_trained_maps_come_from_the_checkpoint(params, tmp_path, monkeypatch):
    """A `default` run whose saved weights are an impulse model's: the maps must be the checkpoint's."""
    import torch

    no_data(monkeypatch)
    path = tmp_path / "results" / "train" / "fashion_mnist" / "vit" / "default" / "seed0" / "model.pt"
    path.parent.mkdir(parents=True)
    torch.save(attention.grid_model(params, "vit", "impulse", META, seed=0).state_dict(), path)
    maps, record = figures.trained_record(params, tmp_path / "results", "vit", "default")
    assert record["state"] == "trained" and record["model"].startswith("vit_tiny_patch16_224 with img size 28")
    assert record["variant"] == "vit" and record["arm"] == "default"
    assert min(record["measures"]["pseudo"]["0"]["peak_agreement"]) > 0.9
    assert figures.trained_record(params, tmp_path / "results", "vit", "mimetic") is None


# --------------------------------------------------------------------------------------------- [CI] Figs 6-9

CI_GRID = ["ci_alpha.datasets=[fashion_mnist]", "ci_alpha.alphas=[0.0, 0.2]", "ci_alpha.seeds=[0, 1]",
           "ci_alpha.model={image_size: 28, patch_size: 4, dim: 24, depth: 3, heads: 2, head_dim: 12, mlp_dim: 24,"
           " channels: null}",
           "ci_alpha.impulse_fit={steps: 20, lr: 0.01, sigma: 0.1, renorm_every: 10, window: 3}"]


def test_ci_maps_are_what_the_model_computes_on_positions_alone():
    """The softmax map of a head is the attention the α-mixed layer puts on positions when α = 0, and PQKᵀPᵀ is the
    PE through the head's QK form."""
    torch.manual_seed(0)
    model = SimpleViT(image_size=28, patch_size=4, num_classes=10, dim=24, depth=2, heads=2, head_dim=12, mlp_dim=24,
                      channels=1, alpha=0.0)
    maps = head_maps(model, 1, 1)
    attn, pe = model.blocks[1].attn, model.pos_embedding
    expected = attn.maps(torch.randn(1, 49, 24), pe)[0, 1]  # α = 0: the content does not enter
    assert np.allclose(maps["ci_softmax"], expected.detach().numpy(), atol=1e-5)
    assert np.allclose(maps["ci_pqkp"], pe.numpy() @ maps["ci_qk"] @ pe.numpy().T, atol=1e-4)
    assert maps["ci_qk"].shape == (24, 24) and maps["ci_softmax"].shape == (49, 49)


def test_ci_figures_6_to_9_from_the_alpha_grids_cells(params_file, tmp_path, monkeypatch):
    """Fig. 6 from the α 0.2 cells' histories; Figs 7-9 from the first seed's cell rebuilt (before) and its model.pt
    (after), each family's caption beside the published figure's description; no α 0.2 cell, no figure."""
    params = load_params(params_file, CI_GRID)
    monkeypatch.setattr(ci_figures, "dataset_meta", lambda root, name: META)
    results = tmp_path / "results"
    for arm, base in (("impulse", 0.7), ("mimetic", 0.6), ("random", 0.5)):
        for seed in (0, 1):
            cell = results / "ci_alpha/fashion_mnist/alpha0.2" / arm / f"seed{seed}"
            val = [base + 0.05 * e + 0.01 * seed for e in range(3)]
            write_json(cell / "metrics.json", run_metrics(val, val, alpha=0.2, arm=arm, seed=seed))
        model, _ = initialized(ci_figures.cell_config(params, "fashion_mnist", arm, 0), META)
        with torch.no_grad():
            model.blocks[0].attn.to_qk.weight.add_(0.5)  # "trained": the first layer's Q, K moved
        torch.save(model.state_dict(), results / "ci_alpha/fashion_mnist/alpha0.2" / arm / "seed0/model.pt")
    out = tmp_path / "figs"
    out.mkdir()
    families, drawn = ci_figures.ci_figures(params, results, out, PAPER, figures.save)
    assert [f["family"] for f in drawn] == ["ci_curves", "ci_qk", "ci_pqkp", "ci_softmax"]
    assert all((out / f["file"]).is_file() for f in drawn)
    captions = {f["name"]: f["caption"] for f in families}
    assert "Published ([CI] Fig. 6): Test-accuracy curves over the first 100 epochs, M′_I at α = 0.2" in \
        captions["ci_curves"]
    assert "Published ([CI] Fig. 9): Softmax attention maps of head 3 at layers 1 / 3 / 6" in captions["ci_softmax"]
    assert "layers 1, 3 (1-based, as [CI] numbers them), head 2" in captions["ci_qk"]  # clipped to depth 3, 2 heads
    maps = ci_figures.cell_maps(params, ci_figures.figure_runs(params, results), "impulse", [0, 2], 1)
    fresh, _ = initialized(ci_figures.cell_config(params, "fashion_mnist", "impulse", 0), META)
    assert np.allclose(maps["before"][0]["ci_qk"], ci_figures.head_maps(fresh, 0, 1)["ci_qk"])
    assert not np.allclose(maps["after"][0]["ci_qk"], maps["before"][0]["ci_qk"])
    assert np.allclose(maps["after"][2]["ci_qk"], maps["before"][2]["ci_qk"])  # layer 3 unchanged
    params = load_params(params_file, [*CI_GRID[:1], "ci_alpha.alphas=[0.0, 0.1]", *CI_GRID[2:]])
    assert ci_figures.ci_figures(params, results, out, PAPER, figures.save) == ([], [])

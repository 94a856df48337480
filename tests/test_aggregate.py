"""The aggregate: published numbers as data, reading the results tree, the tables, the claims as the stage judges
them from files, and what the stage writes (the verdict logic itself: tests/test_stats.py, tests/test_claims.py).

Everything runs on fake results trees in tmp_path (metrics.json files with per-epoch histories), built by the
`make_*` helpers below (tests/test_report.py reuses them).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats as sps

from pipeline.analysis.aggregate import Experiment, aggregate, main, seed_lists, write_aggregate
from pipeline.analysis.filter_tables import beyond_paper, published_family
from pipeline.analysis.published import load_claims, load_published
from pipeline.analysis.runs import at_epoch, planned_cells, read_frames
from pipeline.errors import PipelineError
from pipeline.experiments import ci, filter_study, grid, sia, weight_selection
from pipeline.params import load_params

ROOT = Path(__file__).resolve().parent.parent
PAPER = ROOT / "paper"
#: final top-1 (fractions) of the fake ViT runs: impulse > mimetic > default on every seed
VIT = {"default": {0: 0.800, 1: 0.806}, "mimetic": {0: 0.821, 1: 0.825}, "impulse": {0: 0.845, 1: 0.852}}
FILTERS = {"learned": 0.86, "random": 0.855, "impulse": 0.85, "box-9": 0.70, "softmax": 0.65, "perm": 0.60}
GAUSS = {(0.1, 64): 0.85, (0.1, 4): 0.82, (1.0, 64): 0.80, (1.0, 4): 0.77}
#: what a ViT-family run records about its model (variant -> timm name, family, heads)
MODELS = {"vit": ("vit_tiny_patch16_224", "vit", 3), "vit6": ("vit_small_patch16_224", "vit", 6),
          "swin": ("swin_tiny_patch4_window7_224", "swin", 3)}


def history(top1: float, epochs: int) -> list[dict]:
    """Per-epoch rows rising linearly to `top1` (val) and `top1 - 0.03` (train); epoch counts from 0."""
    return [{"epoch": e, "lr": 1e-3, "train_loss": 2.0 - 0.1 * e, "train_top1": top1 * (e + 1) / epochs - 0.03,
             "images_per_s": 500.0, "epoch_time_s": 10.0, "val_loss": 1.0, "val_top1": top1 * (e + 1) / epochs,
             "val_top5": 0.99} for e in range(epochs)]


def write_run(path: Path, top1: float, epochs: int = 8, **extra) -> None:
    """One metrics.json of the results schema (issue brief) at path/metrics.json."""
    path.mkdir(parents=True, exist_ok=True)
    metrics = {"top1": top1, "top5": 0.99, "val_loss": 0.5, "train_loss": 0.6, "train_top1": top1 - 0.03,
               "best_top1": top1 + 0.002, "best_top5": 0.99, "best_epoch": epochs, "epochs": epochs,
               "images_per_s": 512.3, "wall_time_s": 321.0, "params": 470_000, "world_size": 1, "train_size": 5000,
               "val_size": 2000, "git_rev": "abc1234", "python": "3.11.7", "torch": "2.14.1",
               "torchvision": "0.29.1", "timm": "1.0.31", "hardware": "test-cpu", "cpu_count": 2,
               "config_digest": "0123456789abcdef", "history": history(top1, epochs)}
    (path / "metrics.json").write_text(json.dumps(metrics | extra))


def make_vit(results: Path, vit: dict = VIT, dataset: str = "fashion_mnist", epochs: int = 8,
             variant: str = "vit") -> None:
    model, family, heads = MODELS[variant]
    for arm, per_seed in vit.items():
        for seed, top1 in per_seed.items():
            write_run(results / "train" / dataset / variant / arm / f"seed{seed}", top1, epochs, dataset=dataset,
                      arm=arm, seed=seed, variant=variant, model=model, family=family, num_heads=heads)


def make_filters(results: Path, seeds=(0, 1)) -> None:
    """The filter study (5 variants) and a 2 x 2 Gaussian grid, `seeds` each (seed 1 is 0.3 points higher)."""
    for seed in seeds:
        for v, top1 in FILTERS.items():
            extra = {"variant": v, "family": v.split("-")[0], "frozen": v != "learned", "heads": None, "sigma": None,
                     "kernel_size": 3, "dim": 64, "params": 60_000}
            if v == "learned":
                extra |= {"effective_rank": 12, "prop1_holds": False, "prop1_rhs": 108}
            write_run(results / "filter_study" / v / f"seed{seed}", top1 + 0.003 * seed, **extra)
        for (sigma, heads), top1 in GAUSS.items():
            v = f"gaussian-{sigma}-h{heads}"  # the folder filter_gaussian@ writes: DVC spells 1.0 as '1.0'
            write_run(results / "filter_study" / v / f"seed{seed}", top1 + 0.003 * seed, variant=v,
                      family="gaussian", frozen=True, heads=heads, sigma=sigma, kernel_size=3, dim=64, params=60_000)


#: the test experiment's records (`Experiment.parts`): the filter study and its Gaussian grid on, the other blocks off
PARTS = {"filter_study": filter_study.AnalysisPart("fashion_mnist", ("learned", "random", "impulse", "box-9", "softmax",
                                                                     "perm"), (0.1, 1.0), (64, 4), (0, 1)),
         "grid": grid.AnalysisPart(datasets=("fashion_mnist",), variants=("vit",)),
         "weight_selection": weight_selection.AnalysisPart(), "ci": ci.AnalysisPart(),
         "sia": sia.AnalysisPart(datasets=("fashion_mnist",))}


def experiment(**overrides) -> Experiment:
    """An Experiment of these fields, reading the cells (and seed lists) the declared stages (`pipeline.experiments`)
    plan for them. An experiment's record changes by its name and a dict of its fields (`filter_study={"seeds":
    (0,)}`; [CI]'s two grids as `alpha=` and `model3=`)."""
    base = dict(datasets=("fashion_mnist",), arms=("impulse", "default", "mimetic"), seeds=(0, 1),
                convergence_epochs=(2, 4, 8), confidence=0.95, models=(("vit", "vit_tiny_patch16_224", 3),),
                kernel_size=3, profile="test", params_digest="d1g")
    parts = dict(PARTS)
    for name in [k for k in overrides if k in parts]:
        parts[name] = dataclasses.replace(parts[name], **overrides.pop(name))
    for name in [k for k in overrides if k in ("alpha", "model3")]:
        parts["ci"] = dataclasses.replace(parts["ci"], **{name: dataclasses.replace(getattr(parts["ci"], name),
                                                                                     **overrides.pop(name))})
    exp = Experiment(**(base | {"parts": tuple(parts.items())} | overrides))
    params = planning(exp)
    return dataclasses.replace(exp, cells=tuple(planned_cells(params)), seed_keys=seed_lists(params))


def planning(exp: Experiment):
    """The params whose planned cells are `exp`'s: each field set where params.yaml keeps it."""
    params = load_params(ROOT / "params.yaml")
    model = next(iter(params.models.values()))
    params.datasets, params.seeds = list(exp.datasets), list(exp.seeds)
    params.init, params.baselines = exp.arms[0], list(exp.arms[1:])
    params.models = {v: model for v in exp.variants}
    study, part = params.filter_study, exp.filter_study
    study.dataset, study.filters, study.seeds = part.dataset, list(part.filters), list(part.seeds)
    study.gaussian_sigmas, study.gaussian_heads = list(part.sigmas), list(part.heads)
    ci, alpha = params.ci_alpha, exp.ci.alpha
    ci.datasets, ci.alphas, ci.arms, ci.seeds = list(alpha.datasets), list(alpha.alphas), list(alpha.arms), list(
        alpha.seeds)
    m3, model3 = params.ci_model3, exp.ci.model3
    m3.datasets, m3.arms, m3.qk, m3.value = list(model3.datasets), list(model3.arms), list(model3.qk), list(
        model3.values)
    m3.seeds, m3.forms = list(model3.seeds), list(model3.forms)
    params.train_configs = {name: {} for name in exp.grid.configs}
    params.train_config_cells.datasets, params.train_config_cells.variants = (list(exp.grid.datasets),
                                                                            list(exp.grid.variants))
    sia = params.sia
    sia.datasets, sia.seeds = list(exp.sia.datasets), list(exp.sia.seeds)
    sia.bases = [c.removeprefix("base_") for c in exp.sia.cells if c.startswith("base_")]
    sia.fits = [c.removeprefix("fit_") for c in exp.sia.cells if c.startswith("fit_")]
    ws, block = params.weight_selection, exp.weight_selection
    ws.datasets, ws.scratch, ws.seeds = list(block.datasets), list(block.scratch), list(block.seeds)
    ws.teachers = {name: None for name in block.teachers}
    return params


@pytest.fixture
def results(tmp_path) -> Path:
    """A complete fake results tree: 3 arms x 2 seeds, the filter study and the Gaussian grid, 2 seeds each."""
    make_vit(tmp_path / "results")
    make_filters(tmp_path / "results")
    return tmp_path / "results"


def table(agg, name):
    return next(t for t in agg.tables if t.name == name)


def claim(agg, cid):
    return next(c for c in agg.claims if c["id"] == cid)


# --- published numbers -------------------------------------------------------------------------------------------

def test_published_numbers_load_with_source_version_and_status():
    pub = load_published(PAPER)
    assert (pub["source"] != "").all() and (pub["version"] != "").all()
    nprow = pub["status"] == "n/p"
    assert pub.loc[nprow, "value"].isna().all() and pub.loc[~nprow, "value"].notna().all()
    t1 = pub[(pub["table"] == "NeurIPS Table 1") & (pub["metric"] == "top1")]
    assert len(t1) == 18 and t1["value"].isna().all()  # [NeurIPS] Table 1: every cell unknown, none invented
    t6 = pub[(pub["file"] == "gaussian") & (pub["sigma"] == 0.1) & (pub["heads"] == 64)]
    assert t6["value"].tolist() == [91.7]
    conv = pub[(pub["file"] == "convergence") & (pub["epoch"] == 100) & (pub["arm"] == "impulse")]
    assert conv["value"].tolist() == [81.87]
    refs = pub[pub["file"] == "references"]
    assert set(refs["status"]) == {"reference"} and {91.6, 93.4} <= set(refs["value"])


def test_the_papers_data_files_read_the_same_with_pyyaml():
    """paper/*.yaml are data for other tools too: PyYAML (YAML 1.1) reads what the project's YAML 1.2 loader reads."""
    from pipeline.schema import yaml_load

    for path in sorted(PAPER.glob("*.yaml")):
        assert yaml.safe_load(path.read_text()) == yaml_load(path.read_text()), path.name


def test_every_published_number_appears_in_the_source_notes():
    """Nothing in paper/ is invented: each number from the papers occurs in the maintainers' source notes, a file
    outside the repository named by $PIPELINE_SOURCE_NOTES (skipped without it)."""
    digest = source_notes()
    in_text = {float(x) for x in re.findall(r"(?<![\d.])\d+\.\d+|(?<![\d.])\d+(?![\d.])", digest.read_text())}
    pub = load_published(PAPER)
    from_papers = pub[pub["status"].isin(["published", "secondary", "derived"])]
    missing = sorted({v for v in from_papers["value"] if v not in in_text})
    assert not missing, f"numbers in paper/ that the source notes do not contain: {missing}"
    assert len(from_papers) > 150


def source_notes() -> Path:
    """The maintainers' source notes ($PIPELINE_SOURCE_NOTES), or skip."""
    path = Path(os.environ.get("PIPELINE_SOURCE_NOTES", ""))
    if not path.name or not path.is_file():
        pytest.skip("$PIPELINE_SOURCE_NOTES names no file (the maintainers' source notes are not in the repository)")
    return path


def test_claims_yaml_lists_every_claim_of_section_2_10():
    """The papers' nine headline claims, then [CI] Table 2's NT effect (10), training configurations (11), [NeurIPS]
    Table 4's weight selection (12), [SIA]'s pseudo-inputs and baseline change (13, 14), [CI] Table 1 (15)."""
    assert [c["id"] for c in load_claims(PAPER)] == ["1", "2", "3", "4", "5a", "5b", "6", "7", "8", "9", "10", "11",
                                                     "12", "13", "14", "15"]


@pytest.mark.parametrize("row, message", [
    ("T,src,v,n/p,top1,91.0", "an n/p cell has an empty value"),
    ("T,src,v,guessed,top1,91.0", "unknown status 'guessed'"),
    ("T,src,v,published,top1,", "an n/p cell has an empty value"),
])
def test_bad_published_rows_are_refused(tmp_path, row, message):
    (tmp_path / "t.csv").write_text("table,source,version,status,metric,value\n" + row + "\n")
    with pytest.raises(PipelineError, match=message):
        load_published(tmp_path)


# --- reading the results tree ------------------------------------------------------------------------------------

def test_epoch_values_come_from_the_history_by_finished_epochs():
    h = history(0.8, 8)
    assert at_epoch(h, 8, "val_top1") == pytest.approx(0.8)
    assert at_epoch(h, 2, "val_top1") == pytest.approx(0.2)
    assert math.isnan(at_epoch(h, 9, "val_top1"))


def test_the_runs_read_are_the_declared_stages_cells_in_their_folders(results):
    """Each frame's rows come from the cells the declarations plan, at the folder each stage writes (the Gaussian
    grid at DVC's spelling of sigma); a planned cell without a metrics.json is reported missing, by its folder."""
    exp = experiment(filter_study=dict(filters=(), sigmas=(1.0, 0.3), heads=(4,), seeds=(0,)))
    frames, missing = read_frames(results, exp.cells)
    gauss = frames["filters"]
    assert gauss["variant"].tolist() == ["gaussian-1.0-h4"] and gauss["top1"].tolist() == [0.77]
    assert gauss["folder"].tolist() == [str(results / "filter_study/gaussian-1.0-h4/seed0")]
    assert str(results / "filter_study/gaussian-0.3-h4/seed0") in missing
    assert frames["vit"]["arm"].tolist() == ["impulse", "impulse", "default", "default", "mimetic", "mimetic"]


def test_a_frame_takes_its_keys_from_its_stages_declaration(tmp_path):
    """[CI]'s α is a number in its frame, Model III and Table 1's forms share one frame (Model III's form named),
    a weight-selection row names its teacher or scratch arm: what each stage declares, no reader of its own."""
    exp = experiment(alpha=dict(datasets=("cifar10",), alphas=(0.1,), arms=("impulse",), seeds=(0,)),
                     model3=dict(datasets=("cifar10",), arms=("impulse",), qk=("frozen",), values=("value",),
                                 seeds=(0,), forms=("model2",)),
                     weight_selection=dict(datasets=("digits",), teachers=("t",), scratch=("default",), seeds=(0,)))
    for folder in ["ci_alpha/cifar10/alpha0.1/impulse/seed0", "ci_model3/cifar10/impulse/frozen/value/seed0",
                   "ci_table1/cifar10/model2/value/seed0", "weight_selection/digits/t/seed0",
                   "weight_selection/digits/scratch/default/seed0"]:
        write_run(tmp_path / folder, 0.5)
    frames, _ = read_frames(tmp_path, exp.cells)
    assert frames["ci"]["alpha"].tolist() == [0.1]
    m3 = frames["m3"]
    assert m3[["form", "arm", "qk"]].values.tolist() == [["model3", "impulse", "frozen"], ["model2", "random",
                                                                                            "trained"]]
    assert frames["weight_selection"]["source"].tolist() == ["t", "scratch:default"]


def test_only_the_experiments_runs_are_read(results):
    write_run(results / "train" / "fashion_mnist" / "vit" / "timm" / "seed0", 0.99)  # an old run of another init
    agg = aggregate(results, PAPER, experiment(seeds=(0, 1, 2)))
    assert "timm" not in agg.summary["fashion_mnist"]["vit"]
    assert agg.summary["fashion_mnist"]["vit"]["impulse"]["n"] == 2
    assert len(agg.what_was_run["missing"]) == 3  # seed 2 of each arm
    assert all("seed2" in m for m in agg.what_was_run["missing"])


def test_the_experiment_reads_params_ci_alpha_when_it_exists(repo_root):
    """The experiment reads the [CI] grid and its impulse fit from params `ci_alpha`."""
    params = load_params(repo_root / "params.yaml")
    exp = Experiment.from_params(params)
    assert (exp.ci.alpha.datasets, exp.ci.alpha.alphas, exp.ci.alpha.arms, exp.ci.alpha.seeds) == (
        tuple(params.ci_alpha.datasets), tuple(float(a) for a in params.ci_alpha.alphas),
        tuple(params.ci_alpha.arms), tuple(params.ci_alpha.seeds))
    assert f"{params.ci_alpha.impulse_fit.steps} steps" in exp.ci.alpha.setting  # the fit table names the grid's fit


def test_an_empty_results_tree_gives_tables_and_not_tested_claims(tmp_path):
    agg = aggregate(tmp_path / "nothing", PAPER, experiment())
    assert {c["verdict"] for c in agg.claims} == {"not tested"} and agg.headline == []
    assert [t.name for t in agg.tables] == ["runs"] and len(agg.what_was_run["missing"]) == 6 + 6 * 2 + 4 * 2


# --- tables ------------------------------------------------------------------------------------------------------

def test_main_table_has_mean_std_n_delta_and_bold_best(results):
    agg = aggregate(results, PAPER, experiment())
    t = table(agg, "vit_top1")
    cells = {r[0]: r[1] for r in t.rows}
    mean, std = np.mean([84.5, 85.2]), np.std([84.5, 85.2], ddof=1)
    assert t.columns == ["Arm", "fashion_mnist"]
    assert cells["impulse"] == f"**{mean:.2f} ± {std:.2f} (n=2)**"
    assert cells["default"] == "80.30 ± 0.42 (n=2)"  # not bold: not the best
    assert cells["Δ impulse - default (pts)"] == f"{mean - 80.3:+.2f}"
    assert [r[0] for r in t.rows][:3] == ["default", "mimetic", "impulse"]  # the paper's order: method last


def test_tables_group_by_dataset_and_variant(results):
    swapped = {"default": VIT["impulse"], "mimetic": VIT["mimetic"], "impulse": VIT["default"]}
    make_vit(results, swapped, variant="swin")
    agg = aggregate(results, PAPER, experiment(variants=("vit", "swin")))
    assert table(agg, "vit_top1").columns == ["Arm", "fashion_mnist, vit", "fashion_mnist, swin"]
    head = [(r[0], r[1], r[-2]) for r in table(agg, "headline").rows]
    assert {r[-1] for r in table(agg, "headline").rows} == {"5,000 images · 8 epochs · 470k params"}  # the regime
    assert head == [("fashion_mnist, vit", "impulse > default", "supported"),
                    ("fashion_mnist, vit", "impulse > mimetic", "supported"),
                    ("fashion_mnist, swin", "impulse > default", "contradicted"),
                    ("fashion_mnist, swin", "impulse > mimetic", "contradicted")]
    conv = table(agg, "convergence")
    assert {r[0] for r in conv.rows} == {"fashion_mnist, vit", "fashion_mnist, swin"}
    assert agg.summary["fashion_mnist"]["swin"]["default"]["top1_mean"] == pytest.approx(0.8485)
    assert claim(agg, "1")["verdict"] == "supported"  # judged on the ViT family only
    assert claim(agg, "8")["verdict"] == "contradicted"  # the Swin variant: impulse below default
    assert agg.what_was_run["models"]["vit"] | {"params": 0} == {"model": "vit_tiny_patch16_224", "num_heads": 3,
                                                               "family": "vit", "params": 0}


def test_headline_pairs_by_seed(results):
    agg = aggregate(results, PAPER, experiment())
    head = {c["b"]: c for c in agg.headline}
    diffs = [84.5 - 82.1, 85.2 - 82.5]
    ref = sps.ttest_rel([84.5, 85.2], [82.1, 82.5]).confidence_interval(0.95)
    assert head["mimetic"]["mean"] == pytest.approx(np.mean(diffs)) and head["mimetic"]["variant"] == "vit"
    assert head["mimetic"]["low"] == pytest.approx(ref.low) and head["mimetic"]["n"] == 2
    assert head["mimetic"]["verdict"] == "supported" and head["mimetic"]["a_mean"] == pytest.approx(84.85)


def test_convergence_table_reads_epochs_and_clips_to_the_run(results):
    agg = aggregate(results, PAPER, experiment(convergence_epochs=(2, 8, 50)))
    t = table(agg, "convergence")
    assert t.columns == ["Dataset", "Arm", "val @2", "train @2", "val @8", "train @8"]
    impulse = next(r for r in t.rows if r[1] == "impulse")
    assert impulse[2].startswith(f"**{84.85 * 2 / 8:.2f} ± ")  # val top-1 after 2 of 8 epochs
    assert "clipped" in t.caption


def test_convergence_shows_the_papers_numbers_when_dataset_and_epoch_match(tmp_path):
    make_vit(tmp_path / "r", dataset="cifar10", epochs=10)
    agg = aggregate(tmp_path / "r", PAPER, experiment(datasets=("cifar10",), convergence_epochs=(10,),
                                                      filter_study=dict(filters=(), sigmas=())))
    t = table(agg, "convergence")
    assert t.columns[-1] == "paper train @10"
    assert {r[1]: r[-1] for r in t.rows} == {"default": "47.95", "mimetic": "49.05", "impulse": "54.62"}
    pub = table(agg, "vit_vs_published")
    assert any(r[2] == "mimetic" and r[5] == "91.16" for r in pub.rows)  # [SIA] main results
    assert any(r[5] == "n/p" for r in pub.rows)  # [NeurIPS] Table 1: unknown, shown as unknown
    assert not any("10% of" in r[-1] for r in pub.rows)  # subset-of-data rows are not compared


def test_ci_alpha_table_sits_beside_the_published_cells(tmp_path):
    for alpha, base in [(0.0, 0.88), (0.1, 0.90)]:
        for arm, delta in [("random", -0.02), ("mimetic", -0.01), ("impulse", 0.0)]:
            for seed in (0, 1):
                write_run(tmp_path / "r" / "ci_alpha" / "cifar10" / f"alpha{alpha}" / arm / f"seed{seed}",
                          base + delta + 0.001 * seed, alpha=alpha)
    exp = experiment(alpha=dict(datasets=("cifar10",), alphas=(0.0, 0.1), arms=("impulse", "mimetic", "random"),
                                seeds=(0, 1)), filter_study=dict(filters=(), sigmas=()))
    agg = aggregate(tmp_path / "r", PAPER, exp)
    t = table(agg, "ci_alpha")
    assert t.columns == ["Dataset", "Init", "α 0", "α 0.1"] and [r[1] for r in t.rows] == ["random", "mimetic",
                                                                                           "impulse"]
    assert t.rows[2][3] == f"90.05 ± 0.07 (n=2); paper 90.45 (Δ {90.05 - 90.45:+.2f})"  # [CI] Table 3
    assert claim(agg, "9")["verdict"] == "supported"
    assert agg.summary["ci_alpha"]["cifar10"]["0.1"]["impulse"]["n"] == 2
    assert "ci_fit" not in {t.name for t in agg.tables}  # no cell recorded an impulse fit


def test_ci_table2_reads_the_model3_grid_beside_the_published_cells_and_judges_claim_10(tmp_path):
    """Table 2's layout from results/ci_model3/<dataset>/<arm>/<qk>/<value>/seed<k>/; a missing cell is listed."""
    base = {"random": 0.60, "mimetic": 0.61, "impulse": 0.75}
    for arm, top1 in base.items():
        for qk, value in [("trained", "value"), ("trained", "novalue"), ("frozen", "value"), ("frozen", "novalue")]:
            for seed in (0, 1, 2):
                if (arm, qk, value, seed) != ("mimetic", "trained", "novalue", 2):
                    write_run(tmp_path / "r" / "ci_model3" / "cifar10" / arm / qk / value / f"seed{seed}",
                              top1 + 0.002 * seed + (0.01 if arm == "impulse" and seed == 1 else 0.0), arm=arm,
                              qk=qk, value=value)
    exp = experiment(model3=dict(datasets=("cifar10",), arms=("impulse", "mimetic", "random"),
                                 qk=("trained", "frozen"), values=("value", "novalue"), seeds=(0, 1, 2)),
                     filter_study=dict(filters=(), sigmas=()))
    agg = aggregate(tmp_path / "r", PAPER, exp)
    t = table(agg, "ci_table2")
    assert t.columns == ["Dataset", "Init", "T w/ V", "T w/o V", "NT w/ V", "NT w/o V"]
    assert [r[1] for r in t.rows] == ["random", "mimetic", "impulse"]
    assert t.rows[2][4] == "75.53 ± 0.61 (n=3); CIFAR-10 paper 77.81"  # [CI] Table 2, impulse NT w/ V
    assert t.rows[1][3].startswith("61.10 ± 0.14 (n=2)")
    assert any(m.endswith("ci_model3/cifar10/mimetic/trained/novalue/seed2") for m in agg.what_was_run["missing"])
    assert claim(agg, "10")["verdict"] == "supported" and len(claim(agg, "10")["comparisons"]) == 4
    assert agg.summary["ci_model3"]["cifar10"]["impulse"]["frozen"]["value"]["n"] == 3


def test_claim_10_at_both_readings_of_sigma(tmp_path):
    """The plan's σ decides claim 10; impulse_sens (the other reading) is a sensitivity line and both fits' target
    mass and peak are in their table; a run fitted at another σ than the plan's leaves the claim not tested."""
    base = {"random": 0.60, "mimetic": 0.61, "impulse": 0.75, "impulse_sens": 0.59}
    fit = {"impulse": [{"layer": 0, "mse": 0.0002, "target_mass": 0.995, "peak": 1.0}],
           "impulse_sens": [{"layer": 0, "mse": 0.0001, "target_mass": 0.998, "peak": 1.0}]}
    for arm, top1 in base.items():
        for seed in (0, 1, 2):
            write_run(tmp_path / "r" / "ci_model3" / "cifar10" / arm / "frozen" / "value" / f"seed{seed}",
                      top1 + 0.002 * seed, arm=arm, qk="frozen", value="value", impulse_fit=fit.get(arm))
    fits = (("impulse", {"sigma": 1.0, "steps": 1000, "lr": 0.01}),
            ("impulse_sens", {"sigma": 100.0, "steps": 10000, "lr": 0.0001}))
    exp = experiment(model3=dict(datasets=("cifar10",), arms=tuple(base), qk=("frozen",), values=("value",),
                                 seeds=(0, 1, 2), fits=fits), filter_study=dict(filters=(), sigmas=()),
                     settings=(("ci_model3.impulse_fit.sigma", 1.0), ("ci_model3.sensitivity_fit.sigma", 100.0)))
    agg = aggregate(tmp_path / "r", PAPER, exp)
    c = claim(agg, "10")
    assert c["verdict"] == "supported" and {x["a"] for x in c["comparisons"]} == {"impulse"}
    sens = [e for e in c["evidence"] if e.startswith("Sensitivity line, never deciding")]
    assert len(sens) == 1 and "impulse_sens at σ 100: contradicted" in sens[0]
    t = table(agg, "ci_model3_fit")
    assert [r[:4] for r in t.rows] == [["cifar10", "impulse", "1", "1000 steps at lr 0.01"],
                                       ["cifar10", "impulse_sens", "100", "10000 steps at lr 0.0001"]]
    assert t.rows[1][6].startswith("0.998")
    other = experiment(**{**exp.__dict__, "settings": (("ci_model3.impulse_fit.sigma", 100.0),)})
    c = claim(aggregate(tmp_path / "r", PAPER, other), "10")
    assert c["verdict"] == "not tested" and "the plan's is 1" in c["summary"]


def test_ci_table1_reads_its_forms_beside_model3_rt_and_judges_claim_15(tmp_path):
    """Table 1's layout from results/ci_table1/<dataset>/<form>/<value>/seed<k>/ and Model III's random / trained
    cells; the Table 2 table and claim 10 read Model III's rows only."""
    base = {"simple": 0.72, "simple_nope": 0.58, "model1": 0.715, "model2": 0.722}
    for seed in (0, 1, 2):
        for value in ("value", "novalue"):
            for form, top1 in base.items():
                write_run(tmp_path / "r" / "ci_table1" / "cifar10" / form / value / f"seed{seed}",
                          top1 + 0.002 * seed, arm="random", form=form, value=value)
            write_run(tmp_path / "r" / "ci_model3" / "cifar10" / "random" / "trained" / value / f"seed{seed}",
                      0.73 + 0.002 * seed, arm="random", qk="trained", value=value)
    exp = experiment(model3=dict(datasets=("cifar10",), arms=("random",), qk=("trained",), values=("value", "novalue"),
                                 seeds=(0, 1, 2), forms=("simple", "simple_nope", "model1", "model2")),
                     filter_study=dict(filters=(), sigmas=()))
    agg = aggregate(tmp_path / "r", PAPER, exp)
    t = table(agg, "ci_table1")
    assert t.columns == ["Dataset", "Values", "Simple ViT", "Simple ViT, no PE", "Model I", "Model II",
                         "Model III (RT)"]
    assert [r[1] for r in t.rows] == ["w/ V", "w/o V"]
    assert t.rows[0][2] == "72.20 ± 0.20 (n=3); CIFAR-10 paper 71.96" and t.rows[0][6].endswith("paper 73.04")
    assert t.rows[1][3].endswith("CIFAR-10 paper n/p")  # no PE, w/o V: not in Table 1
    assert [r[1] for r in table(agg, "ci_table2").rows] == ["random"]
    assert table(agg, "ci_table2").rows[0][2].startswith("73.20 ± 0.20 (n=3)")  # Model III rows only
    assert claim(agg, "15")["verdict"] != "not tested" and len(claim(agg, "15")["comparisons"]) == 6
    assert agg.summary["ci_table1"]["cifar10"]["model2"]["novalue"]["n"] == 3


def test_ci_fit_table_shows_every_layer_fit_of_the_impulse_cells_beside_the_recorded_reference(tmp_path):
    def fits(mse: float) -> list[dict]:
        return [{"layer": k, "mse": mse + 0.001 * k, "target_mass": 0.3, "peak": 1.0 - 0.01 * k} for k in range(2)]

    for alpha in (0.0, 0.1):
        for seed in (0, 1):
            cell = tmp_path / "r" / "ci_alpha" / "cifar10" / f"alpha{alpha}"
            write_run(cell / "impulse" / f"seed{seed}", 0.9, alpha=alpha, impulse_fit=fits(0.008 + 0.002 * seed))
            write_run(cell / "random" / f"seed{seed}", 0.8, alpha=alpha)
    reference = tmp_path / "ci_fit.yaml"
    reference.write_text(yaml.safe_dump({"fits": [{
        "geometry": "official", "tokens": 16, "dim": 512, "heads": 8, "head_dim": 64, "device": "cpu",
        "date": "2026-11-24", "fit": {"steps": 10000, "lr": 1e-4, "sigma": 0.1, "renorm_every": 100, "window": 5},
        "layers": [{"seed": 0, "layer": 0, "mse": 0.0018, "target_mass": 0.317, "peak": 1.0}]}]}))
    exp = experiment(alpha=dict(datasets=("cifar10",), alphas=(0.0, 0.1), arms=("impulse", "random"), seeds=(0, 1),
                                setting="7×7 tokens, D 72"), filter_study=dict(filters=(), sigmas=()))
    t = table(aggregate(tmp_path / "r", PAPER, exp, reference), "ci_fit")
    assert [r[:3] for r in t.rows] == [["this run: cifar10, α 0", "7×7 tokens, D 72", "4"],
                                       ["this run: cifar10, α 0.1", "7×7 tokens, D 72", "4"],
                                       ["bench_ci_fit.py, official (cpu, 2026-11-24)",
                                        "16×16 tokens, D 512, 8 heads × 64; 10000 steps, lr 0.0001, σ 0.1,"
                                        " renorm 100, f 5", "1"]]
    assert t.rows[0][3:] == ["0.0095 (0.0080–0.0110)", "0.300", "0.995 (0.990–1.000)"]
    assert t.rows[2][3:] == ["0.0018", "0.317", "1.000"]
    assert t.data.loc[0, "mse_max"] == pytest.approx(0.011)


def test_filter_and_gaussian_tables_sit_beside_the_published_cells(results):
    agg = aggregate(results, PAPER, experiment())
    ft = table(agg, "filter_study")
    rows = {r[0]: r for r in ft.rows}
    assert list(rows) == ["learned", "random", "impulse", "box-9", "softmax", "perm (beyond the paper)"]
    assert list(ft.data["beyond_paper"]) == [False] * 5 + [True] and "never swept" in ft.caption
    assert rows["random"][4] == "-0.50" and rows["random"][5].startswith("92.20 ([SIA] ConvMixer, cifar10)")
    assert rows["random"][6].startswith("– (no cell on this dataset)")  # never Fashion-MNIST minus CIFAR-10
    assert "effective rank k = 12" in ft.caption and "does not hold" in ft.caption
    gt = table(agg, "gaussian")
    assert gt.columns == ["σ \\ heads", "64", "4"] and [r[0] for r in gt.rows] == ["1", "0.1"]
    assert gt.rows[1][1] == "85.15 ± 0.21 (n=2); paper 91.70 on cifar10"
    on_cifar = aggregate(results, PAPER, experiment(filter_study=dict(dataset="cifar10")))  # the published dataset: a Δ
    assert table(on_cifar, "gaussian").rows[1][1].endswith("paper 91.70 on cifar10 (Δ -6.55)")


def test_filter_variants_map_to_the_published_bars_and_the_arms_beyond_the_paper():
    """code-2401's box1 is [CI]'s / [SIA]'s impulse; rand* is softmax; perm and fullperm were never swept."""
    assert [published_family(v) for v in ("box-9", "box-1", "softmax", "impulse", "learned", "learned-box-25")] == [
        "box", "impulse", "softmax", "impulse", "learned", "learned-box-25"]
    assert [beyond_paper(v) for v in ("perm", "fullperm", "learned-perm", "softmax", "gaussian-0.1-h64")] == [
        True, True, True, False, False]


def test_context_puts_the_benchmark_cnns_and_our_convmixer_beside_the_vit(results):
    t = table(aggregate(results, PAPER, experiment()), "context")
    models = [r[1] for r in t.rows]
    assert "ConvMixer, learned filters (ours, filter study)" in models
    assert any(m.startswith("2 Conv+pooling+BN") for m in models)
    cnn = next(r for r in t.rows if r[1].startswith("2 Conv+pooling (TensorFlow"))
    assert cnn[2] == "91.60" and cnn[-1] == f"{91.6 - 84.85:+.2f}" and "reference" in cnn[4]


# --- claims, as the stage judges them from the results tree -------------------------------------------------------

def test_claims_from_a_consistent_results_tree(results):
    agg = aggregate(results, PAPER, experiment())
    verdicts = {c["id"]: c["verdict"] for c in agg.claims}
    assert verdicts == {"1": "supported", "2": "not tested", "3": "not tested", "4": "supported",
                        "5a": "supported",  # random/impulse within 2 points, box and softmax clearly worse
                        "5b": "supported", "7": "not tested", "8": "not tested", "9": "not tested", "10": "not tested",
                        "11": "not tested", "12": "not tested", "13": "not tested", "14": "not tested",
                        "15": "not tested",
                        "6": "inconclusive"}  # -1.3 points, Welch over 2 and 2 runs: the interval reaches -3.97
    assert "spans -2; the claim's power at the plan's effects is" in claim(agg, "6")["summary"]
    assert any("CI [" in e for e in claim(agg, "1")["evidence"])
    assert all(c["summary"] for c in agg.claims)


def write_correct(folder: Path, correct: np.ndarray, index: np.ndarray | None = None) -> None:
    """test_correct.npz beside a run's metrics.json, and its test_top1 (the producer's schema)."""
    index = np.arange(len(correct)) if index is None else index
    np.savez(folder / "test_correct.npz", index=index, correct=correct)
    metrics = json.loads((folder / "metrics.json").read_text())
    (folder / "metrics.json").write_text(json.dumps(metrics | {"test_top1": float(correct.mean()),
                                                               "test_size": len(correct)}))


def test_per_image_correctness_gives_top1_and_intervals_over_the_test_images(results):
    rng = np.random.default_rng(0)
    for arm, seeds in VIT.items():
        for seed, top1 in seeds.items():
            write_correct(results / "train" / "fashion_mnist" / "vit" / arm / f"seed{seed}",
                          rng.permutation(np.arange(500) < round(500 * top1)))  # the same accuracy on 500 images
    agg = aggregate(results, PAPER, experiment())
    head = {c["b"]: c for c in agg.headline}
    assert head["mimetic"]["kind"] == "paired" and head["mimetic"]["images"] == 500
    assert head["mimetic"]["a_mean"] == pytest.approx(100 * np.mean([round(500 * t) / 500 for t in (0.845, 0.852)]))
    assert "test split" in table(agg, "headline").caption and agg.what_was_run["test_size"] == ["500"]
    assert "× 500 test images" in claim(agg, "1")["evidence"][0]
    other = results / "train" / "fashion_mnist" / "vit" / "default" / "seed1"
    write_correct(other, np.ones(500, bool), index=np.arange(1, 501))  # scored on other images
    with pytest.raises(PipelineError, match="default/seed1 and .* were scored on different test images"):
        aggregate(results, PAPER, experiment())


def test_sia_cells_and_the_grid_are_scored_on_the_same_test_images(results):
    """[SIA]'s cells compare with each other on the grid's test split: one scored elsewhere stops aggregate."""
    for arm, seeds in VIT.items():
        for seed in seeds:
            write_correct(results / "train" / "fashion_mnist" / "vit" / arm / f"seed{seed}", np.ones(500, bool))
    exp = experiment(sia=dict(cells=("base_cls_learned", "base_avg_sincos"), seeds=(0, 1)))
    for cell in exp.sia.cells:
        for seed in exp.sia.seeds:
            folder = results / "sia" / "fashion_mnist" / cell / f"seed{seed}"
            write_run(folder, 0.8, dataset="fashion_mnist", seed=seed, model="vit_tiny_patch16_224", family="vit")
            write_correct(folder, np.ones(500, bool))
    assert claim(aggregate(results, PAPER, exp), "14")["verdict"] != "not tested"
    write_correct(results / "sia" / "fashion_mnist" / "base_avg_sincos" / "seed1", np.ones(500, bool),
                  index=np.arange(2, 502))
    with pytest.raises(PipelineError, match="sia/fashion_mnist/base_avg_sincos/seed1 and .* different test images"):
        aggregate(results, PAPER, exp)


def test_the_plans_alpha_and_report_confidence_must_agree(results):
    with pytest.raises(PipelineError, match="report.confidence = 0.9 but paper/plan.yaml's headline alpha gives"
                                            " 0.95"):
        aggregate(results, PAPER, experiment(confidence=0.9))


def test_one_seed_is_inconclusive(tmp_path):
    make_vit(tmp_path / "r", {a: {0: v[0]} for a, v in VIT.items()})
    make_filters(tmp_path / "r", seeds=(0,))
    agg = aggregate(tmp_path / "r", PAPER, experiment(seeds=(0,), filter_study=dict(seeds=(0,))))
    for cid in ("1", "4", "5a", "5b", "6"):
        assert claim(agg, cid)["verdict"] == "inconclusive", cid
        runs = "Welch, 1 and 1 runs" if cid == "6" else "1 seed pair(s)"
        assert f"from {runs}, too few for an interval" in claim(agg, cid)["summary"], cid
    assert agg.headline[0]["verdict"] == "inconclusive"


def write_measures(results: Path, arm: str, peaks: list[float], loc: list[float]) -> None:
    """results/attention/vit/<arm>/measures.json in the attention stage's schema (pipeline.analysis.attention)."""
    layer = {"peak_agreement": peaks, "locality_mass": loc, "uniform_locality_mass": 9 / 49}
    path = results / "attention" / "vit" / arm / "measures.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"variant": "vit", "arm": arm, "model": "vit_tiny_patch16_224 with img size 28",
                                "layers": [0], "grids": {"0": [7, 7]}, "heads": {"0": 3}, "kernel_size": 3,
                                "measures": {"pseudo": {"0": layer}, "real": {"0": layer}}}))


def test_claim_7_reads_the_attention_stage_measures(results):
    write_measures(results, "impulse", [1.0, 0.99, 0.98], [0.9, 0.8, 0.8])
    write_measures(results, "mimetic", [0.6, 0.1, 0.1], [0.5, 0.5, 0.5])
    write_measures(results, "default", [0.1, 0.1, 0.1], [0.4, 0.4, 0.4])  # > 2 x 9/49 = 0.37: not flat
    c = claim(aggregate(results, PAPER, experiment()), "7")
    assert c["verdict"] == "contradicted" and "uniform map 0.184" in c["evidence"][0]
    write_measures(results, "default", [0.1, 0.1, 0.1], [0.2, 0.2, 0.2])
    assert claim(aggregate(results, PAPER, experiment()), "7")["verdict"] == "supported"


# --- what the stage writes ---------------------------------------------------------------------------------------

def test_stage_writes_tables_claims_and_dvc_metrics(results, repo_root):
    params = load_params(repo_root / "params.yaml", ["seeds=[0, 1]", "filter_study.seeds=[0, 1]",
                                                     "filter_study.filters=[learned, random, impulse, box-9]"])
    assert main(params, Namespace(results=str(results), paper=str(PAPER))) == 0
    out = results / "tables"
    manifest = json.loads((out / "tables.json").read_text())
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [e["csv"] for e in manifest] + ["tables.json", "claims.json", "what_was_run.json"])
    assert [e["name"] for e in manifest][:2] == ["headline", "vit_top1"]
    summary = json.loads((results / "summary.json").read_text())
    assert summary["fashion_mnist"]["vit"]["impulse"]["top1_mean"] == pytest.approx(0.8485)
    assert summary["filter_study"]["learned"]["n"] == 2
    claims = json.loads((out / "claims.json").read_text())
    assert claims["verdicts"] == ["supported", "contradicted", "inconclusive", "not tested"]
    assert {c["verdict"] for c in claims["claims"]} <= set(claims["verdicts"])
    assert all(c["verdict"] in claims["verdicts"] for c in claims["claims"] for c in c["comparisons"])
    ran = json.loads((out / "what_was_run.json").read_text())
    assert ran["dataset_facts"] == [{"name": "fashion_mnist", "citation": "Xiao, Rasul, Vollgraf 2017,"
                                     " arXiv:1708.07747", "licence": "MIT",
                                     "homepage": "https://github.com/zalandoresearch/fashion-mnist"}]
    csv = (out / "vit_top1.csv").read_text()
    assert "84.8500" in csv  # numbers in percent
    assert not list(results.glob("*.partial"))


def test_the_headline_metrics_are_keyed_by_role_so_another_init_shares_their_columns(results):
    write_run(results / "train" / "fashion_mnist" / "vit" / "timm" / "seed0", 0.83, dataset="fashion_mnist",
              arm="timm", seed=0, variant="vit", model="vit_tiny_patch16_224", family="vit", num_heads=3)
    write_run(results / "train" / "fashion_mnist" / "vit" / "timm" / "seed1", 0.84, dataset="fashion_mnist",
              arm="timm", seed=1, variant="vit", model="vit_tiny_patch16_224", family="vit", num_heads=3)
    impulse = aggregate(results, PAPER, experiment()).summary["headline"]["fashion_mnist"]["vit"]
    timm = aggregate(results, PAPER, experiment(arms=("timm", "default", "mimetic"))).summary["headline"][
        "fashion_mnist"]["vit"]
    assert list(impulse) == list(timm) == ["method", "baseline1", "method_vs_baseline1", "baseline2",
                                           "method_vs_baseline2"]
    assert (impulse["method"]["arm"], timm["method"]["arm"], timm["baseline2"]["arm"]) == ("impulse", "timm",
                                                                                          "mimetic")
    vs = impulse["method_vs_baseline1"]  # impulse - default, in points, paired over the 2 seeds
    assert vs["diff_pts"] == pytest.approx(100 * (0.845 + 0.852 - 0.800 - 0.806) / 2)
    assert vs["low_pts"] < vs["diff_pts"] < vs["high_pts"] and vs["pairs"] == 2 and vs["verdict"] == "supported"
    assert impulse["method"]["top1_mean_pct"] == pytest.approx(84.85)


def test_std_of_one_run_is_null_in_the_metrics(tmp_path):
    make_vit(tmp_path / "r", {a: {0: v[0]} for a, v in VIT.items()})
    agg = aggregate(tmp_path / "r", PAPER, experiment(seeds=(0,), filter_study=dict(filters=(), sigmas=())))
    write_aggregate(agg, tmp_path / "r" / "tables", tmp_path / "r" / "summary.json")
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["fashion_mnist"]["vit"]["default"] == {"top1_mean": 0.8, "top1_std": None, "n": 1}


def test_a_corrupt_metrics_file_names_itself(results):
    bad = results / "train" / "fashion_mnist" / "vit" / "impulse" / "seed0" / "metrics.json"
    bad.write_text("{not json")
    with pytest.raises(PipelineError, match="impulse/seed0/metrics.json: not valid JSON"):
        aggregate(results, PAPER, experiment())


def test_the_training_configurations_table_and_claim_11_read_results_train_config(tmp_path):
    make_vit(tmp_path / "r")
    model, family, heads = MODELS["vit"]
    for arm, per_seed in VIT.items():
        for seed, top1 in per_seed.items():
            write_run(tmp_path / "r" / "train_config" / "fashion_mnist" / "vit" / "lr_half" / arm / f"seed{seed}",
                      top1 - 0.01, dataset="fashion_mnist", arm=arm, seed=seed, variant="vit", model=model,
                      family=family, num_heads=heads, train_config="lr_half")
    agg = aggregate(tmp_path / "r", PAPER, experiment(grid=dict(configs=("lr_half", "randaug")),
                                                      filter_study=dict(filters=(), sigmas=())))
    t = table(agg, "train_configs")
    assert t.columns == ["Dataset", "Variant", "Configuration", "impulse", "default", "mimetic"]
    assert [r[2] for r in t.rows] == ["train", "lr_half"]
    assert t.rows[1][3].startswith(f"{100 * (VIT['impulse'][0] + VIT['impulse'][1]) / 2 - 1:.2f} ± ")
    assert [c["label"] for c in claim(agg, "11")["comparisons"]] == ["fashion_mnist, vit, train",
                                                                     "fashion_mnist, vit, lr_half"]
    assert any(m.endswith("train_config/fashion_mnist/vit/randaug/mimetic/seed1")
               for m in agg.what_was_run["missing"])


def test_a_newly_declared_stage_is_read_into_its_own_frame(tmp_path, monkeypatch):
    """The reader takes its stages from the declarations: a stage declared like `train` (a copy named `toy`, its rows
    joining a frame `toy`) is read with nothing added to the analysis."""
    import pipeline.analysis.runs as runs
    from pipeline.experiments import by_name, stages

    toy = dataclasses.replace(by_name("train"), name="toy", outs="results/toy/{dataset}/{arm}/seed{seed}",
                              frame="toy")
    monkeypatch.setattr(runs, "stages", lambda: [*stages(), toy])
    write_run(tmp_path / "toy" / "fashion_mnist" / "impulse" / "seed0", 0.5, model="vit_tiny_patch16_224")
    frames, missing = read_frames(tmp_path, planned_cells(planning(experiment())))
    assert frames["toy"][["arm", "seed", "top1", "model"]].values.tolist() == [["impulse", 0, 0.5,
                                                                                  "vit_tiny_patch16_224"]]
    assert str(tmp_path / "toy" / "fashion_mnist" / "default" / "seed0") in missing


def test_a_table_whose_runs_mix_precision_or_data_path_is_refused(results):
    """One cell resumed on another GPU kind (fp16 instead of bf16) or sent to timm's per-image augmentation for lack
    of memory would put that difference into the comparison: aggregate names the runs instead of judging them."""
    exp = experiment()
    for arm, seeds in VIT.items():
        for seed, top1 in seeds.items():
            write_run(results / "train" / "fashion_mnist" / "vit" / arm / f"seed{seed}", top1, dataset="fashion_mnist",
                      arm=arm, seed=seed, variant="vit", model="vit_tiny_patch16_224", family="vit", num_heads=3,
                      amp_dtype="bfloat16", data_path="device")
    assert claim(aggregate(results, PAPER, exp), "1")["verdict"] != "not tested"
    odd = results / "train" / "fashion_mnist" / "vit" / "mimetic" / "seed1"
    write_run(odd, 0.825, dataset="fashion_mnist", arm="mimetic", seed=1, variant="vit", model="vit_tiny_patch16_224",
              family="vit", num_heads=3, amp_dtype="float16", data_path="device")
    with pytest.raises(PipelineError, match=r"vit runs of fashion_mnist mix their precision \(.*seed0 ran with"
                                            r" amp_dtype bfloat16; .*mimetic/seed1 ran with amp_dtype float16\)"):
        aggregate(results, PAPER, exp)
    write_run(odd, 0.825, dataset="fashion_mnist", arm="mimetic", seed=1, variant="vit", model="vit_tiny_patch16_224",
              family="vit", num_heads=3, amp_dtype="bfloat16", data_path="loader")
    with pytest.raises(PipelineError, match="mix their data path"):
        aggregate(results, PAPER, exp)


def test_training_configurations_may_differ_in_data_path_but_not_within_one():
    """Claim 11 compares arms within one training configuration, and RandAugment runs timm's per-image PIL path
    where the others take the tensor path: the configs table is checked per configuration, not across them."""
    import pandas as pd

    from pipeline.analysis.aggregate import check_computed_alike

    def row(config, arm, path):
        return {"dataset": "fashion_mnist", "config": config, "arm": arm, "amp_dtype": "float32", "data_path": path,
                "folder": f"results/train_config/fashion_mnist/vit3/{config}/{arm}/seed70"}

    rows = [row("lr_half", a, "tensor") for a in ("impulse", "default")]
    rows += [row("randaug", a, "pil") for a in ("impulse", "default")]
    check_computed_alike({"configs": pd.DataFrame(rows)})
    rows[3]["data_path"] = "tensor"  # one randaug run on another path: its comparison would measure the path
    with pytest.raises(PipelineError, match=r"configs runs of fashion_mnist, randaug mix their data path"):
        check_computed_alike({"configs": pd.DataFrame(rows)})
    with pytest.raises(PipelineError, match="vit runs of fashion_mnist mix their data path"):  # no grouping there
        check_computed_alike({"vit": pd.DataFrame(rows).drop(columns="config")})


def test_the_training_table_says_which_runs_trained(results):
    agg = aggregate(results, PAPER, experiment())
    rows = {r[1]: r for r in table(agg, "training").rows}
    assert rows["fashion_mnist, vit, impulse"][2] == "2" and rows["fashion_mnist, vit, impulse"][5] == "2 still rising"

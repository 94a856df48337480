"""The weight-selection block ([NeurIPS] Table 4; params `weight_selection`, stages pretrain@, select_finetune@,
ws_scratch@): validation, a tiny pretrain -> select -> fine-tune, the stage's wiring of the selection, and that a
fine-tune cell depends on its own teacher only."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from datasets_fixtures import tiny_dataset
from dvc.repo import Repo
from test_aggregate import PAPER, experiment, make_vit, write_run
from test_claims import ORDERED, evidence, judged

from pipeline.__main__ import main
from pipeline.analysis.aggregate import aggregate
from pipeline.data.meta import dataset_meta
from pipeline.errors import PipelineError
from pipeline.experiments import by_name
from pipeline.method.weight_selection import select_weights
from pipeline.params import load_params
from pipeline.resolve import resolved
from pipeline.training import builders
from pipeline.training.select_finetune import build_run

ROOT = Path(__file__).resolve().parent.parent

TINY = ["models={vit: {name: vit_tiny_patch16_224, img_size: 12, patch_size: 4, embed_dim: 12, depth: 1,"
        " num_heads: 3, drop_path_rate: 0.0}}",
        "train={epochs: 1, batch_size: 16, warmup_epochs: 0, scale: [1.0, 1.0], hflip: 0.0}",
        "data.train_subset=0", "data.val_subset=0", "datasets=[fashion_mnist, digits]",
        "weight_selection={teachers: {small: {arm: impulse, train_size: 48}, large: {arm: default, train_size: 0}},"
        " teacher: {name: vit_tiny_patch16_224, img_size: 12, patch_size: 4, embed_dim: 24, depth: 2, num_heads: 3,"
        " drop_path_rate: 0.0}, pretrain_dataset: fashion_mnist, pretrain: {epochs: 2}, student: vit,"
        " datasets: [digits], finetune: {lr: 0.002}, seeds: [0], scratch: [default]}"]


def tiny_digits(root: Path) -> None:
    """A 4-class, 8 x 8 stand-in for `digits` (48 + 24 images): other classes than the teacher's 3."""
    tiny_dataset(root, "digits", {"train": 48, "val": 24}, list("abcd"), seed=1, noise=60, step=50)


@pytest.mark.parametrize("override, message", [
    ("weight_selection.teachers={bad-name: {arm: impulse}}", "weight_selection.teachers: name 'bad-name'"),
    ("weight_selection.teachers={scratch: {arm: impulse}}", "may not be 'scratch'"),
    ("weight_selection.teachers={t: {arm: nope}}", "weight_selection.teachers.t.arm = 'nope'"),
    ("weight_selection.teachers={t: {arm: impulse, train_size: -1}}", "weight_selection.teachers.t.train_size = -1"),
    ("weight_selection.teachers={t: {arm: impulse, train_size: 70000}}", "exceeds the 60000 training images"),
    ("weight_selection.datasets=[digits]", "dataset 'digits' is neither in datasets nor in weight_selection.fetch"),
    ("weight_selection.fetch=[fashion_mnist]", "weight_selection.fetch: 'fashion_mnist' is in datasets already"),
    ("weight_selection.pretrain={epochs: 0}", "weight_selection.pretrain.epochs = 0"),
    ("weight_selection.finetune={lrr: 1}", "weight_selection.finetune.lrr: unknown key"),
    ("weight_selection.teacher.num_heads=5", "weight_selection.teacher.num_heads = 5 does not divide"),
    ("weight_selection.scratch=[nope]", "weight_selection.scratch: unknown value 'nope'"),
])
def test_bad_weight_selection_params_name_their_key(params_file, override, message):
    with pytest.raises(PipelineError, match=message):
        load_params(params_file, [override])


def test_the_student_must_be_a_grid_variant_when_the_block_is_on(params_file):
    with pytest.raises(PipelineError, match="weight_selection.student = 'vitt': not a key of `models`"):
        load_params(params_file, ["weight_selection.student=vitt", "weight_selection.fetch=[digits]",
                                  "weight_selection.datasets=[digits]"])
    assert load_params(params_file, ["weight_selection.student=vitt"]).weight_selection.enabled is False


def test_pretrain_select_finetune_and_scratch(workdir, params_file, capsys):
    tiny_digits(workdir)
    argv = ["--params", str(params_file), *[w for o in TINY for w in ("--set", o)]]
    assert main([*argv, "select-finetune", "digits", "small", "0"]) == 2
    assert "no pretrained teacher" in capsys.readouterr().err
    assert main([*argv, "pretrain", "small"]) == 0
    teacher = workdir / "results" / "pretrain" / "small"
    m = json.loads((teacher / "metrics.json").read_text())
    assert (m["teacher"], m["arm"], m["epochs"], m["train_size"], m["dataset"]) == ("small", "impulse", 2, 48,
                                                                                      "fashion_mnist")
    assert main([*argv, "select-finetune", "digits", "small", "0"]) == 0
    out = workdir / "results" / "weight_selection" / "digits" / "small" / "seed0"
    m = json.loads((out / "metrics.json").read_text())
    assert (m["teacher"], m["teacher_arm"], m["teacher_train_size"], m["variant"], m["epochs"]) == (
        "small", "impulse", 48, "vit", 1)
    config = json.loads((out / "config.json").read_text())
    assert config["train"]["lr"] == 0.002 and len(m["teacher_weights"]) == 16
    assert main([*argv, "ws-scratch", "digits", "default", "0"]) == 0
    m = json.loads((workdir / "results/weight_selection/digits/scratch/default/seed0/metrics.json").read_text())
    assert (m["arm"], m["variant"]) == ("default", "vit")
    # the student, before fine-tuning, holds the teacher's selected tensors and its own head
    params = load_params(params_file, TINY)
    meta = dataset_meta("data", "digits")
    stage = by_name("select_finetune")
    config = stage.resolve(params, {"dataset": "digits", "teacher": "small", "seed": "0"})
    student = build_run(config).build(meta, "cpu")
    state = torch.load(teacher / "model.pt", weights_only=True)
    fresh = builders.timm_model(params.models["vit"], meta).state_dict()
    want = select_weights(state, fresh)
    got = student.state_dict()
    assert got["head.weight"].shape == (4, 12) and state["head.weight"].shape == (3, 24)
    for key, value in got.items():
        if not key.startswith("head."):
            torch.testing.assert_close(value, want[key], msg=key)
    torch.manual_seed(0)
    assert torch.equal(got["head.weight"], builders.timm_model(params.models["vit"], meta).head.weight)
    # a teacher folder that no longer matches its params entry is stale
    stale = load_params(params_file, [*TINY, "weight_selection.teachers.small.arm=default"])
    with pytest.raises(PipelineError, match="re-run `dvc repro pretrain@small`"):
        build_run(stage.resolve(stale, {"dataset": "digits", "teacher": "small", "seed": "0"}))


def configs(teachers: dict) -> dict[str, dict]:
    """configs/ as the configs stage writes it for the repository's params.yaml with these teachers on digits."""
    params = load_params(ROOT / "params.yaml", [
        f"weight_selection.teachers={json.dumps(teachers)}", "weight_selection.datasets=[digits]",
        "weight_selection.fetch=[digits]"])
    return resolved(params)


def test_a_fine_tune_cell_depends_on_its_own_teacher_only():
    one = configs({"a": {"arm": "impulse", "train_size": 500}})
    two = configs({"a": {"arm": "impulse", "train_size": 500}, "b": {"arm": "default", "train_size": 2000}})
    added = set(two) - set(one)
    assert {f for f in added if f.startswith("pretrain/")} == {"pretrain/b.json"}
    assert all("-b-" in f for f in added if f.startswith("select_finetune/"))
    assert not any(f.startswith("ws_scratch/") for f in added)
    assert all(two[f] == config for f, config in one.items() if f != "runtime.json")  # nothing else re-runs
    cell = two["select_finetune/digits-a-0.json"]
    assert cell["teacher"] == {"name": "a", "arm": "impulse", "train_size": 500}
    deps = stage_deps("select_finetune@digits-a-0")
    assert "results/pretrain/a" in deps and "results/pretrain/b" not in deps
    assert not any(f.split("/")[0] in ("pretrain", "select_finetune") for f in configs({}))


def stage_deps(name: str) -> list[str]:
    """The deps DVC resolves for stage `name` of the repository's dvc.yaml with teachers a and b on digits."""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(ROOT / "dvc.yaml", tmp)
        params = yaml.safe_load((ROOT / "params.yaml").read_text())
        params["weight_selection"] |= {"teachers": {"a": {"arm": "impulse"}, "b": {"arm": "default"}},
                                       "datasets": ["digits"], "fetch": ["digits"]}
        (Path(tmp) / "params.yaml").write_text(yaml.safe_dump(params))
        with Repo.init(tmp, no_scm=True) as repo:
            stage = next(s for s in repo.index.stages if s.name == name)
            return [Path(d.fs_path).relative_to(tmp).as_posix() for d in stage.deps]


# --- claim 12 and the table, on synthetic runs ----------------------------------------------------------------------

def ws_frame(top1: dict, dataset: str = "digits") -> pd.DataFrame:
    """{source: {seed: top-1}} -> rows of the weight-selection frame (`runs.read_frames`' `weight_selection`)."""
    return pd.DataFrame([{"dataset": dataset, "source": source, "seed": seed, "top1": v, "correct": None,
                          "variant": "vit", "teacher_arm": source.split("_")[0], "teacher_train_size": 500,
                          "pretrain_dataset": "fashion_mnist"}
                         for source, seeds in top1.items() for seed, v in seeds.items()])


SMALL = {0: 0.900, 1: 0.905, 2: 0.902}
WS = {"impulse_small": SMALL, "default_large": {s: v - 0.002 for s, v in SMALL.items()},
      "scratch:default": {s: v - 0.10 for s, v in SMALL.items()}}


def test_claim_12_is_not_worse_within_a_point_per_dataset():
    ev = evidence({("cifar10", "vit"): ORDERED})
    c = judged(ev, "12")
    assert c["verdict"] == "not tested" and "weight_selection.teachers" in c["evidence"][0]
    c = judged(evidence({("cifar10", "vit"): ORDERED}, weight_selection=ws_frame(WS)), "12")
    assert c["verdict"] == "supported"
    assert [(x["label"], x["a"], x["b"], x["needs"]) for x in c["comparisons"]] == [
        ("digits", "impulse_small", "default_large", "> -1")]
    assert any("scratch:default" in line and "not judged" in line for line in c["evidence"])
    transfer = [line for line in c["evidence"] if "what selection transferred" in line]
    assert len(transfer) == 1 and transfer[0].startswith("digits: what selection transferred: default_large −"
                                                         " scratch:default +9.80 [")
    worse = dict(WS) | {"impulse_small": {s: v - 0.05 for s, v in SMALL.items()}}  # 5 points below: contradicted
    assert judged(evidence({("cifar10", "vit"): ORDERED}, weight_selection=ws_frame(worse)), "12")["verdict"] == \
        "contradicted"


def test_the_aggregate_reads_the_weight_selection_runs_into_its_table(tmp_path):
    results = tmp_path / "results"
    make_vit(results)
    for source, seeds in WS.items():
        for seed, v in seeds.items():
            folder = (results / "weight_selection" / "digits" / ("scratch/default" if source.startswith("scratch")
                                                                 else source) / f"seed{seed}")
            extra = {} if source.startswith("scratch") else {
                "teacher": source, "teacher_arm": source.split("_")[0], "teacher_train_size": 500 if "small" in
                source else 2000, "pretrain_dataset": "fashion_mnist"}
            write_run(folder, v, variant="vit", **extra)
    exp = experiment(weight_selection=dict(datasets=("digits",), teachers=("impulse_small", "default_large"),
                                           scratch=("default", "impulse"), seeds=(0, 1, 2)))
    agg = aggregate(results, PAPER, exp)
    t = next(t for t in agg.tables if t.name == "weight_selection")
    assert t.columns == ["Source", "Student init", "digits"]
    assert [r[:2] for r in t.rows] == [
        ["impulse_small", "selected from impulse-init teacher, 500 fashion_mnist images"],
        ["default_large", "selected from default-init teacher, 2,000 fashion_mnist images"],
        ["scratch:default", "from scratch, default init"]]
    assert t.rows[0][2].startswith("90.23 ± 0.25")
    assert sum("scratch/impulse" in m for m in agg.what_was_run["missing"]) == 3
    assert agg.what_was_run["runs"]["weight_selection"] == 9
    assert agg.what_was_run["weight_selection"]["teachers"] == ["impulse_small", "default_large"]
    c = next(c for c in agg.claims if c["id"] == "12")
    assert c["verdict"] in ("supported", "inconclusive") and c["comparisons"][0]["label"] == "digits"
    off = aggregate(results, PAPER, experiment())
    assert not any(t.name == "weight_selection" for t in off.tables)
    assert next(c for c in off.claims if c["id"] == "12")["verdict"] == "not tested"


def test_check_lists_the_block_and_refuses_a_teacher_too_small_to_select_from(workdir, params_file, capsys):
    tiny_digits(workdir)
    argv = ["--params", str(params_file), *[w for o in TINY for w in ("--set", o)]]
    assert main([*argv, "check"]) == 0
    out = capsys.readouterr().out
    assert "weight-selection runs: 2 teacher(s) on fashion_mnist (small (impulse, 48 images), large (default, all" \
           " images)), 2 epochs each; 2 fine-tune = 1 dataset(s) x 2 teacher(s) x 1 seed(s) and 1 scratch" in out
    assert main([*argv, "--set", "weight_selection.teacher.embed_dim=6", "check"]) == 2
    err = capsys.readouterr().err
    assert "weight_selection.teacher -> models.vit on digits" in err and "cannot be selected from 6" in err

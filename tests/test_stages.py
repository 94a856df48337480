"""dvc.yaml is what the declarations write, its cells are the ones they plan, and a cell re-runs exactly when its
resolved configuration, data or code changes (`pipeline.stages`, `pipeline.experiments`, `pipeline.resolve`)."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml
from dvc.repo import Repo
from workspace import copy_built, set_params, sh

from pipeline.experiments import stages
from pipeline.params import load_params
from pipeline.resolve import resolved
from pipeline.stages import DVC_YAML, render

ROOT = Path(__file__).resolve().parent.parent
ALL_ON = ["ci_alpha.datasets=[fashion_mnist]", "ci_model3.datasets=[fashion_mnist]",
          "filter_study.gaussian_sigmas=[1.0, 0.1]", "train_configs={lr_half: {lr: 0.0005}}",
          "weight_selection.teachers={small: {arm: impulse, train_size: 500}}", "weight_selection.datasets=[digits]",
          "weight_selection.fetch=[digits]",
          "sia.bases=[avg_sincos, cls_learned]", "sia.fits=[PP, GP_layer]", "models.vit2={name: vit_tiny_patch16_224}"]


def test_dvc_yaml_is_what_the_declarations_write():
    assert DVC_YAML.read_text() == render(), "dvc.yaml is stale: run `python -m pipeline dvc-yaml`"


def test_the_analysis_stages_depend_on_every_declared_experiments_results():
    """aggregate waits for and re-runs on every stage whose cells join a frame, figures on the ones it draws: the
    deps come from the declarations, so a new experiment's results are among them without an edit here."""
    dvc = yaml.safe_load(DVC_YAML.read_text())["stages"]
    framed = {s.results_root for s in stages() if s.frame}
    assert framed <= set(dvc["aggregate"]["deps"]) and "results/pretrain" not in dvc["aggregate"]["deps"]
    assert {s.results_root for s in stages() if s.figures} <= set(dvc["figures"]["deps"])
    assert "results/sia" not in dvc["figures"]["deps"]


def test_a_frame_is_its_experiments_own_unless_another_declares_it_joins():
    """A copied module that kept the filter study's frame would feed claims 5a and 6 with its cells: refused, with
    the two ways out; declared in JOINS, accepted."""
    from types import SimpleNamespace

    from pipeline.errors import PipelineError
    from pipeline.experiments import check_frames, experiment_modules
    from pipeline.experiments import filter_study as original

    check_frames()  # the registry as it is
    copy = SimpleNamespace(__name__="pipeline.experiments.my_study",
                           STAGES=[dataclasses.replace(original.STAGES[0], name="my_study")])
    with pytest.raises(PipelineError, match=r"experiment 'my_study': stage 'my_study' feeds the analysis frame"
                                            r" 'filters' of experiment 'filter_study'.*JOINS = \('filters',\)"):
        check_frames([*experiment_modules(), copy])
    check_frames([*experiment_modules(), SimpleNamespace(**vars(copy), JOINS=("filters",))])
    check_frames([*experiment_modules(), SimpleNamespace(
        __name__=copy.__name__, STAGES=[dataclasses.replace(original.STAGES[0], name="my_study", frame="mine")])])


def dvc_stage_names(overrides: list[str]) -> set[str]:
    """The stage names DVC expands dvc.yaml into for params.yaml with `overrides`."""
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    for text in overrides:
        key, value = text.split("=", 1)
        *parents, leaf = key.split(".")
        node = data
        for name in parents:
            node = node[name]
        node[leaf] = yaml.safe_load(value)
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(ROOT / "dvc.yaml", tmp)
        (Path(tmp) / "params.yaml").write_text(yaml.safe_dump(data))
        with Repo.init(tmp, no_scm=True) as repo:
            return {s.name for s in repo.index.stages}


def test_the_declared_cells_are_dvcs_cells_and_each_has_its_configuration():
    params = load_params(ROOT / "params.yaml", ALL_ON)
    declared = {f"{s.name}@{s.cell_id(c)}" for s in stages() for c in s.cells(params)}
    names = dvc_stage_names(ALL_ON)
    assert declared == {n for n in names if n.split("@")[0] in {s.name for s in stages()}}
    files = resolved(params)
    stamps = {f"code/{s.runtime}.json" for s in stages()}
    assert {f"{n.split('@')[0]}/{n.split('@')[1]}.json" for n in declared} == set(files) - {"runtime.json"} - stamps
    assert all(files[f]["results"].startswith("results/") for f in set(files) - {"runtime.json"} - stamps)


# --- on the built smoke project: what each kind of edit leaves stale -------------------------------------------------

CELLS = ("train@", "filter_study@", "filter_gaussian@")


def stale_cells(repo: Path) -> set[str]:
    """The training cells `dvc status` lists after the configs stage ran (as `python -m pipeline repro` runs it)."""
    sh(repo, "dvc", "repro", "--single-item", "configs")
    out = sh(repo, "dvc", "status", "--json")
    return {name.split(":")[-1] for name in json.loads(out.strip().splitlines()[-1])
            if name.split(":")[-1].startswith(CELLS)}


@pytest.fixture
def built(smoke_built, tmp_path) -> Path:
    return copy_built(smoke_built[0], tmp_path / "repo")


def test_comments_and_messages_outside_a_cells_code_leave_every_cell_up_to_date(built):
    for module in ("config.py", "__main__.py", "entry.py", "vocabulary.py", "datasets.py", "closure.py",
                   "training/launch.py", "cell.py", "experiments/grid.py", "resolve.py"):
        with open(built / "pipeline" / module, "a") as f:
            f.write("\n# a comment\nMESSAGE = 'a message'\n")
    assert stale_cells(built) == set()


def test_a_value_some_cells_read_re_runs_exactly_those(built):
    set_params(built / "params.yaml", {"mimetic.alpha_qk": 0.5})
    assert stale_cells(built) == {"train@fashion_mnist-vit-mimetic-0"}


def test_a_new_experiments_section_adds_cells_and_leaves_the_others_up_to_date(built):
    set_params(built / "params.yaml", {"sia.bases": ["avg_sincos"], "sia.seeds": [0]})
    sh(built, "dvc", "repro", "--single-item", "configs")
    status = json.loads(sh(built, "dvc", "status", "--json").strip().splitlines()[-1])
    assert {n for n in status if n.startswith(CELLS)} == set() and "sia_base@fashion_mnist-avg_sincos-0" in status


def test_a_comment_or_docstring_in_the_engine_re_runs_nothing_and_a_changed_constant_every_cell(built):
    """The code stamp digests behaviour (`closure.source_digest`), not text: the engine's comments and docstrings
    can change without re-training the grid; any change of what it runs re-trains every cell it runs in."""
    engine = built / "pipeline" / "training" / "engine.py"
    text = engine.read_text()
    doc = text.split('"""', 2)[1]
    engine.write_text(text.replace(doc, doc + " A docstring edit.", 1) + "\n# a comment\n")
    assert stale_cells(built) == set()
    with open(engine, "a") as f:
        f.write("\nA_CONSTANT = 1\n")
    every = {"train@fashion_mnist-vit-impulse-0", "train@fashion_mnist-vit-default-0",
             "train@fashion_mnist-vit-mimetic-0", "filter_study@learned-0", "filter_gaussian@1.0-4-0"}
    dry = sh(built, "python", "-m", "pipeline", "repro", "--dry")  # before the configs stage writes the stamps
    assert {n for n in re.findall(r"^  (\S+): stale;", dry, re.MULTILINE) if n.startswith(CELLS)} == every
    assert stale_cells(built) == every


def test_a_kernel_that_gives_the_heads_the_same_offsets_resolves_equal_and_check_says_why(capsys):
    """code-2505's order takes a larger kernel's other offsets only after the 3x3 order's nine: 3 heads get the same
    offsets from 5x5 as from 3x3, so their cells' configurations are byte for byte the same (nothing re-runs); 10 heads
    do not, and `impulse.offsets: random` draws from the whole kernel, so there it changes the cells."""
    from pipeline.check import resolved_lines
    from pipeline.method.names import official_offsets, smallest_kernel

    assert official_offsets(3, 5) == official_offsets(3, 3) and smallest_kernel(3, 5) == 3
    assert official_offsets(10, 5) != official_offsets(10, 3) and smallest_kernel(10, 5) == 5
    base = resolved(load_params())
    assert resolved(load_params(overrides=["impulse.kernel_size=5"])) == base
    assert "resolve to kernel_size 3" in " ".join(resolved_lines(load_params(overrides=["impulse.kernel_size=5"])))
    assert not resolved_lines(load_params())
    wide = ["models.vit.embed_dim=80", "models.vit.num_heads=10"]
    narrow = resolved(load_params(overrides=wide))
    changed = {path for path, content in resolved(load_params(overrides=[*wide, "impulse.kernel_size=5"])).items()
               if content != narrow.get(path)}
    assert changed and all("-impulse-" in path or "/impulse" in path for path in changed), sorted(changed)[:3]
    drawn = ["impulse.offsets=random"]
    assert resolved(load_params(overrides=[*drawn, "impulse.kernel_size=5"])) != resolved(load_params(overrides=drawn))

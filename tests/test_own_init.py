"""Your own init as an arm (params `inits`, docs/own-init.md): a toy 'box' init in its own module, written into the
test's working directory, declared in params, checked, trained through the grid's cells beside two built-in
baselines, aggregated and reported; its mistakes stopped with one message naming the key; and its cells re-run
when its code changes what it computes, and only then."""

from __future__ import annotations

import json
import subprocess
from argparse import Namespace
from pathlib import Path

import pytest
import torch

from pipeline.errors import PipelineError
from pipeline.params import load_params

ROOT = Path(__file__).resolve().parent.parent

#: the toy init: attention-free (every head's q and k weights at 0: each token attends to all alike, a box over the
#: grid), the value weights times `gain`, and the position embedding redrawn from the cell's generator
BOX = '''"""A toy init of a researcher's own: attention-free heads."""
import torch

from box_helpers import GAIN


def local_box(model, generator, gain=GAIN):
    """q and k rows of every qkv weight at 0, v rows times `gain`, pos_embed redrawn."""
    for block in model.blocks:
        qkv = block.attn.qkv.weight
        width = qkv.shape[0] // 3
        qkv[: 2 * width] = 0
        qkv[2 * width:] *= gain
    model.pos_embed.copy_(torch.randn(model.pos_embed.shape, generator=generator) * 0.02)


NOT_A_FUNCTION = 3


def broken(model, generator):
    model.blocks[0].attn.proj.weight[0, 0] = float("nan")
'''
HELPERS = "GAIN = 1.0  # the value weights' gain\n"
#: the grid's smallest model, on the `workdir` fixture's 8 x 8 images, 2 epochs of 64 images
TINY = ["models={vit: {name: vit_tiny_patch16_224, img_size: 8, patch_size: 4, embed_dim: 24, depth: 1,"
        " num_heads: 3, drop_path_rate: 0.0}}", "seeds=[0]", "train.epochs=2", "train.batch_size=16",
        "train.warmup_epochs=0", "data.train_subset=0", "data.val_subset=0", "report.convergence_epochs=[1, 2]"]
OWN = ["init=local_box", "+inits.local_box=my_inits:local_box"]


@pytest.fixture
def own(workdir) -> Path:
    """The `workdir` fixture (a tiny Fashion-MNIST-shaped dataset, the working directory) with params.yaml and the
    toy init's module and the helper it imports."""
    (workdir / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    (workdir / "my_inits.py").write_text(BOX)
    (workdir / "box_helpers.py").write_text(HELPERS)
    return workdir


def params(*overrides: str):
    return load_params("params.yaml", [*TINY, *OWN, *overrides])


# --- the arm in params, check and the grid -------------------------------------------------------------------------

def test_your_init_is_an_arm_wherever_a_built_in_one_is(own, capsys):
    from pipeline.__main__ import main
    from pipeline.experiments import by_name

    p = params("+inits.boxed={function: 'my_inits:local_box', options: {gain: 0.5}}", "baselines=[default, boxed]")
    assert p.arms == ["local_box", "default", "boxed"] and p.method_options("boxed") == {"gain": 0.5}
    cells = {by_name("train").cell_id(c) for c in by_name("train").cells(p)}
    assert cells == {"fashion_mnist-vit-local_box-0", "fashion_mnist-vit-default-0", "fashion_mnist-vit-boxed-0"}
    assert main(["--params", "params.yaml", *(f"--set={o}" for o in [*TINY, *OWN]), "check"]) == 0
    out = capsys.readouterr().out
    assert "method under study: local_box; baselines: default, mimetic" in out
    assert ("your own init local_box (method under study): my_inits:local_box, options none; its cells re-run when"
            " box_helpers.py, my_inits.py change(s) what they compute") in out
    assert "train: 3 = 1 dataset x 1 variant x 3 arm x 1 seed" in out


def test_check_says_to_git_add_your_init_when_git_does_not_track_it(own, capsys):
    """An experiment's commit (or `dvc exp run`'s) holds params.yaml and dvc.lock; your init's code travels with it
    only when git tracks it."""
    from pipeline.__main__ import main

    def run_check() -> str:
        assert main(["--params", "params.yaml", *(f"--set={o}" for o in [*TINY, *OWN]), "check"]) == 0
        return capsys.readouterr().out

    assert "not tracked by git" not in run_check()  # no repository: nothing to say
    subprocess.run(["git", "init", "-q"], check=True)
    assert ("warning: box_helpers.py, my_inits.py (your own init local_box) is not tracked by git, so a commit or `dvc"
            " exp run` of this experiment would name code it does not hold: `git add box_helpers.py my_inits.py`"
            in run_check())
    subprocess.run(["git", "add", "my_inits.py", "box_helpers.py"], check=True)
    assert "not tracked by git" not in run_check()


@pytest.mark.parametrize("overrides, message", [
    (["+inits.local-box=my_inits:local_box", "init=impulse"], "inits: arm name 'local-box' may use only letters"),
    (["+inits.mimetic=my_inits:local_box", "init=impulse"], "inits.mimetic: 'mimetic' is a built-in arm"),
    (["+inits.local_box=my_inits.local_box"], "inits.local_box = 'my_inits.local_box': write '<module>:<function>'"),
    (["+inits.local_box=nowhere:local_box"], "inits.local_box = 'nowhere:local_box': no nowhere.py"),
    (["+inits.local_box=my_inits:nothing"], "inits.local_box = 'my_inits:nothing': my_inits.py defines no 'nothing'"),
    (["+inits.local_box={function: 'my_inits:local_box', options: [1]}"], "inits.local_box.options = [1]: expected"),
    (["init=local_bx"], "init = 'local_bx': unknown arm; expected one of 'default', 'timm', 'mimetic', 'impulse',"
                        " 'random', 'local_box', or an init of your own declared in `inits`"),
])
def test_a_mistake_in_params_stops_loading_with_one_message_naming_the_key(own, overrides, message):
    with pytest.raises(PipelineError) as caught:
        params(*overrides)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value), str(caught.value)


def test_a_syntax_error_is_found_without_running_the_module(own):
    (own / "my_inits.py").write_text(BOX + "\ndef oops(:\n")
    with pytest.raises(PipelineError, match=r"^inits.local_box = 'my_inits:local_box': my_inits.py line \d+: "):
        params()


@pytest.mark.parametrize("overrides, message", [
    (["+inits.local_box=my_inits:NOT_A_FUNCTION"], "inits.local_box = 'my_inits:NOT_A_FUNCTION': my_inits.NOT_A_"
                                                   "FUNCTION is 3, not a function"),
    (["+inits.local_box={function: 'my_inits:local_box', options: {taps: 3}}"],
     "inits.local_box.options: local_box(model, generator, gain=1.0) cannot be called as fn(model, generator,"
     " taps=...)"),
])
def test_check_imports_your_init_and_binds_its_options(own, capsys, overrides, message):
    from pipeline.__main__ import main

    assert main(["--params", "params.yaml", *(f"--set={o}" for o in [*TINY, *OWN[:1], *overrides]), "check"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1, err


def test_a_module_that_fails_to_import_is_named_by_check(own):
    from pipeline.validation import validate

    (own / "box_helpers.py").write_text("raise ImportError('no such thing here')\n")
    with pytest.raises(PipelineError, match=r"^inits.local_box = 'my_inits:local_box': importing my_inits failed:"
                                            r" ImportError: no such thing here; run"):
        validate(params(), devices=False)


def test_dvcs_spelling_of_the_experiment_gives_these_params(own):
    """docs/own-init.md's `dvc exp run -S init=local_box -S '+inits.local_box=my_inits:local_box'`, applied as DVC
    applies it, writes params that load with the arm."""
    from dvc.utils.hydra import apply_overrides

    apply_overrides(own / "params.yaml", ["init=local_box", "+inits.local_box=my_inits:local_box"])
    p = load_params("params.yaml")
    assert p.init == "local_box" and p.own_inits["local_box"].function == "my_inits:local_box"


# --- the init itself -----------------------------------------------------------------------------------------------

def test_your_init_starts_from_the_default_arm_and_writes_only_what_it_changes(own):
    """The contract: the model arrives at PyTorch's default init drawn from the cell's generator (the `default`
    arm's values), and what the function leaves alone stays the baseline's; one seed is one model."""
    import timm

    from pipeline.method.inits import apply_init
    from pipeline.method.inits.own import apply_own_init

    def model():
        return timm.create_model("vit_tiny_patch16_224", pretrained=False, weight_init="skip", img_size=8,
                                 patch_size=4, embed_dim=24, depth=2, num_heads=3, num_classes=3, in_chans=1)

    box = apply_own_init(model(), "local_box", "my_inits:local_box", generator=0, gain=0.5)
    default = apply_init(model(), "default", generator=0).state_dict()
    again = apply_own_init(model(), "local_box", "my_inits:local_box", generator=0, gain=0.5).state_dict()
    state = box.state_dict()
    assert all(torch.equal(state[k], again[k]) for k in state)
    for i in range(2):
        qkv, base = state[f"blocks.{i}.attn.qkv.weight"], default[f"blocks.{i}.attn.qkv.weight"]
        assert not qkv[:48].any() and torch.equal(qkv[48:], base[48:] * 0.5)
    untouched = [k for k in state if "qkv.weight" not in k and k != "pos_embed"]
    assert untouched and all(torch.equal(state[k], default[k]) for k in untouched)
    with pytest.raises(PipelineError, match=r"^inits.bad = 'my_inits:broken' with options \{\} left non-finite"
                                            r" values in blocks.0.attn.proj.weight; make it write finite numbers"):
        apply_own_init(model(), "bad", "my_inits:broken", generator=0)


# --- the grid: cells, aggregate, report ----------------------------------------------------------------------------

def test_the_smallest_grid_trains_your_arm_and_the_report_compares_it_with_the_baselines(own, one_thread):
    """Three cells (the toy init, default, mimetic; seed 0) on 8 x 8 images, as dvc.yaml's cells run, then the
    attention maps at init, the aggregate and the report's headline, where the toy init is the method under study."""
    from pipeline.analysis import aggregate as agg
    from pipeline.analysis import attention
    from pipeline.analysis.report import headline_markdown, read_inputs
    from pipeline.cell import run_planned

    p = params()
    for arm in p.arms:
        assert run_planned(p, "train", ["fashion_mnist", "vit", arm, "0"], []) == 0
    cell = Path("results/train/fashion_mnist/vit/local_box/seed0")
    config = json.loads((cell / "config.json").read_text())
    assert config["plugin"]["function"] == "my_inits:local_box" and set(config["plugin"]["files"]) == {
        "my_inits.py", "box_helpers.py"}
    assert json.loads((cell / "metrics.json").read_text())["arm"] == "local_box"
    assert attention.main(p, Namespace(variant="vit", arm="local_box", images=8)) == 0
    assert json.loads(Path("results/attention/vit/local_box/measures.json").read_text())["plugin"] == config["plugin"]
    assert agg.main(p, Namespace(results="results", paper=str(ROOT / "paper"))) == 0
    summary = json.loads(Path("results/summary.json").read_text())
    assert summary["headline"]["fashion_mnist"]["vit"]["method"]["arm"] == "local_box"
    claims = {c["id"]: c["verdict"] for c in json.loads(Path("results/tables/claims.json").read_text())["claims"]}
    assert claims["1"] == "not tested"  # impulse > mimetic > default needs impulse, which this run has none of
    head = headline_markdown(read_inputs("results/tables", "reports/figures", ROOT / "paper"))
    assert "did the method under study, local_box init, beat its baselines (default, mimetic)?" in head
    assert "local_box − default" in head and "local_box − mimetic" in head and "| local_box > default |" in head


# --- what re-runs when ---------------------------------------------------------------------------------------------

def cell_configs(p) -> dict[str, dict]:
    """The configs stage's files for `p`, the training cells' only params dep."""
    from pipeline.resolve import resolved

    return {name: content for name, content in resolved(p).items() if name.startswith("train/")}


def test_a_behaviour_edit_re_runs_your_cells_only_and_a_comment_nothing(own, tmp_path):
    """A cell re-runs when its configuration changes (dvc.yaml: its deps are its configs/ file, data and runtime
    stamp). Editing a docstring or comment of the init (or of a module it imports) leaves every configuration and the
    sources stage's record of it as they were; changing what it computes changes the configurations of its cells
    and nothing else, and the cell refuses to start on code its configuration does not record."""
    from pipeline.cell import same_plugin
    from pipeline.data.fetch.fingerprint import write_sources

    def sources() -> dict[str, str]:
        write_sources(params(), tmp_path / "sources")
        return {f.name: f.read_text() for f in (tmp_path / "sources" / "inits").iterdir()}

    p = params()
    before, recorded = cell_configs(p), sources()
    assert set(recorded) == {"local_box.json", "default.json", "mimetic.json"}
    box = own / "my_inits.py"
    box.write_text(BOX.replace('"""q and k rows', '"""Reworded. q and k rows') + "# a comment\n")
    (own / "box_helpers.py").write_text("# the gain, once more\n" + HELPERS)
    assert cell_configs(params()) == before and sources() == recorded
    box.write_text(BOX.replace("* 0.02", "* 0.03"))
    after = cell_configs(params())
    changed = {name for name in before if after[name] != before[name]}
    assert changed == {"train/fashion_mnist-vit-local_box-0.json"}
    assert {n for n, text in sources().items() if text != recorded[n]} == {"local_box.json"}
    with pytest.raises(PipelineError, match=r"^inits.local_box: my_inits.py changed since the configs stage recorded"
                                            r" fashion_mnist-vit-local_box-0's configuration; run `dvc repro`"):
        same_plugin(before["train/fashion_mnist-vit-local_box-0.json"])
    same_plugin(after["train/fashion_mnist-vit-local_box-0.json"])
    (own / "box_helpers.py").write_text("GAIN = 0.9\n")  # code the init imports is its code too
    assert cell_configs(params())["train/fashion_mnist-vit-local_box-0.json"] != after[
        "train/fashion_mnist-vit-local_box-0.json"]


def test_dvc_yaml_carries_your_inits_code_to_the_configs_and_attention_stages():
    """The configs stage, which writes the cells' configurations, depends on the sources stage's record of every
    arm (always run: the code is outside DVC's view); attention@ depends on its arm's record, not on a params
    section of the arm's name, which your arm has none of."""
    import yaml

    from pipeline.stages import render

    stages = yaml.safe_load(render())["stages"]
    assert stages["sources"]["always_changed"] and "data/sources" in str(stages["sources"]["outs"])
    assert "data/sources/inits" in stages["configs"]["deps"]
    assert "data/sources/inits/${item.arm}.json" in stages["attention"]["deps"]
    assert "${item.arm}" not in stages["attention"]["params"]

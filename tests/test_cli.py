"""The command line: help lists the stage commands; profiles apply onto params.yaml."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
import yaml

from pipeline.__main__ import COMMANDS, main
from pipeline.errors import PipelineError
from pipeline.profiles import apply_profile, available


def test_help_lists_every_command(repo_root):
    proc = subprocess.run([sys.executable, "-m", "pipeline", "--help"], capture_output=True, text=True,
                          cwd=repo_root)
    assert proc.returncode == 0
    for name in COMMANDS:
        assert name in proc.stdout


def test_check_prints_the_grid(params_file, capsys):
    assert main(["--params", str(params_file), "--set", "seeds=[0,1,2]", "check"]) == 0
    out = capsys.readouterr().out
    assert "train: 9 = 1 dataset x 1 variant x 3 arm x 3 seed" in out


def test_unknown_profile_names_the_available_ones(params_file):
    with pytest.raises(PipelineError, match="not found; available"):
        apply_profile("no-such-profile", params_file)


@pytest.mark.parametrize("name", available())
def test_every_profile_applies_and_validates(params_file, name):
    before = params_file.read_text()
    params = apply_profile(name, params_file)
    text = params_file.read_text()
    assert params.profile == name
    assert "# the method under study" in text  # comments survive
    assert yaml.safe_load(text)["profile"] == name
    assert text != before


@pytest.mark.parametrize("name", available())
def test_a_gpu_profile_pins_its_precision_and_data_path(params_file, name):
    """`auto` would decide both per cell (per GPU kind, per free memory): a GPU profile names them, so every cell of
    a table computes alike (aggregate refuses one that does not)."""
    params = apply_profile(name, params_file)
    if params.resources.device != "cuda":
        return
    assert params.resources.data_on_device in (True, False)
    recipes = [params.train, params.filter_recipe, *params.config_recipes.values()]
    assert all(r.amp in ("bf16", "fp16", "off") for r in recipes), [r.amp for r in recipes]


def test_planning_gpu_time_on_a_laptop(params_file, monkeypatch, capsys):
    """Without a GPU, a CUDA profile's `check` stops, naming `--device`; with a card that has figures it plans."""
    monkeypatch.setenv("PIPELINE_DEVICES", "")
    assert main(["--params", str(params_file), "--set", "resources.device=cuda", "check"]) == 2
    assert "to plan the GPU time on this machine: python -m pipeline check --device <card>" in capsys.readouterr().err
    assert main(["--params", str(params_file), "--set", "resources.device=cuda", "check", "--device", "H200"]) == 0
    assert "planned for 1 x H200 per cell, without using one here: training needs one" in capsys.readouterr().out
    assert main(["--params", str(params_file), "check", "--device", "MI300X"]) == 2
    assert "--device 'MI300X': bench/throughput.yaml has no figures for it" in capsys.readouterr().err


def test_check_refuses_more_gpus_than_present(params_file, monkeypatch, capsys):
    monkeypatch.setenv("PIPELINE_DEVICES", "0,1")
    assert main(["--params", str(params_file), "--set", "resources.nproc=4", "check"]) == 2
    assert "resources.nproc = 4" in capsys.readouterr().err
    monkeypatch.setenv("PIPELINE_DEVICES", "")
    assert main(["--params", str(params_file), "--set", "resources.device=cuda", "check"]) == 2


def test_profiles_apply_one_after_another(params_file):
    """A replaced list keeps its key's comment, so the next profile still parses the file."""
    for name in ("ci-alpha-2401", "cpu-claims", "smoke"):
        params = apply_profile(name, params_file)
    assert params.seeds == [0] and params.filter_study.gaussian_sigmas == [1.0]
    text = params_file.read_text()
    assert "seeds:                       # the planned n" in text and "\n- 0\nprofile:" not in text


def test_a_bad_value_under_dvc_exp_run_says_how_to_restore_params_yaml(params_file, monkeypatch, capsys):
    """`dvc exp run -S init=impuls` leaves the value in params.yaml while git may call the file clean: the message
    says so and how to restore it; outside an experiment it does not."""
    from pipeline import entry

    args = argparse.Namespace(params=str(params_file), overrides=["init=impuls"])
    assert entry.run(lambda params, args: 0, args) == 2
    assert "dvc exp run" not in capsys.readouterr().err
    monkeypatch.setenv("DVC_EXP_NAME", "lunar-moth")
    assert entry.run(lambda params, args: 0, args) == 2
    err = capsys.readouterr().err
    assert "init = 'impuls'" in err
    assert f"`touch {params_file} && git checkout {params_file}` restores it" in err

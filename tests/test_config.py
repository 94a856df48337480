"""params.yaml -> validated dataclasses: every mistake is one PipelineError naming key, value and fix."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.config import INIT_METHODS
from pipeline.errors import PipelineError
from pipeline.params import Params, load_params
from pipeline.profiles import apply_profile, merged_text
from pipeline.schema import apply_overrides, digest, from_mapping, yaml_load


def test_repository_params_are_valid(repo_root):
    params = load_params(repo_root / "params.yaml")
    assert params.init in INIT_METHODS
    assert params.arms[0] == params.init
    assert params.datasets == ["fashion_mnist"]


def test_every_key_of_params_yaml_is_a_dataclass_field(repo_root):
    """The YAML and the dataclasses agree both ways: no key is silently ignored, no section is missing."""
    data = yaml.safe_load((repo_root / "params.yaml").read_text())
    assert set(data) == {f.name for f in dataclasses.fields(Params) if f.init}


@pytest.mark.parametrize(
    "override, words",
    [
        ("init=impulsee", ["init", "impulsee", "'default', 'timm', 'mimetic', 'impulse'"]),
        ("baselines=[default, mimetc]", ["baselines", "mimetc"]),
        ("datasets=[fashion_mnst]", ["datasets", "fashion_mnst", "cifar10"]),
        ("train.epochs=-1", ["train.epochs", "-1"]),
        ("train.lr=fast", ["train.lr", "fast", "float"]),
        ("train.lrr=0.1", ["train.lrr", "unknown key", "lr"]),
        ("colour=1", ["colour", "unknown key"]),
        ("impulse.kernel_size=4", ["impulse.kernel_size", "4", "odd"]),
        ("train.amp=fp8", ["train.amp", "fp8", "bf16"]),
        ("models.vit.num_heads=0", ["models.vit.num_heads", "0"]),
        ("models.vit.in_chans=4", ["models.vit.in_chans", "4", "1 or 3"]),
        ("models.vit.num_heads=5", ["models.vit.num_heads", "5", "divide", "embed_dim"]),
        ("models.vit.patch_size=5", ["models.vit.patch_size", "img_size", "28"]),
        ("models.vit.weight_init=trunc", ["models.vit.weight_init", "'skip'", "'jax'"]),
        ("models={}", ["models", "at least one"]),
        ("models={vit-3: {}}", ["vit-3", "'-'"]),
        ("seeds=[0, -3]", ["seeds", "-3"]),
        # the recipe's augmentation (also what the loaders' `Augment` takes, unchecked)
        ("train.crop_pct=2", ["train.crop_pct", "2", "(0, 1]"]),
        ("train.remode=foo", ["train.remode", "foo", "'pixel'", "'rand'", "'const'"]),
        ("filter_study.train={lrr: 1}", ["filter_study.train.lrr", "unknown key", "lr"]),
        ("filter_study.train={epochs: 0}", ["filter_study.train.epochs", "positive"]),
        ("train.scale=[0.5, 0.1]", ["train.scale", "low <= high"]),
        ("train.hflip=1.5", ["train.hflip", "[0, 1]"]),
        ("data.normalization=cifar", ["data.normalization", "'cifar'", "'imagenet'"]),
        ("train.warmup_epochs=20", ["train.warmup_epochs", "train.epochs"]),
        ("report.confidence=95", ["report.confidence", "(0, 1)"]),
        ("filter_study.model.kernel_size=4", ["filter_study.model.kernel_size", "odd"]),
        ("filter_study.model.block=gelu", ["filter_study.model.block", "'gelu'", "'ci'", "'sia'"]),
        ("filter_study.filters=[learned-random]", ["filter_study", "learned-random", "write 'learned'"]),
        ("filter_study.gaussian_heads=[0]", ["filter_study.gaussian_heads", "between 1"]),
        # the parts of the grid the training configurations and [SIA]'s cells run on, and Model III's arms
        ("sia={bases: [avg_sincos], datasets: [digits]}", ["sia.datasets", "'digits'", "fashion_mnist"]),
        ("ci_model3.arms=[impulse, impulse_s100]", ["ci_model3.arms", "impulse_s100", "impulse_sens"]),
    ],
)
def test_bad_params_name_key_value_and_choices(params_file, override, words):
    with pytest.raises(PipelineError) as err:
        load_params(params_file, [override])
    for word in words:
        assert word in str(err.value)


def test_training_configurations_run_on_the_cells_named_in_train_config_cells(params_file):
    """The configurations run on a part of the grid (dvc.yaml's train_config matrix reads these lists), which must
    be the grid's own; with no configuration the lists are not read."""
    params = load_params(params_file, ["train_configs={lr_half: {lr: 0.0005}}"])
    assert (params.train_config_cells.datasets, params.train_config_cells.variants) == (["fashion_mnist"], ["vit"])
    with pytest.raises(PipelineError, match=r"train_config_cells.variants: 'vit3' is not one of \['vit'\]"):
        load_params(params_file, ["train_configs={lr_half: {lr: 0.0005}}",
                                  "train_config_cells={datasets: [fashion_mnist], variants: [vit3]}"])
    assert load_params(params_file, ["train_config_cells={datasets: [], variants: [vit3]}"]).train_configs == {}


def test_model3_sensitivity_arm_has_its_own_fit(params_file):
    params = load_params(params_file, ["ci_model3.arms=[impulse, random, impulse_sens]"])
    assert params.ci_model3.sensitivity_fit.sigma == 100.0 and params.ci_model3.impulse_fit.sigma == 1.0
    assert (params.ci_model3.sensitivity_fit.steps, params.ci_model3.sensitivity_fit.lr) == (10000, 1e-4)


def test_overrides_parse_yaml_values(params_file):
    params = load_params(params_file, ["train.lr=2e-3", "seeds=[3, 4, 5]", "impulse.offsets=random"])
    assert params.train.lr == pytest.approx(2e-3)
    assert params.seeds == [3, 4, 5]
    assert params.impulse.offsets == "random"


def test_arms_put_the_method_first_without_repeats():
    assert from_mapping(Params, {"init": "mimetic", "baselines": ["default", "default"]}).arms == ["mimetic",
                                                                                                  "default"]
    assert from_mapping(Params, {"init": "impulse", "baselines": ["default", "timm"]}).arms == [
        "impulse", "default", "timm"]


def test_method_options_are_the_params_section():
    params = from_mapping(Params, {"mimetic": {"alpha_qk": 0.5}})
    assert params.method_options("mimetic") == {"alpha_qk": 0.5, "beta_qk": 0.7, "alpha_vo": 0.4, "beta_vo": 0.4,
                                                    "form": "official", "mixer": "default_gain"}
    assert params.method_options("timm") == {}


def test_a_variant_overrides_its_init_options_and_mistakes_name_the_key():
    mixer = {"name": "mixer_s16_224", "extra": {"num_blocks": 6}}
    params = from_mapping(Params, {"models": {"mixer": mixer, "mixer_shift": mixer | {
        "init_options": {"impulse": {"mixer": "shift"}, "mimetic": {"mixer": "exact"}}}}})
    assert params.method_options("impulse", "mixer")["mixer"] == "filter"  # the default construction
    assert params.method_options("impulse", "mixer_shift") == params.method_options("impulse") | {"mixer": "shift"}
    assert params.method_options("mimetic", "mixer_shift")["mixer"] == "exact"
    assert params.method_options("default", "mixer_shift") == params.method_options("default")
    bad = {"impulse": {"mixer": "box"}}, {"xavier": {}}, {"impulse": {"mixr": "shift"}}, {"impulse": "shift"}
    for options, message in zip(bad, ("init_options.impulse.mixer", "init_options: unknown value 'xavier'",
                                      "init_options.impulse.mixr: unknown key", "init_options.impulse = 'shift'")):
        with pytest.raises(PipelineError, match=message):
            from_mapping(Params, {"models": {"m": mixer | {"init_options": options}}})


def test_cpu_claims_runs_both_mixer_constructions():
    profile = yaml_load((Path(__file__).parent.parent / "profiles" / "cpu-claims.yaml").read_text())
    params = from_mapping(Params, profile)
    constructions = {v: params.method_options("impulse", v)["mixer"] for v in ("mixer", "mixer_shift")}
    assert constructions == {"mixer": "filter", "mixer_shift": "shift"}
    assert params.method_options("mimetic", "mixer_shift")["mixer"] == "exact"


def test_digest_changes_with_content():
    a, b = from_mapping(Params, {}), from_mapping(Params, {"train": {"epochs": 3}})
    assert digest(a) == digest(from_mapping(Params, {})) and digest(a) != digest(b)


def test_apply_overrides_refuses_to_descend_into_a_value():
    with pytest.raises(PipelineError, match="init is not a section"):
        apply_overrides({"init": "impulse"}, ["init.x=1"])


def test_loading_params_does_not_import_torch(repo_root):
    code = ("import sys; from pipeline.params import load_params; load_params('params.yaml');"
            " print(sorted(m for m in ('torch', 'timm', 'torchvision') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo_root, check=True)
    assert out.stdout.strip() == "[]"


def test_the_filter_study_recipe_is_the_train_section_updated_and_validated():
    params = from_mapping(Params, {"train": {"epochs": 5, "lr": 0.01}, "filter_study": {"train": {"lr": 0.002}}})
    assert params.filter_recipe.lr == 0.002 and params.filter_recipe.epochs == 5
    assert params.train.lr == 0.01


def test_model_variants_keep_their_order_and_defaults():
    params = from_mapping(Params, {"models": {"vit6": {"num_heads": 6}, "vit3": {"num_heads": 3}}})
    assert params.variants == ["vit6", "vit3"]
    assert params.models["vit3"].num_heads == 3 and params.models["vit3"].name == "vit_tiny_patch16_224"


def test_cli_rejects_a_misspelt_init_before_it_imports_torch(params_file, repo_root, tmp_path):
    """The value is checked before the command's module loads (check's imports torch and timm: seconds): here torch
    cannot be imported at all, and the message is still the one about the value."""
    params_file.write_text(params_file.read_text().replace("init: impulse ", "init: impulsee "))
    (tmp_path / "sitecustomize.py").write_text("import sys\n\nsys.modules['torch'] = None\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "pipeline", "--params", str(params_file), "check"],
                          capture_output=True, text=True, cwd=repo_root, env=env)
    assert proc.returncode == 2
    assert "init" in proc.stderr and "impulsee" in proc.stderr and "mimetic" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_method_that_is_also_a_baseline_is_an_error_that_says_what_to_do():
    with pytest.raises(PipelineError, match=r"init = mimetic is also one of baselines .*baselines=\[impulse,default\]"):
        from_mapping(Params, {"init": "mimetic"})


def test_baselines_must_fill_the_two_dvc_slots():
    with pytest.raises(PipelineError, match="exactly two"):
        from_mapping(Params, {"baselines": ["default"]})
    assert from_mapping(Params, {"baselines": ["default", "default"]}).arms == ["impulse", "default"]


def test_filter_study_block_defaults_to_cis_form_which_the_default_study_reproduces():
    """[CI] Fig. 4 (code-2401): spatial conv -> BatchNorm without GELU; 'sia' is [SIA]'s form."""
    assert from_mapping(Params, {}).filter_study.model.block == "ci"
    assert from_mapping(Params, {"filter_study": {"model": {"block": "sia"}}}).filter_study.model.block == "sia"


def test_filter_study_dataset_must_be_fetched():
    with pytest.raises(PipelineError, match="filter_study.dataset"):
        from_mapping(Params, {"datasets": ["cifar10"], "filter_study": {"filters": ["learned"]}})
    off = {"datasets": ["cifar10"], "filter_study": {"filters": [], "gaussian_sigmas": []}}
    assert from_mapping(Params, off).filter_study.filters == []


@pytest.mark.parametrize("bad", ["filter_study.filters=[learned, boxx-3]", "filter_study.filters=[box-10]",
                                 "filter_study.gaussian_sigmas=[-1]"])
def test_bad_filter_names_fail_at_load(params_file, bad):
    with pytest.raises(PipelineError, match="filter"):
        load_params(params_file, [bad])


def test_params_yaml_is_the_schema_with_its_defaults(repo_root):
    """One place per default: params.yaml spells out every key of the schema, at the schema's default value (a
    notebook's `from_mapping(Params, {})` runs the experiment `make repro` runs)."""
    written = yaml_load((repo_root / "params.yaml").read_text())
    defaults = {f.name: value for f in dataclasses.fields(Params) if f.init
                for value in [dataclasses.asdict(from_mapping(Params, {}))[f.name]]}
    assert written == defaults


def leaf_keys(data: dict, prefix: str = "") -> list[tuple[str, object]]:
    """(dotted key, value) of every leaf of params.yaml: a scalar, a list, or a mapping of free-form entries."""
    out = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value and name not in FREE_FORM:
            out += leaf_keys(value, name + ".")
        else:
            out.append((name, value))
    return out


#: mappings whose entries are free-form (any create_model keyword, a recipe's `train` overrides, names)
FREE_FORM = {"models.vit.extra", "models.vit.init_options", "weight_selection.teacher.extra",
             "weight_selection.teacher.init_options", "filter_study.train", "ci_alpha.train", "ci_model3.train",
             "weight_selection.pretrain", "weight_selection.finetune", "train_configs", "weight_selection.teachers",
             "timm", "random"}
#: free text: any value of the right type is valid (a name shown in the report, a path, a host:port)
FREE_TEXT = {"profile", "report.title", "resources.rdzv_endpoint", "resources.rdzv_id", "resources.compile_cache",
             "data.root",
             "data.fashion_mnist_mirror", "data.imagenet_path", "data.folder_path", "slurm.partition",
             "slurm.account", "models.vit.name", "weight_selection.teacher.name"}


def bad_values(value) -> list:
    """Values of the wrong kind for a key holding `value`: what a typo in params.yaml gives."""
    if isinstance(value, bool):
        return ["maybe"]
    if isinstance(value, int | float):
        return ["many", -1] if value >= 0 else ["many"]
    if isinstance(value, str):
        return [12345] if value else [12345]
    if isinstance(value, list):
        return ["not-a-list", [{"nested": 1}]]
    if isinstance(value, dict):
        return [["not", "a", "mapping"]]
    return ["nonsense-value"]


#: what switches an experiment on, so that the keys it reads only when on are read (and checked)
ON = {"weight_selection": ["weight_selection.datasets=[digits]", "weight_selection.fetch=[digits]",
                           "weight_selection.teachers={t: {arm: impulse}}"],
      "sia": ["sia.bases=[avg_sincos]"], "train_config_cells": ["train_configs={a: {lr: 0.002}}"]}
RAW = yaml_load((Path(__file__).resolve().parent.parent / "params.yaml").read_text())
KEYS = leaf_keys(RAW)


@pytest.mark.parametrize("key, value", KEYS, ids=[k for k, _ in KEYS])
def test_check_rejects_a_bad_value_of_every_key_naming_it(key, value):
    """Generated: every key of params.yaml, given values of the wrong kind (and for choices and names, an unknown
    one), stops `load_params` or `check`'s model builds with one PipelineError that names the key."""
    from pipeline.validation import validate

    candidates = bad_values(value) if key not in FREE_TEXT else [12345]
    if isinstance(value, str) and key not in FREE_TEXT:
        candidates.append("no-such-choice")
    switch_on = ON.get(key.split(".")[0], [])
    for bad in candidates:
        data = apply_overrides(copy.deepcopy(RAW), [*switch_on, f"{key}={json.dumps(bad)}"])
        with pytest.raises(PipelineError) as caught:
            validate(from_mapping(Params, data), devices=False)
        message, parent = str(caught.value), key.rsplit(".", 1)[0]
        assert key in message or key.split(".")[-1] in message or parent in message, (bad, message)


def typed(value):
    """A YAML value with the type of every scalar spelled out (1 and 1.0, "2e-3" and 2e-3 differ)."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    return type(value).__name__, value


def test_params_are_read_as_yaml_1_2_as_dvc_reads_them():
    """ruamel.yaml's YAML 1.2, DVC's reader: `2e-3` is a float (PyYAML's YAML 1.1 reads a string), `yes`/`on` stay
    strings, a leading zero is decimal."""
    values = ["2e-3", "1.0e-08", "yes", "on", "No", "017", "0x1f", "~", "3"]
    text = "\n".join(f"k{i}: {v}" for i, v in enumerate(values))
    assert typed(yaml_load(text)) == typed({"k0": 0.002, "k1": 1e-08, "k2": "yes", "k3": "on", "k4": "No", "k5": 17,
                                            "k6": 31, "k7": None, "k8": 3})


def test_a_number_stays_as_written(params_file):
    """An int given for a float field stays an int, as DVC records it: each cell's resolved config and its digest say
    what params.yaml says (pydantic alone would make `aug_repeats: 3` 3.0 and re-key every cell)."""
    params = load_params(params_file, ["train.aug_repeats=3", "resources.checkpoint_minutes=10", "train.lr=0.5"])
    assert typed(params.train.aug_repeats) == ("int", 3) and typed(params.resources.checkpoint_minutes) == ("int", 10)
    assert typed(params.train.lr) == ("float", 0.5)


@pytest.mark.parametrize(("override", "message"), [
    ("train.epochs=true", "train.epochs = True: wrong value, expected int (input should be a valid integer)"),
    ("train.lr='1e-3'", "train.lr = '1e-3': wrong value, expected float (input should be a valid number)"),
    ("train.epochs=2.0", "train.epochs = 2.0: wrong value, expected int (input should be a valid integer)"),
    ("data=3", "data: expected a mapping of keys, got 3"),
    ("models.vit.compile=true", "models.vit.compile: unknown key; allowed keys here are name,"),
    ("train.compile=true", "train.compile: moved to resources.compile"),
    ("models.vit.init_options={impulse: {noise_std: -1}}", "models.vit.init_options.impulse.noise_std = -1"),
])
def test_a_wrong_value_is_named_by_its_key_path(params_file, override, message):
    """pydantic checks the keys and types (strict: no `true` for an int, no '1e-3' for a float), each section its
    ranges with the key path it was read from, an arm's options under a variant too."""
    with pytest.raises(PipelineError) as exc:
        load_params(params_file, [override])
    assert message in str(exc.value)


def test_a_profile_applies_without_dvc(repo_root, params_file, monkeypatch, capsys):
    """On a stock image (DVC absent) the profile is applied with PyYAML's writer: the same values, without the
    comments (and it says so)."""
    expected = yaml_load(merged_text("paper-small", params_file.read_text())[0])
    for name in ("dvc", "dvc.utils", "dvc.utils.collections", "dvc.utils.serialize"):
        monkeypatch.setitem(sys.modules, name, None)
    apply_profile("paper-small", params_file)
    assert typed(yaml_load(params_file.read_text())) == typed(expected)
    assert "without its comments" in capsys.readouterr().out


def test_a_dataset_whose_label_a_mirror_changes_trains_without_flips(params_file):
    """digits' cells resolve hflip 0 (a mirrored 2 is no 2), Fashion-MNIST's keep the recipe's; every stage that
    trains on a dataset reads its recipe so (`experiments.train_section`)."""
    from pipeline.resolve import resolved

    params = load_params(params_file, ["datasets=[fashion_mnist, digits]", "weight_selection.datasets=[digits]",
                                       "weight_selection.teachers={t: {arm: impulse, train_size: 100}}"])
    flips = {name: cfg["train"]["hflip"] for name, cfg in resolved(params).items()
             if cfg.get("dataset") in ("digits", "fashion_mnist") and "train" in cfg}
    assert params.train.hflip == 0.5
    on = {n: f for n, f in flips.items() if "digits" in n}
    assert on and set(on.values()) == {0.0}, flips
    assert {f for n, f in flips.items() if n.startswith("train/fashion_mnist")} == {0.5}
    assert any(n.startswith("select_finetune/digits") for n in on)
    assert any(n.startswith("ws_scratch/digits") for n in on)

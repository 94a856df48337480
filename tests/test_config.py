"""params.yaml -> validated dataclasses: every mistake is one PipelineError naming key, value and fix."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.config import INIT_METHODS, Params, apply_overrides, digest, from_mapping, load_params, yaml_load
from pipeline.errors import PipelineError


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
        ("train.warmup_epochs=6", ["train.warmup_epochs", "train.epochs"]),
        ("report.confidence=95", ["report.confidence", "(0, 1)"]),
        ("filter_study.model.kernel_size=4", ["filter_study.model.kernel_size", "odd"]),
        ("filter_study.model.block=gelu", ["filter_study.model.block", "'gelu'", "'ci'", "'sia'"]),
        ("filter_study.filters=[learned-random]", ["filter_study", "learned-random", "write 'learned'"]),
        ("filter_study.gaussian_heads=[0]", ["filter_study.gaussian_heads", "between 1"]),
    ],
)
def test_bad_params_name_key_value_and_choices(params_file, override, words):
    with pytest.raises(PipelineError) as err:
        load_params(params_file, [override])
    for word in words:
        assert word in str(err.value)


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
    code = ("import sys; from pipeline.config import load_params; load_params('params.yaml');"
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


def test_cli_rejects_a_misspelt_init(params_file, repo_root):
    params_file.write_text(params_file.read_text().replace("init: impulse ", "init: impulsee "))
    proc = subprocess.run([sys.executable, "-m", "pipeline", "--params", str(params_file), "check"],
                          capture_output=True, text=True, cwd=repo_root)
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
        from_mapping(Params, {"datasets": ["cifar10"]})
    off = {"datasets": ["cifar10"], "filter_study": {"filters": [], "gaussian_sigmas": []}}
    assert from_mapping(Params, off).filter_study.filters == []


@pytest.mark.parametrize("bad", ["filter_study.filters=[learned, boxx-3]", "filter_study.filters=[box-10]",
                                 "filter_study.gaussian_sigmas=[-1]"])
def test_bad_filter_names_fail_at_load(params_file, bad):
    with pytest.raises(PipelineError, match="filter"):
        load_params(params_file, [bad])

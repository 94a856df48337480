"""`python -m pipeline check`: every planned run is built on the meta device, so library-level mistakes stop in
seconds with the params key and the fix (issue 14's list), before any stage runs."""

from __future__ import annotations

import pytest

from pipeline.__main__ import main
from pipeline.check import decide_lines, estimate_lines, unused_arm_lines
from pipeline.errors import PipelineError
from pipeline.params import load_params
from pipeline.profiles import apply_profile
from pipeline.validation import check_builds

#: the earlier CPU default's recipe (3,000 images, batch 128, 6 epochs, 5 seeds), whose arithmetic the estimate tests
#: below spell out
SIX_EPOCHS = ["seeds=[0, 1, 2, 3, 4]", "train.epochs=6", "train.batch_size=128", "train.warmup_epochs=1",
              "data.train_subset=3000"]


@pytest.mark.parametrize(
    "override, words",
    [
        ("models.vit.name=vit_tiny_patch16_22", ["models.vit", "not a timm model name", "vit_tiny_patch16_224"]),
        ("models.vit.extra={foo: 1}", ["models.vit", "keyword 'foo'", "remove or rename"]),
        ("models.vit.patch_size=null", ["models.vit", "img_size 28 is not divisible by patch_size 16"]),
        ("train.batch_size=4096", ["train", "batch_size = 4096", "2000 training images", "data.train_subset"]),
        ("train.opt=adamx", ["train", "opt = 'adamx'", "list_optimizers"]),
        ("train.sched=cosin", ["train", "sched = 'cosin'"]),
        ("train.aa=rand-m9-incc1", ["train", "aa = 'rand-m9-incc1'", "rand-m9-mstd0.5-inc1"]),
        ("filter_study.train={opt: sgdd}", ["filter_study.train", "opt = 'sgdd'"]),
        ("filter_study.model.patch_size=5", ["filter_study.model", "not divisible by patch_size 5"]),
    ],
)
def test_check_names_the_key_of_a_mistake_only_the_libraries_can_see(params_file, override, words):
    with pytest.raises(PipelineError) as err:
        check_builds(load_params(params_file, ["filter_study.filters=[learned]", override]))
    for word in words:
        assert word in str(err.value)


def test_check_builds_every_model_and_recipe_of_the_default(params_file, capsys):
    assert main(["--params", str(params_file), "check"]) == 0
    assert "1 model(s) built on the meta device" in capsys.readouterr().out  # the ViT; the default runs no ConvMixer


def test_check_exits_2_with_one_line(params_file, capsys):
    assert main(["--params", str(params_file), "--set", "train.opt=adamx", "check"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: train: opt = 'adamx'") and err.count("\n") == 1


def test_the_estimate_covers_every_variant_and_the_alpha_grid(params_file, tmp_path, monkeypatch):
    """The [CI] grid's Simple ViT is found by (simple_vit, image size, patch size, width); the row here is test
    data. A row of another patch size is not its figure: the token count, and a step's cost, follow the patch."""
    import pipeline.check

    table = tmp_path / "throughput.yaml"
    table.write_text(pipeline.check.THROUGHPUT.read_text() + "- {model: simple_vit, img_size: 32, patch_size: 4,"
                     " embed_dim: 512, device: cpu-2core, images_per_s: 9999, source: test}\n"
                     "- {model: simple_vit, img_size: 32, patch_size: 2, embed_dim: 512,"
                     " device: cpu-2core, images_per_s: 54, source: test}\n")
    monkeypatch.setattr(pipeline.check, "THROUGHPUT", table)
    params = load_params(params_file, [*SIX_EPOCHS, "ci_alpha.datasets=[fashion_mnist]", "ci_alpha.seeds=[0, 1]"])
    lines = estimate_lines(params)
    assert lines[0].startswith("compute estimate of train cells, variant vit on fashion_mnist at 440 images/s")
    # 3,000 images in batches of 128 (23 steps) x 6 epochs; the val subset every epoch and the test split once, at a
    # third of a training image each
    assert lines[0].endswith(": 15 runs x 17,664 images + 16,000 evaluated (23% of the cost) = 0.01 h each")
    ci = next(line for line in lines if line.startswith("compute estimate of ci_alpha cells"))
    assert ci.startswith("compute estimate of ci_alpha cells on fashion_mnist at 54 images/s")
    assert ": 18 runs x 17,664 images" in ci  # 3 alphas x 3 arms x 2 seeds
    assert lines[-2] == "  total: 2.3 hours on a cpu-2core CPU"  # 15 x 0.015 h + 18 x 0.12 h
    assert lines[-1].startswith("slurm: the longest cell (ci_alpha cells on fashion_mnist, ~0.1 h on 1 x"
                                " cpu-2core) fits")
    lines = estimate_lines(load_params(params_file, ["ci_alpha.datasets=[fashion_mnist]",
                                                     "ci_alpha.model.dim=256"]))
    assert any("no throughput figure for simple_vit at this size on cpu" in line for line in lines)
    lines = estimate_lines(load_params(params_file, ["ci_alpha.datasets=[fashion_mnist]",
                                                     "ci_alpha.model.patch_size=8"]))
    assert any("no throughput figure for simple_vit at this size on cpu; measure it" in line for line in lines)


def test_the_estimate_costs_the_filter_study_by_its_convmixers_width(params_file, tmp_path, monkeypatch):
    """The ConvMixer is found by (convmixer, its image size or null, width): the study's cells and the Gaussian grid's
    are costed (they were left out of the total before), and a width with no row says so."""
    import pipeline.check

    table = tmp_path / "throughput.yaml"
    table.write_text("- {model: convmixer, img_size: null, patch_size: 4, embed_dim: 256, device: cpu-2core,"
                     " images_per_s: 100, source: test}\n")
    monkeypatch.setattr(pipeline.check, "THROUGHPUT", table)
    on = ["filter_study.filters=[learned, impulse]", "filter_study.seeds=[0, 1]", "filter_study.model.dim=256",
          "filter_study.gaussian_sigmas=[0.1]", "filter_study.gaussian_heads=[4]", "filter_study.train.epochs=2"]
    lines = estimate_lines(load_params(params_file, on))
    study = [line for line in lines if line.startswith(("compute estimate of filter_study cells",
                                                        "compute estimate of filter_gaussian cells"))]
    assert len(study) == 2 and all(" at 100 images/s per cpu-2core (test)" in line for line in study)
    assert ": 4 runs x " in study[0] and ": 2 runs x " in study[1]  # 2 filters x 2 seeds; 1 sigma x 1 head x 2 seeds
    assert lines[-2].startswith("  total: ")
    lines = estimate_lines(load_params(params_file, [*on[:2], "filter_study.model.dim=64"]))
    assert any(line.startswith("compute estimate of filter_study cells") and "no throughput figure for convmixer"
               in line for line in lines)


def test_the_profiles_every_planned_model_builds(params_file):
    for name in ("cpu-claims", "ci-alpha-2401", "cpu-all"):
        assert check_builds(apply_profile(name, params_file)) >= 5


def test_check_says_when_a_cell_outlasts_what_slurm_lets_it_run(params_file):
    """paper-small on V100s (a row derived from the H100's): a Food-101 cell needs ~2.2 h; 30 min x 2 jobs would kill
    it, the profile's 720 min x 5 fits; Flowers-102 trains 2 x 512 images per epoch (the 8 ranks' steps)."""
    params = apply_profile("paper-small", params_file)
    lines = estimate_lines(params, "V100")
    assert any(line.startswith("compute estimate of train cells, variant vit on flowers102 ") and
               ": 15 runs x 307,200 images + " in line for line in lines)
    assert lines[-1].startswith("slurm: the longest cell (train cells, variant vit on food101, ~2.2 h on 1 x V100)"
                                " fits")
    line = estimate_lines(load_params(params_file, ["slurm.time=30", "slurm.requeues=1"]), "V100")[-1]
    assert line.startswith("slurm: the longest cell (train cells, variant vit on food101) needs ~2.2 h on 1 x V100,"
                           " beyond slurm.time x (slurm.requeues + 1) = 30 min x 2 = 1 h")
    assert "set slurm.requeues: 4" in line


def test_check_plans_on_every_card_with_a_measured_or_derived_row(params_file):
    """A100, V100 and L40S rows are derived from the measured H100's (labelled, with their source); each GPU cell
    counts its fixed cost, and the total gives wall-clock hours on 1, 8 and 64 GPUs beside the GPU-hours."""
    params = apply_profile("paper-small", params_file)
    for card in ("A100", "V100", "L40S", "H100"):
        lines = estimate_lines(params, card)
        cells = [line for line in lines if line.startswith("compute estimate of train cells, variant vit on cifar10")]
        assert cells and "+ 30 s fixed per cell" in cells[0]
        assert ("(a derived figure: the H100 row (11,978) x " in cells[0]) == (card != "H100")
        total = next(line for line in lines if line.startswith("  total: "))
        assert "GPU-hours; wall-clock about " in total and " h on 8, " in total
    v100 = next(line for line in estimate_lines(params, "V100") if line.startswith("  total: "))
    assert 50 < float(v100.split()[1]) < 150  # not the paper's PIL-bound pipeline's 1,472


def test_check_builds_and_costs_sias_cells(params_file):
    """[SIA]'s two architectures are built on the meta device per dataset, a bad one stops with its key, and the
    estimate counts its cells."""
    params = load_params(params_file, [*SIX_EPOCHS, "sia={bases: [cls_learned, avg_sincos], fits: [PP, UU]}"])
    assert check_builds(params) == check_builds(load_params(params_file, SIX_EPOCHS)) + 2  # the two architectures
    lines = estimate_lines(params)
    assert [line.split(" on ")[0] for line in lines if line.startswith("compute estimate of sia_base")] == [
        "compute estimate of sia_base cells, arch cls_learned", "compute estimate of sia_base cells, arch avg_sincos"]
    fit = next(line for line in lines if line.startswith(
        "compute estimate of sia_fit cells (the fit's Adam steps (sia.fit.steps) not included) on fashion_mnist"))
    assert fit.endswith(": 6 runs x 17,664 images + 16,000 evaluated (23% of the cost) = 0.01 h each")  # PP, UU
    bad = load_params(params_file, ["sia={bases: [avg_sincos]}", "models.vit.extra={foo: 1}"])
    with pytest.raises(PipelineError, match="keyword 'foo'"):
        check_builds(bad)


def test_check_says_before_any_run_which_claims_the_design_cannot_decide(params_file):
    """Each claim's power at the plan, all its comparisons at once, from the plan's assumed seed sds: the CPU
    default cannot decide claim 1 at its effects of interest and says what would; it does not test claim 9."""
    lines = decide_lines(load_params(params_file))
    by_claim = {line.split(":")[0].strip(): line for line in lines[1:]}
    assert by_claim["claim 1"].startswith("  claim 1: claim power (the plan's assumptions): P(all 3 comparisons")
    assert "the design cannot decide it at the plan's effects: it would need" in by_claim["claim 1"]
    assert by_claim["claim 9"].endswith("not tested by this profile")
    assert by_claim["claim 7"].endswith("structural (no seed statistic, no power to state)")
    claims = decide_lines(apply_profile("cpu-claims", params_file))
    assert any(line.startswith("  claim 10: claim power (the plan's assumptions): P(all 4 comparisons")
               for line in claims)


def test_a_declared_experiment_is_costed_without_touching_check(params_file, monkeypatch):
    """check's estimate reads the declarations: a stage declared like `train` (here a copy named `toy`) is costed
    from its cells' resolved configurations, with its declared note."""
    import dataclasses

    import pipeline.check
    from pipeline.experiments import by_name, stages

    toy = dataclasses.replace(by_name("train"), name="toy", cost_note="a note")
    monkeypatch.setattr(pipeline.check, "stages", lambda: [*stages(), toy])
    lines = estimate_lines(load_params(params_file, SIX_EPOCHS))
    ours = [line for line in lines if line.startswith("compute estimate of toy cells, variant vit (a note) on")]
    theirs = [line for line in lines if line.startswith("compute estimate of train cells, variant vit on")]
    assert len(ours) == 1 and ours[0].split(" at ")[1] == theirs[0].split(" at ")[1]
    assert lines[-2] == "  total: 0.4 hours on a cpu-2core CPU"  # twice the train grid's 0.21 h


def test_check_warns_when_a_subset_is_the_whole_split(params_file):
    """digits has 1,347 training and 450 test images: a 2,000-image subset is every image for every seed, and a
    1,000-image validation subset is the whole test split; Fashion-MNIST's are true subsets."""
    from pipeline.check import data_lines

    lines = data_lines(load_params(params_file, ["datasets=[fashion_mnist, digits]", "data.train_subset=2000"]))
    assert len(lines) == 2 and lines[0].startswith("warning: digits: data.train_subset 2000")
    assert "every seed trains on all 1,347" in lines[0]
    assert lines[1].startswith("warning: the validation subset (data.val_subset) is the whole test split of digits"
                               " (450):")
    assert data_lines(load_params(params_file, [])) == []


def test_check_prints_the_per_gpu_batch_and_warns_below_the_measured_one(params_file):
    from pipeline.check import parallel_lines

    assert parallel_lines(load_params(params_file, [])) == []
    eight = parallel_lines(load_params(params_file, ["train.batch_size=512", "resources.nproc=8"]))
    assert eight[0] == "per-process batch: train.batch_size 512 over 8 processes = 64 per GPU"
    assert eight[1].startswith("warning: 64 images per GPU is below the 512") and "set resources.nproc: 1" in eight[1]
    assert len(parallel_lines(load_params(params_file, ["train.batch_size=4096", "resources.nproc=8"]))) == 1


def test_check_warns_when_a_set_arm_option_trains_nothing(params_file):
    """The README's second experiment after `-S init=timm`: `impulse.offsets=random` with impulse no longer an arm
    changes no cell, and check says so with the fix; with impulse an arm it says nothing."""
    params = load_params(params_file, ["init=timm", "impulse.offsets=random"])
    [line] = unused_arm_lines(params)
    assert line.startswith("warning: impulse.offsets = 'random' is set, but no planned cell trains the impulse arm")
    assert "add -S init=impulse" in line
    assert unused_arm_lines(load_params(params_file, ["impulse.offsets=random"])) == []
    assert unused_arm_lines(load_params(params_file)) == []


def test_a_users_folder_is_planned_at_its_real_size_and_its_resize_is_said(params_file, tmp_path):
    """A folder of 8 x 8 images, 3 classes x 30 training images: the estimate trains 90 images a pass, not
    data.train_subset's 2,000, and check says the images are upsampled to the model's 28 px."""
    from datasets_fixtures import make_image_folder

    from pipeline.check import data_lines, epoch_images

    folder = make_image_folder(tmp_path / "mine", classes=3, train_per_class=30, val_per_class=2, sizes=[(8, 8)])
    params = load_params(params_file, ["datasets=[folder]", f"data.folder_path={folder.root}",
                                       "filter_study.filters=[]", "filter_study.gaussian_sigmas=[]"])
    lines = data_lines(params)
    assert f"folder ({folder.root}): 90 training images in 3 classes, shorter side 8 px (median of" in lines[0]
    assert "the models take 28 px: each image is resized to it" in lines[0]
    assert lines[1].startswith("warning: folder: its images (8 px) are upsampled about 3.5x to the models' 28 px")
    assert lines[2].startswith("warning: folder: data.train_subset 2000 >= its 90 training images: every seed trains"
                               " on all 90")
    estimate = next(line for line in estimate_lines(params) if " on folder " in line)
    trained = params.train.epochs * epoch_images(90, params.train, 1)
    assert f" runs x {trained:,} images" in estimate and trained < params.train.epochs * 2000

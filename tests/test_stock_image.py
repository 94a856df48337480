"""A training cell, the engine, the data path, bench/'s GPU scripts and `pytest -m gpu` start on a stock PyTorch image:
each in a child process where what such an image lacks (`stock_image.ABSENT`: DVC, dvclive, scipy, pandas, ...)
cannot be imported; pydantic and ruamel.yaml, which read params, travel as the wheels of `make device-wheels`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from stock_image import ABSENT, PYTEST_ABSENT, ROOT, environment


def stock_python(tmp_path, *args: str, cwd=None, timeout: int = 300) -> str:
    """`python *args` on the emulated stock image; its output, or an AssertionError with its tail."""
    proc = subprocess.run([sys.executable, *args], cwd=cwd or ROOT, env=environment(tmp_path / "stock"),
                          capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    return out


def test_the_emulation_hides_what_a_stock_image_lacks(tmp_path):
    out = stock_python(tmp_path, "-c", "import importlib.util\n"
                       f"for name in {ABSENT!r}:\n"
                       "    assert importlib.util.find_spec(name) is None, name\n"
                       "    try:\n"
                       "        __import__(name)\n"
                       "    except ImportError:\n"
                       "        print('absent', name)\n")
    assert out.count("absent") == len(ABSENT)


def test_the_gpu_path_imports_without_them(tmp_path):
    stock_python(tmp_path, "-c", "import pipeline.training.engine, pipeline.data.load.device, pipeline.training.train,"
                 " pipeline.training.run, pipeline.cell, pipeline.experiments, pipeline.check, pipeline.profiles,"
                 " pipeline.method.inits; import bench.bench_gpu, bench.gpu_check")


def test_a_training_cell_runs_end_to_end_without_them(tmp_path, workdir):
    """One cell of the grid (impulse ViT, the device data path with RandAugment, erasing, mixup and cutmix) from its
    command (`python -m pipeline train ...`): the run's outs without dvclive's live/ (it says so) and metrics.json
    with the per-epoch history."""
    shutil.copy(ROOT / "params.yaml", workdir / "params.yaml")
    overrides = ["data.train_subset=0", "data.val_subset=0", "models.vit.img_size=8", "models.vit.patch_size=2",
                 "models.vit.depth=1", "train.epochs=2", "train.warmup_epochs=0", "train.batch_size=16",
                 "resources.data_on_device=true", "train.aa=rand-m9-mstd0.5-inc1", "train.reprob=0.25",
                 "train.mixup=0.8", "train.cutmix=1.0"]
    sets = [a for o in overrides for a in ("--set", o)]
    out = stock_python(tmp_path, "-m", "pipeline", *sets, "train", "fashion_mnist", "vit", "impulse", "0", cwd=workdir)
    assert "dvclive is not installed" in out
    result = workdir / "results" / "train" / "fashion_mnist" / "vit" / "impulse" / "seed0"
    metrics = json.loads((result / "metrics.json").read_text())
    assert metrics["data_path"] == "device" and len(metrics["history"]) == 2 and not (result / "live").exists()
    assert (result / "model.pt").exists() and metrics["test_size"] == 32


@pytest.mark.slow("collects the whole suite in a stock-image emulation")
def test_pytest_collects_the_gpu_tests_without_them(tmp_path):
    out = stock_python(tmp_path, "-m", "pytest", "--collect-only", "-q", "-m", "gpu", "-p", "no:cacheprovider",
                       *PYTEST_ABSENT, "tests")
    assert "tests/test_device_data.py::test_the_device_path_runs_under_cudas_sync_debug_mode" in out
    assert "needs dvc, which is not installed here" in out  # test_stage_deps, for one, is skipped, saying so


def test_make_bench_gpu_installs_nothing():
    """`make bench-gpu` on a GPU node runs the GPU check with the Python it finds (a stock image's: no venv, no
    package registry), never `make env`."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}  # under `make test`
    plan = subprocess.run(["make", "-n", "--no-print-directory", "bench-gpu", "GPU_PYTHON=python3"], cwd=ROOT,
                          capture_output=True, text=True, env=env).stdout
    assert plan.strip() == "python3 bench/gpu_check.py --yaml bench/throughput.yaml"


def test_the_device_wheels_hold_what_reads_params():
    """`make device-wheels` carries pydantic and ruamel.yaml to a stock image with every package they need (their
    non-optional requirements, all the way down), each at the lock's version: a new dependency of theirs is named."""
    import importlib.metadata as metadata
    import re

    makefile = (ROOT / "Makefile").read_text()
    listed = re.search(r"^DEVICE_WHEELS := (.*)$", makefile, re.M)[1].split()
    wheels = {re.sub(r"[-_.]+", "-", n).lower() for n in listed}
    needed, todo = set(), ["pydantic", "ruamel.yaml"]
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in needed:
            continue
        needed.add(name)
        for req in metadata.requires(name) or []:
            if "extra ==" not in req:
                todo.append(re.match(r"[A-Za-z0-9_.-]+", req)[0])
    assert needed <= wheels, f"add {sorted(needed - wheels)} to the Makefile's DEVICE_WHEELS"
    lock = (ROOT / "requirements.lock").read_text().lower()
    for name in wheels:
        pattern = "[-_.]".join(map(re.escape, name.split("-")))
        assert re.search(rf"^{pattern}==", lock, re.M), f"{name} is not in the lock"

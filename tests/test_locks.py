"""The three locks: requirements.lock (torch's CUDA 13 wheels), requirements-cu126.lock (the same torch and
torchvision built for CUDA 12.6: drivers >= 525, V100s), which `make repro CUDA=12` installs, and requirements-cpu.lock
(PyTorch's CPU-only build of them, no CUDA libraries), which `make repro CPU=1` installs."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from conftest import ROOT


def pins(text: str) -> dict[str, str]:
    return dict(line.split("==") for line in text.splitlines() if "==" in line and not line.startswith("#"))


#: each derived lock: what it may drop from requirements.lock, and what it must drop
DERIVED = {"cu126": (("nvidia-", "cuda-"), ()), "cpu": (("nvidia-", "cuda-", "triton"), ("triton", "nvidia-cublas"))}


@pytest.mark.parametrize("build", DERIVED)
def test_a_derived_lock_is_the_main_lock_with_that_builds_torch(tmp_path, build):
    may, must = DERIVED[build]
    for name in ("Makefile", "requirements.lock"):
        shutil.copy(ROOT / name, tmp_path / name)
    subprocess.run(["make", "-s", f"requirements-{build}.lock"], cwd=tmp_path, check=True)
    committed = (ROOT / f"requirements-{build}.lock").read_text()
    assert (tmp_path / f"requirements-{build}.lock").read_text() == committed  # remade from requirements.lock
    main, derived = pins((ROOT / "requirements.lock").read_text()), pins(committed)
    assert derived["torch"] == f"{main['torch']}+{build}" and derived["torchvision"] == f"{main['torchvision']}+{build}"
    dropped = set(main) - set(derived)
    assert dropped >= set(must) and all(n.startswith(may) and n != "nvidia-ml-py" for n in dropped)
    assert {n: v for n, v in main.items() if n in derived and not n.startswith("torch")} == {
        n: v for n, v in derived.items() if not n.startswith("torch")}
    assert f"--extra-index-url https://download.pytorch.org/whl/{build}" in committed.splitlines()


def test_make_installs_the_lock_cuda_asks_for():
    default = subprocess.run(["make", "-n", "-B", "env"], cwd=ROOT, capture_output=True, text=True).stdout
    cuda12 = subprocess.run(["make", "-n", "-B", "env", "CUDA=12"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "-r requirements.lock" in default and "-r requirements-cu126.lock" not in default
    assert "-r requirements-cu126.lock" in cuda12 and "rm -rf .venv" in cuda12  # a switch rebuilds the venv


def test_make_installs_the_cpu_lock_when_asked_and_a_switch_rebuilds():
    cpu = subprocess.run(["make", "-n", "-B", "env", "CPU=1"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "-r requirements-cpu.lock" in cpu and "-r requirements.lock" not in cpu and "rm -rf .venv" in cpu
    assert ".venv/.installed .venv/.installed-cu126" in cpu  # the other two stamps are what triggers the rebuild

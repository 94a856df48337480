"""The two locks: requirements.lock (torch's CUDA 13 wheels) and requirements-cu126.lock (the same torch and
torchvision built for CUDA 12.6: drivers >= 525, V100s), which `make repro CUDA=12` installs."""

from __future__ import annotations

import shutil
import subprocess

from conftest import ROOT


def pins(text: str) -> dict[str, str]:
    return dict(line.split("==") for line in text.splitlines() if "==" in line and not line.startswith("#"))


def test_the_cuda12_lock_is_the_main_lock_with_cuda12_torch(tmp_path):
    for name in ("Makefile", "requirements.lock"):
        shutil.copy(ROOT / name, tmp_path / name)
    subprocess.run(["make", "-s", "requirements-cu126.lock"], cwd=tmp_path, check=True)
    committed = (ROOT / "requirements-cu126.lock").read_text()
    assert (tmp_path / "requirements-cu126.lock").read_text() == committed  # remade from requirements.lock
    main, cu126 = pins((ROOT / "requirements.lock").read_text()), pins(committed)
    assert cu126["torch"] == main["torch"] + "+cu126" and cu126["torchvision"] == main["torchvision"] + "+cu126"
    dropped = set(main) - set(cu126)
    assert dropped and all(n.startswith(("nvidia-", "cuda-")) and n != "nvidia-ml-py" for n in dropped)
    assert {n: v for n, v in main.items() if n in cu126 and not n.startswith("torch")} == {
        n: v for n, v in cu126.items() if not n.startswith("torch")}
    assert "--extra-index-url https://download.pytorch.org/whl/cu126" in committed.splitlines()


def test_make_installs_the_lock_cuda_asks_for():
    default = subprocess.run(["make", "-n", "-B", "env"], cwd=ROOT, capture_output=True, text=True).stdout
    cuda12 = subprocess.run(["make", "-n", "-B", "env", "CUDA=12"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "-r requirements.lock" in default and "-r requirements-cu126.lock" not in default
    assert "-r requirements-cu126.lock" in cuda12 and "rm -rf .venv" in cuda12  # a switch rebuilds the venv

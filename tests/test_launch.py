"""`resources.device: cuda` never trains on the CPU: it stops in seconds saying why CUDA cannot run here."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from pipeline import cell
from pipeline.errors import PipelineError
from pipeline.training import engine, launch
from tests.conftest import ROOT

V100, H100 = ("Tesla V100-SXM2-32GB", (7, 0)), ("NVIDIA H100 80GB HBM3", (9, 0))
CU13_ARCHS = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]
CU126_ARCHS = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]


NO_KERNEL = "CUDA error: no kernel image is available for execution on the device"


@pytest.mark.parametrize(("build", "driver", "gpus", "archs", "needed", "error", "words"), [
    (None, (580, 65), [], [], 1, "", "CPU-only build"),
    ("13.0", None, [], [], 1, "Found no NVIDIA driver on your system", "no NVIDIA driver"),
    ("13.0", (535, 104), [], [], 1, "The NVIDIA driver on your system is too old",
     "needs NVIDIA driver >= 580.0; this machine has 535.104: install the CUDA 12.6 build"),
    ("13.0", (580, 65), [V100], CU13_ARCHS, 1, NO_KERNEL, "no kernels for Tesla V100-SXM2-32GB (sm_70"),
    ("12.6", (470, 82), [], [], 1, "", "needs NVIDIA driver >= 525.60; this machine has 470.82: update"),
    ("13.0", (580, 65), [H100], CU13_ARCHS, 2, "", "CUDA sees 1 GPU(s)"),
    ("13.0", (580, 65), [], [], 1, "", "torch cannot start CUDA (torch.cuda.is_available() is False)"),
    ("13.0", (580, 65), [H100], CU13_ARCHS, 1, "CUDA error: an illegal memory access",
     "cannot run a kernel on NVIDIA H100 80GB HBM3 (torch: CUDA error: an illegal memory access"),
])
def test_why_cuda_cannot_run(build, driver, gpus, archs, needed, error, words):
    assert words in launch.cuda_problem(build, driver, gpus, archs, needed, error)


@pytest.mark.parametrize(("build", "driver", "gpus", "archs"), [
    ("13.0", (580, 65), [H100, H100], CU13_ARCHS), ("12.6", (535, 104), [V100], CU126_ARCHS),
    ("13.0", (590, 1), [("NVIDIA RTX PRO 6000 Blackwell", (12, 1))], CU13_ARCHS),  # sm_121 by compute_120 PTX
    ("13.0", None, [H100], CU13_ARCHS),  # no /proc/driver/nvidia/version (WSL2, some containers): torch decides
    ("13.0", (535, 104), [H100], CU13_ARCHS),  # an older driver that torch runs on (forward compatibility)
    ("12.8", (570, 1), [H100], ["sm_80", "sm_90a", "sm_100a"])])  # arch-specific kernels
def test_cuda_that_torch_runs_has_no_problem(build, driver, gpus, archs):
    assert launch.cuda_problem(build, driver, gpus, archs, len(gpus)) == ""


@pytest.mark.parametrize(("sm", "archs", "has"), [
    (90, ["sm_80", "sm_90a"], True), (100, ["sm_90a", "compute_90a"], False), (121, ["sm_90", "compute_120"], True),
    (70, ["sm_75", "compute_120"], False), (100, ["sm_100f"], True), (90, ["gfx90a", "sm_86", "compute_86"], True)])
def test_arch_names_with_suffixes_parse(sm, archs, has):
    assert launch.has_kernels(sm, archs) is has


def test_torch_decides_whatever_the_driver_file_says(monkeypatch):
    """cuda_unusable asks torch (a kernel on the GPU the rank uses) before the driver file, which only explains."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: H100[0])
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: H100[1])
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: CU13_ARCHS)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    ran = []
    monkeypatch.setattr(launch, "run_kernel", lambda index: ran.append(index) or "")
    for driver in (None, (535, 104), (580, 65)):
        monkeypatch.setattr(launch, "driver_version", lambda driver=driver: driver)
        assert launch.cuda_unusable(2) == ""
    assert ran == [1, 1, 1]  # only the GPU that rank 1 uses
    monkeypatch.setattr(launch, "run_kernel", lambda index: NO_KERNEL)
    monkeypatch.setattr(launch, "driver_version", lambda: (580, 65))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: (7, 0))
    assert "has no kernels for" in launch.cuda_unusable(1)


def test_the_driver_version_is_read_from_the_kernel_module(tmp_path):
    version = tmp_path / "version"
    version.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build\n")
    assert launch.driver_version(version) == (570, 86)
    version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n")
    assert launch.driver_version(version) == (535, 104)
    assert launch.driver_version(tmp_path / "absent") is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_where_torch_sees_gpus_the_runner_and_check_see_them(monkeypatch):
    """visible_devices() looks for the driver's files before asking torch; a container missing the ones it knows
    would leave the runner without GPUs and `check` refusing every GPU profile."""
    monkeypatch.delenv("PIPELINE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert launch.gpu_driver()
    assert len(launch.visible_devices()) == torch.cuda.device_count() > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine can run CUDA")
def test_a_cuda_run_on_a_machine_without_cuda_stops_at_once(workdir):
    with pytest.raises(PipelineError, match="resources.device = 'cuda' but CUDA cannot run here"):
        cell.preflight(SimpleNamespace(device="cuda"))
    proc = subprocess.run([sys.executable, "-m", "pipeline", "--params", str(ROOT / "params.yaml"), "--set",
                           "resources.device=cuda", "check"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and "CUDA cannot run here" in proc.stderr and "resources.device" in proc.stderr
    assert "epoch" not in proc.stdout + proc.stderr  # it stops before anything trains


def test_auto_says_so_when_a_gpu_machine_trains_on_the_cpu(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(launch, "driver_version", lambda: (535, 104))
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    cell.preflight(SimpleNamespace(device="auto"))
    assert engine.setup_distributed("auto").device.type == "cpu"
    assert "training on the CPU, because CUDA cannot run here: torch is built for CUDA 13.0, which needs NVIDIA" \
           " driver >= 580.0; this machine has 535.104" in capsys.readouterr().out

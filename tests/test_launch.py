"""`resources.device: cuda` never trains on the CPU: it stops in seconds saying why CUDA cannot run here."""

from __future__ import annotations

import subprocess
import sys
import time
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


@pytest.mark.parametrize(("build", "driver", "gpus", "archs", "needed", "words"), [
    (None, (580, 65), [H100], [], 1, "CPU-only build"),
    ("13.0", None, [], [], 1, "no NVIDIA driver"),
    ("13.0", (535, 104), [H100], CU13_ARCHS, 1, "needs NVIDIA driver >= 580.0; this machine has 535.104: install the"
                                                " CUDA 12.6 build"),
    ("13.0", (580, 65), [V100], CU13_ARCHS, 1, "no kernels for Tesla V100-SXM2-32GB (sm_70"),
    ("12.6", (470, 82), [V100], CU126_ARCHS, 1, "needs NVIDIA driver >= 525.60; this machine has 470.82: update"),
    ("13.0", (580, 65), [H100], CU13_ARCHS, 2, "CUDA sees 1 GPU(s)"),
])
def test_why_cuda_cannot_run(build, driver, gpus, archs, needed, words):
    assert words in launch.cuda_problem(build, driver, gpus, archs, needed)


@pytest.mark.parametrize(("build", "driver", "gpus", "archs"), [
    ("13.0", (580, 65), [H100, H100], CU13_ARCHS), ("12.6", (535, 104), [V100], CU126_ARCHS),
    ("13.0", (590, 1), [("NVIDIA RTX PRO 6000 Blackwell", (12, 1))], CU13_ARCHS)])  # sm_121 by compute_120 PTX
def test_cuda_that_can_run_has_no_problem(build, driver, gpus, archs):
    assert launch.cuda_problem(build, driver, gpus, archs, len(gpus)) == ""


def test_the_driver_version_is_read_from_the_kernel_module(tmp_path):
    version = tmp_path / "version"
    version.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build\n")
    assert launch.driver_version(version) == (570, 86)
    version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n")
    assert launch.driver_version(version) == (535, 104)
    assert launch.driver_version(tmp_path / "absent") is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine can run CUDA")
def test_a_cuda_run_on_a_machine_without_cuda_stops_at_once(workdir):
    with pytest.raises(PipelineError, match="resources.device = 'cuda' but CUDA cannot run here"):
        cell.preflight(SimpleNamespace(device="cuda"))
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pipeline", "--params", str(ROOT / "params.yaml"), "--set",
                           "resources.device=cuda", "check"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and "CUDA cannot run here" in proc.stderr and "resources.device" in proc.stderr
    assert time.monotonic() - start < 60  # seconds of imports, no training


def test_auto_says_so_when_a_gpu_machine_trains_on_the_cpu(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(launch, "driver_version", lambda: (535, 104))
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    cell.preflight(SimpleNamespace(device="auto"))
    assert engine.setup_distributed("auto").device.type == "cpu"
    assert "training on the CPU, because CUDA cannot run here: torch is built for CUDA 13.0, which needs NVIDIA" \
           " driver >= 580.0; this machine has 535.104" in capsys.readouterr().out

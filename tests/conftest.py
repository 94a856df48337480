"""Shared fixtures: the repository root, a copy of params.yaml to edit, one torch thread, Fashion-MNIST images."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
FMNIST = Path("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")


@pytest.fixture
def repo_root() -> Path:
    return ROOT


@pytest.fixture
def params_file(tmp_path) -> Path:
    """A writable copy of the repository's params.yaml."""
    path = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", path)
    return path


@pytest.fixture
def one_thread():
    """Run the test on one torch thread (results, and timings, do not depend on the machine's cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def fashion_mnist() -> torch.Tensor:
    """16 Fashion-MNIST test images (16, 1, 28, 28), normalised with the dataset's mean/std; skip without them."""
    if not FMNIST.exists():
        pytest.skip(f"{FMNIST} absent (Debian's dataset-fashion-mnist)")
    with gzip.open(FMNIST) as file:
        raw = np.frombuffer(file.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)[:16]
    return (torch.from_numpy(raw.copy()).float() / 255 - 0.2860) / 0.3530

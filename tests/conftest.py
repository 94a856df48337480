"""Shared fixtures: the repository root, a copy of params.yaml to edit, one torch thread, Fashion-MNIST images,
a working directory with a tiny dataset, a file server on 127.0.0.1, the smoke pipeline built once per run.

Generators of test data (a user's ImageFolder tree, miniature archives of the registered datasets) live in
`tests/datasets_fixtures.py`.
"""

from __future__ import annotations

import gzip
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest
import torch
from datasets_fixtures import LocalServer, tiny_dataset
from stock_image import ABSENT
from workspace import copy_repo, sh

ROOT = Path(__file__).resolve().parent.parent
FMNIST = Path("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")


class ModuleWithoutOptionalPackages(pytest.Module):
    """A test module that imports a package a stock PyTorch image lacks (`stock_image.ABSENT`: DVC, the analysis
    stack, ...) is skipped where that package is missing, naming it, so `pytest -m gpu` collects on a GPU node's
    image; any other import error still fails the collection."""

    def collect(self):
        try:
            return super().collect()
        except self.CollectError as exc:
            cause = exc.__cause__
            package = (getattr(cause, "name", None) or "").split(".")[0]
            if isinstance(cause, ModuleNotFoundError) and package in ABSENT:
                pytest.skip(f"{self.path.name} needs {package}, which is not installed here", allow_module_level=True)
            raise


def pytest_pycollect_makemodule(module_path, parent):
    return ModuleWithoutOptionalPackages.from_parent(parent, path=module_path)


def pytest_addoption(parser, pluginmanager):
    if not pluginmanager.hasplugin("timeout"):  # pyproject's `timeout` setting, where pytest-timeout is absent
        parser.addini("timeout", "pytest-timeout's limit per test (not installed here: no limit)")


def pytest_configure(config):
    if not config.pluginmanager.hasplugin("timeout"):
        config.addinivalue_line("markers", "timeout(seconds): pytest-timeout's limit (not installed here: no limit)")


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


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A working directory with a tiny Fashion-MNIST-shaped dataset (64 + 32 images of 8 x 8, 3 classes)."""
    tiny_dataset(tmp_path, "fashion_mnist", {"train": 64, "test": 32}, ["a", "b", "c"], seed=0, noise=80, step=60)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def data_server():
    """A `LocalServer` on 127.0.0.1: put bytes into `.files`, download from `.url`/<name>."""
    with LocalServer() as server:
        yield server


@pytest.fixture
def data_dead_url():
    """A URL on 127.0.0.1 where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/files"


@pytest.fixture(scope="session")
def smoke_built(tmp_path_factory) -> tuple[Path, str]:
    """The smoke profile built once per test run as `make repro` builds it (`python -m pipeline repro`: DVC's
    stages on every core, one torch thread each): (project, the runner's output).

    The end-to-end modules copy it (`workspace.copy_built`) instead of each building its own.
    """
    repo = copy_repo(tmp_path_factory.mktemp("smoke") / "built", "smoke", {"resources.threads": 1})
    out = sh(repo, "python", "-m", "pipeline", "repro")
    shutil.rmtree(repo / "scratch" / "repro")  # the runner's stage logs: the tests look in scratch/ for checkpoints
    if not any((repo / "scratch").iterdir()):
        (repo / "scratch").rmdir()
    return repo, out

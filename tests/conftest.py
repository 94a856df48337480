"""Shared fixtures: the repository root, a copy of params.yaml to edit, a file server on 127.0.0.1.

Generators of test data (a user's ImageFolder tree, miniature archives of the registered datasets) live in
`tests/datasets_fixtures.py`.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest
from datasets_fixtures import LocalServer

ROOT = Path(__file__).resolve().parent.parent


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

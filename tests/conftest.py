"""Shared fixtures: the repository root and a copy of params.yaml to edit."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

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

"""A Python environment holding only some distributions and what they require, as `pip install` of them would leave
it: their top-level modules linked from this interpreter's site-packages into a folder, run with `python -S` (no
site-packages) and that folder on the path. What tests use to run code as a user with fewer packages would."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement


def requirement_closure(names: list[str]) -> set[str]:
    """The installed distributions `names` need, transitively (extras and markers as pip evaluates them here)."""
    todo, seen = list(names), set()
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen.add(name)
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def site_of(names: list[str], folder: Path) -> Path:
    """`folder` holding links to the files of the distributions `names` need (modules and their metadata)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in requirement_closure(names):
        dist = metadata.distribution(name)
        for top in {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}:
            source = Path(dist.locate_file(top))
            if source.exists() and not (folder / top).exists() and top != "__pycache__":
                (folder / top).symlink_to(source)
    return folder


def run_with_only(names: list[str], script: Path, folder: Path, cwd: Path,
                  extra_path: list[Path]) -> subprocess.CompletedProcess:
    """Run `script` with only the distributions `names` need importable (plus `extra_path`, e.g. the checkout)."""
    site = site_of(names, folder)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in [site, *extra_path])
    return subprocess.run([sys.executable, "-S", str(script)], cwd=cwd, env=env, capture_output=True, text=True)

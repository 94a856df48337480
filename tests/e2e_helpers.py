"""What the end-to-end tests share: a copy of this working tree as a git repository on the smoke profile, and
running commands in it with the venv's python and dvc first on PATH (stage commands call `python`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMINGS = {"images_per_s", "epoch_time_s", "wall_time_s"}


def env() -> dict:
    """The venv's python and dvc first on PATH (stage commands call `python`)."""
    return dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                PYTHONUNBUFFERED="1")


def sh(repo: Path, *cmd: str, check: bool = True) -> str:
    proc = subprocess.run(cmd, cwd=repo, env=env(), capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}:\n{out[-4000:]}")
    return out


def ran(output: str) -> set[str]:
    """The stages `dvc repro` / `dvc exp run` executed (not those it restored from the run-cache)."""
    return set(re.findall(r"Running stage '([^']+)'", output))


def metrics(repo: Path, run_dir: Path) -> dict:
    """A run's metrics.json without its timings (which differ between identical runs)."""
    data = json.loads((repo / run_dir / "metrics.json").read_text())
    data["history"] = [{k: v for k, v in row.items() if k not in TIMINGS} for row in data["history"]]
    return {k: v for k, v in data.items() if k not in TIMINGS}


def smoke_repo(dest: Path, overrides: dict | None = None) -> Path:
    """Copy this working tree (tracked and untracked-not-ignored files) into a fresh git repository at `dest`, on
    the smoke profile, with `overrides` ({key: value} as `python -m pipeline --set` takes them) written into its
    params.yaml, and commit it."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    for name in files:
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    sh(dest, "git", "init", "-q")
    sh(dest, "git", "config", "user.email", "e2e@test")
    sh(dest, "git", "config", "user.name", "e2e")
    sh(dest, sys.executable, "-m", "pipeline", "profile", "smoke")
    if overrides:
        from pipeline.config import apply_overrides, yaml_load  # the same YAML 1.2 reading as DVC's

        data = apply_overrides(yaml_load((dest / "params.yaml").read_text()), [f"{k}={v}" for k, v in
                                                                                  overrides.items()])
        (dest / "params.yaml").write_text(json.dumps(data, indent=1))
    sh(dest, "git", "add", "-A")
    sh(dest, "git", "commit", "-qm", "smoke profile")
    return dest

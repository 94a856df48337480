"""A clean temporary copy of this working tree as its own git repository: what the runner's tests and bench use.

`copy_repo(dest, profile="smoke", params={"resources.threads": 1})` copies the tracked and untracked-not-ignored files
(so uncommitted edits are included, and data/, results/, .dvc/cache are not), applies the profile with
`python -m pipeline profile`, writes the given parameter values into params.yaml itself (stage commands never get
`--set`: DVC must see the values), and commits, so `dvc repro` starts from nothing, as in a fresh clone.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tool_env(**extra: str) -> dict:
    """This interpreter's bin folder first on PATH (stage commands call `python`, tests call `dvc`)."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return {**os.environ, "PATH": path, "PYTHONUNBUFFERED": "1", **extra}


def sh(repo: Path, *cmd: str, check: bool = True, env: dict | None = None) -> str:
    """Run `cmd` in `repo`; its stdout + stderr, or an AssertionError with their tail when it fails."""
    proc = subprocess.run(cmd, cwd=repo, env=env or tool_env(), capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}:\n{out[-4000:]}")
    return out


def set_params(params_file: Path, values: dict) -> None:
    """Write `{"resources.threads": 1, ...}` into params.yaml, keeping its comments."""
    from ruamel.yaml import YAML  # here: a stock PyTorch image (pytest -m gpu) has no ruamel.yaml

    rt = YAML()
    doc = rt.load(params_file.read_text())
    for key, value in values.items():
        *parents, leaf = key.split(".")
        node = doc
        for name in parents:
            node = node[name]
        node[leaf] = value
    buffer = io.StringIO()
    rt.dump(doc, buffer)
    params_file.write_text(buffer.getvalue())


def copy_repo(dest: Path, profile: str | None = "smoke", params: dict | None = None, env: dict | None = None) -> Path:
    """A committed git repository at `dest` holding this working tree, on `profile`, with `params` written in
    (`env`: the commands' environment, default `tool_env()`)."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.splitlines()
    for name in files:
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    sh(dest, "git", "init", "-q", env=env)
    sh(dest, "git", "config", "user.email", "runner@test", env=env)
    sh(dest, "git", "config", "user.name", "runner", env=env)
    if profile:
        sh(dest, sys.executable, "-m", "pipeline", "profile", profile, env=env)
    if params:
        set_params(dest / "params.yaml", params)
    sh(dest, "git", "add", "-A", env=env)
    sh(dest, "git", "commit", "-qm", f"profile {profile}", env=env)
    return dest


def copy_built(source: Path, dest: Path) -> Path:
    """A copy of a built project (results, dvc.lock, DVC's cache and run-cache): what a user has after `dvc repro`.

    Cheaper than building again; DVC's temporary folder (locks, state database) stays behind.
    """
    shutil.copytree(source, dest, symlinks=True,
                    ignore=lambda folder, names: ["tmp"] if Path(folder).name == ".dvc" else [])
    return dest


#: what differs between two identical runs: timings, the git revision of two separately made copies, the SLURM job
UNSTABLE = {"images_per_s", "epoch_time_s", "wall_time_s", "test_time_s", "git_rev", "slurm"}


def _stable(value):
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in UNSTABLE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def metrics(repo: Path, run_dir: Path) -> dict:
    """One run's metrics.json without what differs between identical runs."""
    return _stable(json.loads((repo / run_dir / "metrics.json").read_text()))


def ran(output: str) -> set[str]:
    """The stages `dvc repro` / `dvc exp run` / `python -m pipeline repro` executed (not those restored from the
    run-cache; the runner's `check` lines are the always-changed stages it runs first)."""
    return (set(re.findall(r"Running stage '([^']+)'", output))
            | set(re.findall(r"^(?:done|check) +(\S+) +(?:ran in |\()", output, re.MULTILINE)))


def run_metrics(repo: Path) -> dict[str, dict]:
    """Every run's metrics.json under results/, by path, without timings: equal for equal runs on CPU."""
    return {str(p.relative_to(repo)): _stable(json.loads(p.read_text()))
            for p in sorted((repo / "results").rglob("metrics.json")) if "live" not in p.parts}

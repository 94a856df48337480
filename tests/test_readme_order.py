"""The README's "What to try next" block, run as written and in its order on the smoke build (a copy of it, with its
run committed as the README's reference run is): each line does what its comment says. `source .venv/bin/activate`
is this interpreter's bin folder first on PATH (`workspace.tool_env`), as the activation gives."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from workspace import copy_built, ran, sh

ROOT = Path(__file__).resolve().parent.parent


def try_next_block() -> list[str]:
    """The commands of the README's first bash block under "What to try next", comments dropped."""
    section = (ROOT / "README.md").read_text().split("## What to try next", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL).group(1)
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]


def test_the_block_is_the_one_this_test_knows():
    assert try_next_block() == ["source .venv/bin/activate", "dvc exp run -S init=timm",
                                "dvc exp run -S init=impulse -S impulse.offsets=random", "python -m pipeline compare",
                                "dvc metrics diff main"]


@pytest.mark.slow("runs the README's two `dvc exp run` lines on the smoke build (each trains a cell and the"
                         " light stages: about 2 minutes on 2 cores)")
def test_what_to_try_next_runs_as_written_in_its_order(smoke_built, tmp_path):
    repo = copy_built(smoke_built[0], tmp_path / "project")
    sh(repo, "git", "add", "-A")
    sh(repo, "git", "commit", "-qm", "the reference run")
    sh(repo, "git", "branch", "-M", "main")  # the README compares with main
    out = {}
    for line in try_next_block():
        if line.startswith("source "):
            continue  # the activation: tool_env's PATH
        out[line] = sh(repo, *shlex.split(line))
    timm = ran(out["dvc exp run -S init=timm"])
    assert {"train@fashion_mnist-vit-timm-0"} <= timm  # timm as the method under study
    assert not {s for s in timm if re.match(r"train@.*-(default|mimetic)-", s)}  # the baselines cached
    offsets = ran(out["dvc exp run -S init=impulse -S impulse.offsets=random"])
    assert {s for s in offsets if s.startswith("train@")} == {"train@fashion_mnist-vit-impulse-0"}  # only impulse
    compare = out["python -m pipeline compare"]
    assert "timm" in compare and "impulse" in compare and "default: " in compare  # per experiment, paired
    diff = out["dvc metrics diff main"]
    assert "results/summary.json" in diff and "headline" in diff  # the same numbers against the committed run

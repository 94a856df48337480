"""Stage outputs written all-or-nothing: a failed stage leaves no out that looks complete (DESIGN.md).

The one place the pipeline writes a result: a folder (`folder_aside`), several files that belong together
(`files_aside`), or one file (`atomic_path`, `write_text`). Each writes under a temporary name beside the
target and moves it into place with `os.replace` only when the block completes, so a crash or a kill leaves
either the old output or none, never a half-written one.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PARTIAL = ".partial"
#: a run's per-image correctness on the whole test split, beside its metrics.json (written by
#: pipeline.training.run, read by pipeline.analysis.runs)
TEST_CORRECT = "test_correct.npz"


@contextmanager
def folder_aside(out: Path) -> Iterator[Path]:
    """A fresh temporary sibling of folder `out` to write into; it replaces `out` only when the block completes."""
    out = Path(out)
    tmp = out.with_name(out.name + PARTIAL)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary sibling path of file `path` to write to (by any writer: torch.save, fpdf, ...); it replaces
    `path` only when the block completes, and is removed when it fails."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}{PARTIAL}")
    try:
        yield tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


@contextmanager
def files_aside(*paths: Path) -> Iterator[tuple[Path, ...]]:
    """Temporary siblings for several files that belong together; all replace their targets once the block
    completes (one `os.replace` each, after every file is written), none when it fails."""
    paths = tuple(Path(p) for p in paths)
    tmps = tuple(p.with_name(f".{p.name}{PARTIAL}") for p in paths)
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield tmps
    except BaseException:
        for t in tmps:
            t.unlink(missing_ok=True)
        raise
    for tmp, path in zip(tmps, paths, strict=True):
        os.replace(tmp, path)


def write_text(path: Path, text: str) -> None:
    """Write a text file all-or-nothing."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)

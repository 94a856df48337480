"""Stage outputs written all-or-nothing: a failed stage leaves no out that looks complete.

The one place the pipeline writes a result: a folder (`folder_aside`), several files that belong together
(`files_aside`), or one file (`atomic_path`, `write_text`). Each writes under a temporary name beside the
target and moves it into place with `os.replace` only when the block completes, so a crash or a kill leaves
either the old output or none, never a half-written one. A full disk becomes one `PipelineError` naming the
output, what it had written and the space left (`disk_full`), instead of a library's traceback.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.errors import PipelineError

PARTIAL = ".partial"
#: a run's per-image correctness on the whole test split, beside its metrics.json (written by
#: pipeline.training.run, read by pipeline.analysis.runs)
TEST_CORRECT = "test_correct.npz"
#: the same on the held-out pool of the train split (`data.holdout`), indexed by the images' places in that split
HOLDOUT_CORRECT = "holdout_correct.npz"


#: below this many free bytes a failed write counts as a full disk even when the writer hid the OS error
#: (torch.save into a path reports ENOSPC as "RuntimeError: ... unexpected pos")
NEARLY_FULL = 16 * 2**20


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def disk_full(exc: BaseException, target: Path, written: Path) -> PipelineError | None:
    """The error to raise instead of `exc` when it came from a full disk while writing `target` (through its
    temporary sibling `written`), else None: the path, what was written, what is free, and the fix."""
    parent = next((p for p in [target, *target.parents] if p.exists()), Path("."))
    free = shutil.disk_usage(parent).free
    quota = isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
    if not quota and not (isinstance(exc, RuntimeError | OSError) and free < NEARLY_FULL):
        return None
    done, old = _size(written), _size(target)
    needed = f"about {_mib(old)} (the size of the output it replaces)" if old > done else f"more than {_mib(done)}"
    return PipelineError(f"no space left on the disk holding {target}: the stage had written {_mib(done)} of it"
                         f" when the disk filled and {_mib(free)} is free; this output needs {needed}. Free space"
                         " there (or point data.root / the repository at a larger disk) and run the stage again;"
                         " nothing half-written was kept")


@contextmanager
def folder_aside(out: Path) -> Iterator[Path]:
    """A fresh temporary sibling of folder `out` to write into; it replaces `out` only when the block completes."""
    out = Path(out)
    tmp = out.with_name(out.name + PARTIAL)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException as exc:
        full = disk_full(exc, out, tmp)
        shutil.rmtree(tmp, ignore_errors=True)
        if full:
            raise full from None
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
    except BaseException as exc:
        full = disk_full(exc, path, tmp)
        tmp.unlink(missing_ok=True)
        if full:
            raise full from None
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
    except BaseException as exc:
        full = next(filter(None, (disk_full(exc, p, t) for p, t in zip(paths, tmps))), None)
        for t in tmps:
            t.unlink(missing_ok=True)
        if full:
            raise full from None
        raise
    for tmp, path in zip(tmps, paths, strict=True):
        os.replace(tmp, path)


def write_text(path: Path, text: str) -> None:
    """Write a text file all-or-nothing."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)

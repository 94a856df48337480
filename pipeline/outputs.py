"""Stage outputs written all-or-nothing: a failed stage leaves no out that looks complete (DESIGN.md)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def folder_aside(out: Path) -> Iterator[Path]:
    """A fresh temporary sibling of `out` to write into; it replaces `out` only when the block completes."""
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    yield tmp
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)

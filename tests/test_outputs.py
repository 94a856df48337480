"""All-or-nothing stage outputs."""

from __future__ import annotations

import pytest

from pipeline.outputs import folder_aside


def test_a_completed_block_replaces_the_out(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "old.json").write_text("old")
    with folder_aside(out) as tmp:
        (tmp / "metrics.json").write_text("new")
    assert sorted(p.name for p in out.iterdir()) == ["metrics.json"]
    assert not (tmp_path / "run.partial").exists()


def test_a_failed_block_leaves_no_complete_looking_out(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(RuntimeError), folder_aside(out) as tmp:
        (tmp / "model.pt").write_text("half")
        raise RuntimeError("killed mid-write")
    assert not out.exists()

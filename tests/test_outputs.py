"""All-or-nothing stage outputs."""

from __future__ import annotations

import pytest

from pipeline.outputs import atomic_path, files_aside, folder_aside, write_text


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


def test_a_failed_folder_block_removes_its_partial_folder(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(RuntimeError), folder_aside(out) as tmp:
        (tmp / "model.pt").write_text("half")
        raise RuntimeError("killed mid-write")
    assert list(tmp_path.iterdir()) == []


def test_atomic_path_keeps_the_old_file_when_the_writer_fails(tmp_path):
    path = tmp_path / "sub" / "last.pt"
    write_text(path, "epoch 1")
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        tmp.write_text("epoch 2, half")
        raise RuntimeError("killed mid-write")
    assert path.read_text() == "epoch 1"
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.pt"]


def test_files_aside_moves_all_or_none(tmp_path):
    md, pdf = tmp_path / "report.md", tmp_path / "report.pdf"
    with pytest.raises(RuntimeError), files_aside(md, pdf) as (tmp_md, tmp_pdf):
        tmp_md.write_text("# report")
        raise RuntimeError("the PDF failed")
    assert list(tmp_path.iterdir()) == []
    with files_aside(md, pdf) as (tmp_md, tmp_pdf):
        tmp_md.write_text("# report")
        tmp_pdf.write_bytes(b"%PDF")
    assert md.read_text() == "# report" and pdf.read_bytes() == b"%PDF"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md", "report.pdf"]

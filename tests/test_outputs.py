"""All-or-nothing stage outputs."""

from __future__ import annotations

import errno
from argparse import Namespace
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline import entry, outputs
from pipeline.errors import PipelineError
from pipeline.outputs import atomic_path, files_aside, folder_aside, write_text

ROOT = Path(__file__).resolve().parent.parent


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


def _full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_is_one_message_naming_the_output_and_leaves_the_old_one(tmp_path):
    out = tmp_path / "results" / "run"
    out.mkdir(parents=True)
    (out / "metrics.json").write_text("old " * 1000)
    with pytest.raises(PipelineError, match=r"no space left on the disk holding .*results/run: the stage had"
                       r" written 0.0 MiB .* needs about 0.0 MiB \(the size of the output it replaces\)"), \
            folder_aside(out) as tmp:
        (tmp / "model.pt").write_bytes(b"x" * 100)
        _full_disk()
    assert (out / "metrics.json").read_text().startswith("old ")
    assert list(tmp_path.joinpath("results").iterdir()) == [out]  # no partial folder


def test_a_writer_that_hides_enospc_is_still_a_full_disk_when_the_disk_is_nearly_full(tmp_path, monkeypatch):
    """torch.save into a path reports ENOSPC as a RuntimeError ('unexpected pos'); the free space tells."""
    path = tmp_path / "scratch" / "last.pt"
    monkeypatch.setattr(outputs.shutil, "disk_usage", lambda p: SimpleNamespace(free=1024))
    with pytest.raises(PipelineError, match="scratch/last.pt.* 0.0 MiB is free"), atomic_path(path) as tmp:
        tmp.write_bytes(b"x" * 4096)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    assert list(path.parent.iterdir()) == []


def test_a_stage_on_a_full_disk_prints_one_line_and_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(Path, "write_text", _full_disk)

    def stage(params, args):
        with files_aside(tmp_path / "reports" / "report.md", tmp_path / "reports" / "headline.md") as (md, head):
            md.write_text("# report")

    assert entry.run(stage, Namespace(params=str(ROOT / "params.yaml"), overrides=[])) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no space left on the disk holding" in err and "reports/report.md" in err
    assert list((tmp_path / "reports").iterdir()) == []


def test_enospc_outside_the_writers_is_one_line_too(tmp_path, capsys):
    def stage(params, args):
        with open("/dev/full", "w") as f:
            f.write("x")

    assert entry.run(stage, Namespace(params=str(ROOT / "params.yaml"), overrides=[])) == 2
    assert capsys.readouterr().err.startswith("error: no space left on the disk holding")

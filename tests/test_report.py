"""The report: Markdown and PDF from the aggregate's outputs, the headline first, figures when they exist.

The PDF is checked by extracting its text with pypdf (the table numbers must be there as text) and by rendering
its first page to PNG with poppler's pdftoppm when it is installed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from argparse import Namespace
from pathlib import Path

import pytest
from PIL import Image
from pypdf import PdfReader
from test_aggregate import PAPER, VIT, experiment, make_filters, make_vit

from pipeline.analysis.aggregate import aggregate, write_aggregate
from pipeline.analysis.report import build_report, main, read_inputs, write_report
from pipeline.config import load_params
from pipeline.errors import PipelineError

TITLE = "Structured Initialization for Vision Transformers: reproduction report"


def make_figures(folder: Path, names=("attn_impulse.png", "curves.png")) -> None:
    """Small PNGs and their figures.json, as the figures stage writes them."""
    folder.mkdir(parents=True)
    sections = ["attention", "curves"]
    for name, colour in zip(names, ("steelblue", "darkorange")):
        Image.new("RGB", (400, 200), colour).save(folder / name)
    (folder / "figures.json").write_text(json.dumps([
        {"file": n, "title": f"Figure {n}", "caption": f"caption of {n}", "section": s}
        for n, s in zip(names, sections)]))


def make_inputs(root: Path) -> Path:
    """results/ with tables and summary written by the aggregate, and reports/figures/ with two figures."""
    results = root / "results"
    make_vit(results)
    make_filters(results)
    write_aggregate(aggregate(results, PAPER, experiment()), results / "tables", results / "summary.json")
    make_figures(root / "reports" / "figures")
    return root


@pytest.fixture
def stage_inputs(tmp_path) -> Path:
    """Fresh inputs for a test that changes them."""
    return make_inputs(tmp_path)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(root, report.md, report.pdf), generated once for the tests that only read them (fpdf2 takes seconds)."""
    root = make_inputs(tmp_path_factory.mktemp("report"))
    return (root, *report(root))


def report(root: Path, figures: str = "reports/figures") -> tuple[Path, Path]:
    inp = read_inputs(root / "results/tables", root / "results/summary.json", root / figures)
    return write_report(TITLE, build_report(inp, root / "reports"), root / "reports")


def flatten(outline: list) -> list:
    """pypdf's nested outline (children follow their parent as a list) as one list."""
    return [o for item in outline for o in (flatten(item) if isinstance(item, list) else [item])]


def pdf_text(path: Path) -> str:
    return "\n".join(page.extract_text() for page in PdfReader(path).pages)


def test_markdown_leads_with_the_headline_answer(built):
    text = built[1].read_text()
    first = text.split("## ")[1]  # the first section
    assert first.startswith("Headline")
    assert "did impulse beat default and mimetic? Yes." in first
    assert "84.85 ± 0.49 % final validation top-1 (n=2 seeds)" in first
    assert "95% CI [" in first
    assert text.index("## What was run") < text.index("## Tables") < text.index("## Figures") < text.index(
        "## Claims") < text.index("## How to reproduce")


def test_markdown_links_figures_relatively_in_manifest_order(built):
    text = built[1].read_text()
    assert "![Figure attn_impulse.png](figures/attn_impulse.png)" in text
    assert text.index("figures/attn_impulse.png") < text.index("figures/curves.png")
    assert "### Attention maps" in text and "### Training curves" in text


def test_what_was_run_comes_from_the_runs(built):
    text = built[1].read_text()
    for needle in ("git revision abc1234", "params digest d1g", "test-cpu", "torch 2.14.1", "timm 1.0.31",
                   "ViT runs 32.1 min in total", "missing: 0"):
        assert needle in text.replace("`", ""), needle


def test_pdf_has_the_table_numbers_as_text_and_page_numbers(built):
    root, _, pdf = built
    text = pdf_text(pdf)
    tables = json.loads((root / "results/tables/tables.json").read_text())
    numbers = {cell.replace("**", "").split(" ")[0] for t in tables for row in t["rows"] for cell in row
               if cell[:1].isdigit() or cell.startswith("**")}
    assert len(numbers) > 20
    missing = [n for n in numbers if n not in text]
    assert not missing, f"table numbers not in the PDF text: {missing[:10]}"
    reader = PdfReader(pdf)
    assert f"page 1 of {len(reader.pages)}" in reader.pages[0].extract_text()
    assert sum(len(p.images) for p in reader.pages) == 2  # both figures embedded
    titles = [o.title for o in flatten(reader.outline)]
    assert titles[:3] == [TITLE, "Headline", "What was run"] and "Claims" in titles  # headings are bookmarks


def test_report_without_figures_says_so(stage_inputs):
    shutil.rmtree(stage_inputs / "reports" / "figures")
    md, pdf = report(stage_inputs)
    assert "No figures:" in md.read_text() and "is missing" in md.read_text()
    assert "No figures:" in pdf_text(pdf)


def test_a_listed_but_missing_figure_is_named(stage_inputs):
    (stage_inputs / "reports/figures/curves.png").unlink()
    text = report(stage_inputs)[0].read_text()
    assert "figures/attn_impulse.png" in text and "Listed in figures.json but missing: curves.png" in text


def test_outputs_replace_old_ones_and_leave_no_partial_files(stage_inputs):
    (stage_inputs / "reports" / "report.md").write_text("stale")
    md, pdf = report(stage_inputs)
    assert md.read_text() != "stale" and pdf.read_bytes().startswith(b"%PDF")
    assert not list((stage_inputs / "reports").glob("*.partial"))


def test_missing_aggregate_outputs_name_the_fix(tmp_path):
    with pytest.raises(PipelineError, match="run the aggregate stage first"):
        read_inputs(tmp_path / "results/tables", tmp_path / "results/summary.json", tmp_path / "figures")


def test_not_enough_runs_is_said_in_the_headline(tmp_path):
    make_vit(tmp_path / "results", {a: {0: v[0]} for a, v in VIT.items()})
    agg = aggregate(tmp_path / "results", PAPER, experiment(seeds=(0,), filters=(), sigmas=()))
    write_aggregate(agg, tmp_path / "results/tables", tmp_path / "results/summary.json")
    text = report(tmp_path)[0].read_text()
    assert "Cannot tell yet (fewer than 2 seed pairs)" in text


def test_stage_main_writes_both_files(stage_inputs, repo_root):
    params = load_params(repo_root / "params.yaml")
    args = Namespace(tables=str(stage_inputs / "results/tables"), summary=str(stage_inputs / "results/summary.json"),
                     figures=str(stage_inputs / "reports/figures"), out=str(stage_inputs / "reports"))
    assert main(params, args) == 0
    assert (stage_inputs / "reports/report.md").read_text().startswith(f"# {params.report.title}")


@pytest.mark.skipif(shutil.which("pdftoppm") is None, reason="poppler's pdftoppm is not installed")
def test_first_page_renders_to_png(built, tmp_path):
    subprocess.run(["pdftoppm", "-r", "60", "-png", "-f", "1", "-l", "1", "-singlefile", str(built[2]),
                    str(tmp_path / "page1")], check=True, capture_output=True)
    with Image.open(tmp_path / "page1.png") as im:
        assert im.width > 400 and im.height > im.width  # A4 portrait
        assert len(set(im.convert("L").getdata())) > 10  # text was drawn, not a blank page

"""The report: Markdown and PDF from the aggregate's outputs (page 1: the question, the claims at a glance, what was
run), one caption per figure family, reports/appendix.md with the auditor's tables, reports/headline.md and
`python -m pipeline readme` that copies it.

The PDF is checked by extracting its text with pypdf (the table numbers must be there as text, the claims table on
page 1) and by rendering its first page to PNG with poppler's pdftoppm when it is installed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from argparse import Namespace
from pathlib import Path

import pytest
from PIL import Image
from pypdf import PdfReader
from test_aggregate import PAPER, VIT, experiment, make_filters, make_vit

from pipeline.__main__ import main as cli
from pipeline.analysis import readme
from pipeline.analysis.aggregate import aggregate, write_aggregate
from pipeline.analysis.claims_report import (
    SET_RUN,
    claim_regime,
    claims_markdown,
    in_detail,
    table_profile,
    verdict_cell,
)
from pipeline.analysis.coverage import coverage_table, load_coverage, run_verdicts
from pipeline.analysis.document import Paragraph, block_markdown, table_markdown, to_markdown
from pipeline.analysis.fidelity import fidelity_table, load_fidelity
from pipeline.analysis.pdf import render_pdf
from pipeline.analysis.report import (
    build_appendix,
    build_report,
    headline_markdown,
    main,
    read_inputs,
    write_report,
)
from pipeline.errors import PipelineError
from pipeline.params import load_params

TITLE = "Structured Initialization for Vision Transformers: reproduction report"
FIGURES = {"forest": [("forest_1.png", "grey")],
           "attention": [("attn_impulse.png", "steelblue"), ("attn_default.png", "seagreen")],
           "curves": [("curves.png", "darkorange")]}


def make_figures(folder: Path) -> None:
    """Small PNGs and their figures.json (two families), as the figures stage writes them."""
    folder.mkdir(parents=True)
    figures = []
    for family, entries in FIGURES.items():
        for name, colour in entries:
            Image.new("RGB", (400, 200), colour).save(folder / name)
            figures.append({"file": name, "family": family, "variant": "vit", "title": f"Figure {name}",
                            "note": f"note of {name}"})
    families = [{"name": f, "section": "results" if f == "forest" else f, "title": f"Family {f}",
                 "caption": f"the one caption of {f}"} for f in FIGURES]
    (folder / "figures.json").write_text(json.dumps({"families": families, "figures": figures}))


def make_inputs(root: Path, vit: dict = VIT) -> Path:
    """results/tables written by the aggregate, and reports/figures/ with two figure families."""
    results = root / "results"
    make_vit(results, vit)
    make_filters(results)
    write_aggregate(aggregate(results, PAPER, experiment()), results / "tables", results / "summary.json")
    make_figures(root / "reports" / "figures")
    return root


@pytest.fixture
def stage_inputs(tmp_path) -> Path:
    """Fresh inputs for a test that changes them."""
    return make_inputs(tmp_path)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, ...]:
    """(root, report.md, report.pdf, headline.md, claims.md, appendix.md), generated once for the tests that only
    read them."""
    root = make_inputs(tmp_path_factory.mktemp("report"))
    return (root, *report(root))


def report(root: Path, figures: str = "reports/figures") -> tuple[Path, ...]:
    inp = read_inputs(root / "results/tables", root / figures, PAPER)
    return write_report(TITLE, build_report(inp, root / "reports"), headline_markdown(inp), root / "reports",
                        claims_markdown(inp.claims, inp.ran, table_profile(inp.ran.get("profile"))),
                        build_appendix(inp, root / "reports"))


def markdown(root: Path) -> str:
    """report.md's text as `report` writes it, without rendering the PDF (seconds each): for the tests that read
    only the Markdown."""
    return to_markdown(TITLE, build_report(read_inputs(root / "results/tables", root / "reports/figures", PAPER),
                                           root / "reports"))


def appendix(root: Path, tables: str = "results/tables") -> str:
    """reports/appendix.md's text as `report` writes it."""
    return to_markdown(TITLE, build_appendix(read_inputs(root / tables, root / "reports/figures", PAPER),
                                             root / "reports"))


def flatten(outline: list) -> list:
    """pypdf's nested outline (children follow their parent as a list) as one list."""
    return [o for item in outline for o in (flatten(item) if isinstance(item, list) else [item])]


def pdf_text(path: Path) -> str:
    return "\n".join(page.extract_text() for page in PdfReader(path).pages)


def test_markdown_reads_top_down_from_the_question(built):
    text = built[1].read_text()
    page1 = text.split("## Results")[0]
    assert "**The question: did the method under study, impulse init, beat its baselines (default, mimetic)?**" in page1
    # the fake runs' curves rise to their last epoch: each arm is labelled still rising beside its number
    assert ("**fashion_mnist: Yes.** impulse reached 84.85 ± 0.49 % final validation top-1 (n = 2 seeds, still"
            " rising)") in page1
    assert "; impulse − default +4.55 pts (default still rising) [" in page1
    assert "], supported; impulse − mimetic +2.55 pts (mimetic still rising) [" in page1
    glance = page1.split("**The claims of the papers at a glance**")[1]
    claims = json.loads((built[0] / "results/tables/claims.json").read_text())["claims"]
    for c in claims:  # every claim with its four-word verdict, its regime and its one line of evidence
        assert (f"| {c['id']} | {c['short']} | {verdict_cell(c)} | {claim_regime(c)} |"
                f" {c['summary'].replace('|', '/')}") in glance
    assert "**The method under study against each baseline**" in page1 and "**What was run:** profile test" in page1
    order = ["## Results", "### Every planned comparison", "### The claims in detail",
             "### Reproduction against the published numbers", "### Training curves", "### Attention maps",
             "### Filter study (ConvMixer)", "## What was run in full", "## How to reproduce",
             "## Method: how the verdicts are reached", "## The plan's history", "## Coverage, fidelity and every run"]
    assert [text.index(h) for h in order] == sorted(text.index(h) for h in order)
    headings = [line for line in text.splitlines() if line.startswith("#")]
    assert sum("Method: how the verdicts" in h for h in headings) == 1  # printed once
    # the auditor's material is in appendix.md, once, and not in the report
    more = built[5].read_text()
    assert more.startswith(f"# {TITLE}: appendix\n")
    for heading in ("## The analysis plan", "## The plan's history", "## Every run", "## Reproducibility across CPUs"):
        assert more.count(f"\n{heading}\n") == 1, heading
    for table in ("**The analysis plan (paper/plan.yaml)**", "**Every run of this experiment**",
                  "**Fidelity to the official code (paper/fidelity.yaml)**",
                  "**Coverage of the papers' tables and figures (paper/coverage.yaml)**"):
        assert table not in text, table


def test_the_method_section_prints_the_plan_and_a_plan_change_shows(built, stage_inputs):
    """The report says how verdicts are reached; appendix.md holds the plan they follow, which follows the file."""
    text = built[1].read_text()
    method = section(text, "Method: how the verdicts are reached")
    assert "Holm's step-down" in method and "two one-sided tests (TOST)" in method and "α = 0.025" in method
    plan = section(built[5].read_text(), "The analysis plan")
    rows = [line for line in plan.splitlines() if line.startswith("| ")]
    assert f"paper/plan.yaml: {len(rows) - 1} comparisons" in method and "reports/appendix.md" in method
    assert "| 6 | vit_convmixer | ViT impulse − ConvMixer learned > -2 | +0 | 6 | 0.025 | welch | 2 / 2 (seeds /" \
           " filter_study.seeds) |" in plan
    assert "| 5a | random | random − learned inside ±2 | +0 | 5a | 0.025 | paired |" in plan
    assert "Claim 7 (structural) thresholds: peak_min 0.9, flat_factor 2" in plan
    paper = stage_inputs / "paper"
    shutil.copytree(PAPER, paper)
    plan = paper / "plan.yaml"
    plan.write_text(plan.read_text().replace("margin: 2.0, effect: 0.0,\n", "margin: 3.0, effect: 0.0,\n", 1))
    results = stage_inputs / "results"
    write_aggregate(aggregate(results, paper, experiment()), results / "tables", results / "summary.json")
    assert "| 5a | random | random − learned inside ±3 |" in appendix(stage_inputs)


def test_a_claim_this_run_tests_has_a_section_and_each_other_claim_one_row(built):
    """A claim with a verdict, or with comparisons to show seed by seed, has its section; one that is not tested
    here is a row of one table (what the papers publish, what the run lacks): its section said no more."""
    text = section(built[1].read_text(), "Results")
    claims = json.loads((built[0] / "results/tables/claims.json").read_text())["claims"]
    shown = [c for c in claims if in_detail(c)]
    assert shown and len(shown) < len(claims)
    assert in_detail({"verdict": "not tested", "comparisons": [{"label": "an arm did not train"}]})
    for c in claims:
        heading = f"#### Claim {c['id']}: {c['verdict']}\n"
        row = table_markdown(["#"], [[c["id"], c["short"], c["published"].rstrip("."), "; ".join(c["evidence"])]])
        if c in shown:
            assert heading in text and c["claim"] in text and f"| {c['id']} | {c['short']} |" not in text, c["id"]
        else:
            assert heading not in text and row.splitlines()[-1] in text, c["id"]


def test_what_was_run_comes_from_the_runs_and_cites_the_data(built):
    text = built[1].read_text().replace("`", "")
    for needle in ("git revision abc1234", "params digest d1g", "test-cpu", "torch 2.14.1", "timm 1.0.31",
                   "vit = 3 heads, 470,000 parameters (timm's vit_tiny_patch16_224 class)", "ViT 32.1 min",
                   "missing: 0",
                   "fashion_mnist (Xiao, Rasul, Vollgraf 2017, arXiv:1708.07747; licence: MIT)"):
        assert needle in text, needle


def test_each_figure_family_has_one_caption_before_its_figures(built):
    text = built[1].read_text()
    assert text.count("the one caption of attention") == 1 and text.count("the one caption of curves") == 1
    caption, first, second = (text.index(s) for s in ("the one caption of attention", "figures/attn_impulse.png",
                                                        "figures/attn_default.png"))
    assert text.index("the one caption of curves") < text.index("figures/curves.png") < caption < first < second
    assert "![Figure attn_impulse.png](figures/attn_impulse.png)\n\nnote of attn_impulse.png" in text
    assert "### Attention maps" in text and "### Training curves" in text


def test_pdf_page_1_holds_the_claims_table(built):
    reader = PdfReader(built[2])
    page1 = reader.pages[0].extract_text()
    assert "The claims of the papers at a glance" in page1 and f"page 1 of {len(reader.pages)}" in page1
    claims = json.loads((built[0] / "results/tables/claims.json").read_text())["claims"]
    assert claims[-1]["short"].split()[0] in page1 and page1.count("not tested") >= 4  # the last row is on page 1
    titles = [o.title for o in flatten(reader.outline)]
    assert titles[:2] == [TITLE, "Results"] and "The claims in detail" in titles  # headings are bookmarks
    assert "The method under study against each baseline" in page1


def test_pdf_has_the_table_numbers_as_text_and_both_figures(built):
    """Every table's numbers as text: in the PDF, or, for the tables of every run, in appendix.md."""
    root, _, pdf, *_ = built
    text = pdf_text(pdf)
    tables = json.loads((root / "results/tables/tables.json").read_text())

    def numbers(section: str, inside: bool) -> set[str]:
        return {cell.replace("**", "").split(" ")[0] for t in tables if (t["section"] == section) == inside
                for row in t["rows"] for cell in row if cell[:1].isdigit() or cell.startswith("**")}

    assert len(numbers("appendix", False)) > 20 and numbers("appendix", True)
    missing = [n for n in numbers("appendix", False) if n not in text]
    assert not missing, f"table numbers not in the PDF text: {missing[:10]}"
    more = built[5].read_text()
    assert not [n for n in numbers("appendix", True) if n not in more]
    assert sum(len(p.images) for p in PdfReader(pdf).pages) == 4  # every figure embedded
    assert text.count("the one caption of attention") == 1


def test_headline_md_is_the_question_the_glance_table_and_the_headline_table(built):
    head = built[3].read_text()
    report_md = built[1].read_text()
    assert head.startswith("**The question:") and "**The claims of the papers at a glance**" in head
    assert "**The method under study against each baseline**" in head
    assert "params digest `d1g`, git revision abc1234" in head
    assert ("**What was run:** profile test; vit = 3 heads, 470,000 parameters (timm's vit_tiny_patch16_224 class); on"
            " fashion_mnist;"
            " arms impulse, default, mimetic; seeds [0, 1]; 5000 / 2000 training / validation images; 8 epochs;"
            " 139.1 min of training in total (the runs' wall times) on test-cpu.") in head
    glance = head.split("**The claims of the papers at a glance**")[1].split("**What was run:**")[0]
    assert glance.strip() in report_md  # the same table, rendered by the same code


def marked_readme(path: Path, *names: str) -> Path:
    """A README with the blocks `names` between their markers, each holding stale text."""
    blocks = "".join(f"## {n}\n\n{readme.markers(n)[0]}\nold {n}\n{readme.markers(n)[1]}\n\n" for n in names)
    path.write_text(f"# Project\n\n{blocks}## More\n")
    return path


def test_claims_md_is_the_laptop_sets_table_or_says_not_run_yet(built):
    """reports/claims.md: every claim with its verdict, the profile and revision it came from and its deciding
    comparisons with intervals, from a run of the plan's confirmatory profile; otherwise 'not run yet'."""
    assert built[4].read_text().startswith("**Every claim in one table: not run yet.** Profile `laptop`")
    assert [table_profile(p) for p in ("laptop", "laptop-rest", "cpu", "cpu-all", None)] == [
        "laptop", "laptop-rest", "laptop", "laptop", "laptop"]  # a laptop-set run's own table; else the set's first
    inp = read_inputs(built[0] / "results/tables", built[0] / "reports/figures", PAPER)
    text = claims_markdown(inp.claims, inp.ran | {"profile": "cpu-all"}, "cpu-all")
    assert text.startswith(SET_RUN + " `cpu-all`, one run.**")
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert rows[0] == ("| # | Claim | Verdict | Regime | Plan | Arms (mean top-1, %) | Comparisons (95% CI, pts)"
                       " |")
    assert len(rows) == 1 + len(inp.claims["claims"]) and "revision(s) abc1234;" in text.splitlines()[0]
    counts = sum(f"{sum(c['verdict'] == v for c in inp.claims['claims'])} {v}" in text.splitlines()[0]
                 for v in ("supported", "inconclusive", "not tested"))
    assert counts >= 1 and "images · " in rows[1]  # the count of verdicts above, each claim's regime in its row
    one = next(c for c in inp.claims["claims"] if c["id"] == "1")
    assert f"| {verdict_cell(one)} |" in rows[1] and f"{one['comparisons'][0]['label']}:" in rows[1]
    first = one["comparisons"][0]  # each arm's accuracy, beside the differences: a − b is their difference
    arms = rows[1].split(" | ")[5]
    assert f"{first['a']} {first['arm_means'][0]:.2f}" in arms and f"{first['b']} {first['arm_means'][1]:.2f}" in arms
    assert first["arm_means"][0] - first["arm_means"][1] == pytest.approx(first["mean"])
    assert all("[" in r for r in rows[1:] if "| **supported**" in r or "| **inconclusive**" in r)
    # two seeds a pair: a cell's cross-CPU point (bench/cross_cpu.yaml) moves the mean by a point, enough to turn it
    assert one["edge_verdict"] == "inconclusive" and "(at the edge: on another CPU, inconclusive)" in rows[1]


def test_readme_takes_the_claims_block_from_a_set_run_only(built, tmp_path, monkeypatch, capsys):
    readme_md = marked_readme(tmp_path / "README.md", "claims", "headline", "coverage", "fidelity", "papers")
    claims_md = tmp_path / "claims.md"
    args = ["readme", "--readme", str(readme_md), "--headline", str(built[3]), "--paper", str(PAPER), "--tables",
            str(built[0] / "results/tables"), "--claims", str(claims_md)]
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    claims_md.write_text(built[4].read_text())  # 'not run yet': another profile's run leaves the block alone
    assert cli(args) == 0 and "old claims" in readme_md.read_text()
    claims_md.write_text(f"{SET_RUN} `cpu-all`, one run.**\n\n| # | table |\n")
    assert cli([*args, "--check"]) == 1 and "the claims block differs" in capsys.readouterr().err
    assert cli(args) == 0 and "| # | table |" in readme_md.read_text() and "old claims" not in readme_md.read_text()
    assert cli([*args, "--check"]) == 0


def test_readme_command_splices_and_checks_the_headline(built, tmp_path, monkeypatch, capsys):
    readme_md = marked_readme(tmp_path / "README.md", "headline", "coverage", "fidelity", "papers")
    args = ["readme", "--readme", str(readme_md), "--headline", str(built[3]), "--paper", str(PAPER), "--tables",
            str(built[0] / "results/tables"), "--claims", str(built[4])]  # a run of profile 'test': not the set's
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)  # the CLI reads params.yaml
    assert cli([*args, "--check"]) == 1 and "differs" in capsys.readouterr().err
    assert cli(args) == 0
    text = readme_md.read_text()
    assert "old headline" not in text and built[3].read_text().strip() in text
    assert text.startswith("# Project") and text.endswith("## More\n")
    assert cli([*args, "--check"]) == 0
    assert cli(args) == 0 and readme_md.read_text() == text  # idempotent
    # another run of the same code and params: its own wall time and clone's revision, the same numbers
    assert re.search(r"[\d.]+ min of training in total", text) and "git revision" in text
    other = re.sub(r"[\d.]+ min of training in total", "99.9 min of training in total", text)
    readme_md.write_text(re.sub(r"git revision \S+\)", "git revision 0123456789abcdef)", other))
    assert readme_md.read_text() != text and cli([*args, "--check"]) == 0
    readme_md.write_text(text.replace("params digest `", "params digest `0"))
    assert cli([*args, "--check"]) == 1
    readme_md.write_text(text)
    marked_readme(readme_md, "headline", "coverage", "papers")
    assert cli(args) == 2 and "the fidelity markers are missing" in capsys.readouterr().err
    readme_md.write_text("# no markers\n")
    assert cli(args) == 2 and "headline markers are missing" in capsys.readouterr().err
    assert cli(["readme", "--readme", str(readme_md), "--headline", str(tmp_path / "none.md")]) == 2
    assert "run the report stage first" in capsys.readouterr().err


def test_report_without_figures_says_so(stage_inputs):
    shutil.rmtree(stage_inputs / "reports" / "figures")
    md, pdf, *_ = report(stage_inputs)
    assert "No figures:" in md.read_text() and "is missing" in md.read_text()
    assert "No figures:" in pdf_text(pdf)


def test_a_listed_but_missing_figure_is_named(stage_inputs):
    (stage_inputs / "reports/figures/curves.png").unlink()
    text = markdown(stage_inputs)
    assert "figures/attn_impulse.png" in text and "Listed in figures.json but missing: curves.png" in text
    assert "the one caption of curves" not in text  # a family without figures has no caption


def test_the_attention_maps_on_real_images_go_to_the_appendix(stage_inputs):
    """The report keeps the pseudo-input maps (what claim 7 reads) and says where the real-batch ones are."""
    listing = stage_inputs / "reports/figures/figures.json"
    figures = json.loads(listing.read_text())
    for f in figures["figures"]:
        if f["family"] == "attention":
            f["input"] = "real" if f["file"] == "attn_default.png" else "pseudo"
    listing.write_text(json.dumps(figures))
    text, more = markdown(stage_inputs), appendix(stage_inputs)
    assert "figures/attn_impulse.png" in text and "figures/attn_default.png" not in text
    assert "The same on a real validation batch: 1 figure in reports/appendix.md ('Figures on real images')." in text
    assert "figures/attn_default.png" in section(more, "Figures on real images")
    assert "figures/attn_impulse.png" not in more and "the one caption of attention" in more


def test_outputs_replace_old_ones_and_leave_no_partial_files(stage_inputs):
    (stage_inputs / "reports" / "report.md").write_text("stale")
    md, pdf, head, _, more = report(stage_inputs)
    assert md.read_text() != "stale" and pdf.read_bytes().startswith(b"%PDF") and head.is_file()
    assert more.read_text().startswith(f"# {TITLE}: appendix")
    assert not list((stage_inputs / "reports").glob(".*partial"))


def test_missing_aggregate_outputs_name_the_fix(tmp_path):
    with pytest.raises(PipelineError, match="run the aggregate stage first"):
        read_inputs(tmp_path / "results/tables", tmp_path / "figures")


def test_one_seed_cannot_tell_yet(tmp_path):
    make_vit(tmp_path / "results", {a: {0: v[0]} for a, v in VIT.items()})
    agg = aggregate(tmp_path / "results", PAPER, experiment(seeds=(0,), filter_study=dict(filters=(), sigmas=())))
    write_aggregate(agg, tmp_path / "results/tables", tmp_path / "results/summary.json")
    text = markdown(tmp_path)
    assert "Cannot tell yet (fewer than 2 seed pairs)" in text


def test_no_runs_yet_gives_an_honest_headline(tmp_path):
    agg = aggregate(tmp_path / "results", PAPER, experiment())
    write_aggregate(agg, tmp_path / "results/tables", tmp_path / "results/summary.json")
    head = headline_markdown(read_inputs(tmp_path / "results/tables", tmp_path / "reports/figures", PAPER))
    assert "**No ViT runs of this experiment were found** (26 of the experiment's runs are missing)" in head
    assert "| **not tested** |" in head and "±" not in head and " min" not in head  # no number no run produced
    assert ("**What was run:** nothing yet; params.yaml plans profile test; vit = 3 heads (timm's vit_tiny_patch16_224"
            " class);") in head


def test_stage_main_writes_its_files(stage_inputs, repo_root):
    params = load_params(repo_root / "params.yaml")
    args = Namespace(tables=str(stage_inputs / "results/tables"), figures=str(stage_inputs / "reports/figures"),
                     out=str(stage_inputs / "reports"), paper=str(repo_root / "paper"))
    assert main(params, args) == 0
    assert (stage_inputs / "reports/report.md").read_text().startswith(f"# {params.report.title}")
    assert (stage_inputs / "reports/headline.md").is_file() and (stage_inputs / "reports/appendix.md").is_file()


@pytest.mark.skipif(shutil.which("pdftoppm") is None, reason="poppler's pdftoppm is not installed")
def test_first_page_renders_to_png(built, tmp_path):
    subprocess.run(["pdftoppm", "-r", "60", "-png", "-f", "1", "-l", "1", "-singlefile", str(built[2]),
                    str(tmp_path / "page1")], check=True, capture_output=True)
    with Image.open(tmp_path / "page1.png") as im:
        assert im.width > 400 and im.height > im.width  # A4 portrait
        grey = im.convert("L")
        rows = [sum(1 for x in range(grey.width) if grey.getpixel((x, y)) < 128) for y in range(grey.height)]
        inked = sum(1 for r in rows if r) / grey.height
        assert inked > 0.3  # text over the page, not a near-blank page 1


def section(text: str, heading: str) -> str:
    return text.split(f"## {heading}\n")[1].split("\n## ")[0]


def test_the_report_names_the_coverage_and_fidelity_pages_instead_of_reprinting_them(built):
    """docs/coverage.md and docs/fidelity.md carry the tables (`readme`); the report names them and counts their
    rows from the same paper/*.yaml, with the run's verdicts in the coverage rows where the run's profile is one."""
    text = built[1].read_text()
    coverage, fidelity = load_coverage(PAPER), load_fidelity(PAPER)
    where = section(text, "Coverage, fidelity and every run")
    assert f"docs/coverage.md, {len(coverage)} tables and figures" in where
    differ = sum(e.differs != "nothing" for e in fidelity)
    assert f"docs/fidelity.md, {len(fidelity)} arms and experiments, {differ} with a difference" in where
    assert "`python -m pipeline readme`" in where and "reports/appendix.md" in where
    assert "| [NeurIPS] |" not in text and "The same:" not in text and "Why we differ" not in text
    claims = json.loads((built[0] / "results/tables/claims.json").read_text())
    rows = block_markdown(coverage_table(coverage, "test", run_verdicts(claims)))
    for e in coverage:  # the run's profile ('test') is no row's: every verdict says so
        claim = ", ".join(e.claims) or "none"
        assert f"| [{e.paper}] | {e.item} | {e.title} | {e.status} |" in rows, e.id
        assert f"| {claim} | {'not run' if e.claims else 'no claim'} |" in rows, e.id
    assert rows.count("\n| [") == len(coverage) and "Verdict (test)" in rows
    rows = block_markdown(fidelity_table(fidelity))
    assert all(f"| {e.experiment} | {e.source} |" in rows for e in fidelity if "|" not in e.experiment + e.source)
    titles = [o.title for o in flatten(PdfReader(built[2]).outline)]
    assert "Coverage, fidelity and every run" in titles


def test_pdf_prints_flags_and_names_as_written(tmp_path):
    """fpdf2 reads -- as underline and __ as italics; the report's only markup is **bold**."""
    flags = "run `python bench/bench_verdicts.py --skew` or set my__var"
    render_pdf(TITLE, [Paragraph(f"**A flag**: {flags}")], tmp_path, tmp_path / "r.pdf")
    text = pdf_text(tmp_path / "r.pdf").replace("\n", " ")
    assert "--skew" in text and "my__var" in text and "**" not in text


def test_readme_check_catches_an_edited_fidelity_table(built, tmp_path, monkeypatch, capsys):
    paper = tmp_path / "paper"
    shutil.copytree(PAPER, paper)
    readme_md = marked_readme(tmp_path / "README.md", "headline", "coverage", "fidelity", "papers")
    args = ["readme", "--readme", str(readme_md), "--headline", str(built[3]), "--paper", str(paper), "--tables",
            str(tmp_path / "no-run"), "--claims", str(built[4])]  # not the working tree's reports/claims.md
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    assert cli(args) == 0
    text = readme_md.read_text()
    assert "| Verdict (no run) |" in text and "no run: results/tables/claims.json was not found" in text
    assert all(f"| {e.experiment} |" in text for e in load_fidelity(paper) if "|" not in e.experiment)
    fid = paper / "fidelity.yaml"
    fid.write_text(fid.read_text().replace("effect: \"not measured\"", "effect: \"+1.0 pts (a new measurement)\"", 1))
    assert cli([*args, "--check"]) == 1
    err = capsys.readouterr().err
    assert "the fidelity block differs from paper/fidelity.yaml" in err and "coverage block" not in err


def test_the_report_states_assumptions_per_seed_differences_and_the_plans_history(built, tmp_path):
    """Method: the assumptions (normal seed effects, teachers fixed); each claim's comparisons seed by seed; the
    plan's history with post-hoc changes labelled: counted in the report with the ones behind its verdicts, each in
    appendix.md with each claim's plan line; in the glance table and the claim, the claim's plan in a word."""
    text = built[1].read_text()
    method = section(text, "Method: how the verdicts are reached")
    assert "**Assumptions.**" in method and "normal distribution" in method and "teachers are fixed" in method
    assert "Not recorded" in section(text, "The plan's history")  # aggregated without a repository
    assert "Not recorded" in section(built[5].read_text(), "The plan's history")
    claims = json.loads((built[0] / "results/tables/claims.json").read_text())
    first = claims["claims"][0]["comparisons"][0]
    per_seed = ", ".join(f"{s}: {v:+.2f}" for s, v in zip(first["seeds"], first["per_seed"]))
    assert "**Claim 1: each comparison seed by seed**" in text and per_seed in text
    change = {"commit": "f3db8e6" + "0" * 33, "date": "2026-11-23T02:23:18+00:00", "file": "params.yaml",
              "claims": ["1"], "what": "cpu (params.yaml): seeds [0, 1, 2] -> [0, 1, 2, 3, 4]", "kind": "verdict",
              "read_before": "claim 1: 2026-11-22 (e621789)", "post_hoc": True, "after_run": False}
    claims["plan"]["history"] = {"available": True, "changes": [change], "first_results": {},
                                 "run": {"revision": "abc1234", "date": "2026-11-25T00:00:00+00:00"},
                                 "confirmatory": {"profile": "cpu-all", "seeds": [10, 11, 12], "named": "2026-11-26",
                                                  "used_before": [], "holds": False}}
    for c in claims["claims"]:
        c["plan"] = {"post_hoc": [change] if c["id"] == "1" else [], "after_run": [], "confirmatory": False}
    tables = tmp_path / "tables"
    shutil.copytree(built[0] / "results/tables", tables)
    (tables / "claims.json").write_text(json.dumps(claims))
    inp = read_inputs(tables, built[0] / "reports/figures", PAPER)
    md = to_markdown(TITLE, build_report(inp, tmp_path))
    summary = section(md, "The plan's history").strip()
    assert summary.startswith("1 change of paper/plan.yaml and of the seed lists from 2026-11-23 to 2026-11-23 (1 a"
                              " verdict may depend on), 1 of them post hoc for a claim they touch; 0 made after this"
                              " run's revision abc1234 (2026-11-25).")
    assert "this run is not (its profile or seed lists are not the confirmatory ones)" in summary
    assert "| 2026-11-23 | f3db8e6 | params.yaml | cpu (params.yaml): seeds [0, 1, 2] -> [0, 1, 2, 3, 4] | 1 |" \
           " claim 1: 2026-11-22 (e621789) |  |" in summary  # claim 1 is tested here: its post-hoc change is shown
    history = section(to_markdown(TITLE, build_appendix(inp, Path("reports"))), "The plan's history")
    assert "| 2026-11-23 | f3db8e6 | params.yaml | 1 | cpu (params.yaml): seeds [0, 1, 2] -> [0, 1, 2, 3, 4] |" \
           " verdict | **post hoc**: after claim 1: 2026-11-22 (e621789) |  |" in history
    assert "this run is not (its profile or seed lists are not the confirmatory ones)" in history
    assert "- Claim 1: post hoc: 2026-11-23 f3db8e6 (params.yaml: cpu (params.yaml): seeds" in history
    glance = md.split("The claims of the papers at a glance")[1].split("**What was run:**")[0]
    assert "| # | Claim | Verdict | Regime | Plan | Evidence |" in glance and "| post hoc (1) |" in glance
    assert "- Plan: post hoc (1); its changes: 'The plan's history'" in section(md, "Results")
    assert "Plan: post hoc: 2026-11-23" not in md  # the change by change line is appendix.md's


def test_readme_writes_each_block_into_the_docs_page_that_holds_its_markers(built, tmp_path, monkeypatch, capsys):
    readme_md = marked_readme(tmp_path / "README.md", "headline")
    (tmp_path / "docs").mkdir()
    pages = {n: marked_readme(tmp_path / "docs" / f"{n}.md", n) for n in ("coverage", "fidelity", "papers")}
    args = ["readme", "--readme", str(readme_md), "--headline", str(built[3]), "--paper", str(PAPER), "--tables",
            str(built[0] / "results/tables"), "--claims", str(built[4])]
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    assert cli(args) == 0 and cli([*args, "--check"]) == 0
    assert "old headline" not in readme_md.read_text() and "old papers" not in pages["papers"].read_text()
    assert "| Paper | Item |" in pages["coverage"].read_text() and "| Experiment |" in pages["fidelity"].read_text()
    papers = pages["papers"].read_text()
    assert "[arXiv 2505.19985](https://arxiv.org/abs/2505.19985)" in papers and "github.com/osiriszjq" in papers
    assert "| 1 | Small datasets (ViT-T): impulse > mimetic > default" in papers and "| n/p | n/p |" in papers
    pages["papers"].write_text(pages["papers"].read_text().replace("91.76", "91.77"))
    assert cli([*args, "--check"]) == 1 and "docs/papers.md: the papers block differs" in capsys.readouterr().err


def test_the_readme_and_docs_point_nowhere_outside_the_repository(repo_root):
    for page in [repo_root / "README.md", *sorted((repo_root / "docs").glob("*.md"))]:
        text = page.read_text()
        assert "../shared" not in text and "shared/" not in text, page
        for target in re.findall(r"\]\(([^)#]+)", text):
            if not target.startswith("http"):
                assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"


def test_the_report_says_what_is_bit_identical_across_cpus_from_the_bench(tmp_path):
    from pipeline.analysis.reproducibility import cross_cpu_blocks

    missing = "\n".join(map(block_markdown, cross_cpu_blocks({})))
    assert "Not measured here" in missing and "bit-identical on one CPU code path and thread count" in missing
    same = {"differ": 0, "total": 10, "max_abs": 0.0, "max_rel": 0.0}
    data = {"paths": {"native": {}, "avx2": {"ATEN_CPU_CAPABILITY": "avx2"}},
            "remedies": {"MKL_CBWR": {"MKL_CBWR": "COMPATIBLE"}},
            "init": {"command": "python bench/bench_cross_cpu.py init", "date": "2026-11-26", "threads": 1,
                     "cpu": "Test CPU", "torch": "2.14.1", "results": {
                         "impulse avx2": same | {"differ": 2, "max_abs": 1e-9}, "impulse avx2+MKL_CBWR": same}},
            "train": {"command": "python bench/bench_cross_cpu.py train", "date": "2026-11-26", "threads": 1,
                      "cpu": "Test CPU", "torch": "2.14.1", "results": {"mimetic/2": {
                          "top1": {"native": 0.548, "avx2": 0.558}, "seconds": {"native": 10, "avx2": 11},
                          "spread_pts": 1.0, "final_weights": {"avx2 vs native": same | {"differ": 9}}}}}}
    text = "\n".join(map(block_markdown, cross_cpu_blocks(data)))
    assert "impulse: AVX2 2 of 10 float32 entries differ (largest difference 1.0e-09)" in text
    assert "With MKL_CBWR=COMPATIBLE on every path: impulse: AVX2 bit-identical" in text
    assert "mimetic seed 2: final top-1 54.80 % on native; 55.80 % on avx2; spread over the paths 1.00 pts" in text
    assert "`python bench/bench_cross_cpu.py train` (2026-11-26)" in text and "Test CPU" in text


def test_the_headline_says_what_its_design_measures_from_the_plan(built, tmp_path):
    """paper/plan.yaml's confirmatory entry may say what its design measures and cannot decide (from its pilot);
    the headline prints it under the answers for that profile's run, and nothing for another profile's."""
    from pipeline.analysis.analysis_plan import load_confirmatory

    (tmp_path / "plan.yaml").write_text("confirmatory:\n- profile: test\n  seeds: [0, 1]\n  measures: >-\n"
                                        "    early speed as much as\n    data efficiency\n")
    entry = load_confirmatory(tmp_path, "test")
    assert entry.measures == "early speed as much as data efficiency"
    inp = read_inputs(built[0] / "results/tables", built[0] / "reports/figures", PAPER)
    head = headline_markdown(inp, entry.measures)
    assert ("**What this design measures** (paper/plan.yaml, from its pilot): early speed as much as data"
            " efficiency") in head.split("**The method under study against each baseline**")[0]
    assert "What this design measures" not in headline_markdown(inp)
    (tmp_path / "plan.yaml").write_text("confirmatory:\n- profile: test\n  seeds: [0]\n  measures: [1]\n")
    with pytest.raises(PipelineError, match="measures must be a sentence"):
        load_confirmatory(tmp_path)


def test_a_reproduction_made_after_a_plan_change_checks_equal_but_a_verdict_does_not():
    """The plan column reads the plan's changes against the run's revision: the committed run's "post hoc (8)" is a
    later reproduction's "confirmatory (...all before this run)", the same numbers (`readme.RUN_FACTS`)."""
    committed = ("| 3 | Gains grow | **not tested** | – | post hoc (8) (changed since this run) | needs runs |\n"
                 "| 5a | ConvMixer | **supported** | 2,000 images | exploratory | impulse − learned +0.1 |")
    later = ("| 3 | Gains grow | **not tested** | – | confirmatory (8 post-hoc revisions, all before this run) |"
             " needs runs |\n"
             "| 5a | ConvMixer | **supported** | 2,000 images | confirmatory | impulse − learned +0.1 |")
    assert readme.comparable(committed) == readme.comparable(later)
    assert readme.comparable(committed) != readme.comparable(later.replace("**supported**", "**inconclusive**"))
    assert readme.comparable(committed) != readme.comparable(later.replace("+0.1", "+0.2"))


def test_figures_the_page_already_shrinks_are_set_two_to_a_row(tmp_path):
    """Attention maps and curves, which the page height or their pixels shrink anyway, go two to a row; a wide
    figure (the forest plot), whose labels would shrink, keeps the page width."""
    from pipeline.analysis.document import FigureBlock
    from pipeline.analysis.pdf import ReportPDF, _pairs

    Image.new("RGB", (1600, 1300), "steelblue").save(tmp_path / "square.png")
    Image.new("RGB", (1500, 650), "grey").save(tmp_path / "wide.png")
    square, wide = FigureBlock("square.png", "A square figure"), FigureBlock("wide.png", "A wide figure")
    pdf = ReportPDF(TITLE)
    pdf.add_page()
    assert _pairs(pdf, square, square, tmp_path) and not _pairs(pdf, wide, wide, tmp_path)
    assert not _pairs(pdf, square, wide, tmp_path) and not _pairs(pdf, square, Paragraph("text"), tmp_path)
    six = []
    for k in range(6):
        Image.new("RGB", (1600, 1300), (40 * k, 90, 160)).save(tmp_path / f"square{k}.png")
        six.append(FigureBlock(f"square{k}.png", f"Square figure {k}"))
    render_pdf(TITLE, six, tmp_path, tmp_path / "six.pdf")  # alone, two fit a page: three pages
    pages = PdfReader(tmp_path / "six.pdf").pages
    assert len(pages) == 1 and len(pages[0].images) == 6

"""`python -m pipeline report`: reports/report.md and reports/report.pdf, what a researcher reads after `dvc repro`.

Built only from the aggregate's outputs (results/tables/: tables.json, claims.json, provenance.json;
results/summary.json) and the figures stage's reports/figures/figures.json, in this order:

1. the headline: did the method under study (params `init`) beat each baseline here, with n, mean ± std, the
   paired difference over seeds and its confidence interval;
2. what was run: profile, params digest, git revision, model, data, hardware, library versions, wall times,
   missing runs, and every run;
3. the tables (each beside the published numbers of paper/ where they exist), 4. the figures (those that exist,
   in figures.json's order; the report says so when there are none), 5. the claims of paper.md 2.10 with
   their verdicts, 6. how to reproduce.

The content is built once as blocks (`pipeline.analysis.document`) and rendered to Markdown and, with fpdf2, to
PDF (`pipeline.analysis.pdf`): real text tables, embedded figures, bookmarks, page numbers. Both files are
written under temporary names and moved into place at the end.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from pipeline.analysis.document import Block, Bullets, Code, FigureBlock, Heading, Paragraph, TableBlock, to_markdown
from pipeline.analysis.pdf import render_pdf
from pipeline.analysis.tables import num
from pipeline.config import Params
from pipeline.errors import PipelineError

TABLES, SUMMARY, FIGURES, OUT = Path("results/tables"), Path("results/summary.json"), Path("reports/figures"), Path(
    "reports")
FIGURE_SECTIONS = {"attention": "Attention maps", "curves": "Training curves", "filter_study": "Filter study"}
TABLE_SECTIONS = {"results": "Results", "filter_study": "Filter study (ConvMixer)"}


@dataclass
class ReportInputs:
    """The aggregate's and the figures stage's outputs, read once."""

    tables: list[dict]
    claims: dict
    provenance: dict
    summary: dict
    figures: list[dict]
    figures_dir: Path


def _json(path: Path, what: str):
    if not path.is_file():
        raise PipelineError(f"{path}: not found; {what}")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise PipelineError(f"{path}: not valid JSON ({exc}); {what}") from None


def read_inputs(tables_dir: str | Path, summary_path: str | Path, figures_dir: str | Path) -> ReportInputs:
    """Read results/tables, summary.json and (if present) reports/figures/figures.json."""
    tables_dir, figures_dir = Path(tables_dir), Path(figures_dir)
    fix = "run the aggregate stage first (dvc repro aggregate, or python -m pipeline aggregate)"
    manifest = figures_dir / "figures.json"
    figures = _json(manifest, "re-run the figures stage (dvc repro figures)") if manifest.is_file() else []
    return ReportInputs(_json(tables_dir / "tables.json", fix), _json(tables_dir / "claims.json", fix),
                        _json(tables_dir / "provenance.json", fix), _json(Path(summary_path), fix), figures,
                        figures_dir)


def _comparison_text(c: dict) -> str:
    """'vs mimetic 82.20 ± 0.28 % (n=2): Δ +2.55 pts, 95% CI [+1.91, +3.19], impulse better'."""
    std = f" ± {num(c['b_std'])}" if c["b_std"] is not None else ""
    if c["low"] is None:
        return (f"vs {c['b']} {num(c['b_mean'])}{std} % (n={c['b_n']}): Δ {num(c['mean'], True)} pts over"
                f" {c['n']} seed pair(s), too few for an interval")
    level = f"{100 * c['confidence']:g}%"
    return (f"vs {c['b']} {num(c['b_mean'])}{std} % (n={c['b_n']}): Δ {num(c['mean'], True)} pts, {level} CI"
            f" [{num(c['low'], True)}, {num(c['high'], True)}], {c['outcome']}")


def answer(comparisons: list[dict]) -> str:
    """Yes / No / Not clearly / Cannot tell yet, for one dataset's comparisons."""
    outcomes = [c["outcome"] for c in comparisons]
    if any(o.startswith("not enough") for o in outcomes):
        return "Cannot tell yet (fewer than 2 seed pairs)"
    if all(o.endswith("better") for o in outcomes):
        return "Yes"
    if all(o.endswith("worse") for o in outcomes):
        return "No, it did worse"
    return "Not clearly"


def headline_blocks(inp: ReportInputs) -> list[Block]:
    """The one-minute answer: per dataset, the method against each baseline with n, ± and the interval."""
    arms = inp.provenance.get("arms", [])
    blocks: list[Block] = [Heading("Headline")]
    by_dataset: dict[str, list[dict]] = {}
    for c in inp.claims.get("headline", []):
        by_dataset.setdefault(c["dataset"], []).append(c)
    if not by_dataset:
        missing = len(inp.provenance.get("missing", []))
        return blocks + [Paragraph(f"**No ViT runs of this experiment were found** ({missing} expected runs are"
                                   " missing); run `dvc repro` to train them.")]
    for dataset, comps in by_dataset.items():
        a = comps[0]
        std = f" ± {num(a['a_std'])}" if a["a_std"] is not None else ""
        question = f"did {a['a']} beat {' and '.join(c['b'] for c in comps)}?"
        blocks.append(Paragraph(f"**{dataset}: {question} {answer(comps)}.** {a['a']} reached {num(a['a_mean'])}"
                                f"{std} % final validation top-1 (n={a['a_n']} seeds); "
                                + "; ".join(_comparison_text(c) for c in comps) + "."))
    blocks += [_table_block(t) for t in inp.tables if t["section"] == "headline"]
    counts: dict[str, int] = {}
    for c in inp.claims.get("claims", []):
        counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
    blocks.append(Paragraph(f"Method under study: **{arms[0] if arms else '?'}**; baselines: {', '.join(arms[1:])}."
                            " Differences are paired over seeds (same seed, different init). Verdicts on the paper's "
                            f"{sum(counts.values())} claims: "
                            + ", ".join(f"{v}: {n}" for v, n in counts.items()) + " (see Claims)."))
    return blocks


def _table_block(t: dict) -> TableBlock:
    return TableBlock(t["title"], t["columns"], t["rows"], t["caption"])


def _minutes(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds / 60:.1f} min"


def run_blocks(inp: ReportInputs) -> list[Block]:
    """What was run, from the runs' metrics.json (via the aggregate's provenance.json)."""
    p = inp.provenance
    fs, wall, v = p.get("filter_study", {}), p.get("wall_time", {}), p.get("versions", {})
    per_arm = ", ".join(f"{k} {_minutes(s)}" for k, s in wall.get("per_arm_mean_s", {}).items())
    missing = p.get("missing", [])
    items = [
        f"Profile **{p.get('profile')}**; params digest `{p.get('params_digest')}` (`python -m pipeline check` prints"
        " the planned runs).",
        f"Code: git revision {', '.join(p.get('git_rev', [])) or 'unknown'} (as recorded by the runs).",
        f"ViT: {p.get('model')} on {', '.join(p.get('datasets', []))}; arms {', '.join(p.get('arms', []))}; seeds"
        f" {p.get('seeds')}; epochs {', '.join(p.get('epochs', []))}; training / validation images"
        f" {', '.join(p.get('train_size', []))} / {', '.join(p.get('val_size', []))}.",
        f"Filter study: ConvMixer on {fs.get('dataset')}; variants {', '.join(fs.get('variants', []))}; Gaussian σ"
        f" {fs.get('sigmas')} × heads {fs.get('heads')}; seeds {fs.get('seeds')}.",
        f"Hardware: {', '.join(p.get('hardware', []))}; {', '.join(p.get('cpu_count', []))} CPUs; processes per run"
        f" {', '.join(p.get('world_size', []))}.",
        "Libraries: " + "; ".join(f"{k} {', '.join(vals)}" for k, vals in v.items()) + ".",
        f"Wall time: ViT runs {_minutes(wall.get('vit_total_s'))} in total (mean per run: {per_arm or '–'}); filter"
        f" study {_minutes(wall.get('filter_study_total_s'))}.",
        f"Runs read: {p.get('runs', {}).get('vit', 0)} ViT, {p.get('runs', {}).get('filter_study', 0)} filter study;"
        f" missing: {len(missing)}" + (" (" + "; ".join(missing[:8]) + (" …" if len(missing) > 8 else "") + ")"
                                       if missing else "") + ".",
    ]
    return [Heading("What was run"), Bullets(items + ["Every run, one row each: see the appendix."])]


def table_blocks(inp: ReportInputs) -> list[Block]:
    """The result tables, grouped as the aggregate ordered them."""
    blocks: list[Block] = [Heading("Tables"), Paragraph(
        "Top-1 accuracy in %, differences in percentage points (pts). Published numbers come from paper/ (one CSV"
        " per table; every row names its source and paper version, see paper/sources.yaml); n/p = not published"
        " in a reachable source, – = not run here.")]
    notes = inp.provenance.get("table_notes", [])
    if notes:
        blocks.append(Bullets(notes))
    for section, name in TABLE_SECTIONS.items():
        chosen = [t for t in inp.tables if t["section"] == section]
        if chosen:
            blocks += [Heading(name, 2), *map(_table_block, chosen)]
    return blocks


def figure_blocks(inp: ReportInputs, report_dir: Path) -> list[Block]:
    """The figures that exist, in figures.json's order, under their section's subheading."""
    blocks: list[Block] = [Heading("Figures")]
    present = [f for f in inp.figures if (inp.figures_dir / f["file"]).is_file()]
    if not present:
        where = "is missing" if not inp.figures_dir.is_dir() else "has no figures"
        return blocks + [Paragraph(f"No figures: {inp.figures_dir} {where} (the figures stage draws them:"
                                   " `dvc repro figures`).")]
    section = None
    for f in present:
        if f.get("section") != section:
            section = f.get("section")
            blocks.append(Heading(FIGURE_SECTIONS.get(section, str(section).replace("_", " ").capitalize()), 2))
        rel = os.path.relpath(inp.figures_dir / f["file"], report_dir)
        blocks.append(FigureBlock(Path(rel).as_posix(), f.get("title", f["file"]), f.get("caption", "")))
    absent = [f["file"] for f in inp.figures if f not in present]
    if absent:
        blocks.append(Paragraph(f"Listed in figures.json but missing: {', '.join(absent)}."))
    return blocks


def claim_blocks(inp: ReportInputs) -> list[Block]:
    """Each claim of paper.md 2.10: a verdict table, then the evidence behind every verdict."""
    claims = inp.claims.get("claims", [])
    level = f"{100 * inp.claims.get('confidence', 0.95):g}%"
    blocks: list[Block] = [Heading("Claims"), Paragraph(
        f"Verdicts use paired differences over seeds with a {level} t interval: **holds** = every interval the"
        " claim needs lies on the claimed side; **does not hold** = at least one does not; **not enough runs** ="
        " fewer than 2 seed pairs; **not tested at this profile** = the experiment lacks what the claim is about."),
        TableBlock("Claims at a glance", ["#", "Claim", "Verdict"],
                   [[c["id"], c["claim"], f"**{c['verdict']}**"] for c in claims])]
    for c in claims:
        blocks += [Heading(f"Claim {c['id']}: {c['verdict']}", 2), Paragraph(c["claim"]),
                   Paragraph(f"Published: {c['published'].rstrip('.')}. Source: {c['source'].rstrip('.')}."),
                   Bullets(c["evidence"])]
    return blocks


def reproduce_blocks(inp: ReportInputs) -> list[Block]:
    """The commands that produce this report."""
    p = inp.provenance
    lines = [f"git checkout {(p.get('git_rev') or ['<revision>'])[0]}   # the revision the runs record"]
    if p.get("profile") not in (None, "", "cpu"):
        lines.append(f"python -m pipeline profile {p['profile']}   # applies profiles/{p['profile']}.yaml onto"
                     " params.yaml")
    lines += ["make repro              # creates .venv from requirements.lock, then runs dvc repro",
              "python -m pipeline check   # validates params.yaml and prints the planned runs",
              "dvc repro               # fetch, train, filter study, attention, aggregate, figures, report",
              "dvc exp show            # results/summary.json per dataset and arm, across experiments"]
    return [Heading("How to reproduce"), Paragraph(
        "Every number above comes from the runs' metrics.json files under results/ through `python -m pipeline"
        " aggregate`, and this report from `python -m pipeline report`."), Code(lines)]


def build_report(inp: ReportInputs, report_dir: Path) -> list[Block]:
    """All blocks of the report, in reading order."""
    appendix = [_table_block(t) for t in inp.tables if t["section"] == "provenance"]
    return [*headline_blocks(inp), *run_blocks(inp), *table_blocks(inp), *figure_blocks(inp, report_dir),
            *claim_blocks(inp), *reproduce_blocks(inp), *([Heading("Appendix: every run"), *appendix] if appendix
                                                          else [])]


def write_report(title: str, blocks: list[Block], out_dir: str | Path) -> tuple[Path, Path]:
    """Write report.md and report.pdf into `out_dir` via temporary names; returns their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    md, pdf = out_dir / "report.md", out_dir / "report.pdf"
    tmp_md, tmp_pdf = out_dir / ".report.md.partial", out_dir / ".report.pdf.partial"
    tmp_md.write_text(to_markdown(title, blocks))
    render_pdf(title, blocks, out_dir, tmp_pdf)
    os.replace(tmp_md, md)
    os.replace(tmp_pdf, pdf)
    return md, pdf


def add_arguments(parser) -> None:
    parser.add_argument("--tables", default=str(TABLES), help="the aggregate's tables (default: results/tables)")
    parser.add_argument("--summary", default=str(SUMMARY), help="default: results/summary.json")
    parser.add_argument("--figures", default=str(FIGURES), help="default: reports/figures")
    parser.add_argument("--out", default=str(OUT), help="where report.md and report.pdf go (default: reports)")


def main(params: Params, args) -> int:
    out = Path(getattr(args, "out", OUT))
    inp = read_inputs(getattr(args, "tables", TABLES), getattr(args, "summary", SUMMARY),
                      getattr(args, "figures", FIGURES))
    md, pdf = write_report(params.report.title, build_report(inp, out), out)
    print(f"report: wrote {md} and {pdf} ({len(inp.tables)} tables, {len(inp.figures)} figures listed)")
    return 0

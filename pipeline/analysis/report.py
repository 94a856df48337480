"""`python -m pipeline report`: reports/report.md, report.pdf, appendix.md, headline.md and claims.md.

Built only from the aggregate's outputs (results/tables/: tables.json, claims.json, what_was_run.json), the
figures stage's reports/figures/figures.json and paper/coverage.yaml and paper/fidelity.yaml. The report is for
its reader (about 12 pages for the CPU default, tests/test_cells.py) and leads with results:

1. page 1: the question (did the method under study, params `init`, beat its baselines?) with its answer per
   dataset and model variant, the claims of the papers at a glance (verdict and one line of evidence each), the
   headline table (the method against each baseline) and what was run, in one line;
2. results: the forest plot of every planned comparison, each claim this run tests in detail and the others in
   one table, reproduction against the published numbers (figure and tables), training curves, attention maps,
   the filter study and the [CI] grids, each figure family's caption once before its figures;
3. what was run in full and how to reproduce it;
4. the method (intervals, tests, power, assumptions), the plan's history in summary, and where the rest is.

The auditor's material goes to reports/appendix.md, written from the same inputs: the analysis plan in full, every
change of the plan with each claim's plan line, every run and the measurements across CPUs. The coverage of the
papers' tables and figures and the fidelity to the official code are docs/coverage.md and docs/fidelity.md
(`python -m pipeline readme`), which the report names instead of printing them again.

The content is built once as blocks (`pipeline.analysis.document`) and rendered to Markdown and, with fpdf2, to
PDF (`pipeline.analysis.pdf`). reports/headline.md is the question, the claims at a glance and the headline table
again, for the README (`python -m pipeline readme` copies it there), and reports/claims.md the laptop set's claims
table (`pipeline.analysis.claims_report`: every claim, its verdict, the run it came from, its plan and deciding
comparisons; "not run yet" when this run is not the plan's confirmatory profile's). All five files are written all
or nothing (`pipeline.outputs.files_aside`).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import entry
from pipeline.analysis.analysis_plan import load_confirmatory
from pipeline.analysis.claims_report import (
    APPENDIX,
    assumption_text,
    claim_detail,
    claim_regime,
    claims_markdown,
    edge_mark,
    history_blocks,
    history_summary,
    in_detail,
    plan_word,
    table_profile,
    verdict_cell,
    verdict_counts,
)
from pipeline.analysis.coverage import STATUSES, CoverageEntry, load_coverage
from pipeline.analysis.document import (
    Block,
    Bullets,
    Code,
    FigureBlock,
    Heading,
    Paragraph,
    TableBlock,
    block_markdown,
    to_markdown,
)
from pipeline.analysis.fidelity import NOTHING, FidelityEntry, load_fidelity
from pipeline.analysis.numbers import NA, num
from pipeline.analysis.pdf import render_pdf
from pipeline.analysis.reproducibility import CROSS_CPU, cross_cpu_blocks, cross_cpu_line, load_cross_cpu
from pipeline.errors import PipelineError
from pipeline.outputs import files_aside
from pipeline.params import Params

TABLES, FIGURES, OUT, PAPER = Path("results/tables"), Path("reports/figures"), Path("reports"), Path("paper")
#: answers listed on page 1 before the rest are summarised (the claims table must stay on page 1)
PAGE1_ANSWERS = 4


@dataclass
class ReportInputs:
    """The aggregate's and the figures stage's outputs, read once."""

    tables: list[dict]
    claims: dict
    ran: dict  #: what_was_run.json
    figures: dict  #: figures.json: {"families": [...], "figures": [...]}
    figures_dir: Path
    coverage: list[CoverageEntry]  #: paper/coverage.yaml
    fidelity: list[FidelityEntry]  #: paper/fidelity.yaml
    cross_cpu: dict = field(default_factory=dict)  #: bench/cross_cpu.yaml (bench/bench_cross_cpu.py)


def _json(path: Path, what: str):
    if not path.is_file():
        raise PipelineError(f"{path}: not found; {what}")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise PipelineError(f"{path}: not valid JSON ({exc}); {what}") from None


def read_inputs(tables_dir: str | Path, figures_dir: str | Path, paper_dir: str | Path = PAPER,
                cross_cpu: str | Path = CROSS_CPU) -> ReportInputs:
    """Read results/tables, (if present) reports/figures/figures.json, paper/coverage.yaml and fidelity.yaml, and
    (if present) bench/cross_cpu.yaml."""
    tables_dir, figures_dir = Path(tables_dir), Path(figures_dir)
    fix = "run the aggregate stage first (dvc repro aggregate, or python -m pipeline aggregate)"
    manifest = figures_dir / "figures.json"
    figures = (_json(manifest, "re-run the figures stage (dvc repro figures)") if manifest.is_file()
               else {"families": [], "figures": []})
    return ReportInputs(_json(tables_dir / "tables.json", fix), _json(tables_dir / "claims.json", fix),
                        _json(tables_dir / "what_was_run.json", fix), figures, figures_dir, load_coverage(paper_dir),
                        load_fidelity(paper_dir), load_cross_cpu(cross_cpu))


def level(inp: ReportInputs) -> str:
    return f"{100 * inp.claims.get('confidence', 0.95):g}%"


# --- page 1 ------------------------------------------------------------------------------------------------------

def answer(comparisons: list[dict]) -> str:
    """Yes / No / Not clearly / Cannot tell yet / Not tested (an arm did not train), for one (dataset, variant)'s
    comparisons."""
    verdicts = [c["verdict"] for c in comparisons]
    if any(c["n"] < 2 for c in comparisons):
        return "Cannot tell yet (fewer than 2 seed pairs)"
    untrained = list(dict.fromkeys(n for c in comparisons for n in c.get("untrained") or []))
    if untrained:
        return f"Not tested: {'; '.join(untrained)}"
    if all(v == "supported" for v in verdicts):
        return "Yes"
    if any(v == "contradicted" for v in verdicts):
        return "No: a baseline did better (after Holm's correction over the cell's comparisons)"
    return "Not clearly (inconclusive)"


def _versus(c: dict) -> str:
    """'impulse − mimetic +10.37 pts [+8.23, +12.50], supported'."""
    diff = f"{c['a']} − {c['b']} {num(c['mean'], True)} pts"
    if c.get("b_rising"):
        diff += f" ({c['b']} {c['b_rising']})"
    if c["low"] is None:
        return f"{diff} from {c['n']} seed pair(s), too few for an interval"
    return f"{diff} [{num(c['low'], True)}, {num(c['high'], True)}], {c['verdict']}{edge_mark(c)}"


def final(comparisons: list[dict]) -> str:
    """What the headline's accuracies are: on the whole test split when the runs scored it."""
    return "final top-1 on the whole test split" if any(c.get("images") for c in comparisons) else \
        "final validation top-1"


def answer_lines(inp: ReportInputs) -> list[str]:
    """Per (dataset, variant): the answer, the method's top-1 and the paired difference to each baseline."""
    cells: dict[tuple[str, str], list[dict]] = {}
    for c in inp.claims.get("headline", []):
        cells.setdefault((c["dataset"], c["variant"]), []).append(c)
    several = len({v for _, v in cells}) > 1
    lines = []
    for (dataset, variant), comps in cells.items():
        a = comps[0]
        std = f" ± {num(a['a_std'])}" if a["a_std"] is not None else ""
        where = f"{dataset}, {variant}" if several else dataset
        rising = f", {a['a_rising']}" if a.get("a_rising") else ""
        regime = f" Regime: {a['regime']}." if a.get("regime") else ""
        lines.append(f"**{where}: {answer(comps)}.** {a['a']} reached {num(a['a_mean'])}{std} % {final(comps)}"
                     f" (n = {a['a_n']} seeds{rising}); " + "; ".join(map(_versus, comps)) + "." + regime)
    return lines


def question_blocks(inp: ReportInputs, measures: str = "") -> list[Block]:
    """The question and its answer per (dataset, variant), in a few lines; `measures`, the plan's sentence on what
    this design measures (`analysis_plan.Confirmatory.measures`), after them."""
    arms = inp.ran.get("arms", [])
    method, baselines = (arms[0], arms[1:]) if arms else ("?", [])
    comps = inp.claims.get("headline", [])
    blocks: list[Block] = [Paragraph(
        f"**The question: did the method under study, {method} init, beat its baselines ({', '.join(baselines)})?**"
        f" Paired differences of {final(comps)} (same seed, different init), with {level(inp)} intervals over"
        f" {'seeds and test images' if any(c.get('images') for c in comps) else 'seeds'}, in points.")]
    lines = answer_lines(inp)
    if not lines:
        missing = len(inp.ran.get("missing", []))
        return blocks + [Paragraph(f"**No ViT runs of this experiment were found** ({missing} of the experiment's"
                                   " runs are missing): run `make repro` (or `dvc repro`) to train them.")]
    shown = lines[:PAGE1_ANSWERS]
    if len(lines) > len(shown):
        shown.append(f"… and {len(lines) - len(shown)} more dataset/variant cells: see the headline table.")
    note = [Paragraph(f"**What this design measures** (paper/plan.yaml, from its pilot): {measures}")] if measures \
        else []
    return blocks + [Bullets(shown), *note]


def glance_table(inp: ReportInputs) -> TableBlock:
    """Claims at a glance: the four-word verdict and the one line of evidence that decides it."""
    claims = inp.claims.get("claims", [])
    caption = (f"Verdicts by the analysis plan (paper/plan.yaml; the report's 'Method'): supported = every"
               f" comparison the claim needs has its {level(inp)} interval on the claimed side of 0 or of the plan's"
               " margin; contradicted = one is reversed (Holm's correction within the claim); inconclusive ="
               " neither; not tested = not run here. Regime: training images per seed, optimizer steps, token grid"
               " and parameters of the cells a verdict compares. Here: " + verdict_counts(claims) + ".")
    history = (inp.claims.get("plan") or {}).get("history") or {}
    if history.get("available"):
        return TableBlock("The claims of the papers at a glance", ["#", "Claim", "Verdict", "Regime", "Plan",
                                                                   "Evidence"],
                          [[c["id"], c.get("short") or c["claim"], verdict_cell(c), claim_regime(c),
                            plan_word(c, history), c.get("summary", "")] for c in claims],
                          caption + " Plan: confirmatory, post hoc (changes a verdict depends on, made after a result"
                          " of the claim was recorded: 'The plan's history'), or exploratory.")
    return TableBlock("The claims of the papers at a glance", ["#", "Claim", "Verdict", "Regime", "Evidence"],
                      [[c["id"], c.get("short") or c["claim"], verdict_cell(c), claim_regime(c),
                        c.get("summary", "")] for c in claims], caption)


def _minutes(seconds: float | None) -> str:
    return NA if seconds is None else f"{seconds / 60:.1f} min"


def _models(ran: dict) -> str:
    """Each variant by what it is (width, depth, heads, tokens, parameters), then the timm class it is built from:
    'vit_tiny_patch16_224' alone reads as ViT-Tiny's 5.7M parameters."""
    out = []
    for variant, m in ran.get("models", {}).items():
        shape = [f"width {m['width']}" if m.get("width") else "", f"depth {m['depth']}" if m.get("depth") else "",
                 f"{m['num_heads']} heads" if m.get("num_heads") else "",
                 f"{m['token_grid']} tokens" if m.get("token_grid") else "",
                 f"{m['params']:,.0f} parameters" if m.get("params") else ""]
        what = ", ".join(p for p in shape if p)
        out.append(f"{variant} = {what + ' ' if what else ''}(timm's {m['model']} class)")
    return "; ".join(out)


def image_counts(ran: dict) -> str:
    """'3000 / 1000 / 10000 training (per seed) / validation / test images' (test: when the runs scored it)."""
    keys = ("train_size", "val_size", "test_size") if ran.get("test_size") else ("train_size", "val_size")
    sizes = " / ".join(", ".join(ran.get(k, [])) or NA for k in keys)
    return f"{sizes} training (drawn per seed) / validation / test images" if len(keys) == 3 else \
        f"{sizes} training / validation images"


def run_blocks(inp: ReportInputs) -> list[Block]:
    """What was run, from the runs' metrics.json (via the aggregate's what_was_run.json)."""
    p = inp.ran
    fs, ci, wall, v = p.get("filter_study", {}), p.get("ci_alpha", {}), p.get("wall_time", {}), p.get("versions", {})
    missing = p.get("missing", [])
    runs = p.get("runs", {})
    items = [
        f"Profile **{p.get('profile')}**; params digest `{p.get('params_digest')}`; code: git revision"
        f" {', '.join(p.get('git_rev', [])) or 'unknown'} (as the runs record it).",
        f"ViT grid: {_models(p)}; on {', '.join(p.get('datasets', []))}; arms {', '.join(p.get('arms', []))}; seeds"
        f" {p.get('seeds')}; epochs {', '.join(p.get('epochs', [])) or NA}; {image_counts(p)}.",
        f"Filter study: ConvMixer on {fs.get('dataset')}; variants {', '.join(fs.get('variants', []))}; Gaussian σ"
        f" {fs.get('sigmas')} × heads {fs.get('heads')}; seeds {fs.get('seeds')}.",
    ]
    if ci.get("datasets"):
        items.append(f"[CI] α grid: {', '.join(ci['datasets'])}; α {ci.get('alphas')}; arms"
                     f" {', '.join(ci.get('arms', []))}; seeds {ci.get('seeds')}.")
    items += [
        "Data: " + "; ".join(f"{d['name']} ({d['citation']}; licence: {d['licence']})"
                             for d in p.get("dataset_facts", [])) + ".",
        f"Hardware: {', '.join(p.get('hardware', [])) or 'not recorded'}; CPUs"
        f" {', '.join(p.get('cpu_count', [])) or NA}; processes per run {', '.join(p.get('world_size', [])) or NA}."
        " Libraries: " + ("; ".join(f"{k} {', '.join(vals)}" for k, vals in v.items() if vals) or "not recorded")
        + ".",
        f"Training time (sum of the runs' wall times): ViT {_minutes(wall.get('vit_total_s'))}, filter study"
        f" {_minutes(wall.get('filter_study_total_s'))}"
        + (f", [CI] α grid {_minutes(wall.get('ci_alpha_total_s'))}" if runs.get("ci_alpha") else "") + ".",
        f"Runs read: {runs.get('vit', 0)} ViT, {runs.get('filter_study', 0)} filter study"
        + (f", {runs['ci_alpha']} [CI] α grid" if runs.get("ci_alpha") else "") + f"; missing: {len(missing)}"
        + (" (" + "; ".join(missing[:6]) + (" …" if len(missing) > 6 else "") + ")" if missing else "") + ".",
        cross_cpu_line(inp.cross_cpu, f"{APPENDIX}, 'Reproducibility across CPUs'"),
    ]
    return [Heading("What was run in full"), Bullets(items)]


# --- detail ------------------------------------------------------------------------------------------------------

def _table_block(t: dict) -> TableBlock:
    return TableBlock(t["title"], t["columns"], t["rows"], t["caption"])


def headline_blocks(inp: ReportInputs) -> list[Block]:
    """The method against each baseline, per (dataset, variant)."""
    chosen = [_table_block(t) for t in inp.tables if t["section"] == "headline"]
    return [Heading("Headline"), *chosen] if chosen else []


def method_blocks(inp: ReportInputs) -> list[Block]:
    """How the intervals and verdicts are computed; the analysis plan they follow is `plan_blocks`."""
    plan = inp.claims.get("plan") or {}
    rows = plan.get("comparisons", [])
    if not rows:
        return []
    tests = inp.ran.get("test_size") or []
    alphas = sorted({r["alpha"] for r in rows})
    scored = (f"Each final model is scored on the whole test split ({', '.join(tests)} images; per-image correctness"
              " in test_correct.npz beside metrics.json); the per-epoch curves use data.val_subset." if tests else
              "These runs record no per-image correctness: their intervals are over seeds only.")
    text = [
        f"**Intervals.** A comparison a − b is estimated over seeds and test images. {scored} With d_s seed s's"
        " difference and z_i the seed-averaged difference on image i, the variance is var(d_s)/n + var(z_i)/N (a"
        " crossed seeds × images decomposition that counts the seed × image term twice, so it errs conservative),"
        " with a t quantile on the seeds' n − 1 degrees of freedom (the image term, estimated from thousands of"
        " images, is treated as known; Welch–Satterthwaite degrees of freedom undercovered at 3 seeds in"
        " bench/bench_verdicts.py). Unpaired arms (claim 6: a ViT and a ConvMixer share only a seed number) use"
        " every run of each arm: Welch's interval with the image term added. Training accuracy (claim 4) has no"
        " fixed test set and is over seeds only. Each seed draws its own training subset, the same for every arm"
        " of that seed, so pairing by seed cancels it while the seeds sample it.",
        f"**Tests.** Each comparison is a one-sided test at α = {', '.join(f'{a:g}' for a in alphas)}, read from"
        f" the printed {level(inp)} interval; '≈' is two one-sided tests (TOST) at the plan's margin. Supported:"
        " the test of the claimed side rejects. Contradicted: Holm's step-down over the p-values of the reverse"
        " hypothesis within the claim's family (the claim, unless the plan names another) rejects at family-wise"
        " α. A claim is supported when every comparison is (intersection–union), contradicted when any is,"
        " inconclusive otherwise.",
        "**Power, as a plan.** A claim is supported only when all its comparisons are, so the power stated for a"
        " claim is theirs together (pipeline/analysis/power.py: their t tests drawn jointly, correlated through the"
        " runs they share), at the plan's effects of interest and the planned n, with the distance beyond every"
        " boundary at which it reaches 80% and, when it falls short, the seeds or the seed sd that would reach it;"
        " `python -m pipeline check` states the same before any run from the plan's assumed seed sds, the report"
        " from this run's variance components. A comparison's own minimal detectable effect (noncentral t,"
        " statsmodels) and the seeds a new experiment would need for it are given beside it, as that comparison's"
        " alone. Both plan a new, separately pre-registered experiment: adding seeds to this one until an interval"
        " clears would inflate the false-supported rate.",
        assumption_text(),
        "**Calibration.** `python bench/bench_verdicts.py` simulates each claim's comparison structure at its"
        " planned n, with the truth on its boundaries, through this code, and reports its false-supported and"
        " false-contradicted rates and the coverage of its intervals, and, with the comparisons near their effects"
        " of interest, checks the claim's stated power against the share of simulations that support it.",
        f"**The analysis plan** (paper/plan.yaml: {len(rows)} comparisons, each with its condition, effect of"
        f" interest, family, α and planned n, and the reason for each margin) is printed in full in {APPENDIX}.",
    ]
    return [Heading("Method: how the verdicts are reached"), *map(Paragraph, text)]


def plan_blocks(inp: ReportInputs) -> list[Block]:
    """The analysis plan in full (claims.json's `plan`), with the reason for each comparison's margin."""
    plan = inp.claims.get("plan") or {}
    rows = plan.get("comparisons", [])
    if not rows:
        return []
    table_rows = [[r["claim"], r["comparison"], r["needs"], f"{r['effect']:+g}", r["family"], f"{r['alpha']:g}",
                   r["interval"], f"{r['n']} ({r['n_from']})"] for r in rows]
    notes = [f"Claim {r['claim']}, {r['comparison']}: {r['note']}" for r in rows if r.get("note")]
    notes += [f"Claim {c} (structural) thresholds: " + ", ".join(f"{k} {v:g}" for k, v in t.items())
              for c, t in plan.get("thresholds", {}).items()]
    return [Heading("The analysis plan"),
            TableBlock("The analysis plan (paper/plan.yaml)", ["Claim", "Comparison", "Needs (points)",
                                                                "Effect of interest", "Family", "α (one-sided)",
                                                                "Interval", "Planned n"], table_rows,
                       "Needs: the condition on a − b; effect of interest: the true a − b a new experiment is powered"
                       " for; planned n: runs per arm (a / b for Welch), read from params where named."),
            Bullets(notes)]


def claim_blocks(inp: ReportInputs) -> list[Block]:
    """Each claim this run tests (`claims_report.in_detail`) with the evidence behind its verdict, its plan and its
    per-seed differences; the others, whose section would only say what is missing, one row each."""
    blocks: list[Block] = [Heading("The claims in detail", 2)]
    history = (inp.claims.get("plan") or {}).get("history") or {}
    claims = inp.claims.get("claims", [])
    for c in filter(in_detail, claims):
        blocks += [Heading(f"Claim {c['id']}: {c['verdict']}", 3), Paragraph(c["claim"]),
                   Paragraph(f"Published: {c['published'].rstrip('.')}. Source: {c['source'].rstrip('.')}."),
                   Bullets(c["evidence"]), *claim_detail(c, history)]
    rows = [[c["id"], c.get("short") or c["claim"], c["published"].rstrip("."), "; ".join(c["evidence"])]
            for c in claims if not in_detail(c)]
    if rows:
        blocks += [Heading("The claims this run does not test", 3), TableBlock(
            "Not tested here: what the papers publish and what a run needs", ["#", "Claim", "Published",
                                                                             "What this run lacks"], rows,
            "Each claim's full wording and source: docs/papers.md (paper/claims.yaml); its plan: the claims at a"
            f" glance and, change by change, {APPENDIX}.")]
    return blocks


def elsewhere_blocks(inp: ReportInputs) -> list[Block]:
    """Where the auditor's material is: the coverage and fidelity tables (docs/, generated by `python -m pipeline
    readme` from paper/coverage.yaml and paper/fidelity.yaml) and reports/appendix.md; counted, not reprinted."""
    counts = {s: sum(e.status == s for e in inp.coverage) for s in STATUSES}
    differ = sum(e.differs != NOTHING for e in inp.fidelity)
    return [Heading("Coverage, fidelity and every run"), Bullets([
        f"**Coverage of the papers' tables and figures**: docs/coverage.md, {len(inp.coverage)} tables and figures"
        " of [NeurIPS], [SIA] and [CI] (" + ", ".join(f"{n} {s}" for s, n in counts.items() if n) + "), the"
        " stages and profiles that regenerate each, or why none does, and its claims' verdicts at the run in"
        " results/tables.",
        f"**Fidelity to the official code**: docs/fidelity.md, {len(inp.fidelity)} arms and experiments, {differ}"
        " with a difference from the official code, each with its reason, the option whose default restores the"
        " official behaviour and its measured effect.",
        "Both are generated by `python -m pipeline readme` from paper/coverage.yaml and paper/fidelity.yaml"
        " (`pipeline.analysis.coverage`, `pipeline.analysis.fidelity`), the files this report counts them from.",
        f"**{APPENDIX}**, written with this report from the same inputs: the analysis plan in full, every change of"
        " the plan and each claim's plan line, every run of this experiment (final and best top-1, epochs, wall"
        " time, throughput) and the measurements across CPUs."])]


#: figures.json inputs whose figures the appendix shows rather than the report: the attention maps on a real batch,
#: which no verdict reads (claim 7 reads the pseudo-input's maps), half of the report's attention pages
APPENDIX_INPUTS = {"real"}
MORE_FIGURES = "Figures on real images"


def _present(inp: ReportInputs, families: set[str], appendix: bool = False) -> list[dict]:
    """The figures.json entries of these families whose files exist: the report's or (`appendix`) the appendix's
    (`APPENDIX_INPUTS`)."""
    return [f for f in inp.figures.get("figures", []) if f["family"] in families
            and (f.get("input") in APPENDIX_INPUTS) == appendix and (inp.figures_dir / f["file"]).is_file()]


def _figures_of(inp: ReportInputs, report_dir: Path, families: set[str], appendix: bool = False) -> list[Block]:
    """The figures of these figure families that exist (`_present`), each family's caption once before its
    figures."""
    present = _present(inp, families, appendix)
    blocks: list[Block] = []
    for fam in (f for f in inp.figures.get("families", []) if f["name"] in families):
        figs = [f for f in present if f["family"] == fam["name"]]
        if figs:
            blocks.append(Paragraph(f"**{fam['title']}.** {fam['caption']}"))
            blocks += [FigureBlock(Path(os.path.relpath(inp.figures_dir / f["file"], report_dir)).as_posix(),
                                   f["title"], f.get("note", "")) for f in figs]
    return blocks


def _section(inp: ReportInputs, section: str) -> set[str]:
    """The names of the figure families of one figures.json section."""
    return {f["name"] for f in inp.figures.get("families", []) if f["section"] == section}


#: the results after the claims, in reading order: (heading, figure families, tables.json sections)
RESULTS = [("Training curves", "curves", []), ("Attention maps", "attention", ["init_diagnostics"]),
           ("Filter study (ConvMixer)", "filter_study", ["filter_study"]), ("[CI] α grid", "", ["ci_alpha"]),
           ("[CI] Figs 6-9: the α grid at α = 0.2", "ci", []),
           ("[CI] Tables 1-2 (Model III and the other attention forms)", "", ["ci_model3"])]
NO_PUBLISHED = ("No published number exists for this run's datasets and settings (the [NeurIPS] small-dataset cells"
                " are n/p; the published filter-study and [CI] numbers are on CIFAR-10): nothing here is compared"
                " with the papers directly.")


def results_blocks(inp: ReportInputs, report_dir: Path) -> list[Block]:
    """The results: the forest plot, each claim in detail, ours against the published numbers, then per topic its
    figures and tables."""
    blocks: list[Block] = [Heading("Results"), Paragraph(
        "Top-1 accuracy in %, differences in percentage points (pts); final top-1 is on each dataset's whole test"
        " split, the per-epoch curves on a fixed validation subset. Published numbers come from paper/ (one CSV per"
        " table; every row names its source and paper version); n/p = not published in a reachable source, – = not"
        " run here.")]
    figures = inp.figures.get("figures", [])
    if not figures:
        where = "is missing" if not inp.figures_dir.is_dir() else "has no figures"
        blocks.append(Paragraph(f"No figures: {inp.figures_dir} {where} (the figures stage draws them:"
                                " `dvc repro figures`)."))
    forest = _figures_of(inp, report_dir, {"forest"})
    blocks += [Heading("Every planned comparison", 2), *forest] if forest else []
    blocks += claim_blocks(inp)
    published = _figures_of(inp, report_dir, {"published"}) or [Paragraph(NO_PUBLISHED)]
    notes = [Bullets(inp.ran["table_notes"])] if inp.ran.get("table_notes") else []
    blocks += [Heading("Reproduction against the published numbers", 2), *published, *notes,
               *(_table_block(t) for t in inp.tables if t["section"] == "results")]
    for heading, section, table_sections in RESULTS:
        figs = _figures_of(inp, report_dir, _section(inp, section)) if section else []
        aside = len(_present(inp, _section(inp, section), appendix=True)) if section else 0
        if figs and aside:
            figs.append(Paragraph(f"The same on a real validation batch: {aside} figure{'s' if aside > 1 else ''}"
                                  f" in {APPENDIX} ('{MORE_FIGURES}')."))
        body = figs + [_table_block(t) for t in inp.tables if t["section"] in table_sections]
        blocks += [Heading(heading, 2), *body] if body else []
    absent = [f["file"] for f in figures if not (inp.figures_dir / f["file"]).is_file()]
    if absent:
        blocks.append(Paragraph(f"Listed in figures.json but missing: {', '.join(absent)}."))
    return blocks


def reproduce_blocks(inp: ReportInputs) -> list[Block]:
    """The commands that produce this report."""
    p = inp.ran
    lines = [f"git checkout {(p.get('git_rev') or ['<revision>'])[0]}   # the revision the runs record"]
    profile = p.get("profile")
    lines.append(f"make repro PROFILE={profile}   # .venv from requirements.lock, profiles/{profile}.yaml merged into"
                 " params.yaml, check, then every stale stage" if profile not in (None, "", "cpu") else
                 "make repro   # .venv from requirements.lock, check (params valid, planned runs), the stale stages")
    lines += ["python -m pipeline readme  # the README's headline and claims, docs/coverage.md, fidelity.md, papers.md",
              "python -m pipeline compare   # per experiment: the method, its baselines, the paired differences"]
    return [Heading("How to reproduce"), Paragraph(
        "Every number above comes from the runs' metrics.json files under results/ through `python -m pipeline"
        " aggregate`, and this report from `python -m pipeline report`."), Code(lines)]


def build_report(inp: ReportInputs, report_dir: Path, measures: str = "") -> list[Block]:
    """All blocks of the report, in reading order (module docstring)."""
    return [*question_blocks(inp, measures), *headline_blocks(inp)[1:], glance_table(inp), Paragraph(run_line(inp)),
            *results_blocks(inp, report_dir), *run_blocks(inp), *reproduce_blocks(inp),
            *method_blocks(inp), *history_summary(inp.claims), *elsewhere_blocks(inp)]


def build_appendix(inp: ReportInputs, report_dir: Path) -> list[Block]:
    """reports/appendix.md: what an auditor checks and a reader skips (module docstring)."""
    runs = [_table_block(t) for t in inp.tables if t["section"] == "appendix"]
    more = _figures_of(inp, report_dir, {f["name"] for f in inp.figures.get("families", [])}, appendix=True)
    return [Paragraph("The auditor's material of reports/report.md, written by `python -m pipeline report` from the"
                      " same results/tables."),
            *plan_blocks(inp), *history_blocks(inp.claims), *([Heading("Every run"), *runs] if runs else []),
            *cross_cpu_blocks(inp.cross_cpu), *([Heading(MORE_FIGURES), *more] if more else [])]


def run_line(inp: ReportInputs) -> str:
    """What was run, in one line (the README's headline has no room for the full list)."""
    p = inp.ran
    planned = (f"profile {p.get('profile')}; {_models(p) or 'no model recorded'}; on"
               f" {', '.join(p.get('datasets', []))}; arms {', '.join(p.get('arms', []))}; seeds {p.get('seeds')}")
    if not p.get("runs", {}).get("vit"):
        return f"**What was run:** nothing yet; params.yaml plans {planned}."
    wall = sum(v for k, v in p.get("wall_time", {}).items() if k.endswith("_total_s"))
    return (f"**What was run:** {planned}; {image_counts(p)}; {', '.join(p.get('epochs', []))}"
            f" epochs; {_minutes(wall)} of training in total (the runs' wall times) on"
            f" {', '.join(p.get('hardware', []))}.")


def headline_markdown(inp: ReportInputs, measures: str = "") -> str:
    """reports/headline.md: the question, the claims at a glance, the headline table and what was run, for the
    README."""
    p = inp.ran
    source = (f"Generated by `python -m pipeline report` from this experiment's runs (params digest"
              f" `{p.get('params_digest')}`, git revision {', '.join(p.get('git_rev', [])) or 'unknown'});"
              " `python -m pipeline readme` copies it here. Details, tables and figures: `reports/report.pdf`.")
    blocks = [*question_blocks(inp, measures), *headline_blocks(inp)[1:], glance_table(inp), Paragraph(run_line(inp)),
              Paragraph(source)]
    return "\n\n".join(map(block_markdown, blocks)) + "\n"


def write_report(title: str, blocks: list[Block], headline: str, out_dir: str | Path, claims: str,
                 appendix: list[Block]) -> tuple[Path, ...]:
    """Write report.md, report.pdf, headline.md, claims.md and appendix.md into `out_dir`, all or nothing; returns
    their paths."""
    out_dir = Path(out_dir)
    paths = (out_dir / "report.md", out_dir / "report.pdf", out_dir / "headline.md", out_dir / "claims.md",
             out_dir / Path(APPENDIX).name)
    with files_aside(*paths) as (md, pdf, head, table, more):
        md.write_text(to_markdown(title, blocks))
        render_pdf(title, blocks, out_dir, pdf)
        head.write_text(headline)
        table.write_text(claims)
        more.write_text(to_markdown(f"{title}: appendix", appendix))
    return paths


def add_arguments(parser) -> None:
    parser.add_argument("--tables", default=str(TABLES), help="the aggregate's tables (default: results/tables)")
    parser.add_argument("--figures", default=str(FIGURES), help="default: reports/figures")
    parser.add_argument("--out", default=str(OUT), help="where the report goes (default: reports)")
    parser.add_argument("--paper", default=str(PAPER), help="coverage.yaml and fidelity.yaml (default: paper)")
    parser.add_argument("--cross-cpu", default=str(CROSS_CPU), help="default: bench/cross_cpu.yaml")


def main(params: Params, args) -> int:
    out = Path(getattr(args, "out", OUT))
    inp = read_inputs(getattr(args, "tables", TABLES), getattr(args, "figures", FIGURES), getattr(args, "paper", PAPER),
                      getattr(args, "cross_cpu", CROSS_CPU))
    paper = Path(getattr(args, "paper", PAPER))
    table = claims_markdown(inp.claims, inp.ran, table_profile(inp.ran.get("profile")))
    own = load_confirmatory(paper, inp.ran.get("profile"))
    measures = own.measures if own is not None and own.profile == inp.ran.get("profile") else ""
    paths = write_report(params.report.title, build_report(inp, out, measures), headline_markdown(inp, measures), out,
                         table, build_appendix(inp, out))
    print(f"report: wrote {', '.join(map(str, paths))} ({len(inp.tables)} tables,"
          f" {len(inp.figures.get('figures', []))} figures listed)")
    return 0


if __name__ == "__main__":
    sys.exit(entry.command(__spec__.name, add_arguments, main))

"""paper/coverage.yaml, the coverage matrix: every table and figure of [NeurIPS], [SIA] and [CI] -> the stages and
profiles that regenerate it, or why none does -> its claims -> their verdicts at this run.

An entry's keys: id, paper, item, title, status (one of STATUSES), stages, profiles, claims, note.
tests/test_coverage.py keeps the file complete. A verdict is shown only where this run's profile is one of the
row's; elsewhere the row says "not run".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.analysis.document import TableBlock
from pipeline.analysis.fidelity import KEBAB, entry_list, text_value
from pipeline.errors import PipelineError

COVERAGE = "coverage.yaml"
KEYS = ("id", "paper", "item", "title", "status", "stages", "profiles", "claims", "note")
PAPERS = ("NeurIPS", "SIA", "CI")
#: regenerated: a profile runs the paper's setting; laptop analogue: only a smaller stand-in runs
WITH_STAGE = ("regenerated", "laptop analogue")
STATUSES = (*WITH_STAGE, "no stage yet", "not reproducible here")
NOT_RUN = "not run"


@dataclass(frozen=True)
class CoverageEntry:

    id: str
    paper: str
    item: str
    title: str
    status: str
    stages: tuple[str, ...]
    profiles: tuple[str, ...]
    claims: tuple[str, ...]
    note: str


def _names(entry: dict, key: str, where: str) -> tuple[str, ...]:
    value = entry.get(key)
    if not isinstance(value, list) or not all(isinstance(v, str | int) and str(v).strip() for v in value):
        raise PipelineError(f"{where}: `{key}` must be a list of names (may be empty: []), got {value!r}")
    return tuple(str(v).strip() for v in value)


def _text(entry: dict, key: str, where: str, choices: tuple[str, ...] = ()) -> str:
    value = text_value(entry, key, where)
    if choices and value not in choices:
        raise PipelineError(f"{where}: `{key}` = {value!r}; use one of {', '.join(choices)}")
    return value


def parse_entry(entry, index: int, where: str) -> CoverageEntry:
    if not isinstance(entry, dict):
        raise PipelineError(f"{where}, entry {index + 1}: expected a mapping of {', '.join(KEYS)}")
    name = entry.get("id")
    if not isinstance(name, str) or not KEBAB.fullmatch(name):
        raise PipelineError(f"{where}, entry {index + 1}: `id` = {name!r}; give a kebab-case id (e.g. ci-table-3)")
    here = f"{where}, entry {name!r}"
    unknown = sorted(set(entry) - set(KEYS))
    if unknown:
        raise PipelineError(f"{here}: `{unknown[0]}` is not a key; the keys are {', '.join(KEYS)}")
    missing = [k for k in KEYS if k not in entry]
    if missing:
        raise PipelineError(f"{here}: `{missing[0]}` is missing; every entry has {', '.join(KEYS)}")
    status = _text(entry, "status", here, STATUSES)
    stages, profiles = _names(entry, "stages", here), _names(entry, "profiles", here)
    if status in WITH_STAGE and not (stages and profiles):
        raise PipelineError(f"{here}: status {status!r} needs the stages and profiles that run it")
    if status not in WITH_STAGE and (stages or profiles):
        raise PipelineError(f"{here}: status {status!r} with stages {list(stages)} / profiles {list(profiles)};"
                            f" a row with a stage has status {' or '.join(map(repr, WITH_STAGE))}")
    return CoverageEntry(name, _text(entry, "paper", here, PAPERS), _text(entry, "item", here),
                         _text(entry, "title", here), status, stages, profiles, _names(entry, "claims", here),
                         _text(entry, "note", here))


def load_coverage(paper_dir: str | Path) -> list[CoverageEntry]:
    """paper/coverage.yaml, checked: every key of every entry, ids and (paper, item) pairs unique."""
    path = Path(paper_dir) / COVERAGE
    raw = entry_list(path, "the coverage matrix the report prints (one entry per table and figure of [NeurIPS],"
                           " [SIA] and [CI])")
    entries = [parse_entry(e, i, str(path)) for i, e in enumerate(raw)]
    ids: set[str] = set()
    items: set[tuple[str, str]] = set()
    for e in entries:
        if e.id in ids or (e.paper, e.item) in items:
            what = "id" if e.id in ids else f"item [{e.paper}] {e.item}"
            raise PipelineError(f"{path}, entry {e.id!r}: the {what} is used twice; one row per table or figure")
        ids.add(e.id)
        items.add((e.paper, e.item))
    return entries


def run_verdicts(claims: dict) -> dict[str, str]:
    return {str(c["id"]): c["verdict"] for c in claims.get("claims", []) if "id" in c and "verdict" in c}


def verdict(entry: CoverageEntry, profile: str | None, verdicts: dict[str, str]) -> str:
    """The row's verdict at this run: each claim's, where the run's profile is one of the row's."""
    if not entry.claims:
        return "no claim"
    if profile is None or profile not in entry.profiles:
        return NOT_RUN
    return "; ".join(f"{c}: {verdicts.get(c, NOT_RUN)}" for c in entry.claims)


def coverage_table(entries: list[CoverageEntry], profile: str | None, verdicts: dict[str, str]) -> TableBlock:
    counts = {s: sum(e.status == s for e in entries) for s in STATUSES}
    run = (f"this run's profile, {profile} (results/tables/claims.json)" if profile else
           "no run: results/tables/claims.json was not found")
    return TableBlock(
        "Coverage of the papers' tables and figures (paper/coverage.yaml)",
        ["Paper", "Item", "What", "Status", "Stages · profiles", "Claim", f"Verdict ({profile or 'no run'})", "Note"],
        [[f"[{e.paper}]", e.item, e.title, e.status,
          f"{', '.join(e.stages)} · {', '.join(e.profiles)}" if e.stages else "–", ", ".join(e.claims) or "none",
          verdict(e, profile, verdicts), e.note] for e in entries],
        f"{len(entries)} tables and figures: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        + f". Verdicts (paper/claims.yaml, judged by paper/plan.yaml) from {run}; a row whose profiles do not"
        f" include it says {NOT_RUN!r}. Profile cpu is params.yaml's own; the others are profiles/*.yaml.")

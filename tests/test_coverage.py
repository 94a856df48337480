"""paper/coverage.yaml and paper/fidelity.yaml: complete against the papers' tables and figures, every name they use
exists, and their readers stop a bad file with one error naming the entry and the key.

Completeness is checked against the project's source notes (kept beside the checkout in the project workspace, not
in the repository; those tests skip without them). Their section 2 is parsed here, from its text: each subsection
whose heading names [NeurIPS], [SIA] or [CI] lists its tables and figures as 'Table N', 'Tables N, M', 'Fig. N',
'Figs. N–M' (any paper version's number: the submission's and the camera-ready's are both items of the
camera-ready), [SIA]'s tables labelled '(a)' … at the start of a line, and a subsection that names none is itself
one item, '§2.N'.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from pipeline.analysis.coverage import (
    NOT_RUN,
    CoverageEntry,
    coverage_table,
    load_coverage,
    run_verdicts,
    verdict,
)
from pipeline.analysis.document import block_markdown
from pipeline.analysis.fidelity import fidelity_table, load_fidelity
from pipeline.analysis.published import load_claims, load_published
from pipeline.errors import PipelineError

ROOT = Path(__file__).resolve().parent.parent
PAPER = ROOT / "paper"
TARGETS = {"NeurIPS", "SIA", "CI"}  # [MIM] is a baseline, not a target


def paper_md() -> Path:
    """The maintainers' source notes, a file outside the repository named by $PIPELINE_SOURCE_NOTES; skip without."""
    path = Path(os.environ.get("PIPELINE_SOURCE_NOTES", ""))
    if not path.name or not path.is_file():
        pytest.skip("$PIPELINE_SOURCE_NOTES names no file (the maintainers' source notes are not in the repository)")
    return path


def numbers(text: str) -> list[int]:
    """'3, 4, 5' -> [3, 4, 5]; '7–9' -> [7, 8, 9]."""
    out = []
    for part in re.split(r",|\band\b", text):
        ends = [int(n) for n in re.findall(r"\d+", part)]
        out += list(range(ends[0], ends[-1] + 1))
    return out


def section_2_items(text: str) -> set[tuple[str, str]]:
    """(paper, item) for every table and figure of the source notes' section 2."""
    section = text.split("\n## 2.", 1)[1].split("\n## 3.", 1)[0]
    items = set()
    for sub in re.split(r"\n(?=### 2\.\d+ )", section)[1:]:
        heading = sub.splitlines()[0]
        tag = re.search(r"\[(\w+)\]", heading)
        if not tag or tag.group(1) not in TARGETS:
            continue
        found = set()
        for kind, nums in re.findall(r"\b(Tables?|Figs?\.|Figures?)\s+(\d+(?:\s*(?:[–-]|,|\band\b)\s*\d+)*)", sub):
            name = "Table" if kind.startswith("Table") else "Fig."
            found |= {f"{name} {n}" for n in numbers(nums)}
        found |= {f"({letter})" for letter in re.findall(r"^\(([a-z])\) ", sub, re.MULTILINE)}
        items |= {(tag.group(1), i) for i in found or {"§" + heading.split()[1]}}
    return items


def test_the_parser_reads_paper_md_section_2():
    items = section_2_items(paper_md().read_text())
    assert {("NeurIPS", f"Table {n}") for n in (1, 2, 3, 4, 5, 7)} <= items
    assert {("NeurIPS", f"Fig. {n}") for n in (3, 4, 5, 6, 7)} | {("NeurIPS", "§2.4")} <= items
    assert {("CI", f"Table {n}") for n in range(1, 9)} | {("CI", f"Fig. {n}") for n in (4, 6, 7, 8, 9)} <= items
    assert {("SIA", f"({c})") for c in "abcdef"} <= items
    assert not {p for p, _ in items} - TARGETS


def test_the_parser_on_a_small_digest():
    text = """# Digest
## 1. The method
### 1.1 [NeurIPS] arms (Table 9 here is not section 2)
## 2. Published results
### 2.1 [NeurIPS] Table 1: ViT-Tiny
The submission's Figure 4 (Fig. 5 of the camera-ready).
### 2.2 [NeurIPS] rebuttal: ConvMixer vs ViT
| a | b |
### 2.3 [CI] all tables
**Tables 3, 4 and 7.** Figs. 7–9 show maps; see Fig. 4.
### 2.4 [SIA] tables labelled by content
(a) Main results
(b) More heads, not (c) inline
### 2.5 [MIM] the baseline's Table 2
### 2.6 Claims (Table 8)
## 3. Training recipes
### 3.1 [CI] Table 6
"""
    assert section_2_items(text) == {
        ("NeurIPS", "Table 1"), ("NeurIPS", "Fig. 4"), ("NeurIPS", "Fig. 5"), ("NeurIPS", "§2.2"),
        ("CI", "Table 3"), ("CI", "Table 4"), ("CI", "Table 7"), ("CI", "Fig. 7"), ("CI", "Fig. 8"), ("CI", "Fig. 9"),
        ("CI", "Fig. 4"), ("SIA", "(a)"), ("SIA", "(b)")}


def test_every_table_and_figure_of_paper_md_has_a_row():
    rows = {(e.paper, e.item) for e in load_coverage(PAPER)}
    missing = sorted(section_2_items(paper_md().read_text()) - rows)
    assert not missing, f"add rows to paper/coverage.yaml for: {missing}"


def test_every_paper_table_of_the_published_numbers_has_a_row():
    """Each `table` of paper/*.csv from [NeurIPS], [SIA] or [CI] is a row: by its number, or (tables labelled by
    content) by its name inside a row's title."""
    rows = load_coverage(PAPER)
    missing = []
    for name in sorted(set(load_published(PAPER)["table"])):
        tag = re.match(r"\[?(NeurIPS|SIA|CI)\]? ", name)
        if not tag:
            continue  # the course reproduction, reference points: not the papers' tables
        paper, rest = tag.group(1), name[tag.end():]
        number = re.search(r"\b(Table|Fig\.) (\d+)", rest)
        ok = any(e.paper == paper and (f"{number.group(1)} {number.group(2)}" == e.item if number else
                                       rest.lower() in e.title.lower()) for e in rows)
        missing += [] if ok else [name]
    assert not missing, f"paper/*.csv tables without a row in paper/coverage.yaml: {missing}"


def dvc_stages() -> set[str]:
    return set(yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"])


def profile_names() -> set[str]:
    own = yaml.safe_load((ROOT / "params.yaml").read_text())["profile"]
    return {p.stem for p in (ROOT / "profiles").glob("*.yaml")} | {own}


def unknown_names(entry: CoverageEntry) -> dict[str, set[str]]:
    """The stages dvc.yaml lacks, the profiles profiles/ (and params.yaml) lack, the claims claims.yaml lacks."""
    claims = {c["id"] for c in load_claims(PAPER)}
    found = {"stage": set(entry.stages) - dvc_stages(), "profile": set(entry.profiles) - profile_names(),
             "claim": set(entry.claims) - claims}
    return {k: v for k, v in found.items() if v}


@pytest.mark.parametrize("entry", load_coverage(PAPER), ids=lambda e: e.id)
def test_each_row_names_existing_stages_profiles_and_claims(entry):
    assert not unknown_names(entry), f"{entry.id} names what does not exist: {unknown_names(entry)}"


def test_a_row_naming_a_missing_stage_profile_or_claim_is_caught():
    entry = CoverageEntry("x", "CI", "Table 9", "t", "regenerated", ("train", "trian"), ("cpu", "cpu-claim"),
                          ("1", "99"), "n")
    assert unknown_names(entry) == {"stage": {"trian"}, "profile": {"cpu-claim"}, "claim": {"99"}}


def test_the_rows_the_papers_lack_a_stage_for_say_so():
    entries = load_coverage(PAPER)
    for e in entries:
        assert (e.status in ("no stage yet", "not reproducible here")) == (not e.stages), e.id
    by_item = {(e.paper, e.item): e for e in entries}
    assert by_item[("SIA", "(c)")].stages == ("sia_fit", "aggregate") and by_item[("SIA", "(f)")].claims == ("14",)
    table4 = by_item[("NeurIPS", "Table 4")]  # the weight-selection block (claim 12)
    assert table4.status == "laptop analogue" and "select_finetune" in table4.stages and table4.claims == ("12",)


def params_keys(tree: dict, prefix: str = "") -> set[str]:
    out = set()
    for key, value in tree.items():
        out.add(prefix + key)
        if isinstance(value, dict):
            out |= params_keys(value, f"{prefix}{key}.")
    return out


@pytest.mark.parametrize("entry", load_fidelity(PAPER), ids=lambda e: e.id)
def test_each_fidelity_option_is_a_params_key(entry):
    keys = params_keys(yaml.safe_load((ROOT / "params.yaml").read_text()))
    assert not set(entry.option_keys) - keys, f"{entry.id}: not in params.yaml: {set(entry.option_keys) - keys}"


# --- the readers -------------------------------------------------------------------------------------------------

FIDELITY_ROW = {"id": "vit-impulse", "experiment": "impulse arm",
                "official": {"code": "code-2505", "repo": "osiriszjq/structured_initialization", "commit": "7cd02f1",
                             "file": "vision_transformer.py"},
                "same": "the law", "differs": "nothing", "why": "", "option": "", "effect": "not measured"}
COVERAGE_ROW = {"id": "ci-table-3", "paper": "CI", "item": "Table 3", "title": "α grid", "status": "regenerated",
                "stages": ["ci_alpha"], "profiles": ["ci-alpha-2401"], "claims": ["9"], "note": "as published"}


def write(tmp_path: Path, name: str, rows) -> Path:
    (tmp_path / name).write_text(yaml.safe_dump(rows, allow_unicode=True))
    return tmp_path


def renamed(row: dict, n: int, key: str = "id") -> dict:
    return row | {key: f"{row[key]}-{n}"} if key == "id" else row | {key: f"Table {n}"}


@pytest.mark.parametrize("n", [0, 1, 40])
def test_the_readers_take_any_number_of_rows(tmp_path, n):
    write(tmp_path, "fidelity.yaml", [renamed(FIDELITY_ROW, i) for i in range(n)])
    write(tmp_path, "coverage.yaml", [renamed(renamed(COVERAGE_ROW, i), i, "item") for i in range(n)])
    assert [e.id for e in load_fidelity(tmp_path)] == [f"vit-impulse-{i}" for i in range(n)]
    assert len(load_coverage(tmp_path)) == n
    assert len(fidelity_table(load_fidelity(tmp_path)).rows) == n


@pytest.mark.parametrize("change, message", [
    ({"id": "Vit Impulse"}, "entry 1: `id` = 'Vit Impulse'; give a kebab-case id"),
    ({"colour": "red"}, "entry 'vit-impulse': `colour` is not a key"),
    ({"same": ""}, "entry 'vit-impulse': `same` must be a non-empty string"),
    ({"effect": 3}, "entry 'vit-impulse': `effect` must be a non-empty string"),
    ({"differs": "the noise", "why": ""}, "entry 'vit-impulse': `why` = '' with `differs` = 'the noise'"),
    ({"why": "speed"}, "give the reason exactly when something differs"),
    ({"official": "code-2505"}, "entry 'vit-impulse': `official` must be a mapping"),
    ({"official": FIDELITY_ROW["official"] | {"code": "code-2024"}}, "`official.code` = 'code-2024'"),
    ({"official": FIDELITY_ROW["official"] | {"repo": "osiriszjq/impulse_init"}},
     "`official.repo` = 'osiriszjq/impulse_init', but code-2505 is osiriszjq/structured_initialization"),
    ({"official": FIDELITY_ROW["official"] | {"commit": "main"}}, "`official.commit` = 'main'"),
    ({"official": {"code": "none", "file": "x.py"}}, "`official.code` is none, so leave out repo, commit and file"),
])
def test_a_bad_fidelity_entry_names_the_entry_and_the_key(tmp_path, change, message):
    write(tmp_path, "fidelity.yaml", [FIDELITY_ROW | change])
    with pytest.raises(PipelineError, match=re.escape(message)):
        load_fidelity(tmp_path)


def test_a_missing_key_and_a_repeated_id_are_named(tmp_path):
    write(tmp_path, "fidelity.yaml", [{k: v for k, v in FIDELITY_ROW.items() if k != "option"}])
    with pytest.raises(PipelineError, match="entry 'vit-impulse': `option` is missing"):
        load_fidelity(tmp_path)
    write(tmp_path, "fidelity.yaml", [FIDELITY_ROW, FIDELITY_ROW])
    with pytest.raises(PipelineError, match="entry 'vit-impulse': the id is used twice"):
        load_fidelity(tmp_path)
    write(tmp_path, "coverage.yaml", [COVERAGE_ROW, COVERAGE_ROW | {"id": "ci-table-3b"}])
    with pytest.raises(PipelineError, match=r"entry 'ci-table-3b': the item \[CI\] Table 3 is used twice"):
        load_coverage(tmp_path)
    (tmp_path / "fidelity.yaml").write_text("- id: [unclosed\n")
    with pytest.raises(PipelineError, match="not valid YAML"):
        load_fidelity(tmp_path)
    with pytest.raises(PipelineError, match="fidelity.yaml: not found"):
        load_fidelity(tmp_path / "none")


@pytest.mark.parametrize("change, message", [
    ({"paper": "MIM"}, "entry 'ci-table-3': `paper` = 'MIM'; use one of NeurIPS, SIA, CI"),
    ({"status": "done"}, "`status` = 'done'; use one of regenerated, laptop analogue, no stage yet"),
    ({"stages": "ci_alpha"}, "entry 'ci-table-3': `stages` must be a list of names"),
    ({"profiles": []}, "status 'regenerated' needs the stages and profiles that run it"),
    ({"status": "no stage yet"}, "status 'no stage yet' with stages ['ci_alpha']"),
    ({"note": None}, "entry 'ci-table-3': `note` must be a non-empty string"),
    ({"where": "x"}, "entry 'ci-table-3': `where` is not a key"),
])
def test_a_bad_coverage_entry_names_the_entry_and_the_key(tmp_path, change, message):
    write(tmp_path, "coverage.yaml", [COVERAGE_ROW | change])
    with pytest.raises(PipelineError, match=re.escape(message)):
        load_coverage(tmp_path)


def test_a_verdict_shows_only_where_the_run_profile_is_the_rows():
    entry = CoverageEntry("ci-table-3", "CI", "Table 3", "α grid", "regenerated", ("ci_alpha",),
                          ("ci-alpha-2401", "cpu-claims"), ("9",), "")
    verdicts = run_verdicts({"claims": [{"id": "9", "verdict": "contradicted"}, {"id": "1", "verdict": "supported"}]})
    assert verdict(entry, "cpu-claims", verdicts) == "9: contradicted"
    assert verdict(entry, "cpu", verdicts) == verdict(entry, None, {}) == NOT_RUN
    assert verdict(replace(entry, claims=()), "cpu-claims", verdicts) == "no claim"
    table = block_markdown(coverage_table([entry], "cpu-claims", verdicts))
    assert "| [CI] | Table 3 | α grid | regenerated | ci_alpha · ci-alpha-2401, cpu-claims | 9 | 9: contradicted |" \
        in table and "Verdict (cpu-claims)" in table


def test_a_recipe_row_is_written_from_params_and_profiles(tmp_path):
    """The fidelity table's CPU rows describe each recipe from params.yaml and its profile: a changed recipe changes
    the row, so it cannot go stale."""
    root = Path(__file__).resolve().parent.parent
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["train"] |= {"epochs": 7, "sched_on_updates": True}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    row = FIDELITY_ROW | {"differs": "as set: {recipes}", "why": "a laptop", "recipes": ["cpu", "cpu-all"]}
    write(tmp_path / "paper" if (tmp_path / "paper").mkdir() is None else tmp_path, "fidelity.yaml", [row])
    differs = load_fidelity(tmp_path / "paper")[0].differs
    cpu, cpu_all = differs.removeprefix("as set: ").split(". cpu-all: ")
    assert "7 epochs at batch 64 (217 optimizer steps)" in cpu and "lr stepped per update" in cpu
    assert "seeds 30, 31, 32, 33, 34" in cpu_all and "20 epochs" in cpu_all and "seeds 20" not in cpu_all
    for bad, message in (({"recipes": ["cpu"], "differs": "no placeholder"}, "`recipes` and {recipes}"),
                         ({"recipes": "cpu"}, "give a list of profile names")):
        write(tmp_path / "paper", "fidelity.yaml", [row | bad])
        with pytest.raises(PipelineError, match=re.escape(message)):
            load_fidelity(tmp_path / "paper")

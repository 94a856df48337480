"""paper/fidelity.yaml, the fidelity table: every arm and experiment against the official code it reproduces.

A list of entries, each {id, experiment, official: {code, repo, commit, file}, same, differs, why, option, effect}
(the schema is at the top of the file; `code: none` where no official code exists), and optionally `recipes`: the
profiles (`cpu`: params.yaml itself) whose recipes `{recipes}` in `differs` stands for, written from their params
(`pipeline.analysis.regime.recipes_text`) so that the row follows the recipe. Read once and checked key by
key: a bad file stops with one PipelineError naming the entry and the key. Any number of entries, ids unique.
docs/fidelity.md's generated block is `fidelity_table`; the report names it and counts its entries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from pipeline.analysis.document import TableBlock
from pipeline.analysis.regime import recipes_text
from pipeline.errors import PipelineError

FIDELITY = "fidelity.yaml"
KEYS = ("id", "experiment", "official", "same", "differs", "why", "option", "effect")
OPTIONAL = ("recipes",)
RECIPES = "{recipes}"
OFFICIAL_KEYS = ("code", "repo", "commit", "file")
#: the official code bases (as docs/papers.md names them) and their repositories; `none` = no official code exists
REPOS = {"code-2505": "osiriszjq/structured_initialization", "code-2404": "osiriszjq/structured_init",
         "code-2401": "osiriszjq/impulse_init", "none": ""}
NOTHING = "nothing"
KEBAB = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
COMMIT = re.compile(r"[0-9a-f]{7,40}")
KEY = re.compile(r"[a-z_]+(\.[a-z_0-9]+)+")


@dataclass(frozen=True)
class FidelityEntry:
    """One row of the fidelity table."""

    id: str
    experiment: str
    code: str  #: a key of REPOS
    repo: str
    commit: str
    file: str
    same: str
    differs: str  #: 'nothing' when we do exactly what the official code does
    why: str
    option: str  #: the params key(s) whose default is the official behaviour, or ''
    effect: str

    @property
    def source(self) -> str:
        """'code-2505 (osiriszjq/structured_initialization @7cd02f1, vit.py)', or 'none'."""
        return "none" if self.code == "none" else f"{self.code} ({self.repo} @{self.commit}, {self.file})"

    @property
    def short_source(self) -> str:
        """'code-2505 @7cd02f1, vision_transformer.py', or 'none'."""
        return "none" if self.code == "none" else f"{self.code} @{self.commit}, {Path(self.file).name}"

    @property
    def option_keys(self) -> list[str]:
        """The params keys `option` names: the first word of each comma-separated part that is a dotted key."""
        words = [part.split()[0].rstrip(":;") for part in self.option.split(",") if part.strip()]
        return [w for w in words if KEY.fullmatch(w)]


def text_value(entry: dict, key: str, where: str, empty: bool = False) -> str:
    """entry[key] as one line of text; a PipelineError when it is not a string, or empty unless `empty`."""
    value = entry.get(key)
    if not isinstance(value, str) or (not empty and not value.strip()):
        raise PipelineError(f"{where}: `{key}` must be {'a' if empty else 'a non-empty'} string, got {value!r}")
    return " ".join(value.split())


def _official(entry: dict, where: str) -> tuple[str, str, str, str]:
    off = entry.get("official")
    if not isinstance(off, dict):
        raise PipelineError(f"{where}: `official` must be a mapping {{code, repo, commit, file}}, got {off!r}")
    unknown = sorted(set(off) - set(OFFICIAL_KEYS))
    if unknown:
        raise PipelineError(f"{where}: `official.{unknown[0]}` is not a key; use {', '.join(OFFICIAL_KEYS)}")
    code = off.get("code")
    if code not in REPOS:
        raise PipelineError(f"{where}: `official.code` = {code!r}; use one of {', '.join(REPOS)}")
    if code == "none":
        if any(off.get(k) for k in OFFICIAL_KEYS[1:]):
            raise PipelineError(f"{where}: `official.code` is none, so leave out repo, commit and file")
        return code, "", "", ""
    repo, commit, file = (str(off.get(k) or "") for k in OFFICIAL_KEYS[1:])
    if repo != REPOS[code]:
        raise PipelineError(f"{where}: `official.repo` = {repo!r}, but {code} is {REPOS[code]}")
    if not COMMIT.fullmatch(commit):
        raise PipelineError(f"{where}: `official.commit` = {commit!r}; give the commit's hash (7 to 40 hex digits)")
    if not file.strip():
        raise PipelineError(f"{where}: `official.file` is empty; name the file of {repo} the experiment follows")
    return code, repo, commit, file


def parse_entry(entry, index: int, where: str, root: Path | None = None) -> FidelityEntry:
    """One entry, checked key by key; `{recipes}` filled from the params under `root` (the paper folder's parent)."""
    if not isinstance(entry, dict):
        raise PipelineError(f"{where}, entry {index + 1}: expected a mapping of {', '.join(KEYS)}")
    name = entry.get("id")
    if not isinstance(name, str) or not KEBAB.fullmatch(name):
        raise PipelineError(f"{where}, entry {index + 1}: `id` = {name!r}; give a kebab-case id (e.g. vit-impulse)")
    here = f"{where}, entry {name!r}"
    unknown = sorted(set(entry) - set(KEYS) - set(OPTIONAL))
    if unknown:
        raise PipelineError(f"{here}: `{unknown[0]}` is not a key; the keys are {', '.join(KEYS + OPTIONAL)}")
    missing = [k for k in KEYS if k not in entry]
    if missing:
        raise PipelineError(f"{here}: `{missing[0]}` is missing; every entry has {', '.join(KEYS)}")
    differs, why = text_value(entry, "differs", here), text_value(entry, "why", here, empty=True)
    if (differs == NOTHING) != (why == ""):
        raise PipelineError(f"{here}: `why` = {why!r} with `differs` = {differs!r}; give the reason exactly when"
                            f" something differs (differs: {NOTHING!r} has an empty why)")
    recipes = entry.get("recipes")
    if (recipes is not None) != (RECIPES in differs):
        raise PipelineError(f"{here}: `recipes` and {RECIPES} in `differs` go together: name the profiles (cpu for"
                            f" params.yaml) and put {RECIPES} where their recipes are described")
    if recipes is not None:
        if not isinstance(recipes, list) or not all(isinstance(r, str) for r in recipes) or not recipes:
            raise PipelineError(f"{here}: `recipes` = {recipes!r}; give a list of profile names, e.g. [cpu, cpu-all]")
        differs = differs.replace(RECIPES, recipes_text(recipes, root or Path.cwd()))
    code, repo, commit, file = _official(entry, here)
    return FidelityEntry(name, text_value(entry, "experiment", here), code, repo, commit, file,
                         text_value(entry, "same", here), differs, why, text_value(entry, "option", here, empty=True),
                         text_value(entry, "effect", here))


def entry_list(path: Path, what: str) -> list:
    """The list of entries a paper/*.yaml table file holds (fidelity.yaml, coverage.yaml); a PipelineError naming the
    file when it is missing (`what`: what it is), not YAML or not a list."""
    if not path.is_file():
        raise PipelineError(f"{path}: not found; it is {what}")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise PipelineError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(raw, list):
        raise PipelineError(f"{path}: expected a list of entries, got {type(raw).__name__}")
    return raw


def load_fidelity(paper_dir: str | Path) -> list[FidelityEntry]:
    """paper/fidelity.yaml, checked: every key of every entry, ids unique."""
    path = Path(paper_dir) / FIDELITY
    raw = entry_list(path, "the fidelity table the report prints (one entry per arm and experiment, against the"
                           " official code)")
    beside = path.resolve().parent.parent  # the paper folder's repository, else the one the command runs in
    root = beside if (beside / "params.yaml").is_file() else Path.cwd()
    entries = [parse_entry(e, i, str(path), root) for i, e in enumerate(raw)]
    seen: set[str] = set()
    for e in entries:
        if e.id in seen:
            raise PipelineError(f"{path}, entry {e.id!r}: the id is used twice; ids are unique")
        seen.add(e.id)
    return entries


def _option(e: FidelityEntry) -> str:
    return f"`{e.option}`" if e.option else "–"


def fidelity_table(entries: list[FidelityEntry]) -> TableBlock:
    """The table, one row per entry with every key (docs/fidelity.md's generated block)."""
    differ = sum(e.differs != NOTHING for e in entries)
    caption = (f"{len(entries)} arms and experiments, {differ} with a difference from the official code. code-2505 ="
               " [NeurIPS]'s code, code-2404 = [SIA]'s, code-2401 = [CI]'s (docs/papers.md); none = no official code"
               " exists. An option's default is the official behaviour.")
    return TableBlock("Fidelity to the official code (paper/fidelity.yaml)",
                      ["Experiment", "Official code", "The same", "Where we differ", "Why",
                       "Option (default = official)", "Measured effect"],
                      [[e.experiment, e.source, e.same, e.differs, e.why or "–", _option(e), e.effect]
                       for e in entries], caption)


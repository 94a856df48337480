"""The analysis plan's history from git: every change to paper/plan.yaml and to a seed list of params.yaml or a
profile, dated, beside the first result it could have been read from.

A plan fixed before its results were read makes a verdict confirmatory; a later change that a verdict may depend
on (a comparison, margin, family, α, planned n or required value; a seed list changed) is labelled post hoc for
the claims it touches when one of them had a result already: a verdict in a committed README.md, or the commit
the reported runs record. Git is asked read-only; without it the history says so.

Git's history is an input DVC cannot hash, so `python -m pipeline.analysis.plan_history` (the `plan_history` stage,
always run, as `sources` is for a user's folder) writes results/plan_history.json: the commits that touched the files
the history reads, and whether the clone is shallow. aggregate depends on that file, so a commit that changes the
history re-runs it and nothing else does; a shallow clone, whose log starts at its cut, is said to be one instead of
judged on part of the history.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from pipeline import entry
from pipeline.experiments import seed_keys
from pipeline.outputs import write_text

PLAN_FILE, README = "paper/plan.yaml", "README.md"
#: the plan_history stage's output, which aggregate depends on
FINGERPRINT = Path("results/plan_history.json")
#: where seed lists live: params.yaml and the profiles
SEED_FILES = ("params.yaml", "profiles")
#: the seed lists of params.yaml (and of a profile) a planned n may read: each experiment's (its module's `SEED_KEYS`)
SEED_KEYS = seed_keys()
VERDICT = re.compile(r"\b(supported|contradicted|inconclusive)\b")
#: the claims the README's first tables (the CPU default's impulse against both baselines) were results of
GRID_CLAIMS = ("headline", "1")
INTERVAL = re.compile(r"\[[−+-]?\d+(\.\d+)?, [−+-]?\d+(\.\d+)?\]")


#: what a plan key changes: the verdicts, or only what is stated beside them (power, labelled analyses)
POWER_ONLY = ("effect", "seed_sd", "image_sd", "power", "note", "secondary")
#: the kinds of change: a verdict may depend on it, it changes only power and notes, or comments only
VERDICT_KIND, POWER_KIND, COMMENT_KIND, DESIGN_KIND = "verdict", "power or notes only", "comments only", "design"


@dataclass(frozen=True)
class Change:

    commit: str
    date: str  #: the commit's date (ISO 8601)
    file: str
    claims: tuple  #: the claims it touches
    what: str
    kind: str = VERDICT_KIND  #: VERDICT_KIND, POWER_KIND, COMMENT_KIND or DESIGN_KIND (a seed list)


def git(root: Path, *args: str) -> str | None:
    """A read-only git command's output in `root`; None when git or the repository is missing."""
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout


def commits(root: Path, *paths: str) -> list[tuple[str, str]]:
    """(commit, ISO date) of every commit touching `paths`, oldest first (first-parent history)."""
    out = git(root, "log", "--first-parent", "--reverse", "--format=%H %cI", "--", *paths) or ""
    return [tuple(line.split(" ", 1)) for line in out.splitlines() if line.strip()]


def show(root: Path, commit: str, path: str) -> str | None:
    return git(root, "show", f"{commit}:{path}")


#: PyYAML's safe loader on libyaml where it is built with it: a history holds hundreds of versions of params.yaml
#: and the profiles, and the pure-Python parser takes 18 ms for one, libyaml's 2
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load(text: str | None) -> dict:
    try:
        return (yaml.load(text, Loader=LOADER) or {}) if text else {}
    except yaml.YAMLError:
        return {}


def _sections(text: str | None) -> dict[str, str]:
    out: dict[str, list[str]] = {}
    current, in_claims = None, False
    for line in (text or "").splitlines():
        top = re.match(r"^(\w+):", line)
        claim = re.match(r'^  "?(\w+)"?:', line)
        if top:
            in_claims = top.group(1) == "claims"
            current = None if in_claims else top.group(1)
        elif claim and in_claims:
            current = claim.group(1)
        if current:
            out.setdefault(current, []).append(line)
    return {k: "\n".join(v) for k, v in out.items()}


def plan_diff(old: str | None, new: str | None) -> list[tuple[tuple, str, str]]:
    """(claims touched, what changed, its kind) between two versions of plan.yaml."""
    a, b = _load(old), _load(new)
    out = []
    claims_a, claims_b = a.get("claims") or {}, b.get("claims") or {}
    every = tuple(str(c) for c in dict.fromkeys([*claims_a, *claims_b]))
    da, db = a.get("defaults") or {}, b.get("defaults") or {}
    if da != db:
        keys = sorted(k for k in {*da, *db} if da.get(k) != db.get(k))
        out.append((every, f"defaults changed ({', '.join(keys)})", _kind(keys)))
    if (a.get("confirmatory") or {}) != (b.get("confirmatory") or {}):
        out.append(((), f"confirmatory seeds set to {b.get('confirmatory')}", DESIGN_KIND))
    if (a.get("training") or {}) != (b.get("training") or {}):  # what a run must show to be evidence: every claim
        out.append((every, f"training rule set to {b.get('training')}", VERDICT_KIND))
    raw_a, raw_b = _sections(old), _sections(new)
    for claim in every:
        ea, eb = claims_a.get(claim, claims_a.get(int(claim)) if claim.isdigit() else None), claims_b.get(
            claim, claims_b.get(int(claim)) if claim.isdigit() else None)
        if ea is None and eb is not None:
            out.append(((claim,), "entry added: " + (", ".join(str(k) for k in (eb.get("comparisons") or {}))
                                                     or "thresholds"), VERDICT_KIND))
        elif eb is None and ea is not None:
            out.append(((claim,), "entry removed", VERDICT_KIND))
        elif ea != eb:
            what, keys = _entry_diff(ea, eb)
            out.append(((claim,), what, _kind(keys)))
        elif raw_a.get(claim) != raw_b.get(claim):
            out.append(((claim,), "comments: " + _comment_words(raw_a.get(claim), raw_b.get(claim)),
                        COMMENT_KIND))
    return out


def _kind(keys) -> str:
    return POWER_KIND if all(k in POWER_ONLY for k in keys) else VERDICT_KIND


def _entry_diff(a: dict, b: dict) -> tuple[str, list[str]]:
    parts, keys = [], []
    ca, cb = a.get("comparisons") or {}, b.get("comparisons") or {}
    added, removed = [k for k in cb if k not in ca], [k for k in ca if k not in cb]
    if added:
        parts.append(f"comparisons added: {', '.join(map(str, added))}")
    if removed:
        parts.append(f"comparisons removed: {', '.join(map(str, removed))}")
    keys += ["comparisons"] * bool(added or removed)
    for name in (k for k in cb if k in ca and ca[k] != cb[k]):
        changed = sorted(k for k in {*ca[name], *cb[name]} if ca[name].get(k) != cb[name].get(k))
        keys += changed
        said = [("note changed" if k == "note" else f"{k} {ca[name].get(k)!r} -> {cb[name].get(k)!r}")
                for k in changed]
        parts.append(f"{name}: {', '.join(said)}")
    for key in sorted({*a, *b} - {"comparisons"}):
        if a.get(key) != b.get(key):
            keys.append(key)
            parts.append(f"{key} {a.get(key)!r} -> {b.get(key)!r}" if key != "secondary" else f"{key} changed")
    return "; ".join(parts) or "changed", keys


def _comment_words(a: str | None, b: str | None) -> str:
    old = set((a or "").splitlines())
    added = [line.split("#", 1)[1].strip() for line in (b or "").splitlines() if line not in old and "#" in line]
    text = " ".join(added)
    return (text[:160] + "…") if len(text) > 160 else text or "(removed)"


def _seed_lists(data: Mapping) -> dict[str, list]:
    out = {}
    for key in SEED_KEYS:
        node = data
        for part in key.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if isinstance(node, list):
            out[key] = node
    return out


def seed_changes(root: Path, readers: Mapping[str, tuple]) -> list[Change]:
    """Every change to a seed list of params.yaml or a profile, with the claims whose planned n reads that key
    (`readers`: params key -> claims)."""
    touched = []  # (commit, date, file, its blob before, after)
    for commit, date in commits(root, *SEED_FILES):
        out = git(root, "diff-tree", "-r", f"{commit}^", commit, "--", *SEED_FILES) or ""  # against its first parent
        for line in out.splitlines():
            meta, _, f = line.partition("\t")
            if f.endswith(".yaml"):
                touched.append((commit, date, f, *meta.split()[2:4]))
    lists = seed_lists_by_blob(root, [blob for t in touched for blob in t[3:]])
    out = []
    for commit, date, f, before, after in dict.fromkeys(touched):
        old, new = lists.get(before, {}), lists.get(after, {})
        name = "cpu (params.yaml)" if f == "params.yaml" else Path(f).stem
        for key in SEED_KEYS:
            if old.get(key) != new.get(key) and (key in new or key in old):
                what = f"{name}: {key} {old.get(key)} -> {new.get(key)}"
                # setting a list where there was none designs a new experiment; changing one re-designs a
                # run whose results may have been read
                kind = VERDICT_KIND if old.get(key) and new.get(key) else DESIGN_KIND
                out.append(Change(commit, date, f, tuple(readers.get(key, ())), what, kind))
    return out


def seeds_used(root: Path, before: str | None = None) -> set[int]:
    """Every seed any version of params.yaml or a profile listed, in commits before the ISO date `before`."""
    blobs = []
    for commit, date in commits(root, *SEED_FILES):
        if before is not None and date >= before:
            break
        listing = git(root, "ls-tree", "-r", commit, "--", *SEED_FILES) or ""
        blobs += [line.split()[2] for line in listing.splitlines()]  # "<mode> blob <id>\t<path>"
    return {s for lists in seed_lists_by_blob(root, blobs).values() for seeds in lists.values() for s in seeds
            if isinstance(s, int)}


def seed_lists_by_blob(root: Path, blobs: Iterable[str]) -> dict[str, dict[str, list]]:
    """blob id -> the seed lists of that version of a file: each distinct version read and parsed once (a history
    holds the same profile at hundreds of commits), all of them in one `git cat-file --batch`."""
    wanted = {b for b in blobs if b.strip("0")}  # git writes a missing side of a diff as zeros
    ids = sorted(wanted - _SEED_LISTS.keys())
    try:
        out = subprocess.run(["git", "-C", str(root), "cat-file", "--batch"], input="\n".join(ids).encode(),
                             capture_output=True, check=True).stdout if ids else b""
    except (OSError, subprocess.CalledProcessError):
        return {}
    at = 0
    while at < len(out):  # each object: "<id> <type> <size>\n", its bytes, "\n"; or "<id> missing\n"
        end = out.index(b"\n", at)
        header = out[at:end].decode().split()
        size = int(header[2]) if len(header) == 3 else -1
        if size >= 0:
            text = out[end + 1:end + 1 + size].decode(errors="replace")
            _SEED_LISTS[header[0]] = _seed_lists(_load(text)) if header[1] == "blob" else {}
        at = end + 1 + size + 1
    return {b: _SEED_LISTS[b] for b in wanted if b in _SEED_LISTS}


#: blob id -> its seed lists (a blob id names its content, so one process may keep them across repositories)
_SEED_LISTS: dict[str, dict[str, list]] = {}


def first_results(root: Path, claims: Iterable[str], grid_claims: Iterable[str] = ()) -> dict[str, tuple[str, str]]:
    """claim -> (ISO date, commit) of the first README.md that shows a result of it (for `grid_claims`, any table row
    with an interval: the README's first tables predate its claims)."""
    ids, grid = set(claims), set(grid_claims)
    row = re.compile(r"^\|\s*(\w+)\s*\|(.*)$")
    out: dict[str, tuple[str, str]] = {}
    for commit, date in commits(root, README):
        for line in (show(root, commit, README) or "").splitlines():
            m = row.match(line)
            if m and m.group(1) in ids and m.group(1) not in out and VERDICT.search(m.group(2)):
                out[m.group(1)] = (date, commit)
            if line.startswith("|") and INTERVAL.search(line):
                for claim in sorted(grid - set(out)):  # a set's order varies by process: claims.json's would
                    out[claim] = (date, commit)
    return out


def history(root: str | Path, claims: list[str], readers: Mapping[str, tuple], run_revs: Iterable[str] = ()) -> dict:
    """The plan's history as claims.json holds it: changes (oldest first, each with its claims' first results), the
    first results per claim, this run's revision and date, and whether git answered."""
    root = Path(root)
    if git(root, "rev-parse", "--git-dir") is None:
        return {"available": False, "note": "no git history here (a copy without .git): the plan's history cannot"
                " be read"}
    if (git(root, "rev-parse", "--is-shallow-repository") or "").strip() == "true":
        return {"available": False, "note": "a shallow clone (git clone --depth): its history starts at the cut, so"
                " the plan's changes and the seeds used before are unknown here; `git fetch --unshallow` gives them"}
    first = first_results(root, claims, GRID_CLAIMS)
    changes = []
    for commit, date in commits(root, PLAN_FILE):
        old, new = show(root, f"{commit}^", PLAN_FILE), show(root, commit, PLAN_FILE)
        changes += [Change(commit, date, PLAN_FILE, touched, what, kind)
                    for touched, what, kind in plan_diff(old, new)]
    changes += seed_changes(root, readers)
    changes.sort(key=lambda c: c.date)
    labelled = []
    for c in changes:
        seen = sorted((first[k][0], k, first[k][1]) for k in c.claims if k in first and first[k][0] < c.date)
        read = f"claim {seen[0][1]}: {seen[0][0][:10]} ({seen[0][2][:7]})" if seen else ""
        labelled.append(asdict(c) | {"read_before": read, "post_hoc": bool(read) and c.kind == VERDICT_KIND,
                                     "after_run": False})
    run = {}
    revs = [r for r in run_revs if r and r != "unknown"]
    dated = sorted(((git(root, "show", "-s", "--format=%cI", r) or "").strip(), r) for r in revs)
    dated = [d for d in dated if d[0]]
    if dated:
        run = {"revision": dated[0][1], "date": dated[0][0]}
        for c in labelled:
            c["after_run"] = c["date"] > run["date"]
    return {"available": True, "changes": labelled, "run": run,
            "first_results": {k: {"date": d, "commit": c} for k, (d, c) in first.items()}}


def concerns(change: Mapping, profile: str) -> bool:
    """Whether a change can bear on a run of `profile`: every change to the plan, and one to a seed list of
    params.yaml (each profile is merged onto it) or of profiles/<profile>.yaml; another profile's seed lists never
    reach this run's cells, so changing them makes none of its verdicts post hoc."""
    return change["file"] in (PLAN_FILE, "params.yaml") or change["file"] == f"profiles/{profile}.yaml"


def names(plan: Mapping, profile: str, seeds: list[int]) -> bool:
    """Whether a version of plan.yaml names `seeds` as `profile`'s confirmatory seeds (one entry or a list)."""
    raw = plan.get("confirmatory") or []
    return any(isinstance(e, dict) and e.get("profile") == profile and sorted(e.get("seeds") or []) == seeds
               for e in (raw if isinstance(raw, list) else [raw]))


def confirmatory_status(root: str | Path, seeds: Iterable[int], profile: str, run_profile: str,
                        run_seed_lists: Mapping[str, Iterable[int]]) -> dict:
    """Whether this run is the plan's confirmatory one: its profile and every seed list are the plan's, and no earlier
    version of params.yaml or a profile listed those seeds."""
    root, seeds = Path(root), sorted(seeds)
    plans = [(date, _load(show(root, commit, PLAN_FILE))) for commit, date in commits(root, PLAN_FILE)]
    named = next((date for date, plan in plans if names(plan, profile, seeds)),  # else: when any were named
                 next((date for date, plan in plans if "confirmatory" in plan), None))
    earlier = sorted(seeds_used(root, named) & set(seeds)) if named else []
    lists = [sorted(v) for v in run_seed_lists.values() if v]
    holds = run_profile == profile and bool(lists) and all(v == seeds for v in lists) and not earlier
    return {"profile": profile, "seeds": seeds, "named": named, "used_before": earlier, "holds": holds}


def fingerprint(root: str | Path) -> dict:
    """What the history is read from: the commits (first parent) touching the plan, the seed lists and README.md, and
    whether the clone is shallow. Commit ids name their content, so an equal fingerprint is an equal history."""
    root = Path(root)
    if git(root, "rev-parse", "--git-dir") is None:
        return {"available": False}
    shallow = (git(root, "rev-parse", "--is-shallow-repository") or "").strip() == "true"
    return {"available": True, "shallow": shallow,
            "commits": [c for c, _ in commits(root, PLAN_FILE, README, *SEED_FILES)]}


def add_arguments(parser) -> None:
    parser.add_argument("--out", default=str(FINGERPRINT), help="default: results/plan_history.json")


def main(params, args) -> int:
    """The plan_history stage: the fingerprint of the repository in the working directory, written whole."""
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    record = fingerprint(Path("."))
    write_text(out, json.dumps(record, indent=1) + "\n")
    print(f"plan_history: {len(record.get('commits', []))} commit(s) of the plan, seed lists and README.md"
          + (" (a shallow clone)" if record.get("shallow") else "") + f" in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(entry.command(__spec__.name, add_arguments, main))

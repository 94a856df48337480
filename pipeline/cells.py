"""`python -m pipeline cells save`, `restore` or `rederive`: a run's cells in a compact form that is committed with the
repository, so that anyone can re-derive every published number without training.

A run's cells are the outs under results/ of the stages dvc.yaml plans for params.yaml, except those the light
stages re-derive (the aggregate's tables and summary, the plan's history). Of each out the committed form keeps
everything but the checkpoint (`*.pt`) and dvclive's logs (`live/`): per training cell metrics.json (final and
per-epoch numbers, provenance), config.json (its resolved configuration) and the per-image test correctness
(test_correct.npz, a few kB); the attention@ and floor@ outs whole. Checkpoints travel through a DVC remote
(docs/scale-out.md).

    python -m pipeline cells save        # after a run: cells/<profile>/ from results/ (commit it)
    python -m pipeline cells save --partial   # mid-run: the finished cells, and their lock entries (commit them)
    python -m pipeline cells resume      # in a fresh clone: fetch the data, put a partial run back and record its
                                         #   cells as done, so `make repro PROFILE=<profile>` trains only what is
                                         #   missing
    python -m pipeline cells restore     # put cells/<profile>/ back where the stages write them
    python -m pipeline cells rederive    # restore, then the plan history, aggregate, figures, report and README
                                         #   blocks from them: no training, a few minutes on 2 cores (the figures'
                                         #   example images need the dataset: fetched first where it is missing)
    python -m pipeline cells rederive-set   # the laptop set's one claims table from its runs' committed cells
                                         #   (each re-derived in a scratch clone of HEAD): reports/claims.md, then
                                         #   the README's claims block (`pipeline.analysis.laptop_set`)
    python -m pipeline cells compare     # your own run (results/) against them: which cells, comparisons and
                                         #   verdicts moved (`pipeline.analysis.reproduction`); changes neither

`save` refuses a run with a planned cell missing (a partial run is not what a document quotes) unless told
`--partial`, which is for a long run spread over several sittings or machines: it keeps the finished cells and their
dvc.lock entries (`PARTIAL_LOCK`). `resume` restores them and records in dvc.lock, with `dvc commit`, each cell
whose recorded code, configuration and data equal what this clone has (`dvc status` then finds only its outs
changed: the checkpoint the compact form leaves out); a cell whose inputs moved is left stale, so it trains again,
and so do the cells whose checkpoints it loads (`needing_training`).
`restore` refuses a cell whose resolved configuration is not the one params.yaml now plans (`configs/`), naming it,
so a committed cell never stands in for another recipe.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from pipeline.data.fetch.fingerprint import SOURCES
from pipeline.errors import PipelineError
from pipeline.params import Params

CELLS = Path("cells")
RESULTS = Path("results")
#: outs the light stages re-derive: never committed as cells
DERIVED = (RESULTS / "tables", RESULTS / "summary.json", RESULTS / "plan_history.json")
#: what the compact form leaves out of an out: checkpoints and dvclive's per-step logs
DROPPED_SUFFIXES, DROPPED_DIRS = (".pt",), ("live",)
#: a partial run's dvc.lock entries of its finished cells, beside them in cells/<profile>/
PARTIAL_LOCK = "partial.lock"
#: the light stages, in order, that turn cells into the report (as dvc.yaml runs them), then the README's blocks
REDERIVE = ("pipeline.analysis.plan_history", "pipeline.analysis.aggregate", "pipeline.analysis.figures",
            "pipeline.analysis.report")


def planned_stages(root: Path = Path(".")) -> dict[Path, str]:
    """{results/ out: its stage's name} of every stage dvc.yaml defines for params.yaml, less the derived outs."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        base = Path(repo.root_dir).resolve()
        found = {Path(out.fs_path).relative_to(base): stage.addressing for stage in repo.index.stages
                 for out in stage.outs}
    return {o: found[o] for o in sorted(found) if o.parts[0] == RESULTS.name and o not in DERIVED}


def planned_outs(root: Path = Path(".")) -> list[Path]:
    """The results/ outs of every stage dvc.yaml defines for params.yaml, less the derived ones (module docstring)."""
    return list(planned_stages(root))


def kept(path: Path) -> bool:
    return path.suffix not in DROPPED_SUFFIXES and not set(path.parts) & set(DROPPED_DIRS)


def compact_files(out: Path) -> list[Path]:
    """The files of one out the compact form keeps, relative to the working directory."""
    if out.is_file():
        return [out]
    return sorted(p for p in out.rglob("*") if p.is_file() and kept(p.relative_to(out)))


def store(params: Params) -> Path:
    return CELLS / params.profile


def lock_entries(root: Path, names) -> dict:
    """dvc.lock's entries of the stages `names` (those it records)."""
    lock = root / "dvc.lock"
    stages = (yaml.safe_load(lock.read_text()) or {}).get("stages", {}) if lock.is_file() else {}
    return {n: stages[n] for n in names if n in stages}


def save(params: Params, root: Path = Path("."), partial: bool = False) -> Path:
    """Copy the compact form of every planned cell into cells/<profile>/, replacing what was there; refuses (naming
    them) when a planned cell has not run, unless `partial`: then the cells DVC has recorded as finished (those with a
    dvc.lock entry, not one still training) and their lock entries."""
    planned = planned_stages(root)
    recorded = lock_entries(root, planned.values())
    # finished = there and recorded by DVC: an out without its lock entry is a cell still training (dvclive writes
    # into it as it goes) or one run by hand
    outs = [o for o in planned if (root / o).exists() and planned[o] in recorded]
    missing = [str(o) for o in planned if o not in outs]
    if missing and not partial:
        raise PipelineError(f"{len(missing)} planned cell(s) have not finished, e.g. {', '.join(missing[:3])}; run"
                            " `python -m pipeline repro` first, or keep what finished with `cells save --partial`")
    entries = {planned[o]: recorded[planned[o]] for o in outs} if partial else {}
    dest = root / store(params)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if partial:
        (tmp / PARTIAL_LOCK).write_text(yaml.safe_dump({"schema": "2.0", "stages": entries}, sort_keys=True))
    for out in outs:
        for f in compact_files(root / out):
            target = tmp / f.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, target)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


def resolved_config(root: Path, out: Path) -> dict | None:
    """The configuration params.yaml resolves for the cell whose out is `out` (configs/, the configs stage's), or None
    for an out that is no training cell."""
    path = root / out / "config.json"
    if not path.is_file():
        return None
    results = json.loads(path.read_text()).get("results")
    for config in (root / "configs").rglob("*.json"):
        try:
            value = json.loads(config.read_text())
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and value.get("results") == results:
            return value
    return None


def restore(params: Params, root: Path = Path("."), partial: bool = False) -> list[Path]:
    """Put cells/<profile>/ back under results/; refuses a cell whose recorded configuration differs from the one
    params.yaml now resolves (configs/, written by `python -m pipeline resolve`). `partial`: the cells it holds."""
    source = root / store(params)
    if not source.is_dir():
        raise PipelineError(f"{source}: no committed cells for profile {params.profile!r}; `python -m pipeline cells"
                            " save` after its run writes them")
    outs = planned_outs(root)
    absent = [str(o) for o in outs if not (source / o).exists()]
    if partial:
        outs = [o for o in outs if (source / o).exists()]
    elif absent:
        raise PipelineError(f"{source} lacks {len(absent)} planned cell(s), e.g. {', '.join(absent[:3])}: params.yaml"
                            f" plans another run than the one committed for {params.profile!r}")
    moved = []
    for out in outs:
        recorded = source / out / "config.json"
        if recorded.is_file():
            planned = resolved_config(root, out)
            if planned is not None and planned != json.loads(recorded.read_text()):
                raise PipelineError(f"{out}: the committed cell was made with another configuration than params.yaml"
                                    " plans now (configs/); restore the params of its run or re-run it")
        shutil.rmtree(root / out, ignore_errors=True)
        if (source / out).is_file():
            (root / out).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / out, root / out)
        else:
            shutil.copytree(source / out, root / out)
        moved.append(out)
    return moved


def producers(recorded: dict) -> dict[str, str]:
    """{out path: the recorded stage that writes it}."""
    return {o["path"]: name for name, entry in recorded.items() for o in entry.get("outs", [])}


def upstreams(recorded: dict) -> dict[str, set[str]]:
    """{recorded stage: the recorded stages whose outs it depends on} (e.g. select_finetune@… on pretrain@…)."""
    made = producers(recorded)
    return {name: {made[d["path"]] for d in entry.get("deps", []) if made.get(d["path"], name) != name}
            for name, entry in recorded.items()}


def in_order(recorded: dict) -> list[list[str]]:
    """The recorded stages in levels: each after every recorded stage it depends on."""
    ups, done, levels = upstreams(recorded), set(), []
    while len(done) < len(ups):
        level = sorted(n for n in ups if n not in done and ups[n] <= done)
        if not level:
            raise PipelineError(f"{PARTIAL_LOCK}: its stages depend on each other in a cycle:"
                                f" {sorted(set(ups) - done)}")
        levels.append(level)
        done |= set(level)
    return levels


def relink(entry: dict, recorded: dict, lock: dict) -> bool:
    """Point `entry`'s deps on recorded upstream outs at what the upstream's adoption recorded in `lock`, where the
    partial run's entry shows it ran on exactly the upstream's recorded out; False where one did not (or the
    upstream was not adopted): then it is stale. The committed form leaves an out's checkpoint out, so a restored
    out never hashes as the one recorded, though it is the same cell's."""
    made = producers(recorded)
    for dep in entry.get("deps", []):
        upstream = made.get(dep["path"])
        if upstream is None:
            continue
        ran_on = next(o for o in recorded[upstream]["outs"] if o["path"] == dep["path"])
        now = next((o for o in (lock.get(upstream) or {}).get("outs", []) if o["path"] == dep["path"]), None)
        if now is None or ran_on.get("md5") != dep.get("md5"):
            return False
        dep.update({k: v for k, v in now.items() if k != "path"})
    return True


def needing_training(stale: set[str], adopted: set[str], recorded: dict) -> set[str]:
    """The adopted stages a stale one depends on, transitively: it loads their checkpoints, which the committed form
    leaves out, so they train again too."""
    ups, found, todo = upstreams(recorded), set(), list(stale)
    while todo:
        for upstream in ups.get(todo.pop(), ()):
            if upstream in adopted and upstream not in found:
                found.add(upstream)
                todo.append(upstream)
    return found


def resume(params: Params, root: Path = Path(".")) -> tuple[list[str], list[str]]:
    """Restore a partial run's cells and record in dvc.lock those whose inputs are unchanged (module docstring):
    (the stages recorded, the stages left to train again). Stages are checked upstream first (`in_order`): a
    cell depending on another's out (a fine-tune on its teacher) is recorded when it ran on that out as recorded
    (`relink`); a stale one sends the cells it loads from back to training (`needing_training`)."""
    from dvc.repo import Repo

    source = root / store(params) / PARTIAL_LOCK
    if not source.is_file():
        raise PipelineError(f"{source}: no partial run of profile {params.profile!r} is committed (`python -m"
                            " pipeline cells save --partial` keeps one)")
    recorded = (yaml.safe_load(source.read_text()) or {}).get("stages", {})
    run("-m", "pipeline", "resolve")
    fetch_missing(params)  # every cell depends on its dataset: a fresh clone has none, so every cell would be stale
    moved = restore(params, root, partial=True)
    lock_path = root / "dvc.lock"

    def read_lock() -> dict:
        lock = (yaml.safe_load(lock_path.read_text()) or {}) if lock_path.is_file() else {}
        lock.setdefault("schema", "2.0")
        lock["stages"] = lock.get("stages") or {}
        return lock

    lock = read_lock()
    lock["stages"] |= copy.deepcopy(recorded)  # relink edits the lock's entries, never `recorded`
    lock_path.write_text(yaml.safe_dump(lock, sort_keys=False))
    adopted, stale = [], []
    for level in in_order(recorded):
        lock = read_lock()  # as the previous level's `dvc commit` left it
        linked = {n for n in level if relink(lock["stages"][n], recorded, lock["stages"])}
        lock_path.write_text(yaml.safe_dump(lock, sort_keys=False))
        with Repo(str(root)) as repo:
            for name in level:
                changes = [k for change in repo.status(targets=[name]).get(name, []) if isinstance(change, dict)
                           for k in change]
                if name not in linked or any(k != "changed outs" for k in changes):
                    stale.append(name)
                    continue
                repo.commit(name, force=True)
                adopted.append(name)
    again = needing_training(set(stale), set(adopted), recorded)
    if again:
        lock = read_lock()
        lock["stages"] = {k: v for k, v in lock["stages"].items() if k not in again}
        lock_path.write_text(yaml.safe_dump(lock, sort_keys=False))
        adopted = [n for n in adopted if n not in again]
        stale += sorted(again)
    print(f"cells: restored {len(moved)} cell(s) of profile {params.profile!r}; recorded {len(adopted)} as done;"
          f" {len(stale)} left to train again (their code, configuration or data changed"
          + (", or a cell that loads them did" if again else "")
          + (f", e.g. {', '.join(stale[:3])})" if stale else ")"), flush=True)
    return adopted, stale


def run(*argv: str, cwd: Path | None = None) -> None:
    done = subprocess.run([sys.executable, *argv], cwd=cwd, check=False)
    if done.returncode:
        where = f" in {cwd}" if cwd else ""
        raise PipelineError(f"`python {' '.join(argv)}`{where} exited {done.returncode}; its output above says why")


def fetch_missing(params: Params) -> None:
    """Fetch each dataset a stage of this plan fetches (data/sources/ names them: the grid's and weight selection's)
    that this clone lacks, as its dvc.yaml stage does (offline for the default's Fashion-MNIST): the same files, so a
    restored cell's recorded data dependency matches."""
    run("-m", "pipeline.stage", "pipeline.data.fetch.fingerprint")
    for source in sorted(SOURCES.glob("*.json")):
        if not (Path(params.data.root) / source.stem).is_dir():
            run("-m", "pipeline.stage", "pipeline.data.fetch", source.stem)


def rederive(params: Params) -> None:
    """Restore the committed cells, then the light stages and the README's blocks from them (module docstring)."""
    run("-m", "pipeline", "resolve")
    fetch_missing(params)  # the figures draw example images
    moved = restore(params)
    print(f"cells: restored {len(moved)} cell(s) of profile {params.profile!r} from {store(params)}", flush=True)
    for module in REDERIVE:
        run("-m", "pipeline.stage", module)
    run("-m", "pipeline", "readme")


def rederive_set(root: Path = Path(".")) -> Path:
    """reports/claims.md: the laptop set's table from each of its runs whose cells are committed whole (module
    docstring), each re-derived in a scratch clone of HEAD, so only committed cells and plan history count."""
    import tempfile

    from pipeline.analysis.claims_report import LAPTOP_SET
    from pipeline.analysis.laptop_set import set_markdown

    finished = [p for p in LAPTOP_SET
                if (root / CELLS / p).is_dir() and not (root / CELLS / p / PARTIAL_LOCK).is_file()]
    if not finished:
        raise PipelineError(f"no run of the laptop set ({', '.join(LAPTOP_SET)}) has its cells committed whole in"
                            f" {CELLS}/; `python -m pipeline cells save` after a run writes them")
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for profile in finished:
            clone = Path(tmp) / profile
            if subprocess.run(["git", "clone", "--quiet", str(root.resolve()), str(clone)], check=False).returncode:
                raise PipelineError(f"could not clone {root.resolve()} for profile {profile!r}; `git status` says why")
            run("-m", "pipeline", "profile", profile, cwd=clone)
            run("-m", "pipeline", "cells", "rederive", cwd=clone)
            tables = clone / RESULTS / "tables"
            runs[profile] = tuple(json.loads((tables / name).read_text())
                                  for name in ("claims.json", "what_was_run.json"))
    out = root / "reports" / "claims.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(set_markdown(runs))
    print(f"cells: wrote {out} from the runs of {', '.join(finished)}", flush=True)
    return out


def add_arguments(parser) -> None:
    parser.add_argument("action", choices=("save", "restore", "resume", "rederive", "rederive-set", "compare"),
                        help="see the module docstring")
    parser.add_argument("--partial", action="store_true", help="save: keep the finished cells of a run under way")


def main(params: Params, args) -> int:
    if args.action == "save":
        print(f"cells: wrote {save(params, partial=getattr(args, 'partial', False))} (commit it)")
    elif args.action == "resume":
        resume(params)
    elif args.action == "restore":
        print(f"cells: restored {len(restore(params))} cell(s) from {store(params)}")
    elif args.action == "rederive-set":
        rederive_set()
        if Path("reports/headline.md").is_file():  # the other blocks' sources are here (`cells rederive` made them)
            run("-m", "pipeline", "readme")
        else:
            print("cells: `python -m pipeline cells rederive` first makes the README's other blocks' sources; then"
                  " this command puts the table into the README with them")
    elif args.action == "compare":
        from pipeline.analysis.reproduction import compare  # the analysis only for this action

        lines, changed = compare(params, store(params))
        print("\n".join(lines))
        return 1 if changed else 0
    else:
        rederive(params)
    return 0

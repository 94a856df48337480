"""A run's cells in their committed form (`pipeline.cells`): saved without checkpoints, restored only for the
configuration that made them, and re-derived into the same report and README blocks without training."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pypdf import PdfReader
from workspace import copy_built, set_params, sh

from pipeline.params import load_params

ROOT = Path(__file__).resolve().parent.parent


def test_committed_cells_rederive_the_same_blocks_without_training(smoke_built, tmp_path):
    repo = copy_built(smoke_built[0], tmp_path / "repo")
    before = (repo / "reports/headline.md").read_text()
    sh(repo, "python", "-m", "pipeline", "readme")  # the README as the run's own report writes it
    readme = (repo / "README.md").read_text()
    assert "wrote cells/smoke" in sh(repo, "python", "-m", "pipeline", "cells", "save")
    cells = repo / "cells" / "smoke"
    kept = sorted(p.relative_to(cells).as_posix() for p in cells.rglob("*") if p.is_file())
    cell = "results/train/fashion_mnist/vit/impulse/seed0/"
    assert {cell + f for f in ("metrics.json", "config.json", "test_correct.npz")} <= set(kept)
    assert not [k for k in kept if k.endswith(".pt") or "/live/" in k]  # no checkpoint, no dvclive logs
    assert sum(p.stat().st_size for p in cells.rglob("*") if p.is_file()) < 2_000_000
    for gone in ("results", "reports"):  # a fresh clone: no results, no DVC cache to serve them
        shutil.rmtree(repo / gone)
    shutil.rmtree(repo / ".dvc" / "cache")
    out = sh(repo, "python", "-m", "pipeline", "cells", "rederive")
    assert "restored" in out and "final top-1" not in out  # nothing trained
    assert (repo / "reports/headline.md").read_text() == before
    assert (repo / "README.md").read_text() == readme
    sh(repo, "python", "-m", "pipeline", "readme", "--check")


def test_a_committed_cell_never_stands_in_for_another_recipe(smoke_built, tmp_path):
    repo = copy_built(smoke_built[0], tmp_path / "repo")
    sh(repo, "python", "-m", "pipeline", "cells", "save")
    set_params(repo / "params.yaml", {"train.lr": 0.002})
    sh(repo, "python", "-m", "pipeline", "resolve")
    out = sh(repo, "python", "-m", "pipeline", "cells", "restore", check=False)
    assert "the committed cell was made with another configuration than params.yaml plans now" in out
    assert "results/train/fashion_mnist/" in out


def clone_here(repo: Path) -> Path:
    """A git clone of this repository with this working tree on top (its history is the plan's history)."""
    sh(ROOT, "git", "clone", "-q", str(ROOT), str(repo))
    for name in sh(ROOT, "git", "ls-files", "-co", "--exclude-standard").splitlines():
        if (ROOT / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    return repo


#: the most pages the CPU default's report may take: its reader's; the auditor's tables are reports/appendix.md
REPORT_PAGES = 12


def test_the_committed_cells_rederive_the_readmes_blocks(tmp_path):
    """The README's headline and the docs' generated blocks are the committed run's: re-derived from
    cells/<profile>/ in a clone (its git history is the plan's history), without training, they are the README's
    (`readme --check`), the run's summary is results/summary.json's, and its report is at most REPORT_PAGES long."""
    repo = clone_here(tmp_path / "repo")
    profile = load_params(repo / "params.yaml").profile
    assert (repo / "cells" / profile).is_dir(), f"cells/{profile}/ is not committed: the README's run is not either"
    out = sh(repo, "python", "-m", "pipeline", "cells", "rederive")
    assert "restored" in out and "final top-1" not in out
    sh(repo, "python", "-m", "pipeline", "readme", "--check")
    summary = json.loads((repo / "results/summary.json").read_text())
    assert summary == json.loads((ROOT / "results/summary.json").read_text())
    pages = len(PdfReader(repo / "reports/report.pdf").pages)
    assert pages <= REPORT_PAGES, f"the {profile} report is {pages} pages: move the auditor's material to appendix.md"
    assert (repo / "reports/appendix.md").read_text().count("\n## ") >= 3  # the plan, its history, every run


@pytest.mark.slow("runs DVC's status and commit over every cell of the smoke build and plans the runner's repro")
def test_a_partial_run_resumes_in_a_fresh_clone_training_only_what_is_missing(smoke_built, tmp_path):
    """`cells save --partial` mid-run keeps the finished cells and their lock entries; in a fresh clone (no results,
    no DVC cache, no lock entries for them) `cells resume` records them as done, so the runner plans only the cell
    that had not finished, and a cell whose code stamp moved trains again."""
    import yaml

    repo = copy_built(smoke_built[0], tmp_path / "repo")
    unfinished = "results/train/fashion_mnist/vit/impulse/seed0"
    shutil.rmtree(repo / unfinished)  # a run stopped while this cell trained: its out holds dvclive's logs only,
    (repo / unfinished / "live").mkdir(parents=True)  # and DVC has recorded nothing for it
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    del lock["stages"]["train@fashion_mnist-vit-impulse-0"]
    (repo / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))
    out = sh(repo, "python", "-m", "pipeline", "cells", "save", check=False)
    assert "keep what finished with `cells save --partial`" in out
    sh(repo, "python", "-m", "pipeline", "cells", "save", "--partial")
    partial = yaml.safe_load((repo / "cells/smoke/partial.lock").read_text())["stages"]
    assert "train@fashion_mnist-vit-default-0" in partial and "train@fashion_mnist-vit-impulse-0" not in partial
    assert not (repo / "cells/smoke" / unfinished).exists()  # a cell still training is not kept
    for gone in ("results", "reports", ".dvc/cache", "data"):  # a fresh clone on another machine (no dataset)
        shutil.rmtree(repo / gone, ignore_errors=True)
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    lock["stages"] = {k: v for k, v in lock["stages"].items() if k not in partial}
    (repo / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))
    moved = "train@fashion_mnist-vit-mimetic-0"  # made with another code than this clone's: trains again
    partial[moved]["deps"][0]["md5"] = "0" * 32
    (repo / "cells/smoke/partial.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": partial}))
    out = sh(repo, "python", "-m", "pipeline", "cells", "resume")
    assert f"recorded {len(partial) - 1} as done; 1 left to train again" in out and moved in out
    plan = sh(repo, "python", "-m", "pipeline", "repro", "--dry")
    stale = {line.split(":")[0].strip() for line in plan.splitlines() if ": stale;" in line}
    assert {"train@fashion_mnist-vit-impulse-0", moved} <= stale
    assert not stale & (set(partial) - {moved})


@pytest.mark.slow("re-derives the laptop set's committed runs into their claims (about three minutes on 2 cores)")
def test_the_committed_laptop_cells_rederive_the_readmes_claims_table(tmp_path):
    """The README's one claims table is the laptop set's: its runs' committed cells re-derived (each in a scratch
    clone) give the same table (`readme --check` with the merged reports/claims.md), training nothing."""
    repo = clone_here(tmp_path / "repo")
    out = sh(repo, "python", "-m", "pipeline", "cells", "rederive-set")
    assert "cells: wrote reports/claims.md from the runs of laptop" in out and "final top-1" not in out
    claims = (repo / "reports/claims.md").read_text()
    assert claims.startswith("**Every claim in one table: profile")
    sh(ROOT, "python", "-m", "pipeline", "readme", "--check", "--claims", str(repo / "reports/claims.md"))


def lock_entry(deps: dict[str, str], outs: dict[str, str]) -> dict:
    """A dvc.lock entry with these {path: md5} deps and outs."""
    return {"cmd": "python -m pipeline.cell ...",
            "deps": [{"path": p, "hash": "md5", "md5": m} for p, m in deps.items()],
            "outs": [{"path": p, "hash": "md5", "md5": m, "size": 1, "nfiles": 1} for p, m in outs.items()]}


def teacher_and_students() -> dict:
    """A partial run's lock: a teacher and two fine-tunes on it, one of which ran on an earlier teacher."""
    from pipeline.cells import producers

    recorded = {"pretrain@t": lock_entry({"data/fashion_mnist": "d"}, {"results/pretrain/t": "full"}),
                "select_finetune@a": lock_entry({"results/pretrain/t": "full"}, {"results/ws/a": "a"}),
                "select_finetune@b": lock_entry({"results/pretrain/t": "earlier"}, {"results/ws/b": "b"})}
    assert producers(recorded)["results/pretrain/t"] == "pretrain@t"
    return recorded


def test_resume_checks_a_teacher_before_the_cells_fine_tuned_from_it():
    from pipeline.cells import in_order, upstreams
    from pipeline.errors import PipelineError

    recorded = teacher_and_students()
    assert upstreams(recorded)["select_finetune@a"] == {"pretrain@t"} and not upstreams(recorded)["pretrain@t"]
    assert in_order(recorded) == [["pretrain@t"], ["select_finetune@a", "select_finetune@b"]]
    recorded["pretrain@t"]["deps"].append({"path": "results/ws/a", "md5": "a"})  # a cycle no DVC plan has
    with pytest.raises(PipelineError, match="cycle"):
        in_order(recorded)


def test_a_fine_tune_is_recorded_on_its_restored_teacher_only_if_it_ran_on_that_teacher():
    """The restored teacher lacks its checkpoint, so it hashes anew when adopted: a fine-tune that ran on the
    recorded teacher is pointed at the new hash; one that ran on another teacher is not (it trains again)."""
    import copy

    from pipeline.cells import relink

    recorded = teacher_and_students()
    lock = copy.deepcopy(recorded)
    lock["pretrain@t"]["outs"][0].update(md5="compact", size=0)  # what `dvc commit` recorded for the restored out
    assert relink(lock["select_finetune@a"], recorded, lock)
    assert lock["select_finetune@a"]["deps"][0] == {"path": "results/pretrain/t", "hash": "md5", "md5": "compact",
                                                     "size": 0, "nfiles": 1}
    assert not relink(lock["select_finetune@b"], recorded, lock)
    assert lock["select_finetune@b"]["deps"][0]["md5"] == "earlier"
    del lock["pretrain@t"]  # a teacher left stale: nothing recorded to point at
    assert not relink(copy.deepcopy(recorded["select_finetune@a"]), recorded, lock)
    assert relink(lock["select_finetune@b"] | {"deps": []}, recorded, lock)  # no upstream: nothing to relink


def test_a_fine_tune_that_trains_again_sends_its_teacher_back_to_training():
    """A stale fine-tune loads its teacher's checkpoint, which the committed cells leave out: the teacher trains
    again too, while a teacher whose fine-tunes are all recorded stays recorded."""
    from pipeline.cells import needing_training

    recorded = teacher_and_students()
    everything = set(recorded)
    assert needing_training({"select_finetune@b"}, everything - {"select_finetune@b"}, recorded) == {"pretrain@t"}
    assert needing_training(set(), everything, recorded) == set()
    assert needing_training({"pretrain@t"}, everything - {"pretrain@t"}, recorded) == set()

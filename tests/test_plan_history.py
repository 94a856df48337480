"""The plan's history from git (pipeline/analysis/plan_history.py), on a small repository whose commits are dated:
a change a verdict depends on after a recorded result is post hoc, power assumptions and comments are not, a seed
list changed after results is, and the confirmatory seeds are checked against every earlier seed list."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from pipeline.analysis.plan_history import POWER_KIND, VERDICT_KIND, concerns, confirmatory_status, history

PLAN = """defaults:
  alpha: 0.025
claims:
  "1":
    comparisons:                # a comment
      a_b: {{a: a, b: b, direction: greater, margin: {margin}, effect: 1.0}}
    seed_sd: {sd}
{confirmatory}"""


def commit(repo: Path, day: int, message: str, files: dict[str, str]) -> None:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    date = f"2026-01-{day:02d}T12:00:00+00:00"
    env = os.environ | {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message],
                   check=True, env=env)


@pytest.fixture
def repo(tmp_path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    commit(repo, 1, "plan", {"paper/plan.yaml": PLAN.format(margin=0, sd=3.0, confirmatory=""),
                             "params.yaml": "seeds: [0, 1, 2]\n", "README.md": "no results\n"})
    commit(repo, 2, "a result", {"README.md": "| 1 | inconclusive | a − b +1.0 [-2.0, +4.0] |\n"})
    commit(repo, 3, "power only", {"paper/plan.yaml": PLAN.format(margin=0, sd=4.0, confirmatory="")})
    commit(repo, 4, "margin after the result", {"paper/plan.yaml": PLAN.format(margin=1, sd=4.0, confirmatory="")})
    commit(repo, 5, "more seeds after a look", {"params.yaml": "seeds: [0, 1, 2, 3, 4]\n"})
    commit(repo, 6, "confirmatory seeds", {"paper/plan.yaml": PLAN.format(
        margin=1, sd=4.0, confirmatory="confirmatory: {profile: set, seeds: [10, 11]}\n")})
    commit(repo, 7, "the set", {"profiles/set.yaml": "seeds: [10, 11]\n"})
    return repo


def test_changes_are_dated_and_post_hoc_ones_labelled(repo):
    h = history(repo, ["1"], {"seeds": ("1",)})
    assert h["available"] and h["first_results"]["1"]["date"].startswith("2026-01-02")
    by_what = {c["what"]: c for c in h["changes"]}
    power = by_what["seed_sd 3.0 -> 4.0"]
    assert power["kind"] == POWER_KIND and not power["post_hoc"] and power["read_before"].startswith("claim 1:")
    margin = by_what["a_b: margin 0 -> 1"]
    assert margin["kind"] == VERDICT_KIND and margin["post_hoc"] and margin["date"].startswith("2026-01-04")
    seeds = by_what["cpu (params.yaml): seeds [0, 1, 2] -> [0, 1, 2, 3, 4]"]
    assert seeds["post_hoc"] and tuple(seeds["claims"]) == ("1",)
    first = next(c for c in h["changes"] if c["what"].startswith("entry added"))
    assert not first["post_hoc"] and first["read_before"] == ""  # the plan came before any result
    assert by_what["set: seeds None -> [10, 11]"]["kind"] == "design"  # a new run's seeds: not a re-design


def test_changes_after_the_runs_revision_are_marked(repo):
    rev = subprocess.run(["git", "-C", str(repo), "rev-list", "-n", "1", "HEAD~3"], capture_output=True, text=True,
                         check=True).stdout.strip()  # the run trained at day 4
    h = history(repo, ["1"], {"seeds": ("1",)}, [rev])
    assert h["run"]["revision"] == rev
    late = [c for c in h["changes"] if c["after_run"]]
    assert [c["date"][:10] for c in late] == ["2026-01-05", "2026-01-06", "2026-01-07"]


def test_another_profiles_seed_lists_never_make_a_run_post_hoc(repo):
    """Re-seeding profile `set` after its results were read is post hoc for a run of `set`, not for the CPU
    default's (params.yaml), whose cells it never reaches; the plan and params.yaml bear on every run."""
    commit(repo, 8, "the set re-seeded", {"profiles/set.yaml": "seeds: [12, 13]\n"})
    by_what = {c["what"]: c for c in history(repo, ["1"], {"seeds": ("1",)})["changes"]}
    reseed = by_what["set: seeds [10, 11] -> [12, 13]"]
    assert reseed["kind"] == VERDICT_KIND and reseed["post_hoc"]
    assert concerns(reseed, "set") and not concerns(reseed, "cpu")
    params = by_what["cpu (params.yaml): seeds [0, 1, 2] -> [0, 1, 2, 3, 4]"]
    margin = by_what["a_b: margin 0 -> 1"]
    assert all(concerns(c, p) for c in (params, margin) for p in ("cpu", "set"))


def test_confirmatory_seeds_must_be_new_and_the_whole_run(repo):
    ok = confirmatory_status(repo, [10, 11], "set", "set", {"seeds": [10, 11], "sia.seeds": []})
    assert ok["holds"] and ok["used_before"] == [] and ok["named"].startswith("2026-01-06")
    assert not confirmatory_status(repo, [10, 11], "set", "set", {"seeds": [10, 11, 12]})["holds"]
    assert not confirmatory_status(repo, [10, 11], "set", "cpu", {"seeds": [10, 11]})["holds"]
    reused = confirmatory_status(repo, [2, 10], "set", "set", {"seeds": [2, 10]})
    assert reused["used_before"] == [2] and not reused["holds"]


def test_without_git_the_history_says_so(tmp_path):
    h = history(tmp_path, ["1"], {})
    assert not h["available"] and "no git history" in h["note"]


def test_a_merge_is_one_change_against_its_first_parent(repo):
    """History is first-parent: a branch's seed list arrives with its merge, and what the main line changed meanwhile
    is not counted again as the merge's difference from the branch."""
    def git(*args: str) -> None:
        date = "2026-01-10T12:00:00+00:00"  # the merge's
        env = os.environ | {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                       env=env, capture_output=True)

    git("checkout", "-q", "-b", "side")
    commit(repo, 8, "a profile's seeds on a branch", {"profiles/set.yaml": "seeds: [10, 11, 12]\n"})
    git("checkout", "-q", "-")
    commit(repo, 9, "the main line's seeds", {"params.yaml": "seeds: [0, 1]\n"})
    git("merge", "-q", "--no-ff", "-m", "merge", "side")
    changes = [(c["date"][:10], c["what"]) for c in history(repo, ["1"], {"seeds": ("1",)})["changes"]]
    assert [c for c in changes if c[0] >= "2026-01-08"] == [
        ("2026-01-09", "cpu (params.yaml): seeds [0, 1, 2, 3, 4] -> [0, 1]"),
        ("2026-01-10", "set: seeds [10, 11] -> [10, 11, 12]")]


def test_a_changed_training_rule_is_a_change_every_verdict_depends_on():
    from pipeline.analysis.plan_history import plan_diff

    old = "claims: {'1': {seed_sd: 1.0}, '4': {seed_sd: 2.0}}\n"
    [(claims, what, kind)] = plan_diff(old, old + "training: {chance_loss_ratio: 0.9}\n")
    assert set(claims) == {"1", "4"} and kind == VERDICT_KIND and what.startswith("training rule set to")


def test_the_stages_fingerprint_changes_with_the_history_it_reads_and_a_shallow_clone_says_so(repo, tmp_path):
    """aggregate depends on results/plan_history.json (dvc.yaml), the `plan_history` stage's record of the commits the
    history reads: a commit touching the plan, a seed list or README.md changes it, another commit does not; a shallow
    clone gives no history, saying why, rather than one cut at its depth."""
    from pipeline.analysis.plan_history import fingerprint
    from pipeline.stages import render

    before = fingerprint(repo)
    commit(repo, 20, "code", {"notes.txt": "x"})
    assert fingerprint(repo) == before and before["available"] and not before["shallow"]
    commit(repo, 21, "plan", {"paper/plan.yaml": PLAN.format(margin=0.5, sd=2.0, confirmatory="")})
    assert fingerprint(repo)["commits"] == [*before["commits"], fingerprint(repo)["commits"][-1]]
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow)], check=True)
    assert fingerprint(shallow)["shallow"]
    record = history(shallow, ["1"], {})
    assert not record["available"] and "shallow" in record["note"]
    stages = yaml.safe_load(render())["stages"]
    assert stages["plan_history"]["always_changed"] and "results/plan_history.json" in stages["aggregate"]["deps"]

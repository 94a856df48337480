"""Cells shared through a DVC remote (docs/scale-out.md, "Sharing runs"): one clone trains and pushes, another
pulls and has every output, its stages up to date, the same report, without training."""

from __future__ import annotations

from workspace import copy_built, sh


def test_a_pulled_run_is_used_as_it_is_without_training(smoke_built, tmp_path):
    lab = copy_built(smoke_built[0], tmp_path / "lab")
    remote = tmp_path / "shared-remote"  # a cluster's shared filesystem, say
    sh(lab, "dvc", "remote", "add", "-d", "shared", str(remote))
    sh(lab, "dvc", "push")
    sh(lab, "git", "add", "-A")
    sh(lab, "git", "commit", "-qm", "the run and its remote")
    other = tmp_path / "other"
    sh(tmp_path, "git", "clone", "-q", str(lab), str(other))
    assert not (other / "results" / "train").exists()
    sh(other, "dvc", "pull")
    cell = "results/train/fashion_mnist/vit/impulse/seed0"
    assert (other / cell / "model.pt").read_bytes() == (lab / cell / "model.pt").read_bytes()  # checkpoints too
    assert (other / "reports/headline.md").read_text() == (lab / "reports/headline.md").read_text()
    out = sh(other, "python", "-m", "pipeline", "repro")
    started = [line for line in out.splitlines() if line.startswith("start ")]
    assert not [line for line in started if "train@" in line or "filter_study@" in line], out  # nothing trains
    assert (other / "reports/headline.md").read_text() == (lab / "reports/headline.md").read_text()

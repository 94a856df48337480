"""Cells shared through a DVC remote (docs/scale-out.md, "Sharing runs"): one clone trains and pushes, another
pulls and has every output, its stages up to date, the same report, without training. Two kinds of remote: a
directory (a cluster's shared filesystem) and SSH (DVC's ssh plugin against a real OpenSSH server on 127.0.0.1,
tests/sshd.py; skipped with its reason where none can start)."""

from __future__ import annotations

import pytest
from sshd import OpenSSH, Unavailable
from workspace import copy_built, sh, tool_env


@pytest.fixture
def ssh_server(tmp_path):
    try:
        server = OpenSSH(tmp_path / "sshd").start()
    except Unavailable as why:
        pytest.skip(f"no SSH server for the SSH remote: {why}")
    yield server
    server.stop()


def _share_and_pull(lab, other_parent, url, env, configure=()):
    """Push `lab`'s run to the remote at `url`, clone `lab` and pull there: the clone."""
    sh(lab, "dvc", "remote", "add", "-d", "shared", url, env=env)
    for option in configure:  # a user's own settings (a key file): .dvc/config.local, never committed
        sh(lab, "dvc", "remote", "modify", "--local", "shared", *option, env=env)
    sh(lab, "dvc", "push", env=env)
    sh(lab, "git", "add", "-A", env=env)
    sh(lab, "git", "commit", "-qm", "the run and its remote", env=env)
    other = other_parent / "other"
    sh(other_parent, "git", "clone", "-q", str(lab), str(other), env=env)
    for option in configure:
        sh(other, "dvc", "remote", "modify", "--local", "shared", *option, env=env)
    assert not (other / "results" / "train").exists()
    sh(other, "dvc", "pull", env=env)
    return other


def _same_run_without_training(lab, other, env):
    cell = "results/train/fashion_mnist/vit/impulse/seed0"
    assert (other / cell / "model.pt").read_bytes() == (lab / cell / "model.pt").read_bytes()  # checkpoints too
    assert (other / "reports/headline.md").read_text() == (lab / "reports/headline.md").read_text()
    out = sh(other, "python", "-m", "pipeline", "repro", env=env)
    started = [line for line in out.splitlines() if line.startswith("start ")]
    assert not [line for line in started if "train@" in line or "filter_study@" in line], out  # nothing trains
    assert (other / "reports/headline.md").read_text() == (lab / "reports/headline.md").read_text()


def test_a_pulled_run_is_used_as_it_is_without_training(smoke_built, tmp_path):
    lab = copy_built(smoke_built[0], tmp_path / "lab")
    other = _share_and_pull(lab, tmp_path, str(tmp_path / "shared-remote"), tool_env())
    _same_run_without_training(lab, other, tool_env())


def test_a_run_pushed_over_ssh_is_pulled_and_used_without_training(smoke_built, tmp_path, ssh_server):
    lab = copy_built(smoke_built[0], tmp_path / "lab")
    env = ssh_server.env(tool_env())
    store = tmp_path / "on-the-server"
    other = _share_and_pull(lab, tmp_path, ssh_server.url(store), env, configure=[("keyfile", str(ssh_server.key))])
    assert any((store / "files" / "md5").iterdir())  # the cache went through sshd onto the server's disk
    assert "keyfile" not in (other / ".dvc" / "config").read_text()  # the key stays each user's own
    _same_run_without_training(lab, other, env)

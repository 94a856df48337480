"""The pipeline as a user meets it: `dvc repro` on the smoke profile in a temporary copy of this repository.

Each test takes its own copy of the smoke pipeline built once per test run (`smoke_built`), so that they run in any
order and on any pytest-xdist worker: full run, no-op re-run, determinism of a forced re-run, which stages a code
edit makes stale, resume after SIGKILL, `dvc exp run -S init=...` re-running only that arm, a new model variant, and
the scale-out launch paths (2 processes under torchrun; a 2-node c10d rendezvous on 127.0.0.1). A test runs the
stages it is about, not a whole `dvc repro`. Minutes, not seconds: marked `slow` (`pytest -m "not slow"` skips it).
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml
from workspace import copy_built, metrics, ran, sh, tool_env

pytestmark = [pytest.mark.slow("builds the smoke profile (`python -m pipeline repro`) and re-runs dvc in copies"),
              pytest.mark.timeout(900)]

RUN = "train@fashion_mnist-vit-impulse-0"
RUN_DIR = Path("results/train/fashion_mnist/vit/impulse/seed0")


@pytest.fixture
def repo(smoke_built, tmp_path) -> Path:
    """A copy of the smoke project as `dvc repro` left it (a git repository of this working tree's files)."""
    return copy_built(smoke_built[0], tmp_path / "repo")


@pytest.fixture
def first_run(smoke_built) -> str:
    """What the first `dvc repro` printed."""
    return smoke_built[1]


def stale(repo: Path) -> set[str]:
    """The stages `dvc status` finds changed."""
    return set(json.loads(sh(repo, "dvc", "status", "--json") or "{}"))


def test_full_repro_runs_every_stage_and_writes_the_report(repo, first_run):
    stages = {line.split()[0] for line in sh(repo, "dvc", "stage", "list").splitlines() if line.strip()}
    assert ran(first_run) == stages
    for path in ["reports/report.md", "reports/report.pdf", "results/summary.json", "results/tables",
                 "reports/figures/figures.json", RUN_DIR / "model.pt", RUN_DIR / "live/plots/metrics/val_top1.tsv"]:
        assert (repo / path).exists(), path
    summary = json.loads((repo / "results/summary.json").read_text())
    assert set(summary["fashion_mnist"]["vit"]) == {"impulse", "default", "mimetic"}
    assert not (repo / "scratch").exists()  # every finished run removed its checkpoint
    assert "impulse" in (repo / "reports/report.md").read_text()


def test_second_repro_executes_nothing(repo, first_run):
    out = sh(repo, "dvc", "repro")
    # re-reads what each dataset comes from and the plan's history (seconds each); nothing after them changed
    assert ran(out) == {"sources", "plan_history"}


def test_forced_rerun_trains_again_and_gives_identical_metrics(repo, first_run):
    before = metrics(repo, RUN_DIR)
    assert not (repo / "scratch").exists()  # finished runs leave no checkpoint behind
    out = sh(repo, "dvc", "repro", "-f", "-s", RUN)
    assert RUN in ran(out) and "resuming" not in out and "epoch 2/2" in out
    assert json.loads((repo / RUN_DIR / "metrics.json").read_text())["wall_time_s"] > 0
    assert metrics(repo, RUN_DIR) == before


# (file edited, whether the training cells depend on it): download code, the CLI, the analysis and the scale-out
# code are not deps of a training cell; the engine and the init library are (docs/pipeline.md).
EDITS = [("pipeline/data/fetch/sources.py", False), ("pipeline/__main__.py", False),
         ("pipeline/analysis/stats.py", False), ("pipeline/scale/repro.py", False),
         ("pipeline/training/engine.py", True), ("pipeline/method/inits/impulse.py", True)]


def planned(repo: Path) -> set[str]:
    """The stages `python -m pipeline repro --dry` would run: DVC's stale ones, and the cells whose configuration or
    code stamp the configs stage would write anew."""
    return set(re.findall(r"^  (\S+): stale;", sh(repo, "python", "-m", "pipeline", "repro", "--dry"), re.MULTILINE))


UNTOUCHED: dict[Path, frozenset[str]] = {}


def planned_untouched(built: Path, copy: Path) -> frozenset[str]:
    """`planned` of `copy`, an untouched copy of `built` (the always-changed stages): the same for every copy, so
    asked once per process."""
    if built not in UNTOUCHED:
        UNTOUCHED[built] = frozenset(planned(copy))
    return UNTOUCHED[built]


@pytest.mark.parametrize(("path", "trains"), EDITS, ids=[p for p, _ in EDITS])
def test_a_code_edit_makes_stale_exactly_the_stages_whose_code_it_is(repo, smoke_built, first_run, path, trains):
    before = planned_untouched(smoke_built[0], repo)
    source = repo / path
    original = source.read_text()
    source.write_text(original + "\nAN_EDIT = 1  # code, not a comment: code stamps skip comments\n")
    try:
        changed = planned(repo) - before
    finally:
        source.write_text(original)
    cells = {s for s in changed if s.startswith("train@")}
    assert cells == ({s for s in ran(first_run) if s.startswith("train@")} if trains else set()), changed
    assert not (trains and {s for s in changed if s.startswith("fetch@")})  # fetching imports no engine
    assert planned(repo) == before


def test_a_stage_whose_code_changed_trains_from_scratch(repo, first_run):
    before = stale(repo)
    engine = repo / "pipeline" / "training" / "engine.py"
    original = engine.read_text()
    engine.write_text(original + "\nAN_EDIT = 1  # code, not a comment: code stamps skip comments\n")
    try:
        out = sh(repo, "dvc", "repro", RUN)  # the configs stage first: it writes the engine's new code stamp
        assert {"configs", RUN} <= ran(out) and "resuming" not in out and "epoch 2/2" in out
    finally:
        engine.write_text(original)
        sh(repo, "dvc", "repro", RUN)  # back to the committed code (from the run-cache)
    assert stale(repo) == before


def test_killed_training_stage_resumes_from_its_checkpoint(repo, first_run):
    params = repo / "params.yaml"
    original = params.read_text()
    params.write_text(original.replace("  epochs: 2\n", "  epochs: 5\n", 1))
    try:
        sh(repo, "dvc", "repro", RUN)  # with its upstream configs stage, which writes the cell's new configuration
        whole = metrics(repo, RUN_DIR)
        assert whole["epochs"] == 5 and not (repo / "scratch").exists()
        shutil.rmtree(repo / RUN_DIR)  # so the poll below cannot read the finished run's dvclive logs
        proc = subprocess.Popen(["dvc", "repro", "-f", "-s", RUN], cwd=repo, env=tool_env(), start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        checkpoint = repo / "scratch/train/fashion_mnist/vit/impulse/seed0/last.pt"
        live = repo / RUN_DIR / "live/metrics.json"
        deadline = time.time() + 300
        while time.time() < deadline and not (checkpoint.exists() and live.exists()
                                              and json.loads(live.read_text() or "{}").get("step", 0)):
            time.sleep(0.05)  # dvclive's step 1 = epoch 2 logged, so epoch 1's checkpoint is on disk
        assert checkpoint.exists(), "no checkpoint appeared"
        # SIGKILL the training process (what the OOM killer or a lost node does); dvc sees its stage fail.
        # (SIGKILL of dvc itself leaves its .dvc/tmp/rwlock behind, which dvc asks the user to remove.)
        trainers = [p for p in psutil.Process(proc.pid).children(recursive=True)
                    if "pipeline.cell" in p.cmdline()]
        assert trainers, "the training process was not found"
        for p in trainers:
            p.kill()
        assert proc.wait(timeout=60) != 0
        assert not (repo / RUN_DIR / "metrics.json").exists()  # a killed run leaves no complete-looking out
        out = sh(repo, "dvc", "repro", "-f", "-s", RUN)
        assert "resuming from" in out
        assert metrics(repo, RUN_DIR) == whole
    finally:
        params.write_text(original)
        sh(repo, "dvc", "repro")  # back to the committed state (from the run-cache)


def test_exp_run_of_another_init_reruns_only_that_arm_and_compares_with_the_committed_run(repo, first_run):
    sh(repo, "git", "add", "dvc.lock", "results/summary.json")  # the reference run, committed as the README says
    sh(repo, "git", "commit", "-qm", "reference run")
    committed = (repo / "params.yaml").read_text()
    out = sh(repo, "dvc", "exp", "run", "-S", "init=timm")
    changed = [line for line in sh(repo, "git", "diff", "-U0", "HEAD", "--", "params.yaml").splitlines()
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert [line.split("#")[0].strip() for line in changed] == ["-init: impulse", "+init: timm"]  # its layout kept
    executed = ran(out)
    assert {"train@fashion_mnist-vit-timm-0", "attention@vit-timm"} <= executed
    assert not {s for s in executed if re.match(r"(train|attention)@.*(default|mimetic)", s)}
    assert not {s for s in executed if s.startswith(("fetch", "filter_"))}
    summary = json.loads((repo / "results/summary.json").read_text())
    assert set(summary["fashion_mnist"]["vit"]) == {"timm", "default", "mimetic"}
    shown = json.loads(sh(repo, "dvc", "exp", "show", "--json"))
    assert "timm" in json.dumps(shown)
    # the committed run and the experiment share the role-keyed columns
    diff = json.loads(sh(repo, "dvc", "metrics", "diff", "HEAD", "--json"))["results/summary.json"]
    vs = diff["headline.fashion_mnist.vit.method_vs_baseline1.diff_pts"]
    assert vs["old"] is not None and vs["new"] is not None
    view = sh(repo, "dvc", "exp", "show", "--md", "--drop", ".*", "--keep", "Experiment|headline.*(method.arm|diff)")
    assert "headline.fashion_mnist.vit.method.arm" in view and "| impulse" in view and "| timm" in view
    table = sh(repo, "python", "-m", "pipeline", "compare").splitlines()
    rows = {line.split()[0]: line for line in table[2:] if line and not line.startswith("Paired")}
    assert rows["workspace"].split()[1] == "timm" and "default: " in rows["workspace"] and "mimetic: " in table[2]
    assert any(r.split()[1] == "impulse" for r in rows.values())  # the committed reference run
    (repo / "params.yaml").write_text(committed)
    sh(repo, "git", "checkout", "params.yaml")
    back = ran(sh(repo, "dvc", "repro"))  # back to the committed params: every cell from the run-cache
    assert not {s for s in back if s.startswith(("fetch@", "filter_", "train@", "attention@"))}, back


def test_adding_a_model_variant_runs_only_its_cells(repo, first_run):
    before = stale(repo)
    params = repo / "params.yaml"
    original = params.read_text()
    data = yaml.safe_load(original)
    data["models"]["wide"] = data["models"]["vit"] | {"embed_dim": 48}
    params.write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        planned = set(re.findall(r"^  (\S+): stale;", sh(repo, "python", "-m", "pipeline", "repro", "--dry"),
                                 re.MULTILINE))
        trained = {s for s in planned if s.startswith(("train@", "attention@"))}
        assert trained == {f"train@fashion_mnist-wide-{a}-0" for a in ("impulse", "default", "mimetic")} | {
            f"attention@wide-{a}" for a in ("impulse", "default", "mimetic")}
        assert not {s for s in planned if s.startswith(("fetch@", "filter_"))}
        sh(repo, "dvc", "repro", "train@fashion_mnist-wide-impulse-0")
        m = json.loads((repo / "results/train/fashion_mnist/wide/impulse/seed0/metrics.json").read_text())
        assert m["variant"] == "wide" and m["num_heads"] == 3 and m["family"] == "vit"
    finally:
        params.write_text(original)
    # the committed grid's cells are untouched (only the analysis sees the new variant's folder under results/)
    assert not {s for s in stale(repo) - before if s.startswith(("train@", "attention@", "filter_"))}


def test_two_processes_under_torchrun(repo, first_run):
    proc = subprocess.run([sys.executable, "-m", "pipeline", "--set", "resources.nproc=2", "train", "fashion_mnist",
                           "vit", "default", "1"], cwd=repo, env=tool_env(), capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "launching 1 node(s) x 2 process(es)" in out
    m = json.loads((repo / "results/train/fashion_mnist/vit/default/seed1/metrics.json").read_text())
    assert m["world_size"] == 2 and m["val_size"] == 128  # two shards cover the validation set once


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_node_rendezvous_on_loopback(repo, first_run):
    cmd = [sys.executable, "-m", "pipeline", "--set", "resources.nnodes=2",
           "--set", f"resources.rdzv_endpoint=127.0.0.1:{free_port()}", "--set", "resources.rdzv_id=e2e", "train",
           "fashion_mnist", "vit", "mimetic", "1"]
    nodes = [subprocess.Popen(cmd, cwd=repo, env=tool_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for _ in range(2)]
    outs = [n.communicate(timeout=300)[0] for n in nodes]
    assert all(n.returncode == 0 for n in nodes), "\n".join(o[-2000:] for o in outs)
    m = json.loads((repo / "results/train/fashion_mnist/vit/mimetic/seed1/metrics.json").read_text())
    assert m["world_size"] == 2

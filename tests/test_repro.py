"""`python -m pipeline repro` on a tiny DVC project of its own: stale set, order, parallelism, failures, locks, GPUs.

The project (built below, seconds to run) has a `source` stage, a 4-cell matrix `cell@0..3` that reads it and the
`train` params, and a `total` stage over the cells; each stage's command (`step.py`) writes a deterministic output
and, beside it (not a DVC out), when it started and ended and the GPUs it saw. One copy serves the module, in order;
each test leaves it clean (`dvc status` up to date).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from workspace import ROOT, sh, tool_env

from pipeline.__main__ import main as cli
from pipeline.errors import PipelineError
from pipeline.params import load_params
from pipeline.scale import repro
from pipeline.scale.executors import LocalExecutor, Request
from pipeline.training import launch

N = 6
CELLS = [f"cell@{i}" for i in range(N)]

STEP = '''"""One stage: fail if asked to, wait a moment, write out/<name>/value from the inputs; log when and where."""
import json, os, sys, time
from pathlib import Path

name, *inputs = sys.argv[1:]
start = time.time()
if os.environ.get("FAIL_STAGE") == name:
    sys.exit(f"{name}: failing on purpose")
time.sleep(float(os.environ.get("STEP_SLEEP", "0.5")))
out = Path("out", name)
out.mkdir(parents=True, exist_ok=True)
own = Path("in", name + ".txt")
text = own.read_text().strip() if own.exists() else ""
(out / "value").write_text(f"{name}({text})<" + "+".join(Path(i, "value").read_text() for i in inputs) + ">")
Path("timeline").mkdir(exist_ok=True)
Path("timeline", name + ".json").write_text(json.dumps(
    {"start": start, "end": time.time(), "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}))
'''

DVC_YAML = """stages:
  source:
    cmd: python step.py source
    deps: [step.py, in/source.txt]
    outs: [out/source]
  cell:
    desc: "training cell: a stand-in"
    matrix:
      i: [0, 1, 2, 3, 4, 5]
    cmd: python step.py cell-${item.i} out/source
    deps:
      - step.py
      - out/source
      - in/cell-${item.i}.txt
    outs:
      - out/cell-${item.i}
  total:
    cmd: python step.py total out/cell-0 out/cell-1 out/cell-2 out/cell-3 out/cell-4 out/cell-5
    deps: [step.py, out/cell-0, out/cell-1, out/cell-2, out/cell-3, out/cell-4, out/cell-5]
    outs: [out/total]
"""


def make_project(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "step.py").write_text(STEP)
    (path / "dvc.yaml").write_text(DVC_YAML)
    (path / "params.yaml").write_text("train: {}\nresources:\n  threads: 1\n  nproc: 1\n  device: cpu\n")
    (path / "in").mkdir()
    for name in ["source", *(f"cell-{i}" for i in range(N))]:
        (path / "in" / f"{name}.txt").write_text("v1\n")
    (path / ".gitignore").write_text("/timeline/\n/scratch/\n")
    sh(path, "git", "init", "-q")
    sh(path, "dvc", "init", "-q")
    sh(path, "git", "add", "-A")
    sh(path, "git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "project")
    return path


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return make_project(tmp_path_factory.mktemp("repro") / "project")


@pytest.fixture
def inside(project, monkeypatch):
    """Run in the project, with the interpreter's tools on PATH, as the CLI would."""
    monkeypatch.chdir(project)
    monkeypatch.setenv("PATH", tool_env()["PATH"])
    return project


def timeline(project: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (project / "timeline").glob("*.json")}


def most_at_once(spans: list[dict]) -> int:
    events = sorted([(s["start"], 1) for s in spans] + [(s["end"], -1) for s in spans])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def run_plan(project: Path, jobs: int, devices: list[str] | None = None, cells=None) -> dict:
    """The runner's scheduler in this process, on real `dvc repro --single-item` processes."""
    cells = cells if cells is not None else repro.plan([], load_params(project / "params.yaml"), project)
    scheduler = repro.Scheduler({"local": LocalExecutor(project, project / "scratch/repro")}, {"local": jobs},
                                repro.DevicePool(devices or []), echo=lambda line: None)
    return scheduler.run(cells)


def edit(project: Path, *names: str, text: str = "v2\n") -> None:
    for name in names:
        (project / "in" / f"{name}.txt").write_text(text)


def is_clean(project: Path) -> bool:
    return "up to date" in sh(project, "dvc", "status")


def test_plan_of_a_fresh_project_is_every_stage_dependencies_first(inside):
    cells = repro.plan([], load_params("params.yaml"))
    assert [c.name for c in cells] == ["source", *CELLS, "total"]
    assert all(c.stale for c in cells)
    by_name = {c.name: c for c in cells}
    assert by_name["cell@2"].upstream == ["source"] and sorted(by_name["total"].upstream) == CELLS
    assert by_name["cell@0"].request.training and not by_name["source"].request.training


def test_runner_keeps_the_order_runs_cells_in_parallel_and_leaves_nothing_stale(inside, monkeypatch):
    monkeypatch.setenv("STEP_SLEEP", "3")  # longer than DVC's own checks, which take the lock one at a time
    outcomes = run_plan(inside, jobs=3)
    assert {o.status for o in outcomes.values()} == {"ran"}, outcomes
    spans = timeline(inside)
    for cell in (f"cell-{i}" for i in range(N)):
        assert spans[cell]["start"] >= spans["source"]["end"]
        assert spans["total"]["start"] >= spans[cell]["end"]
    assert 2 <= most_at_once([spans[f"cell-{i}"] for i in range(N)]) <= 3
    assert is_clean(inside)
    assert "Running stage" not in sh(inside, "dvc", "repro")
    cells = "+".join(f"cell-{i}(v1)<source(v1)<>>" for i in range(N))
    assert (inside / "out/total/value").read_text() == f"total()<{cells}>"  # each input once, in order


def test_plan_after_an_edit_is_the_stale_cell_and_what_is_downstream(inside):
    params = load_params("params.yaml")
    edit(inside, "cell-1")
    cells = repro.plan([], params)
    assert [(c.name, c.stale) for c in cells] == [("cell@1", True), ("total", False)]
    assert cells[1].upstream == ["cell@1"]
    assert repro.plan(["cell@2"], params) == []  # a target's plan holds only it and its upstream
    edit(inside, "cell-1", text="v1\n")
    assert repro.plan([], params) == []


def test_a_failed_cell_is_reported_the_others_finish_and_it_reruns_next_time(inside):
    edit(inside, "cell-1", "cell-2")
    env = tool_env(PYTHONPATH=str(ROOT), FAIL_STAGE="cell-2", STEP_SLEEP="0")
    proc = subprocess.run([sys.executable, "-m", "pipeline", "repro"], cwd=inside, env=env, capture_output=True,
                          text=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAILED cell@2" in proc.stdout and "skip   total" in proc.stdout
    assert "1 ran" in proc.stdout and "1 failed" in proc.stdout and "1 skipped" in proc.stdout
    log = inside / "scratch/repro/cell@2.log"
    assert f"log: {Path('scratch/repro/cell@2.log')}" in proc.stdout and "failing on purpose" in log.read_text()
    status = sh(inside, "dvc", "status")
    assert "cell@2" in status and "total" in status and "cell@1:" not in status
    assert [(c.name, c.stale) for c in repro.plan([], load_params("params.yaml"))] == [("cell@2", True),
                                                                                       ("total", True)]
    outcomes = run_plan(inside, jobs=2)
    assert {n: o.status for n, o in outcomes.items()} == {"cell@2": "ran", "total": "ran"}
    assert is_clean(inside)


def test_the_runner_shows_k_of_n_the_running_stages_and_an_eta(inside):
    edit(inside, "source", text="v4\n")  # every stage is stale or downstream: 8 stages, the cells 2 at a time
    lines: list[str] = []
    scheduler = repro.Scheduler({"local": LocalExecutor(inside, inside / "scratch/repro")}, {"local": 2},
                                repro.DevicePool([]), echo=lines.append)
    scheduler.run(repro.plan([], load_params("params.yaml")))
    progress = [line.strip() for line in lines if line.strip().startswith("[")]
    assert progress[0].startswith("[1/8 done; running: none; ETA after the first training stage]")
    assert any(re.fullmatch(r"\[[2-6]/8 done; running: cell@\d \(\d+ s\)(, cell@\d \(\d+ s\))?; ETA \d+ s\]",
                            line) for line in progress), progress
    assert progress[-1] == "[8/8 done; running: none; ETA 0 s]"
    assert is_clean(inside)


def test_always_changed_stages_run_first_and_then_only_what_they_changed_is_stale(tmp_path, monkeypatch):
    """A stage reading state outside the repository (dvc.yaml's `sources`: a user's folder) is `always_changed`;
    the runner runs it before planning, so a stage depending on its output is stale exactly when it changed."""
    project = tmp_path / "watch"
    project.mkdir()
    (project / "dvc.yaml").write_text(
        "stages:\n  watch:\n    cmd: mkdir -p seen && cp ../outside.txt seen/now.txt\n    always_changed: true\n"
        "    outs:\n      - seen:\n          cache: false\n"
        "  use:\n    cmd: cp seen/now.txt used.txt\n    deps: [seen/now.txt]\n    outs: [used.txt]\n")
    (project / "params.yaml").write_text("resources:\n  threads: 1\n")
    (tmp_path / "outside.txt").write_text("1\n")
    sh(project, "git", "init", "-q")
    sh(project, "dvc", "init", "-q")
    monkeypatch.chdir(project)
    monkeypatch.setenv("PATH", tool_env()["PATH"])
    params = load_params("params.yaml")
    assert repro.checks([]) == ["watch"]

    def run() -> list[str]:
        assert repro.run_checks(repro.checks([]), echo=lambda line: None)
        cells = repro.plan([], params)
        run_plan(project, jobs=1, cells=cells)
        return [c.name for c in cells]

    assert run() == ["use"]
    assert run() == []  # unchanged outside: nothing to run
    (tmp_path / "outside.txt").write_text("2\n")
    assert run() == ["use"] and (project / "used.txt").read_text() == "2\n"


def test_parallel_dvc_repro_single_item_waits_for_the_lock_and_loses_no_result(inside):
    """6 independent stages as 6 `dvc repro --single-item` at once: they contend for DVC's lock when they start and
    when they record their result; each waits its turn and dvc.lock ends up with all six."""
    edit(inside, *(f"cell-{i}" for i in range(N)), text="v3\n")
    procs = [subprocess.Popen(repro.stage_command(name), cwd=inside, env=tool_env(STEP_SLEEP="0"),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for name in CELLS]
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * N, "\n".join(outputs)
    assert all(f"Running stage '{name}'" in out for name, out in zip(CELLS, outputs))
    assert "cell@" not in sh(inside, "dvc", "status")  # dvc.lock holds all six results
    assert run_plan(inside, jobs=1)["total"].status == "ran"
    assert is_clean(inside)


def test_gpu_cells_get_their_own_gpus(inside, monkeypatch):
    """Four fake GPUs, 2 per cell, 4 stale cells: two at a time, each on two GPUs no other running cell has."""
    monkeypatch.setenv("STEP_SLEEP", "3")  # longer than DVC's own checks, so two cells surely overlap
    shutil.rmtree(inside / "timeline")
    edit(inside, "cell-0", "cell-1", "cell-2", "cell-3", text="gpu\n")
    params = load_params("params.yaml")
    gpu = Request(training=True, nproc=2, gpu=True)
    cells = [dataclasses.replace(c, request=gpu) if c.request.training else c for c in repro.plan([], params)]
    run_plan(inside, jobs=4, devices=["0", "1", "2", "3"], cells=cells)
    spans = [s for name, s in timeline(inside).items() if name.startswith("cell-")]
    assert all(len(s["gpus"].split(",")) == 2 and set(s["gpus"].split(",")) <= {"0", "1", "2", "3"} for s in spans)
    for a in spans:
        for b in spans:
            if a is not b and a["start"] < b["end"] and b["start"] < a["end"]:
                assert not set(a["gpus"].split(",")) & set(b["gpus"].split(","))
    assert len(spans) == 4 and most_at_once(spans) == 2
    assert is_clean(inside)


def commands(project: Path) -> list[psutil.Process]:
    """The stage commands (`python step.py cell-i`) running in `project`, wherever they were started from."""
    return [proc for proc in psutil.process_iter(["cmdline", "cwd", "status"])
            if "step.py" in (proc.info["cmdline"] or []) and proc.info["cwd"] == str(project)
            and proc.info["status"] != psutil.STATUS_ZOMBIE]


@pytest.mark.timeout(480)
def test_ctrl_c_cancels_the_running_stages(inside, monkeypatch):
    if not is_clean(inside):  # run alone, the project is fresh: only the two edited cells may be stale below
        sh(inside, "dvc", "repro", "-q", env=tool_env(STEP_SLEEP="0"))
    edit(inside, "cell-0", "cell-1", text="slow\n")
    env = tool_env(PYTHONPATH=str(ROOT), STEP_SLEEP="60")
    # started as a terminal starts it, with SIGINT at its default even where this suite runs in the background (a
    # non-interactive shell's `&` makes its children ignore SIGINT, and Python then never raises KeyboardInterrupt)
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "repro", "-j", "2"], cwd=inside, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        pids = []
        for line in proc.stdout:
            if line.startswith(("start  cell@0 ", "start  cell@1 ")):
                pids.append(int(line.split("(pid ")[1].split(";")[0]))
            if len(pids) == 2:
                break
        deadline = time.monotonic() + 120  # under load `dvc repro --single-item` takes a while to start its command
        while len(commands(inside)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        running = commands(inside)
        assert len(running) == 2, f"the stages' commands never started: {[p.info['cmdline'] for p in running]}"
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=60)[0]
        assert proc.returncode == 130, rest
        assert "cancelled cell@0" in rest and "cancelled cell@1" in rest
        assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        assert not commands(inside)  # DVC's command is cancelled with its stage: it is gone too
    finally:
        if proc.poll() is None:  # a failed assertion must not leave the runner and its stages behind
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(proc.pid).children(recursive=True):
                    child.kill()
            proc.kill()
    status = sh(inside, "dvc", "status")
    assert "cell@0" in status and "cell@1" in status  # DVC recorded nothing for them: they run next time
    monkeypatch.setenv("STEP_SLEEP", "0")
    assert {o.status for o in run_plan(inside, jobs=2).values()} == {"ran"}
    assert is_clean(inside)


def test_a_training_cell_asks_for_the_resources_section(params_file):
    params = load_params(params_file, ["resources.nproc=2", "resources.threads=3"])
    assert repro.request_for(False, params) == Request(training=False)
    cell = repro.request_for(True, params)
    assert cell.training and cell.nproc == 2 and cell.threads == 3 and cell.gpu
    assert repro.is_training("training cell: one cell of the model grid") and not repro.is_training(None)


def test_device_pool_and_default_layout(params_file):
    pool = repro.DevicePool(["4", "6", "7"])
    first = pool.take(2)
    assert first == ["4", "6"] and pool.take(2) is None
    pool.give(first)
    assert sorted(pool.take(3)) == ["4", "6", "7"]
    params = load_params(params_file)
    assert repro.default_jobs(params, ["0", "1", "2"]) == 3
    assert repro.default_jobs(load_params(params_file, ["resources.nproc=2"]), list("01234567")) == 4
    cores = len(os.sched_getaffinity(0))
    assert repro.default_jobs(params, []) == max(1, cores // params.resources.threads)


def test_visible_devices_respect_an_allocation(monkeypatch):
    """On a shared node SLURM sets CUDA_VISIBLE_DEVICES=4,6: cells must get 4 and 6, not 0 and 1."""
    import torch

    monkeypatch.delenv("PIPELINE_DEVICES", raising=False)
    monkeypatch.setattr(launch, "gpu_driver", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    assert launch.visible_devices() == ["4", "6"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert launch.visible_devices() == ["0", "1"]


@pytest.mark.skipif(launch.gpu_driver(), reason="this machine has a GPU driver: torch is asked")
def test_without_a_gpu_driver_there_are_no_devices_and_torch_is_not_imported():
    env = {k: v for k, v in tool_env().items() if k not in ("PIPELINE_DEVICES", "CUDA_VISIBLE_DEVICES")}
    out = subprocess.run([sys.executable, "-c", "import sys; from pipeline.training import launch;"
                          " print(launch.visible_devices(), 'torch' in sys.modules)"],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["[]", "False"]


def test_cells_that_cannot_fit_stop_before_anything_runs(params_file):
    params = load_params(params_file, ["resources.nproc=4"])
    big = repro.Cell("train@x", [], repro.request_for(True, params), True)
    with pytest.raises(PipelineError, match="resources.nproc = 4 but this machine has 2 GPU"):
        repro.check_fits([big], "local", ["0", "1"], params)
    nodes = repro.Cell("train@y", [], Request(training=True, nnodes=2), True)
    with pytest.raises(PipelineError, match="--executor slurm"):
        repro.check_fits([nodes], "local", [], params)
    repro.check_fits([big, nodes], "slurm", [], params)


def test_repro_refuses_overrides_dvc_would_not_see(capsys):
    assert cli(["--set", "resources.threads=2", "repro"]) == 2
    assert "edit params.yaml" in capsys.readouterr().err


def test_the_runner_polls_slurm_jobs_less_often_while_nothing_changes(tmp_path, monkeypatch):
    """The wait between polls doubles from poll_s up to max_poll_s while no job starts or ends, and starts over
    after one does: a day-long SLURM run asks slurmctld a few times a minute, not five times a second."""
    from pipeline.scale.executors import Request

    class Job:
        where, log = "SLURM job 1", tmp_path / "log"

        def __init__(self, polls: int):
            self.polls = polls

        def poll(self):
            self.polls -= 1
            return 0 if self.polls < 0 else None

    class Executor:
        def submit(self, stage, command, request, overrides):
            return Job(8)

    waits = []
    monkeypatch.setattr(repro.time, "sleep", waits.append)
    cells = [repro.Cell("a", [], Request(True), True), repro.Cell("b", ["a"], Request(True), True)]
    scheduler = repro.Scheduler({"local": Executor(), "slurm": Executor()}, {"local": 1, "slurm": 2},
                                repro.DevicePool([]), echo=lambda line: None, max_poll_s=1.0)
    outcomes = scheduler.run(cells)
    assert [o.status for o in outcomes.values()] == ["unchanged", "unchanged"]
    assert waits[:6] == [0.2, 0.4, 0.8, 1.0, 1.0, 1.0]  # a started, then nothing changes: back off to the cap
    assert 0.2 in waits[6:]  # a finished and b started: the wait starts over


def test_lock_entries_of_stages_no_longer_planned_are_dropped_and_the_rest_kept(tmp_path, monkeypatch):
    project = make_project(tmp_path / "project")
    monkeypatch.setenv("PATH", tool_env()["PATH"])
    sh(project, "dvc", "repro")
    lock = project / "dvc.lock"
    kept = lock.read_text()
    gone = "  cell@9:\n    cmd: python step.py cell 9\n    deps: []\n"  # a seed params.yaml no longer plans
    lock.write_text(kept + gone)
    assert repro.prune_lock(project) == 1
    assert lock.read_text() == kept  # DVC's own writer: the planned entries byte for byte
    assert repro.prune_lock(project) == 0 and is_clean(project)

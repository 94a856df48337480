"""`python -m pipeline repro --executor slurm` against a real SLURM, and the SLURM side of launching.

The integration test starts a one-node SLURM cluster on 127.0.0.1 from Debian's packages (slurmctld, slurmd and
slurm-client of slurm-wlm, with munge for authentication; `.ci/run` installs them as root with apt), configured in a
temporary folder (slurm.conf below: its own ports, state, logs and munge socket; job completions logged to a file, so
`sacct --completion` reports them without a database). It runs the smoke profile's stale cells as SLURM jobs, two at
a time on the 2 CPUs, and checks what SLURM says about them (their job ids, states, times, logs), that `dvc status` is
clean and a plain `dvc repro` executes nothing, and that every run's metrics equal a serial `dvc repro`'s; a
two-node cluster (two slurmd on 127.0.0.1) runs a multi-node cell through real `srun`. Minutes: marked `slurm` and
`slow`; skipped, saying why, where the daemons cannot run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from workspace import copy_repo, run_metrics, sh, tool_env

from pipeline.config import SlurmConfig
from pipeline.errors import PipelineError
from pipeline.params import load_params
from pipeline.scale.executors import Request, SlurmExecutor, SubmitError
from pipeline.schema import from_mapping
from pipeline.training import launch

ROOT = Path(__file__).resolve().parent.parent

SBIN = "/usr/sbin"
TOOLS = ("mungekey", "munged", "slurmctld", "slurmd", "sbatch", "scontrol", "sacct")

SLURM_CONF = """ClusterName=pipelinetest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
AuthInfo=socket={dir}/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool/%n
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd-%n.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd-%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobCompType=jobcomp/filetxt
JobCompLoc={dir}/jobcomp.txt
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MinJobAge=3600
MpiDefault=none
ReturnToService=2
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
#: one node's line: every node is a slurmd of its own on 127.0.0.1 (its own port), so one machine holds a cluster
#: of several nodes, each running its job steps as a real node does
NODE = "NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} CPUs={cpus} RealMemory=2000 State=UNKNOWN"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def why_not() -> str | None:
    """Why this machine cannot run the SLURM test, or None."""
    if os.geteuid() != 0:
        return "slurmd runs jobs as their submitting user and needs root here (run as root, or skip)"
    path = f"{os.environ['PATH']}{os.pathsep}{SBIN}"
    missing = [t for t in TOOLS if shutil.which(t, path=path) is None]
    if missing:
        return (f"SLURM is not installed ({', '.join(missing)} missing): as root,"
                " `apt-get install slurmctld slurmd slurm-client munge` (.ci/run does)")
    return None


def stop(folder: Path) -> None:
    """Stop the daemons this test started (by the pid files they wrote)."""
    for pid_file in [*folder.glob("slurmd-*.pid"), folder / "slurmctld.pid", folder / "munged.pid"]:
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGTERM)


@contextlib.contextmanager
def slurm_cluster(nodes: dict[str, int]):
    """A SLURM cluster on 127.0.0.1 of `nodes` {name: CPUs}, each its own slurmd; yields the environment its clients
    need (SLURM_CONF). Skips the test, saying why, where the daemons cannot run."""
    reason = why_not()
    if reason:
        pytest.skip(reason)
    folder = Path(tempfile.mkdtemp(prefix="slurm-"))  # short: munge's socket path must fit in 108 bytes
    (folder / "state").mkdir()
    (folder / "spool").mkdir()
    env = tool_env(SLURM_CONF=str(folder / "slurm.conf"), PATH=f"{tool_env()['PATH']}{os.pathsep}{SBIN}")
    lines = "\n".join(NODE.format(name=name, port=free_port(), cpus=cpus) for name, cpus in nodes.items())
    (folder / "slurm.conf").write_text(SLURM_CONF.format(dir=folder, ctld_port=free_port(), d_port=free_port(),
                                                         nodes=lines))
    steps = [["mungekey", "--create", f"--keyfile={folder}/munge.key", "--force"],
             ["munged", "--force", f"--socket={folder}/munge.socket", f"--key-file={folder}/munge.key",
              f"--pid-file={folder}/munged.pid", f"--log-file={folder}/munged.log",
              f"--seed-file={folder}/munged.seed"],
             ["slurmctld", "-f", f"{folder}/slurm.conf"],
             *(["slurmd", "-f", f"{folder}/slurm.conf", "-N", name] for name in nodes)]
    try:
        for cmd in steps:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if proc.returncode:
                pytest.skip(f"`{cmd[0]}` could not start here: {(proc.stdout + proc.stderr).strip()[-300:]}")
        deadline = time.time() + 60
        while subprocess.run(["sinfo", "-h", "-o", "%t %D"], env=env, capture_output=True,
                             text=True).stdout.split() != ["idle", str(len(nodes))]:
            if time.time() > deadline:
                logs = "".join(f.read_text()[-400:] for f in [folder / "slurmctld.log", *folder.glob("slurmd-*.log")])
                pytest.skip(f"the SLURM node(s) did not come up within 60 s: {logs}")
            time.sleep(0.5)
        yield env
    finally:
        subprocess.run(["scancel", "--user=root"], env=env, capture_output=True)
        stop(folder)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster():
    """A one-node SLURM on 127.0.0.1 with every CPU of this machine."""
    with slurm_cluster({"localhost": len(os.sched_getaffinity(0))}) as env:
        yield env


@pytest.fixture(scope="module")
def two_nodes():
    """A two-node SLURM on 127.0.0.1 (nodes n1 and n2, one CPU each): a multi-node cell's real srun across nodes."""
    with slurm_cluster({"n1": 1, "n2": 1}) as env:
        yield env


def completion(env: dict, job_ids: list[str]) -> dict[str, dict]:
    """What SLURM's job-completion log says of each job: state, start, end (`sacct --completion`)."""
    out = subprocess.run(["sacct", "--completion", "-P", "-o", "JobID,State,Start,End", "-j", ",".join(job_ids)],
                         env=env, capture_output=True, text=True, check=True).stdout.splitlines()
    rows = [dict(zip(out[0].split("|"), line.split("|"))) for line in out[1:]]
    return {r["JobID"]: r for r in rows}


#: two cells of the smoke grid: enough for SLURM to run two jobs side by side
CELLS = ("train@fashion_mnist-vit-impulse-0", "train@fashion_mnist-vit-default-0")


@pytest.mark.slurm
@pytest.mark.slow("runs the smoke cells as jobs on a one-node SLURM cluster")
@pytest.mark.timeout(900)
def test_smoke_cells_run_as_slurm_jobs_and_match_a_serial_repro(cluster, smoke_built, tmp_path):
    """Two smoke cells through the runner's SLURM executor; their metrics equal those of the serial `dvc repro` that
    built the shared smoke project (same params: the `slurm` section is no param of a training cell)."""
    repo = copy_repo(tmp_path / "slurm", "smoke", {"resources.threads": 1, "slurm.gpus": False, "slurm.time": 30})
    out = sh(repo, sys.executable, "-m", "pipeline", "repro", "--executor", "slurm", *CELLS, env=cluster)
    started = re.findall(r"start  (\S+)  \(SLURM job (\d+); log (\S+)\)", out)
    jobs = {name: job for name, job, _ in started}
    logs = {name: Path(log) for name, _, log in started}
    assert set(jobs) == set(CELLS), out  # the training cells went to SLURM, their fetch stage did not
    assert "0 failed" in out and "0 skipped" in out, out

    # SLURM ran them: its completion log has each job COMPLETED, each log shows DVC running that cell
    done = completion(cluster, list(jobs.values()))
    assert {done[j]["State"] for j in jobs.values()} == {"COMPLETED"}, done
    for name, log in logs.items():
        assert f"Running stage '{name}'" in log.read_text()
    spans = sorted((done[j]["Start"], done[j]["End"]) for j in jobs.values())
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:])), spans  # two cells ran at the same time

    assert "up to date" in sh(repo, "dvc", "status", *CELLS)
    again = sh(repo, "dvc", "repro", *CELLS)  # `sources` (always changed) looks at the data folder again, no cell runs
    assert not [name for name in CELLS if f"Running stage '{name}'" in again], again
    ours = run_metrics(repo)
    reference = {k: v for k, v in run_metrics(smoke_built[0]).items() if k in ours}
    assert len(ours) == len(CELLS) and reference == ours


def job_field(env: dict, job: str, name: str) -> str | None:
    """One field of `scontrol show job` (JobState, Restarts, TimeLimit, ...), or None once SLURM forgot the job."""
    out = subprocess.run(["scontrol", "show", "job", "-o", job], env=env, capture_output=True, text=True).stdout
    return next((f.split("=", 1)[1] for f in out.split() if f.startswith(f"{name}=")), None)


def wait_for(condition, seconds: float, what: str, diagnose=lambda: "") -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {seconds:.0f} s for {what}; {diagnose()}")
        time.sleep(0.5)


def training_process(config: str, repo: Path) -> psutil.Process:
    """The process of `python -m pipeline.cell <runtime> <config>` in `repo` (the stage's command inside the SLURM
    job), not the same cell of another test's copy running beside this one."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for proc in psutil.process_iter(["cmdline", "cwd"]):
            cmd = proc.info["cmdline"] or []
            if "pipeline.cell" in cmd and cmd[-1:] == [config] and proc.info["cwd"] == str(repo.resolve()):
                return proc
        time.sleep(0.5)
    raise AssertionError(f"no process runs python -m pipeline.cell ... {config}")


def minutes(runtime: str) -> int:
    """Whole minutes of SLURM's RunTime ([D-]HH:MM:SS)."""
    days, _, clock = runtime.rpartition("-")
    h, m, _ = (int(x) for x in clock.split(":"))
    return (int(days or 0) * 24 + h) * 60 + m


@pytest.mark.slow("trains a cell to its SLURM time limit and resumes it after the requeue")
@pytest.mark.slurm
@pytest.mark.timeout(900)
def test_a_cell_at_its_time_limit_is_requeued_and_resumes_in_its_own_slurm_environment(cluster, tmp_path):
    """The runner submits one smoke cell; once it has checkpointed, the test stops its training process (SIGSTOP,
    so that no machine is fast enough to finish the cell first) and moves the job's time limit to two or three minutes
    past what it has run (`scontrol update`), inside the time-limit signal's window (`slurm.signal_s` = 240 s before
    the limit), so that SLURM signals the job at its next pass over time limits (every 30 s) and a loaded machine
    still has two minutes to requeue it. SLURM signals the job's batch process (submitit's, not stopped), submitit
    requeues it (same job id), the test lets the stopped process go on to its end, gives the job its 30 minutes back
    and makes it eligible at once, and the second run of the cell resumes from its checkpoint. Nothing here sets the
    cell's environment: what its metrics.json records of SLURM (job id, nodes, restarts) is what SLURM gave the job."""
    cell = "train@fashion_mnist-vit-impulse-0"
    epochs = 40  # seconds of training: the test stops it after the first checkpoint
    repo = copy_repo(tmp_path / "requeue", "smoke", {"resources.threads": 1, "slurm.gpus": False, "slurm.time": 30,
                                                     "slurm.signal_s": 240, "train.epochs": epochs})
    runner = subprocess.Popen([sys.executable, "-m", "pipeline", "repro", "--executor", "slurm", cell], cwd=repo,
                              env=cluster, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        job = next(m[1] for line in runner.stdout if (m := re.search(rf"start  {re.escape(cell)}  \(SLURM job (\d+)",
                                                                      line)))
        log = repo / f"scratch/slurm/{job}/{job}_0_log.out"

        def diagnose() -> str:
            return (f"job state {job_field(cluster, job, 'JobState')}, restarts {job_field(cluster, job, 'Restarts')};"
                    f" log: {log.read_text()[-1500:] if log.exists() else '(none)'}")

        checkpoint = repo / "scratch/train/fashion_mnist/vit/impulse/seed0/last.pt"
        wait_for(checkpoint.exists, 300, "the cell's first checkpoint", diagnose)
        trainer = training_process(f"configs/train/{cell.split('@')[1]}.json", repo)
        trainer.suspend()
        limit = minutes(job_field(cluster, job, "RunTime")) + 3
        subprocess.run(["scontrol", "update", f"JobId={job}", f"TimeLimit={limit}"], env=cluster, check=True)
        wait_for(lambda: job_field(cluster, job, "Restarts") not in ("0", None), 150, "SLURM to requeue the job",
                 diagnose)
        assert job_field(cluster, job, "Restarts") == "1", diagnose()
        with contextlib.suppress(psutil.NoSuchProcess):
            trainer.resume()  # it ends on SLURM's SIGTERM to the requeued job's processes
        # its 30 minutes back, and eligible now rather than after SLURM's delay for a requeued job (about 2 minutes)
        wait_for(lambda: job_field(cluster, job, "JobState") == "PENDING", 120, "the requeued job to pend", diagnose)
        subprocess.run(["scontrol", "update", f"JobId={job}", "TimeLimit=30", "StartTime=now"], env=cluster,
                       check=True)
        rest = runner.communicate(timeout=480)[0]
    finally:
        runner.kill()
    assert runner.returncode == 0 and f"done   {cell}  ran" in rest, rest
    text = log.read_text()
    assert text.count(f"Running stage '{cell}'") >= 2 and "Requeued job" in text, text[-3000:]
    resumed = re.search(r"resuming from \S+last.pt at epoch (\d+)", text)
    assert resumed and 2 <= int(resumed[1]) <= epochs, text[-3000:]
    metrics = json.loads((repo / "results/train/fashion_mnist/vit/impulse/seed0/metrics.json").read_text())
    assert {k: v for k, v in metrics["slurm"].items() if k != "restarts"} == {"job_id": job, "nodes": 1,
                                                                              "nodelist": "localhost"}
    assert metrics["slurm"]["restarts"] >= 1
    assert metrics["epochs"] == epochs and [r["epoch"] for r in metrics["history"]] == list(range(epochs))
    assert "up to date" in sh(repo, "dvc", "status", cell)


@pytest.mark.slurm
@pytest.mark.slow("trains a smoke cell as one job across two SLURM nodes (two slurmd on 127.0.0.1)")
@pytest.mark.timeout(900)
def test_a_multi_node_cell_trains_across_two_nodes_through_real_srun(two_nodes, tmp_path):
    """resources.nnodes 2: the runner's SLURM executor asks for two nodes, the cell's stage command (its batch step, on
    n1) starts torchrun on each node with srun (`launch.srun_torchrun_command`), the two agents meet at the c10d
    rendezvous and train one DDP cell of world size 2 (gloo). The rendezvous endpoint is given (the node names n1/n2
    resolve nowhere; the derivation from the first node is the unit test below's)."""
    cell = "train@fashion_mnist-vit-impulse-0"
    endpoint = f"127.0.0.1:{free_port()}"
    repo = copy_repo(tmp_path / "multi", "smoke", {"resources.threads": 1, "resources.nnodes": 2, "resources.nproc": 1,
                                                   "resources.device": "cpu", "resources.rdzv_endpoint": endpoint,
                                                   "slurm.gpus": False, "slurm.time": 30})
    out = sh(repo, sys.executable, "-m", "pipeline", "repro", "--executor", "slurm", cell, env=two_nodes)
    job, log = re.search(rf"start  {re.escape(cell)}  \(SLURM job (\d+); log (\S+)\)", out).groups()
    assert "0 failed" in out, out
    assert completion(two_nodes, [job])[job]["State"] == "COMPLETED"
    text = Path(log).read_text()
    launched = next(line for line in text.splitlines() if line.startswith("launching 2 node(s) x 1 process(es): "))
    # each node's rank gets the CPUs the job asked for
    assert "srun --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 --cpus-per-task=1 " in launched, launched
    assert f"--nproc_per_node=1 --nnodes=2 --rdzv_backend=c10d --rdzv_endpoint={endpoint}" in launched, launched
    metrics = json.loads((repo / "results/train/fashion_mnist/vit/impulse/seed0/metrics.json").read_text())
    assert metrics["world_size"] == 2  # two ranks, one per node, in one process group
    assert {k: metrics["slurm"][k] for k in ("job_id", "nodes", "nodelist")} == {"job_id": job, "nodes": 2,
                                                                                 "nodelist": "n[1-2]"}
    assert "up to date" in sh(repo, "dvc", "status", cell)


def test_a_multi_node_cell_starts_torchrun_on_every_node_of_its_allocation(monkeypatch):
    monkeypatch.delenv("SLURM_STEP_ID", raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "1234")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[07-08]")
    monkeypatch.setattr(launch, "first_node", lambda: "gpu07")
    recipe = SimpleNamespace(nproc=8, nnodes=2, rdzv_endpoint="", rdzv_id="structured-init")
    assert launch.slurm_batch_nodes() == 2
    cmd = launch.srun_torchrun_command(recipe, ["train", "cifar10", "impulse", "0"])
    assert cmd[:4] == ["srun", "--nodes=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    assert {"--nnodes=2", "--nproc_per_node=8", "--rdzv_endpoint=gpu07:21234"} <= set(cmd)
    assert not [c for c in cmd if c.startswith("--cpus-per-task")]  # the job asked for none
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "72")  # Slurm >= 22.05: a step does not inherit it; say it again
    assert launch.srun_torchrun_command(recipe, ["train"])[4] == "--cpus-per-task=72"
    with pytest.raises(PipelineError, match="submit with --nodes=4"):
        launch.launch(SimpleNamespace(**{**vars(recipe), "nnodes": 4}), ["train"])
    monkeypatch.setenv("SLURM_STEP_ID", "0")  # inside `srun ... python -m pipeline train`: torchrun directly
    assert launch.slurm_batch_nodes() == 0


@pytest.mark.skipif(shutil.which("srun") is None, reason="submitit's SLURM executor refuses to start without srun on"
                    " PATH; as root, `apt-get install slurm-client` (.ci/run installs SLURM)")
def test_a_cell_asks_slurm_for_what_its_params_ask(tmp_path):
    from submitit.slurm.slurm import _make_sbatch_string

    executor = SlurmExecutor(tmp_path, tmp_path / "jobs", SlurmConfig(partition="gpu", account="lab", time=90))
    options = executor.parameters("train@cifar10-vit-impulse-0", Request(True, nproc=4, nnodes=2, threads=2,
                                                                          workers=4, gpu=True))
    script = _make_sbatch_string(command="true", folder=tmp_path, **options)
    for line in ["--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=4", "--cpus-per-task=24", "--time=90",
                 "--partition=gpu", "--account=lab", "--job-name=train@cifar10-vit-impulse-0",
                 "--signal=B:USR2@90"]:  # the time-limit signal to the batch shell, which is the job's Python
        assert f"#SBATCH {line}" in script
    assert "srun" not in script.split("# command")[1]  # the stage runs once; its torchrun fans out (launch.py)
    assert executor.executor._submitit_command_str.startswith("exec ")  # the batch shell becomes the job's Python
    cpu_only = SlurmExecutor(tmp_path, tmp_path / "jobs", SlurmConfig(gpus=False, cpus_per_task=3))
    options = cpu_only.parameters("x", Request(True, nproc=1, gpu=True))
    assert "gpus_per_node" not in options and options["cpus_per_task"] == 3
    with pytest.raises(PipelineError, match="slurm.time"):
        from_mapping(SlurmConfig, {"time": 0}, "slurm")
    site = SlurmExecutor(tmp_path, tmp_path / "jobs", SlurmConfig(options={"qos": "high", "constraint": "a100|h100",
                                                                           "mem": "64G", "exclusive": True}))
    script = _make_sbatch_string(command="true", folder=tmp_path, **site.parameters("x", Request(True, gpu=True)))
    for line in ["--qos=high", "--constraint='a100|h100'", "--mem=64G", "--exclusive"]:
        assert f"#SBATCH {line}\n" in script


def test_site_sbatch_options_are_checked_naming_the_key():
    for options, message in (({"cpus-per-task": 4}, "slurm.options.cpus-per-task: the runner sets --cpus-per-task"
                               " itself; set slurm.cpus_per_task"),
                              ({"Bad Key": 1}, "slurm.options.Bad Key: not an sbatch long option"),
                              ({"qos": None}, "slurm.options.qos = None: give a string or number")):
        with pytest.raises(PipelineError, match=re.escape(message)):
            from_mapping(SlurmConfig, {"options": options}, "slurm")
    assert SlurmConfig(options={"gres_flags": "enforce-binding"}).options  # underscores are sbatch's dashes


def test_a_cell_asks_for_cpus_for_the_loader_workers_its_data_path_starts():
    """The device data path builds batches on the GPU and starts no DataLoader worker: its CPUs are the threads."""
    from pipeline.scale.repro import request_for

    def params(**resources):
        p = load_params(ROOT / "params.yaml")
        return dataclasses.replace(p, resources=dataclasses.replace(p.resources, **resources))

    gpu = {"device": "cuda", "workers": 8, "threads": 1}
    assert request_for(True, params(**gpu)).workers == 0  # data_on_device auto, Fashion-MNIST in memory: on the GPU
    assert request_for(True, params(**gpu, data_on_device=False)).workers == 8
    cpu = params(device="cpu", workers=2)
    assert request_for(True, cpu).workers == 2 and request_for(False, cpu) == Request(training=False)


def test_a_cell_sbatch_refuses_is_reported_by_name(tmp_path, monkeypatch):
    """No SLURM needed: an `sbatch` that refuses, as SLURM does a partition that does not exist (and an `srun`, which
    submitit looks for before it builds its executor)."""
    fake = tmp_path / "bin" / "sbatch"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'sbatch: error: invalid partition specified: nope' >&2\nexit 1\n")
    (fake.parent / "srun").write_text("#!/bin/sh\nexit 0\n")
    for tool in ("sbatch", "srun"):
        (fake.parent / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    executor = SlurmExecutor(tmp_path, tmp_path / "jobs", SlurmConfig(partition="nope"))
    with pytest.raises(SubmitError, match="sbatch refused train@x: sbatch: error: invalid partition specified"):
        executor.submit("train@x", ["true"], Request(True), dict(os.environ))

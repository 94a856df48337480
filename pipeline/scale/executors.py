"""Where `python -m pipeline repro` runs one stage's command: a process on this machine, or a SLURM job.

Both executors take the same command (`python -m pipeline.stage dvc --wait-for-lock repro --single-item <stage>`, by
`pipeline.scale.repro`) and the runner's overrides of the environment, and return a `Job` the scheduler polls:
`poll()` is None while it runs, then its exit status; `cancel()` stops it; `where` and `log` say where it ran and
where its output went. The command runs in the environment of the place it runs in (this machine's; a SLURM job's,
with SLURM_JOB_ID, its nodes and the GPUs SLURM gave it) with only the overrides on top (`stage_env`).

- `LocalExecutor`: `subprocess.Popen` in its own session (so Ctrl-C reaches the whole stage, DVC and its command,
  through the runner), stdout and stderr to one log file per stage.
- `SlurmExecutor`: one SLURM job per stage through submitit (Meta's library for running Python callables and
  commands on SLURM; it writes the sbatch script, submits, tracks and cancels). We use submitit rather than
  dask-jobqueue because every cell needs its own allocation (nodes, GPUs, CPUs, time from its params) and its own
  log and job id, while dask-jobqueue starts a pool of identical long-lived workers and ships Python tasks to them:
  that fits many small tasks, not one DVC stage per allocation. The job runs the command once, on the first node
  of its allocation (`use_srun=False`); a multi-node cell's own stage command starts torchrun on every node with
  `srun` (`pipeline.training.launch`), so `dvc.lock` is written by one process. At its time limit a job is
  requeued, not lost: SLURM signals it `slurm.signal_s` before the limit (sbatch --signal), submitit requeues it
  (`scontrol requeue`, up to `slurm.requeues` times: its `max_num_timeout`) because `StageJob` is checkpointable,
  and the requeued job runs the same command again: DVC runs the stage again, which resumes from the checkpoint of
  its last finished epoch (`pipeline.training.run`; the resources are not part of the checkpoint's key).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import submitit

from pipeline.config import SlurmConfig
from pipeline.errors import PipelineError

#: SLURM states after which a job no longer runs (`scontrol show job` keeps them for MinJobAge, 300 s by default).
ENDED = {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
         "TIMEOUT"}


class SubmitError(PipelineError):
    """The executor could not start a stage (sbatch refused it: a bad partition, account or request)."""


@dataclass(frozen=True)
class Request:
    """What one stage asks of the machine: processes (GPUs) per node, nodes, CPU threads per process."""

    training: bool  #: a training cell (reads the `train` params): goes to SLURM; other stages run locally
    nproc: int = 1
    nnodes: int = 1
    threads: int = 1
    workers: int = 0
    gpu: bool = False  #: the cell trains on GPUs (resources.device is not 'cpu')


class Job(Protocol):
    where: str  #: 'pid 1234' or 'SLURM job 56'
    log: Path

    def poll(self) -> int | None: ...

    def cancel(self) -> None: ...

    def reap(self) -> None: ...


def stage_env(overrides: dict) -> dict:
    """This process's environment with the runner's overrides on top and this interpreter's folder first on PATH
    (stage commands call `python`). Under SLURM it runs inside the job, so SLURM's variables stay."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, **overrides, "PATH": path}


def stage_file_name(stage: str) -> str:
    """`train@cifar10-impulse-0` -> a file name (a nested dvc.yaml's `sub/dvc.yaml:name` has / and :)."""
    return stage.replace("/", "_").replace(":", "_")


class LocalJob:
    def __init__(self, proc: subprocess.Popen, log: Path, log_file):
        self.proc, self.log, self._log_file = proc, log, log_file
        self.where = f"pid {proc.pid}"

    def poll(self) -> int | None:
        code = self.proc.poll()
        if code is not None and not self._log_file.closed:
            self._log_file.close()
        return code

    def cancel(self) -> None:
        """SIGINT to the stage's process group: what Ctrl-C in a terminal sends (DVC stops the command, unlocks)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)

    def reap(self, grace: float = 20.0) -> None:
        """Wait for a cancelled stage to exit; SIGKILL its process group after `grace` s."""
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._log_file.close()


class LocalExecutor:
    """Each stage as a process on this machine; the caller chooses its environment (CUDA_VISIBLE_DEVICES)."""

    name = "local"

    def __init__(self, root: Path, log_dir: Path):
        self.root, self.log_dir = root, log_dir

    def submit(self, stage: str, command: list[str], request: Request, overrides: dict) -> LocalJob:
        del request  # the scheduler has already fitted it to this machine
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"{stage_file_name(stage)}.log"
        log_file = log.open("w")
        proc = subprocess.Popen(command, cwd=self.root, env=stage_env(overrides), stdout=log_file,
                                stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        return LocalJob(proc, log, log_file)


def scontrol_state(job_id: str) -> str | None:
    """The job's state as slurmctld reports it, or None once it has forgotten the job."""
    proc = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True)
    for field in proc.stdout.split():
        if field.startswith("JobState="):
            return field.split("=", 1)[1]
    return None


class StageJob(submitit.helpers.Checkpointable):
    """The callable a SLURM job runs: the stage command in the job's own environment plus the runner's overrides.

    Checkpointable (submitit's `checkpoint` resubmits the same callable), so at the time limit submitit requeues
    the job instead of letting SLURM end it; the stage's own checkpoint carries the training over.
    """

    def __init__(self, command: list[str], cwd: Path, overrides: dict):
        self.command, self.cwd, self.overrides = command, cwd, overrides

    def __call__(self) -> str:
        return submitit.helpers.CommandFunction(self.command, cwd=self.cwd, env=stage_env(self.overrides))()


class SlurmJob:
    def __init__(self, job: submitit.Job):
        self.job = job
        self.where = f"SLURM job {job.job_id}"
        self.log = Path(job.paths.stdout)
        self.state = "PENDING"

    def poll(self) -> int | None:
        """0 once submitit has the command's result; 1 if it failed or SLURM ended the job without one.

        submitit learns a job's end from its result file, or from `sacct`; where SLURM runs without accounting,
        `scontrol` tells a job SLURM cancelled, timed out or lost (it would otherwise look pending forever).
        """
        if not self.job.done():
            state = self.job.state  # submitit's, from sacct; UNKNOWN where SLURM keeps no accounting
            if state == "UNKNOWN":
                state = scontrol_state(self.job.job_id) or self.state
            self.state = state
            if state not in ENDED:
                return None
            time.sleep(1.0)  # the job's last act is writing its result file; give the shared filesystem a moment
            if not self.job.done():
                return 1
        self.state = "COMPLETED" if self.job.exception() is None else "FAILED"
        return 0 if self.state == "COMPLETED" else 1

    def cancel(self) -> None:
        self.job.cancel(check=False)  # scancel

    def reap(self) -> None:
        """Nothing to wait for here: SLURM ends the job's processes."""


class SlurmExecutor:
    """Each training cell as a SLURM job sized by its params; `folder` must be on the filesystem the nodes share."""

    name = "slurm"

    def __init__(self, root: Path, folder: Path, slurm: SlurmConfig):
        self.root, self.slurm = root, slurm
        # The job runs its command on its batch shell, not in a job step, so SLURM's time-limit signal must go to
        # the batch shell (B:) and the shell must be the Python process that handles it (exec): submitit's default
        # signals job steps only, which such a job has none of.
        self.executor = submitit.SlurmExecutor(folder=folder / "%j", max_num_timeout=slurm.requeues,
                                               python=f"exec {shlex.quote(sys.executable)}")

    def parameters(self, stage: str, request: Request) -> dict:
        """sbatch options of one cell: nodes, one task per node, CPUs, GPUs, time, partition, account, and the
        site's own (`slurm.options`, as given)."""
        cpus = self.slurm.cpus_per_task or request.nproc * (request.threads + request.workers)
        site = {str(k).replace("_", "-"): v for k, v in (self.slurm.options or {}).items()}
        # the nodes go to sbatch as a site option would, not as submitit's `nodes`: submitit counts nodes x tasks per
        # node as the job's tasks and waits for each one's result, but the command runs once (`use_srun`: False) and
        # its own srun fans out to the other nodes (`launch.srun_torchrun_command`)
        options = {"job_name": stage, "nodes": 1, "ntasks_per_node": 1, "cpus_per_task": cpus,
                   "time": self.slurm.time, "use_srun": False, "stderr_to_stdout": True,
                   "additional_parameters": site | {"nodes": request.nnodes,
                                                    "signal": f"B:USR2@{self.slurm.signal_s}"}}
        if request.gpu and self.slurm.gpus:
            options["gpus_per_node"] = request.nproc
        if self.slurm.partition:
            options["partition"] = self.slurm.partition
        if self.slurm.account:
            options["account"] = self.slurm.account
        return options

    def submit(self, stage: str, command: list[str], request: Request, overrides: dict) -> SlurmJob:
        self.executor.update_parameters(**self.parameters(stage, request))
        overrides = {k: v for k, v in overrides.items() if k != "CUDA_VISIBLE_DEVICES"}  # SLURM's own GPUs stay
        try:
            job = self.executor.submit(StageJob(command, self.root, overrides))
        except (submitit.core.utils.FailedJobError, submitit.core.utils.FailedSubmissionError, OSError) as exc:
            why = [line for line in str(exc).splitlines() if line.strip()]
            reason = why[-1].strip().strip("'\"") if why else repr(exc)
            raise SubmitError(f"sbatch refused {stage}: {reason}") from None
        return SlurmJob(job)

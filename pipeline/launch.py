"""From a stage command to processes: torchrun for several processes or nodes, and a lease on the GPUs.

A stage runs `python -m pipeline train ...`. With `train.nproc: 1` and `train.nnodes: 1` the run happens in that
process. Otherwise the command re-executes itself under torchrun:

    single node:  torchrun --standalone --nproc_per_node=<nproc> -m pipeline ... train ...
    multi-node:   torchrun --nnodes=<nnodes> --nproc_per_node=<nproc> --rdzv_backend=c10d
                           --rdzv_endpoint=<train.rdzv_endpoint> --rdzv_id=<train.rdzv_id> -m pipeline ... train ...

On SLURM, start the same stage command once per node, e.g. `srun --nodes=2 --ntasks-per-node=1 python -m pipeline
--set train.nnodes=2 --set train.rdzv_endpoint=$(scontrol show hostnames | head -n1):29400 train cifar10 impulse 0`.

GPU lease: DVC does not pin GPUs to queue workers (`dvc queue start -j N`), so before launching, the command takes
an exclusive `flock` on one lock file per GPU it will use (in `$PIPELINE_LOCK_DIR`, default the system's temp dir)
and exports CUDA_VISIBLE_DEVICES to those. The kernel drops the locks when the process exits or crashes.
`PIPELINE_DEVICES=0,1,2` replaces the device list (for tests on a CPU machine, or to reserve GPUs).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipeline.errors import PipelineError


def visible_devices() -> list[str]:
    """The GPU ids this machine offers: `$PIPELINE_DEVICES` if set, else CUDA's count."""
    if os.environ.get("PIPELINE_DEVICES"):
        return [x.strip() for x in os.environ["PIPELINE_DEVICES"].split(",") if x.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


class GpuLease:
    """Exclusive locks on `count` of the `devices`; waits (up to `timeout` s) until enough are free."""

    def __init__(self, devices: list[str], count: int, timeout: float = 24 * 3600, poll: float = 2.0):
        if count > len(devices):
            raise PipelineError(f"train.nproc = {count} but this machine has {len(devices)} GPU(s)"
                                f" ({', '.join(devices) or 'none'}); lower train.nproc")
        self.devices, self.count, self.timeout, self.poll = devices, count, timeout, poll
        self.lock_dir = Path(os.environ.get("PIPELINE_LOCK_DIR", tempfile.gettempdir())) / "pipeline-gpu-locks"
        self.held: dict[str, int] = {}

    def acquire(self) -> list[str]:
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.timeout
        while True:
            for dev in self.devices:
                if dev in self.held or len(self.held) == self.count:
                    continue
                fd = os.open(self.lock_dir / f"gpu{dev}.lock", os.O_RDWR | os.O_CREAT, 0o666)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    self.held[dev] = fd
                except BlockingIOError:
                    os.close(fd)
            if len(self.held) == self.count:
                return sorted(self.held, key=self.devices.index)
            if time.monotonic() > deadline:
                self.release()
                raise PipelineError(f"no {self.count} free GPU(s) within {self.timeout:.0f} s"
                                    f" (locks in {self.lock_dir})")
            time.sleep(self.poll)

    def release(self) -> None:
        for fd in self.held.values():
            os.close(fd)  # closing the descriptor drops the flock
        self.held.clear()

    def __enter__(self) -> list[str]:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def under_torchrun() -> bool:
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def torchrun_command(nproc: int, nnodes: int, rdzv_endpoint: str, rdzv_id: str, argv: list[str]) -> list[str]:
    """The torchrun line that re-runs `python -m pipeline <argv>` on `nproc` processes per node."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}"]
    if nnodes == 1:
        cmd.append("--standalone")
    else:
        if not rdzv_endpoint:
            raise PipelineError(f"train.nnodes = {nnodes} needs train.rdzv_endpoint (host:port of node 0)")
        # every node runs the same command, so a digest of it names this run's rendezvous on all of them, and
        # two runs sharing an endpoint do not join each other's (an explicit train.rdzv_id wins)
        rdzv_id = rdzv_id or "run-" + hashlib.sha256("\0".join(argv).encode()).hexdigest()[:12]
        cmd += [f"--nnodes={nnodes}", "--rdzv_backend=c10d", f"--rdzv_endpoint={rdzv_endpoint}",
                f"--rdzv_id={rdzv_id}"]
    return cmd + ["-m", "pipeline", *argv]


def needs_launch(recipe) -> bool:
    """Whether this command must re-run itself under torchrun: several processes or nodes, or a GPU to lease."""
    if under_torchrun():
        return False
    uses_gpu = recipe.device == "cuda" or (recipe.device == "auto" and bool(visible_devices()))
    return recipe.nproc > 1 or recipe.nnodes > 1 or uses_gpu


def launch(recipe, argv: list[str]) -> int:
    """Run `python -m pipeline <argv>` under torchrun, holding a lease on the GPUs it will use."""
    uses_gpu = recipe.device == "cuda" or (recipe.device == "auto" and bool(visible_devices()))
    cmd = torchrun_command(recipe.nproc, recipe.nnodes, recipe.rdzv_endpoint, recipe.rdzv_id, argv)
    env = dict(os.environ)
    if not uses_gpu:
        print(f"launching {recipe.nproc} CPU process(es) per node: {' '.join(cmd[1:])}", flush=True)
        return subprocess.call(cmd, env=env)
    with GpuLease(visible_devices(), recipe.nproc) as gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        print(f"leased GPU(s) {','.join(gpus)}; launching: {' '.join(cmd[1:])}", flush=True)
        return subprocess.call(cmd, env=env)

"""From a stage command to processes: torchrun for several processes or nodes (and srun across a SLURM allocation).

A stage runs `python -m pipeline.training.train ...`. With `train.nproc: 1` and `train.nnodes: 1` the run happens in
that process. Otherwise the command re-executes itself under torchrun:

    single node:  torchrun --standalone --nproc_per_node=<nproc> -m pipeline.training.train ...
    multi-node:   torchrun --nnodes=<nnodes> --nproc_per_node=<nproc> --rdzv_backend=c10d
                           --rdzv_endpoint=<train.rdzv_endpoint> --rdzv_id=<train.rdzv_id>
                           -m pipeline.training.train ...

Multi-node by hand: start the same stage command on every node, with `train.rdzv_endpoint` set to node 0's
host:port. Inside a SLURM allocation of `train.nnodes` nodes (a batch job, as `python -m pipeline repro --executor
slurm` submits), the command started once does that itself: `srun --nodes=<nnodes> --ntasks-per-node=1 torchrun ...`,
with the rendezvous on the allocation's first node (a port derived from the job id, unless train.rdzv_endpoint is
set). Inside an srun step (`srun ... python -m pipeline.training.train ...`, one task per node) it runs torchrun
directly.

GPUs: the command uses the GPUs it can see (CUDA_VISIBLE_DEVICES). `python -m pipeline repro` gives each running cell
its own (`pipeline.scale.repro`) and SLURM gives each job its allocation's, so no lease of our own is needed.
`PIPELINE_DEVICES=0,1,2` replaces the device list (for tests on a CPU machine, or to reserve GPUs).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

from pipeline.errors import PipelineError


def visible_devices() -> list[str]:
    """The GPU ids this process may use: `$PIPELINE_DEVICES` if set, else CUDA's (CUDA_VISIBLE_DEVICES' ids)."""
    if os.environ.get("PIPELINE_DEVICES"):
        return [x.strip() for x in os.environ["PIPELINE_DEVICES"].split(",") if x.strip()]
    import torch  # here, not at the top: `check` and `repro` on a CPU machine need no CUDA probing otherwise

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    listed = [x.strip() for x in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if x.strip()]
    return listed[:count] if listed else [str(i) for i in range(count)]


def under_torchrun() -> bool:
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def torchrun_command(nproc: int, nnodes: int, rdzv_endpoint: str, rdzv_id: str, argv: list[str]) -> list[str]:
    """The torchrun line that re-runs `python <argv>` (argv: `-m <module> ...`) on `nproc` processes per node."""
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
    return cmd + list(argv)


def slurm_batch_nodes() -> int:
    """Nodes of the SLURM allocation this process runs in as its batch script (0: none, or inside an srun step)."""
    if "SLURM_JOB_ID" not in os.environ or "SLURM_STEP_ID" in os.environ:
        return 0
    return int(os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES") or 1)


def first_node() -> str:
    """The first host of this SLURM allocation (node 0 of the rendezvous)."""
    hosts = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]], capture_output=True,
                           text=True, check=True).stdout.split()
    return hosts[0]


def srun_torchrun_command(recipe, argv: list[str]) -> list[str]:
    """torchrun once per node of this allocation through srun, rendezvous on its first node."""
    endpoint = recipe.rdzv_endpoint or f"{first_node()}:{20000 + int(os.environ['SLURM_JOB_ID']) % 20000}"
    return ["srun", f"--nodes={recipe.nnodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
            *torchrun_command(recipe.nproc, recipe.nnodes, endpoint, recipe.rdzv_id, argv)]


def needs_launch(recipe) -> bool:
    """Whether this command must re-run itself under torchrun: several processes or nodes."""
    return not under_torchrun() and (recipe.nproc > 1 or recipe.nnodes > 1)


def launch(recipe, argv: list[str]) -> int:
    """Run `python <argv>` under torchrun (on every node of a SLURM allocation when there is one)."""
    nodes = slurm_batch_nodes()
    if recipe.nnodes > 1 and nodes:
        if nodes < recipe.nnodes:
            raise PipelineError(f"train.nnodes = {recipe.nnodes} but this SLURM allocation has {nodes} node(s);"
                                f" submit with --nodes={recipe.nnodes}")
        cmd = srun_torchrun_command(recipe, argv)
    else:
        cmd = torchrun_command(recipe.nproc, recipe.nnodes, recipe.rdzv_endpoint, recipe.rdzv_id, argv)
    print(f"launching {recipe.nnodes} node(s) x {recipe.nproc} process(es): {' '.join(cmd)}", flush=True)
    return subprocess.call(cmd)

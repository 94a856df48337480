"""From a stage command to processes: torchrun for several processes or nodes (srun across a SLURM allocation).

With `resources.nproc` or `resources.nnodes` above 1 a cell re-executes itself under torchrun:

    single node:  torchrun --standalone --nproc_per_node=<nproc> -m pipeline.cell <runtime> <config>
    multi-node:   torchrun --nnodes=<nnodes> --nproc_per_node=<nproc> --rdzv_backend=c10d
                           --rdzv_endpoint=<resources.rdzv_endpoint> --rdzv_id=<resources.rdzv_id>
                           -m pipeline.cell <runtime> <config>

By hand, start the command on every node with `resources.rdzv_endpoint` at node 0; inside a SLURM allocation it
runs srun itself. `resources.device: cuda` never falls back to the CPU: `require_cuda` says why not and what to
install (`make env CUDA=12`).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

from pipeline.errors import PipelineError

#: The oldest NVIDIA driver a CUDA major version runs on (NVIDIA's CUDA toolkit release notes, minor-version
#: compatibility): the CUDA 13 build of torch needs >= 580, the CUDA 12 build >= 525.60.
MIN_DRIVER = {12: (525, 60), 13: (580, 0)}
#: What to do about a driver or GPU the default lock cannot use (README, "GPUs").
CUDA12_HINT = ("install the CUDA 12.6 build of the same torch (`make env CUDA=12`, or `make repro CUDA=12`; it runs on"
               " drivers >= 525 and has V100 (sm_70) kernels)")


#: Device files without which torch sees no GPU: NVIDIA's driver (also where /proc/driver/nvidia is not mounted), WSL2's
#: GPU paravirtualisation and AMD's ROCm driver.
GPU_NODES = ("/dev/nvidiactl", "/dev/dxg", "/dev/kfd")


def visible_devices() -> list[str]:
    """The GPU ids this process may use: `$PIPELINE_DEVICES` if set, else CUDA's (CUDA_VISIBLE_DEVICES' ids)."""
    if os.environ.get("PIPELINE_DEVICES"):
        return [x.strip() for x in os.environ["PIPELINE_DEVICES"].split(",") if x.strip()]
    if not gpu_driver():
        return []  # torch would find no GPU, and importing it costs `repro` seconds
    import torch  # here, not at the top: `check` and `repro` on a CPU machine need no CUDA probing otherwise

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    listed = [x.strip() for x in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if x.strip()]
    return listed[:count] if listed else [str(i) for i in range(count)]


def gpu_driver() -> bool:
    """Whether a GPU driver is loaded here (NVIDIA's, WSL2's or ROCm's): without one torch sees no GPU."""
    return driver_version() is not None or any(os.path.exists(node) for node in GPU_NODES)


def driver_version(path: Path = Path("/proc/driver/nvidia/version")) -> tuple[int, int] | None:
    try:
        found = re.search(r"Kernel Module(?: for \S+)?\s+(\d+)\.(\d+)", path.read_text())
    except OSError:
        return None
    return (int(found[1]), int(found[2])) if found else None


#: An architecture of torch.cuda.get_arch_list(): sm_90 (kernels), sm_90a / sm_100f (arch- or family-specific
#: kernels), compute_120 (PTX, which the driver compiles for that architecture and newer).
ARCH = re.compile(r"^(sm|compute)_(\d+)([a-z]?)$")


def has_kernels(sm: int, arch_list: list[str]) -> bool:
    """Whether a build with `arch_list` runs on compute capability `sm` (e.g. 90): its kernels, or older PTX."""
    for name in arch_list:
        found = ARCH.match(name)
        if not found:
            continue
        kind, number, suffix = found[1], int(found[2]), found[3]
        if number == sm or (kind == "compute" and not suffix and number <= sm):
            return True
    return False


def cuda_problem(cuda_build: str | None, driver: tuple[int, int] | None, gpus: list[tuple[str, tuple[int, int]]],
                 arch_list: list[str], needed: int, torch_error: str = "") -> str:
    """Why this torch cannot train on CUDA here ('' when it can), from the build (`torch.version.cuda`, its arch list),
    the driver, the GPUs torch initialised and `torch_error`, what torch said when it could not start CUDA or run a
    kernel. torch decides; the rest only explains a failure and names what to install."""
    if not cuda_build:
        return "this torch is a CPU-only build; reinstall the environment from requirements.lock (make env)"
    major = int(cuda_build.split(".")[0])
    oldest = MIN_DRIVER.get(major)
    old_driver = ""
    if driver and oldest and driver < oldest:
        fix = CUDA12_HINT if major > 12 else "update the NVIDIA driver"
        old_driver = (f"torch is built for CUDA {cuda_build}, which needs NVIDIA driver >= {oldest[0]}.{oldest[1]};"
                      f" this machine has {driver[0]}.{driver[1]}: {fix}")
    said = f" (torch: {torch_error})" if torch_error else ""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not gpus:
        if driver is None:
            return ("torch cannot start CUDA and this machine shows no NVIDIA driver (no"
                    f" /proc/driver/nvidia/version){said}")
        if old_driver:
            return old_driver
        return (f"torch cannot start CUDA{said or ' (torch.cuda.is_available() is False)'};"
                f" CUDA_VISIBLE_DEVICES={visible!r}")
    if len(gpus) < needed:
        return f"CUDA sees {len(gpus)} GPU(s) (CUDA_VISIBLE_DEVICES={visible!r}), {needed} needed"
    if not torch_error:
        return ""
    for name, (cc_major, cc_minor) in gpus:
        sm = cc_major * 10 + cc_minor
        if not has_kernels(sm, arch_list):
            return (f"this torch (CUDA {cuda_build}) has no kernels for {name} (sm_{sm}; it has"
                    f" {', '.join(arch_list)}): {CUDA12_HINT}")
    return old_driver + said if old_driver else f"torch cannot run a kernel on {gpus[needed - 1][0]}{said}"


def run_kernel(index: int) -> str:
    import torch

    try:
        (torch.ones(2, device=torch.device("cuda", index)) * 2).sum().item()
    except RuntimeError as exc:
        return str(exc).strip().splitlines()[0]
    return ""


def cuda_unusable(needed: int = 1) -> str:
    """Why this torch cannot train on `needed` visible GPUs ('' when it can): a kernel on GPU `needed - 1`, else
    `cuda_problem`."""
    import torch

    with warnings.catch_warnings(record=True) as caught:  # torch's own word on a failed CUDA start, if any
        warnings.simplefilter("always")
        available = torch.cuda.is_available()
        gpus = ([(torch.cuda.get_device_name(i), torch.cuda.get_device_capability(i))
                 for i in range(torch.cuda.device_count())] if available else [])
        error = run_kernel(needed - 1) if len(gpus) >= needed else ""
    said = error or ("; ".join(str(w.message).strip().splitlines()[0] for w in caught) if not gpus else "")
    return cuda_problem(torch.version.cuda, driver_version(), gpus, torch.cuda.get_arch_list() if available else [],
                        needed, said)


def require_cuda(needed: int = 1) -> None:
    """Stop, saying why, unless this torch can train on `needed` visible GPUs (resources.device: cuda)."""
    reason = cuda_unusable(needed)
    if reason:
        raise PipelineError(f"resources.device = 'cuda' but CUDA cannot run here: {reason} (or set resources.device:"
                            " auto or cpu to train on the CPU)")


def require_devices(nproc: int, device: str, devices: list[str]) -> None:
    """Stop before any stage runs when the GPUs `resources` asks for are not here (`devices`: `visible_devices()`)."""
    if device == "cuda" and not devices:
        require_cuda(nproc)
    if devices and device != "cpu" and nproc > len(devices):
        raise PipelineError(f"resources.nproc = {nproc} but this machine has {len(devices)} GPU(s)"
                            f" ({','.join(devices)}); lower resources.nproc (or set resources.device: cpu)")


def under_torchrun() -> bool:
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def torchrun_command(nproc: int, nnodes: int, rdzv_endpoint: str, rdzv_id: str, argv: list[str]) -> list[str]:
    """The torchrun line that re-runs `python <argv>` (argv: `-m <module> ...`) on `nproc` processes per node."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}"]
    if nnodes == 1:
        cmd.append("--standalone")
    else:
        if not rdzv_endpoint:
            raise PipelineError(f"resources.nnodes = {nnodes} needs resources.rdzv_endpoint (host:port of node 0)")
        # every node runs the same command, so a digest of it names this run's rendezvous on all of them, and
        # two runs sharing an endpoint do not join each other's (an explicit resources.rdzv_id wins)
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
    hosts = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]], capture_output=True,
                           text=True, check=True).stdout.split()
    return hosts[0]


def srun_torchrun_command(resources, argv: list[str]) -> list[str]:
    endpoint = resources.rdzv_endpoint or f"{first_node()}:{20000 + int(os.environ['SLURM_JOB_ID']) % 20000}"
    # since Slurm 22.05 a step no longer inherits the job's --cpus-per-task: without it, every rank of a node would
    # share one CPU
    cpus = os.environ.get("SLURM_CPUS_PER_TASK")
    return ["srun", f"--nodes={resources.nnodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
            *([f"--cpus-per-task={cpus}"] if cpus else []),
            *torchrun_command(resources.nproc, resources.nnodes, endpoint, resources.rdzv_id, argv)]


def slurm_job() -> dict | None:
    if "SLURM_JOB_ID" not in os.environ:
        return None
    return {"job_id": os.environ["SLURM_JOB_ID"], "nodes": int(os.environ.get("SLURM_JOB_NUM_NODES") or 1),
            "nodelist": os.environ.get("SLURM_JOB_NODELIST", ""),
            "restarts": int(os.environ.get("SLURM_RESTART_COUNT") or 0)}


def needs_launch(resources) -> bool:
    return not under_torchrun() and (resources.nproc > 1 or resources.nnodes > 1)


def launch(resources, argv: list[str]) -> int:
    """Run `python <argv>` under torchrun (on every node of a SLURM allocation when there is one)."""
    nodes = slurm_batch_nodes()
    if resources.nnodes > 1 and nodes:
        if nodes < resources.nnodes:
            raise PipelineError(f"resources.nnodes = {resources.nnodes} but this SLURM allocation has {nodes}"
                                f" node(s); submit with --nodes={resources.nnodes}")
        cmd = srun_torchrun_command(resources, argv)
    else:
        cmd = torchrun_command(resources.nproc, resources.nnodes, resources.rdzv_endpoint, resources.rdzv_id, argv)
    print(f"launching {resources.nnodes} node(s) x {resources.nproc} process(es): {' '.join(cmd)}", flush=True)
    return subprocess.call(cmd)

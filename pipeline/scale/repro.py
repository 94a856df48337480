"""`python -m pipeline repro`: the stale stages of dvc.yaml in parallel, on this machine or as SLURM jobs.

    python -m pipeline repro                       # every core: cores // resources.threads stages at once
    python -m pipeline repro -j 4 train            # at most 4 at once, only the `train` stages and what they need
    python -m pipeline repro --dry                 # what would run, where, with what resources
    python -m pipeline repro --executor slurm      # each training cell a SLURM job (resources from params.yaml)

What runs is DVC's decision, never ours: under DVC's repository lock, DVC's own functions order the targets' stages
(`plan_repro`, as `dvc repro` does) and say which are stale (`Stage.status`); the lock is released before anything
runs. Each stale stage (or one downstream of a stale one) runs, once its upstream stages finished, as its own
`dvc --wait-for-lock repro --single-item <stage>`, which checks it again as a serial `dvc repro` would (skip,
restore from the run-cache, or run and record). So afterwards `dvc status` is clean and every result is the one a
serial `dvc repro` writes (on CPU, identical metrics). The `configs` stage (every cell's resolved configuration) runs
first when it is stale, and the stages are planned again after it: a cell whose configuration it left equal is up to
date, so no process or SLURM job starts for it.

Locks (DVC 3.67, dvc/repo/__init__.py, stage/decorators.py, rwlock.py): DVC holds the repository lock while it
checks, restores or records a stage and releases it while the command runs. Without `--wait-for-lock` a process
that finds the lock taken gives up after 3 s, which at the re-lock after the command would throw a finished result
away. Stages sharing an input take read locks, which do not conflict. On a shared filesystem without working fcntl
locks, set `dvc config core.hardlink_lock true`.

Where and how wide (params `resources`, which no stage lists as a DVC param): `local` runs processes here, `-j`
defaulting to cores // resources.threads on CPU, and to GPUs // resources.nproc with GPUs (each training cell gets
resources.nproc GPUs of its own). `slurm` submits each training cell as a SLURM job (`pipeline.scale.executors`)
and runs the light stages here; `-j` then caps the jobs in flight (default: no cap). Ctrl-C cancels what was
started. A failed stage is reported with its log; the stages that need it are skipped, the rest finish.
Progress: each finished stage prints k of N, the stages running and an overall ETA (`Progress`), and so does a
heartbeat line every `Scheduler.heartbeat_s` while nothing finishes. Stages marked `always_changed` (`sources`:
outside state such as a user's folder) run first, one at a time, and only then is the stale set planned.
Every stage starts as its own process, as under plain `dvc repro` (docs/scale-out.md, "One way to start a stage").
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from dvc.repo import Repo, lock_repo
from dvc.repo.reproduce import collect_stages, get_active_graph, plan_repro

from pipeline.datasets import DATASETS
from pipeline.errors import PipelineError
from pipeline.experiments import TRAINING
from pipeline.params import Params
from pipeline.scale.executors import LocalExecutor, Request, SlurmExecutor, SubmitError
from pipeline.training import launch

LOG_DIR = Path("scratch/repro")
SLURM_DIR = Path("scratch/slurm")


@dataclass
class Cell:
    """One stage to run: its DVC name, the stages it waits for, what it asks of the machine."""

    name: str
    upstream: list[str]
    request: Request
    stale: bool  #: stale now; False = downstream of a stale stage (DVC re-checks it once its inputs exist)


@dataclass
class Outcome:
    name: str
    status: str  #: ran | restored | unchanged | failed | skipped | cancelled
    where: str = ""
    log: Path | None = None
    seconds: float = 0.0
    detail: str = ""


#: the stage whose outputs every training cell reads (`pipeline.resolve`): run before the cells are planned
CONFIGS_STAGE = "configs"


def is_training(desc: str | None) -> bool:
    """Whether a stage trains a model (and so gets params `resources`: processes, threads, GPUs, a SLURM job)."""
    return (desc or "").startswith(TRAINING)


def config_changes(params: Params, root: Path = Path(".")) -> set[str]:
    """The training cells whose resolved configuration or runtime's code stamp the configs stage would write anew
    (changed or new)."""
    from pipeline.experiments import by_name
    from pipeline.resolve import CONFIGS, is_stamp, resolved

    def differs(name: str, content: dict) -> bool:
        path = root / CONFIGS / name
        return not path.is_file() or json.loads(path.read_text()) != content

    files = resolved(params)
    new_code = {content["module"] for name, content in files.items() if is_stamp(name) and differs(name, content)}
    return {name.removesuffix(".json").replace("/", "@", 1) for name, content in files.items()
            if name != "runtime.json" and not is_stamp(name)
            and (by_name(name.split("/")[0]).runtime in new_code or differs(name, content))}


def loader_workers(params: Params) -> int:
    """The DataLoader workers a training process starts: none where its batches are built on the GPU
    (`resources.data_on_device` true, or 'auto' on CUDA with every planned dataset small enough to live in memory,
    as `pipeline.data.load.device.choose` decides), else `resources.workers`."""
    r = params.resources
    on_gpu = r.device != "cpu" and (r.data_on_device is True or r.data_on_device == "auto" and all(
        DATASETS[d].in_memory for d in planned_datasets(params) if d in DATASETS))
    return 0 if on_gpu else r.workers


def planned_datasets(params: Params) -> set[str]:
    return {*params.datasets, params.filter_study.dataset, *params.ci_alpha.datasets, *params.ci_model3.datasets,
            *params.weight_selection.datasets, *params.sia.datasets}


def request_for(training: bool, params: Params) -> Request:
    """A stage's resources: none for a stage that does not train, else params `resources` (the loader workers its
    data path starts: `loader_workers`)."""
    if not training:
        return Request(training=False)
    r = params.resources
    return Request(training=True, nproc=r.nproc, nnodes=r.nnodes, threads=r.threads, workers=loader_workers(params),
                   gpu=r.device != "cpu")


def plan(targets: list[str], params: Params, root: Path | None = None) -> list[Cell]:
    """The stages to run, in DVC's order: the stale ones and everything downstream of them within the targets."""
    root = Path(root or ".")
    with contextlib.chdir(root), Repo(_wait_for_lock=True) as repo, lock_repo(repo):  # targets are relative
        stages = collect_stages(repo, targets or ["dvc.yaml"])
        graph = get_active_graph(repo.index.graph)  # edges point from a stage to the stages it depends on
        steps = plan_repro(graph, stages)
        cells: dict[str, Cell] = {}
        for stage in steps:  # dependencies come first
            if stage.always_changed:  # run before planning (`checks`), so what it changes is stale here
                continue
            upstream = [d.addressing for d in graph.successors(stage) if d.addressing in cells]
            stale = bool(stage.status())
            if stale or upstream:
                cells[stage.addressing] = Cell(stage.addressing, upstream, request_for(is_training(stage.desc), params),
                                               stale)
    return list(cells.values())


def checks(targets: list[str], root: Path | None = None) -> list[str]:
    """The `always_changed` stages the targets need (they read state outside the repository), in DVC's order."""
    with contextlib.chdir(Path(root or ".")), Repo(_wait_for_lock=True) as repo, lock_repo(repo):
        stages = collect_stages(repo, targets or ["dvc.yaml"])
        steps = plan_repro(get_active_graph(repo.index.graph), stages)
        return [s.addressing for s in steps if s.always_changed]


def run_checks(names: list[str], echo=print) -> bool:
    """Run the always-changed stages one at a time (DVC decides what their outputs change); False if one failed."""
    for name in names:
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        log = LOG_DIR / f"{name}.log"
        t0 = time.monotonic()
        with log.open("w") as f:
            code = subprocess.run(stage_command(name), stdout=f, stderr=subprocess.STDOUT).returncode
        if code:
            echo(f"FAILED {name}  (exit {code}); log {log}")
            for line in log_tail(log):
                echo(f"       | {line}")
            return False
        echo(f"check  {name}  ({time.monotonic() - t0:.1f} s; runs every time: it reads state outside the repository)")
    return True


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min" if seconds < 5400 else \
        f"{seconds / 3600:.1f} h"


@dataclass
class Progress:
    """k of N stages, the running ones and an overall ETA. The ETA assumes each remaining stage takes the mean
    time of the finished ones of its kind (training or light) that ran, and that `capacity` run at once."""

    total: int
    capacity: int
    done: int = 0
    took: dict = field(default_factory=lambda: {True: [], False: []})  #: training? -> seconds of stages that ran

    def finished(self, cell: Cell, outcome: Outcome) -> None:
        self.done += 1
        if outcome.status == "ran":
            self.took[cell.request.training].append(outcome.seconds)

    def eta(self, pending: list[Cell], running: dict, now: float) -> str:
        mean = {k: sum(v) / len(v) for k, v in self.took.items() if v}
        work = 0.0
        for cell in pending:
            if cell.request.training not in mean:
                return "ETA after the first " + ("training" if cell.request.training else "light") + " stage"
            work += mean[cell.request.training]
        for run in running.values():
            training = run["cell"].request.training
            work += max(0.0, mean.get(training, 0.0) - (now - run["t0"]))
        return f"ETA {_duration(work / max(1, self.capacity))}"

    def line(self, pending: list[Cell], running: dict) -> str:
        now = time.monotonic()
        names = ", ".join(f"{n} ({_duration(now - r['t0'])})" for n, r in running.items()) or "none"
        return f"{self.done}/{self.total} done; running: {names}; {self.eta(pending, running, now)}"


class DevicePool:
    """GPU ids handed to running cells, each id to one cell at a time."""

    def __init__(self, devices: list[str]):
        self.devices, self.free = list(devices), list(devices)

    def take(self, count: int) -> list[str] | None:
        if count > len(self.free):
            return None
        taken, self.free = self.free[:count], self.free[count:]
        return taken

    def give(self, devices: list[str]) -> None:
        self.free += devices


def gpu_devices(params: Params) -> list[str]:
    """GPUs the training cells share out: none when resources.device is cpu."""
    return [] if params.resources.device == "cpu" else launch.visible_devices()


def default_jobs(params: Params, devices: list[str]) -> int:
    """Stages at once on this machine: as many cells as the GPUs hold side by side (GPUs // resources.nproc); on
    CPU, cores // resources.threads (every core busy)."""
    if devices:
        return max(1, len(devices) // params.resources.nproc)
    return max(1, len(os.sched_getaffinity(0)) // params.resources.threads)


def check_fits(cells: list[Cell], executor: str, devices: list[str], params: Params) -> None:
    """Stop before starting anything a cell cannot get here (the GPU check is `launch.require_devices`, which
    `python -m pipeline check` runs too)."""
    if executor != "local" or not any(c.request.training for c in cells):
        return
    for cell in cells:
        if cell.request.nnodes > 1:
            raise PipelineError(f"{cell.name}: resources.nnodes = {cell.request.nnodes} needs several machines; run"
                                " it with --executor slurm (or lower resources.nnodes)")
    launch.require_devices(params.resources.nproc, params.resources.device, devices)


def stage_command(name: str) -> list[str]:
    """One stage through DVC, waiting for DVC's lock rather than failing on it (see the module docstring)."""
    return [sys.executable, "-m", "pipeline.stage", "dvc", "--wait-for-lock", "repro", "--single-item", name]


def what_dvc_did(name: str, log: Path | None) -> str:
    """ran / restored (from the run-cache) / unchanged, from what `dvc repro` printed."""
    text = log.read_text(errors="replace") if log and log.exists() else ""
    quoted = re.escape(f"'{name}'")
    if re.search(rf"Stage {quoted} is cached", text):
        return "restored"
    if re.search(rf"Running stage {quoted}", text):
        return "ran"
    return "unchanged"


def log_tail(log: Path | None, lines: int = 4) -> list[str]:
    """The last lines of a failed stage's log: usually DVC's error, or the command's."""
    text = log.read_text(errors="replace") if log and log.exists() else ""
    return [line for line in text.splitlines() if line.strip()][-lines:]


#: the longest wait between two polls of running SLURM jobs (`Scheduler.max_poll_s`)
SLURM_POLL_S = 10.0


@dataclass
class Scheduler:
    """Starts each cell once its upstream cells succeeded, within each executor's capacity and the free GPUs."""

    executors: dict  #: 'local' (always) and 'slurm' (with --executor slurm) -> executor
    capacity: dict  #: executor name -> cells at once
    pool: DevicePool
    poll_s: float = 0.2  #: the first wait between polls after something changed
    echo: object = field(default=lambda line: print(line, flush=True))
    outcomes: dict = field(default_factory=dict)
    heartbeat_s: float = 120.0  #: a progress line this often while no stage finishes
    #: the longest wait between polls: it doubles from poll_s while nothing changes, so a long wait on SLURM jobs
    #: asks slurmctld (`scontrol`, from the login node) a few times a minute, not five times a second (SLURM_POLL_S);
    #: local processes are polled every poll_s, so a free core is never left idle
    max_poll_s: float = 0.2

    def route(self, cell: Cell) -> str:
        return "slurm" if "slurm" in self.executors and cell.request.training else "local"

    def env_for(self, cell: Cell, gpus: list[str] | None) -> dict:
        """What the runner adds to the environment a cell runs in (this machine's, or its SLURM job's: never
        replaced): unbuffered output and, locally, the GPUs it was given."""
        overrides = {"PYTHONUNBUFFERED": "1"}
        if gpus is not None:
            overrides["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
            if os.environ.get("PIPELINE_DEVICES"):  # a fake or reserved device list: the cell sees only its share
                overrides["PIPELINE_DEVICES"] = overrides["CUDA_VISIBLE_DEVICES"]
        return overrides

    def start(self, cell: Cell, running: dict) -> bool:
        """Start `cell` if its executor has room (and, locally on GPUs, enough free GPUs)."""
        kind = self.route(cell)
        if sum(1 for r in running.values() if r["kind"] == kind) >= self.capacity[kind]:
            return False
        gpus = None
        if kind == "local" and cell.request.training and cell.request.gpu and self.pool.devices:
            gpus = self.pool.take(cell.request.nproc)
            if gpus is None:
                return False
        try:
            job = self.executors[kind].submit(cell.name, stage_command(cell.name), cell.request,
                                              self.env_for(cell, gpus))
        except SubmitError as exc:
            self.pool.give(gpus or [])
            self.outcomes[cell.name] = Outcome(cell.name, "failed", kind, detail=str(exc))
            self.echo(f"FAILED {cell.name}  ({exc})")
            return True
        running[cell.name] = {"cell": cell, "job": job, "kind": kind, "gpus": gpus, "t0": time.monotonic()}
        on = f" on GPU {','.join(gpus)}" if gpus else ""
        self.echo(f"start  {cell.name}  ({job.where}{on}; log {job.log})")
        return True

    def finish(self, name: str, run: dict, code: int) -> None:
        job, seconds = run["job"], time.monotonic() - run["t0"]
        if run["gpus"]:
            self.pool.give(run["gpus"])
        if code == 0:
            status = what_dvc_did(name, job.log)
            self.outcomes[name] = Outcome(name, status, job.where, job.log, seconds)
            self.echo(f"done   {name}  {status} in {seconds:.1f} s")
        else:
            state = getattr(job, "state", f"exit {code}")
            self.outcomes[name] = Outcome(name, "failed", job.where, job.log, seconds, state)
            self.echo(f"FAILED {name}  ({job.where}, {state}) after {seconds:.1f} s; log {job.log}")
            for line in log_tail(job.log):
                self.echo(f"       | {line}")

    def run(self, cells: list[Cell]) -> dict[str, Outcome]:
        pending, running = list(cells), {}
        progress = Progress(len(cells), sum(self.capacity.values()))
        last = time.monotonic()
        wait = self.poll_s
        try:
            while pending or running:
                before = (len(pending), len(running))
                for cell in list(pending):
                    blocked = [u for u in cell.upstream if u in self.outcomes and self.outcomes[u].status in
                               ("failed", "skipped")]
                    if blocked:
                        pending.remove(cell)
                        self.outcomes[cell.name] = Outcome(cell.name, "skipped", detail=f"needs {blocked[0]}")
                        progress.finished(cell, self.outcomes[cell.name])
                        self.echo(f"skip   {cell.name}  (needs {blocked[0]}, which did not succeed)")
                    elif all(u in self.outcomes for u in cell.upstream) and self.start(cell, running):
                        pending.remove(cell)
                for name, run in list(running.items()):
                    code = run["job"].poll()
                    if code is not None:
                        del running[name]
                        self.finish(name, run, code)
                        progress.finished(run["cell"], self.outcomes[name])
                        self.echo(f"       [{progress.line(pending, running)}]")
                        last = time.monotonic()
                if running and time.monotonic() - last > self.heartbeat_s:
                    self.echo(f"...    [{progress.line(pending, running)}]")
                    last = time.monotonic()
                wait = self.poll_s if (len(pending), len(running)) != before else min(2 * wait, self.max_poll_s)
                time.sleep(wait)
        except KeyboardInterrupt:
            self.echo(f"interrupted: cancelling {len(running)} running stage(s)")
            for run in running.values():
                run["job"].cancel()
            for name, run in running.items():
                run["job"].reap()
                self.outcomes[name] = Outcome(name, "cancelled", run["job"].where, run["job"].log)
                self.echo(f"cancelled {name}  ({run['job'].where})")
            raise
        return self.outcomes


def summary_lines(outcomes: dict[str, Outcome], seconds: float) -> list[str]:
    counts = {s: sum(o.status == s for o in outcomes.values()) for s in
              ("ran", "restored", "unchanged", "failed", "skipped")}
    lines = [f"repro: {len(outcomes)} stage(s) in {seconds:.1f} s: {counts['ran']} ran, {counts['restored']} restored"
             f" from the run-cache, {counts['unchanged']} unchanged, {counts['failed']} failed,"
             f" {counts['skipped']} skipped"]
    for o in outcomes.values():
        if o.status == "failed":
            lines.append(f"  failed: {o.name} ({o.where}, {o.detail})" + (f"; log: {o.log}" if o.log else ""))
        elif o.status == "skipped":
            lines.append(f"  skipped: {o.name} ({o.detail})")
    if counts["failed"]:
        lines.append("  the failed stages and those after them re-run next time (DVC recorded nothing for them)")
    return lines


def add_arguments(parser) -> None:
    parser.add_argument("targets", nargs="*", help="stages or groups as `dvc repro` takes them (default: all)")
    parser.add_argument("-j", "--jobs", type=int, default=None,
                        help="stages at once (default: cores // resources.threads on CPU, GPUs // resources.nproc;"
                        " slurm: no cap)")
    parser.add_argument("--executor", choices=("local", "slurm"), default="local",
                        help="local processes (default) or one SLURM job per training cell")
    parser.add_argument("--dry", action="store_true", help="print what would run, and where, then stop")


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def main(params: Params, args) -> int:
    if args.overrides or args.params != "params.yaml":
        raise PipelineError("repro: DVC's stages read params.yaml, so --set/--params would not reach them; edit"
                            " params.yaml (or use `dvc exp run -S key=value`)")
    if args.jobs is not None and args.jobs < 1:
        raise PipelineError(f"repro -j {args.jobs}: give a positive number of stages to run at once")
    devices = gpu_devices(params) if args.executor == "local" else []
    local_jobs = default_jobs(params, devices)
    if not args.dry and not run_checks(checks(args.targets), lambda line: print(line, flush=True)):
        return 1
    cells = plan(args.targets, params)
    if args.dry:
        return dry_run(cells, params, args, devices, local_jobs)
    signal.signal(signal.SIGTERM, _raise_interrupt)  # a killed runner cancels its stages and jobs too
    try:
        return run(cells, params, args, devices, local_jobs)
    except KeyboardInterrupt:
        print("repro: interrupted; cancelled what was running (DVC recorded nothing for it)", file=sys.stderr)
        return 130


def dry_run(cells: list[Cell], params: Params, args, devices: list[str], local_jobs: int) -> int:
    """What would run, and where: the cells the new configurations reach, without writing them."""
    if any(c.name == CONFIGS_STAGE and c.stale for c in cells):
        changed = config_changes(params)
        cells = [dataclasses.replace(c, stale=c.stale or c.name in changed) for c in cells
                 if c.stale or c.name in changed or not (c.request.training and c.upstream == [CONFIGS_STAGE])]
    scheduler = scheduler_for(cells, params, args, devices, local_jobs)
    for cell in cells:
        r = cell.request
        what = (f"{r.nnodes} node(s) x {r.nproc} process(es), {r.threads} thread(s)" if r.training else "light")
        print(f"  {cell.name}: {'stale' if cell.stale else 'downstream'}; {scheduler.route(cell)}; {what};"
              f" after {', '.join(cell.upstream) or 'nothing'}")
    return 0


def scheduler_for(cells: list[Cell], params: Params, args, devices: list[str], local_jobs: int) -> Scheduler:
    check_fits(cells, args.executor, devices, params)
    executors = {"local": LocalExecutor(Path.cwd(), LOG_DIR)}
    capacity = {"local": args.jobs or local_jobs}
    if args.executor == "slurm":
        capacity = {"local": local_jobs, "slurm": args.jobs or len(cells) or 1}
        executors["slurm"] = SlurmExecutor(Path.cwd(), SLURM_DIR.resolve(), params.slurm)
    scheduler = Scheduler(executors, capacity, DevicePool(devices),
                          max_poll_s=SLURM_POLL_S if "slurm" in executors else 0.2)
    stale = sum(c.stale for c in cells)
    print(f"repro: {stale} stale stage(s), {len(cells) - stale} downstream to check; executor {args.executor},"
          f" {' + '.join(f'{k} {v} at once' for k, v in capacity.items())}"
          + (f", GPUs {','.join(devices)}" if devices else ""), flush=True)
    return scheduler


def run(cells: list[Cell], params: Params, args, devices: list[str], local_jobs: int) -> int:
    """Run `configs` first when it is stale (the cells whose configuration it leaves equal are then up to date, never
    started), then the rest."""
    if any(c.name == CONFIGS_STAGE and c.stale for c in cells):
        configs = [c for c in cells if c.name == CONFIGS_STAGE]
        scheduler = Scheduler({"local": LocalExecutor(Path.cwd(), LOG_DIR)}, {"local": 1}, DevicePool([]))
        if scheduler.run(configs)[CONFIGS_STAGE].status == "failed":
            return 1
        cells = plan(args.targets, params)
    scheduler = scheduler_for(cells, params, args, devices, local_jobs)
    t0 = time.monotonic()
    outcomes = scheduler.run(cells)
    for line in summary_lines(outcomes, time.monotonic() - t0):
        print(line, flush=True)
    failed = any(o.status == "failed" for o in outcomes.values())
    if not failed and not args.targets and (dropped := prune_lock()):
        print(f"dvc.lock: dropped {dropped} entr{'y' if dropped == 1 else 'ies'} of stages params.yaml no longer"
              " plans (their outputs stay in DVC's cache and run-cache: a later run that plans them again restores"
              " them without training)", flush=True)
    return 1 if failed else 0


def prune_lock(root: Path | None = None) -> int:
    """Drop dvc.lock's entries of the stages dvc.yaml does not define for params.yaml (a removed arm, variant or
    seed), under DVC's repository lock and with DVC's own YAML writer; how many went."""
    from dvc.utils.serialize import modify_yaml

    with contextlib.chdir(Path(root or ".")), Repo(_wait_for_lock=True) as repo, lock_repo(repo):
        lock = Path(repo.root_dir) / "dvc.lock"
        if not lock.is_file():
            return 0
        planned = {stage.addressing for stage in repo.index.stages}
        with modify_yaml(lock) as data:
            gone = [name for name in data.get("stages", {}) if name not in planned]
            for name in gone:
                del data["stages"][name]
        return len(gone)

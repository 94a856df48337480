"""The parallel runner against a serial `dvc repro`: wall time, ratio, identical metrics, per-stage start-up cost.

Prepares two clean copies of this working tree (tests/workspace.py: tracked + untracked files, a fresh git
repository, no data, no results, no DVC cache), on the same profile and parameters, then, one after the other on
this machine, runs a serial `dvc repro` in one and `python -m pipeline repro` in the other from that same clean
state. Prints both wall times, their ratio (the target for the CPU default profile is <= 0.75), whether every run's
metrics are identical (metrics.json without timings), whether the runner's copy is clean afterwards (`dvc status`,
and a plain `dvc repro` that executes nothing), and what each stage pays to start (Python, torch, timm, params, DVC)
against the mean stage time of the serial run.

    .venv/bin/python bench/bench_repro.py                            # the CPU default (params.yaml as it is)
    .venv/bin/python bench/bench_repro.py --profile smoke            # every stage, seconds each
    .venv/bin/python bench/bench_repro.py --set resources.threads=1  # written into both copies' params.yaml

The serial run goes first unless --runner-first. Wall times on a shared machine are noisy: the load average before
and after is printed beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from workspace import copy_repo, run_metrics, sh  # noqa: E402  (test support: the same copies the tests use)

from pipeline.schema import yaml_load  # noqa: E402

#: what one stage's process imports or does before its own work, each timed in a fresh process
STARTUP = {
    "python": ["python", "-c", "pass"],
    "import torch": ["python", "-c", "import torch"],
    "import torch, timm": ["python", "-c", "import torch, timm"],
    "pipeline CLI + params": ["python", "-c", "from pipeline.params import load_params; load_params()"],
}


def timed(repo: Path, *cmd: str) -> tuple[float, str]:
    start = time.perf_counter()
    out = sh(repo, *cmd)
    return time.perf_counter() - start, out


def median_seconds(repo: Path, cmd: list[str], repeats: int) -> float:
    return statistics.median(timed(repo, *cmd)[0] for _ in range(repeats))


def startup_lines(repo: Path, stage: str, stage_seconds: float, repeats: int) -> list[str]:
    """Start-up costs, each the median of `repeats` fresh processes, and their share of a mean stage."""
    costs = {name: median_seconds(repo, cmd, repeats) for name, cmd in STARTUP.items()}
    costs[f"dvc check of an up-to-date stage ({stage})"] = median_seconds(
        repo, ["dvc", "repro", "--single-item", stage], repeats)
    lines = [f"per-stage start-up (median of {repeats} fresh processes; mean serial stage {stage_seconds:.1f} s):"]
    lines += [f"  {name:<60} {s:6.2f} s  {s / stage_seconds:6.1%}" for name, s in costs.items()]
    dvc = costs[f"dvc check of an up-to-date stage ({stage})"]
    total = dvc + max(costs["import torch, timm"], costs["pipeline CLI + params"])
    lines.append(f"  a training stage pays about {total:.1f} s before it trains (DVC + torch/timm/params):"
                 f" {total / stage_seconds:.0%} of the mean stage")
    return lines


def parse_sets(pairs: list[str]) -> dict:
    values = {}
    for pair in pairs:
        key, _, text = pair.partition("=")
        values[key] = yaml_load(text)
    return values


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--profile", default=None, help="apply profiles/<name>.yaml to both copies (default: none)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="write a parameter into both copies' params.yaml (repeatable)")
    p.add_argument("-j", "--jobs", type=int, default=None, help="passed to the runner (default: its own)")
    p.add_argument("--runner-first", action="store_true", help="run the runner before the serial dvc repro")
    p.add_argument("--repeats", type=int, default=3, help="fresh processes per start-up figure")
    p.add_argument("--workdir", default=None, help="where the copies go (default: a temporary folder, kept)")
    args = p.parse_args()

    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-repro-"))
    params = parse_sets(args.sets)
    serial = copy_repo(work / "serial", args.profile, params)
    runner = copy_repo(work / "runner", args.profile, params)
    threads = yaml_load((serial / "params.yaml").read_text())["resources"]["threads"]
    runner_cmd = [sys.executable, "-m", "pipeline", "repro", *(["-j", str(args.jobs)] if args.jobs else [])]
    print(f"bench_repro: profile {args.profile or '(params.yaml)'}, resources.threads {threads}, params set {params},"
          f" {len(os.sched_getaffinity(0))} cores, load average {os.getloadavg()[0]:.2f}; copies in {work}",
          flush=True)

    runs = {}
    order = ["runner", "serial"] if args.runner_first else ["serial", "runner"]
    commands = {"serial": (serial, ["dvc", "repro"]), "runner": (runner, runner_cmd)}
    for name in order:
        repo, cmd = commands[name]
        runs[name] = timed(repo, *cmd)
        print(f"  {name}: {runs[name][0]:.1f} s (load average {os.getloadavg()[0]:.2f} after)", flush=True)

    serial_s, serial_out = runs["serial"]
    runner_s, runner_out = runs["runner"]
    ran = re.findall(r"Running stage '([^']+)'", serial_out)
    a, b = run_metrics(serial), run_metrics(runner)
    status = json.loads(sh(runner, "dvc", "status", "--json") or "{}")
    always = {name for name, why in status.items() if why == ["always changed"]}  # `sources`: outside state
    clean = set(status) == always
    noop = set(re.findall(r"Running stage '([^']+)'", sh(runner, "dvc", "repro"))) <= always
    summary = re.findall(r"^repro: .*$", runner_out, flags=re.M)
    print(f"serial `dvc repro`:          {serial_s:8.1f} s  ({len(ran)} stages ran)")
    print(f"`python -m pipeline repro`:  {runner_s:8.1f} s  ({summary[-1] if summary else '?'})")
    print(f"ratio runner / serial: {runner_s / serial_s:.3f} (target <= 0.75 on the CPU default)")
    print(f"metrics identical: {'yes' if a == b and a else 'NO'} ({len(a)} runs compared)")
    print(f"runner's copy afterwards: dvc status clean: {'yes' if clean else 'NO'}; plain dvc repro executed nothing:"
          f" {'yes' if noop else 'NO'} (beside the always-changed {', '.join(sorted(always)) or 'none'})")
    training = next((s for s in ran if s.startswith("train@")), ran[0])
    for line in startup_lines(serial, training, serial_s / max(1, len(ran)), args.repeats):
        print(line)
    return 0 if (a == b and a and clean and noop) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Which results are bit-identical across CPUs, and how far apart do they land where they are not?

    .venv/bin/python bench/bench_cross_cpu.py init                       # initial weights, every arm (seconds)
    .venv/bin/python bench/bench_cross_cpu.py train --arms mimetic --seeds 2   # whole CPU-default cells (minutes)
    .venv/bin/python bench/bench_cross_cpu.py steps                      # one identical init, 2 epochs per path
    .venv/bin/python bench/bench_cross_cpu.py speed --remedies pinned-avx2 pinned   # what a remedy costs

One machine stands in for several CPU kinds: MKL, oneDNN, ATen and OpenBLAS each pick their kernels by the CPU's
instruction set at run time, and each can be made to take a lower one (`MKL_ENABLE_INSTRUCTIONS`,
`ONEDNN_MAX_CPU_ISA`, `ATEN_CPU_CAPABILITY`, `OPENBLAS_CORETYPE`): the code paths an AVX2-only or an SSE4.2-only
x86 CPU runs (`PATHS`). The candidate remedies (`REMEDIES`) are MKL's reproducible mode alone (`MKL_CBWR`, "the
same results on every x86 CPU" for MKL's routines) and every library held on one path (the AVX2 one, or the
lowest). Each child process runs the CPU default's model (params.yaml) on `--threads` threads, so the thread count
(which also changes the last bits) is not what differs.

- `init`: every arm's (params `init`, `baselines`) initial weights, seeds 0-2, in a child process per path and per
  path with each remedy; per arm, bit-identical to this CPU's own path or how many float32 entries differ and by
  how much.
- `steps`: one initial model (this CPU's), trained 2 epochs on each path: does training itself differ by path?
- `train`: whole CPU-default cells on each of `--paths`, and with each of `--remedies` on each path: final top-1,
  its spread over the paths, whether the final weights are identical. Needs a fetched fashion_mnist (`--data`);
  each run has its own folder under `--work`, left behind (`--reuse` reads finished ones instead of re-running).
- `speed`: what a remedy costs: a training step of the CPU default's model on random data, with and without it,
  alternating, best of `--repeat` (whole runs' wall times on a shared machine are too noisy for this).

Prints a Markdown table per part; `--yaml bench/cross_cpu.yaml` also records it there, for the report.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: the code paths of this CPU stood in for other x86 CPUs: name -> environment
PATHS = {
    "native": {},
    "avx2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
             "OPENBLAS_CORETYPE": "Haswell"},
    "sse4.2": {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41", "ATEN_CPU_CAPABILITY": "default",
               "OPENBLAS_CORETYPE": "Nehalem"},
}
#: the remedies: MKL's reproducible mode alone; every library on the AVX2 path (any x86 CPU since about 2015);
#: every library on its lowest path (any x86-64 CPU)
REMEDIES = {
    "MKL_CBWR": {"MKL_CBWR": "COMPATIBLE"},
    "pinned-avx2": {"MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
                    "OPENBLAS_CORETYPE": "Haswell"},
    "pinned": {"MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "SSE41", "ATEN_CPU_CAPABILITY": "default",
               "OPENBLAS_CORETYPE": "Nehalem"},
}


def child(args: list[str], env: dict, threads: int, cwd: Path = ROOT) -> None:
    """Run this script's child mode `args` under `env` (added to this environment), with ROOT importable."""
    full = {**os.environ, **env, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads),
            "MKL_NUM_THREADS": str(threads)}
    subprocess.run([sys.executable, str(Path(__file__).resolve()), *args], env=full, cwd=cwd, check=True)


# ------------------------------------------------------------------------------------------------------ children

def _params(params_file: str, overrides: list[str]):
    from pipeline.params import load_params
    return load_params(params_file, overrides)


def child_init(out: str, params_file: str, seeds: list[int], threads: int) -> None:
    """Every arm's and seed's initial float32 state dict of the first variant, saved to `out`."""
    import torch

    from pipeline.data.meta import DatasetMeta
    from pipeline.datasets import DATASETS
    from pipeline.training import builders

    torch.set_num_threads(threads)
    params = _params(params_file, [])
    dataset, variant = params.datasets[0], next(iter(params.models))
    info = DATASETS[dataset]
    meta = DatasetMeta(dataset, info.num_classes, info.channels, info.native_size)
    states, seconds = {}, {}
    for arm in params.arms:
        for seed in seeds:
            t0 = time.perf_counter()
            model = builders.vit(params, variant, arm, meta, seed)
            seconds[f"{arm}/{seed}"] = time.perf_counter() - t0
            states[f"{arm}/{seed}"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
    torch.save({"states": states, "seconds": seconds, "config": torch.__config__.parallel_info()}, out)


def child_train(work: str, params_file: str, arm: str, seed: int, threads: int, epochs: int | None,
                init_from: str | None) -> None:
    """One CPU-default cell trained in `work` (its own results/ and scratch/); `init_from`: start from these
    weights instead of the arm's own init (the same initial model on every path)."""
    import torch

    from pipeline.config import Resources
    from pipeline.training import run as run_module
    from pipeline.training.train import train_run

    os.chdir(work)
    overrides = [f"train.epochs={epochs}"] if epochs else []
    params = _params(params_file, overrides)
    variant = next(iter(params.models))
    cell = train_run(params, params.datasets[0], variant, arm, seed)
    if init_from:
        build = cell.build

        def from_file(meta):
            model = build(meta)
            model.load_state_dict(torch.load(init_from, weights_only=True))
            return model
        cell.build = from_file
    resources = Resources(**{**params.resources.__dict__, "threads": threads})
    t0 = time.perf_counter()
    run_module.execute(cell, params.data, resources)
    metrics = json.loads((cell.out / "metrics.json").read_text())
    state = torch.load(cell.out / "model.pt", weights_only=True)
    torch.save({"top1": metrics["top1"], "seconds": time.perf_counter() - t0, "state": state}, Path(work) / "out.pt")


def child_speed(out: str, params_file: str, threads: int, steps: int) -> None:
    """Seconds per training step of the CPU default's model and batch on random data (after 3 warm-up steps)."""
    import torch

    from pipeline.data.meta import DatasetMeta
    from pipeline.datasets import DATASETS
    from pipeline.training import builders

    torch.set_num_threads(threads)
    params = _params(params_file, [])
    dataset = params.datasets[0]
    info = DATASETS[dataset]
    model = builders.vit(params, next(iter(params.models)), params.init,
                         DatasetMeta(dataset, info.num_classes, info.channels, info.native_size), 0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    size = params.models[next(iter(params.models))].img_size or info.native_size
    x = torch.randn(params.train.batch_size, info.channels, size, size, generator=torch.Generator().manual_seed(0))
    y = torch.randint(0, info.num_classes, (params.train.batch_size,), generator=torch.Generator().manual_seed(1))
    times = []
    for i in range(steps + 3):
        t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i >= 3:
            times.append(time.perf_counter() - t0)
    Path(out).write_text(json.dumps({"median_s": sorted(times)[len(times) // 2], "min_s": min(times)}))


def part_speed(args) -> dict:
    """The cost of each remedy: training-step time with it against without, alternating, `--repeat` rounds."""
    out = Path(args.work) / "speed"
    out.mkdir(parents=True, exist_ok=True)
    envs = {"native": {}} | {r: REMEDIES[r] for r in args.remedies}
    found: dict = {name: [] for name in envs}
    for k in range(args.repeat):
        for name, env in envs.items():
            path = out / f"{name}-{k}.json"
            child(["_speed", str(path), args.params, "--threads", str(args.threads), "--steps", str(args.steps)], env,
                  args.threads)
            found[name].append(json.loads(path.read_text())["min_s"])
    best = {name: min(v) for name, v in found.items()}
    raw = {name: {"best_step_s": best[name], "ratio_to_native": best[name] / best["native"], "rounds": found[name]}
           for name in envs}
    print(f"\nTraining step of the CPU default's model, batch from params (best of {args.repeat} rounds of"
          f" {args.steps} steps, {args.threads} thread(s)):\n")
    print("| remedy | seconds per step | / native |\n|---|---|---|")
    for name, r in raw.items():
        print(f"| {name} | {r['best_step_s']:.3f} | {r['ratio_to_native']:.2f} |")
    return raw


# -------------------------------------------------------------------------------------------------- comparisons

def compare(a: dict, b: dict) -> dict:
    """Entries that differ between two float state dicts, the largest difference and the largest relative one."""
    import torch

    differ = total = 0
    biggest = relative = 0.0
    for key, x in a.items():
        y = b[key]
        if not torch.is_floating_point(x):
            continue
        total += x.numel()
        d = (x.double() - y.double()).abs()
        differ += int((d > 0).sum())
        if differ:
            biggest = max(biggest, float(d.max()))
            relative = max(relative, float(d.max() / x.double().abs().max().clamp_min(1e-30)))
    return {"differ": differ, "total": total, "max_abs": biggest, "max_rel": relative}


def describe(c: dict) -> str:
    if not c["differ"]:
        return "identical"
    return f"{c['differ']} of {c['total']:,} differ (max {c['max_abs']:.1e}, rel. {c['max_rel']:.1e})"


def part_init(args) -> dict:
    import torch

    seeds = args.seeds
    variants = {f"{p}": PATHS[p] for p in PATHS} | {f"{p}+{r}": PATHS[p] | env for r, env in REMEDIES.items()
                                                    for p in PATHS}
    out = Path(args.work) / "init"
    out.mkdir(parents=True, exist_ok=True)
    found = {}
    for name, env in variants.items():
        path = out / f"{name}.pt"
        if not (args.reuse and path.is_file()):
            child(["_init", str(path), args.params, *map(str, seeds), "--threads", str(args.threads)], env,
                  args.threads)
        found[name] = torch.load(path, weights_only=False)
    rows, raw = [], {}
    arms = list(dict.fromkeys(k.split("/")[0] for k in found["native"]["states"]))
    for arm in arms:
        keys = [f"{arm}/{s}" for s in seeds]
        for group, ref in [("", "native")] + [(f"+{r}", f"native+{r}") for r in REMEDIES]:
            cells = []
            for p in PATHS:
                if p == "native":
                    continue
                c = [compare(found[ref]["states"][k], found[f"{p}{group}"]["states"][k]) for k in keys]
                merged = {"differ": sum(x["differ"] for x in c), "total": sum(x["total"] for x in c),
                          "max_abs": max(x["max_abs"] for x in c), "max_rel": max(x["max_rel"] for x in c)}
                raw[f"{arm} {p}{group}"] = merged
                cells.append(describe(merged))
            secs = sum(found[f"native{group}"]["seconds"][k] for k in keys) / len(keys)
            rows.append([arm, group.lstrip("+") or "none", *cells, f"{secs:.2f} s"])
    others = [p for p in PATHS if p != "native"]
    print(f"\nInitial weights of {', '.join(arms)} (seeds {seeds}), each path against this CPU's own ({args.threads}"
          " thread(s)); entries over all seeds:\n")
    print("| arm | remedy | " + " | ".join(f"{p} vs native" for p in others) + " | init time (native) |")
    print("|---|---|" + "---|" * len(others) + "---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    return raw


def part_train(args, init_from: str | None = None, epochs: int | None = None, name: str = "train") -> dict:
    """Each cell on each of `--paths`, and with each of `--remedies` on each path (`<path>+<remedy>`)."""
    import torch

    paths = {p: PATHS[p] for p in args.paths}
    envs = paths | ({} if init_from else {f"{p}+{r}": PATHS[p] | REMEDIES[r] for r in args.remedies for p in paths})
    runs = {}
    for arm in args.arms:
        for seed in args.seeds:
            for path, env in envs.items():
                work = Path(args.work) / name / f"{arm}-{seed}-{path}"
                if not (args.reuse and (work / "out.pt").is_file()):
                    shutil.rmtree(work, ignore_errors=True)
                    work.mkdir(parents=True)
                    (work / "data").symlink_to(Path(args.data).resolve())
                    shutil.copy(args.params, work / "params.yaml")
                    child(["_train", str(work), "params.yaml", arm, str(seed), "--threads", str(args.threads),
                           *(["--epochs", str(epochs)] if epochs else []),
                           *(["--init-from", init_from] if init_from else [])], env, args.threads, cwd=work)
                runs[(arm, seed, path)] = torch.load(work / "out.pt", weights_only=True)
                print(f"  {arm} seed {seed} on {path}: top-1 {runs[(arm, seed, path)]['top1']:.4f},"
                      f" {runs[(arm, seed, path)]['seconds']:.0f} s", flush=True)
    raw = {}
    first = next(iter(paths))
    print(f"\nFinal top-1 on the whole test split; weights against {first}'s (the remedies' against the remedy on"
          f" {first}):\n")
    print(f"| arm | seed | {' | '.join(envs)} | spread over {', '.join(paths)} (pts) | final weights |")
    print("|---|---|" + "---|" * len(envs) + "---|---|")
    for arm in args.arms:
        for seed in args.seeds:
            top = {p: runs[(arm, seed, p)]["top1"] for p in envs}
            spread = 100 * (max(top[p] for p in paths) - min(top[p] for p in paths))
            weights = {}
            for p in envs:
                ref = p.replace(p.split("+")[0], first, 1)
                if p != ref:
                    weights[f"{p} vs {ref}"] = compare(runs[(arm, seed, ref)]["state"], runs[(arm, seed, p)]["state"])
            notes = [f"{k.split(' vs ')[0]}: {describe(c)}" for k, c in weights.items()]
            raw[f"{arm}/{seed}"] = {"top1": top, "seconds": {p: runs[(arm, seed, p)]["seconds"] for p in envs},
                                    "spread_pts": spread, "final_weights": weights}
            print(f"| {arm} | {seed} | " + " | ".join(f"{100 * top[p]:.2f} %" for p in envs)
                  + f" | {spread:.2f} | {'; '.join(notes)} |")
    for r in [] if init_from else args.remedies:
        ratio = [raw[k]["seconds"][f"{p}+{r}"] / raw[k]["seconds"][p] for k in raw for p in paths]
        print(f"\nwall time with {r} / without, per cell and path: {', '.join(f'{x:.2f}' for x in ratio)}"
              " (one busy machine: noisy)")
    return raw


def part_steps(args) -> dict:
    """One init (this CPU's path), trained `--epochs` on every path."""
    import torch

    out = Path(args.work) / "steps"
    out.mkdir(parents=True, exist_ok=True)
    inits = out / "init.pt"
    child(["_init", str(inits), args.params, *map(str, args.seeds), "--threads", str(args.threads)], {}, args.threads)
    states = torch.load(inits, weights_only=False)["states"]
    raw = {}
    for arm in args.arms:
        for seed in args.seeds:
            one = out / f"{arm}-{seed}.pt"
            torch.save(states[f"{arm}/{seed}"], one)
            sub = argparse.Namespace(**{**vars(args), "arms": [arm], "seeds": [seed]})
            raw |= part_train(sub, init_from=str(one), epochs=args.epochs, name=f"steps-{arm}-{seed}")
    return raw


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=("init", "steps", "train", "speed", "_init", "_train", "_speed"))
    parser.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--params", default=str(ROOT / "params.yaml"))
    parser.add_argument("--arms", nargs="+", default=["impulse", "default", "mimetic"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=None, help="train/steps: epochs (default: the recipe's; steps 1)")
    parser.add_argument("--init-from", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=20, help="speed: timed training steps per round")
    parser.add_argument("--repeat", type=int, default=3, help="speed: rounds, alternating the environments")
    parser.add_argument("--data", default=str(ROOT / "data"), help="a folder holding fashion_mnist/ (fetched)")
    parser.add_argument("--work", default=str(ROOT / "scratch" / "bench_cross_cpu"))
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=list(PATHS),
                        help="train/steps: the code paths to run each cell on (default: all)")
    parser.add_argument("--remedies", nargs="*", default=["pinned-avx2"], choices=list(REMEDIES),
                        help="train: also run each cell with these remedies, on each path (default: pinned-avx2)")
    parser.add_argument("--reuse", action="store_true", help="reuse the children's finished outputs in --work")
    parser.add_argument("--yaml", default=None,
                        help="also record the part's numbers in this file (bench/cross_cpu.yaml, which the report"
                        " reads), beside the other parts'")
    args = parser.parse_args()
    if args.part == "_init":
        out, params_file, *seeds = args.rest
        child_init(out, params_file, [int(s) for s in seeds], args.threads)
        return 0
    if args.part == "_train":
        work, params_file, arm, seed = args.rest
        child_train(work, params_file, arm, int(seed), args.threads, args.epochs, args.init_from)
        return 0
    if args.part == "_speed":
        out, params_file = args.rest
        child_speed(out, params_file, args.threads, args.steps)
        return 0
    print(f"bench_cross_cpu {args.part}: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs,"
          f" {args.threads} thread(s) per child; paths {PATHS}")
    if args.part == "steps":
        args.epochs = args.epochs or 2  # the recipe warms up for 1
    raw = {"init": part_init, "steps": part_steps, "train": part_train, "speed": part_speed}[args.part](args)
    if args.yaml:
        record(Path(args.yaml), args, raw)
    return 0


def record(path: Path, args, raw: dict) -> None:
    """Merge this part's numbers into `path`, with what they were measured on and the command that measured them."""
    import torch
    import yaml

    old = yaml.safe_load(path.read_text()) if path.is_file() else {}
    words, kept = sys.argv[1:], []
    while words:  # where files go does not change what is measured
        word = words.pop(0)
        if word in ("--work", "--data", "--yaml"):
            words.pop(0)
        elif word != "--reuse":
            kept.append(word)
    command = "python bench/bench_cross_cpu.py " + " ".join(kept)
    part = {"command": command, "date": time.strftime("%Y-%m-%d"), "threads": args.threads,
            "cpu": _cpu_name(), "torch": torch.__version__, "results": raw}
    old = (old or {}) | {"paths": PATHS, "remedies": REMEDIES, args.part: part}
    header = ("# Written by bench/bench_cross_cpu.py --yaml (do not edit): what is bit-identical across CPU code paths"
              "\n# and how far apart results land; the report's 'What was run in full' reads it.\n")
    path.write_text(header + yaml.safe_dump(json.loads(json.dumps(old)), sort_keys=False, width=118))


def _cpu_name() -> str:
    try:
        line = next(x for x in Path("/proc/cpuinfo").read_text().splitlines() if x.startswith("model name"))
        return line.split(":", 1)[1].strip()
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


if __name__ == "__main__":
    sys.exit(main())

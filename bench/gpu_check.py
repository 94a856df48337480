"""The GPU check: the GPU path of the pipeline measured on one GPU, in one command from the repository root, with no
network, in at most 8 minutes on one H100 (issue 29):

    python bench/gpu_check.py                                  # results in $OUT, else ./gpu_check_out
    python bench/gpu_check.py --yaml bench/throughput.yaml     # and its rows into the table `check` reads
    python bench/gpu_check.py --cpu --budget 300               # the rehearsal on a CPU: the flow at a tiny size

It needs what a stock PyTorch image holds (torch, torchvision, timm, numpy, pyyaml, pillow, pytest) and the checkout.
Each part runs in its own process under a deadline, so a slow or crashing part (a compiler, a CUDA error) cannot eat
the rest; a failure is a finding, recorded with its message. In order:

  facts      GPU, driver, C compiler (Triton's), versions; the CUDA preflight and torch.compile's probe; where
             `resources.data_on_device: auto` puts each Table 1 dataset on this GPU
  cell       a real paper-small cell, `python -m pipeline train cifar10 vit impulse 0` under the profile
             (ViT-Ti/16 at 224, bf16, sampler_ranks 8, the device path), eager, one epoch of a synthetic CIFAR-shaped
             set: fit, evaluation, per-image scores, outputs
  matrix     images/s, MFU, GPU-idle share, host share getting batches and peak memory of ViT-Ti/16 for
             {eager, compiled} x {device, loader} x {512, 64} (bench/bench_gpu.py's `measure`)
  syncs      host syncs per training step under CUDA's sync debug mode: (a 6-step epoch's - a 2-step epoch's) / 4,
             eager and compiled on the device path, eager on the DataLoader path; and per evaluation batch
  compiled   the cell, compiled (inductor's caches are warm from the matrix)
  pytest     the project's GPU tests (`pytest -m gpu`), with the time left

In OUT, eight files: summary.txt (read it first: the tables and the issue's targets), rows.jsonl (every measurement),
throughput_rows.yaml (the row for bench/throughput.yaml: the device's name, torch's version, the date), the cells'
logs and metrics.json, pytest.log. `--cpu` runs a 2-block ViT at 32 px on the CPU (no MFU, no sync debug mode, no
placement) so that the flow is tested without a GPU (tests/test_gpu_check.py).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import torch  # noqa: E402
from bench_gpu import append_rows, make_model, measure, synthetic_cifar  # noqa: E402
from bench_gpu import throughput_row as bench_row  # noqa: E402

PARTS = ("facts", "cell", "matrix", "syncs", "compiled", "pytest")
#: The matrix, most telling first: paper-small's configuration (compiled, device data, 512) and its eager baseline.
MATRIX = [("eager", "device", 512), ("compiled", "device", 512), ("eager", "device", 64), ("compiled", "device", 64),
          ("eager", "loader", 512), ("compiled", "loader", 512), ("eager", "loader", 64), ("compiled", "loader", 64)]
#: Seconds each part may take at most (the whole is bounded by --budget too).
CAPS = {"facts": 60, "cell": 120, "matrix": 240, "syncs": 110, "compiled": 150, "pytest": 120}
MODEL = "vit_tiny_patch16_224"
#: CIFAR-10's normalisation (mean, std): the synthetic set stands in for it
STATS = ((0.4914, 0.4822, 0.4465), (0.2471, 0.2435, 0.2616))
#: The issue's throughput targets for ViT-Ti/16 at 224, paper-small recipe, bf16, one H100 (images/s).
TARGETS = {"compiled": 20000, "eager": 10000, "ratio": 1.3}


class Check:
    """Where the check writes, its size (GPU or the CPU rehearsal) and its deadline."""

    def __init__(self, out: Path, cpu: bool, deadline: float):
        self.out, self.cpu, self.deadline = out, cpu, deadline
        self.img = 32 if cpu else 224
        self.batches = (128, 16) if cpu else (512, 64)  # the CPU's 128 emulates 2 ranks of 64, as 512 does 8
        self.steps = {128: 2, 16: 3} if cpu else {512: 10, 64: 40}  # timed steps per epoch (5,120 / 2,560 images)

    def left(self) -> float:
        return self.deadline - time.time()

    def emit(self, row: dict) -> None:
        """One measurement into rows.jsonl (at once: a part killed later keeps it) and onto stdout."""
        row = {k: (round(v, 5) if isinstance(v, float) else v) for k, v in row.items()}
        with (self.out / "rows.jsonl").open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)

    def bench_args(self) -> argparse.Namespace:
        """What bench_gpu's `measure` and `make_model` read; DataLoader workers: the cores but two, at most 8 (as
        paper-small's resources.workers)."""
        return argparse.Namespace(tiny=self.cpu, img=self.img, amp="auto" if self.cpu else "bf16",
                                  workers=min(8, max(1, (os.cpu_count() or 2) - 2)), sync_every=32, peak_tflops=None)


def device_name() -> str:
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def facts(check: Check) -> None:
    """The machine, the preflight, the compile probe, and where `data_on_device: auto` puts Table 1's datasets."""
    import timm

    from pipeline.data.load.device import MEMORY_SHARE, fits
    from pipeline.datasets import DATASETS
    from pipeline.training.engine import COMPILERS, compile_probe
    from pipeline.training.launch import cuda_unusable, driver_version

    device = torch.device("cpu" if check.cpu else "cuda")
    variable, names, _, _ = COMPILERS[device.type]
    compilers = {c: shutil.which(c) for c in (os.environ.get(variable, ""), *names) if c}
    row = {"part": "facts", "device": device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "timm": timm.__version__, "python": sys.version.split()[0], "driver": driver_version(),
           "compilers": compilers, "cpus": os.cpu_count()}
    if not check.cpu:
        row |= {"cuda_unusable": cuda_unusable(), "capability": torch.cuda.get_device_capability(0),
                "memory_gib": torch.cuda.get_device_properties(0).total_memory / 2**30}
    row["compile_probe"] = compile_probe(str(device)) or "ok"
    check.emit(row)
    if check.cpu:
        check.emit({"part": "placement", "skipped": "CUDA only"})
        return
    free = torch.cuda.mem_get_info(device)[0]
    placement = {"part": "placement", "free_gib": free / 2**30, "limit_gib": MEMORY_SHARE * free / 2**30}
    for name in ("food101", "cifar10", "cifar100", "stl10", "flowers102", "pets"):
        info = DATASETS[name]
        size = (info.train_size + info.eval_size) * info.channels * info.native_size**2
        placement[name] = f"{size / 2**30:.2f} GiB -> {'device' if fits(size, device) else 'DataLoader'}"
    check.emit(placement)


def cell(check: Check, compiled: bool) -> None:
    """A real paper-small training cell from its stage command, in a working folder of its own."""
    from pipeline.profiles import merged_text
    from pipeline.schema import yaml_load

    label = "compiled" if compiled else "eager"
    work = check.out / f"cell-{label}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    synthetic_cifar(work / "data", 640 if check.cpu else 5120)
    text = merged_text("paper-small", (ROOT / "params.yaml").read_text())[0]
    (work / "params.yaml").write_text(text)
    sets = ["datasets=[cifar10]", "train.epochs=1", "train.warmup_epochs=0",
            f"resources.compile={str(compiled).lower()}"]
    if check.cpu:  # a 2-block ViT at 32 px, batch 128 (2 emulated ranks of 64) on the CPU
        sets += ["resources.device=cpu", "resources.workers=0", "models.vit.img_size=32", "models.vit.patch_size=8",
                 "models.vit.embed_dim=48", "models.vit.depth=2", "train.batch_size=128", "train.sampler_ranks=2",
                 "resources.data_on_device=auto", "train.amp=auto"]  # the profile pins the GPU's: float32, PIL here
    command = [sys.executable, "-m", "pipeline", "--params", "params.yaml",
               *[a for s in sets for a in ("--set", s)], "train", "cifar10", "vit", "impulse", "0"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(":")}
    start = time.time()
    with (check.out / f"cell-{label}.log").open("w") as log:
        try:
            rc = subprocess.run(command, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                                timeout=max(10, check.left() - 5)).returncode
        except subprocess.TimeoutExpired:
            rc = "killed at the deadline"
    row = {"part": "cell", "mode": label, "rc": rc, "wall_s": time.time() - start,
           "params": yaml_load(text)["profile"]}
    metrics = work / "results" / "train" / "cifar10" / "vit" / "impulse" / "seed0" / "metrics.json"
    if metrics.exists():
        m = json.loads(metrics.read_text())
        shutil.copy(metrics, check.out / f"cell-{label}-metrics.json")
        row |= {k: m.get(k) for k in ("images_per_s", "top1", "test_size", "data_path", "amp_dtype", "device",
                                      "hardware", "wall_time_s", "epochs")}
    else:
        row["tail"] = (check.out / f"cell-{label}.log").read_text()[-1500:]
    shutil.rmtree(work, ignore_errors=True)  # its outs are the cell's (model.pt and all); OUT keeps the metrics
    check.emit(row)


def matrix(check: Check, modes: list[str]) -> None:
    """bench_gpu's measurement for each (mode, path, batch) of MATRIX that `modes` holds, while time is left."""
    from pipeline.training.engine import setup_distributed

    d = setup_distributed("cpu" if check.cpu else "cuda", threads=max(1, (os.cpu_count() or 2) // 2))
    args = check.bench_args()
    big, small = check.batches
    plan = [(m, p, big if b == 512 else small) for m, p, b in MATRIX if m in modes]
    compiled_once = set()
    with tempfile.TemporaryDirectory() as tmp:
        for mode, path, batch in plan:
            need = 30 if mode == "eager" or batch in compiled_once else 120 if not check.cpu else 60
            if check.left() < need:
                check.emit({"part": "matrix", "mode": mode, "path": path, "batch": batch, "skipped": "time"})
                continue
            root = Path(tmp) / f"b{batch}"
            if not root.exists():
                synthetic_cifar(root, batch * check.steps[batch])
            if mode == "compiled":
                torch._dynamo.reset()  # each batch size its own static graph, as a cell compiles it
                compiled_once.add(batch)
            try:
                result = measure(MODEL, mode, path, batch, args, root, d)
                check.emit({"part": "matrix", **result, "row": bench_row(result, check.img, "bench/gpu_check.py")})
            except Exception as exc:  # a finding: record it, go on
                check.emit({"part": "matrix", "mode": mode, "path": path, "batch": batch,
                            "error": f"{type(exc).__name__}: {exc}"[:600], "trace": traceback.format_exc()[-1500:]})


def sync_sites(run) -> dict[str, int]:
    """The source lines that synchronised the host with the GPU while `run()` ran (CUDA's sync debug mode, 'warn');
    without CUDA, `run()` runs and none are counted (the CPU rehearsal's flow)."""
    if not torch.cuda.is_available():
        run()
        return {}
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            run()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    sites: dict[str, int] = {}
    for w in caught:
        if "synchroniz" in str(w.message).lower():
            site = f"{Path(w.filename).name}:{w.lineno}"
            sites[site] = sites.get(site, 0) + 1
    return sites


def epoch_syncs(parts, train, val, recipe, d, resources) -> tuple[dict, dict]:
    """The sync sites of a training epoch (after a warm-up epoch: compilation, pinned pools, workers) and of an
    evaluation."""
    from pipeline.training.engine import evaluate, train_one_epoch

    train.sampler.set_epoch(0)
    train_one_epoch(parts, train, recipe, 0, d, lambda n: None, resources)
    train.sampler.set_epoch(1)
    return (sync_sites(lambda: train_one_epoch(parts, train, recipe, 1, d, lambda n: None, resources)),
            sync_sites(lambda: evaluate(parts.model, val, d, parts.autocast)))


def syncs(check: Check, modes: list[str]) -> None:
    """Host syncs per training step and per evaluation batch, at paper-small's batch 512 (8 emulated ranks); on the
    CPU rehearsal the same flow at its size, counting nothing."""
    from bench_gpu import OFFICIAL_RANK_BATCH, PAPER_RECIPE

    from pipeline.config import Resources, TrainConfig
    from pipeline.data.load.device import device_loaders
    from pipeline.data.load.loaders import build_loaders
    from pipeline.data.load.transforms import Augment
    from pipeline.training.engine import build_parts, setup_distributed

    device = "cpu" if check.cpu else "cuda"
    d = setup_distributed(device, threads=max(1, (os.cpu_count() or 2) // 2))
    args, batch, img = check.bench_args(), check.batches[0], check.img
    recipe = TrainConfig(**PAPER_RECIPE, epochs=3, batch_size=batch, amp=args.amp,
                         sampler_ranks=batch // OFFICIAL_RANK_BATCH)
    augment = Augment.from_train(recipe)
    with tempfile.TemporaryDirectory() as tmp:
        for mode, path in (("eager", "device"), ("compiled", "device"), ("eager", "loader")):
            if mode not in modes:
                continue
            if check.left() < (60 if mode == "compiled" else 25):
                check.emit({"part": "syncs", "mode": mode, "path": path, "skipped": "time"})
                continue
            try:
                torch._dynamo.reset()
                resources = Resources(device=device, compile=mode == "compiled", workers=args.workers,
                                      sync_every=1000)
                parts, counts, evals = None, {}, {}
                for steps in (2, 6):
                    root = Path(tmp) / f"s{steps}"
                    if not root.exists():
                        synthetic_cifar(root, batch * steps)
                    loaders = build_loaders("cifar10", root, stats=STATS, img_size=img, in_chans=3, batch_size=batch,
                                            seed=0,
                                            augment=augment, workers=0 if path == "device" else args.workers,
                                            pin_memory=not check.cpu, sampler_ranks=recipe.sampler_ranks)
                    evaluation = build_loaders("cifar10", root, stats=STATS, img_size=img, in_chans=3, batch_size=64,
                                               seed=0,
                                               augment=augment, pin_memory=not check.cpu)  # 256 test images: 4
                    if path == "device":
                        loaders = device_loaders(loaders, img_size=img, augment=augment, device=d.device)
                        evaluation = device_loaders(evaluation, img_size=img, augment=augment, device=d.device)
                    parts = parts or build_parts(make_model(MODEL, args), recipe, 10, 6, d, resources)
                    counts[steps], evals[steps] = epoch_syncs(parts, loaders.train, evaluation.val, recipe, d,
                                                              resources)
                    evals[f"batches{steps}"] = len(evaluation.val)
                total = {k: sum(v.values()) for k, v in counts.items()}
                check.emit({"part": "syncs", "mode": mode, "path": path, "counted": not check.cpu,
                            "syncs_2_steps": total[2], "syncs_6_steps": total[6], "per_step": (total[6] - total[2]) / 4,
                            "sites_6_steps": counts[6], "eval_batches": evals["batches6"],
                            "eval_syncs": sum(evals[6].values()), "eval_sites": evals[6]})
            except Exception as exc:
                check.emit({"part": "syncs", "mode": mode, "path": path, "error": f"{type(exc).__name__}: {exc}"[:600],
                            "trace": traceback.format_exc()[-1500:]})


def run_pytest(check: Check) -> None:
    """The project's GPU tests (on a CPU they are collected and skipped: the stock image's collection is tested)."""
    command = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "tests"]
    with (check.out / "pytest.log").open("w") as log:
        try:
            rc = subprocess.run(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                timeout=max(10, check.left() - 5)).returncode
        except subprocess.TimeoutExpired:
            rc = "killed at the deadline"
    lines = [x for x in (check.out / "pytest.log").read_text().splitlines() if x.strip()]
    check.emit({"part": "pytest", "rc": rc, "result": lines[-1] if lines else ""})


def run_part(name: str, check: Check, modes: list[str]) -> None:
    if name == "facts":
        facts(check)
    elif name in ("cell", "compiled"):
        cell(check, compiled=name == "compiled")
    elif name == "matrix":
        matrix(check, modes)
    elif name == "syncs":
        syncs(check, modes)
    elif name == "pytest":
        run_pytest(check)


def rows(out: Path) -> list[dict]:
    path = out / "rows.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def throughput_rows(found: list[dict]) -> list[dict]:
    """The bench/throughput.yaml row of this device: paper-small's configuration (device data, batch 512, compiled
    where it ran, else eager)."""
    measured = {(r["mode"], r["path"], r["batch_per_device"]): r for r in found
                if r.get("part") == "matrix" and "images_per_s" in r}
    big = max((b for _, _, b in measured), default=None)
    best = measured.get(("compiled", "device", big)) or measured.get(("eager", "device", big))
    return [best["row"]] if best else []


def summary(out: Path, found: list[dict], wall: float) -> str:
    """The short report: what ran, the matrix, the syncs, the placement, the tests, the issue's targets."""
    f = next((r for r in found if r.get("part") == "facts"), {})
    lines = [f"GPU check on {f.get('device', '?')} (torch {f.get('torch')}, CUDA {f.get('cuda')}, driver"
             f" {f.get('driver')}, compilers {f.get('compilers')}), {datetime.date.today()}, {wall:.0f} s; compile"
             f" probe: {f.get('compile_probe')}; preflight: {f.get('cuda_unusable') or 'ok'}"]
    for r in found:
        if r.get("part") == "cell":
            lines.append(f"cell {r['mode']}: rc {r['rc']} in {r['wall_s']:.0f} s; "
                         + (f"{r.get('images_per_s') or 0:.0f} img/s over the epoch, {r.get('amp_dtype')},"
                            f" data path {r.get('data_path')}, top-1 {r.get('top1')} on {r.get('test_size')} test"
                            " images" if "images_per_s" in r else r.get("tail", "")[-300:].replace("\n", " | ")))
    lines.append("matrix (ViT-Ti/16, paper-small recipe):  mode     path    batch     img/s  MFU    GPU idle"
                 "  host getting batches  peak GiB")
    for r in found:
        if r.get("part") != "matrix":
            continue
        if "images_per_s" in r:
            mfu = f"{r['mfu']:.3f}" if r.get("mfu") is not None else "n/a"
            idle = f"{r['gpu_idle']:.0%}" if r.get("gpu_idle") is not None else "n/a"
            lines.append(f"  {r['mode']:8s} {r['path']:6s} {r['batch_per_device']:5d} {r['images_per_s']:9.0f}"
                         f"  {mfu:6s} {idle:>8s}  {r['data_wait']:>19.0%}  {r['peak_memory_gib']:8.2f}")
        else:
            lines.append(f"  {r['mode']:8s} {r['path']:6s} {r['batch']:5d}  {r.get('skipped') or r.get('error')}")
    for r in found:
        if r.get("part") == "syncs":
            lines.append(f"syncs {r.get('mode', '')} {r.get('path', '')}: "
                         + ("the flow only (no CUDA, nothing counted)" if r.get("counted") is False else
                            f"{r['per_step']:g} per training step ({r['syncs_2_steps']} in a 2-step epoch,"
                            f" {r['syncs_6_steps']} in a 6-step one: {r['sites_6_steps']}); evaluation:"
                            f" {r['eval_syncs']} over {r['eval_batches']} batches {r['eval_sites']}"
                            if "per_step" in r else str(r.get("skipped") or r.get("error"))))
        elif r.get("part") == "placement":
            lines.append("placement (data_on_device: auto): " + ", ".join(
                f"{k} {v}" if isinstance(v, str) else f"{k} {v:.1f}" for k, v in r.items() if k != "part"))
        elif r.get("part") == "pytest":
            lines.append(f"pytest -m gpu: rc {r['rc']}, {r['result']}")
    lines += targets(found)
    return "\n".join(lines)


def targets(found: list[dict]) -> list[str]:
    """The issue's throughput targets against what the matrix measured (batch 512, device data), and zero syncs."""
    rate = {r["mode"]: r["images_per_s"] for r in found
            if r.get("part") == "matrix" and r.get("path") == "device" and r.get("batch_per_device") == 512
            and "images_per_s" in r}

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    lines = ["targets (issue 29: ViT-Ti/16 at 224, bf16, batch 512, device data, one H100):"]
    for mode in ("compiled", "eager"):
        got = rate.get(mode)
        lines.append(f"  {mode} >= {TARGETS[mode]:,} img/s: "
                     + (f"{got:,.0f} ({verdict(got >= TARGETS[mode])})" if got else "not measured"))
    if rate.get("compiled") and rate.get("eager"):
        ratio = rate["compiled"] / rate["eager"]
        lines.append(f"  compiled / eager >= {TARGETS['ratio']}: {ratio:.2f} ({verdict(ratio >= TARGETS['ratio'])})")
    per_step = [r["per_step"] for r in found if r.get("part") == "syncs" and r.get("counted")]
    lines.append("  zero host syncs per training step: "
                 + (f"{max(per_step):g} at most ({verdict(max(per_step) == 0)})" if per_step else "not measured"))
    if rate.get("compiled"):
        hours = paper_small_hours(rate["compiled"])
        lines.append(f"  paper-small's 90 cells at {rate['compiled']:,.0f} img/s: {hours:.1f} GPU-hours of training"
                     f" and evaluation ({verdict(hours <= 12)}: <= 12; check's estimate)")
    return lines


def paper_small_hours(rate: float) -> float:
    """GPU-hours of paper-small's training grid (its `train` stage's cells) at `rate` images/s, as `python -m pipeline
    check` estimates them: the images trained under the 8 ranks' sampler, the evaluated ones at a third of the cost,
    and each cell's fixed cost (`pipeline.check.CELL_FIXED_S`)."""
    from pipeline.check import cost_groups, group_estimate
    from pipeline.params import Params
    from pipeline.profiles import merged_text
    from pipeline.schema import from_mapping, yaml_load

    params = from_mapping(Params, yaml_load(merged_text("paper-small", (ROOT / "params.yaml").read_text())[0]))
    table = [{"model": MODEL, "img_size": 224, "embed_dim": None, "device": "gpu", "images_per_s": rate,
              "source": "the GPU check"}]
    return sum(group_estimate(group, table, "gpu", params.resources.ranks, [])[1]
               for group in cost_groups(params) if group[0].startswith("train cells,"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "gpu_check_out"))
    p.add_argument("--budget", type=float, default=460, help="seconds for the whole check (default 460)")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    p.add_argument("--modes", default="eager,compiled", help="the matrix's modes (eager, compiled)")
    p.add_argument("--cpu", action="store_true", help="the rehearsal on a CPU machine (tiny sizes)")
    p.add_argument("--yaml", type=Path, default=None, help="add the measured row to this throughput table")
    p.add_argument("--part", default=None, help=argparse.SUPPRESS)  # one part, in a child process
    p.add_argument("--deadline", type=float, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    modes = [m for m in args.modes.split(",") if m]
    if args.part:
        run_part(args.part, Check(args.out, args.cpu, args.deadline), modes)
        return 0
    start = time.time()
    deadline = start + args.budget
    (args.out / "rows.jsonl").unlink(missing_ok=True)
    for name in [x for x in args.parts.split(",") if x]:
        left = deadline - time.time()
        if left < 15:
            Check(args.out, args.cpu, deadline).emit({"part": name, "skipped": "time"})
            continue
        span = min(CAPS[name], left)
        command = [sys.executable, str(Path(__file__).resolve()), "--part", name, "--out", str(args.out),
                   "--deadline", str(time.time() + span - 10), "--modes", ",".join(modes), *(["--cpu"] * args.cpu)]
        print(f"== [{time.time() - start:.0f} s] {name} (up to {span:.0f} s)", flush=True)
        try:
            proc = subprocess.run(command, cwd=ROOT, timeout=span)
            if proc.returncode:
                Check(args.out, args.cpu, deadline).emit({"part": name, "error": f"exit code {proc.returncode}"})
        except subprocess.TimeoutExpired:
            Check(args.out, args.cpu, deadline).emit({"part": name, "error": f"killed at its {span:.0f} s deadline"})
    found = rows(args.out)
    table = throughput_rows(found)
    if table:
        append_rows(args.out / "throughput_rows.yaml", table)
        if args.yaml:
            append_rows(args.yaml, table)
    text = summary(args.out, found, time.time() - start)
    (args.out / "summary.txt").write_text(text + "\n")
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What is bit-identical across CPUs, and how far apart results land where it is not: the words for
bench/cross_cpu.yaml, which `bench/bench_cross_cpu.py --yaml` writes (its docstring says how the code paths of one
CPU stand in for other x86 CPUs), in full in reports/appendix.md and in one line in the report. Only measured
numbers are printed; a part that was not run says so.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.analysis.document import Block, Bullets, Heading, Paragraph
from pipeline.schema import yaml_load

CROSS_CPU = Path("bench/cross_cpu.yaml")
PATH_NAMES = {"native": "this CPU's own (AVX-512)", "avx2": "AVX2", "sse4.2": "SSE4.2"}


def load_cross_cpu(path: str | Path = CROSS_CPU) -> dict:
    path = Path(path)
    return (yaml_load(path.read_text()) or {}) if path.is_file() else {}


def cell_spread(data: dict) -> float:
    """The largest distance in points between one cell's final top-1 on two CPU code paths (part `train`), 0 when it
    was not measured: what a cell may move by on another CPU (`claims.mark_edges`)."""
    results = (data.get("train") or {}).get("results") or {}
    return max((float(r.get("spread_pts") or 0.0) for r in results.values()), default=0.0)


def _entries(c: dict) -> str:
    if not c["differ"]:
        return "bit-identical"
    return f"{c['differ']:,} of {c['total']:,} float32 entries differ (largest difference {c['max_abs']:.1e})"


def _env(env: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in env.items())


def _per_arm(res: dict, arms: list[str], suffix: str = "") -> list[str]:
    """'impulse: AVX2 2 of 1,153,902 float32 entries differ (...), SSE4.2 bit-identical' per arm."""
    out = []
    for arm in arms:
        cells = [f"{PATH_NAMES[p]} {_entries(res[f'{arm} {p}{suffix}'])}" for p in ("avx2", "sse4.2")
                 if f"{arm} {p}{suffix}" in res]
        if cells:
            out.append(f"{arm}: {', '.join(cells)}")
    return out


def init_lines(part: dict, remedies: dict) -> list[str]:
    res = part["results"]
    arms = list(dict.fromkeys(k.split()[0] for k in res))
    lines = [f"Initial weights ({part['threads']} threads, each arm of the CPU default's model, seeds 0-2), each path"
             " against this CPU's own: " + "; ".join(_per_arm(res, arms)) + "."]
    for name, env in remedies.items():
        cells = _per_arm(res, arms, f"+{name}")
        if cells:
            lines.append(f"With {_env(env)} on every path: " + "; ".join(cells) + ".")
    return lines


def train_lines(part: dict, what: str) -> list[str]:
    lines = []
    for cell, r in part["results"].items():
        arm, seed = cell.split("/")
        top = "; ".join(f"{100 * v:.2f} % on {k}" for k, v in r["top1"].items())
        weights = "; ".join(f"{k}: {_entries(c)}" for k, c in r.get("final_weights", {}).items())
        lines.append(f"{what} ({part['threads']} threads), {arm} seed {seed}: final top-1 {top}; spread over the"
                     f" paths {r['spread_pts']:.2f} pts" + (f"; final weights {weights}" if weights else "") + ".")
    return lines


def speed_lines(part: dict, remedies: dict) -> list[str]:
    cells = [f"with {_env(remedies.get(name, {}))} {r['ratio_to_native']:.2f}×" for name, r in part["results"].items()
             if name != "native"]
    rounds = len(part["results"].get("native", {}).get("rounds", []))
    return [f"What holding the paths costs: a training step of the CPU default's model ({part['threads']} thread(s),"
            f" best of {rounds} alternating rounds) takes " + "; ".join(cells) + " the time of this CPU's own path"
            " (on one busy, shared machine)."] if cells else []


PARTS = ("init", "steps", "train", "speed")


def cross_cpu_line(data: dict, where: str) -> str:
    """The report's line: how far apart a whole cell lands on two code paths, and `where` the rest is."""
    if not any(k in data for k in PARTS):
        return f"Across CPUs: not measured here ({where})."
    first = next(data[k] for k in PARTS if k in data)
    spread = (f"a whole cell's final top-1 lands up to {cell_spread(data):.2f} pts apart on two of them (what marks"
              " a verdict 'at the edge')" if "train" in data else "a whole cell was not trained on two of them")
    return (f"Across CPUs (bench/cross_cpu.yaml, the code paths of one {first['cpu']} standing in for other x86"
            f" CPUs): {spread}; what is bit-identical where, and what holding the paths costs: {where}.")


def cross_cpu_blocks(data: dict) -> list[Block]:
    """The measured facts of bench/cross_cpu.yaml, part by part, with the command that measured each."""
    head = Heading("Reproducibility across CPUs")
    if not any(k in data for k in PARTS):
        return [head, Paragraph("Not measured here (bench/cross_cpu.yaml is missing; `python bench/bench_cross_cpu.py"
                                " init` and `train` measure it). Runs are bit-identical on one CPU code path and"
                                " thread count; nothing more is claimed.")]
    first = next(data[k] for k in PARTS if k in data)
    paths = "; ".join(f"{name}: {_env(env) or 'as detected'}" for name, env in data.get("paths", {}).items())
    items = []
    if "init" in data:
        items += init_lines(data["init"], {k: v for k, v in data.get("remedies", {}).items() if k != "pinned"})
    if "steps" in data:
        items += train_lines(data["steps"], "The same initial weights trained 2 epochs on each path")
    if "train" in data:
        items += train_lines(data["train"], "A whole cell of the CPU default on each path")
    if "speed" in data:
        items += speed_lines(data["speed"], data.get("remedies", {}))
    commands = [f"`{data[k]['command']}` ({data[k]['date']})" for k in PARTS if k in data]
    return [head, Paragraph(
        f"Measured on one {first['cpu']} (torch {first['torch']}), whose code paths stand in for other x86 CPUs:"
        f" MKL, oneDNN, ATen and OpenBLAS each take the kernels of a lower instruction set when told to ({paths})."
        " A real CPU of another vendor may take paths not emulated here."), Bullets(items),
            Paragraph("Commands: " + "; ".join(commands) + ".")]

"""Does [CI]'s impulse fit converge at a geometry? Per layer: MSE, mean weight on the target key, peak fraction.

The fit of `pipeline.method.ci_2401.init_arm` (code-2401's `impulse_init`) on a Simple ViT of the given token grid
and width, one line per fitted layer and seed, then the range over them and the time the fit took.

    .venv/bin/python bench/bench_ci_fit.py --geometry official              # code-2401: 16x16 tokens, D 512, 8x64
    .venv/bin/python bench/bench_ci_fit.py --geometry laptop                # cpu-claims: 7x7 tokens, D 72, 3x24
    .venv/bin/python bench/bench_ci_fit.py --geometry laptop --steps 10000 --lr 1e-4   # code-2401's fit there
    .venv/bin/python bench/bench_ci_fit.py --geometry official --device cuda --layers 6 --seeds 0 1 2
    .venv/bin/python bench/bench_ci_fit.py --geometry official --yaml bench/ci_fit.yaml   # record it
    .venv/bin/python bench/bench_ci_fit.py --attention model3 --geometry laptop --layers 2   # Model III's fit
    .venv/bin/python bench/bench_ci_fit.py --attention model3 --geometry official --steps 10000 --lr 1e-4

With --yaml the per-layer figures go into that file (one entry per geometry and fit, replaced when measured
again); the aggregate stage shows them beside the grid's own fits (results/tables/ci_fit.csv, the report).

Without --steps/--lr/... the fit is the one params.yaml (official) or profiles/cpu-claims.yaml (laptop) gives
that geometry, for the alpha grid (`ci_alpha.impulse_fit`) or, with --attention model3, for Model III
(`ci_model3.impulse_fit`: sigma 1.0, fitted on Q, K directly). --yaml records the alpha grid's fits only (the
ci_fit table is the alpha grid's).
"""

from __future__ import annotations

import argparse
import datetime
import time
from pathlib import Path

import torch
import yaml

from pipeline.method.ci_2401 import init_arm
from pipeline.method.simple_vit import SimpleViT
from pipeline.outputs import write_text

#: (tokens per side, dim, heads, head_dim) and the fit params.yaml / cpu-claims give it
GEOMETRIES = {
    "official": ((16, 512, 8, 64), {"steps": 10000, "lr": 1e-4}),
    "laptop": ((7, 72, 3, 24), {"steps": 1000, "lr": 3e-3}),
}
#: Model III's fits (sigma 1.0) where they differ from the alpha grid's
MODEL3_FITS = {"official": {"steps": 10000, "lr": 1e-4}, "laptop": {"steps": 1000, "lr": 1e-2}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--geometry", choices=GEOMETRIES, default="laptop")
    parser.add_argument("--layers", type=int, default=1, help="layers fitted per seed (each its own fit)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps", type=int)
    parser.add_argument("--lr", type=float)
    parser.add_argument("--attention", choices=("mixed", "model3"), default="mixed",
                        help="mixed: the alpha grid's M'_I (fit through PE); model3: Model III (fit on Q, K)")
    parser.add_argument("--sigma", type=float, help="default 0.1 (mixed), 1.0 (model3)")
    parser.add_argument("--renorm-every", type=int, default=100)
    parser.add_argument("--window", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--yaml", type=Path, help="record the per-layer figures in this file (bench/ci_fit.yaml)")
    args = parser.parse_args()
    if args.yaml and args.attention == "model3":
        parser.error("--yaml records the alpha grid's fits only")
    torch.set_num_threads(args.threads)
    model3 = args.attention == "model3"
    (grid, dim, heads, head_dim), fit = GEOMETRIES[args.geometry]
    fit = (MODEL3_FITS[args.geometry] if model3 else fit) | {k: v for k, v in (("steps", args.steps),
                                                                              ("lr", args.lr)) if v is not None}
    sigma = args.sigma if args.sigma is not None else (1.0 if model3 else 0.1)
    fit |= {"sigma": sigma, "renorm_every": args.renorm_every, "window": args.window}
    print(f"{args.geometry}, {args.attention}: {grid}x{grid} tokens, D {dim}, {heads} heads x {head_dim}; fit {fit};"
          f" {args.device}; a uniform map puts {1 / grid**2:.4f} on the target")
    rows, start = [], time.perf_counter()
    for seed in args.seeds:
        model = SimpleViT(image_size=grid, patch_size=1, num_classes=1, dim=dim, depth=args.layers, heads=heads,
                          head_dim=head_dim, mlp_dim=dim, channels=1, alpha=0.0, attention=args.attention)
        for r in init_arm(model, "impulse", torch.Generator().manual_seed(seed), device=args.device, **fit):
            rows.append(r | {"seed": seed})
            print(f"  seed {seed} layer {r['layer']}: MSE {r['mse']:.4f}  target mass {r['target_mass']:.3f}"
                  f"  peak {r['peak']:.3f}")
    seconds = time.perf_counter() - start
    for key in ("mse", "target_mass", "peak"):
        values = [r[key] for r in rows]
        print(f"{key}: {min(values):.4f} - {max(values):.4f} over {len(values)} layer fits")
    print(f"fit time: {seconds / len(rows):.1f} s per layer ({args.threads} threads)")
    if args.yaml:
        entry = {"geometry": args.geometry, "tokens": grid, "dim": dim, "heads": heads, "head_dim": head_dim,
                 "fit": fit, "device": args.device, "date": datetime.date.today().isoformat(),
                 "torch": str(torch.__version__),
                 "layers": [{"seed": r["seed"], "layer": r["layer"]}
                            | {k: round(r[k], 6) for k in ("mse", "target_mass", "peak")} for r in rows]}
        record(args.yaml, entry)
        print(f"recorded {len(rows)} layer fit(s) in {args.yaml}")


def record(path: Path, entry: dict) -> None:
    """Put `entry` into the file's `fits`, replacing one of the same geometry and fit."""
    fits = (yaml.safe_load(path.read_text()) or {}).get("fits", []) if path.is_file() else []
    fits = [f for f in fits if (f["geometry"], f["fit"]) != (entry["geometry"], entry["fit"])] + [entry]
    header = "# [CI] impulse fits measured by bench/bench_ci_fit.py --yaml (the aggregate stage's ci_fit table)\n"
    write_text(path, header + yaml.safe_dump({"fits": fits}, sort_keys=False))


if __name__ == "__main__":
    main()

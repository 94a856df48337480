"""`python -m pipeline attention <variant> <arm>`: a model's attention maps at initialization, the
`attention@<variant>-<arm>` stage ([NeurIPS] Fig. 4; claim 7 of paper/claims.yaml).

The model is built as `train@<dataset>-<variant>-<arm>-0` starts (seed 0, no training step). For layer 0 and
every layer of `report.attention_layers` it records per head the patch-token map (prefix tokens dropped) on the
positional pseudo-input and, batch-averaged, on validation images; peak agreement against the impulse arm's
offsets (one yardstick for every arm) and locality mass (`pipeline.method.inits.measures`); and on the images
the init diagnostics (`pipeline.method.inits.diagnostics`). Outputs, written all or nothing:

    results/attention/<variant>/<arm>/maps.npz       ``<input>_L<layer>``: float32 (heads, N, N), batch-mean
    results/attention/<variant>/<arm>/measures.json  grids, offsets, per input, layer and head the measures,
                                                     and the diagnostics
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

from pipeline import entry
from pipeline.config import ModelConfig
from pipeline.data.load.loaders import build_loaders
from pipeline.data.load.transforms import Augment
from pipeline.data.meta import dataset_meta
from pipeline.datasets import normalization_stats
from pipeline.errors import PipelineError
from pipeline.experiments import init_section, plugin_section
from pipeline.method.inits import (
    attention_maps,
    init_diagnostics,
    layer_offsets,
    locality_mass,
    mixing_grid,
    peak_agreement,
    uniform_locality_mass,
)
from pipeline.method.inits.arch import blocks, family
from pipeline.outputs import folder_aside
from pipeline.params import Params
from pipeline.training import train

#: the two inputs a map is computed on, in the order the figures show them
INPUTS = ("pseudo", "real")
#: validation images the ``real`` maps are averaged over
BATCH_IMAGES = 64
#: where the stage writes, one folder per variant and arm
ATTENTION_DIR = Path("results") / "attention"


def mixing_depth(model: torch.nn.Module) -> int:
    return len(blocks(model, family(model)))


def resolve_layers(depth: int, layers: list[int]) -> list[int]:
    resolved = {0}
    for layer in layers:
        if not isinstance(layer, int) or not -depth <= layer < depth:
            raise PipelineError(
                f"report.attention_layers: layer {layer!r} does not exist in a model of depth {depth};"
                f" use 0..{depth - 1}, or -1 for the last block"
            )
        resolved.add(layer % depth)
    return sorted(resolved)


def intended_offsets(model: torch.nn.Module, kernel_size: int, order: str, seed: int) -> list[list[tuple]]:
    """Per layer and head, the (dy, dx) offset the impulse init aims at for `seed`: the yardstick of every arm."""
    return layer_offsets(model, kernel_size, order, torch.Generator().manual_seed(seed))


def layer_record(maps: torch.Tensor, offsets: list[tuple], grid: tuple[int, int],
                 kernel_size: int) -> tuple[np.ndarray, dict]:
    """One layer's (batch, heads, N', N') maps -> the batch-mean patch-token maps (the last N rows and columns) and
    the per-head measures, pooled over every image's map."""
    n = grid[0] * grid[1]
    measures = {"peak_agreement": peak_agreement(maps, offsets, grid).tolist(),
                "locality_mass": locality_mass(maps, grid, kernel_size).tolist(),
                "uniform_locality_mass": uniform_locality_mass(grid, kernel_size, maps.shape[-1] - n)}
    return maps.float().mean(0)[:, -n:, -n:].numpy().astype(np.float32), measures


def attention_record(model: torch.nn.Module, layers: list[int], offsets: list[list[tuple]], kernel_size: int,
                     images: torch.Tensor | None = None) -> tuple[dict[str, np.ndarray], dict]:
    """Maps and measures of `model` on the pseudo-input and, when `images` are given, on them; the model's weights and
    mode are left as they were.

    Returns ``(maps, record)``: maps ``{"<input>_L<layer>": (heads, N, N) float32}`` and the JSON-able record
    ``{"grids", "heads", "offsets", "layers", "kernel_size", "images", "measures": {input: {layer: {
    "peak_agreement", "locality_mass", "uniform_locality_mass"}}}, "diagnostics"}``, layers as strings.
    """
    grids = {layer: tuple(mixing_grid(model, layer)) for layer in layers}
    inputs = {"pseudo": None} | ({"real": images} if images is not None else {})
    maps, measures = {}, {}
    for name, x in inputs.items():
        measures[name] = {}
        for layer, m in attention_maps(model, x=x, layers=tuple(layers)).items():
            maps[f"{name}_L{layer}"], measures[name][str(layer)] = layer_record(
                m, offsets[layer], grids[layer], kernel_size)
    record = {"layers": list(layers), "grids": {str(k): list(g) for k, g in grids.items()},
              "heads": {str(k): maps[f"pseudo_L{k}"].shape[0] for k in layers},
              "offsets": {str(k): [list(o) for o in offsets[k]] for k in layers}, "kernel_size": kernel_size,
              "images": 0 if images is None else len(images), "measures": measures,
              "diagnostics": None if images is None else init_diagnostics(model, images)}
    return maps, record


def model_label(m: ModelConfig) -> str:
    """The model as the captions name it: the timm name and the variant's fields that override it."""
    fields = [f"{k.replace('_', ' ')} {getattr(m, k)}" for k in ("img_size", "patch_size", "embed_dim", "depth",
                                                                  "num_heads") if getattr(m, k) is not None]
    return f"{m.name} with {', '.join(fields)}" if fields else m.name


def model_record(params: Params, model: torch.nn.Module, seed: int,
                 images: torch.Tensor | None) -> tuple[dict[str, np.ndarray], dict]:
    layers = resolve_layers(mixing_depth(model), params.report.attention_layers)
    offsets = intended_offsets(model, params.impulse.kernel_size, params.impulse.offsets, seed)
    return attention_record(model, layers, offsets, params.impulse.kernel_size, images)


def val_batch(params: Params, dataset: str, img_size: int, in_chans: int, n: int = BATCH_IMAGES) -> torch.Tensor:
    """The first `n` images of the dataset's validation loader (one process, seed 0), as the runs evaluate them."""
    loaders = build_loaders(dataset, params.data.root, stats=normalization_stats(dataset, params.data.normalization),
                            img_size=img_size, in_chans=in_chans, batch_size=n, seed=0,
                            augment=Augment.from_train(params.train), train_subset=params.data.train_subset,
                            val_subset=params.data.val_subset)
    images, _ = next(iter(loaders.val))
    return images[:n]


def grid_model(params: Params, variant: str, arm: str, meta, seed: int) -> torch.nn.Module:
    return train.initialized(params.models[variant], arm, init_section(params, arm, variant), meta, seed,
                             plugin_section(params, arm).get("plugin"))


def model_batch(params: Params, dataset: str, model: torch.nn.Module, n: int = BATCH_IMAGES) -> torch.Tensor:
    embed = getattr(model, "patch_embed", None) or model.stem
    return val_batch(params, dataset, img_size=embed.img_size[0], in_chans=embed.proj.in_channels, n=n)


def write_attention(out: Path, maps: dict[str, np.ndarray], record: dict) -> None:
    """Write maps.npz and measures.json into `out`, all or nothing."""
    with folder_aside(out) as tmp:
        np.savez_compressed(tmp / "maps.npz", **maps)
        (tmp / "measures.json").write_text(json.dumps(record, indent=2) + "\n")


def read_attention(directory: Path) -> tuple[dict[str, np.ndarray], dict] | None:
    if not (directory / "maps.npz").is_file() or not (directory / "measures.json").is_file():
        return None
    with np.load(directory / "maps.npz") as npz:
        maps = {key: npz[key] for key in npz.files}
    return maps, json.loads((directory / "measures.json").read_text())


def add_arguments(parser) -> None:
    parser.add_argument("variant", help="a model variant: a key of params `models`")
    parser.add_argument("arm", help="the init method: a built-in arm or one of params `inits`")
    parser.add_argument("--images", type=int, default=BATCH_IMAGES, help="validation images to average over")


def main(params: Params, args) -> int:
    if args.variant not in params.models:
        raise PipelineError(f"variant {args.variant!r}: not a key of params `models` ({', '.join(params.models)})")
    if args.arm not in params.arm_names:
        raise PipelineError(f"arm {args.arm!r}: not an init method ({', '.join(params.arm_names)}); declare your own"
                            " in params `inits`")
    if args.images <= 0:
        raise PipelineError(f"--images {args.images}: give a positive number of validation images")
    torch.set_num_threads(params.resources.threads)
    dataset = params.datasets[0]
    model = grid_model(params, args.variant, args.arm, dataset_meta(params.data.root, dataset), seed=0)
    maps, record = model_record(params, model, 0, model_batch(params, dataset, model, args.images))
    record = {"variant": args.variant, "arm": args.arm, "state": "init", "dataset": dataset,
              "model": model_label(params.models[args.variant]), "seed": 0,
              "init": init_section(params, args.arm, args.variant), **plugin_section(params, args.arm)} | record
    write_attention(ATTENTION_DIR / args.variant / args.arm, maps, record)
    for name, per_layer in record["measures"].items():
        for layer, m in per_layer.items():
            print(f"[attention {args.variant} {args.arm}] {name:6s} layer {layer}: peak agreement "
                  f"{' '.join(f'{v:.2f}' for v in m['peak_agreement'])}; locality mass "
                  f"{' '.join(f'{v:.2f}' for v in m['locality_mass'])} (uniform {m['uniform_locality_mass']:.2f})")
    if diag := record["diagnostics"]:
        linear = diag["linear_fraction"]
        print(f"[attention {args.variant} {args.arm}] real   branch/residual RMS per block "
              f"{' '.join(f'{r:.2f}' for r in diag['branch_ratio'])}; trunk RMS {diag['trunk_rms']:.2f}"
              + (f"; token-MLP units in GELU's linear regime {' '.join(f'{v:.0%}' for v in linear)}" if linear
                 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(entry.command(__spec__.name, add_arguments, main))

"""`python -m pipeline.training.sia base <dataset> <arch> <seed>` and `... fit <dataset> <fit> <seed>`: one cell of
[SIA]'s ablations (params `sia`), the stages `sia_base@<dataset>-<arch>-<seed>` and `sia_fit@<dataset>-<fit>-<seed>`
(also `python -m pipeline sia ...`).

[SIA] 2404.01139 (paper.md sections 1.2, 2.7) trains its ViT without a cls token, with average pooling and a fixed
2-D sin-cos PE, and initialises Q, K by an iterative impulse fit on a pseudo-input (`pipeline.method.sia`). Every
cell builds the grid's ViT variant `sia.variant` with the `train` recipe:

- `base`: the baseline change ((f), claim 14): architecture `cls_learned` (cls token, learned PE, token pooling: timm's
  ViT as the grid trains it) or `avg_sincos` ([SIA]'s), initialised by `sia.baseline_arm`;
- `fit`: [SIA]'s architecture, PyTorch's default init (code-2404's impulse mode skips timm's init), then the fit of
  every layer's Q, K on the pseudo-inputs the cell names ((c), claim 13; `sia.fit`).

Outs: `results/sia/<dataset>/base_<arch>|fit_<fit>/seed<k>/` through the shared run skeleton; metrics.json records
the cell, its architecture and, for a fit cell, `impulse_fit` per fit (layers, pseudo-input, MSE, target mass, peak,
offsets).
"""

from __future__ import annotations

import dataclasses
import sys

import torch
from torch import nn

from pipeline import entry
from pipeline.config import ModelConfig, Params
from pipeline.data.meta import DatasetMeta
from pipeline.errors import PipelineError
from pipeline.method.inits import apply_init
from pipeline.method.sia import sia_fit, use_sincos_pos_embed
from pipeline.training import builders
from pipeline.training.run import Run, data_identity, start
from pipeline.vocabulary import SIA_ARCHS, SiaCell, parse_sia_base, parse_sia_fit

#: the init under [SIA]'s fit: PyTorch's default, as code-2404's impulse mode leaves every other weight
FIT_BASE_ARM = "default"


def sia_model_config(model: ModelConfig, arch: str) -> ModelConfig:
    """The variant's model section with architecture `arch`'s head: cls token and token pooling, or neither."""
    if arch not in SIA_ARCHS:
        raise PipelineError(f"architecture {arch!r}: [SIA]'s cells have {', '.join(SIA_ARCHS)}")
    if arch == "cls_learned":  # timm's own ViT: the cls token has a row of the position embedding too
        extra = {k: v for k, v in model.extra.items() if k != "no_embed_class"}
        return dataclasses.replace(model, class_token=True, global_pool="token", extra=extra)
    return dataclasses.replace(model, class_token=False, global_pool="avg")


def cell_of(kind: str, name: str) -> SiaCell:
    """The cell a stage's (kind, name) stands for: `base <arch>` or `fit <first><later>[_layer]`."""
    if kind == "base":
        return parse_sia_base(name, "architecture")
    if kind == "fit":
        return parse_sia_fit(name, "fit")
    raise PipelineError(f"kind {kind!r}: use base or fit")


def cell_arm(params: Params, cell: SiaCell) -> str:
    """The init under the cell: PyTorch's default under a fit, `sia.baseline_arm` for a base cell."""
    return FIT_BASE_ARM if cell.fit else params.sia.baseline_arm


def build(params: Params, cell: SiaCell, meta: DatasetMeta, seed: int, device: str = "cpu") -> tuple[nn.Module, list]:
    """The cell's initialised model (seeded by `seed`) and, for a fit cell, the fit's records."""
    variant, arm = params.sia.variant, cell_arm(params, cell)
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = builders.timm_model(sia_model_config(params.models[variant], cell.arch), meta)
    apply_init(model, arm, generator=generator, **params.method_options(arm, variant))
    if cell.arch == "avg_sincos":
        use_sincos_pos_embed(model)
    if not cell.fit:
        return model, []
    fit = dataclasses.asdict(params.sia.fit)
    records = sia_fit(model, cell.first, cell.later, shared=cell.shared, generator=generator, device=device, **fit)
    return model, records


def sia_run(params: Params, kind: str, dataset: str, name: str, seed: int) -> Run:
    """The cell (kind, dataset, name, seed) as a `Run`."""
    cell = cell_of(kind, name)
    if dataset not in params.datasets:
        raise PipelineError(f"dataset {dataset!r}: not in params `datasets` ({', '.join(params.datasets)})")
    variant, arm = params.sia.variant, cell_arm(params, cell)
    model_cfg = sia_model_config(params.models[variant], cell.arch)
    config = {"grid": "sia", "dataset": dataset, "cell": cell.name, "arch": cell.arch, "arm": arm, "seed": seed,
              "variant": variant, "model": dataclasses.asdict(model_cfg),
              "init": params.method_options(arm, variant),
              "fit": dataclasses.asdict(params.sia.fit) if cell.fit else None,
              "train": dataclasses.asdict(params.train), "data": data_identity(params.data)}
    device = "cuda" if params.resources.device != "cpu" and torch.cuda.is_available() else "cpu"
    fitted: dict = {}

    def model(meta: DatasetMeta) -> nn.Module:
        built, fitted["impulse_fit"] = build(params, cell, meta, seed, device)
        return built

    def facts(built: nn.Module) -> dict:
        records = {"impulse_fit": fitted["impulse_fit"]} if cell.fit else {}
        return builders.model_facts(variant, model_cfg, built) | {"cell": cell.name, "arch": cell.arch,
                                                                  "arm": arm} | records

    return Run(module=__spec__.name, kind="sia", key=(dataset, cell.name, f"seed{seed}"), dataset=dataset, seed=seed,
               recipe=params.train, config=config, build=model,
               input_size=lambda meta: builders.input_size(model_cfg, meta), facts=facts)


def add_arguments(parser) -> None:
    parser.add_argument("kind", choices=("base", "fit"), help="a baseline-change cell or a fit cell")
    parser.add_argument("dataset", help="a dataset of params `datasets`")
    parser.add_argument("name", help="base: an architecture of params `sia.bases`; fit: a pseudo-input pair of"
                                     " `sia.fits` (e.g. PP, GP, PP_layer)")
    parser.add_argument("seed", type=int)


def main(params: Params, args) -> int:
    listed = params.sia.bases if args.kind == "base" else params.sia.fits
    if args.name not in listed:
        raise PipelineError(f"{args.kind} {args.name!r}: not in params `sia.{args.kind}s`"
                            f" ({', '.join(listed) or 'none'})")
    return start(sia_run(params, args.kind, args.dataset, args.name, args.seed), params.data, params.resources,
                 args.relaunch)


if __name__ == "__main__":
    sys.exit(entry.command(__spec__.name, add_arguments, main))

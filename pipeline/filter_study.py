"""`python -m pipeline filter-study <variant> <seed> [--heads H]`: one ConvMixer run of the filter study.

The motivation of the paper ([CI] 2401.12511 Fig. 4 and Table 6; paper.md sections 1.3, 1.4): a ConvMixer whose
depthwise spatial filters are frozen at random or random-impulse values does about as well as one that learns
them; frozen box filters (linearly dependent) do worse, and a random "permutation" token mixer (rand*, no
convolutional structure) worse again. With frozen Gaussian filters accuracy falls as sigma grows and as the number
of distinct filters ("heads") shrinks.

`variant` is `learned` or a frozen family of `pipeline.filters` (random, impulse, box-<n>, gaussian-<sigma>, perm).
The run uses the shared engine (`pipeline.engine.fit`) with the `train` recipe updated by `filter_study.train`, and
writes `results/filter_study/<variant>[-h<heads>]/seed<k>/` like a ViT run. The learned variant also measures the
effective rank k of its patch embeddings (99% of the energy) and checks Proposition 1, D >= k * f^2.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from pipeline import launch
from pipeline.config import Params, digest
from pipeline.engine import fit, recipe_with, setup_distributed
from pipeline.filters import parse_filter
from pipeline.train import RESULTS, SCRATCH, loaders_for, provenance, write_outputs


def variant_name(variant: str, heads: int | None) -> str:
    """The results folder of a variant: `gaussian-0.1-h64` for a Gaussian grid cell, else the variant itself."""
    return f"{variant}-h{heads}" if heads else variant


def check_variant(variant: str, kernel_size: int) -> None:
    """`learned` or a frozen family `pipeline.filters` knows (PipelineError naming the valid forms otherwise)."""
    if variant != "learned":
        parse_filter(variant, kernel_size)


def build(params: Params, variant: str, heads: int | None, seed: int) -> torch.nn.Module:
    from pipeline.data.registry import DATASETS
    from pipeline.models import build_convmixer

    study, info = params.filter_study, DATASETS[params.filter_study.dataset]
    torch.manual_seed(seed)
    return build_convmixer(variant, dim=study.model.dim, depth=study.model.depth,
                           kernel_size=study.model.kernel_size, patch_size=study.model.patch_size,
                           in_chans=info.channels, num_classes=info.num_classes, img_size=info.native_size,
                           heads=heads, generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def rank_check(model: torch.nn.Module, loader, kernel_size: int, dim: int, batches: int = 4) -> dict:
    """Effective rank k of the trained patch embeddings and Proposition 1 (D >= k f^2) for this model."""
    from pipeline.filters import effective_rank, patch_embeddings, proposition1_holds

    model.eval()
    feats = []
    for i, (images, _) in enumerate(loader):
        if i == batches:
            break
        feats.append(patch_embeddings(model, images.to(next(model.parameters()).device)))
    k = effective_rank(torch.cat(feats), energy=0.99)
    return {"effective_rank": k, "prop1_rhs": k * kernel_size**2,
            "prop1_holds": proposition1_holds(dim, k, kernel_size)}


def study_run(params: Params, variant: str, seed: int, heads: int | None) -> dict | None:
    study = params.filter_study
    recipe = recipe_with(params.train, study.train)
    d = setup_distributed(recipe.device, recipe.threads)
    model = build(params, variant, heads, seed)
    n_params = sum(p.numel() for p in model.parameters())
    from pipeline.data.registry import DATASETS

    info = DATASETS[study.dataset]
    loaders = loaders_for(params, study.dataset, info.native_size, info.channels, seed, recipe, d)
    name = variant_name(variant, heads)
    config = {"study": "filter_study", "variant": variant, "heads": heads, "seed": seed, "dataset": study.dataset,
              "model": dataclasses.asdict(study.model), "train": dataclasses.asdict(recipe),
              "data": {"train_subset": params.data.train_subset, "val_subset": params.data.val_subset}}
    out = RESULTS / "filter_study" / name / f"seed{seed}"
    summary = fit(model, loaders, recipe, seed=seed, d=d, checkpoint=SCRATCH / "filter_study" / name / f"seed{seed}"
                  / "last.pt", digest=digest(config), live_dir=out / "live", name=f"convmixer-{name}-{seed}")
    if not d.master:
        return None
    family = "learned" if variant == "learned" else parse_filter(variant).kind
    sigma = parse_filter(variant).param if family == "gaussian" else None
    extra = {"variant": name, "family": family, "frozen": variant != "learned", "heads": heads, "sigma": sigma,
             "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
             "kernel_size": study.model.kernel_size, "dim": study.model.dim, "dataset": study.dataset,
             "seed": seed, "params": n_params, "world_size": d.world_size, "train_size": loaders.train_size,
             "val_size": loaders.val_size} | provenance()
    if variant == "learned":
        extra |= rank_check(model, loaders.val, study.model.kernel_size, study.model.dim)
    write_outputs(Path(out), summary, config, model, extra)
    print(f"[convmixer-{name}-{seed}] final top-1 {summary['top1']:.4f}; wrote {out}", flush=True)
    return summary


def add_arguments(parser) -> None:
    parser.add_argument("variant", help="learned, or a frozen filter family: random, impulse, box-<n>, "
                                        "gaussian-<sigma>, perm")
    parser.add_argument("seed", type=int)
    parser.add_argument("--heads", type=int, default=None, help="number of distinct filters (default: one per channel)")


def main(params: Params, args) -> int:
    check_variant(args.variant, params.filter_study.model.kernel_size)
    if launch.needs_launch(params.train):
        argv = ["--params", args.params, *sum((["--set", o] for o in args.overrides), []),
                "filter-study", args.variant, str(args.seed)] + (["--heads", str(args.heads)] if args.heads else [])
        return launch.launch(params.train, argv)
    study_run(params, args.variant, args.seed, args.heads)
    return 0

"""`python -m pipeline.training.filter_study <variant> <seed> [--heads H]`: one ConvMixer run of the filter study,
the stages `filter_study@` and `filter_gaussian@` (also `python -m pipeline filter-study ...`).

The motivation of the paper ([CI] 2401.12511 Fig. 4 and Table 6; paper.md sections 1.3, 1.4): a ConvMixer whose
depthwise spatial filters are frozen at random or random-impulse values does about as well as one that learns
them; frozen box filters (linearly dependent) and frozen softmax filters (rand*, nearly a box filter) do worse.
With frozen Gaussian filters accuracy falls as sigma grows and as the number of distinct filters ("heads") shrinks.

`variant` is `learned`, `learned-<family>` (trainable, drawn from that family) or a frozen family of
`pipeline.vocabulary.parse_filter` (random, softmax, impulse, box-<n>, gaussian-<sigma>; perm and fullperm are arms
beyond the paper). The spatial block is params `filter_study.model.block` ('ci': code-2401's, 'sia': code-2404's).
The run goes through the shared run skeleton (`pipeline.training.run`) with the study's recipe (`train` updated by
`filter_study.train`, validated at load) and writes `results/filter_study/<variant>[-h<heads>]/seed<k>/` like a ViT
run. The learned variant also measures the effective rank k of its patch embeddings (99% of
the energy) and checks Proposition 1, D >= k * f^2.
"""

from __future__ import annotations

import dataclasses
import sys

import torch

from pipeline import entry
from pipeline.config import ConvMixerConfig, Params
from pipeline.data.load.loaders import Loaders
from pipeline.data.meta import DatasetMeta
from pipeline.method.convmixer import ConvMixer, build_convmixer
from pipeline.method.filters import effective_rank, patch_embeddings, proposition1_holds
from pipeline.method.names import parse_study_variant
from pipeline.training.run import Run, data_identity, start


def model_input(cfg: ConvMixerConfig, meta: DatasetMeta) -> tuple[int, int]:
    """(image side, channels) the filter study's ConvMixer takes: its img_size, else the data's stored side."""
    return cfg.img_size or meta.image_size, meta.channels


def build_model(cfg: ConvMixerConfig, variant: str, heads: int | None, meta: DatasetMeta, seed: int) -> ConvMixer:
    """The filter study's ConvMixer for this dataset (learned or frozen `variant` filters), seeded by `seed`."""
    torch.manual_seed(seed)
    return build_convmixer(variant, dim=cfg.dim, depth=cfg.depth, kernel_size=cfg.kernel_size,
                           patch_size=cfg.patch_size, in_chans=meta.channels, num_classes=meta.num_classes,
                           img_size=model_input(cfg, meta)[0], heads=heads, block=cfg.block,
                           generator=torch.Generator().manual_seed(seed))


def variant_name(variant: str, heads: int | None) -> str:
    """The results folder of a variant: `gaussian-0.1-h64` for a Gaussian grid cell, else the variant itself."""
    return f"{variant}-h{heads}" if heads else variant


@torch.no_grad()
def rank_check(model: torch.nn.Module, loaders: Loaders, kernel_size: int, dim: int, batches: int = 4) -> dict:
    """Effective rank k of the trained patch embeddings and Proposition 1 (D >= k f^2) for this model."""
    model.eval()
    feats = []
    for i, (images, _) in enumerate(loaders.val):
        if i == batches:
            break
        feats.append(patch_embeddings(model, images.to(next(model.parameters()).device)))
    k = effective_rank(torch.cat(feats), energy=0.99)
    return {"effective_rank": k, "prop1_rhs": k * kernel_size**2,
            "prop1_holds": proposition1_holds(dim, k, kernel_size)}


def study_run(params: Params, variant: str, seed: int, heads: int | None) -> Run:
    """One filter-study cell as a `Run`."""
    study = params.filter_study
    parsed = parse_study_variant(variant, study.model.kernel_size)
    family = None if parsed.learned else parsed.family
    name = variant_name(variant, heads)
    config = {"study": "filter_study", "variant": variant, "heads": heads, "seed": seed, "dataset": study.dataset,
              "model": dataclasses.asdict(study.model), "train": dataclasses.asdict(params.filter_recipe),
              "data": data_identity(params.data)}
    facts = {"variant": name, "family": "learned" if family is None else family.kind, "frozen": family is not None,
             "init": parsed.family.name, "block": study.model.block,
             "heads": heads, "sigma": family.param if family is not None and family.kind == "gaussian" else None,
             "kernel_size": study.model.kernel_size, "dim": study.model.dim}

    def measure(model: torch.nn.Module, loaders: Loaders) -> dict:
        trainable = {"trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad)}
        if family is None:
            return trainable | rank_check(model, loaders, study.model.kernel_size, study.model.dim)
        return trainable

    return Run(module=__spec__.name, kind="filter_study", key=(name, f"seed{seed}"), dataset=study.dataset, seed=seed,
               recipe=params.filter_recipe, config=config,
               build=lambda meta: build_model(study.model, variant, heads, meta, seed),
               input_size=lambda meta: model_input(study.model, meta),
               facts=lambda model: facts, measure=measure)


def add_arguments(parser) -> None:
    parser.add_argument("variant", help="learned, learned-<family>, or a frozen filter family: random, softmax, "
                                        "impulse, box-<n>, gaussian-<sigma>, perm, fullperm")
    parser.add_argument("seed", type=int)
    parser.add_argument("--heads", type=int, default=None, help="number of distinct filters (default: one per channel)")


def main(params: Params, args) -> int:
    cell = study_run(params, args.variant, args.seed, args.heads)
    return start(cell, params.data, params.resources, args.relaunch)


if __name__ == "__main__":
    sys.exit(entry.command(__spec__.name, add_arguments, main))

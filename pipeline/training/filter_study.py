"""The filter study's ConvMixer with learned or frozen spatial filters, trained: the cells of `filter_study@` and
`filter_gaussian@` ([CI] Fig. 4 and Table 6). The learned variant also measures the effective rank k of its patch
embeddings and checks Proposition 1, D >= k * f^2."""

from __future__ import annotations

import torch

from pipeline.data.load.loaders import Loaders
from pipeline.data.meta import DatasetMeta
from pipeline.method.convmixer import ConvMixer, build_convmixer
from pipeline.method.filters import effective_rank, patch_embeddings, proposition1_holds
from pipeline.method.names import parse_study_variant
from pipeline.training.run import Run


def model_input(model: dict, meta: DatasetMeta) -> tuple[int, int]:
    return model["img_size"] or meta.image_size, meta.channels


def build_model(model: dict, variant: str, heads: int | None, meta: DatasetMeta, seed: int) -> ConvMixer:
    torch.manual_seed(seed)
    return build_convmixer(variant, dim=model["dim"], depth=model["depth"], kernel_size=model["kernel_size"],
                           patch_size=model["patch_size"], in_chans=meta.channels, num_classes=meta.num_classes,
                           img_size=model_input(model, meta)[0], heads=heads, block=model["block"],
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


def build_run(config: dict) -> Run:
    model, variant, heads, seed = config["model"], config["variant"], config["heads"], config["seed"]
    parsed = parse_study_variant(variant, model["kernel_size"])
    family = None if parsed.learned else parsed.family
    facts = {"variant": variant_name(variant, heads), "family": "learned" if family is None else family.kind,
             "frozen": family is not None, "init": parsed.family.name, "block": model["block"], "heads": heads,
             "sigma": family.param if family is not None and family.kind == "gaussian" else None,
             "kernel_size": model["kernel_size"], "dim": model["dim"]}

    def measure(built: torch.nn.Module, loaders: Loaders) -> dict:
        trainable = {"trainable_params": sum(p.numel() for p in built.parameters() if p.requires_grad)}
        if family is None:
            return trainable | rank_check(built, loaders, model["kernel_size"], model["dim"])
        return trainable

    return Run(config=config, build=lambda meta, device: build_model(model, variant, heads, meta, seed),
               input_size=lambda meta: model_input(model, meta), facts=lambda built: facts, measure=measure)

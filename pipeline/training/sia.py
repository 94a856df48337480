"""[SIA]'s ablations on a grid ViT variant, trained: the cells of `sia_base@` and `sia_fit@` ([SIA] 2404.01139).
Under a fit every other weight keeps PyTorch's default, as code-2404's impulse mode leaves it; `avg_sincos` models
get [SIA]'s fixed sin-cos position embedding."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

from pipeline.data.meta import DatasetMeta
from pipeline.method.inits import apply_init
from pipeline.method.sia import sia_fit, use_sincos_pos_embed
from pipeline.training import builders
from pipeline.training.run import Run


def build(config: dict, meta: DatasetMeta, device: torch.device | str = "cpu") -> tuple[nn.Module, list]:
    generator = torch.Generator().manual_seed(config["seed"])
    torch.manual_seed(config["seed"])
    model = builders.timm_model(SimpleNamespace(**config["model"]), meta)
    apply_init(model, config["arm"], generator=generator, **config["init"])
    if config["arch"] == "avg_sincos":
        use_sincos_pos_embed(model)
    if config["fit"] is None:
        return model, []
    records = sia_fit(model, config["first"], config["later"], shared=config["shared"], generator=generator,
                      device=device, **config["fit"])
    return model, records


def build_run(config: dict) -> Run:
    model_cfg = SimpleNamespace(**config["model"])
    fitted: dict = {}

    def model(meta: DatasetMeta, device: torch.device) -> nn.Module:
        built, fitted["impulse_fit"] = build(config, meta, device)
        return built

    def facts(built: nn.Module) -> dict:
        records = {"impulse_fit": fitted["impulse_fit"]} if config["fit"] is not None else {}
        return builders.model_facts(config["variant"], model_cfg, built) | config["labels"] | records

    return Run(config=config, build=model, input_size=lambda meta: builders.input_size(model_cfg, meta), facts=facts)

"""A timm model of the grid, initialized by an arm and trained: the cells of `train@`, `train_config@`,
`ws_scratch@` and `pretrain@`. Built with `weight_init='skip'`, as the official code builds it, then
`pipeline.method.inits.apply_init`, or an init of your own (params `inits`: `pipeline.method.inits.own`)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from pipeline.method.inits.own import apply_own_init
from pipeline.training import builders
from pipeline.training.run import Run


def initialized(model_cfg, arm: str, options: dict, meta, seed: int, plugin: dict | None = None):
    """`builders.initialized`, or for an init of your own (`plugin`: {function, files}, as its cells' configurations
    record it) the same model built and seeded alike, then initialised by it (`apply_own_init`)."""
    if not plugin:
        return builders.initialized(model_cfg, arm, options, meta, seed)
    torch.manual_seed(seed)  # anything the constructor draws, as builders.initialized seeds it
    model = builders.timm_model(model_cfg, meta)
    return apply_own_init(model, arm, plugin["function"], generator=torch.Generator().manual_seed(seed), **options)


def build_run(config: dict) -> Run:
    model_cfg, seed = SimpleNamespace(**config["model"]), config["seed"]
    return Run(config=config,
               build=lambda meta, device: initialized(model_cfg, config["arm"], config["init"], meta, seed,
                                                      config.get("plugin")),
               input_size=lambda meta: builders.input_size(model_cfg, meta),
               facts=lambda model: builders.model_facts(config["variant"], model_cfg, model) | config["labels"])

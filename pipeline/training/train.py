"""A timm model of the grid, initialized by an arm and trained: the cells of `train@`, `train_config@`,
`ws_scratch@` and `pretrain@`. Built with `weight_init='skip'`, as the official code builds it, then
`pipeline.method.inits.apply_init`."""

from __future__ import annotations

from types import SimpleNamespace

from pipeline.training import builders
from pipeline.training.run import Run


def build_run(config: dict) -> Run:
    model_cfg, seed = SimpleNamespace(**config["model"]), config["seed"]
    return Run(config=config,
               build=lambda meta, device: builders.initialized(model_cfg, config["arm"], config["init"], meta, seed),
               input_size=lambda meta: builders.input_size(model_cfg, meta),
               facts=lambda model: builders.model_facts(config["variant"], model_cfg, model) | config["labels"])

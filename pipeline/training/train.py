"""A timm model of the grid, initialized by an arm and trained: the cells of `train@`, `train_config@`,
`ws_scratch@` and `pretrain@` (the weight-selection teachers).

`build_run(config)` reads the cell's resolved configuration: `model` (a params `models` section, or the teachers'),
`arm` and its `init` options, `seed`, the recipe `train`, the `data` subsets and normalisation, and `labels` (what
metrics.json records beside the model's facts, e.g. the arm, the training configuration or the teacher). The model is
built with `weight_init='skip'` (PyTorch's defaults, as the official code builds it) and the arm's init is applied
seeded (`pipeline.method.inits.apply_init`).
"""

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

"""[CI]'s Simple ViT, initialized by one of its arms and trained: the cells of `ci_alpha@`, `ci_model3@` and
`ci_table1@` (`pipeline.method.simple_vit`, `pipeline.method.ci_2401`). metrics.json records the cell's labels
and, for the impulse arm, the fit per layer (`ci_2401.init_arm`)."""

from __future__ import annotations

import torch

from pipeline.data.meta import DatasetMeta
from pipeline.method.ci_2401 import init_arm
from pipeline.method.simple_vit import SimpleViT
from pipeline.training.run import Run


def input_size(model: dict, meta: DatasetMeta) -> tuple[int, int]:
    return model["image_size"], model["channels"] or meta.channels


def simple_vit(model: dict, meta: DatasetMeta, **attention) -> SimpleViT:
    """The Simple ViT of a model section for this dataset, with PyTorch's default init (drawn from the global RNG)."""
    return SimpleViT(image_size=model["image_size"], patch_size=model["patch_size"], num_classes=meta.num_classes,
                     dim=model["dim"], depth=model["depth"], heads=model["heads"], head_dim=model["head_dim"],
                     mlp_dim=model["mlp_dim"], channels=input_size(model, meta)[1], **attention)


def initialized(config: dict, meta: DatasetMeta, device: torch.device | str = "cpu") -> tuple[SimpleViT, list[dict]]:
    torch.manual_seed(config["seed"])
    model = simple_vit(config["model"], meta, **config["attention"])
    records = init_arm(model, config["arm"], torch.Generator().manual_seed(config["seed"]), device=device,
                       **(config["impulse_fit"] or {}))
    return model, records


def build_run(config: dict) -> Run:
    fitted: dict = {}

    def build(meta: DatasetMeta, device: torch.device) -> SimpleViT:
        model, fitted["impulse_fit"] = initialized(config, meta, device)
        return model

    def facts(model: SimpleViT) -> dict:
        records = {"impulse_fit": fitted["impulse_fit"]} if config["arm"] == "impulse" else {}
        return {"variant": config["variant"], "model": "simple_vit", "family": "vit",
                "num_heads": config["model"]["heads"], "arm": config["arm"]} | config["labels"] | records

    return Run(config=config, build=build, input_size=lambda meta: input_size(config["model"], meta), facts=facts)

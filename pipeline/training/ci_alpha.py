"""`python -m pipeline.training.ci_alpha <dataset> <alpha> <arm> <seed>`: one cell of [CI]'s alpha grid, the stage
`ci_alpha@<dataset>-<alpha>-<arm>-<seed>` (also `python -m pipeline ci-alpha ...`).

[CI] 2401.12511 Tables 3, 4, 5, 7, 8 (paper.md section 2.6) train code-2401's Simple ViT whose attention input is
Z = alpha LN(x) + (1 - alpha) PE for alpha in 0, 0.1, ..., 0.5, with impulse, mimetic and random initial attention.
This stage builds params `ci_alpha.model` (`pipeline.method.simple_vit`), applies the arm
(`pipeline.method.ci_2401`; the impulse fit from `ci_alpha.impulse_fit`, on the run's GPU when it has one), trains
it with the grid's recipe (`train` updated by `ci_alpha.train`) through the shared run skeleton
(`pipeline.training.run`) and writes `results/ci_alpha/<dataset>/alpha<alpha>/<arm>/seed<k>/`. metrics.json records
`alpha`, `arm` and, for the impulse arm, `impulse_fit`: per layer the fit's MSE, the mean weight on the target
key (`target_mass`), the fraction of queries peaking there (`peak`) and the heads' offsets.
"""

from __future__ import annotations

import dataclasses
import sys

import torch

from pipeline import entry
from pipeline.config import CiAlphaConfig, CiModel3Config, ImpulseFitConfig, Params, SimpleVitConfig, TrainConfig
from pipeline.data.meta import DatasetMeta
from pipeline.errors import PipelineError
from pipeline.method.ci_2401 import init_arm
from pipeline.method.simple_vit import SimpleViT
from pipeline.training.run import Run, data_identity, start
from pipeline.vocabulary import CI_ARMS, CI_MODEL3_ARMS, SENSITIVITY_ARM


def parse_alpha(text: str) -> float:
    """alpha as the stage's command line spells it (its results folder keeps that spelling: alpha0.0, alpha0.1)."""
    try:
        alpha = float(text)
    except ValueError:
        raise PipelineError(f"alpha {text!r}: not a number; give one in [0, 1]") from None
    if not 0 <= alpha <= 1:
        raise PipelineError(f"alpha = {text}: must lie in [0, 1] (0: positions only)")
    return alpha


def input_size(cfg: SimpleVitConfig, meta: DatasetMeta) -> tuple[int, int]:
    """(image side, channels) the model takes: the config's, channels null = the dataset's."""
    return cfg.image_size, cfg.channels or meta.channels


def simple_vit(cfg: SimpleVitConfig, meta: DatasetMeta, **attention) -> SimpleViT:
    """The Simple ViT for this dataset, with PyTorch's default init (drawn from the global RNG); `attention` is
    the attention form's arguments (alpha; or attention='model3', value, trainable_qk)."""
    return SimpleViT(image_size=cfg.image_size, patch_size=cfg.patch_size, num_classes=meta.num_classes,
                     dim=cfg.dim, depth=cfg.depth, heads=cfg.heads, head_dim=cfg.head_dim, mlp_dim=cfg.mlp_dim,
                     channels=input_size(cfg, meta)[1], **attention)


def initialized(cfg: SimpleVitConfig, fit: ImpulseFitConfig, meta: DatasetMeta, arm: str, seed: int,
                device: str = "cpu", **attention) -> tuple[SimpleViT, list[dict]]:
    """The cell's model, seeded by `seed`, and its impulse-fit records (see `pipeline.method.ci_2401.init_arm`)."""
    torch.manual_seed(seed)
    model = simple_vit(cfg, meta, **attention)
    records = init_arm(model, arm, torch.Generator().manual_seed(seed), device=device, **dataclasses.asdict(fit))
    return model, records


def simple_vit_cell(module: str, kind: str, key: tuple[str, ...], params: Params, grid: CiAlphaConfig | CiModel3Config,
                    recipe: TrainConfig, dataset: str, arm: str, seed: int, labels: dict, **attention) -> Run:
    """One cell of a [CI] grid on the Simple ViT (`grid`: its params section) as a `Run`: `labels` (the cell's own
    axes) go into its config and metrics.json beside the arm, and so does the impulse arm's fit, per layer;
    `attention` is the model's attention form (see `simple_vit`)."""
    allowed = CI_MODEL3_ARMS if kind == "ci_model3" else CI_ARMS
    if arm not in allowed:
        raise PipelineError(f"arm {arm!r}: [CI]'s grid has the arms {', '.join(allowed)}")
    # Model III's sensitivity arm is the impulse arm fitted as ci_model3.sensitivity_fit says (the other sigma)
    method, fit = ("impulse", grid.sensitivity_fit) if arm == SENSITIVITY_ARM else (arm, grid.impulse_fit)
    config = {"grid": kind, "dataset": dataset, **labels, "arm": arm, "seed": seed,
              "model": dataclasses.asdict(grid.model),
              "impulse_fit": dataclasses.asdict(fit) if method == "impulse" else None,
              "train": dataclasses.asdict(recipe), "data": data_identity(params.data)}
    device = "cuda" if params.resources.device != "cpu" and torch.cuda.is_available() else "cpu"
    fitted: dict = {}

    def build(meta: DatasetMeta) -> SimpleViT:
        model, fitted["impulse_fit"] = initialized(grid.model, fit, meta, method, seed, device, **attention)
        return model

    def facts(model: SimpleViT) -> dict:
        records = {"impulse_fit": fitted["impulse_fit"]} if method == "impulse" else {}
        return {"variant": "ci" if kind == "ci_alpha" else kind, "model": "simple_vit", "family": "vit",
                "num_heads": grid.model.heads, "arm": arm} | labels | records

    return Run(module=module, kind=kind, key=key, dataset=dataset, seed=seed, recipe=recipe, config=config,
               build=build, input_size=lambda meta: input_size(grid.model, meta), facts=facts)


def ci_run(params: Params, dataset: str, alpha_text: str, arm: str, seed: int) -> Run:
    """The grid cell (dataset, alpha, arm, seed) as a `Run`; `alpha_text` names its results folder."""
    alpha = parse_alpha(alpha_text)
    return simple_vit_cell(__spec__.name, "ci_alpha", (dataset, f"alpha{alpha_text}", arm, f"seed{seed}"), params,
                           params.ci_alpha, params.ci_recipe, dataset, arm, seed, {"alpha": alpha}, alpha=alpha)


def add_arguments(parser) -> None:
    parser.add_argument("dataset", help="a dataset of params `ci_alpha.datasets`")
    parser.add_argument("alpha", help="the weight of content in the attention input, in [0, 1]")
    parser.add_argument("arm", choices=CI_ARMS, help="the init arm")
    parser.add_argument("seed", type=int)


def main(params: Params, args) -> int:
    cell = ci_run(params, args.dataset, args.alpha, args.arm, args.seed)
    return start(cell, params.data, params.resources, args.relaunch)


if __name__ == "__main__":
    sys.exit(entry.command(__spec__.name, add_arguments, main))

"""The ConvMixer filter study ([CI] Fig. 4 and Table 6; params `filter_study`), runtime
`pipeline.training.filter_study`: learned vs frozen filter families (`filter_study@`) and the frozen Gaussian
grid over sigma and the number of distinct filters (`filter_gaussian@`)."""

from __future__ import annotations

import dataclasses

from pipeline.experiments import CellStage, data_section

DATA = ("data/${filter_study.dataset}",)
#: what a ConvMixer cell records beyond every run's fields (pipeline.training.filter_study)
RECORDS = ("dataset", "family", "frozen", "heads", "sigma", "kernel_size", "dim", "effective_rank", "prop1_holds",
           "prop1_rhs")


def cell_config(params, variant: str, heads: int | None, seed: str) -> dict:
    study = params.filter_study
    return {"dataset": study.dataset, "seed": int(seed), "variant": variant, "heads": heads,
            "model": dataclasses.asdict(study.model), "train": dataclasses.asdict(params.filter_recipe),
            "data": data_section(params, study.dataset)}


STAGES = [
    CellStage("filter_study", "pipeline.training.filter_study",
              {"variant": "${filter_study.filters}", "seed": "${filter_study.seeds}"},
              "results/filter_study/{variant}/seed{seed}",
              lambda params, cell: cell_config(params, cell["variant"], None, cell["seed"]), DATA,
              command="filter-study", help="one ConvMixer of the filter study: <variant> <seed>", frame="filters",
              records=RECORDS),
    CellStage("filter_gaussian", "pipeline.training.filter_study",
              {"sigma": "${filter_study.gaussian_sigmas}", "heads": "${filter_study.gaussian_heads}",
               "seed": "${filter_study.seeds}"},
              "results/filter_study/gaussian-{sigma}-h{heads}/seed{seed}",
              lambda params, cell: cell_config(params, f"gaussian-{cell['sigma']}", int(cell["heads"]), cell["seed"]),
              DATA, command="filter-gaussian", help="one cell of the Gaussian filter grid: <sigma> <heads> <seed>",
              frame="filters", records=RECORDS,
              keys=lambda c: {"variant": f"gaussian-{c['sigma']}-h{c['heads']}", "seed": int(c["seed"])}),
]

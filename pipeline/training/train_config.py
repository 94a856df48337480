"""`python -m pipeline.training.train_config <dataset> <variant> <config> <arm> <seed>`: one cell of the
training-configuration axis, the stage `train_config@<dataset>-<variant>-<config>-<arm>-<seed>` (also
`python -m pipeline train-config ...`).

[NeurIPS] Fig. 5 and App. F Table 5 (paper.md sections 2.2 and 2.5) train the same model under several training
configurations (lr scaling, repeated augmentation) to show that impulse's lead does not hang on one recipe. Each
named configuration of params `train_configs` is the `train` section with its overrides; this stage trains the grid
cell (dataset, variant, arm, seed) of `train` with it and writes
`results/train_config/<dataset>/<variant>/<config>/<arm>/seed<k>/`. The configuration `train` itself is the grid's
own `train@` cells, so adding a configuration runs only its cells.
"""

from __future__ import annotations

import sys

from pipeline import entry
from pipeline.config import Params
from pipeline.errors import PipelineError
from pipeline.method.names import INIT_METHODS
from pipeline.training.run import Run, start
from pipeline.training.train import train_run


def train_config_run(params: Params, dataset: str, variant: str, config: str, arm: str, seed: int) -> Run:
    """The cell (dataset, variant, config, arm, seed) as a `Run`."""
    if config not in params.train_configs:
        raise PipelineError(f"training configuration {config!r}: not a key of params `train_configs`"
                            f" ({', '.join(params.train_configs) or 'none configured'})")
    if variant not in params.models:
        raise PipelineError(f"variant {variant!r}: not a key of params `models` ({', '.join(params.models)})")
    return train_run(params, dataset, variant, arm, seed, train_config=config, module=__spec__.name)


def add_arguments(parser) -> None:
    parser.add_argument("dataset", help="a dataset of params `datasets`")
    parser.add_argument("variant", help="a model variant: a key of params `models`")
    parser.add_argument("config", help="a training configuration: a key of params `train_configs`")
    parser.add_argument("arm", choices=INIT_METHODS, help="the init method")
    parser.add_argument("seed", type=int)


def main(params: Params, args) -> int:
    cell = train_config_run(params, args.dataset, args.variant, args.config, args.arm, args.seed)
    return start(cell, params.data, params.resources, args.relaunch)


if __name__ == "__main__":
    sys.exit(entry.command(__spec__.name, add_arguments, main))

"""Running an experiment: stage module -> run skeleton -> engine.

- Stage modules (`train`, `filter_study`, `ci_alpha`): one cell of a grid each; their arguments become a `Run`.
- `run`: the skeleton every cell shares (build -> fit -> write outs atomically -> provenance; checkpoint lifecycle).
- `builders`: params -> the grid's initialized models and the loaders. `launch`: torchrun for several processes.
- `engine`: the trainer (timm's optimizer, scheduler, mixup, EMA, AMP; compile; DDP; resume; dvclive).
"""

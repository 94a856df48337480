"""Running a training cell: runtime module -> run skeleton -> engine.

- Runtime modules (`train`, `filter_study`, `simple_vit`, `sia`, `select_finetune`): `build_run(config)` turns a
  cell's resolved configuration (`pipeline.experiments` declares the cells) into a `run.Run`.
- `run`: the skeleton every cell shares (build -> fit -> write outs atomically -> provenance; checkpoint lifecycle).
- `builders`: the grid's initialized timm models. `launch`: torchrun for several processes, the CUDA preflight.
- `engine`: the trainer (timm's optimizer, scheduler, mixup, EMA, AMP; compile; DDP; resume; dvclive).
"""

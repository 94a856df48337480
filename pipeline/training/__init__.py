"""Running a training cell: a runtime module's `build_run(config)` (`train`, `filter_study`, `simple_vit`, `sia`,
`select_finetune`) -> `run`, the skeleton every cell shares -> `engine`, the trainer. `builders` makes the
grid's timm models; `launch` starts torchrun and checks CUDA."""

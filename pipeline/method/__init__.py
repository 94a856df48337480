"""The method as a library: pure functions and modules, tensors in and tensors out; nothing here reads params,
files or DVC, or prints.

- `inits/`: `apply_init(model, method, ...)` on timm ViT/DeiT, Swin and MLP-Mixer, and the attention measures.
- `models`: timm's `create_model` with the project's error messages.
- `convmixer`, `filters`: the filter study's ConvMixer and its spatial filter families ([CI]).
- `simple_vit`, `ci_2401`: [CI]'s Simple ViT with alpha-mixed attention and its three arms, as code-2401 builds them.
"""

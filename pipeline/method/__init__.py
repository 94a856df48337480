"""The method, importable by other researchers: pure functions and modules, tensors in and tensors out.

- `inits/`: `apply_init(model, method, generator=..., **options)`: default, timm, mimetic, impulse and [CI]'s random
  arm on timm ViT/DeiT, Swin and MLP-Mixer; the measures of attention at init (`peak_agreement`, `locality_mass`).
- `models`: `create_timm_model`, timm's factory with the project's error messages.
- `convmixer`, `filters`: the filter study's ConvMixer and its learned or frozen spatial filter families.
- `simple_vit`, `ci_2401`: [CI]'s Simple ViT with the alpha-mixed attention input and its three arms (impulse fit,
  mimetic, random), as code-2401 builds them.

Nothing here reads params, files or DVC, or prints.
"""

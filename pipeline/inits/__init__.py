"""Initialization methods for timm ViT/DeiT, Swin and MLP-Mixer: `apply_init(model, method, ...)`.

(Being written: see issue 8.)
"""

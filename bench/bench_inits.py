"""How fast is apply_init, and is it exact? The fast routes against the official-style (full-SVD) construction.

    .venv/bin/python bench/bench_inits.py                 # ViT-T/S/B, Swin-T/B, Mixer-S/B at 224 px, 2 threads
    .venv/bin/python bench/bench_inits.py --models vit_base_patch16_224 --methods impulse --threads 1
    .venv/bin/python bench/bench_inits.py --figures       # also the measures quoted in the report
    .venv/bin/python bench/bench_inits.py --diagnostics   # only the Mixer/Swin init diagnostics (issue 20)

Speed. For every model and method, the whole `apply_init(model, method)` is timed twice in this process, on the
same draws (same seed): as shipped (the fast routes of `pipeline.method.inits.lowrank`: symmetric eigen-solves, a
partial eigensolver for the top head_dim triplets, the impulse Q/K in the pseudo-input's rank-r subspace) and
inside `lowrank.official_route()` (code-2505's construction: a full D x D SVD for every factorisation, the
impulse's D x D pseudo-inverse route; all float64). Each is the best of `--repeat` runs; the ratio is
official / fast. Both include what the routes share (PyTorch's default draws, the impulse targets), so the
ratio is that of what a user waits for. Timings on a shared machine are noisy: compare ratios within one run.

Exactness (same draws): the largest difference between the two routes' models, relative to the largest entry,
of every head's W_q^T W_k, every layer's value-then-proj matrix, and every parameter (factors, biases: the
routes fix singular-vector signs the same way), over all layers.

`--figures` prints peak agreement / locality mass per head (pseudo-input, and Fashion-MNIST test images when
Debian's mirror is present) for the default, mimetic and impulse arms of: the CPU default ViT (28 px, patch 4),
ViT-Tiny/16-224 (images upscaled; 1 channel with the dataset's mean/std, and 3 channels with ImageNet's as in
the issue's reference), a two-stage Swin-T at 56 px, Mixer-S/16 and Mixer-B/16 at 224, and the CPU-scale Mixer
(28 px, patch 4, 6 blocks, embed_dim 96 and 128).

`--diagnostics` prints, on Fashion-MNIST test images (one thread, seed 0), `init_diagnostics` and the 3x3
locality mass of every Mixer construction (impulse.mixer filter / shift, mimetic.mixer default_gain / exact) and
default on the cpu-claims Mixer (28 px, patch 4, 6 blocks, embed_dim 96; 4 images) and Mixer-S/16 at 224 (2 images
upscaled), and of Swin's arms on the cpu-claims Swin (28 px, patch 2, depths (2, 2), window 7; 4 images).
"""

from __future__ import annotations

import argparse
import gzip
import os
import platform
import time
from pathlib import Path

import numpy as np
import timm
import torch
import torch.nn.functional as F
from timm.models.mlp_mixer import MlpMixer

from pipeline.method.inits import (
    apply_init,
    attention_maps,
    init_diagnostics,
    layer_offsets,
    locality_mass,
    mixing_grid,
    peak_agreement,
)
from pipeline.method.inits.arch import attention_layers, family
from pipeline.method.inits.lowrank import official_route

FMNIST = Path("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")
MODELS = (
    "vit_tiny_patch16_224",
    "vit_small_patch16_224",
    "vit_base_patch16_224",
    "swin_tiny_patch4_window7_224",
    "swin_base_patch4_window7_224",
    "mixer_s16_224",
    "mixer_b16_224",
)


def best_time(fn, repeat: int):
    """(best wall seconds, last result) of `repeat` calls."""
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def products(model: torch.nn.Module) -> list[torch.Tensor]:
    """Per attention layer: the heads' W_q,h^T W_k,h (H, D, D) and the value-then-proj matrix (D, D), float64."""
    out = []
    for attn in attention_layers(model, family(model)):
        dim, heads = attn.qkv.in_features, attn.num_heads
        w = attn.qkv.weight.detach().double().view(3, heads, dim // heads, dim)
        out += [w[0].mT @ w[1], w[2].reshape(dim, dim).T @ attn.proj.weight.detach().double().T]
    return out


def relative_gap(fast: list[torch.Tensor], slow: list[torch.Tensor]) -> float:
    """max over pairs of float tensors of max |a - b| / max |b| (all-zero tensors: max |a|)."""
    gaps = [((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30)).item()
            for a, b in zip(fast, slow) if b.is_floating_point()]  # fmt: skip
    return max(gaps)


def build(name: str) -> torch.nn.Module:
    """A timm model with PyTorch-default construction (Mixers take no weight_init)."""
    return timm.create_model(name, pretrained=False, **({} if name.startswith("mixer") else {"weight_init": "skip"}))


def compare(name: str, method: str, repeat: int) -> None:
    """One table row: both routes' best times, the ratio, and the routes' largest differences."""
    model = build(name)
    t_fast, _ = best_time(lambda: apply_init(model, method, generator=0), repeat)
    fast = {k: v.clone() for k, v in model.state_dict().items()}
    fast_products = products(model)
    with official_route():
        t_slow, _ = best_time(lambda: apply_init(model, method, generator=0), repeat)
    slow = model.state_dict()
    line = f"  {name:<30} {method:<8} fast {t_fast:7.2f} s   official-style {t_slow:7.2f} s   {t_slow / t_fast:5.1f}x"
    if fast_products:
        line += f"   |dQK|,|dVP| {relative_gap(fast_products, products(model)):.0e}"
    print(f"{line}   |dparams| {relative_gap([fast[k] for k in slow], list(slow.values())):.0e}", flush=True)


def speed(models: list[str], methods: list[str], repeat: int) -> None:
    cpu = platform.processor() or platform.machine()
    print(f"apply_init, fast vs official-style route, best of {repeat}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s), {cpu}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f} (shared machine: compare ratios)", flush=True)  # fmt: skip
    for name in models:
        for method in methods:
            compare(name, method, repeat)


def fmnist(n: int = 16) -> torch.Tensor | None:
    """n Fashion-MNIST test images from Debian's mirror, normalised; None when absent."""
    if not FMNIST.exists():
        return None
    with gzip.open(FMNIST) as file:
        raw = np.frombuffer(file.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)[:n]
    return (torch.from_numpy(raw.copy()).float() / 255 - 0.2860) / 0.3530


def measure_rows(label: str, build, images: torch.Tensor | None, layers=(0,)) -> None:
    """Per-head peak agreement and locality mass of the default, mimetic and impulse arms."""
    for arm in ("default", "mimetic", "impulse"):
        model = apply_init(build(), arm, generator=0)
        for source, x in (("pseudo", None), ("images", images)):
            if source == "images" and x is None:
                continue
            maps = attention_maps(model, x, layers)
            for layer, m in maps.items():
                grid = mixing_grid(model, layer)
                peak = peak_agreement(m, layer_offsets(model)[layer], grid).tolist()
                mass = locality_mass(m, grid, 3).tolist()
                print(f"  {label:<22} {arm:<8} {source:<7} L{layer}  peak {fmt(peak)}  mass {fmt(mass)}")


def fmt(values) -> str:
    return "/".join(f"{v:.2f}" for v in values)


def figures() -> None:
    """The measures quoted in the report (see module doc)."""
    images = fmnist()
    up = lambda size: None if images is None else F.interpolate(images, size=size, mode="bilinear")  # noqa: E731
    vit = lambda **kw: timm.create_model("vit_tiny_patch16_224", pretrained=False, weight_init="skip",  # noqa: E731
                                         in_chans=1, num_classes=10, **kw)  # fmt: skip
    print("peak agreement / locality mass (3x3) per head; images = 16 Fashion-MNIST test images")
    measure_rows("ViT 28px p4 (CPU)", lambda: vit(img_size=28, patch_size=4, embed_dim=96, depth=6), images)
    measure_rows("ViT-T/16-224", vit, up(224))
    if images is not None:  # the reference setup: 3 channels, ImageNet mean/std (grey images -> RGB)
        mean, std = torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225])
        rgb = (up(224) * 0.3530 + 0.2860).expand(-1, 3, -1, -1)
        rgb = (rgb - mean[:, None, None]) / std[:, None, None]
        build = lambda: timm.create_model("vit_tiny_patch16_224", pretrained=False, weight_init="skip")  # noqa: E731
        measure_rows("ViT-T/16-224 RGB/INet", build, rgb)
    swin = lambda: timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, weight_init="skip",  # noqa: E731
                                     img_size=56, embed_dim=48, depths=(2, 2), num_heads=(3, 6),
                                     in_chans=1)  # fmt: skip
    measure_rows("Swin-T 56px (2 stages)", swin, up(56)[:4] if images is not None else None, layers=(0, 1))
    for name in ("mixer_s16_224", "mixer_b16_224"):
        build = lambda n=name: timm.create_model(n, pretrained=False, in_chans=1, num_classes=10)  # noqa: E731
        measure_rows(name, build, up(224)[:2] if images is not None else None, layers=(0, 1))
    for dim in (96, 128):  # the CPU-scale Mixer: mixer_s16_224's recipe on 28 px, patch 4, 6 blocks
        build = lambda d=dim: MlpMixer(img_size=28, patch_size=4, num_blocks=6, embed_dim=d, mlp_ratio=(0.5, 4.0),  # noqa: E731
                                       in_chans=1, num_classes=10)  # fmt: skip
        measure_rows(f"Mixer 28px p4 e{dim}", build, images, layers=(0, 1, 5))


#: (arm, options) of the diagnostics: default, and each Mixer construction of impulse and mimetic
CONSTRUCTIONS = (("default", {}), ("impulse", {"mixer": "filter"}), ("impulse", {"mixer": "shift"}),
                 ("mimetic", {"mixer": "default_gain"}), ("mimetic", {"mixer": "exact"}))


def span(values) -> str:
    return f"{min(values):.2f}-{max(values):.2f}"


def diagnostics() -> None:
    """The init diagnostics of the Mixer constructions and Swin (see module doc)."""
    images = fmnist()
    if images is None:
        raise SystemExit(f"{FMNIST} absent (Debian's dataset-fashion-mnist)")
    cpu_mixer = lambda: MlpMixer(img_size=28, patch_size=4, num_blocks=6, embed_dim=96, mlp_ratio=(0.5, 4.0),  # noqa: E731
                                 in_chans=1, num_classes=10)  # fmt: skip
    s16 = lambda: timm.create_model("mixer_s16_224", pretrained=False, in_chans=1, num_classes=10)  # noqa: E731
    swin = lambda: timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, weight_init="skip",  # noqa: E731
                                     img_size=28, patch_size=2, embed_dim=48, depths=(2, 2), num_heads=(3, 6),
                                     window_size=7, in_chans=1, num_classes=10)  # fmt: skip
    up = F.interpolate(images[:2], size=224, mode="bilinear")
    print("linear = fraction of token-MLP units in GELU's linear regime (range over blocks); ratio = token branch /"
          " residual RMS per block; trunk = last block's output RMS; local = 3x3 locality mass, pseudo-input (range"
          " over blocks) and images (first / last block)")
    for label, build, x in (("cpu-claims Mixer", cpu_mixer, images[:4]), ("Mixer-S/16 224", s16, up),
                            ("cpu-claims Swin", swin, images[:4])):
        is_swin = label.endswith("Swin")
        for arm, options in ((a, {}) for a in ("default", "impulse", "mimetic")) if is_swin else CONSTRUCTIONS:
            model = apply_init(build(), arm, generator=0, **options)
            found = init_diagnostics(model, x)
            depth = len(found["branch_ratio"])
            pseudo = attention_maps(model, None, tuple(range(depth)))
            real = attention_maps(model, x[:1], (0, depth - 1))
            mass = lambda m, layer, model=model: locality_mass(m, mixing_grid(model, layer), 3).mean().item()  # noqa: E731
            linear = found["linear_fraction"]
            name = f"{arm} {options.get('mixer', '')}".strip()
            print(f"  {label:<17} {name:<20} linear {span(linear) if linear else '-':<9}  ratio "
                  f"{' '.join(f'{r:.2f}' for r in found['branch_ratio'])}  trunk {found['trunk_rms']:.2f}  local "
                  f"{span([mass(m, k) for k, m in pseudo.items()])} / {mass(real[0], 0):.2f} "
                  f"{mass(real[depth - 1], depth - 1):.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), help="timm model names")
    parser.add_argument("--methods", nargs="+", default=["impulse", "mimetic"], help="init methods")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (the machine has 2 cores)")
    parser.add_argument("--repeat", type=int, default=3, help="timings are the best of this many runs")
    parser.add_argument("--figures", action="store_true", help="also print the measures of the report")
    parser.add_argument("--diagnostics", action="store_true", help="only the Mixer/Swin init diagnostics (1 thread)")
    args = parser.parse_args()
    if args.diagnostics:
        torch.set_num_threads(1)
        return diagnostics()
    torch.set_num_threads(args.threads)
    speed(args.models, args.methods, args.repeat)
    if args.figures:
        figures()


if __name__ == "__main__":
    main()

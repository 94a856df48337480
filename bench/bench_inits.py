"""How fast and how exact is the impulse construction? Ours against code-2505's straightforward one.

    .venv/bin/python bench/bench_inits.py                      # ViT-B/16-224 (12 layers x 12 heads), 2 threads
    .venv/bin/python bench/bench_inits.py --threads 1 --model vit_small_patch16_224
    .venv/bin/python bench/bench_inits.py --figures            # also the measures quoted in the report

Speed. For every layer of the model, the impulse Q/K are built twice from the *same* targets M_h
(`impulse_targets`, timed on its own): by `impulse_qk`, which works in the rank-r subspace of the layer-normed
position embedding (one N x D SVD per model, one r x r SVD per head), and by the straightforward transcription
of code-2505 (an eigen-solve of the D x D P^T P, the D x D A_h = P_inv M_h P_inv^T, a D x D SVD per head, in
float32 as the official code runs). Both are timed in this process, best of `--repeat`, then the full
`apply_init(model, 'impulse')` (PyTorch defaults for all weights, impulse Q/K, V/proj SVDs). Exactness: the max
|difference| between the two constructions' logits and attention maps on the pseudo-input
softmax(norm_q^2 P Q_h K_h P^T / sqrt(head_dim)), P = LayerNorm(pe), over every layer and head.

`--figures` prints peak agreement / locality mass per head (pseudo-input, and Fashion-MNIST test images when
Debian's mirror is present) for the default, mimetic and impulse arms of: the CPU default ViT (28 px, patch 4),
ViT-Tiny/16-224 (images upscaled; 1 channel with the dataset's mean/std, and 3 channels with ImageNet's as in
the issue's reference), a two-stage Swin-T at 56 px, and Mixer-S/16 and Mixer-B/16 at 224.
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

from pipeline.inits import apply_init, attention_maps, layer_offsets, locality_mass, mixing_grid, peak_agreement
from pipeline.inits.arch import patch_pos_embed
from pipeline.inits.impulse import impulse_qk, impulse_targets, pseudo_inverse
from pipeline.inits.mimetic import ortho_like

FMNIST = Path("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")
NORM_Q = 7.0


def best_time(fn, repeat: int):
    """(best wall seconds, last result) of `repeat` calls."""
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def straightforward_qk(pe: torch.Tensor, targets: torch.Tensor, rank: int) -> torch.Tensor:
    """code-2505's impulse_init, transcribed (float32, D x D): the products Q_h K_h, (H, D, D)."""
    p = F.layer_norm(pe.float(), [pe.shape[-1]])
    u, s, v = torch.svd(p.T @ p)
    s_inv = torch.zeros_like(s)
    s_inv[:rank] = 1 / s[:rank]
    p_inv = v @ torch.diag(s_inv) @ u.T @ p.T
    a = p_inv @ targets.float() @ p_inv.T
    u, s, v = torch.svd(a)
    q = u[..., :rank] * s[..., None, :rank].sqrt()
    k = (v[..., :rank] * s[..., None, :rank].sqrt()).transpose(-1, -2)
    return (q / q.norm(dim=(-2, -1), keepdim=True)) @ (k / k.norm(dim=(-2, -1), keepdim=True))


def pseudo_maps(pe: torch.Tensor, products: torch.Tensor, head_dim: int):
    """Logits and attention of every head on the pseudo-input, float64."""
    p = F.layer_norm(pe.double(), [pe.shape[-1]])
    logits = NORM_Q**2 * p @ products.double() @ p.T / head_dim**0.5
    return logits, logits.softmax(-1)


def speed(name: str, repeat: int) -> None:
    """The speed/exactness table for one timm ViT."""
    model = timm.create_model(name, pretrained=False, weight_init="skip")
    apply_init(model, "default", generator=0, norm_p=18.0)
    pe, grid = patch_pos_embed(model).detach(), tuple(model.patch_embed.grid_size)
    heads, depth, dim = model.blocks[0].attn.num_heads, len(model.blocks), model.embed_dim
    head_dim = dim // heads
    offsets = layer_offsets(model)

    def make_targets():
        gen = torch.Generator().manual_seed(0)
        return [impulse_targets(o, grid, scale=1000.0, noise_std=0.6, generator=gen) for o in offsets]

    def ours():
        pinv = pseudo_inverse(pe, head_dim)
        return [impulse_qk(pinv, t) for t in targets]

    t_targets, targets = best_time(make_targets, repeat)
    t_ours, fast = best_time(ours, repeat)
    t_straight, slow = best_time(lambda: [straightforward_qk(pe, t, head_dim) for t in targets], 1)
    diffs = [(a - b).abs().max().item() for (q, k), s in zip(fast, slow)
             for a, b in zip(pseudo_maps(pe, q @ k, head_dim), pseudo_maps(pe, s, head_dim))]  # fmt: skip
    gen = torch.Generator().manual_seed(0)
    t_value, _ = best_time(lambda: [ortho_like(dim, 0.4, 0.4, -1, gen) for _ in range(depth)], 1)
    t_default, _ = best_time(lambda: apply_init(model, "default", generator=0), 1)
    t_apply, _ = best_time(lambda: apply_init(model, "impulse", generator=0), 1)
    cpu = platform.processor() or platform.machine()
    print(f"{name}: {depth} layers x {heads} heads, N = {grid[0] * grid[1]}, D = {dim}, r = {head_dim}; "
          f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {cpu}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"  impulse Q/K, all layers: targets M_h                {t_targets:8.3f} s")
    print(f"    + ours (rank-r pseudo-inverse route)              {t_ours:8.3f} s  = {t_targets + t_ours:.3f} s")
    print(f"    + straightforward (code-2505's D x D route)       {t_straight:8.3f} s  = "
          f"{t_targets + t_straight:.3f} s  ({t_straight / t_ours:.0f}x ours)")
    print(f"    max |logit difference| {max(diffs[0::2]):.1e}, max |attention-map difference| {max(diffs[1::2]):.1e}")
    print(f"  whole apply_init(model, 'impulse')                  {t_apply:8.3f} s, of which")
    print(f"    PyTorch defaults of all weights (= 'default' arm) {t_default:8.3f} s")
    print(f"    V/proj get_ortho_like, one D x D SVD per layer    {t_value:8.3f} s")


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="vit_base_patch16_224", help="a timm ViT name")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the machine has 2 cores)")
    parser.add_argument("--repeat", type=int, default=3, help="timings are the best of this many runs")
    parser.add_argument("--figures", action="store_true", help="also print the measures of the report")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    speed(args.model, args.repeat)
    if args.figures:
        figures()


if __name__ == "__main__":
    main()

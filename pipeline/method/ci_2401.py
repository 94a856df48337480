"""[CI]'s three arms on the Simple ViT (`simple_vit`), M'_I or Model III, with code-2401's laws.

Source: code-2401 (osiriszjq/impulse_init @154e3fb) `vit.py` (`impulse_init`, `Attention.__init__`) with `vit_pex.sh`'s
init strings. Each head's Q/K factors are written into `to_qk`; V and the output projection keep PyTorch's default.

- `impulse` (`impulse16_64_5_0.1_100`): per layer and head a uniform offset in the f x f window; Q, K drawn
  U(+-sqrt(1/(d h))) and fitted by Adam so that softmax(sigma PE Q K^T PE^T) matches the impulse matrices in MSE,
  columns renormalised every `renorm_every` steps. The layer's softmax scale becomes sigma.
- `mimetic` (`mimetic512_64`): the top-d SVD factors of 0.7 sqrt(1/D) U(-1, 1) + 0.7 I per head.
- `random` (`random512_64`): Q, K ~ sqrt(1/D) U(-1, 1), the law PyTorch's default already gives `to_qk`.

Model III takes the same laws with the N x N identity in place of PE (code-2401: `impulse16_{r}_5_1.0_{eta}`,
`mimetic{N}_{d}`, `random{N}_{d}`). Deliberate differences: draws come from the caller's generator (code-2401:
the global RNG, interleaved with construction), and the fit runs on the device given.
"""

from __future__ import annotations

import torch
from torch import Tensor

from pipeline.errors import PipelineError
from pipeline.method.inits.geometry import shifted_index
from pipeline.method.inits.rng import uniform
from pipeline.method.inits.targets import impulse_matrices
from pipeline.method.names import CI_ARMS
from pipeline.method.options import CI_FIT
from pipeline.method.simple_vit import FixedAttention, MixedAttention, SimpleViT


def window_offsets(heads: int, window: int, generator: torch.Generator) -> list[tuple[int, int]]:
    """One (dy, dx) per head, uniform over the window x window kernel (code-2401: k = randint(0, f^2))."""
    k = torch.randint(0, window**2, (heads,), generator=generator)
    return [(int(i) // window - window // 2, int(i) % window - window // 2) for i in k]


def fit_quality(maps: Tensor, offsets: list[tuple[int, int]], grid: tuple[int, int]) -> dict:
    """How well (heads, N, N) softmax maps hold their impulses: the mean weight on the target key and the fraction of
    queries whose largest weight is there."""
    mass, peak = [], []
    for h, offset in enumerate(offsets):
        keys = shifted_index(grid, offset)
        inside = keys >= 0
        rows = maps[h][inside]
        mass.append(rows.gather(1, keys[inside, None]).mean())
        peak.append((rows.argmax(-1) == keys[inside]).double().mean())
    return {"target_mass": float(torch.stack(mass).mean()), "peak": float(torch.stack(peak).mean())}


def fit_impulse_qk(pe: Tensor, targets: Tensor, rank: int, *, steps: int, lr: float, sigma: float,
                   renorm_every: int, generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """code-2401's `impulse_init` fit: Q (h, D, rank), K (h, rank, D) with softmax(sigma PE Q K PE^T) ~ targets; returns
    Q, K and the fitted maps (h, N, N), on `pe`'s device."""
    heads, dim = targets.shape[0], pe.shape[1]
    bound = (1.0 / (rank * heads)) ** 0.5
    q = uniform((heads, dim, rank), bound, generator).float().to(pe.device).requires_grad_()
    k = uniform((heads, rank, dim), bound, generator).float().to(pe.device).requires_grad_()
    norm = q.detach().norm(dim=1).mean()
    optimizer = torch.optim.Adam([q, k], lr=lr)

    def maps() -> Tensor:
        return torch.softmax(pe @ q @ k @ pe.T * sigma, dim=-1)

    with torch.enable_grad():
        for step in range(steps):
            if step % renorm_every == 0:
                with torch.no_grad():
                    q.div_(q.norm(dim=1, keepdim=True) / norm)
                    k.div_(k.norm(dim=1, keepdim=True) / norm)
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(maps(), targets).backward()
            optimizer.step()
    with torch.no_grad():
        return q.detach(), k.detach(), maps()


def mimetic_factors(heads: int, dim: int, rank: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """code-2401's `mimetic{D}_{d}`: the top-`rank` SVD factors of 0.7 sqrt(1/D) U(-1, 1) + 0.7 I, per head."""
    w = 0.7 * uniform((heads, dim, dim), dim**-0.5, generator) + 0.7 * torch.eye(dim, dtype=torch.float64)
    u, s, vh = torch.linalg.svd(w)
    root = s[:, :rank].sqrt()
    return u[:, :, :rank] * root[:, None, :], root[:, :, None] * vh[:, :rank, :]


@torch.no_grad()
def write_qk(attn: MixedAttention | FixedAttention, q: Tensor, k: Tensor) -> None:
    """Write per-head factors Q (h, D, d), K (h, d, D) into the layer: Model III's own Q, K, or M'_I's `to_qk`."""
    if isinstance(attn, FixedAttention):
        attn.q.copy_(q)
        attn.k.copy_(k)
        return
    inner = attn.heads * attn.head_dim
    attn.to_qk.weight[:inner] = q.transpose(1, 2).reshape(inner, -1).to(attn.to_qk.weight)
    attn.to_qk.weight[inner:] = k.reshape(inner, -1).to(attn.to_qk.weight)


def init_arm(model: SimpleViT, arm: str, generator: torch.Generator, *, steps: int = CI_FIT.steps,
             lr: float = CI_FIT.lr, sigma: float = CI_FIT.sigma, renorm_every: int = CI_FIT.renorm_every,
             window: int = CI_FIT.window, device: torch.device | str = "cpu") -> list[dict]:
    """Initialise every attention layer of `model` by `arm` over PyTorch's default (the impulse fit: code-2401's `FIT`,
    `MODEL3_SIGMA`); returns per layer of the impulse arm {layer, mse, target_mass, peak, offsets}, else []."""
    if arm not in CI_ARMS:
        raise PipelineError(f"arm {arm!r}: [CI]'s grid has the arms {', '.join(CI_ARMS)}")
    if arm == "impulse" and window > model.grid * 2 - 1:
        raise PipelineError(f"impulse window {window} is wider than the {model.grid}x{model.grid} token grid allows")
    if arm == "random":
        return []
    grid = (model.grid, model.grid)
    model3 = model.attention == "model3"
    pe = (torch.eye(model.grid**2) if model3 else model.pos_embedding).float().to(device)
    dim = pe.shape[1]
    records = []
    for layer, block in enumerate(model.blocks):
        attn = block.attn
        if arm == "mimetic":
            write_qk(attn, *mimetic_factors(attn.heads, dim, attn.head_dim, generator))
            continue
        offsets = window_offsets(attn.heads, window, generator)
        targets = impulse_matrices(offsets, grid).float().to(device)
        q, k, maps = fit_impulse_qk(pe, targets, attn.head_dim, steps=steps, lr=lr, sigma=sigma,
                                    renorm_every=renorm_every, generator=generator)
        write_qk(attn, q, k)
        attn.scale = sigma
        records.append({"layer": layer, "mse": float(torch.nn.functional.mse_loss(maps, targets))}
                       | fit_quality(maps.cpu(), offsets, grid) | {"offsets": [list(o) for o in offsets]})
    return records

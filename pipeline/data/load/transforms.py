"""The recipe's augmentations: timm's `create_transform` (`pil`, per image) or a batched `tensor` equivalent for the
light recipe (crop, flip, RandomErasing) on uint8 tensor datasets, one `grid_sample` per batch on the device.
Deliberate difference from timm: bilinear without antialiasing, identical when the crop is enlarged (every recipe
the papers publish), so `auto` picks it only when img_size >= the native size. Evaluation is timm's eval
transform batched (`eval_crop`), within one 8-bit level. Grayscale into a 3-channel model is replicated; RGB
into 1 channel takes ITU-R 601-2 luma, as PIL's `convert('L')`."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageOps
from timm.data import create_transform
from timm.data.auto_augment import RandAugment
from timm.data.random_erasing import RandomErasing
from torchvision.transforms import Compose
from torchvision.transforms.v2 import functional as TF

from pipeline.errors import PipelineError

#: ITU-R 601-2 luma weights, as PIL's convert('L') uses them.
LUMA = (0.299, 0.587, 0.114)
BACKENDS = ("auto", "tensor", "pil")


@dataclass
class Augment:
    """Training augmentation and evaluation crop, by timm's names; the fields mirror params `train` and default to
    timm's train.py (which code-2505's recipes run)."""

    scale: tuple = (0.08, 1.0)  #: RandomResizedCrop area range
    ratio: tuple = (3 / 4, 4 / 3)  #: RandomResizedCrop aspect-ratio range
    hflip: float = 0.5
    aa: str | None = None  #: timm RandAugment policy, e.g. 'rand-m9-mstd0.5-inc1' (needs the pil back-end)
    reprob: float = 0.0  #: RandomErasing probability
    remode: str = "pixel"
    color_jitter: float | None = None  #: timm disables it whenever `aa` is set (`transforms_imagenet_train`)
    crop_pct: float = 0.875  #: evaluation: resize to img_size / crop_pct, centre-crop img_size
    aug_repeats: float = 0  #: repeated augmentation (DeiT): timm's RepeatAugSampler when > 0
    train_interpolation: str = "random"  #: timm train.py's default; the tensor back-end is always bilinear
    eval_interpolation: str = "bicubic"  #: timm's value for ViTs (their pretrained config)
    backend: str = "auto"  #: 'auto', 'tensor' or 'pil' (see the module docstring)

    def __post_init__(self):
        self.scale, self.ratio = tuple(self.scale), tuple(self.ratio)

    @classmethod
    def from_train(cls, train, **overrides) -> Augment:
        values = {f.name: getattr(train, f.name) for f in fields(cls) if hasattr(train, f.name)}
        return cls(**{**values, **overrides})

    @property
    def light(self) -> bool:
        """No RandAugment and no colour jitter: what the batched tensor back-end can do."""
        return not self.aa and not self.color_jitter


def channel_stats(mean: tuple, std: tuple, in_chans: int) -> tuple[tuple, tuple]:
    """Per-channel mean/std for an `in_chans`-channel model: one value into 3 channels repeats it; RGB into 1 takes the
    luma-weighted mean and std (exact for perfectly correlated channels, an upper bound otherwise)."""
    if len(mean) == in_chans:
        return tuple(mean), tuple(std)
    if len(mean) == 1 and in_chans == 3:
        return tuple(mean) * 3, tuple(std) * 3
    if len(mean) == 3 and in_chans == 1:  # RGB statistics (the dataset's or ImageNet's) for a gray model
        return (sum(w * m for w, m in zip(LUMA, mean)),), (sum(w * s for w, s in zip(LUMA, std)),)
    raise ValueError(f"in_chans = {in_chans}: data with {len(mean)} channel(s) feeds 1- or 3-channel models only")


def resolve_backend(augment: Augment, *, in_memory: bool, img_size: int, native_size: int) -> str:
    if augment.backend not in BACKENDS:
        raise ValueError(f"augment backend {augment.backend!r}: allowed are {', '.join(BACKENDS)}")
    if augment.backend == "tensor" and not (in_memory and augment.light):
        raise PipelineError("augment backend 'tensor' needs an in-memory dataset and no RandAugment or colour "
                            "jitter (train.aa, train.color_jitter); use 'auto' or 'pil'")
    if augment.backend != "auto":
        return augment.backend
    return "tensor" if in_memory and augment.light and img_size >= native_size else "pil"


class ConvertMode:

    def __init__(self, mode: str):
        self.mode = mode

    def __call__(self, image: Image.Image) -> Image.Image:
        return image if image.mode == self.mode else image.convert(self.mode)

    def __repr__(self) -> str:
        return f"ConvertMode({self.mode!r})"


def posterize_any_bits(img: Image.Image, bits_to_keep: int, **_) -> Image.Image:
    """timm's posterize, keeping 0 bits as older Pillow did (a black image): Pillow >= 13 raises there, and 'inc1' at
    magnitude 10 asks for it, so the paper's policy would crash mid-training."""
    if bits_to_keep >= 8:
        return img
    if bits_to_keep <= 0:
        return Image.new(img.mode, img.size)
    return ImageOps.posterize(img, bits_to_keep)


def pil_transform(*, img_size: int, in_chans: int, mean: tuple, std: tuple, training: bool,
                  augment: Augment) -> Compose:
    if training:
        tf = create_transform(
            img_size, is_training=True, scale=augment.scale, ratio=augment.ratio, hflip=augment.hflip,
            auto_augment=augment.aa or None, color_jitter=augment.color_jitter or None,
            interpolation=augment.train_interpolation, mean=mean, std=std, re_prob=augment.reprob,
            re_mode=augment.remode,
        )
        for op in (t for t in tf.transforms if isinstance(t, RandAugment)):
            for aug in op.ops:
                if aug.name.startswith("Posterize"):
                    aug.aug_fn = posterize_any_bits
    else:
        tf = create_transform(img_size, is_training=False, interpolation=augment.eval_interpolation,
                              crop_pct=augment.crop_pct, mean=mean, std=std)
    return Compose([ConvertMode("L" if in_chans == 1 else "RGB"), *tf.transforms])


def to_channels(x: torch.Tensor, in_chans: int) -> torch.Tensor:
    if x.shape[1] == in_chans:
        return x
    if x.shape[1] == 1:
        return x.expand(-1, in_chans, -1, -1)
    return (x * torch.tensor(LUMA, device=x.device).view(1, 3, 1, 1)).sum(dim=1, keepdim=True)


def sample_crops(n: int, height: int, width: int, scale: tuple, ratio: tuple, attempts: int = 10,
                 device: torch.device | str = "cpu"):
    """Crop boxes (top, left, h, w) for `n` images by torchvision's `RandomResizedCrop.get_params`, vectorised: first
    fitting draw of `attempts`, else torchvision's fallback; drawn on `device` without a host sync."""
    area = torch.empty(n, attempts, device=device).uniform_(*scale) * (height * width)
    aspect = torch.empty(n, attempts, device=device).uniform_(math.log(ratio[0]), math.log(ratio[1])).exp()
    w, h = (area * aspect).sqrt().round(), (area / aspect).sqrt().round()
    fits = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = fits.int().argmax(dim=1, keepdim=True)
    w, h = w.gather(1, first).squeeze(1), h.gather(1, first).squeeze(1)
    top = (torch.rand(n, device=device) * (height - h + 1)).floor()
    left = (torch.rand(n, device=device) * (width - w + 1)).floor()
    none = ~fits.any(dim=1)
    fh, fw = fallback_crop(height, width, ratio)
    w, h = torch.where(none, float(fw), w), torch.where(none, float(fh), h)
    top, left = torch.where(none, float((height - fh) // 2), top), torch.where(none, float((width - fw) // 2), left)
    return top, left, h, w


def fallback_crop(height: int, width: int, ratio: tuple) -> tuple[int, int]:
    """torchvision's (h, w) when no draw fits: the whole image, cut to the nearest allowed aspect ratio."""
    in_ratio = width / height
    if in_ratio < ratio[0]:
        return round(width / ratio[0]), width
    if in_ratio > ratio[1]:
        return height, round(height * ratio[1])
    return height, width


def resized_crops(images: torch.Tensor, boxes, flips: torch.Tensor, size: int) -> torch.Tensor:
    """Crop each image to its box, resize to `size` (bilinear, half-pixel centres) and flip where asked: torchvision's
    `resized_crop(..., antialias=False)` and `hflip` in one `grid_sample`."""
    top, left, h, w = boxes
    height, width = images.shape[2:]
    centres = (torch.arange(size, device=images.device) * 2 + 1) / size - 1  # output pixel centres in [-1, 1]
    scale_x = (w / width * (1 - 2 * flips.float()))[:, None]
    gx = ((2 * left + w) / width - 1)[:, None] + scale_x * centres
    gy = ((2 * top + h) / height - 1)[:, None] + (h / height)[:, None] * centres
    # Like interpolate on the cropped image, never blend in pixels outside the box: clamp to its pixel centres.
    gx = gx.clamp(((2 * left + 1) / width - 1)[:, None], ((2 * (left + w) - 1) / width - 1)[:, None])
    gy = gy.clamp(((2 * top + 1) / height - 1)[:, None], ((2 * (top + h) - 1) / height - 1)[:, None])
    grid = torch.stack(torch.broadcast_tensors(gx[:, None, :], gy[:, :, None]), dim=-1)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="border", align_corners=False)


def random_resized_crops(x: torch.Tensor, size: int, augment: Augment) -> torch.Tensor:
    boxes = sample_crops(x.shape[0], x.shape[2], x.shape[3], augment.scale, augment.ratio, device=x.device)
    return resized_crops(x, boxes, torch.rand(x.shape[0], device=x.device) < augment.hflip, size)


@contextmanager
def seeded(seed: int | None) -> Iterator[None]:
    """Draw from torch's, Python's and numpy's global RNGs seeded with `seed` inside the block, restoring them after
    (a no-op for None): an image's augmentation then depends on its seed alone, not on the loader workers."""
    if seed is None:
        yield
        return
    saved = torch.get_rng_state(), random.getstate(), np.random.get_state()
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    try:
        yield
    finally:
        torch.set_rng_state(saved[0])
        random.setstate(saved[1])
        np.random.set_state(saved[2])


class ImageBatch(NamedTuple):
    """A batch as a tensor dataset hands it over: uint8 N x C x H x W images, int64 labels, and the seed of its
    augmentation draws (`loaders.SeededOrder`; None: the global RNGs)."""

    images: torch.Tensor
    labels: torch.Tensor
    seed: int | None = None


class TensorBatchTransform:
    """The tensor back-end as the DataLoader's `collate_fn`: `ImageBatch` -> (float images, labels), drawn under the
    batch's seed (`seeded`)."""

    def __init__(self, *, img_size: int, in_chans: int, mean: tuple, std: tuple, training: bool,
                 augment: Augment):
        self.img_size, self.in_chans, self.training, self.augment = img_size, in_chans, training, augment
        std_t = torch.tensor(std).view(1, -1, 1, 1)
        self.scale, self.shift = 1 / (255 * std_t), torch.tensor(mean).view(1, -1, 1, 1) / std_t
        erase = training and augment.reprob > 0
        self.erase = RandomErasing(augment.reprob, mode=augment.remode, device="cpu") if erase else None

    def __call__(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        if not isinstance(batch, ImageBatch):  # a list of (image, label) samples
            batch = ImageBatch(torch.stack([b[0] for b in batch]), torch.tensor([b[1] for b in batch]))
        with seeded(batch.seed):
            if self.training:
                x = random_resized_crops(to_channels(batch.images.float(), self.in_chans), self.img_size, self.augment)
            else:
                x = eval_crop(batch.images, self.in_chans, self.img_size, self.augment)
            x = x * self.scale - self.shift
            if self.erase is not None:
                x = self.erase(x)
        return x, batch.labels


#: timm's interpolation names -> F.interpolate's modes (antialiased where F.interpolate can, as PIL's resize is).
INTERPOLATIONS = {"bicubic": "bicubic", "bilinear": "bilinear", "nearest": "nearest"}


def resize_like_pil(x: torch.Tensor, size: tuple[int, int], interpolation: str) -> torch.Tensor:
    """PIL's `resize` of 8-bit images, batched on the device: one antialiased `F.interpolate` per axis, each rounded and
    clamped to 8-bit levels as PIL does, so the result equals PIL's within one level. torchvision's batched resize
    rounds only at the end, far from PIL where bicubic ringing overshoots."""
    if interpolation not in INTERPOLATIONS:
        raise PipelineError(f"evaluation interpolation {interpolation!r}: the batched paths have"
                            f" {', '.join(INTERPOLATIONS)}; use the pil back-end (resources.data_on_device: false)")
    mode = INTERPOLATIONS[interpolation]
    options = {"mode": mode} if mode == "nearest" else {"mode": mode, "align_corners": False, "antialias": True}
    height, width = x.shape[2:]
    for target in ((height, size[1]), size):  # width, then height, as PIL
        if tuple(x.shape[2:]) != tuple(target):
            x = F.interpolate(x, size=target, **options)
            x = x if mode == "nearest" else x.clamp(0, 255).add_(0.5).floor_()
    return x


def eval_crop(images: torch.Tensor, in_chans: int, img_size: int, augment: Augment) -> torch.Tensor:
    """timm's eval transform on uint8 images, batched: channel conversion, resize of the short side to
    floor(img_size / crop_pct) (`resize_like_pil`), centre crop; 8-bit levels as float."""
    if images.shape[1] == 3 and in_chans == 1:  # PIL's convert('L'): luma in 16-bit fixed point, rounded to uint8
        rgb = images.int()
        x = ((rgb[:, 0:1] * 19595 + rgb[:, 1:2] * 38470 + rgb[:, 2:3] * 7471 + 0x8000) >> 16).float()
    else:
        x = to_channels(images.float(), in_chans)
    scale_size = math.floor(img_size / augment.crop_pct)
    height, width = x.shape[2:]
    size = ((scale_size, int(scale_size * width / height)) if height <= width
            else (int(scale_size * height / width), scale_size))  # torchvision's Resize(int), as timm's transform
    return TF.center_crop(resize_like_pil(x, size, augment.eval_interpolation), [img_size])

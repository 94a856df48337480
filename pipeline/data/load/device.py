"""The device-resident data path: a uint8 tensor dataset held on the GPU and augmented there in whole batches.

Why: per-image PIL augmentation of the paper's recipe on CPU workers feeds a small ViT on one GPU too slowly
(`make bench-gpu`). Each batch gets timm's random-resized crop, flip, RandAugment and RandomErasing with
per-image draws made as timm makes them, reaching the device in one pinned copy; PIL's ops are written in torch
because torch and torchvision have none with per-image arguments (kornia's apply one draw per batch, not timm's
policy). Deliberate differences from timm's PIL path, each within an image's rounding: images stay float
between ops, and crops and affine ops are bilinear without antialiasing.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from timm.data.auto_augment import rand_augment_transform
from timm.data.random_erasing import RandomErasing
from torch import nn
from torch.utils.data import Subset

from pipeline.data.load.loaders import Loaders, SeededImages, SeededOrder, TensorImages
from pipeline.data.load.transforms import LUMA, Augment, eval_crop, random_resized_crops, to_channels
from pipeline.errors import PipelineError

#: The share of the GPU's free memory the two uint8 splits may take under `data_on_device: auto`.
MEMORY_SHARE = 0.25


def tensor_images(dataset) -> TensorImages | None:
    dataset = dataset.dataset if isinstance(dataset, SeededImages) else dataset
    base = dataset.dataset if isinstance(dataset, Subset) else dataset
    return base if isinstance(base, TensorImages) else None


def tensor_split(dataset) -> tuple[torch.Tensor, torch.Tensor]:
    dataset = dataset.dataset if isinstance(dataset, SeededImages) else dataset
    base = tensor_images(dataset)
    if not isinstance(dataset, Subset):
        return base.images[:], base.labels[:]
    indices = torch.as_tensor(dataset.indices)
    return base.images[indices], base.labels[indices]


def unsupported(augment: Augment) -> str:
    if augment.color_jitter and not augment.aa:
        return "train.color_jitter (without RandAugment) has no device implementation"
    if augment.aa and not augment.aa.startswith("rand"):
        return f"train.aa = {augment.aa!r}: only timm's RandAugment policies ('rand-...') run on the device"
    return ""


def choose(setting, loaders: Loaders, augment: Augment, device: torch.device) -> bool:
    """Whether `resources.data_on_device` ('auto', True or False) puts this run's data on the device: 'auto' does on a
    GPU when both splits are tensors and fit in MEMORY_SHARE of its free memory; True does wherever it can."""
    if setting is False or (setting == "auto" and device.type != "cuda"):
        return False
    splits = [loaders.train.dataset, loaders.val.dataset]
    if loaders.test is not None and loaders.test is not loaders.val:
        splits.append(loaders.test.dataset)
    if loaders.holdout is not None:
        splits.append(loaders.holdout.dataset)
    reason = unsupported(augment)
    if any(tensor_images(s) is None for s in splits):
        reason = "the dataset is stored as files, not as tensors (only in-memory datasets go on the device)"
    if setting is True:
        if reason:
            raise PipelineError(f"resources.data_on_device = true: {reason}; set resources.data_on_device: auto or"
                                " false")
        return True
    size = sum(len(s) * tensor_images(s).images[0].numel() for s in splits) if not reason else 0
    return not reason and fits(size, device)


def fits(size: int, device: torch.device) -> bool:
    return size <= MEMORY_SHARE * torch.cuda.mem_get_info(device)[0]


#: timm's geometric ops ('inc' set): one `affine` warp each, all of a layer's in one call.
AFFINE = ("Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel")
#: The identity map, as `affine_theta` rows.
IDENTITY = np.array([1.0, 0.0, 0.0, 0.0, 1.0, 0.0])


def affine(x: torch.Tensor, theta: torch.Tensor, fill: torch.Tensor) -> torch.Tensor:
    """Warp each image by `theta` (N x 2 x 3 output -> input maps, align_corners=True, from `affine_theta`), bilinear;
    outside the image, `fill` (per channel)."""
    grid = F.affine_grid(theta, list(x.shape), align_corners=True)
    return F.grid_sample(x - fill, grid, mode="bilinear", padding_mode="zeros", align_corners=True) + fill


def affine_theta(name: str, value: np.ndarray, height: int, width: int) -> np.ndarray:
    """timm's affine ops (PIL `transform`/`rotate` data: output -> input maps on pixel centres) as N x 6 rows of the
    2 x 3 maps `F.affine_grid` takes (align_corners=True), computed on the host with the other draws."""
    ax, ay = (width - 1) / 2, (height - 1) / 2
    theta = np.tile(IDENTITY, (len(value), 1))
    if name == "Rotate":  # PIL: counter-clockwise by `value` degrees about the image centre
        a = value * (-math.pi / 180)
        theta[:, 0] = theta[:, 4] = np.cos(a)
        theta[:, 1], theta[:, 3] = np.sin(a) * (ay / ax), np.sin(a) * (-ax / ay)
    elif name == "ShearX":  # PIL data (1, f, 0, 0, 1, 0) on pixel corners: half a pixel of shift at centres
        theta[:, 1], theta[:, 2] = value * (ay / ax), value * ((ay + 0.5) / ax)
    elif name == "ShearY":
        theta[:, 3], theta[:, 5] = value * (ax / ay), value * ((ax + 0.5) / ay)
    elif name == "TranslateXRel":  # timm: pixels = fraction x image width
        theta[:, 2] = value * (width / ax)
    elif name == "TranslateYRel":
        theta[:, 5] = value * (height / ay)
    return theta


def grey(x: torch.Tensor) -> torch.Tensor:
    """ITU-R 601-2 luma of RGB images (N x 1 x H x W), PIL's convert('L') without its rounding."""
    return x[:, 0:1] * LUMA[0] + x[:, 1:2] * LUMA[1] + x[:, 2:3] * LUMA[2]


def per_image(value: torch.Tensor) -> torch.Tensor:
    return value.view(-1, 1, 1, 1)


def equalize(x: torch.Tensor) -> torch.Tensor:
    """PIL's `ImageOps.equalize` of each channel's 8-bit levels, batched (PIL's lookup table; a channel whose step is 0
    stays as it is)."""
    n, c = x.shape[:2]
    scaled = x.reshape(n * c, -1) * 255
    level = scaled.long().clamp(0, 255)
    histogram = torch.zeros(n * c, 256, device=x.device).scatter_add_(1, level, torch.ones_like(scaled))
    last = torch.where(histogram > 0, torch.arange(256, device=x.device), 0).amax(1, keepdim=True)
    step = torch.div(histogram.sum(1, keepdim=True) - histogram.gather(1, last), 255, rounding_mode="trunc")
    lut = torch.div(histogram.cumsum(1) + torch.div(step, 2, rounding_mode="trunc"), step.clamp(min=1),
                    rounding_mode="trunc")
    lut = F.pad(lut[:, :-1], (1, 0)).clamp(0, 255)
    return torch.where(step == 0, scaled, lut.gather(1, level)).reshape(x.shape) / 255


def sharpness(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """PIL's `ImageEnhance.Sharpness`: a blend with the image smoothed by PIL's 3 x 3 kernel, per image."""
    inner = x[..., 1:-1, 1:-1]
    smooth = x.clone()
    smooth[..., 1:-1, 1:-1] = ((F.avg_pool2d(x, 3, stride=1) * 9 + inner * 4) / 13).clamp(0, 1)
    return torch.lerp(smooth, x, per_image(factor)).clamp(0, 1)


def apply_op(name: str, x: torch.Tensor, value: torch.Tensor, fill: torch.Tensor) -> torch.Tensor:
    """One of timm's RandAugment ops ('inc' set) on images in [0, 1] with per-image arguments `value` (timm's
    level-to-argument output; for AFFINE ops, `affine_theta`'s maps), as PIL computes them on a float image."""
    if name == "AutoContrast":  # per channel min..max to 0..1; a flat channel stays (PIL's autocontrast)
        low, high = x.amin((2, 3), keepdim=True), x.amax((2, 3), keepdim=True)
        return torch.where(high <= low, x, (x - low) / (high - low + 1e-6))
    if name == "Equalize":
        return equalize(x)
    if name == "Invert":
        return 1 - x
    if name in AFFINE:
        return affine(x, value.view(-1, 2, 3), fill)
    if name == "PosterizeIncreasing":  # keep the top `value` bits of each 8-bit level (0 bits: black)
        size = torch.exp2(8 - per_image(value))
        return ((x * 255).round() / size).floor() * size / 255
    if name == "SolarizeIncreasing":  # PIL: invert values >= threshold (0..256)
        return torch.where(x < per_image(value) / 255, x, 1 - x)
    if name == "SolarizeAdd":  # PIL lut: values below 128 get `add`, capped at 255
        return torch.where(x < 128 / 255, (x + per_image(value) / 255).clamp(max=1), x)
    if name == "ColorIncreasing":
        return torch.lerp(grey(x), x, per_image(value)).clamp(0, 1) if x.shape[1] == 3 else x
    if name == "ContrastIncreasing":
        mean = (grey(x) if x.shape[1] == 3 else x).mean((1, 2, 3), keepdim=True)
        return torch.lerp(mean, x, per_image(value)).clamp(0, 1)
    if name == "BrightnessIncreasing":
        return (x * per_image(value)).clamp(0, 1)
    if name == "SharpnessIncreasing":
        return sharpness(x, value)
    raise PipelineError(f"RandAugment op {name!r} has no device implementation; use resources.data_on_device: false")


class RandAugment(nn.Module):
    """timm's RandAugment (`rand-m9-mstd0.5-inc1` etc.), parsed by timm and drawn per image as timm's
    `AugmentOp.__call__` draws it, applied by `apply_op`. The draws run on the host; the images stay on the device."""

    def __init__(self, policy: str, mean: tuple, img_size: int):
        super().__init__()
        self.timm = rand_augment_transform(policy, {"img_mean": tuple(round(255 * m) for m in mean)})
        self.names, self.img_size = [op.name for op in self.timm.ops], img_size
        for name in self.names:  # refuse unknown ops
            apply_op(name, torch.zeros(1, 3, 4, 4), torch.ones(1, 6 if name in AFFINE else 1), torch.zeros(1, 3, 1, 1))
        # the batch is sorted by op with the geometric ops last, so that one warp applies all of a layer's
        self.sort_key = np.array([-1, *(len(self.names) * (name in AFFINE) + k for k, name in enumerate(self.names))])
        self.register_buffer("fill", torch.tensor(mean).view(1, -1, 1, 1), persistent=False)

    def draw(self, n: int) -> list[list[tuple[int, float] | None]]:
        """Per layer, per image: (op index, its argument), or None where the op's gate skipped it."""
        ra = self.timm
        if ra.choice_weights is None:
            chosen = np.random.randint(len(ra.ops), size=(n, ra.num_layers))
        else:
            chosen = np.stack([np.random.choice(len(ra.ops), ra.num_layers, replace=False, p=ra.choice_weights)
                               for _ in range(n)])
        return [[self.draw_op(int(k)) for k in chosen[:, layer]] for layer in range(ra.num_layers)]

    def draw_op(self, k: int) -> tuple[int, float] | None:
        """timm's `AugmentOp.__call__` draws, without the image."""
        op = self.timm.ops[k]
        if op.prob < 1.0 and random.random() > op.prob:
            return None
        magnitude = op.magnitude
        if op.magnitude_std == float("inf"):
            magnitude = random.uniform(0, magnitude)
        elif op.magnitude_std > 0:
            magnitude = random.gauss(magnitude, op.magnitude_std)
        magnitude = max(0.0, min(magnitude, op.magnitude_max or 10))
        args = op.level_fn(magnitude, op.hparams) if op.level_fn is not None else ()
        return k, float(args[0]) if args else 0.0

    def plan(self, n: int) -> tuple[np.ndarray, list[list[tuple[int, int, int]]]]:
        """The draws for `n` images as float64 rows and, per layer, the (op, first row, end row) slices of the batch
        sorted by op (None for the slice of all geometric ops)."""
        rows, slices, perm = [], [], np.arange(n)  # perm[r]: the image now in row r
        for layer in self.draw(n):
            ops = np.array([-1 if d is None else d[0] for d in layer])[perm]
            values = np.array([0.0 if d is None else d[1] for d in layer])[perm]
            order = np.argsort(self.sort_key[ops + 1], kind="stable")
            perm, ops, values = perm[order], ops[order], values[order]
            theta = np.tile(IDENTITY, (n, 1))
            bounds = np.flatnonzero(np.diff(ops)) + 1
            runs = [(int(ops[a]), int(a), int(b)) for a, b in zip([0, *bounds], [*bounds, n]) if ops[a] >= 0]
            for k, a, b in runs:
                if self.names[k] in AFFINE:
                    theta[a:b] = affine_theta(self.names[k], values[a:b], self.img_size, self.img_size)
            geometric = [(a, b) for k, a, b in runs if self.names[k] in AFFINE]
            slices.append([r for r in runs if self.names[r[0]] not in AFFINE]
                          + ([(None, geometric[0][0], geometric[-1][1])] if geometric else []))
            rows += [order, values, *theta.T]
        return np.stack([*rows, np.argsort(perm)]).astype(np.float64), slices

    def apply(self, x: torch.Tensor, draws: torch.Tensor, slices: list[list[tuple[int, int, int]]]) -> torch.Tensor:
        fill = self.fill if self.fill.shape[1] == x.shape[1] else self.fill.mean(1, keepdim=True)
        for layer, ops in enumerate(slices):
            first = 8 * layer
            x = x.index_select(0, draws[first].long())
            values, theta = draws[first + 1].float(), draws[first + 2:first + 8].T.float()
            for k, a, b in ops:
                x[a:b] = (affine(x[a:b], theta[a:b].reshape(-1, 2, 3), fill) if k is None
                          else apply_op(self.names[k], x[a:b], values[a:b], fill))
        return x.index_select(0, draws[-1].long())


class Erasing:
    """timm's `RandomErasing` (one box per image) for a batch on the device: boxes drawn on the host as timm's `_erase`
    draws them, applied with one mask, erased values drawn on the device. timm's own erases image by image in
    Python, several kernel launches per image."""

    def __init__(self, probability: float, mode: str):
        self.timm = RandomErasing(probability, mode=mode, device="cpu")  # its parameters, as timm derives them
        if self.timm.min_count != 1 or self.timm.max_count != 1:
            raise PipelineError("random erasing with several boxes has no device implementation; use"
                                " resources.data_on_device: false")

    def draw(self, n: int, height: int, width: int) -> np.ndarray:
        """(4, n): each image's box top, left, height, width (height 0: not erased), in timm's order of draws."""
        t, boxes = self.timm, np.zeros((4, n))
        for i in range(n):
            if random.random() > t.probability:
                continue
            for _ in range(10):
                target = random.uniform(t.min_area, t.max_area) * height * width
                aspect = math.exp(random.uniform(*t.log_aspect_ratio))
                h, w = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
                if w < width and h < height:
                    boxes[:, i] = random.randint(0, height - h), random.randint(0, width - w), h, w
                    break
        return boxes

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Erase a whole batch (after Mixup/CutMix: `loaders.erasing_after_mix`)."""
        boxes = torch.from_numpy(self.draw(x.shape[0], x.shape[2], x.shape[3])).to(x.device)
        return self.apply(x, boxes)

    def apply(self, x: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        top, left, h, w = boxes[:, :, None]
        rows, cols = torch.arange(x.shape[2], device=x.device), torch.arange(x.shape[3], device=x.device)
        mask = (((rows >= top) & (rows < top + h))[:, None, :, None]
                & ((cols >= left) & (cols < left + w))[:, None, None, :])
        if self.timm.per_pixel:
            return torch.where(mask, torch.randn_like(x), x)
        if self.timm.rand_color:
            return torch.where(mask, torch.randn(x.shape[0], x.shape[1], 1, 1, device=x.device), x)
        return x.masked_fill(mask, 0)


class DeviceAugment(nn.Module):
    """Training batches on the device: uint8 N x C x H x W in, normalised float out (module docstring)."""

    def __init__(self, *, img_size: int, in_chans: int, mean: tuple, std: tuple, augment: Augment,
                 device: torch.device):
        super().__init__()
        self.in_chans, self.img_size, self.augment = in_chans, img_size, augment
        self.rand_augment = RandAugment(augment.aa, mean, img_size) if augment.aa else None
        self.erase = Erasing(augment.reprob, augment.remode) if augment.reprob > 0 else None
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1), persistent=False)
        self.to(device)

    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        n, rows, slices = images.shape[0], [], []
        if self.rand_augment is not None:
            planned, slices = self.rand_augment.plan(n)
            rows.append(planned)
        if self.erase is not None:
            rows.append(self.erase.draw(n, self.img_size, self.img_size))
        draws = torch.from_numpy(np.concatenate(rows)) if rows else None
        if draws is not None and images.device.type == "cuda":  # queued on the stream; the host does not wait
            draws = draws.pin_memory()
        draws = draws.to(images.device, non_blocking=True) if draws is not None else None
        x = random_resized_crops(to_channels(images.float() / 255, self.in_chans), self.img_size, self.augment)
        planned = len(rows[0]) if self.rand_augment is not None else 0
        if self.rand_augment is not None:
            x = self.rand_augment.apply(x.clamp(0, 1), draws[:planned], slices)
        x = (x - self.mean) / self.std
        return self.erase.apply(x, draws[planned:]) if self.erase is not None else x


class EvalOnDevice:

    def __init__(self, *, img_size: int, in_chans: int, mean: tuple, std: tuple, augment: Augment,
                 device: torch.device):
        self.img_size, self.in_chans, self.augment = img_size, in_chans, augment
        self.mean = torch.tensor(mean, device=device).view(1, -1, 1, 1)
        self.std = torch.tensor(std, device=device).view(1, -1, 1, 1)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        x = eval_crop(images, self.in_chans, self.img_size, self.augment)
        return (x / 255 - self.mean) / self.std


class DeviceBatches:
    """A loader over a split held on the device, with what the engine uses of a DataLoader: `len`, iteration,
    `sampler` (with `set_epoch`) and `dataset`."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, *, sampler, batch_size: int, drop_last: bool,
                 transform, dataset=None):
        self.images, self.labels, self.sampler, self.transform = images, labels, sampler, transform
        self.batch_size, self.drop_last, self.dataset = batch_size, drop_last, dataset

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        order = torch.as_tensor(list(self.sampler), dtype=torch.int64).to(self.images.device)  # once per epoch
        for b in range(len(self)):
            index = order[b * self.batch_size:(b + 1) * self.batch_size]
            yield self.transform(self.images[index]), self.labels[index]


def device_loaders(loaders: Loaders, *, img_size: int, augment: Augment, device: torch.device) -> Loaders:
    """`loaders` (from `build_loaders`) with their splits copied to `device` and batched there, with the same samplers,
    batch size and drop-last."""
    options = {"img_size": img_size, "in_chans": loaders.in_chans, "mean": loaders.mean, "std": loaders.std,
               "augment": augment, "device": device}
    roles = [("train", DeviceAugment(**options)), ("val", EvalOnDevice(**options))]
    if loaders.test is not None and loaders.test is not loaders.val:
        roles.append(("test", roles[1][1]))
    if loaders.holdout is not None:
        roles.append(("holdout", roles[1][1]))
    built = {}
    for role, transform in roles:
        loader = getattr(loaders, role)
        images, labels = (t.to(device) for t in tensor_split(loader.dataset))
        sampler = loader.sampler.sampler if isinstance(loader.sampler, SeededOrder) else loader.sampler
        built[role] = DeviceBatches(images, labels, sampler=sampler, batch_size=loader.batch_size,
                                    drop_last=loader.drop_last, transform=transform, dataset=loader.dataset)
    test = built.get("test", built["val"] if loaders.test is loaders.val else None)
    return Loaders(built["train"], built["val"], loaders.num_classes, loaders.train_size, loaders.val_size,
                   loaders.classes, loaders.in_chans, loaders.mean, loaders.std, "device", test, loaders.test_size,
                   Erasing(loaders.erase.probability, loaders.erase.mode) if loaders.erase is not None else None,
                   built.get("holdout"))

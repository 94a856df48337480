"""The device-resident data path (`pipeline.data.load.device`) on CPU: the PIL path's distributions and ops, a seed's
determinism, the choice of path, and a short training run in the DataLoader path's accuracy band."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torch.utils._python_dispatch
from PIL import Image
from torchvision.transforms import RandomResizedCrop
from training_fixtures import execute, tiny_run

from pipeline.config import Resources, TrainConfig
from pipeline.data.load.device import (
    AFFINE,
    DeviceAugment,
    Erasing,
    EvalOnDevice,
    RandAugment,
    affine_theta,
    apply_op,
    choose,
)
from pipeline.data.load.loaders import build_loaders
from pipeline.data.load.transforms import Augment, ImageBatch, TensorBatchTransform, sample_crops
from pipeline.datasets import normalization_stats
from pipeline.errors import PipelineError
from pipeline.training.engine import Dist, reseed
from pipeline.training.run import build_run_loaders

CPU = torch.device("cpu")
PAPER = Augment(scale=(0.08, 1.0), hflip=0.5, aa="rand-m9-mstd0.5-inc1", reprob=0.25)


def smooth_images(n: int, channels: int = 3, size: int = 32, seed: int = 0) -> torch.Tensor:
    """uint8 images without single-pixel detail (so interpolation differences stay small)."""
    g = torch.Generator().manual_seed(seed)
    x = F.interpolate(torch.rand(n, channels, 6, 6, generator=g), size=size, mode="bilinear", align_corners=False)
    return (x * 255).round().to(torch.uint8)


def test_crop_boxes_follow_torchvisions_distribution():
    """Area fraction and aspect ratio of the crops the device path draws (on the images' device) against
    torchvision's (the PIL path's)."""
    from scipy import stats

    torch.manual_seed(0)
    _, _, h, w = sample_crops(3000, 32, 32, (0.08, 1.0), (3 / 4, 4 / 3), device=CPU)
    pil = [RandomResizedCrop.get_params(torch.zeros(3, 32, 32), [0.08, 1.0], [3 / 4, 4 / 3]) for _ in range(3000)]
    ph, pw = torch.tensor([p[2] for p in pil]).float(), torch.tensor([p[3] for p in pil]).float()
    assert stats.ks_2samp((w * h / 1024).numpy(), (pw * ph / 1024).numpy()).pvalue > 1e-3
    assert stats.ks_2samp((w / h).numpy(), (pw / ph).numpy()).pvalue > 1e-3


def test_flip_rate_is_the_recipes():
    left_dark = torch.zeros(4000, 1, 16, 16, dtype=torch.uint8)
    left_dark[..., 8:] = 255
    recipe = Augment(scale=(1.0, 1.0), ratio=(1.0, 1.0), hflip=0.3)
    aug = DeviceAugment(img_size=16, in_chans=1, mean=(0.5,), std=(0.5,), augment=recipe, device=CPU)
    torch.manual_seed(0)
    out = aug(left_dark)
    flipped = (out[..., :8].mean((1, 2, 3)) > out[..., 8:].mean((1, 2, 3))).float().mean().item()
    assert abs(flipped - 0.3) < 4 * (0.3 * 0.7 / 4000) ** 0.5


@pytest.mark.parametrize("sign", [1, -1])
def test_every_rand_augment_op_matches_timms_pil_op(sign):
    """Each op of rand-m9-mstd0.5-inc1 at magnitude 9, on the device and by timm on a PIL image (bilinear)."""
    ra = RandAugment("rand-m9-mstd0.5-inc1", (0.485, 0.456, 0.406), img_size=48)
    image = smooth_images(1, size=48)
    pil = Image.fromarray(image[0].permute(1, 2, 0).numpy())
    for op in ra.timm.ops:
        random.seed(0 if sign > 0 else 3)  # the level functions draw a random sign from `random`
        args = op.level_fn(9.0, op.hparams) if op.level_fn else ()
        kwargs = dict(op.kwargs) | ({"resample": Image.BILINEAR} if "resample" in op.kwargs else {})
        expected = torch.from_numpy(np.array(op.aug_fn(pil, *args, **kwargs))).permute(2, 0, 1).float() / 255
        value = torch.tensor([float(args[0]) if args else 0.0])
        if op.name in AFFINE:  # the geometric ops take their map, computed on the host with the draws
            value = torch.from_numpy(affine_theta(op.name, value.double().numpy(), 48, 48)).float()
        got = apply_op(op.name, image.float() / 255, value, ra.fill)[0]
        assert (got - expected).abs().mean() < 0.01, (op.name, args)


def test_rand_augment_draws_are_timms_policy():
    """Which ops, how often applied, at which magnitudes: timm's rand-m9-mstd0.5-inc1 per image."""
    from scipy import stats

    ra = RandAugment("rand-m9-mstd0.5-inc1", (0.5, 0.5, 0.5), img_size=32)
    reseed(0, 0)
    draws = [d for layer in ra.draw(6000) for d in layer]
    applied = [d for d in draws if d is not None]
    assert abs(len(applied) / len(draws) - 0.5) < 0.02  # timm's per-op probability 0.5
    counts = np.bincount([k for k, _ in applied], minlength=len(ra.names))
    assert stats.chisquare(counts).pvalue > 1e-3  # ops uniform, with replacement
    rotations = np.array([v for k, v in applied if ra.names[k] == "Rotate"])
    assert abs(np.abs(rotations).mean() - 27) < 0.5  # 9 / 10 x 30 degrees, std 0.5 / 10 x 30
    assert abs((rotations > 0).mean() - 0.5) < 0.1


@pytest.mark.parametrize("in_chans", [1, 3])
def test_the_device_path_crops_and_evaluates_as_the_tensor_backend(in_chans):
    """One crop, flip and eval crop for both batched paths: the same draws give the same batches."""
    light = Augment(scale=(0.3, 1.0), hflip=0.5, crop_pct=0.875)
    options = {"img_size": 40, "in_chans": in_chans, "mean": (0.5,) * in_chans, "std": (0.25,) * in_chans,
               "augment": light}
    x, labels = smooth_images(16), torch.arange(16)
    torch.manual_seed(3)  # what `seeded(3)` does before the tensor back-end draws
    on_device = DeviceAugment(**options, device=CPU)(x)
    tensor = TensorBatchTransform(training=True, **options)(ImageBatch(x, labels, 3))[0]
    assert torch.allclose(on_device, tensor, atol=1e-5)
    evaluated = EvalOnDevice(**options, device=CPU)(x)
    assert torch.allclose(evaluated, TensorBatchTransform(training=False, **options)(ImageBatch(x, labels))[0],
                          atol=1e-5)


def test_erasing_draws_timms_boxes_and_fills_them_as_timm():
    """The device path's random erasing: from the same `random` state, the boxes timm's RandomErasing erases image by
    image; the erased pixels N(0, 1) in 'pixel' mode, 0 in 'const'; nothing outside the boxes changes."""
    from timm.data.random_erasing import RandomErasing

    random.seed(5)
    reference = RandomErasing(0.5, mode="const", device="cpu")(torch.ones(200, 3, 20, 24))
    random.seed(5)
    boxes = Erasing(0.5, "const").draw(200, 20, 24)
    for image, (top, left, h, w) in zip(reference, boxes.T.astype(int)):
        erased = (image == 0).all(0)
        if h == 0:
            assert not erased.any()
            continue
        rows, cols = erased.any(1).nonzero()[:, 0], erased.any(0).nonzero()[:, 0]
        assert (rows[0], cols[0], len(rows), len(cols)) == (top, left, h, w) and erased.sum() == h * w
    assert 60 < (boxes[2] > 0).sum() < 140  # probability 0.5
    x = torch.full((200, 3, 20, 24), 7.0)
    torch.manual_seed(0)
    out = Erasing(0.5, "pixel").apply(x, torch.from_numpy(boxes))
    inside = out != 7.0
    assert inside.sum() == 3 * (boxes[2] * boxes[3]).sum()  # exactly the boxes, every channel
    assert abs(out[inside].mean()) < 0.05 and abs(out[inside].std() - 1) < 0.05


def test_device_batches_are_deterministic_for_a_seed():
    aug = DeviceAugment(img_size=40, in_chans=3, mean=(0.5,) * 3, std=(0.25,) * 3, augment=PAPER, device=CPU)
    x = smooth_images(16)
    outs = []
    for seed in (0, 0, 1):
        reseed(seed, 0)
        outs.append(aug(x))
    assert torch.equal(outs[0], outs[1]) and not torch.equal(outs[0], outs[2])
    assert outs[0].shape == (16, 3, 40, 40) and torch.isfinite(outs[0]).all()


def test_gray_images_into_a_gray_model_with_rand_augment():
    aug = DeviceAugment(img_size=28, in_chans=1, mean=(0.3,), std=(0.35,), augment=PAPER, device=CPU)
    reseed(0, 0)
    out = aug(smooth_images(32, channels=1, size=28))
    assert out.shape == (32, 1, 28, 28) and torch.isfinite(out).all()


def test_which_path_a_run_takes(workdir):
    loaders = build_loaders("fashion_mnist", "data", stats=normalization_stats("fashion_mnist", "dataset"),
                            img_size=8, in_chans=1, batch_size=16, seed=0, augment=Augment())
    assert not choose("auto", loaders, Augment(), CPU)  # auto: on a GPU only; CPU runs keep the DataLoader path
    assert choose(True, loaders, Augment(), CPU) and not choose(False, loaders, Augment(), CPU)
    with pytest.raises(PipelineError, match="color_jitter"):
        choose(True, loaders, Augment(color_jitter=0.4), CPU)
    recipe, data = TrainConfig(batch_size=16, crop_pct=0.875), tiny_run().config["data"]
    on_device = build_run_loaders(data, "data", "fashion_mnist", 8, 1, 0, recipe, Dist(),
                                  Resources(data_on_device=True))
    assert on_device.backend == "device" and len(on_device.train) == len(loaders.train)
    on_device.train.sampler.set_epoch(0)
    loaders.train.sampler.set_epoch(0)
    (x, y), (x0, y0) = next(iter(on_device.train)), next(iter(loaders.train))
    assert torch.equal(y, y0) and x.shape == x0.shape  # the same sampler: the same images in each batch
    tensor_path = build_loaders("fashion_mnist", "data", stats=normalization_stats("fashion_mnist", "dataset"),
                                img_size=8, in_chans=1, batch_size=16, seed=0,
                                augment=Augment(backend="tensor"))
    val = torch.cat([b[0] for b in on_device.val]), torch.cat([b[0] for b in tensor_path.val])
    assert torch.allclose(*val, atol=1e-5)  # evaluation: the tensor back-end's resize, crop and normalisation
    assert on_device.test is on_device.val and on_device.test_size == 32  # val keeps the whole split: one loader
    subset = build_run_loaders(data | {"val_subset": 12}, "data", "fashion_mnist", 8, 1, 0, recipe, Dist(),
                               Resources())
    labels = torch.cat([y for _, y in subset.test]).cpu()
    assert subset.test is not subset.val and subset.test_size == 32 and subset.val_size == 12
    assert torch.equal(labels, torch.cat([y for _, y in tensor_path.test]))  # every test image, in the split's order


def test_training_on_the_device_reaches_the_dataloader_paths_accuracy(workdir):
    results = {}
    for on_device in (False, True):
        r = tiny_run(epochs=8, scale=[0.5, 1.0], hflip=0.5, reprob=0.25)
        results[on_device] = execute(r, Resources(data_on_device=on_device))["top1"]
    assert results[False] > 0.6 and abs(results[True] - results[False]) <= 0.1, results  # chance: 1/3


class OnDevice(torch.Tensor):
    """Marks what lives on the device: the batch and everything computed from it (a subclass propagates through
    torch's ops). A copy into it from anything else is a host-to-device transfer on a GPU."""


#: Calls that make the host wait for a GPU when they read a device tensor (or, torch.linalg.inv, check its result).
READS_BACK = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__bool__, torch.Tensor.__int__,
              torch.Tensor.__float__, torch.Tensor.__index__, torch.Tensor.nonzero, torch.nonzero, torch.Tensor.unique,
              torch.unique, torch.Tensor.cpu, torch.Tensor.numpy, torch.masked_select, torch.Tensor.masked_select}
MOVES = {torch.Tensor.to, torch.tensor, torch.as_tensor, torch.Tensor.cuda}


class SyncCounter(torch.overrides.TorchFunctionMode):
    """Counts, per kind, the calls that would synchronise the host with a GPU or copy host data to it."""

    def __init__(self):
        super().__init__()
        self.counts = {"read back": 0, "host to device": 0, "inverse with check": 0, "index_copy": 0,
                       "index_select": 0}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        source = args[0] if args else None
        if func in READS_BACK and isinstance(source, OnDevice):
            self.counts["read back"] += 1
        elif func in MOVES and not isinstance(source, OnDevice) and (
                "device" in kwargs or any(isinstance(a, torch.device | str) for a in args[1:])):
            self.counts["host to device"] += 1
            return func(*args, **kwargs).as_subclass(OnDevice)  # it is on the device now
        elif func is torch.linalg.inv:
            self.counts["inverse with check"] += 1
        elif func in (torch.Tensor.index_copy, torch.index_copy):
            self.counts["index_copy"] += 1
        elif func in (torch.Tensor.index_select, torch.index_select):
            self.counts["index_select"] += 1
        return func(*args, **kwargs)


def test_the_device_path_never_waits_for_the_device():
    """Per batch of the paper's recipe (RandAugment 2 layers, crop, flip, erasing): no read-back, one host-to-device
    copy (the RandAugment and erasing draws, pinned and non-blocking on a GPU), no whole-batch copy per op (one
    gather per layer and one to restore the order). Counted the same way, an earlier implementation made 59-61
    host-to-device copies, 8-10 checked inverses and 25-26 whole-batch index_copy per batch."""
    aug = DeviceAugment(img_size=32, in_chans=3, mean=(0.5,) * 3, std=(0.25,) * 3, augment=PAPER, device=CPU)
    reseed(0, 0)
    for batch in range(3):
        images = smooth_images(64, seed=batch).as_subclass(OnDevice)
        with SyncCounter() as counter:
            out = aug(images)
        assert isinstance(out, OnDevice) and torch.isfinite(out).all()
        assert counter.counts == {"read back": 0, "host to device": 1, "inverse with check": 0, "index_copy": 0,
                                  "index_select": 3}, counter.counts


class KernelCounter(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the aten ops that compute (views and metadata changes excluded): each is a kernel launch on a GPU."""

    VIEWS = {"slice", "select", "view", "unsqueeze", "expand", "as_strided", "alias", "lift_fresh", "detach", "t",
             "permute", "_unsafe_view", "squeeze", "unbind", "split", "transpose"}

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += str(func.overloadpacket).split(".")[-1] not in self.VIEWS
        return func(*args, **(kwargs or {}))


def test_the_device_paths_launches_do_not_grow_with_the_batch():
    """A batch of the paper's recipe costs about the same number of kernels at 512 images as at 64: no per-image
    work on the host's side of the device (timm's RandomErasing on a batch loops over its images, ~8 kernels per
    erased image)."""
    aug = DeviceAugment(img_size=32, in_chans=3, mean=(0.5,) * 3, std=(0.25,) * 3, augment=PAPER, device=CPU)
    counts = {}
    for n in (64, 512):
        reseed(0, 0)
        with KernelCounter() as counter:
            for batch in range(3):
                aug(smooth_images(n, seed=batch))
        counts[n] = counter.count
    assert counts[512] < 1.25 * counts[64], counts


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_device_path_runs_under_cudas_sync_debug_mode():
    aug = DeviceAugment(img_size=224, in_chans=3, mean=(0.5,) * 3, std=(0.25,) * 3, augment=PAPER,
                        device=torch.device("cuda"))
    images = smooth_images(64, size=32).cuda()
    aug(images)  # warm-up: kernels load, the caching allocators fill
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            aug(images)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def seen_by_the_model(loaders, recipe, seed: int) -> torch.Tensor:
    """The first training batch as the model sees it in the engine's step: loaded, mixed, then `loaders.erase`."""
    from pipeline.training import engine

    model, seen = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 3)), []
    model.register_forward_pre_hook(lambda m, args: seen.append(args[0].clone()))
    parts = engine.build_parts(model, recipe, 3, 1, Dist(), Resources())
    loaders.train.sampler.set_epoch(0)
    batch = next(iter(loaders.train))
    reseed(seed, 0)
    engine.train_one_epoch(parts, [batch], recipe, 0, Dist(), lambda n: None, Resources(), loaders.erase)
    return seen[0]


@pytest.mark.parametrize("on_device", [False, True])
def test_random_erasing_runs_on_the_mixed_batch_as_timms_prefetcher(workdir, on_device):
    """timm's train.py on a GPU mixes in FastCollateMixup, then its PrefetchLoader normalises and erases the mixed
    batch: what the model sees is RandomErasing(Mixup(batch)). The engine does the same on both data paths (in
    'const' mode the device path's boxes and values are timm's exactly); train.erase_after_mix: false erases each
    image first."""
    from timm.data import Mixup
    from timm.data.random_erasing import RandomErasing

    recipe = TrainConfig(batch_size=16, mixup=0.8, cutmix=0.0, smoothing=0.1, reprob=1.0, remode="const",
                         scale=[1.0, 1.0], ratio=[1.0, 1.0], hflip=0.0)
    data, resources = tiny_run().config["data"], Resources(data_on_device=on_device)
    loaders = build_run_loaders(data, "data", "fashion_mnist", 8, 1, 0, recipe, Dist(), resources)
    assert loaders.erase is not None and loaders.backend == ("device" if on_device else "tensor")
    plain = build_run_loaders(data, "data", "fashion_mnist", 8, 1, 0, TrainConfig(**{**vars(recipe), "reprob": 0.0}),
                              Dist(), resources)
    for epoch_loaders in (loaders, plain):
        epoch_loaders.train.sampler.set_epoch(0)
    batch, unerased = next(iter(loaders.train)), next(iter(plain.train))
    assert torch.equal(batch[0], unerased[0])  # the loader no longer erases
    ours = seen_by_the_model(loaders, recipe, seed=3)

    images, labels = batch[0].clone(), batch[1]
    reseed(3, 0)
    Mixup(mixup_alpha=0.8, cutmix_alpha=0.0, label_smoothing=0.1, num_classes=3)(images, labels)
    timms = RandomErasing(1.0, mode="const", device="cpu")(images)
    assert torch.equal(ours, timms)
    assert (ours == 0).any(dim=(1, 2, 3)).all()  # every image has its erased box, unmixed

    before = TrainConfig(**{**vars(recipe), "erase_after_mix": False})
    other = build_run_loaders(data, "data", "fashion_mnist", 8, 1, 0, before, Dist(), Resources())
    assert other.erase is None
    assert not torch.equal(seen_by_the_model(other, before, seed=3), timms)

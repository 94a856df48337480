"""The data layer: Fashion-MNIST's local mirror, and the loaders' contract with the trainer (shapes,
determinism, sharding, subsets, channels, back-ends). Downloads: tests/test_datasets_upstream.py; dataset
facts, `digits` and the user's directories: tests/test_data_meta.py."""

from __future__ import annotations

import dataclasses
import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps
from torch.utils.data import DataLoader, DistributedSampler
from torchvision.transforms.v2 import functional as TF

from pipeline.data.fetch import fetch_dataset, source_meta, sources
from pipeline.data.load.loaders import (
    ShardSampler,
    build_loaders,
    holdout_pool,
    stratified_order,
    training_draw,
)
from pipeline.data.load.transforms import (
    Augment,
    ImageBatch,
    TensorBatchTransform,
    channel_stats,
    pil_transform,
    posterize_any_bits,
    resized_crops,
    sample_crops,
)
from pipeline.data.meta import DatasetMeta, dataset_meta
from pipeline.data.store import load_split, save_split, write_manifest
from pipeline.datasets import normalization_stats
from pipeline.errors import PipelineError
from pipeline.params import Params
from pipeline.schema import from_mapping

FMNIST_MIRROR = Path("/usr/share/datasets/fashion-mnist")
LIGHT = Augment(scale=(0.8, 1.0), crop_pct=1.0)  # the CPU default's augmentation


def _assert_clean(root: Path, keep=()):
    """Nothing but `keep` under the data root: no partial dataset, no temporary directory."""
    assert sorted(p.name for p in root.iterdir()) == sorted(keep)


# ---------------------------------------------------------------- fetch: Fashion-MNIST's local mirror


@pytest.mark.skipif(not FMNIST_MIRROR.is_dir(), reason="Debian's dataset-fashion-mnist is not installed")
def test_fashion_mnist_from_the_debian_mirror(tmp_path):
    out = fetch_dataset("fashion_mnist", tmp_path, mirror=str(FMNIST_MIRROR), download=False, log=lambda _: None)
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["splits"]["train"]["images"], manifest["splits"]["test"]["images"]) == (60000, 10000)
    assert manifest["num_classes"] == 10 and manifest["classes"][9] == "Ankle boot"
    assert dataset_meta(tmp_path, "fashion_mnist") == source_meta("fashion_mnist") == DatasetMeta("fashion_mnist",
                                                                                                   10, 1, 28)
    images, labels = load_split(out / "train.pt")
    assert images.shape == (60000, 1, 28, 28) and torch.bincount(labels).tolist() == [6000] * 10


def test_a_corrupt_mirror_is_refused(tmp_path):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for name in sources.FASHION_MNIST_SHA256:
        (mirror / f"{name}.gz").write_bytes(gzip.compress(b"not fashion-mnist"))
    with pytest.raises(PipelineError, match="train-images-idx3-ubyte.*SHA-256.*corrupt"):
        fetch_dataset("fashion_mnist", tmp_path / "data", mirror=str(mirror), log=lambda _: None)
    _assert_clean(tmp_path / "data")


def test_registry_imports_without_torch():
    code = "import sys, pipeline.config, pipeline.datasets; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[1]).returncode == 0


# ---------------------------------------------------------------- loaders


@pytest.fixture
def data_fmnist_like(tmp_path):
    """A small dataset in the fetched `tensors` form under the name fashion_mnist: 200 train images
    (20 per class), 51 test images; image i of a split has every pixel equal to i % 256."""
    out = tmp_path / "fashion_mnist"
    out.mkdir()
    splits = {}
    for split, n in (("train", 200), ("test", 51)):
        images = (torch.arange(n) % 256).to(torch.uint8).view(n, 1, 1, 1).expand(n, 1, 28, 28).clone()
        labels = torch.arange(n) % 10
        save_split(out / f"{split}.pt", images, labels)
        splits[split] = {"images": n, "file": f"{split}.pt", "shape": [1, 28, 28]}
    write_manifest(out, {"dataset": "fashion_mnist", "num_classes": 10, "channels": 1, "image_size": 28,
                         "train_split": "train",
                         "eval_split": "test", "format": "tensors", "classes": [str(i) for i in range(10)],
                         "splits": splits})
    return tmp_path


def _loaders(root, normalization: str = "dataset", **kwargs):
    options = {"img_size": 28, "in_chans": 1, "batch_size": 16, "seed": 0, "augment": LIGHT, **kwargs}
    return build_loaders("fashion_mnist", root, stats=normalization_stats("fashion_mnist", normalization), **options)


def _pixels(x):
    """Undo the fashion_mnist normalisation: uint8 pixel values."""
    return (x * 0.3530 + 0.2860).mul(255).round().long()


def _epoch(loader, epoch, rng_seed=123):
    loader.sampler.set_epoch(epoch)
    torch.manual_seed(rng_seed)  # what the trainer does at each epoch start
    return [(x.clone(), y.clone()) for x, y in loader]


def test_train_batches_shapes_dtype_labels(data_fmnist_like):
    loaders = _loaders(data_fmnist_like)
    batches = _epoch(loaders.train, 0)
    assert loaders.backend == "tensor" and (loaders.train_size, loaders.val_size) == (200, 51)
    assert len(batches) == 200 // 16  # drop_last
    for x, y in batches:
        assert x.shape == (16, 1, 28, 28) and x.dtype == torch.float32 and y.dtype == torch.int64
        assert y.min() >= 0 and y.max() < loaders.num_classes == 10
        index = _pixels(x)  # image i is constant i: a crop of it too, and its label is i % 10
        assert (index == index[:, :1, :1, :1]).all() and torch.equal(index[:, 0, 0, 0] % 10, y)
    val = [y for _, y in loaders.val]
    assert sum(len(y) for y in val) == 51


def test_workers_give_the_same_order(data_fmnist_like):
    alone, pooled = _loaders(data_fmnist_like), _loaders(data_fmnist_like, workers=1)
    assert [y.tolist() for _, y in _epoch(alone.train, 2)] == [y.tolist() for _, y in _epoch(pooled.train, 2)]


@pytest.mark.parametrize("backend", ["tensor", "pil"])
def test_the_augmentation_does_not_depend_on_the_workers_or_touch_the_global_rngs(data_fmnist_like, backend):
    augment = dataclasses.replace(LIGHT, scale=(0.3, 1.0), hflip=0.5, reprob=0.5, backend=backend)
    alone, pooled = (_loaders(data_fmnist_like, augment=augment, workers=w).train for w in (0, 2))
    torch.manual_seed(123)
    after_seed = torch.rand(1)
    first = _epoch(alone, 1)  # reseeds with 123 and draws every image's augmentation in this process
    assert torch.equal(torch.rand(1), after_seed)  # the model's draws (dropout, mixup) are left as they were
    again = _epoch(pooled, 1)
    assert all(torch.equal(x1, x2) and torch.equal(y1, y2) for (x1, y1), (x2, y2) in zip(first, again))
    assert not torch.equal(first[0][0], _epoch(alone, 2)[0][0])  # another epoch, other draws


def test_train_workers_persist_across_epochs(data_fmnist_like):
    loader = _loaders(data_fmnist_like, workers=1).train
    first = _epoch(loader, 0)
    workers = loader._iterator
    assert loader.persistent_workers and _epoch(loader, 1) and loader._iterator is workers  # no re-fork per epoch
    assert [y.tolist() for _, y in _epoch(loader, 0)] == [y.tolist() for _, y in first]


def test_the_order_depends_only_on_seed_and_epoch(data_fmnist_like):
    a, b = _loaders(data_fmnist_like), _loaders(data_fmnist_like)
    for epoch in range(3):  # a has a history, b resumes at epoch 3
        _epoch(a.train, epoch)
    first, again = _epoch(a.train, 3), _epoch(b.train, 3)
    assert all(torch.equal(x1, x2) and torch.equal(y1, y2) for (x1, y1), (x2, y2) in zip(first, again))
    other_epoch = _epoch(b.train, 4)
    other_seed = _epoch(_loaders(data_fmnist_like, seed=1).train, 3)
    labels = [torch.cat([y for _, y in run]) for run in (first, other_epoch, other_seed)]
    assert not torch.equal(labels[0], labels[1]) and not torch.equal(labels[0], labels[2])


def test_two_ranks_cover_the_val_set_exactly_once(data_fmnist_like):
    seen = []
    for rank in (0, 1):
        loaders = _loaders(data_fmnist_like, rank=rank, world_size=2, batch_size=8)
        for x, _ in loaders.val:  # every pixel of image i encodes i
            seen += _pixels(x)[:, 0, 0, 0].tolist()
    assert sorted(seen) == list(range(51))


def test_two_ranks_split_each_train_epoch(data_fmnist_like):
    samplers = [_loaders(data_fmnist_like, rank=r, world_size=2).train.sampler for r in (0, 1)]
    for s in samplers:
        s.set_epoch(2)
    shards = [[index for index, _ in s] for s in samplers]  # (index, augmentation seed) pairs
    assert sorted(shards[0] + shards[1]) == list(range(200))


def test_shard_sampler_has_no_padding():
    for n, world in ((10, 3), (7, 2), (1, 4)):
        shards = [list(ShardSampler(n, r, world)) for r in range(world)]
        assert sorted(sum(shards, [])) == list(range(n))


def test_the_training_subset_is_drawn_per_seed_and_the_validation_subset_is_fixed(data_fmnist_like):
    a = _loaders(data_fmnist_like, train_subset=50, val_subset=20, seed=0)
    again = _loaders(data_fmnist_like, train_subset=50, val_subset=20, seed=0)
    b = _loaders(data_fmnist_like, train_subset=50, val_subset=20, seed=7)
    assert (a.train_size, a.val_size, a.test_size) == (50, 20, 51)  # test: the whole eval split
    train = {name: loaders.train.dataset.dataset.indices for name, loaders in (("a", a), ("again", again), ("b", b))}
    assert train["a"] == train["again"]  # every arm of a seed: the same images (SeededImages(Subset))
    assert train["a"] != train["b"] and a.val.dataset.indices == b.val.dataset.indices
    for indices in (train["a"], train["b"]):
        labels = torch.arange(200)[indices] % 10
        assert torch.bincount(labels).tolist() == [5] * 10
    seen = torch.cat([_pixels(x)[:, 0, 0, 0] for x, _ in a.test])  # pixel value = the image's index
    assert sorted(seen.tolist()) == list(range(51))
    whole = _loaders(data_fmnist_like)
    assert whole.test is whole.val and whole.test_size == 51
    order = stratified_order(torch.tensor([0] * 90 + [1] * 10))
    assert torch.bincount(torch.tensor([0] * 90 + [1] * 10)[order[:20]]).tolist() == [10, 10]


def test_repeated_augmentation_sampler(data_fmnist_like):
    sampler = _loaders(data_fmnist_like, augment=dataclasses.replace(LIGHT, aug_repeats=3)).train.sampler.sampler
    sampler.set_epoch(1)
    first = list(sampler)
    sampler.set_epoch(1)
    assert list(sampler) == first and first[0] == first[1] == first[2]
    other = _loaders(data_fmnist_like, seed=1, augment=dataclasses.replace(LIGHT, aug_repeats=3)).train.sampler.sampler
    other.set_epoch(1)
    assert list(other) != first


def test_random_erasing_on_the_tensor_backend(data_fmnist_like):
    loaders = _loaders(data_fmnist_like, augment=dataclasses.replace(LIGHT, reprob=1.0))
    x, _ = _epoch(loaders.train, 0)[0]
    assert loaders.backend == "tensor" and (x.flatten(1).std(dim=1) > 0.1).all()  # constant images, erased


def test_gray_into_three_channels(data_fmnist_like):
    loaders = _loaders(data_fmnist_like, in_chans=3)
    x, _ = next(iter(loaders.val))
    assert x.shape[1] == 3 and torch.equal(x[:, 0], x[:, 1]) and torch.equal(x[:, 1], x[:, 2])
    assert loaders.mean == (0.2860,) * 3


def test_imagenet_normalization(data_fmnist_like):
    loaders = _loaders(data_fmnist_like, in_chans=3, normalization="imagenet")
    x, _ = next(iter(loaders.val))
    assert loaders.mean == (0.485, 0.456, 0.406) and loaders.std == (0.229, 0.224, 0.225)
    assert torch.allclose(x[0, :, 0, 0], (0 - torch.tensor(loaders.mean)) / torch.tensor(loaders.std))


def test_channel_stats():
    assert channel_stats((0.5,), (0.2,), 3) == ((0.5,) * 3, (0.2,) * 3)
    mean, std = channel_stats((1.0, 0.0, 0.0), (0.1, 0.2, 0.3), 1)
    assert mean == pytest.approx((0.299,)) and std == pytest.approx((0.299 * 0.1 + 0.587 * 0.2 + 0.114 * 0.3,))
    with pytest.raises(ValueError, match="in_chans = 4"):
        channel_stats((0.5,), (0.2,), 4)


@pytest.mark.parametrize("in_chans, img_size", [(1, 28), (3, 28), (1, 36)])
def test_tensor_and_pil_backends_agree_at_eval(data_fmnist_like, in_chans, img_size):
    augment = dataclasses.replace(LIGHT, eval_interpolation="bilinear")
    batches = {}
    for backend in ("tensor", "pil"):
        loaders = _loaders(data_fmnist_like, in_chans=in_chans, img_size=img_size,
                           augment=dataclasses.replace(augment, backend=backend))
        batches[backend] = torch.cat([x for x, _ in loaders.val])
    assert batches["tensor"].shape == (51, in_chans, img_size, img_size)
    assert torch.allclose(batches["tensor"], batches["pil"], atol=1e-4)


def test_rgb_into_one_channel_matches_pil_luma(tmp_path):
    out = tmp_path / "cifar10"
    out.mkdir()
    images = torch.randint(0, 256, (20, 3, 32, 32), dtype=torch.uint8)
    save_split(out / "train.pt", images, torch.arange(20) % 10)
    save_split(out / "test.pt", images, torch.arange(20) % 10)
    splits = {s: {"images": 20, "file": f"{s}.pt"} for s in ("train", "test")}
    write_manifest(out, {"dataset": "cifar10", "num_classes": 10, "channels": 3, "image_size": 32,
                         "format": "tensors", "train_split": "train",
                         "eval_split": "test", "classes": [str(i) for i in range(10)], "splits": splits})
    batches = {}
    for backend in ("tensor", "pil"):
        loaders = build_loaders("cifar10", tmp_path, stats=normalization_stats("cifar10", "dataset"),
                                img_size=32, in_chans=1, batch_size=20, seed=0,
                                augment=dataclasses.replace(LIGHT, backend=backend))
        batches[backend] = next(iter(loaders.val))[0]
    std = loaders.std[0]
    assert batches["tensor"].shape == (20, 1, 32, 32)
    assert (batches["tensor"] - batches["pil"]).abs().max() <= 0.51 / 255 / std  # PIL rounds luma to uint8


def test_batched_crops_equal_torchvision_resized_crop():
    images = torch.rand(3, 2, 12, 10) * 255
    boxes = (torch.tensor([0.0, 2, 5]), torch.tensor([0.0, 1, 3]), torch.tensor([12.0, 7, 6]),
             torch.tensor([10.0, 9, 4]))
    flips = torch.tensor([False, True, False])
    got = resized_crops(images, boxes, flips, 16)
    for i in range(3):
        top, left, h, w = (int(b[i]) for b in boxes)
        want = TF.resized_crop(images[i], top, left, h, w, [16, 16], antialias=False)
        want = TF.horizontal_flip(want) if flips[i] else want
        assert torch.allclose(got[i], want, atol=1e-3)


def test_crop_boxes_follow_the_scale_and_ratio():
    torch.manual_seed(0)
    top, left, h, w = sample_crops(2000, 28, 28, (0.3, 0.6), (0.75, 4 / 3))
    assert (top >= 0).all() and (left >= 0).all() and (top + h <= 28).all() and (left + w <= 28).all()
    area = h * w / 784
    assert area.min() > 0.25 and area.max() < 0.65 and 0.4 < area.mean() < 0.5
    top, left, h, w = sample_crops(5, 28, 28, (1.0, 1.0), (1.0, 1.0))
    assert (h == 28).all() and (w == 28).all() and (top == 0).all()


def test_randaugment_survives_zero_bit_posterize():
    img = Image.fromarray(np.full((28, 28), 200, dtype=np.uint8))
    assert np.asarray(posterize_any_bits(img, 0)).max() == 0
    with pytest.raises(ValueError):  # why the patch exists: Pillow >= 13 refuses 0 bits
        ImageOps.posterize(img, 0)
    tf = pil_transform(img_size=28, in_chans=1, mean=(0.5,), std=(0.5,), training=True,
                       augment=Augment(aa="rand-m10-n15-inc1"))  # magnitude 10: posterize keeps 0 bits
    for _ in range(30):
        assert tf(img).shape == (1, 28, 28)


def test_user_mistakes_raise_one_clear_error(tmp_path, data_fmnist_like):
    with pytest.raises(PipelineError, match="python -m pipeline fetch cifar10"):
        build_loaders("cifar10", tmp_path, stats=normalization_stats("cifar10", "dataset"),
                      img_size=32, in_chans=3, batch_size=8, seed=0, augment=LIGHT)
    with pytest.raises(PipelineError, match="train.batch_size"):
        _loaders(data_fmnist_like, batch_size=512)
    with pytest.raises(PipelineError, match="backend 'tensor'"):
        _loaders(data_fmnist_like, augment=Augment(aa="rand-m9", backend="tensor"))


def test_augment_from_params():
    augment = Augment.from_train(from_mapping(Params, {}).train)
    assert augment.scale == (0.8, 1.0) and augment.crop_pct == 1.0 and augment.backend == "auto"  # params.yaml's
    assert Augment().scale == (0.08, 1.0) and Augment().crop_pct == 0.875  # timm train.py's own defaults


def official_rank_batches(n: int, ranks: int, rank_batch: int, seed: int, epoch: int) -> list[list[list[int]]]:
    """Per rank, its batches of one epoch in the official multi-GPU run (timm's train.py): torch's DistributedSampler
    over `ranks` (padded to a multiple of them), a DataLoader of `rank_batch` per rank that drops its last partial
    batch."""
    batches = []
    for r in range(ranks):
        sampler = DistributedSampler(range(n), num_replicas=ranks, rank=r, shuffle=True, seed=seed)
        sampler.set_epoch(epoch)
        batches.append([b.tolist() for b in DataLoader(range(n), sampler=sampler, batch_size=rank_batch,
                                                       drop_last=True)])
    return batches


def test_emulated_ranks_step_through_the_official_ranks_batches(data_fmnist_like):
    """train.sampler_ranks = 8 at batch 48 (6 per rank) on 200 images: each rank's shard of 25 (padded from the
    start of the permutation), 4 steps, each step rank 0's batch, then rank 1's, ... (one process, or two holding
    four ranks each)."""
    official = official_rank_batches(200, 8, 6, seed=0, epoch=3)
    steps = [[i for rank in official for i in rank[k]] for k in range(len(official[0]))]
    assert len(steps) == 4
    one = _loaders(data_fmnist_like, batch_size=48, sampler_ranks=8, augment=dataclasses.replace(LIGHT, scale=(1, 1)))
    one.train.sampler.set_epoch(3)
    assert [_pixels(x)[:, 0, 0, 0].tolist() for x, _ in one.train] == steps  # image i's pixels are i
    shares = []
    for rank in (0, 1):
        loaders = _loaders(data_fmnist_like, batch_size=24, sampler_ranks=8, rank=rank, world_size=2)
        loaders.train.sampler.set_epoch(3)
        shares.append([[index for index, _ in loaders.train.sampler][k * 24:(k + 1) * 24] for k in range(4)])
    assert [a + b for a, b in zip(*shares)] == steps
    with pytest.raises(PipelineError, match="sampler_ranks"):
        _loaders(data_fmnist_like, batch_size=16, sampler_ranks=8, rank=0, world_size=3)


@pytest.mark.parametrize("dataset", ["food101", "cifar10", "cifar100", "stl10", "flowers102", "pets"])
def test_paper_small_steps_as_the_official_8_gpus_x_64(tmp_path, repo_root, dataset):
    """paper-small on one GPU takes the optimizer steps (and warm-up epochs) of the official run, timm's train.py on
    8 GPUs x 64: Flowers-102's 1,020 images give 2 steps per epoch there (128 per rank), not 1,020 // 512."""
    from pipeline.datasets import DATASETS
    from pipeline.profiles import merged_text
    from pipeline.schema import yaml_load
    from pipeline.training.engine import create_schedule

    params = from_mapping(Params, yaml_load(merged_text("paper-small", (repo_root / "params.yaml").read_text())[0]))
    recipe, n = params.train, DATASETS[dataset].train_size
    official = official_rank_batches(n, 8, 64, seed=0, epoch=0)
    assert {len(b) for b in official} == {len(official[0])}
    out = tmp_path / dataset
    out.mkdir()
    for split, size in (("train", n), ("test", 2)):
        save_split(out / f"{split}.pt", torch.zeros(size, 3, 1, 1, dtype=torch.uint8), torch.arange(size) % 2)
    write_manifest(out, {"dataset": dataset, "num_classes": 2, "channels": 3, "image_size": 1, "format": "tensors",
                         "train_split": "train", "eval_split": "test", "classes": ["a", "b"],
                         "splits": {s: {"images": k, "file": f"{s}.pt"} for s, k in (("train", n), ("test", 2))}})
    loaders = build_loaders(dataset, tmp_path, stats=normalization_stats(dataset, "imagenet"), img_size=224,
                            in_chans=3, batch_size=recipe.batch_size, seed=0, augment=Augment.from_train(recipe),
                            sampler_ranks=recipe.sampler_ranks)
    assert len(loaders.train) == len(official[0])
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=recipe.lr)
    schedule = create_schedule(optimizer, recipe, len(loaders.train))  # stepped per epoch, as train.py steps it
    assert schedule.t_in_epochs and schedule.warmup_t == recipe.warmup_epochs and not recipe.sched_on_updates


def fashion_mnist_uint8(n: int) -> torch.Tensor:
    """The first `n` Fashion-MNIST test images as uint8 (n, 1, 28, 28), from Debian's package; skip without it."""
    path = Path("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")
    if not path.exists():
        pytest.skip(f"{path} absent (Debian's dataset-fashion-mnist)")
    with gzip.open(path) as file:
        return torch.from_numpy(np.frombuffer(file.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)[:n].copy())


@pytest.mark.parametrize("images, in_chans, img_size, crop_pct", [
    ("fashion_mnist", 1, 28, 0.875),   # the CPU default's tensor back-end: 28 -> 32 -> crop 28
    ("fashion_mnist", 3, 224, 0.875),  # 28 -> 256 -> crop 224, the paper's eval on a 28-px set
    ("rgb32", 3, 224, 0.875),          # CIFAR-shaped: 32 -> 256 -> crop 224 (paper-small on CIFAR, device path)
    ("rgb32", 1, 28, 1.0),             # RGB into a grey model, downsampled: luma rounded, 32 -> 28
    ("rgb256", 3, 224, 0.875),         # the stored 256-px squares (Food-101, Flowers-102, Pets): crop only
])
def test_the_batched_evaluation_is_timms_within_one_level(images, in_chans, img_size, crop_pct):
    """Both batched paths (tensor back-end, device path) evaluate as timm's eval transform on PIL images does (bicubic,
    antialiased, rounded to uint8 by PIL): within one 8-bit level, on real Fashion-MNIST images and RGB ones."""
    from pipeline.data.load.device import EvalOnDevice

    g = torch.Generator().manual_seed(0)
    x = {"fashion_mnist": lambda: fashion_mnist_uint8(200),
         "rgb32": lambda: torch.randint(0, 256, (64, 3, 32, 32), generator=g, dtype=torch.uint8),
         "rgb256": lambda: torch.randint(0, 256, (4, 3, 256, 256), generator=g, dtype=torch.uint8)}[images]()
    mean, std = channel_stats((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), in_chans)
    options = {"img_size": img_size, "in_chans": in_chans, "mean": mean, "std": std,
               "augment": Augment(crop_pct=crop_pct)}
    pil = pil_transform(training=False, **options)
    expected = torch.stack([pil(Image.fromarray(i[0].numpy() if i.shape[0] == 1 else i.permute(1, 2, 0).numpy()))
                            for i in x])
    levels = torch.tensor(std).view(1, -1, 1, 1) * 255  # normalised units -> 8-bit levels
    tensor = TensorBatchTransform(training=False, **options)(ImageBatch(x, torch.zeros(len(x), dtype=torch.int64)))[0]
    on_device = EvalOnDevice(**options, device=torch.device("cpu"))(x)
    for got in (tensor, on_device):
        assert got.shape == expected.shape
        assert ((got - expected) * levels).abs().max() <= 1 + 1e-3


def test_the_held_out_pool_is_fixed_and_never_trained_on(data_fmnist_like):
    def train_indices(loaders):
        return set(loaders.train.dataset.dataset.indices)

    pools = {}
    for seed in (0, 7):
        loaders = _loaders(data_fmnist_like, train_subset=50, val_subset=20, seed=seed, holdout=60)
        pool = loaders.holdout.dataset.indices
        pools[seed] = pool
        assert len(pool) == 60 and not train_indices(loaders) & set(pool)
        assert torch.bincount(torch.arange(200)[pool] % 10).tolist() == [6] * 10  # class-stratified
        seen = torch.cat([_pixels(x)[:, 0, 0, 0] for x, _ in loaders.holdout])  # pixel value = the image's index
        assert sorted(seen.tolist()) == sorted(pool)  # the eval transform: the images unaugmented
        assert loaders.train_size == 50 and loaders.test_size == 51
    assert pools[0] == pools[7]  # one pool for every seed
    plain = _loaders(data_fmnist_like, train_subset=50, val_subset=20, seed=7)
    assert plain.holdout is None
    labels = torch.arange(200) % 10
    assert training_draw(labels, 50, 7).tolist() == plain.train.dataset.dataset.indices  # no pool: as before
    assert sorted(training_draw(labels, 0, 7, 60).tolist()) == sorted(set(range(200)) - set(pools[0]))
    with pytest.raises(PipelineError, match="data.holdout"):
        holdout_pool(labels, 200)

"""Train and eval DataLoaders for a fetched dataset: `build_loaders(name, root, ...)`.

    loaders = build_loaders("fashion_mnist", "data", stats=((0.286,), (0.353,)), img_size=28, in_chans=1,
                            batch_size=128, seed=0,
                            augment=Augment.from_train(params.train), rank=rank, world_size=world_size)
    for epoch in range(epochs):
        loaders.train.sampler.set_epoch(epoch)   # always present, also with one process

`batch_size` is per process; the train loader drops its last partial batch (timm's Mixup needs even batches).
Epoch e's order and each image's augmentation depend only on (seed, e, its place) (`SeededOrder`), not on
`resources.workers` or a resume. The eval loader shards without padding, so summed counts see each image once.
`train_subset` is a class-stratified draw per run seed, the same for every arm of a seed. `holdout` images of the
train split (a fixed class-stratified draw, the same for every seed) are never drawn for training: the final model
scores them beside the test split (`Loaders.holdout`), a second sample of the task's images for the comparisons whose
margins are within the test split's own noise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from PIL import Image
from timm.data.distributed_sampler import RepeatAugSampler
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler, Subset
from torchvision import datasets as tvd

from pipeline.data.load.images import FolderLoader
from pipeline.data.load.transforms import (
    Augment,
    ImageBatch,
    TensorBatchTransform,
    channel_stats,
    pil_transform,
    resolve_backend,
    seeded,
)
from pipeline.data.meta import meta_from_manifest
from pipeline.data.store import load_split, read_manifest
from pipeline.errors import PipelineError

#: Seed of the fixed shuffle that `val_subset` takes its first n images from (`train_subset`: the run seed's).
SUBSET_SEED = 0
#: Seed of the fixed shuffle the held-out pool (`holdout`) is the first n images of: no run seed's draw
HOLDOUT_SEED = 7_919
#: Run seed s shuffles epoch e with generator seed s * SEED_STRIDE + e: distinct for every (s, e) with
#: e < SEED_STRIDE (torch's DistributedSampler alone uses s + e, so seed 1 epoch 0 would repeat seed 0 epoch 1).
SEED_STRIDE = 1_000_003


class SeededOrder(Sampler):
    """A train sampler's order as (index, seed) pairs: each image's augmentation seed from the run's seed, the epoch and
    its place in the epoch's global order (rank r's k-th image is place r + k w)."""

    def __init__(self, sampler, *, seed: int, rank: int, world_size: int):
        self.sampler, self.seed, self.rank, self.world_size, self.epoch = sampler, seed, rank, world_size, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.sampler.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self):
        base = (self.seed * SEED_STRIDE + self.epoch) << 32
        placed = (self.sampler.placed() if isinstance(self.sampler, EmulatedRanks)
                  else ((index, self.rank + k * self.world_size) for k, index in enumerate(self.sampler)))
        return ((index, base + place) for index, place in placed)


class EmulatedRanks(Sampler[int]):
    """The train order of `world` data-parallel ranks of which this process holds `ranks` (params
    `train.sampler_ranks`; e.g. the official 8 GPUs x 64 on one GPU at batch 512). Each rank's shard is what its own
    sampler deals it; a batch is `rank_batch` images of each rank in turn, and each rank's last partial batch is
    dropped, as timm's loader drops it, so the steps per epoch are the official run's."""

    def __init__(self, samplers: list, ranks: range, world: int, rank_batch: int):
        self.samplers, self.ranks, self.world, self.rank_batch = samplers, ranks, world, rank_batch
        self.steps = len(samplers[0]) // rank_batch

    def set_epoch(self, epoch: int) -> None:
        for sampler in self.samplers:
            sampler.set_epoch(epoch)

    def __len__(self) -> int:
        return self.steps * self.rank_batch * len(self.samplers)

    def placed(self):
        shards = [list(sampler) for sampler in self.samplers]
        for step in range(self.steps):
            for rank, shard in zip(self.ranks, shards):
                for k in range(step * self.rank_batch, (step + 1) * self.rank_batch):
                    yield shard[k], rank + k * self.world

    def __iter__(self):
        return (index for index, _ in self.placed())


class SeededImages(Dataset):
    """A train split read by (index, seed) pairs: each image (or batch, on the tensor back-end) augmented under its
    own seed (`transforms.seeded`)."""

    def __init__(self, dataset):
        self.dataset = dataset
        base = dataset.dataset if isinstance(dataset, Subset) else dataset
        #: uint8 tensors without a per-image transform: the tensor back-end augments whole batches in collate_fn
        self.batched = isinstance(base, TensorImages) and base.transform is None

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, item: tuple[int, int]):
        index, seed = item
        with seeded(seed):
            return self.dataset[index]

    def __getitems__(self, items: list[tuple[int, int]]):
        if self.batched:
            return self.dataset.__getitems__([index for index, _ in items])._replace(seed=items[0][1])
        return [self[item] for item in items]


class TensorImages(Dataset):
    """A split held as uint8 tensors (memory-mapped from `<split>.pt`): whole batches to the tensor back-end
    (`ImageBatch`), or (transform(image), label) per image with a PIL transform."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, transform=None):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        image, label = self.images[index], int(self.labels[index])
        if self.transform is None:
            return image, label
        array = image.permute(1, 2, 0).numpy()
        return self.transform(Image.fromarray(array[..., 0] if array.shape[2] == 1 else array)), label

    def __getitems__(self, indices: list[int]):
        if self.transform is not None:
            return [self[i] for i in indices]
        index = torch.as_tensor(indices)
        return ImageBatch(self.images[index], self.labels[index])


@dataclass
class Loaders:

    train: DataLoader
    val: DataLoader
    num_classes: int
    train_size: int  #: images in the train split (after `train_subset`), over all ranks
    val_size: int
    classes: list
    in_chans: int
    mean: tuple  #: normalisation used, adapted to in_chans
    std: tuple
    backend: str  #: 'tensor' or 'pil' (see pipeline.data.load.transforms)
    test: DataLoader | None = None  #: the whole eval split, for the final model's per-image scores
    test_size: int = 0
    #: random erasing of a whole training batch after Mixup/CutMix (`erasing_after_mix`); None: the loader erases
    erase: Callable | None = None
    holdout: DataLoader | None = None  #: the held-out pool of the train split, scored like `test` (`holdout`)


class ShardSampler(Sampler[int]):
    """Rank r of w takes indices r, r + w, r + 2w, ...: each index exactly once over all ranks, no padding."""

    def __init__(self, size: int, rank: int, world_size: int):
        self.indices = range(rank, size, world_size)

    def __iter__(self):
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)

    def set_epoch(self, epoch: int) -> None:
        """Evaluation order does not depend on the epoch."""


class SeededRepeatAugSampler(RepeatAugSampler):
    """timm's RepeatAugSampler (DeiT's repeated augmentation) shuffled per (seed, epoch): timm seeds it with the epoch
    alone, so every run seed would see the same order."""

    def __init__(self, dataset, *, seed: int, **kwargs):
        super().__init__(dataset, **kwargs)
        self.seed = seed
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(self.seed * SEED_STRIDE + epoch)


def train_sampler(dataset, *, seed: int, rank: int, world_size: int, aug_repeats: float) -> Sampler:
    if aug_repeats > 0:
        return SeededRepeatAugSampler(dataset, seed=seed, num_replicas=world_size, rank=rank,
                                      num_repeats=aug_repeats)
    return DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed * SEED_STRIDE)


def stratified_order(labels: torch.Tensor, seed: int = SUBSET_SEED) -> torch.Tensor:
    """A fixed shuffle of the indices in rounds of one image per class: its first n hold floor(n / C) or one more of
    every class that has that many."""
    n = len(labels)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    shuffled = labels[perm]
    by_class = torch.argsort(shuffled, stable=True)  # grouped by class, in shuffled order within a class
    counts = torch.bincount(shuffled)
    starts = torch.cumsum(counts, 0) - counts
    rank_in_class = torch.empty(n, dtype=torch.int64)
    rank_in_class[by_class] = torch.arange(n) - starts[shuffled[by_class]]
    return perm[torch.argsort(rank_in_class * n + torch.arange(n))]


def dataset_labels(dataset) -> torch.Tensor:
    for attr in ("labels", "targets", "_labels"):
        if hasattr(dataset, attr):
            return torch.as_tensor(getattr(dataset, attr), dtype=torch.int64)
    raise TypeError(f"cannot read the labels of {type(dataset).__name__}")


def take_subset(dataset, n: int, seed: int = SUBSET_SEED):
    """The first `n` images of the split's stratified shuffle seeded by `seed` (the whole split for 0 or >= size)."""
    if n <= 0 or n >= len(dataset):
        return dataset
    return Subset(dataset, stratified_order(dataset_labels(dataset), seed)[:n].tolist())


def holdout_pool(labels: torch.Tensor, holdout: int) -> torch.Tensor:
    """The held-out pool's indices, ascending: the first `holdout` of the split's fixed stratified shuffle
    (HOLDOUT_SEED); empty for 0."""
    if holdout <= 0:
        return torch.zeros(0, dtype=torch.int64)
    if holdout >= len(labels):
        raise PipelineError(f"data.holdout = {holdout} leaves none of the {len(labels):,} training images to train"
                            " on; lower it")
    return stratified_order(labels, HOLDOUT_SEED)[:holdout].sort().values


def training_draw(labels: torch.Tensor, n: int, seed: int, holdout: int = 0) -> torch.Tensor:
    """The indices a run seed trains on: the first `n` of a stratified shuffle seeded by `seed` of the split less the
    held-out pool (all of it for n 0 or >= what is left). Without a pool, `take_subset`'s draw exactly."""
    rest = torch.arange(len(labels))
    if holdout > 0:
        keep = torch.ones(len(labels), dtype=torch.bool)
        keep[holdout_pool(labels, holdout)] = False
        rest = rest[keep]
    if n <= 0 or n >= len(rest):
        return rest
    return rest[stratified_order(labels[rest], seed)[:n]]


def open_split(manifest: dict, directory: Path, split: str, transform=None):
    fmt, expected = manifest["format"], manifest["splits"][split]["images"]
    if fmt == "tensors":
        dataset = TensorImages(*load_split(directory / manifest["splits"][split]["file"]), transform=transform)
    else:  # the user's images, each loaded with the channels the manifest records
        dataset = tvd.ImageFolder(str(Path(manifest["path"]) / manifest["splits"][split]["dir"]),
                                  transform=transform, loader=FolderLoader(manifest["channels"]))
    if len(dataset) != expected:
        raise PipelineError(f"dataset {manifest['dataset']!r}: the {split} split has {len(dataset)} images but "
                            f"{expected} when fetched; the data changed: fetch it again")
    return dataset


def train_order(dataset, *, seed: int, rank: int, world_size: int, aug_repeats: float, sampler_ranks: int,
                batch_size: int) -> SeededOrder:
    """This process's train order: its own rank's sampler, or with `sampler_ranks` > 1 its share of that many
    emulated ranks."""
    if sampler_ranks <= 1:
        sampler = train_sampler(dataset, seed=seed, rank=rank, world_size=world_size, aug_repeats=aug_repeats)
    else:
        if sampler_ranks % world_size or batch_size % (sampler_ranks // world_size):
            raise PipelineError(f"train.sampler_ranks = {sampler_ranks} does not split over {world_size} process(es)"
                                f" with {batch_size} images each; make it a multiple of resources.nproc x"
                                " resources.nnodes whose share divides the batch")
        share = sampler_ranks // world_size
        ranks = range(rank * share, (rank + 1) * share)
        sampler = EmulatedRanks([train_sampler(dataset, seed=seed, rank=r, world_size=sampler_ranks,
                                               aug_repeats=aug_repeats) for r in ranks],
                                ranks, sampler_ranks, batch_size // share)
    return SeededOrder(sampler, seed=seed, rank=rank, world_size=world_size)


def build_loaders(name: str, root: str | Path, *, stats: tuple[tuple, tuple], img_size: int, in_chans: int | None,
                  batch_size: int, seed: int, augment: Augment, rank: int = 0, world_size: int = 1, workers: int = 0,
                  train_subset: int = 0, val_subset: int = 0, pin_memory: bool = False,
                  sampler_ranks: int = 1, holdout: int = 0) -> Loaders:
    """Train and eval loaders of fetched dataset `name` under `root` (module docstring).

    `stats` is the (mean, std) to normalise with (`registry.normalization_stats`); `in_chans` None takes the
    dataset's channels; a subset of 0 keeps the whole split; `holdout` > 0 holds that many training images out
    (module docstring).
    """
    directory = Path(root) / name
    manifest = read_manifest(directory, name)
    meta = meta_from_manifest(manifest, name)
    in_chans = in_chans or meta.channels
    mean, std = channel_stats(*stats, in_chans)
    backend = resolve_backend(augment, in_memory=manifest["format"] == "tensors", img_size=img_size,
                              native_size=meta.image_size)
    options = {"img_size": img_size, "in_chans": in_chans, "mean": mean, "std": std, "augment": augment}
    sets, collates = {}, {}
    for role, split, subset in (("train", manifest["train_split"], train_subset),
                                ("val", manifest["eval_split"], val_subset)):
        if backend == "tensor":  # batches are built in collate_fn from uint8 batches
            transform, collates[role] = None, TensorBatchTransform(training=role == "train", **options)
        else:
            transform, collates[role] = pil_transform(training=role == "train", **options), None
        split_set = open_split(manifest, directory, split, transform)
        if role == "train" and holdout > 0:
            labels = dataset_labels(split_set)
            sets["train"] = Subset(split_set, training_draw(labels, subset, seed, holdout).tolist())
            pool = Subset(open_split(manifest, directory, split, None if backend == "tensor" else
                                     pil_transform(training=False, **options)),
                          holdout_pool(labels, holdout).tolist())
        else:
            sets[role] = take_subset(split_set, subset, seed if role == "train" else SUBSET_SEED)
    whole = sets["val"].dataset if isinstance(sets["val"], Subset) else None  # the eval split, for `test`
    if len(sets["train"]) < batch_size * world_size:
        raise PipelineError(f"train.batch_size: {batch_size} per process x {world_size} process(es) exceeds the "
                            f"{len(sets['train'])} training images of {name}; lower it or raise data.train_subset")
    # the loader's own generator for its workers' base seed: the run's global RNG stream is the same with any
    # number of workers (each image's draws come from SeededOrder's seeds)
    common = {"batch_size": batch_size, "num_workers": workers, "pin_memory": pin_memory,
              "persistent_workers": workers > 0, "generator": torch.Generator().manual_seed(seed)}
    order = train_order(sets["train"], seed=seed, rank=rank, world_size=world_size, aug_repeats=augment.aug_repeats,
                        sampler_ranks=sampler_ranks, batch_size=batch_size)
    train = DataLoader(SeededImages(sets["train"]), sampler=order, drop_last=True, collate_fn=collates["train"],
                       **common)

    def evaluation(split) -> DataLoader:
        return DataLoader(split, sampler=ShardSampler(len(split), rank, world_size), drop_last=False,
                          collate_fn=collates["val"], **common)

    val = evaluation(sets["val"])
    test = evaluation(whole) if whole is not None else val
    return Loaders(train, val, meta.num_classes, len(sets["train"]), len(sets["val"]),
                   manifest["classes"], in_chans, mean, std, backend, test, len(test.dataset),
                   holdout=evaluation(pool) if holdout > 0 else None)

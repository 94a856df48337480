"""The engine under DDP on CPU: 2 processes, gloo, started with torch.multiprocessing (as torchrun would, through
the environment `setup_distributed` reads), each in its own working directory like two nodes without a shared
filesystem."""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from timm.data import Mixup
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from training_fixtures import dies_in_epoch

from pipeline.config import Resources, TrainConfig
from pipeline.data.load.loaders import ShardSampler
from pipeline.training import engine

pytestmark = pytest.mark.slow("spawns two gloo ranks that train, are killed and resume, eager and compiled")

WORLD = 2
TIMINGS = {"images_per_s", "epoch_time_s", "wall_time_s"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(worker, tmp_path: Path, **options) -> list[dict]:
    """Run `worker(d, options)` on 2 gloo ranks (two one-process "nodes", each in tmp_path/node<r>); their results."""
    port = free_port()
    mp.start_processes(_entry, args=(worker, str(tmp_path), port, options), nprocs=WORLD, start_method="spawn")
    return [json.loads((tmp_path / f"result{r}.json").read_text()) for r in range(WORLD)]


def _entry(rank: int, worker, tmp: str, port: int, options: dict) -> None:
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(WORLD), "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port)})
    node = Path(tmp) / f"node{rank}"
    node.mkdir()
    os.chdir(node)
    d = engine.setup_distributed("cpu", threads=1)
    try:
        result = worker(d, options)
    finally:
        engine.teardown_distributed()
    (Path(tmp) / f"result{rank}.json").write_text(json.dumps(result))


def draws(d: engine.Dist, options: dict) -> dict:
    engine.reseed(0, 0, d.rank)
    mixup = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=3)
    data = TensorDataset(torch.arange(32))
    sampler = DistributedSampler(data, num_replicas=d.world_size, rank=d.rank, shuffle=True, seed=7)
    return {"torch": torch.rand(4).tolist(), "python": random.random(), "numpy": float(np.random.rand()),
            "mixup_lambda": mixup._params_per_batch()[0], "indices": list(sampler)}


def model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 32), torch.nn.BatchNorm1d(32),
                               torch.nn.GELU(), torch.nn.Dropout(0.1), torch.nn.Linear(32, 3))


def loaders(d: engine.Dist) -> SimpleNamespace:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 1, 4, 4, generator=g)
    y = (x.flatten(1).sum(1) > 0).long() + (x[:, 0, 0, 0] > 1).long()
    train = TensorDataset(x, y)
    sampler = DistributedSampler(train, num_replicas=d.world_size, rank=d.rank, shuffle=True, seed=0, drop_last=True)
    val = TensorDataset(x[d.rank:32:d.world_size], y[d.rank:32:d.world_size])
    return SimpleNamespace(train=DataLoader(train, batch_size=8, sampler=sampler, drop_last=True),
                           val=DataLoader(val, batch_size=8), num_classes=3)


def killed_and_resumed(d: engine.Dist, options: dict) -> dict:
    """An uninterrupted run, then a run killed in epoch 2 and started again, in this rank's working directory."""
    recipe = TrainConfig(epochs=3, batch_size=16, lr=1e-2, warmup_epochs=1, mixup=0.8, cutmix=1.0, ema=True,
                         ema_decay=0.5)
    run = {"recipe": recipe, "seed": 0, "d": d, "attempt": "x", "resources": Resources(compile=options["compile"])}
    whole = engine.fit(model(), loaders(d), checkpoint=Path("scratch/whole.pt"), **run)
    with pytest.MonkeyPatch.context() as patch, dies_in_epoch(patch, 1), contextlib.suppress(KeyboardInterrupt):
        engine.fit(model(), loaders(d), checkpoint=Path("scratch/killed.pt"), **run)
    had_checkpoint = Path("scratch/killed.pt").exists()  # only rank 0 writes one: no shared filesystem
    resumed_model = model(seed=9)
    resumed = engine.fit(resumed_model, loaders(d), checkpoint=Path("scratch/killed.pt"), **run)
    bn = resumed_model[2]
    return {"whole": [{k: v for k, v in r.items() if k not in TIMINGS} for r in whole["history"]],
            "resumed": [{k: v for k, v in r.items() if k not in TIMINGS} for r in resumed["history"]],
            "had_checkpoint": had_checkpoint, "bn": (bn.running_mean.sum() + bn.running_var.sum()).item()}


def scored_images(n: int = 33) -> TensorDataset:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 1, 4, 4, generator=g)
    return TensorDataset(x, (x.flatten(1).sum(1) > 0).long())


def scores(d: engine.Dist, options: dict) -> list[bool]:
    """Per-image correctness of a fixed model on 33 test images, each rank scoring its shard."""
    data = scored_images()
    loader = DataLoader(data, batch_size=4, sampler=ShardSampler(len(data), d.rank, d.world_size))
    return engine.score(model(), loader, d).tolist()


def everything(d: engine.Dist, options: dict) -> dict:
    """One spawn for all the tests of this module (starting 2 processes costs more than what they run)."""
    return {"draws": draws(d, options), "eager": killed_and_resumed(d, {"compile": False}),
            "compiled": killed_and_resumed(d, {"compile": True}), "scores": scores(d, options)}


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    return spawn(everything, tmp_path_factory.mktemp("ddp"))


def test_each_rank_draws_its_own_numbers_and_they_split_one_permutation(ranks):
    draws = [r["draws"] for r in ranks]
    for source in ("torch", "python", "numpy", "mixup_lambda"):
        assert draws[0][source] != draws[1][source], source
    assert sorted(draws[0]["indices"] + draws[1]["indices"]) == list(range(32))  # the sampler's seed is shared


@pytest.mark.parametrize("compiled", ["eager", "compiled"])
def test_ddp_ema_mixup_run_resumes_after_a_kill_with_identical_metrics(ranks, compiled):
    """2 gloo ranks, EMA, mixup/cutmix, BatchNorm (and torch.compile): killed in epoch 2, started again on "nodes"
    where only node 0 has the checkpoint. Rank 0 hands it over; the metrics equal the uninterrupted run's."""
    runs = [r[compiled] for r in ranks]
    assert [r["had_checkpoint"] for r in runs] == [True, False]
    assert runs[0]["resumed"] == runs[0]["whole"] and runs[1]["resumed"] == runs[1]["whole"]
    assert runs[0]["whole"] == runs[1]["whole"]  # metrics are summed over the ranks
    assert runs[0]["bn"] == runs[1]["bn"]  # BatchNorm statistics averaged before each evaluation


def test_every_rank_gets_every_test_images_score_once(ranks):
    """33 images over 2 ranks (17 + 16): the gathered correctness is the single process's, on both ranks."""
    one = engine.Dist(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    data = scored_images()
    alone = engine.score(model(), DataLoader(data, batch_size=4, sampler=ShardSampler(len(data), 0, 1)), one)
    with torch.no_grad():
        expected = (model().eval()(data.tensors[0]).argmax(-1) == data.tensors[1]).tolist()
    assert alone.tolist() == expected and len(expected) == 33
    assert ranks[0]["scores"] == ranks[1]["scores"] == expected

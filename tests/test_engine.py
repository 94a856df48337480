"""The training engine on a tiny synthetic problem: determinism, resume, NaN guard, metrics, launch lines."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from pipeline import engine, launch
from pipeline.config import TrainConfig
from pipeline.engine import Dist, fit
from pipeline.errors import PipelineError

TIMINGS = {"images_per_s", "epoch_time_s", "wall_time_s"}


def tiny_loaders(n=64, classes=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, 4, 4, generator=g)
    y = (x.flatten(1).sum(1) > 0).long() + (x[:, 0, 0, 0] > 1).long()
    train = TensorDataset(x, y)
    sampler = DistributedSampler(train, num_replicas=1, rank=0, shuffle=True, seed=seed, drop_last=True)
    val = TensorDataset(x[:32], y[:32])
    return SimpleNamespace(train=DataLoader(train, batch_size=16, sampler=sampler, drop_last=True),
                           val=DataLoader(val, batch_size=16), num_classes=classes)


def tiny_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Dropout(0.2),
                               torch.nn.Linear(32, 3))


def recipe(**kw):
    return TrainConfig(**({"epochs": 3, "batch_size": 16, "lr": 1e-2, "warmup_epochs": 1, "threads": 1} | kw))


def strip(summary):
    return [{k: v for k, v in row.items() if k not in TIMINGS} for row in summary["history"]]


def test_same_seed_same_history_and_learning(tmp_path):
    a = fit(tiny_model(), tiny_loaders(), recipe(), seed=1, d=Dist(), checkpoint=tmp_path / "a.pt", attempt="x")
    b = fit(tiny_model(), tiny_loaders(), recipe(), seed=1, d=Dist(), checkpoint=tmp_path / "b.pt", attempt="x")
    c = fit(tiny_model(), tiny_loaders(), recipe(), seed=2, d=Dist(), checkpoint=tmp_path / "c.pt", attempt="x")
    assert strip(a) == strip(b)
    assert strip(a) != strip(c)  # dropout and shuffling follow the seed
    assert a["history"][-1]["train_loss"] < a["history"][0]["train_loss"]
    assert a["epochs"] == 3 and 0 <= a["top1"] <= 1 and a["best_top1"] >= a["top1"]
    assert a["history"][0]["lr"] == pytest.approx(1e-6)  # warmup starts at warmup_lr


def test_killed_run_resumes_to_the_same_result(tmp_path, monkeypatch):
    whole = fit(tiny_model(), tiny_loaders(), recipe(), seed=0, d=Dist(), checkpoint=tmp_path / "w.pt", attempt="x")
    real_evaluate, calls = engine.evaluate, []

    def dying_evaluate(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # dies during epoch 2, after epoch 1's checkpoint
            raise KeyboardInterrupt
        return real_evaluate(*args, **kwargs)

    monkeypatch.setattr(engine, "evaluate", dying_evaluate)
    with pytest.raises(KeyboardInterrupt):
        fit(tiny_model(), tiny_loaders(), recipe(), seed=0, d=Dist(), checkpoint=tmp_path / "r.pt", attempt="x")
    monkeypatch.setattr(engine, "evaluate", real_evaluate)
    assert torch.load(tmp_path / "r.pt", weights_only=False)["epoch"] == 0
    resumed = fit(tiny_model(seed=99), tiny_loaders(), recipe(), seed=0, d=Dist(), checkpoint=tmp_path / "r.pt",
                  attempt="x")
    assert strip(resumed) == strip(whole)


def test_checkpoint_of_another_attempt_is_ignored(tmp_path):
    fit(tiny_model(), tiny_loaders(), recipe(epochs=1), seed=0, d=Dist(), checkpoint=tmp_path / "c.pt", attempt="old")
    fresh = fit(tiny_model(), tiny_loaders(), recipe(epochs=1), seed=0, d=Dist(), checkpoint=tmp_path / "c.pt",
                attempt="new")
    assert len(fresh["history"]) == 1


def test_non_finite_loss_stops_with_the_epoch_and_the_knobs(tmp_path):
    model = tiny_model()
    with torch.no_grad():
        model[1].weight.fill_(float("nan"))
    with pytest.raises(PipelineError, match=r"epoch 0, step 0.*train.lr"):
        fit(model, tiny_loaders(), recipe(), seed=0, d=Dist(), checkpoint=tmp_path / "n.pt", attempt="x")


def test_mixup_changes_training_and_ema_changes_what_is_evaluated(tmp_path):
    def run(name, **kw):
        return fit(tiny_model(), tiny_loaders(), recipe(epochs=2, **kw), seed=0, d=Dist(),
                   checkpoint=tmp_path / f"{name}.pt", attempt="x")

    plain, mixed = run("plain"), run("mixed", mixup=0.8, cutmix=1.0)
    assert all(torch.isfinite(torch.tensor(r["train_loss"])) for r in mixed["history"])
    # mixup/cutmix mix the batch and train on soft targets: the training losses differ from the plain run's
    assert strip(mixed)[0]["train_loss"] != strip(plain)[0]["train_loss"]
    # EMA does not change the training step, only which weights are evaluated (decay 0.5 lags the model)
    averaged = run("ema", ema=True, ema_decay=0.5)
    assert [r["train_loss"] for r in averaged["history"]] == [r["train_loss"] for r in plain["history"]]
    assert [r["val_loss"] for r in averaged["history"]] != [r["val_loss"] for r in plain["history"]]


def test_dvclive_logs_every_epoch(tmp_path):
    fit(tiny_model(), tiny_loaders(), recipe(epochs=2), seed=0, d=Dist(), checkpoint=tmp_path / "l.pt", attempt="x",
        live_dir=tmp_path / "live")
    rows = (tmp_path / "live" / "plots" / "metrics" / "val_top1.tsv").read_text().strip().splitlines()
    assert rows[0].split("\t") == ["step", "val_top1"] and len(rows) == 3
    assert json.loads((tmp_path / "live" / "metrics.json").read_text())["step"] == 1


def test_fp16_autocast_refuses_cpu_and_auto_is_off_there():
    with pytest.raises(PipelineError, match="CUDA"):
        engine.autocast_for("fp16", torch.device("cpu"))
    assert engine.autocast_for("auto", torch.device("cpu"))[1] is None


def test_torchrun_lines():
    single = launch.torchrun_command(4, 1, "", "x", ["train", "cifar10", "impulse", "0"])
    assert "--standalone" in single and "--nproc_per_node=4" in single and single[-4:] == ["train", "cifar10",
                                                                                            "impulse", "0"]
    multi = launch.torchrun_command(8, 2, "node0:29400", "job", ["train"])
    assert {"--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=node0:29400", "--rdzv_id=job"} <= set(multi)
    with pytest.raises(PipelineError, match="rdzv_endpoint"):
        launch.torchrun_command(8, 2, "", "job", ["train"])

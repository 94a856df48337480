"""The training engine on a tiny synthetic problem: determinism, resume, NaN guard, metrics, launch lines."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from training_fixtures import dies_in_epoch, execute, tiny_run

from pipeline.config import Resources, TrainConfig
from pipeline.errors import PipelineError
from pipeline.schema import from_mapping
from pipeline.training import engine, launch
from pipeline.training.engine import Dist


def fit(*args, resources: Resources | None = None, **kwargs):
    """The engine's `fit` on the default resources unless the test gives its own."""
    return engine.fit(*args, resources=resources or Resources(), **kwargs)

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
    return TrainConfig(**({"epochs": 3, "batch_size": 16, "lr": 1e-2, "warmup_epochs": 1} | kw))


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
    with dies_in_epoch(monkeypatch, 1), pytest.raises(KeyboardInterrupt):  # after epoch 1's checkpoint
        fit(tiny_model(), tiny_loaders(), recipe(), seed=0, d=Dist(), checkpoint=tmp_path / "r.pt", attempt="x")
    assert torch.load(tmp_path / "r.pt", weights_only=False)["epoch"] == 0
    resumed = fit(tiny_model(seed=99), tiny_loaders(), recipe(), seed=0, d=Dist(), checkpoint=tmp_path / "r.pt",
                  attempt="x")
    assert strip(resumed) == strip(whole)


def test_checkpoint_of_another_attempt_is_ignored(tmp_path):
    fit(tiny_model(), tiny_loaders(), recipe(epochs=1), seed=0, d=Dist(), checkpoint=tmp_path / "c.pt", attempt="old")
    fresh = fit(tiny_model(), tiny_loaders(), recipe(epochs=1), seed=0, d=Dist(), checkpoint=tmp_path / "c.pt",
                attempt="new")
    assert len(fresh["history"]) == 1


def test_a_run_never_resumes_in_another_precision(tmp_path, monkeypatch):
    """`train.amp: auto` resolves per device: a cell requeued onto another GPU kind would resume in fp16 what it began
    in bf16 (the attempt key, of the configuration, is the same). Emulated on the CPU: float32, then bf16 autocast."""
    with dies_in_epoch(monkeypatch, 1), pytest.raises(KeyboardInterrupt):
        fit(tiny_model(), tiny_loaders(), recipe(), seed=0, d=Dist(), checkpoint=tmp_path / "p.pt", attempt="x")
    assert torch.load(tmp_path / "p.pt", weights_only=False)["computed"] == {"amp_dtype": "float32", "data_path": ""}
    with pytest.raises(PipelineError, match=r"p.pt was trained with .*amp_dtype float32 -> bfloat16 mid-run. Pin"
                                            r" train.amp"):
        fit(tiny_model(), tiny_loaders(), recipe(amp="bf16"), seed=0, d=Dist(), checkpoint=tmp_path / "p.pt",
            attempt="x")
    resumed = fit(tiny_model(), tiny_loaders(), recipe(), seed=0, d=Dist(), checkpoint=tmp_path / "p.pt", attempt="x")
    assert len(resumed["history"]) == 3


def test_the_fused_optimizer_takes_the_same_steps_to_rounding(tmp_path):
    """resources.fused_optimizer (one kernel per step on a GPU) changes no number beyond the last bits: on the CPU the
    fused AdamW's history matches foreach's."""
    plain = fit(tiny_model(), tiny_loaders(), recipe(), seed=0, d=Dist(), checkpoint=tmp_path / "a.pt", attempt="x")
    fused = fit(tiny_model(), tiny_loaders(), recipe(), seed=0, d=Dist(), checkpoint=tmp_path / "b.pt", attempt="x",
                resources=Resources(fused_optimizer=True))
    for a, b in zip(strip(plain), strip(fused), strict=True):
        assert a.keys() == b.keys() and all(a[k] == pytest.approx(b[k], rel=1e-4, abs=1e-5) for k in a)
    with pytest.raises(PipelineError, match="train.opt 'sgd' has no fused kernel"):
        fit(tiny_model(), tiny_loaders(), recipe(opt="sgd"), seed=0, d=Dist(), checkpoint=tmp_path / "c.pt",
            attempt="x", resources=Resources(fused_optimizer=True))


def test_the_compile_cache_is_the_folder_resources_names(tmp_path, monkeypatch):
    """resources.compile_cache points inductor's cache (and Triton's, under it) at one folder the cells share."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "elsewhere")  # restored after the test
    monkeypatch.setattr(engine, "check_compile", lambda device: None)
    monkeypatch.setattr(torch, "compile", lambda model: model)
    engine.build_parts(tiny_model(), recipe(), 3, 4, Dist(), Resources(compile=True, compile_cache=str(tmp_path)))
    assert engine.os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path.resolve())


def test_non_finite_loss_stops_with_the_epoch_and_the_knobs(tmp_path):
    model = tiny_model()
    with torch.no_grad():
        model[1].weight.fill_(float("nan"))
    with pytest.raises(PipelineError, match=r"epoch 0, step 0.*train.lr"):
        fit(model, tiny_loaders(), recipe(), seed=0, d=Dist(), checkpoint=tmp_path / "n.pt", attempt="x")


def test_the_final_model_is_scored_image_by_image_on_the_test_loader(tmp_path):
    loaders = tiny_loaders()
    loaders.test = DataLoader(TensorDataset(*loaders.train.dataset.tensors), batch_size=16)  # 64 images
    summary = fit(tiny_model(), loaders, recipe(), seed=0, d=Dist(), checkpoint=tmp_path / "c.pt", attempt="a")
    correct = summary["test_correct"]
    assert correct.dtype == bool and summary["test_size"] == 64 == len(correct)
    assert summary["test_top1"] == pytest.approx(correct.mean()) and summary["test_time_s"] >= 0
    model = tiny_model()
    fit(model, tiny_loaders(), recipe(), seed=0, d=Dist(), checkpoint=tmp_path / "d.pt", attempt="a")
    with torch.no_grad():
        x, y = loaders.train.dataset.tensors
        assert (model.eval()(x).argmax(-1) == y).numpy().tolist() == correct.tolist()  # same seed, same model
    assert "test_top1" not in fit(tiny_model(), tiny_loaders(), recipe(), seed=0, d=Dist(),
                                  checkpoint=tmp_path / "e.pt", attempt="a")


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
        engine.amp_dtype("fp16", torch.device("cpu"))
    assert engine.amp_dtype("auto", torch.device("cpu")) == (None, "")
    assert engine.amp_dtype("bf16", torch.device("cpu")) == (torch.bfloat16, "")


def test_torchrun_lines():
    single = launch.torchrun_command(4, 1, "", "x", ["train", "cifar10", "impulse", "0"])
    assert "--standalone" in single and "--nproc_per_node=4" in single and single[-4:] == ["train", "cifar10",
                                                                                            "impulse", "0"]
    multi = launch.torchrun_command(8, 2, "node0:29400", "job", ["train"])
    assert {"--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=node0:29400", "--rdzv_id=job"} <= set(multi)
    with pytest.raises(PipelineError, match="rdzv_endpoint"):
        launch.torchrun_command(8, 2, "", "job", ["train"])


def plain_model(seed=0):
    """tiny_model without dropout: compiled and eager runs draw dropout masks from different generators."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 3))


def test_compiled_training_matches_eager_and_its_checkpoints_resume_either_way(tmp_path, monkeypatch):
    """resources.compile on CPU (inductor): the same losses as eager; checkpoints cross between the two."""
    def train(name, compiled, model=None, **kw):
        return fit(model or plain_model(), tiny_loaders(), recipe(**kw), seed=0, d=Dist(),
                   checkpoint=tmp_path / f"{name}.pt", attempt="x", resources=Resources(compile=compiled))

    eager, compiled = train("eager", False), train("compiled", True)
    assert [r["train_loss"] for r in compiled["history"]] == pytest.approx(
        [r["train_loss"] for r in eager["history"]], rel=1e-5)
    for first, then in ((True, False), (False, True)):
        with dies_in_epoch(monkeypatch, 2), pytest.raises(KeyboardInterrupt):
            train(f"cross{first}", first)
        keys = torch.load(tmp_path / f"cross{first}.pt", weights_only=False)["model"].keys()
        assert not any(k.startswith(("_orig_mod.", "module.")) for k in keys)
        resumed = train(f"cross{first}", then, model=plain_model(seed=5))
        assert [r["val_loss"] for r in resumed["history"]] == pytest.approx(
            [r["val_loss"] for r in eager["history"]], rel=1e-5)


def test_bf16_autocast_trains_on_cpu(tmp_path):
    summary = fit(tiny_model(), tiny_loaders(), recipe(epochs=4, amp="bf16", lr=3e-2), seed=0, d=Dist(),
                  checkpoint=tmp_path / "b.pt", attempt="x")
    losses = [r["train_loss"] for r in summary["history"]]
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0]
    assert 0 < summary["top1"] <= 1


@pytest.mark.parametrize(("capability", "amp", "dtype", "noted"), [
    ((7, 0), "auto", torch.float16, False), ((7, 0), "bf16", torch.float16, True),
    ((8, 0), "auto", torch.bfloat16, False), ((9, 0), "bf16", torch.bfloat16, False),
    ((8, 0), "fp16", torch.float16, False)])
def test_amp_on_cuda_follows_the_compute_capability(monkeypatch, capability, amp, dtype, noted):
    """auto: bf16 only with native bf16 (>= 8.0), else fp16 + scaler; bf16 on a V100 falls back with a note."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla V100-SXM2-32GB")
    got, note = engine.amp_dtype(amp, torch.device("cuda", 0))
    assert got == dtype and bool(note) == noted
    if noted:
        assert "V100" in note and "fp16" in note and "train.amp" in note


def test_channels_last_convmixer_trains_as_contiguous(tmp_path):
    from pipeline.method.convmixer import build_convmixer

    def convmixer_loaders():
        g = torch.Generator().manual_seed(0)
        x = torch.randn(64, 3, 8, 8, generator=g)
        y = (x.mean((1, 2, 3)) > 0).long()
        data = TensorDataset(x, y)
        sampler = DistributedSampler(data, num_replicas=1, rank=0, shuffle=True, seed=0, drop_last=True)
        return SimpleNamespace(train=DataLoader(data, batch_size=16, sampler=sampler, drop_last=True),
                               val=DataLoader(TensorDataset(x[:32], y[:32]), batch_size=16), num_classes=2)

    def train(channels_last):
        model = build_convmixer("learned", dim=16, depth=2, kernel_size=3, patch_size=2, in_chans=3, num_classes=2,
                                img_size=8, heads=None, generator=torch.Generator().manual_seed(0))
        return fit(model, convmixer_loaders(), recipe(epochs=2), seed=0, d=Dist(),
                   checkpoint=tmp_path / f"cl{channels_last}.pt", attempt="x",
                   resources=Resources(channels_last=channels_last))

    plain, cl = train(False), train(True)
    for key in ("train_loss", "val_loss"):  # the same up to reduction order
        assert [r[key] for r in cl["history"]] == pytest.approx([r[key] for r in plain["history"]], rel=5e-4)


def test_the_step_reads_the_loss_back_once_per_window(tmp_path, monkeypatch):
    """No host sync per step: one read-back per `sync_every` steps, the same sums as reading every step."""
    calls = []
    real = engine.read_back
    monkeypatch.setattr(engine, "read_back", lambda window, *a: calls.append(len(window)) or real(window, *a))
    every = fit(tiny_model(), tiny_loaders(), recipe(epochs=1), seed=0, d=Dist(),
                checkpoint=tmp_path / "e.pt", attempt="x", resources=Resources(sync_every=1))
    assert calls == [1, 1, 1, 1]  # 64 images / 16 per batch
    calls.clear()
    windowed = fit(tiny_model(), tiny_loaders(), recipe(epochs=1), seed=0, d=Dist(),
                   checkpoint=tmp_path / "w.pt", attempt="x", resources=Resources(sync_every=3))
    assert calls == [3, 1]
    assert strip(windowed) == strip(every)


def test_a_late_read_back_still_names_the_first_non_finite_step(tmp_path):
    """The NaN guard, reading back every 4 steps, names the step that reading every step names."""
    def failing_step(sync_every):
        loaders = tiny_loaders()
        loaders.train.dataset.tensors[0][5] = float("nan")  # one image poisons its batch's loss
        with pytest.raises(PipelineError, match="non-finite training loss") as err:
            fit(tiny_model(), loaders, recipe(), seed=0, d=Dist(), checkpoint=tmp_path / f"n{sync_every}.pt",
                attempt="x", resources=Resources(sync_every=sync_every))
        return str(err.value)

    message = failing_step(1)
    assert "epoch 0, step 2:" in message  # image 5 lands in the third batch of seed 0's shuffle
    assert failing_step(4) == message


def test_reseed_keeps_rank_zeros_stream_and_gives_other_ranks_their_own():
    engine.reseed(3, 2)
    assert torch.initial_seed() == 3 * 1_000_003 + 2  # the single-process stream of every earlier result
    single = torch.rand(3)
    engine.reseed(3, 2, rank=0)
    assert torch.equal(torch.rand(3), single)
    engine.reseed(3, 2, rank=1)
    assert not torch.equal(torch.rand(3), single)


def test_cuda_speedups_set_tf32_and_cudnn_autotuning():
    flags = [(torch.backends.cudnn, "benchmark"), (torch.backends.cudnn, "allow_tf32"),
             (torch.backends.cuda.matmul, "allow_tf32")]
    saved = [getattr(obj, name) for obj, name in flags]
    try:
        for obj, name in flags:
            setattr(obj, name, False)
        engine.cuda_speedups()
        assert all(getattr(obj, name) for obj, name in flags)
    finally:
        for (obj, name), value in zip(flags, saved):
            setattr(obj, name, value)


def test_a_per_run_rendezvous_id_by_default():
    a = launch.torchrun_command(8, 2, "node0:29400", "", ["train", "cifar10", "vit", "impulse", "0"])
    b = launch.torchrun_command(8, 2, "node0:29400", "", ["train", "cifar10", "vit", "impulse", "1"])
    ids = [next(x for x in cmd if x.startswith("--rdzv_id=")) for cmd in (a, b)]
    assert ids[0] != ids[1] and ids[0] == next(x for x in launch.torchrun_command(
        8, 2, "node0:29400", "", ["train", "cifar10", "vit", "impulse", "0"]) if x.startswith("--rdzv_id="))


def test_mixup_needs_an_even_batch_per_process_and_sync_every_is_positive():
    TrainConfig(batch_size=12, mixup=0.8).check_split("train", 2)  # 6 per process
    with pytest.raises(PipelineError, match="even batch per rank"):
        TrainConfig(batch_size=6, mixup=0.8).check_split("train", 2)  # 3 per process
    TrainConfig(batch_size=6).check_split("train", 2)  # without mixup an odd batch is fine
    with pytest.raises(PipelineError, match="does not split over 4 processes"):
        TrainConfig(batch_size=6).check_split("train", 4)
    with pytest.raises(PipelineError, match="resources.sync_every"):
        from_mapping(Resources, {"sync_every": 0}, "resources")


def test_a_run_resumes_across_a_change_of_workers_to_the_same_result(workdir, monkeypatch):
    """resources.workers changes nothing a run computes: each image's draws are seeded by its place in the epoch, in
    whichever process draws them. A run with no workers, killed in epoch 2 and resumed with 2 persistent workers,
    ends where the uninterrupted run ends."""
    def augmented_run():
        return tiny_run(epochs=3, scale=[0.3, 1.0], hflip=0.5, reprob=0.5)

    whole = execute(augmented_run(), Resources(workers=0))
    with dies_in_epoch(monkeypatch, 2), pytest.raises(KeyboardInterrupt):
        execute(augmented_run(), Resources(workers=0))
    resumed = execute(augmented_run(), Resources(workers=2))
    assert strip(resumed) == strip(whole)


def test_the_cooldown_follows_the_schedule_at_min_lr():
    """timm's 300 + 10: epochs counts the cooldown; the cosine ends at epochs - cooldown, then min_lr."""
    optimizer = torch.optim.SGD(tiny_model().parameters(), lr=1.0)
    scheduler = engine.create_schedule(optimizer, recipe(epochs=12, cooldown_epochs=2, warmup_epochs=0, lr=1.0,
                                                         min_lr=0.01), steps=1)
    lrs = [scheduler._get_lr(epoch)[0] for epoch in range(12)]
    assert lrs[0] == pytest.approx(1.0) and lrs[5] == pytest.approx(0.01 + 0.99 * 0.5)  # half way: cos(pi / 2)
    assert lrs[9] > 0.01 and lrs[10] == lrs[11] == pytest.approx(0.01)
    with pytest.raises(PipelineError, match="epochs counts the cooldown"):
        TrainConfig(epochs=10, cooldown_epochs=10, warmup_epochs=0).check("train")


def test_evaluation_every_k_epochs_and_always_the_last(tmp_path, capsys):
    summary = fit(tiny_model(), tiny_loaders(), recipe(epochs=5, eval_every=2), seed=0, d=Dist(),
                  checkpoint=tmp_path / "k.pt", attempt="x")
    assert [("val_top1" in r) for r in summary["history"]] == [False, True, False, True, True]
    assert summary["top1"] == summary["history"][-1]["val_top1"] and summary["best_epoch"] in (2, 4, 5)
    lines = [line for line in capsys.readouterr().out.splitlines() if "] epoch " in line]
    assert "(no evaluation)" in lines[0] and "val top-1" in lines[1]
    for line in lines:  # the epoch line: ETA, the share of the epoch spent waiting for data, peak memory
        assert re.search(r"data wait \d+%  peak mem \d+\.\d\d GiB  ETA \d", line), line
    assert lines[-1].endswith("ETA 0 s")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("amp", ["auto", "fp16"])  # auto: bf16 from compute capability 8.0, else fp16 + scaler
def test_the_engine_trains_compiled_on_cuda(tmp_path, amp):
    d = engine.setup_distributed("cuda")
    summary = fit(tiny_model(), tiny_loaders(), recipe(epochs=2, amp=amp), seed=0, d=d, checkpoint=tmp_path / "c.pt",
                  attempt="x", resources=Resources(device="cuda", compile=True))
    assert all(torch.isfinite(torch.tensor([r["train_loss"], r["val_loss"]])).all() for r in summary["history"])


def test_mixup_is_drawn_per_rank_share():
    """train.sampler_ranks: 4 at batch 16: each 4-image share is mixed with its own flip under its own lambda, the
    draws timm's Mixup makes called on each share in turn (as each GPU of the official run draws its own)."""
    import numpy as np
    from timm.data import Mixup

    mixup = Mixup(mixup_alpha=0.8, cutmix_alpha=0.0, prob=1.0, label_smoothing=0.0, num_classes=4)
    x, y = torch.arange(16.0).view(16, 1, 1, 1).expand(16, 1, 2, 2).contiguous(), torch.arange(16) % 4
    recipe = TrainConfig(batch_size=16, mixup=0.8, sampler_ranks=4)
    np.random.seed(0)
    mixed = x.clone()
    targets = engine.mix(mixup, mixed, y, engine.rank_batch(recipe, 1))
    lambdas = []
    for share in range(4):
        a, m = x[4 * share:4 * share + 4, 0, 0, 0], mixed[4 * share:4 * share + 4, 0, 0, 0]
        lam = (m - a.flip(0)) / (a - a.flip(0))
        assert torch.allclose(lam, lam[0]) and 0 < lam[0] < 1
        lambdas.append(round(lam[0].item(), 6))
    assert len(set(lambdas)) == 4
    np.random.seed(0)
    expected = [mixup(x[i:i + 4].clone(), y[i:i + 4]) for i in range(0, 16, 4)]
    assert torch.equal(mixed, torch.cat([e[0] for e in expected])) and torch.equal(targets,
                                                                                    torch.cat([e[1] for e in expected]))
    whole = x.clone()
    one = engine.rank_batch(TrainConfig(batch_size=16, mixup=0.8), 1)
    engine.mix(mixup, whole, y, one)  # sampler_ranks 1: one draw
    a = x[:, 0, 0, 0]
    lam = (whole[:, 0, 0, 0] - a.flip(0)) / (a - a.flip(0))
    assert torch.allclose(lam, lam[0])


def test_compile_stops_with_one_message_where_it_cannot_compile(monkeypatch):
    """resources.compile: no compiler inductor needs on the device (C++ on CPU, C for Triton on CUDA), or a tiny
    function that fails to compile, stop before the first step with one message naming the key and the fix."""
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    with monkeypatch.context() as patch:
        patch.setattr(engine.shutil, "which", lambda name: None)
        with pytest.raises(PipelineError, match=r"resources.compile on cpu needs a C\+\+ compiler.*g\+\+"):
            engine.check_compile(torch.device("cpu"))
        with pytest.raises(PipelineError, match="resources.compile on cuda needs a C compiler .*Triton.*gcc"):
            engine.check_compile(torch.device("cuda"))
    assert engine.compile_probe("cpu") == ""  # inductor compiles here (the image has g++)

    def broken(*args, **kwargs):
        def run(*a):
            raise RuntimeError("CppCompileError: C++ compile error\n<many lines>")
        return run

    engine.compile_probe.cache_clear()
    monkeypatch.setattr(torch, "compile", broken)
    try:
        with pytest.raises(PipelineError, match=r"resources.compile: .*RuntimeError: CppCompileError: C\+\+ compile"
                                                r" error\); .*resources.compile: false"):
            engine.check_compile(torch.device("cpu"))
    finally:
        engine.compile_probe.cache_clear()


def signal_in_epoch(monkeypatch, epoch: int, signum: int) -> None:
    """This process gets `signum` while epoch `epoch` (0-based) evaluates."""
    import os

    real, calls = engine.evaluate, []

    def signalling(*args, **kwargs):
        calls.append(1)
        if len(calls) == epoch + 1:
            os.kill(os.getpid(), signum)
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "evaluate", signalling)


def test_checkpoints_by_time_and_on_signals(tmp_path, monkeypatch):
    """resources.checkpoint_minutes: 0 writes one after every epoch; 60 writes none in a short run, except at the
    end of the epoch in which SIGUSR1 came (and the run goes on) or SIGTERM came (and it stops, resumable to the
    uninterrupted run's metrics). The process's own handlers are back afterwards."""
    import signal

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGUSR1)
    every, hourly = Resources(checkpoint_minutes=0), Resources(checkpoint_minutes=60)
    whole = fit(tiny_model(), tiny_loaders(), recipe(), seed=0, d=Dist(), checkpoint=tmp_path / "w.pt", attempt="x",
                resources=every)
    assert torch.load(tmp_path / "w.pt", weights_only=False)["epoch"] == 2
    fit(tiny_model(), tiny_loaders(), recipe(), seed=0, d=Dist(), checkpoint=tmp_path / "h.pt", attempt="x",
        resources=hourly)
    assert not (tmp_path / "h.pt").exists()
    with monkeypatch.context() as patch:
        signal_in_epoch(patch, 0, signal.SIGUSR1)
        asked = fit(tiny_model(), tiny_loaders(), recipe(), seed=0, d=Dist(), checkpoint=tmp_path / "u.pt",
                    attempt="x", resources=hourly)
    assert torch.load(tmp_path / "u.pt", weights_only=False)["epoch"] == 0 and strip(asked) == strip(whole)
    with monkeypatch.context() as patch:
        signal_in_epoch(patch, 1, signal.SIGTERM)
        with pytest.raises(PipelineError, match=r"stopped by SIGTERM after epoch 2; .*run the same command again"):
            fit(tiny_model(), tiny_loaders(), recipe(), seed=0, d=Dist(), checkpoint=tmp_path / "t.pt", attempt="x",
                resources=hourly)
    assert torch.load(tmp_path / "t.pt", weights_only=False)["epoch"] == 1
    resumed = fit(tiny_model(seed=99), tiny_loaders(), recipe(), seed=0, d=Dist(), checkpoint=tmp_path / "t.pt",
                  attempt="x", resources=hourly)
    assert strip(resumed) == strip(whole) and len(resumed["history"]) == 3
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGUSR1)) == before
    with pytest.raises(PipelineError, match="resources.checkpoint_minutes"):
        from_mapping(Resources, {"checkpoint_minutes": -1}, "resources")


class HostCopies(torch.overrides.TorchFunctionMode):
    """Counts tensors made from host values onto a device (`torch.tensor(..., device=...)`): a host-to-device copy
    each on a GPU."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.count += func in (torch.tensor, torch.as_tensor) and kwargs.get("device") is not None
        return func(*args, **kwargs)


def test_evaluation_copies_nothing_to_the_device_per_batch():
    model, loaders = tiny_model(), tiny_loaders(n=64)
    loaders.val = DataLoader(TensorDataset(*loaders.train.dataset.tensors), batch_size=10)  # 7 batches, the last of 4
    with HostCopies() as copies:
        result = engine.evaluate(model, loaders.val, Dist())
    assert copies.count == 0
    x, y = loaders.train.dataset.tensors
    with torch.no_grad():
        logits = model.eval()(x)
    assert result["val_top1"] == pytest.approx((logits.argmax(-1) == y).float().mean().item())
    assert result["val_loss"] == pytest.approx(torch.nn.functional.cross_entropy(logits, y).item(), rel=1e-6)


def test_the_epoch_line_names_the_hosts_batch_time_for_the_data_path(workdir, capsys):
    """DataLoader path: the host waited for workers ('data wait'); device path: it enqueued the augmentation ('batch
    build (host)', not the GPU's idle time)."""
    for on_device, label in ((False, "data wait"), (True, "batch build (host)")):
        execute(tiny_run(epochs=1), Resources(data_on_device=on_device))
        line = next(x for x in capsys.readouterr().out.splitlines() if "] epoch 1/1" in x)
        assert re.search(rf"  {re.escape(label)} \d+%  peak mem", line), line


def lrs_per_update(recipe, epochs: int) -> list[float]:
    """The learning rate of each optimizer update of the engine's `fit` on the tiny problem (4 updates an epoch)."""
    model, seen = tiny_model(), []
    real = engine.build_parts

    def recording(*args, **kwargs):
        parts = real(*args, **kwargs)
        parts.optimizer.register_step_pre_hook(lambda opt, *_: seen.append(opt.param_groups[0]["lr"]))
        return parts

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine, "build_parts", recording)
        fit(model, tiny_loaders(), recipe, seed=0, d=Dist(), checkpoint=Path(tempfile.mkdtemp()) / "s.pt",
            attempt="x")
    assert len(seen) == 4 * epochs
    return seen


def timms_lrs(recipe, epochs: int, updates: int, on_updates: bool) -> list[float]:
    """timm's train.py: `create_scheduler_v2` from its args, `step_update` after every update and `step(epoch + 1)`
    after every epoch; per-epoch stepping unless --sched-on-updates."""
    from timm.scheduler import create_scheduler_v2

    optimizer = torch.optim.AdamW(tiny_model().parameters(), lr=recipe.lr)
    scheduler, _ = create_scheduler_v2(optimizer, sched="cosine", num_epochs=epochs, min_lr=recipe.min_lr,
                                       warmup_lr=recipe.warmup_lr, warmup_epochs=recipe.warmup_epochs,
                                       step_on_epochs=not on_updates, updates_per_epoch=updates)
    out = []
    for epoch in range(epochs):
        for step in range(updates):
            out.append(optimizer.param_groups[0]["lr"])
            scheduler.step_update(num_updates=epoch * updates + step + 1)
        scheduler.step(epoch + 1)
    return out


@pytest.mark.parametrize("on_updates", [False, True])
def test_the_learning_rate_of_every_update_is_timms(on_updates):
    """The default steps the schedule once per epoch, as timm's train.py without --sched-on-updates (the official
    runs): the first warm-up epoch runs at warmup_lr throughout; `sched_on_updates` steps it every update."""
    r = recipe(epochs=5, warmup_epochs=2, min_lr=1e-4, sched_on_updates=on_updates)
    ours, timms = lrs_per_update(r, 5), timms_lrs(r, 5, 4, on_updates)
    assert ours == pytest.approx(timms, rel=1e-12, abs=0)
    within_epochs = {len(set(ours[e * 4:(e + 1) * 4])) for e in range(5)}
    assert within_epochs == ({1} if not on_updates else {4})
    assert ours[:4] == [r.warmup_lr] * 4 if not on_updates else ours[0] == r.warmup_lr and ours[3] > r.warmup_lr
    assert TrainConfig().sched_on_updates is False

"""bench/bench_gpu.py in its tiny CPU configuration: it measures both data paths and writes rows `check` reads."""

from __future__ import annotations

import importlib.util

from pipeline.check import throughput
from pipeline.config import ModelConfig
from pipeline.schema import yaml_load
from tests.conftest import ROOT


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "bench" / "bench_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_gpu_measures_both_paths_and_writes_throughput_rows(tmp_path):
    table = tmp_path / "throughput.yaml"
    table.write_text("# a table with an entry already\n- model: other\n  img_size: 32\n  embed_dim: null\n"
                     "  device: V100\n  images_per_s: 1\n  source: x\n")
    results = load_bench().main(["--tiny", "--device", "cpu", "--models", "vit_tiny_patch16_224", "--modes", "eager",
                                 "--peak-tflops", "0.5", "--yaml", str(table)])
    assert [(r["mode"], r["path"]) for r in results] == [("eager", "device"), ("eager", "loader")]
    for r in results:  # MFU: achieved model FLOP/s over the peak given (0.5 TFLOPS)
        assert r["images_per_s"] > 0 and r["gflops_per_image"] > 0
        assert abs(r["mfu"] - r["images_per_s"] * r["gflops_per_image"] / 500) < 1e-9
    rows = yaml_load(table.read_text())
    assert len(rows) == 3 and rows[0]["model"] == "other"
    row = throughput(ModelConfig(name="vit_tiny_patch16_224", img_size=32), rows, "cpu")
    assert row["device"] == "cpu" and row["images_per_s"] >= 1 and "bench/bench_gpu.py" in row["source"]


def test_check_takes_the_throughput_row_of_the_device_it_runs_on():
    rows = [{"model": "m", "img_size": 224, "embed_dim": None, "device": d, "images_per_s": v, "source": "x"}
            for d, v in (("cpu-2core", 1), ("V100", 174), ("H100", 2000))]
    model = ModelConfig(name="m", img_size=224)
    assert throughput(model, rows, "Tesla V100-SXM2-32GB")["images_per_s"] == 174
    assert throughput(model, rows, "NVIDIA H100 80GB HBM3")["images_per_s"] == 2000
    assert throughput(model, rows, "cpu")["images_per_s"] == 1
    assert throughput(model, rows, "NVIDIA A100-SXM4-40GB") is None  # no guess from another device's figure



def test_the_flop_count_includes_attention_as_the_hand_count():
    """ViT-Ti/16 at 224: forward 2.51 GFLOP, a training step 7.52 by hand (three forwards); PyTorch's counter, with
    fused attention off, finds the forward exactly and the step less the patch embedding's input gradient, which
    no image needs. (With the CPU's fused attention kernel it would miss attention: 6.39.)"""
    import timm
    import torch

    bench = load_bench()
    hand = bench.vit_flops(224, dim=192, depth=12)
    assert round(hand / 1e9, 2) == 2.51 and round(3 * hand / 1e9, 2) == 7.52
    forward, step = bench.flops_per_image(timm.create_model("vit_tiny_patch16_224", num_classes=10), 224, "off",
                                          torch.device("cpu"))
    patch_embedding = 2 * 196 * (16 * 16 * 3) * 192
    assert forward == hand and step == 3 * hand - patch_embedding


def test_gpu_busy_time_counts_overlapping_kernels_once():
    covered = load_bench().covered
    assert covered([(0, 10), (5, 12), (20, 25), (21, 22)]) == 17 and covered([]) == 0

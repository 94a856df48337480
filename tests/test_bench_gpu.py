"""bench/bench_gpu.py in its tiny CPU configuration: it measures both data paths and writes rows `check` reads."""

from __future__ import annotations

import importlib.util

from pipeline.check import throughput
from pipeline.config import ModelConfig, yaml_load
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
    row = throughput(ModelConfig(name="vit_tiny_patch16_224", img_size=32), rows)
    assert row["device"] == "cpu" and row["images_per_s"] >= 1 and "bench/bench_gpu.py" in row["source"]


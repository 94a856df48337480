"""`python -m pipeline compare`: dvc exp show's rows -> per experiment the method, baselines and paired differences
(the e2e test runs it on a real `dvc exp run`)."""

from __future__ import annotations

from pipeline.analysis.compare import comparison_rows, render

HEAD = "results/summary.json:headline.fashion_mnist.vit."


def row(name, rev, init, method_mean, diff, low, high, verdict):
    return {"Experiment": name, "rev": rev, "init": init, HEAD + "method.arm": init,
            HEAD + "method.top1_mean_pct": method_mean, HEAD + "method.top1_std_pct": 0.5, HEAD + "method.n": 5.0,
            HEAD + "baseline1.arm": "default", HEAD + "method_vs_baseline1.diff_pts": diff,
            HEAD + "method_vs_baseline1.low_pts": low, HEAD + "method_vs_baseline1.high_pts": high,
            HEAD + "method_vs_baseline1.verdict": verdict, "pipeline/method/inits": "abc.dir"}


def test_each_experiment_shows_its_method_and_the_paired_difference_to_each_baseline():
    rows = comparison_rows([row(None, "workspace", "timm", 70.0, 5.5, 3.0, 8.0, "supported"),
                            row("pesky-pear", "db46352aa", "impulse", 74.0, 13.65, 11.04, 16.26, "supported"),
                            {"Experiment": None, "rev": "main", "init": "impulse"}])
    assert rows[0] == ["workspace", "timm", "fashion_mnist, vit", "70.00 ± 0.50 (n=5)",
                       "default: +5.50 [+3.00, +8.00] supported", ""]
    assert rows[1][:2] == ["pesky-pear (db46352)", "impulse"] and rows[1][4].startswith("default: +13.65 [+11.04")
    assert rows[2][:3] == ["main", "impulse", "no results/summary.json headline"]
    assert render(rows).splitlines()[0].startswith("experiment")


def test_a_difference_without_an_interval_says_so():
    rows = comparison_rows([row(None, "workspace", "impulse", 15.0, -7.1, None, None, "inconclusive")])
    assert rows[0][4] == "default: -7.10 (no interval) inconclusive"

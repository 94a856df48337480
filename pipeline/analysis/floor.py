"""A floor a reader knows, beside the grid's tables: a multinomial logistic regression on the raw pixels of the same
training images each seed's cells train on (params `data.train_subset`, the class-stratified draw of that seed
outside the held-out pool of `data.holdout`, `pipeline.data.load.loaders.training_draw`), scored on the whole test
split the cells are scored on. A trained ViT that does not beat it has learnt no more than a linear read of the
pixels (on all 60,000 Fashion-MNIST images such a model scores about 84 %: Xiao, Rasul and Vollgraf 2017, the
dataset's benchmark).

Stage `floor@<dataset>`: results/floor/<dataset>/floor.json, which `aggregate` reads (`runs.read_floors`).
scikit-learn's `LogisticRegression` (lbfgs) on pixels scaled to [0, 1], the grid's seeds; only tensor-stored
datasets (the fetched ones): a user's image folder is resized by the cells' transforms, which a floor on raw pixels
would not match, so its floor is recorded as not computed, with the reason.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

from pipeline import entry
from pipeline.analysis.runs import FLOORS
from pipeline.data.load.loaders import training_draw
from pipeline.data.store import load_split, read_manifest
from pipeline.errors import PipelineError
from pipeline.experiments import data_section
from pipeline.outputs import write_text
from pipeline.params import Params

#: lbfgs iterations: enough for the loss to settle on a few thousand 28 x 28 images (scikit-learn warns otherwise)
MAX_ITER = 1000
MODEL = "multinomial logistic regression on the pixels (scikit-learn, lbfgs, C = 1)"


def pixels(images) -> np.ndarray:
    """uint8 images (N, [C,] H, W) -> (N, features) floats in [0, 1]."""
    array = np.asarray(images, dtype=np.float32)
    return array.reshape(len(array), -1) / 255.0


def seed_subset(labels, n: int, seed: int, holdout: int = 0) -> np.ndarray:
    """The indices of a seed's training images, as the cells draw them (`training_draw`)."""
    return training_draw(torch.as_tensor(labels, dtype=torch.int64), n, seed, holdout).numpy()


def floor(root: str | Path, dataset: str, seeds: list[int], train_subset: int, holdout: int = 0) -> dict:
    """The floor of `dataset` under `root`: per seed, the test top-1 (%) of a logistic regression trained on that
    seed's training images."""
    from sklearn.linear_model import LogisticRegression

    directory = Path(root) / dataset
    manifest = read_manifest(directory, dataset)
    record = {"dataset": dataset, "model": MODEL, "seeds": {}}
    if manifest["format"] != "tensors":
        return record | {"computed": False, "reason": "a folder of images of any size: the cells resize them, the"
                                                      " floor on raw pixels would not see what they see"}
    train_x, train_y = load_split(directory / manifest["splits"][manifest["train_split"]]["file"])
    test_x, test_y = load_split(directory / manifest["splits"][manifest["eval_split"]]["file"])
    test_features, test_labels = pixels(test_x), np.asarray(test_y)
    for seed in seeds:
        chosen = seed_subset(train_y, train_subset, seed, holdout)
        model = LogisticRegression(max_iter=MAX_ITER)
        model.fit(pixels(train_x[chosen]), np.asarray(train_y)[chosen])
        top1 = 100.0 * float((model.predict(test_features) == test_labels).mean())
        record["seeds"][str(seed)] = {"top1": top1}
        print(f"floor@{dataset}: seed {seed}: {len(chosen)} training images -> {top1:.2f}% on {len(test_labels)}")
    tops = [s["top1"] for s in record["seeds"].values()]
    return record | {"computed": True, "train_images": int(len(seed_subset(train_y, train_subset, seeds[0], holdout))),
                     "test_images": int(len(test_labels)), "mean": float(np.mean(tops)),
                     "std": float(np.std(tops, ddof=1)) if len(tops) > 1 else None}


def add_arguments(parser) -> None:
    parser.add_argument("dataset", help="a dataset of params `datasets`")


def main(params: Params, args) -> int:
    if args.dataset not in params.datasets:
        raise PipelineError(f"dataset {args.dataset!r}: not one of params `datasets` ({', '.join(params.datasets)})")
    data = data_section(params, args.dataset)
    record = floor(params.data.root, args.dataset, list(params.seeds), data["train_subset"], data.get("holdout", 0))
    write_text(FLOORS / args.dataset / "floor.json", json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(entry.command(__spec__.name, add_arguments, main))

"""A result's regime: how many training images, optimizer steps, tokens and parameters it was reached with.

A verdict on 2,000 Fashion-MNIST images after about 620 steps at 7x7 tokens answers another question than the
paper's on 50,000 CIFAR images after 29,000 steps at 14x14: every verdict states its regime (`run_regime`, from
what the runs recorded), and the fidelity table's CPU rows describe each CPU recipe from params.yaml and its
profiles (`recipe_text`), so that neither can go stale.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pipeline.params import Params
from pipeline.profiles import merged_text
from pipeline.schema import from_mapping, yaml_load

#: the name params.yaml's own recipe goes by in the fidelity table (its `profile` key's default)
DEFAULT = "cpu"


def _count(value: float) -> str:
    return f"{int(value):,}"


def _values(rows: pd.DataFrame, column: str) -> list:
    if column not in rows.columns:
        return []
    return sorted({v for v in rows[column] if isinstance(v, str) or (v is not None and not pd.isna(v))},
                  key=str)


def _span(values: list, fmt) -> str:
    if not values:
        return ""
    return fmt(values[0]) if len(values) == 1 else f"{fmt(min(values))}-{fmt(max(values))}"


def run_regime(rows: pd.DataFrame) -> str:
    """'2,000 images · 620 steps · 7x7 tokens · 385k params' of the runs in `rows` (ranges where they differ); the
    parts a run did not record are left out."""
    parts = []
    images = _span(_values(rows, "train_size"), _count)
    if images:
        parts.append(f"{images} images")
    steps = _span(_values(rows, "steps"), _count)
    if steps:
        parts.append(f"{steps} steps")
    elif _values(rows, "epochs"):
        parts.append(f"{_span(_values(rows, 'epochs'), _count)} epochs")
    grids = _values(rows, "token_grid")
    if grids:
        parts.append(f"{'/'.join(grids)} tokens")
    params = _span(_values(rows, "params"), lambda p: f"{p / 1e6:.2f}M" if p >= 1e6 else f"{p / 1e3:.0f}k")
    if params:
        parts.append(f"{params} params")
    return " · ".join(parts)


def profile_params(name: str, root: str | Path) -> Params:
    """params.yaml under `root` with profiles/<name>.yaml merged in (`DEFAULT`: params.yaml as it is)."""
    text = (Path(root) / "params.yaml").read_text()
    if name != DEFAULT:
        text = merged_text(name, text)[0]
    return from_mapping(Params, yaml_load(text))


def planned_steps(params: Params) -> int:
    """Optimizer steps of one grid cell on one process: whole batches per epoch (the loader drops the last) x epochs."""
    return params.train.epochs * (params.data.train_subset // params.train.batch_size)


def _model_text(name: str, model) -> str:
    grid = ""
    if model.img_size and model.patch_size:
        side = model.img_size // model.patch_size
        grid = f"{side}x{side} tokens ({model.img_size} px, patch {model.patch_size}), "
    shape = ", ".join(f"{label} {value}" for label, value in (("width", model.embed_dim), ("depth", model.depth),
                                                               ("heads", model.num_heads)) if value)
    return f"{name}: {grid}{shape}".rstrip(", ")


def _augment_text(train) -> str:
    used = [f"random-resized-crop scale {train.scale[0]:g}-{train.scale[1]:g}" if tuple(train.scale) != (1, 1)
            else "", f"flips {train.hflip:g}" if train.hflip else "", f"RandAugment {train.aa}" if train.aa else "",
            f"mixup {train.mixup:g}" if train.mixup else "", f"cutmix {train.cutmix:g}" if train.cutmix else "",
            f"erasing {train.reprob:g}" if train.reprob else ""]
    unused = [name for name, on in (("RandAugment", train.aa), ("mixup", train.mixup), ("cutmix", train.cutmix),
                                    ("erasing", train.reprob)) if not on]
    return ", ".join(u for u in used if u) + (f"; no {', '.join(unused)}" if unused else "")


def recipe_text(name: str, params: Params) -> str:
    """One CPU recipe as the fidelity table describes it, from its params (module docstring)."""
    t, d = params.train, params.data
    images = f"{d.train_subset:,} training images per seed" if d.train_subset else "every training image"
    stepping = "per update" if t.sched_on_updates else "per epoch"
    models = "; ".join(_model_text(v, m) for v, m in params.models.items())
    steps = f" ({planned_steps(params):,} optimizer steps)" if d.train_subset else ""
    return (f"{name}: {', '.join(params.datasets)}, {images}; {t.epochs} epochs at batch {t.batch_size}{steps}, lr"
            f" {t.lr:g}, warm-up {t.warmup_epochs} from {t.warmup_lr:g}, min-lr {t.min_lr:g}, lr stepped {stepping};"
            f" {models}; {_augment_text(t)}; drop-path"
            f" {', '.join(sorted({f'{m.drop_path_rate:g}' for m in params.models.values()}))}; seeds"
            f" {', '.join(map(str, params.seeds))}")


def recipes_text(names: list[str], root: str | Path) -> str:
    """`recipe_text` of each profile named, in order, as one sentence per recipe."""
    return " ".join(f"{recipe_text(n, profile_params(n, root))}." for n in names)


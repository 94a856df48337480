"""Every experiment declared once: its stages of training cells, each a `CellStage`.

dvc.yaml's stages (`pipeline.stages`), the `configs` stage's files (`pipeline.resolve`), the one-cell commands
and `check`'s listing all derive from these declarations. A new experiment is a module here with its `STAGES`
(and its runtime module and params section), imported below, as timm's registry imports each model module.
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import PipelineError

#: how dvc.yaml describes a stage of training cells (`desc`; `dvc stage list` shows it, the runner reads it)
TRAINING = "training cell"
#: what a ViT-family cell records about its model (pipeline.training.builders): timm name, family, heads
MODEL_RECORDS = ("model", "family", "num_heads")
#: what a cell of [CI]'s Simple ViT records beyond that: its impulse fit per layer (pipeline.method.ci_2401)
FIT_RECORDS = ("impulse_fit",)
#: `${a.b[0]}` in an axis: a params value, as dvc.yaml's interpolation reads it.
REFERENCE = re.compile(r"^\$\{([A-Za-z0-9_.\[\]]+)\}$")


@dataclass(frozen=True)
class CellStage:
    """A dvc.yaml stage whose every matrix cell trains one model: `<name>@<axis values joined by '-'>`.

    Attributes:
        runtime: the module whose `build_run(config)` trains a cell (its import closure is the cell's code deps).
        axes: axis -> the list it runs over, as dvc.yaml's matrix writes it ('${params.path}', or a list of them).
        outs, inputs: the cell's results folder and other deps, with `{axis}` placeholders.
        config: (params, the cell's axis values) -> its resolved configuration, every value it reads.
        command: `python -m pipeline <command> <axis values>` runs one cell.
        cost_note: what `check`'s estimate (its images trained and evaluated) leaves out of a cell's cost.
        frame, records, keys: how `aggregate` reads the cells' results (`pipeline.analysis.runs.read_frames`): the
            analysis frame their rows join ('' = not read), the fields of metrics.json the runtime records beyond
            every run's, and a cell's key columns (default: its axis values, the seed as an int). A stage with a
            frame makes `aggregate` depend on its results folder (`analysis_deps`); a frame is its experiment's own
            unless the module lists it in `JOINS` (`check_frames`).
        figures: whether the figures stage draws these cells (then it depends on their results folder too).
    """

    name: str
    runtime: str
    axes: dict[str, Any]
    outs: str
    config: Callable[[Any, dict], dict]
    inputs: tuple[str, ...] = ("data/{dataset}",)
    command: str = ""
    help: str = ""
    cost_note: str = ""
    frame: str = ""
    records: tuple[str, ...] = ()
    keys: Callable[[dict], dict] | None = None
    figures: bool = False

    @property
    def results_root(self) -> str:
        """The folder under results/ every cell of the stage writes in ('results/train')."""
        return "/".join(self.outs.split("/")[:2])

    def cells(self, params) -> list[dict]:
        """Every cell's axis values, in dvc.yaml's order, as strings (their spelling in stage names and paths)."""
        data = dataclasses.asdict(params)
        values = [list(dict.fromkeys(axis_values(data, spec))) for spec in self.axes.values()]
        return [dict(zip(self.axes, combo)) for combo in itertools.product(*values)]

    def cell_id(self, cell: dict) -> str:
        return "-".join(cell[axis] for axis in self.axes)

    def resolve(self, params, cell: dict) -> dict:
        return {"stage": self.name, "cell": self.cell_id(cell), "results": self.outs.format(**cell)} | self.config(
            params, cell)

    def row_keys(self, cell: dict) -> dict:
        """A cell's key columns in its analysis frame."""
        if self.keys is not None:
            return self.keys(cell)
        return {axis: int(value) if axis == "seed" else value for axis, value in cell.items()}

    def find(self, params, values: list[str]) -> dict:
        """The cell with axis values `values`: each must be planned by params, except a seed, which may be any; else a
        PipelineError naming the planned values."""
        cells, cell = self.cells(params), dict(zip(self.axes, map(str, values)))
        for axis, value in cell.items():
            planned = list(dict.fromkeys(c[axis] for c in cells))
            if axis == "seed" and value.isdigit():
                continue
            if value not in planned:
                raise PipelineError(f"{self.name}@{'-'.join(map(str, values))}: {axis} {value!r} is not one params.yaml"
                                    f" plans for this stage ({', '.join(planned) or 'none: the stage is off'})")
        return cell


def lookup(data: dict, path: str) -> Any:
    node = data
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        node = node[int(part[1:-1])] if part.startswith("[") else node[part]
    return node


def scalar(value: Any) -> str:
    """A matrix value as DVC spells it in a stage name (`dvc.parsing`: str(), booleans lower-case)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def axis_values(data: dict, spec: Any) -> list[str]:
    if isinstance(spec, list):
        return [scalar(lookup(data, REFERENCE.match(s)[1])) for s in spec]
    value = lookup(data, REFERENCE.match(spec)[1])
    return [scalar(v) for v in (value.keys() if isinstance(value, dict) else value)]


#: the registry: each experiment's module under pipeline/experiments/, in dvc.yaml's order. A module declares its
#: params fields (`FIELDS`: (name, type, dataclasses.field), which `pipeline.params.Params` is assembled from), its
#: seed lists (`SEED_KEYS`), its checks across sections (`validate(params)`), its stages of training cells
#: (`STAGES`), the builds `check` makes (`check_builds(params, check)`) and the overrides that switch it on in the
#: default params (`SWITCH_ON`); optionally what the analysis reads of its params (`analysis_part`) and the analysis
#: frames of other experiments its stages join (`JOINS`).
#: The analysis stages' results deps follow from the stages (`analysis_deps`); adding one is a module, a line here
#: and its section in params.yaml.
MODULES = ("filter_study", "grid", "weight_selection", "ci", "sia")


def experiment_modules() -> list:
    """The registered experiments' modules, in `MODULES`' order."""
    return [importlib.import_module(f"{__name__}.{name}") for name in MODULES]


def analysis_parts(params) -> tuple:
    """(module name, its record) of every registered experiment that declares what the analysis reads of its params
    (`analysis_part(params)`, a frozen dataclass `AnalysisPart`): `aggregate.Experiment` holds them by name."""
    return tuple((module.__name__.rsplit(".", 1)[-1], module.analysis_part(params)) for module in experiment_modules()
                 if hasattr(module, "analysis_part"))


def default_part(name: str):
    """The record of experiment `name` when params switch it off (its `AnalysisPart()`); None if it has none."""
    module = next((m for m in experiment_modules() if m.__name__.rsplit(".", 1)[-1] == name), None)
    return module.AnalysisPart() if module is not None and hasattr(module, "AnalysisPart") else None


def seed_key(frame: str) -> str | None:
    """The params key of the seed list the cells of analysis frame `frame` run over (their stages' seed axis)."""
    for stage in stages():
        match = REFERENCE.match(str(stage.axes.get("seed", "")))
        if stage.frame == frame and match:
            return match[1]
    return None


def analysis_deps(stage: str) -> list[str]:
    """The results folders the analysis stage `stage` ('aggregate' or 'figures') reads, from the declarations: every
    stage with a frame (aggregate) or drawn by the figures (figures), each folder once, in the registry's order."""
    chosen = [s for s in stages() if (s.figures if stage == "figures" else bool(s.frame))]
    return list(dict.fromkeys(s.results_root for s in chosen))


def check_frames(modules: list | None = None) -> None:
    """Each analysis frame belongs to the first experiment whose stages declare it; another experiment's stages join
    it only where that module lists the frame in `JOINS`, since the claims that read a frame then read those cells too
    (a copied module that kept its original's frame would silently feed the original's claims)."""
    owners: dict[str, str] = {}
    for module in modules if modules is not None else experiment_modules():
        name = module.__name__.rsplit(".", 1)[-1]
        for stage in module.STAGES:
            owner = owners.setdefault(stage.frame, name) if stage.frame else name
            if owner != name and stage.frame not in getattr(module, "JOINS", ()):
                raise PipelineError(
                    f"experiment {name!r}: stage {stage.name!r} feeds the analysis frame {stage.frame!r} of experiment"
                    f" {owner!r}, whose claims would then read its cells; give the stage a frame of its own"
                    f" (CellStage frame=...), or declare JOINS = ({stage.frame!r},) in"
                    f" pipeline/experiments/{name}.py if its cells are meant to join {owner!r}'s")


def seed_keys() -> tuple[str, ...]:
    """Every params key that lists seeds ('seeds', 'filter_study.seeds', ...), from each experiment's `SEED_KEYS`."""
    return tuple(key for module in experiment_modules() for key in module.SEED_KEYS)


def switch_on() -> tuple[str, ...]:
    """Overrides that switch every experiment's stages on in the default params (each module's `SWITCH_ON`)."""
    return tuple(override for module in experiment_modules() for override in module.SWITCH_ON)


def attribute(params, path: str) -> Any:
    """`params`' value at a dotted params key ('filter_study.seeds')."""
    node = params
    for part in path.split("."):
        node = getattr(node, part)
    return node


def stages() -> list[CellStage]:
    return [stage for module in experiment_modules() for stage in module.STAGES]


def by_name(name: str) -> CellStage:
    for stage in stages():
        if name in (stage.name, stage.command):
            return stage
    raise PipelineError(f"no stage of training cells named {name!r}")


def data_section(params, dataset: str, train_subset: int | None = None) -> dict:
    """What a cell reads of params `data`: the subsets and the (mean, std) it normalises `dataset` with."""
    from pipeline.datasets import normalization_stats

    mean, std = normalization_stats(dataset, params.data.normalization)
    subset = params.data.train_subset if train_subset is None else train_subset
    held = (params.data.holdout or {}).get(dataset, 0)
    pool = {"holdout": held} if held else {}  # absent without a pool: no cell re-runs for the key
    return {"train_subset": subset, "val_subset": params.data.val_subset, **pool,
            "normalization": params.data.normalization, "mean": list(mean), "std": list(std)}


def train_section(recipe, dataset: str) -> dict:
    """A recipe as a cell on `dataset` reads it: without horizontal flips where a mirror changes the label (digits:
    a mirrored 2 or 5 is another class; `DatasetInfo.mirror_safe`), whatever `hflip` says."""
    from pipeline.datasets import DATASETS

    train = dataclasses.asdict(recipe)
    info = DATASETS.get(dataset)
    if info is not None and not info.mirror_safe and train.get("hflip"):
        train["hflip"] = 0.0
    return train


def init_section(params, arm: str, variant: str) -> dict:
    """The options an arm's init runs with on `variant`, as the run uses them: impulse in code-2505's order on a ViT
    whose heads params name takes the smallest kernel that gives its heads the same offsets (`smallest_kernel`), so
    `impulse.kernel_size: 5` with 3 heads resolves as 3 does and re-runs nothing (`check` says so). A kernel the
    token grid cannot hold is left as given, for the run to refuse."""
    from pipeline.method.names import family_of, smallest_kernel

    options = params.method_options(arm, variant)
    model = params.models[variant]
    kernel = options.get("kernel_size") if arm == "impulse" and options.get("offsets") == "official" else None
    if kernel and model.num_heads and family_of(model.name) == "vit":
        grid = model.img_size // model.patch_size if model.img_size and model.patch_size else None
        if grid and kernel <= grid:
            options = options | {"kernel_size": smallest_kernel(model.num_heads, kernel)}
    return options


def plugin_section(params, arm: str) -> dict:
    """What a cell of your own init (params `inits`) records of its code: {"plugin": {function, files}}, `files` the
    `source_digest` of its module and of the modules under the working directory that it imports
    (`pipeline.closure.local_closure`); {} for a built-in arm, whose code is its runtime's stamp, so the built-in
    cells' configurations stay as they were.

    Why here: a cell re-runs exactly when its configuration file changes, so a change in the plug-in's behaviour
    (not a comment or docstring) re-runs its cells and nothing else. The `configs` stage that writes these files
    learns of a change outside the repository's code through the `sources` stage (`pipeline.data.fetch.fingerprint`,
    DVC's pattern for external inputs): it runs on every `dvc repro`, writes data/sources/inits/<arm>.json with the
    same digests, and `configs` depends on that folder."""
    from pipeline.closure import local_closure

    own = params.own_inits.get(arm)
    if own is None:
        return {}
    return {"plugin": {"function": own.function, "files": local_closure(own.module, Path.cwd())}}


def model_section(model) -> dict:
    """A `models` section as a cell reads it: without `init_options`, which reach it through its arm's `init`."""
    return {k: v for k, v in dataclasses.asdict(model).items() if k != "init_options"}

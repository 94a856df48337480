"""`python -m pipeline.data.fetch.fingerprint`: the stage `sources`, what each dataset is read from right now.

Writes data/sources/<dataset>.json for every dataset a fetch stage fetches (params `datasets` and
`weight_selection.fetch`): the registered ones a constant (their source is the registry, already a dep of
fetch@), `imagenet` its path, and `folder` its path and `listing_digest` (`pipeline.data.fetch.userdata`).
fetch@<dataset> depends on its own file. The stage is `always_changed` in dvc.yaml, since a user's folder changes
outside DVC's view; it takes a second, and fetch@folder re-runs only when the folder's file changed (DVC's
documented pattern for external data: an always-changed stage whose output the next stage depends on).

Your own inits (params `inits`) are code outside pipeline/, which no stage's code deps list, so the same pattern
carries them: data/sources/inits/<arm>.json for every arm of the grid and every init of your own, a built-in arm's
params section, and for yours its function, options and the `source_digest` of its files (`plugin_section`). The
`configs` stage depends on the folder, so editing what your init computes writes its cells' configurations anew
(they re-run), while a comment or docstring changes no file. attention@<variant>-<arm> depends on its arm's file
instead of the params section `<arm>`, which your arm has none of (DVC stops at a params key params.yaml lacks).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pipeline import entry
from pipeline.params import Params
from pipeline.data.fetch.userdata import PARAMS, listing_digest
from pipeline.datasets import DATASETS
from pipeline.experiments import plugin_section
from pipeline.outputs import folder_aside

SOURCES = Path("data/sources")
INITS = "inits"  #: data/sources/inits/<arm>.json (no dataset is named so)


def fingerprint(name: str, imagenet_path: str, folder_path: str) -> dict:
    """What dataset `name` is read from, as data/sources/<name>.json holds it."""
    if DATASETS[name].source != "user-path":
        return {"dataset": name, "source": "registry"}
    path = imagenet_path if name == "imagenet" else folder_path
    root = Path(path).expanduser().resolve() if path else None
    out = {"dataset": name, "source": PARAMS[name][0], "path": str(root) if root else ""}
    if name == "folder" and root and root.is_dir():
        splits = [s for s in ("train", "val", "test") if (root / s).is_dir()]
        out["listing_digest"] = listing_digest(root, tuple(splits[:2]))
    return out


def init_fingerprint(params: Params, arm: str) -> dict:
    """What arm `arm` runs, as data/sources/inits/<arm>.json holds it: its options, and for an init of your own its
    function and the digests of its code."""
    own = params.own_inits.get(arm)
    source = {"source": own.key, **plugin_section(params, arm)["plugin"]} if own else {"source": "built-in"}
    return {"arm": arm, **source, "options": params.method_options(arm)}


def write_sources(params: Params, out: Path = SOURCES) -> list[str]:
    """data/sources/<dataset>.json for every fetched dataset and data/sources/inits/<arm>.json for every arm of the
    grid and of `inits`, all or nothing; returns the datasets."""
    names = list(dict.fromkeys([*params.datasets, *params.weight_selection.fetch]))
    with folder_aside(out) as tmp:
        for name in names:
            (tmp / f"{name}.json").write_text(json.dumps(
                fingerprint(name, params.data.imagenet_path, params.data.folder_path), indent=2) + "\n")
        (tmp / INITS).mkdir()
        for arm in dict.fromkeys([*params.arms, *params.own_inits]):
            (tmp / INITS / f"{arm}.json").write_text(json.dumps(init_fingerprint(params, arm), indent=2) + "\n")
    return names


def add_arguments(parser) -> None:
    parser.add_argument("--out", default=str(SOURCES), help="default: data/sources")


def main(params: Params, args) -> int:
    names = write_sources(params, Path(args.out))
    arms = ", ".join(dict.fromkeys([*params.arms, *params.own_inits]))
    print(f"sources: {', '.join(names)} in {args.out}; arms {arms} in {Path(args.out) / INITS}")
    return 0


if __name__ == "__main__":
    sys.exit(entry.command(__spec__.name, add_arguments, main))

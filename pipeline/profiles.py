"""Whole recipes as data: `profiles/<name>.yaml` holds the keys of params.yaml that a recipe changes.

`python -m pipeline profile <name>` merges that file into params.yaml (keeping params.yaml's comments and
every key the profile does not name), validates the result, and only then writes it, in the form DVC's own YAML
writer gives it (`dvc exp run -S` rewrites params.yaml with that writer, so a later `-S` changes only its value).
`git diff params.yaml` shows what changed; `git checkout params.yaml` returns to the CPU default.
"""

from __future__ import annotations

from pathlib import Path

from dvc.utils.collections import merge_dicts, remove_missing_keys
from dvc.utils.serialize import dumps_yaml, parse_yaml_for_update

from pipeline.config import Params, from_mapping, yaml_load
from pipeline.errors import PipelineError

PROFILES_DIR = Path(__file__).resolve().parent.parent / "profiles"


def available() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


#: Top-level sections a profile replaces whole rather than merges: `models` lists the grid's variants, so a
#: profile's variants are the grid's variants (merging would keep params.yaml's beside them).
REPLACED_WHOLE = ("models",)


def _empty_lists_safe(node) -> None:
    """Work around ruamel.yaml 0.19's emitter, which glues the next line onto an empty list whose key carried a
    block list with an end-of-line comment (`x: []  # c` then `y: 2 z: 3`): clear that key's empty
    before-items slot, as a key parsed with a flow list has it. `dvc exp run -S x=[]` hits the same bug
    (tests/test_params_yaml.py)."""
    if isinstance(node, dict):
        for key, value in node.items():
            slots = getattr(node, "ca", None) and node.ca.items.get(key)
            if isinstance(value, list) and not value and slots and len(slots) > 3 and slots[3] == []:
                slots[3] = None
            _empty_lists_safe(value)


def dvc_form(text: str, where: str = "params.yaml") -> str:
    """`text` as `dvc exp run -S` leaves it: DVC's round trip (merge the plain values into the commented document,
    dump with DVC's writer) repeated until it changes nothing (twice at most for a hand-written file)."""
    for _ in range(4):
        doc = parse_yaml_for_update(text, where)
        plain = yaml_load(text) or {}
        merge_dicts(doc, plain)
        remove_missing_keys(doc, plain)
        _empty_lists_safe(doc)
        new = dumps_yaml(doc)
        if new == text:
            return text
        text = new
    raise PipelineError(f"{where}: DVC's YAML writer does not settle on one form of this file; move comments that"
                        " follow a list onto the next key's line")


def apply_profile(name: str, params_path: str | Path) -> Params:
    """Merge profiles/<name>.yaml into the file at `params_path`; return the validated result."""
    source = PROFILES_DIR / f"{name}.yaml"
    if not source.exists():
        raise PipelineError(f"profile {name!r} not found; available: {', '.join(available())}")
    overlay = yaml_load(source.read_text()) or {}
    params_path = Path(params_path)
    doc = parse_yaml_for_update(params_path.read_text(), str(params_path))
    for key in REPLACED_WHOLE:
        if key in overlay:
            doc[key] = overlay.pop(key)
    merge_dicts(doc, overlay)  # as `dvc exp run -S` merges: mappings key by key, lists and values replaced
    _empty_lists_safe(doc)
    text = dvc_form(dumps_yaml(doc), str(params_path))
    params = from_mapping(Params, yaml_load(text))  # validate before writing anything
    params_path.write_text(text)
    return params


def add_arguments(parser) -> None:
    parser.add_argument("name", help=f"profile name, one of: {', '.join(available()) or '(none)'}")


def main(params: Params, args) -> int:
    del params
    result = apply_profile(args.name, args.params)
    print(f"applied profile {args.name!r} to {args.params} (profile is now {result.profile!r});"
          " `git diff params.yaml` shows the change")
    return 0

"""Whole recipes as data: `profiles/<name>.yaml` holds the keys of params.yaml that a recipe changes.

`python -m pipeline profile <name>` merges that file into params.yaml (keeping params.yaml's comments and every key
the profile does not name), validates the result, and only then writes it, in the form DVC's own YAML writer gives it
(`dvc exp run -S` rewrites params.yaml with that writer, so a later `-S` changes only its value). `git diff
params.yaml` shows what changed; `git checkout params.yaml` returns to the CPU default. Where DVC is not installed (a
stock PyTorch image) the file is written by PyYAML, without its comments, and the command says so.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from pipeline.errors import PipelineError
from pipeline.params import Params
from pipeline.schema import from_mapping, yaml_load

PROFILES_DIR = Path(__file__).resolve().parent.parent / "profiles"

#: Top-level sections a profile replaces whole rather than merges: `models` lists the grid's variants, so a
#: profile's variants are the grid's variants (merging would keep params.yaml's beside them).
REPLACED_WHOLE = ("models",)


def available() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


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
    from dvc.utils.collections import merge_dicts, remove_missing_keys
    from dvc.utils.serialize import dumps_yaml, parse_yaml_for_update

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


def _merge_plain(base: dict, overlay: dict, top: bool = True) -> None:
    """Deep-merge `overlay` into `base` as DVC merges (mappings key by key, lists and values replaced whole, and the
    sections of REPLACED_WHOLE too)."""
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict) and not (top and key in REPLACED_WHOLE):
            _merge_plain(base[key], value, top=False)
        else:
            base[key] = value


def merged_text(name: str, text: str) -> tuple[str, bool]:
    """params.yaml's `text` with profiles/<name>.yaml merged in, and whether its comments were kept (DVC's writer)."""
    source = PROFILES_DIR / f"{name}.yaml"
    if not source.exists():
        raise PipelineError(f"profile {name!r} not found; available: {', '.join(available())}")
    overlay = yaml_load(source.read_text()) or {}
    try:
        from dvc.utils.collections import merge_dicts
        from dvc.utils.serialize import dumps_yaml, parse_yaml_for_update
    except ImportError:  # a stock PyTorch image: the same values, without the comments
        doc = yaml_load(text) or {}
        _merge_plain(doc, overlay)
        return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None), False
    doc = parse_yaml_for_update(text, "params.yaml")
    for key in REPLACED_WHOLE:
        if key in overlay:
            doc[key] = overlay.pop(key)
    merge_dicts(doc, overlay)  # as `dvc exp run -S` merges: mappings key by key, lists and values replaced
    _empty_lists_safe(doc)
    return dvc_form(dumps_yaml(doc)), True


def apply_profile(name: str, params_path: str | Path) -> Params:
    """Merge profiles/<name>.yaml into the file at `params_path`; return the validated result."""
    params_path = Path(params_path)
    text, commented = merged_text(name, params_path.read_text())
    params = from_mapping(Params, yaml_load(text))  # validate before writing anything
    params_path.write_text(text)
    if not commented:
        print(f"DVC is not installed: {params_path} was written by PyYAML, without its comments")
    return params


def add_arguments(parser) -> None:
    parser.add_argument("name", help=f"profile name, one of: {', '.join(available()) or '(none)'}")


def main(params: Params, args) -> int:
    del params
    result = apply_profile(args.name, args.params)
    print(f"applied profile {args.name!r} to {args.params} (profile is now {result.profile!r});"
          " `git diff params.yaml` shows the change")
    return 0

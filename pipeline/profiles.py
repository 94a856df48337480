"""Whole recipes as data: `profiles/<name>.yaml` holds the keys of params.yaml that a recipe changes.

`python -m pipeline profile <name>` merges that file into params.yaml (keeping params.yaml's comments and
every key the profile does not name), validates the result, and only then writes it. `git diff params.yaml`
shows what changed; `git checkout params.yaml` returns to the CPU default. Where ruamel.yaml is not installed
(a stock PyTorch image) the file is written by PyYAML, without its comments, and the command says so.
"""

from __future__ import annotations

import io
from pathlib import Path

import yaml

from pipeline.config import Params, from_mapping, yaml_load
from pipeline.errors import PipelineError

PROFILES_DIR = Path(__file__).resolve().parent.parent / "profiles"


def available() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


#: Top-level sections a profile replaces whole rather than merges: `models` lists the grid's variants, so a
#: profile's variants are the grid's variants (merging would keep params.yaml's beside them).
REPLACED_WHOLE = ("models",)


def _merge(base, overlay, top: bool = True) -> None:
    """Deep-merge mapping `overlay` into mapping `base` in place (lists, and the sections of REPLACED_WHOLE, are
    replaced whole). A ruamel mapping gets flow-style lists that keep the comments of the ones they replace."""
    for key, value in overlay.items():
        if top and key in REPLACED_WHOLE:
            base[key] = value
        elif isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value, top=False)
        elif isinstance(value, list) and hasattr(base, "ca"):  # a ruamel CommentedMap
            from ruamel.yaml.comments import CommentedSeq

            seq = CommentedSeq(value)
            seq.fa.set_flow_style()
            if isinstance(base.get(key), CommentedSeq):
                seq._yaml_comment = base[key].ca
            base[key] = seq
        else:
            base[key] = value


def merged_text(name: str, text: str) -> tuple[str, bool]:
    """params.yaml's `text` with profiles/<name>.yaml merged in, and whether its comments were kept (ruamel.yaml)."""
    source = PROFILES_DIR / f"{name}.yaml"
    if not source.exists():
        raise PipelineError(f"profile {name!r} not found; available: {', '.join(available())}")
    overlay = yaml_load(source.read_text()) or {}
    try:
        from ruamel.yaml import YAML
    except ImportError:  # a stock PyTorch image: the same values, without the comments
        doc = yaml_load(text) or {}
        _merge(doc, overlay)
        return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None), False
    rt = YAML()
    rt.preserve_quotes = True
    doc = rt.load(text)
    _merge(doc, overlay)
    buffer = io.StringIO()
    rt.dump(doc, buffer)
    return buffer.getvalue(), True


def apply_profile(name: str, params_path: str | Path) -> Params:
    """Merge profiles/<name>.yaml into the file at `params_path`; return the validated result."""
    params_path = Path(params_path)
    text, commented = merged_text(name, params_path.read_text())
    params = from_mapping(Params, yaml_load(text))  # validate before writing anything
    params_path.write_text(text)
    if not commented:
        print(f"ruamel.yaml is not installed: {params_path} was written by PyYAML, without its comments")
    return params


def add_arguments(parser) -> None:
    parser.add_argument("name", help=f"profile name, one of: {', '.join(available()) or '(none)'}")


def main(params: Params, args) -> int:
    del params
    result = apply_profile(args.name, args.params)
    print(f"applied profile {args.name!r} to {args.params} (profile is now {result.profile!r});"
          " `git diff params.yaml` shows the change")
    return 0

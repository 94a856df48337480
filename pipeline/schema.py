"""The mechanics of reading params: YAML 1.2 as DVC reads it (ruamel.yaml), `key=value` overrides, and dataclass
sections built from mappings, their keys and types checked by pydantic v2 and their ranges by each section's `check`,
each error naming the key path. `pipeline.config` declares the sections; this
module knows nothing of them (it imports no pipeline module but the error type).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import typing
from typing import Any

import pydantic
from ruamel.yaml import YAML, YAMLError

from pipeline.errors import PipelineError

__all__ = ["YAMLError", "apply_overrides", "check_sections", "choice", "digest", "from_mapping", "parse_override",
           "positive", "within", "yaml_load"]


def positive(key: str, value, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if value is None or value <= 0:
        raise PipelineError(f"{key} = {value!r}: must be positive" + (" (or null)" if allow_none else ""))


def within(key: str, value, low: float, high: float, *, open_low: bool = False, open_high: bool = False) -> None:
    if value is None:
        return
    ok_low = value > low if open_low else value >= low
    ok_high = value < high if open_high else value <= high
    if not (ok_low and ok_high):
        interval = f"{'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"
        raise PipelineError(f"{key} = {value!r}: must lie in {interval}")


def choice(key: str, value: Any, allowed) -> None:
    if value not in allowed:
        raise PipelineError(f"{key}: unknown value {value!r}; valid choices are {', '.join(map(str, allowed))}")


def _sections(cls: type) -> set[type]:
    """`cls` and every dataclass reachable through its field annotations (a section, or a mapping of sections)."""
    seen, todo = set(), [cls]
    while todo:
        node = todo.pop()
        if dataclasses.is_dataclass(node):
            if node not in seen:
                seen.add(node)
                todo.extend(typing.get_type_hints(node).values())
        else:
            todo.extend(typing.get_args(node))
    return seen


@functools.cache
def _adapter(cls: type) -> pydantic.TypeAdapter:
    """pydantic's validator of dataclass `cls`: strict (no '3' for an int, no `true` for a number; an int is accepted
    where a float is) and refusing unknown keys, in every section it holds. The sections stay plain dataclasses (the
    training runtime and the method library use them without pydantic); the config is set on each class here."""
    for section in _sections(cls):
        section.__pydantic_config__ = pydantic.ConfigDict(strict=True, extra="forbid")
    return pydantic.TypeAdapter(cls)


def _section_at(cls: type, keys: list) -> type | None:
    """The section class at key path `keys` below `cls` (None where the path leaves the sections)."""
    node: Any = cls
    for key in keys:
        if dataclasses.is_dataclass(node):
            node = typing.get_type_hints(node).get(key)
        elif typing.get_origin(node) is dict and len(typing.get_args(node)) == 2:
            node = typing.get_args(node)[1]
        else:
            return None
    return node if dataclasses.is_dataclass(node) else None


def _keys_in(data: Any, loc: tuple) -> list:
    """The part of a pydantic error location that is a path through the data (what follows names a union member)."""
    keys, node = [], data
    for part in loc:
        if not (part in node if isinstance(node, dict) else isinstance(node, list) and isinstance(part, int)
                and part < len(node)):
            break
        node = node[part]
        keys.append(part)
    return keys


def _error(cls: type, data: Any, path: str, exc: pydantic.ValidationError) -> PipelineError:
    """One message for a failed validation: the first wrong key, by its full key path."""
    errors = exc.errors(include_url=False)
    keys = _keys_in(data, errors[0]["loc"])
    name = ".".join(str(k) for k in ([path] if path else []) + keys) or "params.yaml"
    if errors[0]["type"] in ("unexpected_keyword_argument", "extra_forbidden") and keys:
        section = _section_at(cls, keys[:-1])
        if keys[-1] in getattr(section, "MOVED", ()):
            return PipelineError(f"{name}: moved to resources.{keys[-1]} (where and how fast a run goes is not part of"
                                 " its recipe: it is neither a DVC param of a training cell nor part of its checkpoint"
                                 " key)")
        allowed = [f.name for f in dataclasses.fields(section) if f.init] if section else []
        return PipelineError(f"{name}: unknown key; allowed keys here are {', '.join(allowed)}")
    same = [e for e in errors if _keys_in(data, e["loc"]) == keys]
    if _section_at(cls, keys) is not None:
        return PipelineError(f"{name}: expected a mapping of keys, got {same[0]['input']!r}")
    reasons = " or ".join(dict.fromkeys(e["msg"][0].lower() + e["msg"][1:] for e in same))
    parent = _section_at(cls, keys[:-1]) if keys else None
    hint = str(typing.get_type_hints(parent).get(keys[-1], "")) if parent else ""
    hint = hint.removeprefix("<class '").removesuffix("'>").replace("typing.", "")
    wanted = f", expected {hint}" if hint and "Literal" not in hint else ""  # (a Literal's choices are in `reasons`)
    return PipelineError(f"{name} = {same[0]['input']!r}: wrong value{wanted} ({reasons})")


def check_sections(section: Any, path: str = "") -> None:
    """Run each section's own checks (its `check(key)`, where it declares one) with the key path it was read from,
    innermost first: a section type reused under another key (a new experiment's copy of the filter study's, an arm's
    options under `models.<variant>.init_options`) names that key."""
    for f in dataclasses.fields(section):
        if not f.init:  # derived, not read from params.yaml
            continue
        value = getattr(section, f.name)
        name = f"{path}.{f.name}" if path else f.name
        items = value.items() if isinstance(value, dict) else [(None, value)]
        for key, item in items:
            if dataclasses.is_dataclass(item) and not isinstance(item, type):
                check_sections(item, name if key is None else f"{name}.{key}")
    if hasattr(section, "check"):
        section.check(path)


def from_mapping(cls: type, data: Any, path: str = "") -> Any:
    """Build dataclass `cls` from a mapping read from YAML: pydantic checks every key and type (the first wrong one
    stops with one `PipelineError` naming its key path), then each section its own ranges (`check_sections`)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PipelineError(f"{path or 'params.yaml'}: expected a mapping of keys, got {data!r}")
    try:  # as JSON: strict JSON validation reads a mapping as a section, where strict Python wants an instance
        built = _adapter(cls).validate_json(json.dumps(data, default=str))
    except pydantic.ValidationError as exc:
        raise _error(cls, data, path, exc) from None
    _as_written(built, data)
    check_sections(built, path)
    return built


def _as_written(section: Any, data: dict) -> None:
    """Keep each number as params.yaml writes it: pydantic makes an int given for a float field a float, but DVC
    records the int (`aug_repeats: 0`), and each cell's resolved config and digest must say what params.yaml says."""
    for key, value in data.items():
        built = getattr(section, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and isinstance(built, float):
            object.__setattr__(section, key, value)  # (a frozen section too)
        elif isinstance(value, dict) and dataclasses.is_dataclass(built):
            _as_written(built, value)
        elif isinstance(value, dict) and isinstance(built, dict):
            for name, item in value.items():
                if isinstance(item, dict) and dataclasses.is_dataclass(built.get(name)):
                    _as_written(built[name], item)


def yaml_load(text: str) -> Any:
    """YAML 1.2 by ruamel.yaml, DVC's reader of params.yaml: `2e-3` is a float (YAML 1.1 readers take it for a
    string), `yes` and `on` stay strings, `017` is 17."""
    return YAML(typ="safe", pure=True).load(text)


def parse_override(text: str) -> tuple[list[str], Any]:
    """`train.lr=0.002` -> (['train', 'lr'], 0.002); the value is parsed as YAML, as `dvc exp run -S` does. A leading
    '+' (DVC's spelling of a key params.yaml lacks, e.g. `+inits.local_box=my_inits:local_box`) is accepted, so one
    override works in both."""
    if "=" not in text:
        raise PipelineError(f"override {text!r}: write it as key.subkey=value (e.g. train.epochs=2)")
    key, value = text.split("=", 1)
    return key.strip().removeprefix("+").split("."), yaml_load(value)


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Set each `key.sub=value` in a nested mapping (in place) and return it."""
    for text in overrides:
        keys, value = parse_override(text)
        node = data
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise PipelineError(f"override {text!r}: {k} is not a section")
        node[keys[-1]] = value
    return data


def digest(obj: Any) -> str:
    """A short content hash of a dataclass or mapping: what the run's results record as 'config digest'."""
    if dataclasses.is_dataclass(obj):
        obj = dataclasses.asdict(obj)
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]

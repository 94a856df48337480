"""The mechanics of reading params: YAML 1.2 as DVC reads it, `key=value` overrides, and dataclass sections built
from mappings with their types checked, each error naming the key. `pipeline.config` declares the sections; this
module knows nothing of them (it imports no pipeline module but the error type).
"""

from __future__ import annotations

import contextvars
import dataclasses
import hashlib
import json
import re
import types
import typing
from typing import Any, Literal

import yaml

from pipeline.errors import PipelineError


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


def type_ok(value: Any, annotation: Any) -> bool:
    """Whether a YAML value fits a dataclass field annotation (ints are accepted where floats are)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(type_ok(value, a) for a in typing.get_args(annotation))
    if origin is Literal:
        return any(value == a and type(value) is type(a) for a in typing.get_args(annotation))
    if origin in (list, dict):
        return isinstance(value, origin)
    if annotation is type(None):
        return value is None
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation in (list, dict, str, bool):
        return isinstance(value, annotation)
    return True


def expected(annotation: Any) -> str:
    """How an annotation reads in an error message: the choices of a Literal, else the type's name."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    literal = [a for a in args if typing.get_origin(a) is Literal]
    if literal:
        return expected(literal[0]) + (" or null" if type(None) in typing.get_args(annotation) else "")
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


#: the section `from_mapping` is building, (its dataclass, its key path): a section's own checks name the key it is
#: read from, so a section type reused under another key (a new experiment's copy of the filter study's) names that key
_BUILDING: contextvars.ContextVar = contextvars.ContextVar("building", default=(None, ""))


def section_key(section: Any, default: str) -> str:
    """The key path `section` (a dataclass, in its `__post_init__`) is read from: `from_mapping`'s while it builds that
    class from params, else `default`, its own place in params.yaml."""
    cls, path = _BUILDING.get()
    return path if path and cls is type(section) else default


def from_mapping(cls: type, data: Any, path: str = "") -> Any:
    """Build dataclass `cls` from a mapping, naming the first unknown key or wrongly typed value."""
    where = path or "params.yaml"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PipelineError(f"{where}: expected a mapping of keys, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        name = f"{path}.{key}" if path else str(key)
        if key not in fields and key in getattr(cls, "MOVED", ()):
            raise PipelineError(f"{name}: moved to resources.{key} (where and how fast a run goes is not part of its"
                                " recipe: it is neither a DVC param of a training cell nor part of its checkpoint key)")
        if key not in fields:
            raise PipelineError(f"{name}: unknown key; allowed keys here are {', '.join(fields)}")
        hint = hints[key]
        args = typing.get_args(hint)
        if dataclasses.is_dataclass(hint):
            kwargs[key] = from_mapping(hint, value, name)
        elif typing.get_origin(hint) is dict and len(args) == 2 and dataclasses.is_dataclass(args[1]):
            if not isinstance(value, dict):
                raise PipelineError(f"{name} = {value!r}: expected a mapping of name -> {args[1].__name__} section")
            kwargs[key] = {str(k): from_mapping(args[1], v, f"{name}.{k}") for k, v in value.items()}
        elif not type_ok(value, hint):
            raise PipelineError(f"{name} = {value!r}: wrong value, expected {expected(hint)}")
        else:
            kwargs[key] = value
    token = _BUILDING.set((cls, path))
    try:
        return cls(**kwargs)
    finally:
        _BUILDING.reset(token)


class Yaml12Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2's core schema, the implicit types of ruamel.yaml's 1.2 resolver
    (`ruamel/yaml/resolver.py`): `2e-3` is a float (YAML 1.1 reads a string), `yes`/`on` stay strings, `017` is 17.

    Why our own: a training cell must start where only PyYAML is installed (a stock PyTorch image), and read
    params.yaml as DVC does (DVC reads it with ruamel.yaml, YAML 1.2); tests/test_config.py checks both readers give
    the same Params for params.yaml and every profile."""

    yaml_implicit_resolvers = {}

    def construct_yaml_int(self, node) -> int:
        text = self.construct_scalar(node).replace("_", "")
        sign = -1 if text[0] == "-" else 1
        text = text.lstrip("+-")
        bases = {"0b": 2, "0o": 8, "0x": 16}
        return sign * (int(text[2:], bases[text[:2]]) if text[:2] in bases else int(text))


for _tag, _pattern, _first in (
    ("bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("float", r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |[-+]?\.[0-9_]+(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""", "-+0123456789."),
    ("int", r"^(?:[-+]?0b[0-1_]+|[-+]?0o?[0-7_]+|[-+]?[0-9_]+|[-+]?0x[0-9a-fA-F_]+)$", "-+0123456789"),
    ("merge", r"^(?:<<)$", "<"),
    ("null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("timestamp", r"""^(?:[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]
        |[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?(?:[Tt]|[ \t]+)[0-9][0-9]?:[0-9][0-9]:[0-9][0-9](?:\.[0-9]*)?
        (?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)$""", "0123456789"),
):
    Yaml12Loader.add_implicit_resolver(f"tag:yaml.org,2002:{_tag}", re.compile(_pattern, re.X), list(_first))
Yaml12Loader.add_constructor("tag:yaml.org,2002:int", Yaml12Loader.construct_yaml_int)


def yaml_load_pyyaml(text: str) -> Any:
    """YAML 1.2 by PyYAML (`Yaml12Loader`)."""
    return yaml.load(text, Loader=Yaml12Loader)


def yaml_load_ruamel(text: str) -> Any:
    """YAML 1.2 by ruamel.yaml, DVC's own reader."""
    from ruamel.yaml import YAML

    return YAML(typ="safe", pure=True).load(text)


def yaml_load(text: str) -> Any:
    """YAML 1.2, as DVC reads params.yaml (so `2e-3` is a float, which YAML 1.1 readers take for a string): by
    ruamel.yaml where it is installed, else by PyYAML with the same resolution (`Yaml12Loader`)."""
    try:
        import ruamel.yaml  # noqa: F401
    except ImportError:
        return yaml_load_pyyaml(text)
    return yaml_load_ruamel(text)


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


def yaml_errors() -> tuple[type[Exception], ...]:
    """The exceptions a YAML reader raises for a malformed file: PyYAML's, and ruamel.yaml's where installed."""
    try:
        from ruamel.yaml import YAMLError
    except ImportError:
        return (yaml.YAMLError,)
    return yaml.YAMLError, YAMLError


def digest(obj: Any) -> str:
    """A short content hash of a dataclass or mapping: what the run's results record as 'config digest'."""
    if dataclasses.is_dataclass(obj):
        obj = dataclasses.asdict(obj)
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]

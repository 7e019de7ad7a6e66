"""Typed, validated sections of params.yaml.

Every stage declares its section as a (nested) dataclass; `load_section` turns the YAML
mapping into it and refuses an unknown, missing or mistyped key with an error naming the
dotted key (`curate.reference_runz: unknown key`). A typo in params must never be silently
ignored: it would change an experiment without anyone noticing. The same holds one level up:
`read_params` refuses a top-level section no stage reads (`SECTIONS`, the sections dvc.yaml's
stages declare: tests/test_config_sections.py holds the two equal), naming it.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

from rlvr.errors import ConfigError

T = TypeVar("T")

DEFAULT_PARAMS = Path("params.yaml")

# Every top-level section of params.yaml some stage reads (dvc.yaml `params:`); any other
# section is a typo (`rolout:`) or a leftover that would be silently ignored.
SECTIONS = frozenset({"sandbox", "split", "curate", "verify", "policy", "rollout",
                      "synthesize", "evaluate", "sft", "grpo", "gate"})


def read_params(path: Path | str = DEFAULT_PARAMS) -> dict[str, Any]:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: params file not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of stage sections")
    unknown = sorted(str(k) for k in set(data) - SECTIONS)
    if unknown:
        raise ConfigError(f"{path}: {unknown[0]}: unknown section (known: "
                          f"{', '.join(sorted(SECTIONS))})")
    return data


def load_section(cls: type[T], name: str, path: Path | str = DEFAULT_PARAMS) -> T:
    """The `name` section of the params file as an instance of dataclass `cls`."""
    data = read_params(path)
    if name not in data:
        raise ConfigError(f"{path}: missing section '{name}'")
    return parse(cls, data[name], name)


def parse(cls: type[T], value: Any, where: str) -> T:
    """Build dataclass `cls` from a mapping, validating every key against its annotation."""
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise ConfigError(
            f"{where}.{unknown[0]}: unknown key (known: {', '.join(sorted(fields))})"
        )
    kwargs = {}
    for name, f in fields.items():
        key = f"{where}.{name}"
        if name in value:
            kwargs[name] = _coerce(hints[name], value[name], key)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{key}: missing required key")
    return cls(**kwargs)


def _coerce(tp: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        return parse(tp, value, key)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, key)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{key}: invalid value {value!r}")
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{key}: must be one of {list(args)}, got {value!r}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {type(value).__name__}")
        inner = args[0] if args else Any
        items = [_coerce(inner, v, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__}")
        kt, vt = args if args else (Any, Any)
        return {_coerce(kt, k, key): _coerce(vt, v, f"{key}.{k}") for k, v in value.items()}
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    raise ConfigError(f"{key}: unsupported parameter type {tp!r}")  # pragma: no cover


def as_dict(obj: Any) -> dict[str, Any]:
    """Flat `a.b.c -> value` view of a params dataclass, for MLflow."""
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if dataclasses.is_dataclass(value):
            for f in dataclasses.fields(value):
                walk(f"{prefix}.{f.name}" if prefix else f.name, getattr(value, f.name))
        else:
            out[prefix] = value

    walk("", obj)
    return out

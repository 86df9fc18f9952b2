"""Typed, validated configuration loaded from ``params.yaml``.

Every stage declares frozen, keyword-only dataclasses for the params section it reads and builds them with
:func:`build`, which rejects unknown keys, missing keys and wrong types with a message naming the dotted
key (``ingest.general.sources[0].package: expected str, got int``). A typo in params.yaml therefore fails
before any work starts instead of being silently ignored.

Supported field types: ``bool``, ``int``, ``float`` (ints accepted), ``str``, ``Literal[...]``,
``tuple[X, ...]`` (YAML lists), ``dict[str, X]``, ``X | None``, nested dataclasses, and unions of
dataclasses told apart by a ``kind: Literal[...]`` field (tagged unions, e.g. the source kinds of ingest).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

T = TypeVar("T")


class ConfigError(ValueError):
    """A params value is missing, unknown or of the wrong type; the message names the dotted key."""


class Params(dict):
    """A params file's contents: a plain mapping that remembers the file (``source``), so that a missing
    section is reported with the file it is missing from."""

    source: Path | None = None


def _represent_params() -> None:
    import yaml

    yaml.SafeDumper.add_representer(Params, yaml.representer.SafeRepresenter.represent_dict)


def load_params(path: str | Path = "params.yaml") -> dict[str, Any]:
    """Read a params file (YAML) into a dict; a missing or malformed file is a ConfigError naming it."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: params file not found")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: invalid YAML: {exc}".replace("\n", " ")) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping at the top level")
    _represent_params()  # yaml.safe_dump writes it as the mapping it is
    params = Params(data)
    params.source = p
    return params


def section(params: dict[str, Any], dotted: str) -> Any:
    """Return ``params[a][b]...`` for ``dotted = "a.b"``; a missing key is a ConfigError naming it."""
    node: Any = params
    walked = []
    for part in dotted.split("."):
        walked.append(part)
        if not isinstance(node, dict) or part not in node:
            where = getattr(params, "source", None)
            raise ConfigError(f"{where}: " * (where is not None) + f"{'.'.join(walked)}: missing section in params")
        node = node[part]
    return node


def deep_merge(base: dict[str, Any], override: dict[str, Any] | None) -> dict[str, Any]:
    """``override`` applied over ``base``, recursively for mappings (presets are small diffs)."""
    import copy

    out = copy.deepcopy(base)
    for k, v in (override or {}).items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def build(cls: type[T], data: Any, where: str) -> T:
    """Build dataclass ``cls`` from plain data, validating keys and types recursively."""
    return _convert(cls, data, where)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _got(value: Any) -> str:
    return type(value).__name__ if value is not None else "null"


def _convert(tp: Any, value: Any, where: str) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        return _build_dataclass(tp, value, where)
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed or isinstance(value, bool) != any(isinstance(a, bool) for a in allowed):
            raise ConfigError(f"{where}: expected one of {list(allowed)}, got {value!r}")
        return value
    if origin in (Union, types.UnionType):
        return _convert_union(tp, value, where)
    if origin is tuple:
        args = get_args(tp)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {_got(value)}")
        item_tp = args[0] if args else Any
        return tuple(_convert(item_tp, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        key_tp, val_tp = get_args(tp) or (str, Any)
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {_got(value)}")
        return {_convert(key_tp, k, f"{where}.{k}"): _convert(val_tp, v, f"{where}.{k}") for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {_got(value)} {value!r}")
        return value
    raise TypeError(f"{where}: unsupported config field type {tp!r}")  # a programming error, not user input


def _convert_union(tp: Any, value: Any, where: str) -> Any:
    args = get_args(tp)
    if value is None:
        if type(None) in args:
            return None
        raise ConfigError(f"{where}: expected a value, got null")
    members = [a for a in args if a is not type(None)]
    tagged = [m for m in members if dataclasses.is_dataclass(m)]
    if tagged and len(tagged) == len(members) and len(members) > 1:
        if not isinstance(value, dict) or "kind" not in value:
            raise ConfigError(f"{where}: expected a mapping with a 'kind' key")
        kinds = {}
        for m in tagged:
            kind_tp = typing.get_type_hints(m)["kind"]
            for k in get_args(kind_tp):
                kinds[k] = m
        if value["kind"] not in kinds:
            raise ConfigError(f"{where}.kind: expected one of {sorted(kinds)}, got {value['kind']!r}")
        return _build_dataclass(kinds[value["kind"]], value, where)
    if len(members) == 1:
        return _convert(members[0], value, where)
    errors = []
    for m in members:
        try:
            return _convert(m, value, where)
        except ConfigError as exc:
            errors.append(str(exc))
    raise ConfigError(f"{where}: expected one of {[_type_name(m) for m in members]}, got {value!r}")


def _build_dataclass(cls: Any, value: Any, where: str) -> Any:
    if isinstance(value, cls):
        return value
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping, got {_got(value)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown key (allowed: {', '.join(sorted(fields))})")
    kwargs = {}
    for name, f in fields.items():
        key = f"{where}.{name}" if where else name
        if name in value:
            kwargs[name] = _convert(hints[name], value[name], key)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{key}: missing key")
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (ValueError, TypeError) as exc:  # __post_init__ range checks, messages start with the field
        raise ConfigError(f"{where}.{exc}" if where else str(exc)) from None


def check(condition: bool, message: str) -> None:
    """Raise ValueError(message) unless condition; for ``__post_init__`` range checks.

    Start the message with the field name (``"max_rows: must be >= min_rows"``) so the error names the
    full dotted key once :func:`build` prefixes it.
    """
    if not condition:
        raise ValueError(message)


MAX_SEED = 2**32 - 1


def check_seed(name: str, value) -> None:
    """A seed is a whole number in [0, 2**32 - 1] (what numpy, torch and Python's random all take); anything
    else is a ValueError naming the field."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise ValueError(f"{name}: a seed must be a whole number from 0 to {MAX_SEED}, got {value!r}")

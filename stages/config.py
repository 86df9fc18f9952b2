"""Typed, validated configuration from ``params.yaml``: frozen dataclasses built by :func:`build`, which pydantic
validates strictly (no unknown or missing keys, no type coercion), each error one line naming the dotted key
(``ingest.general.sources[0].package: expected a string, got int 5``). Unions of dataclasses are told apart by a
``kind: Literal[...]`` field; ``__post_init__`` range checks use :func:`check`."""

from __future__ import annotations

import copy
import dataclasses
import datetime
import functools
import json
import math
import types
import typing
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin

import pydantic

T = TypeVar("T")


class ConfigError(ValueError):
    """A params value is missing, unknown or of the wrong type; the message names the dotted key."""


class Params(dict):
    """A params file's contents, remembering the file (``source``) that a missing section is reported with."""

    source: Path | None = None


MAX_YAML_VALUES = 100_000  # params.yaml holds a few hundred; more, once aliases are expanded, is an alias bomb
MAX_YAML_BYTES = 10 << 20


def _refuse_duplicate_keys(p: Path, node, where: str = "", seen_nodes: set | None = None) -> None:
    """A key given twice in one mapping is a ConfigError naming it and both lines (YAML loaders keep the last one
    silently, DVC refuses the file later with a traceback)."""
    import yaml

    seen_nodes = set() if seen_nodes is None else seen_nodes
    if id(node) in seen_nodes:
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        lines: dict[str, int] = {}
        for key, value in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else None
            dotted = f"{where}.{name}" if where else str(name)
            if name is not None and name != "<<":
                if name in lines:
                    raise ConfigError(f"{p}: line {key.start_mark.line + 1}: key {dotted} is given twice (first on "
                                      f"line {lines[name]}); keep one")
                lines[name] = key.start_mark.line + 1
            _refuse_duplicate_keys(p, value, dotted, seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _refuse_duplicate_keys(p, item, f"{where}[{i}]", seen_nodes)


def load_yaml(p: Path) -> Any:
    """A params or profile file's YAML, refused with one line naming it when it is not UTF-8, not YAML, larger
    than 10 MiB, or expands (through aliases) to more than 100,000 values, gives a key twice in one mapping, or
    holds a non-finite number."""
    import yaml

    if p.stat().st_size > MAX_YAML_BYTES:
        raise ConfigError(f"{p}: {p.stat().st_size:,} bytes; a params file is at most {MAX_YAML_BYTES:,}")
    try:
        text = p.read_text(encoding="utf-8")
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        sizes: dict[int, int] = {}

        def size(n) -> int:  # values after alias expansion, each shared node counted once per use
            if id(n) not in sizes:
                sizes[id(n)] = 0  # a node reached again while counted: YAML aliases cannot recurse, but be safe
                kids = [k for pair in n.value for k in pair] if isinstance(n, yaml.MappingNode) else (
                    n.value if isinstance(n, yaml.SequenceNode) else [])
                sizes[id(n)] = 1 + sum(size(k) for k in kids)
            return sizes[id(n)]

        if node is not None and size(node) > MAX_YAML_VALUES:
            raise ConfigError(f"{p}: its YAML aliases expand to {size(node):,} values (at most {MAX_YAML_VALUES:,}); "
                              "an alias that nests others multiplies them")
        if node is not None:
            _refuse_duplicate_keys(p, node)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: invalid YAML: {exc}".replace("\n", " ")) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise ConfigError(f"{p}: nested too deeply") from None
    _finite(data, p, "")
    return data


def _finite(value: Any, p: Path, key: str) -> None:
    """ConfigError naming the dotted key of the first NaN or infinity (no knob takes one)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{p}: {key or 'the document'}: {value} is not a finite number")
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        _finite(v, p, f"{key}[{k}]" if isinstance(k, int) else f"{key}.{k}" if key else str(k))


def load_params(path: str | Path = "params.yaml") -> dict[str, Any]:
    """Read a params file (YAML) into a dict; a missing or malformed file is a ConfigError naming it."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: params file not found")
    data = load_yaml(p)
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping at the top level")
    yaml.SafeDumper.add_representer(Params, yaml.representer.SafeRepresenter.represent_dict)  # dumped as a mapping
    params = Params(data)
    params.source = p
    return params


def main(argv: list[str] | None = None) -> int:
    """``python -m stages.config [FILE]``: check that a params file loads (run before DVC reads it)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    try:
        load_params(args[0] if args else "params.yaml")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def section(params: dict[str, Any], dotted: str) -> Any:
    """Return ``params[a][b]...`` for ``dotted = "a.b"``; a missing key is a ConfigError naming it."""
    node: Any = params
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if not isinstance(node, dict) or part not in node:
            where = getattr(params, "source", None)
            key = ".".join(parts[: i + 1])
            raise ConfigError(f"{where}: " * (where is not None) + f"{key}: missing section in params")
        node = node[part]
    return node


def deep_merge(base: dict[str, Any], override: dict[str, Any] | None) -> dict[str, Any]:
    """``override`` applied over ``base``, recursively for mappings (presets are small diffs)."""
    out = copy.deepcopy(base)
    for k, v in (override or {}).items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def build(cls: type[T], data: Any, where: str) -> T:
    """Dataclass ``cls`` from a params section; an unknown or missing key or a wrong type is a ConfigError naming it."""
    if isinstance(data, cls):
        return data
    data = {} if data is None else data
    while True:
        try:
            return _adapter(cls).validate_json(_as_json(data, where))
        except pydantic.ValidationError as exc:
            errors = exc.errors(include_url=False)
        empty = next((e["loc"] for e in errors if e["type"] == "dataclass_type" and e["input"] is None), None)
        if empty is None:
            raise ConfigError(_message(cls, data, errors, where)) from None
        data = _replaced(data, _walk(cls, data, empty)[0], {})  # an empty section (``key:``) means its defaults


@functools.cache
def _adapter(cls: type) -> pydantic.TypeAdapter:
    """Strict validation of ``cls`` (JSON types, YAML lists fill tuples), no unknown keys, nested dataclasses too."""
    config = pydantic.ConfigDict(extra="forbid", strict=True)

    def forbid(tp: Any) -> None:
        if dataclasses.is_dataclass(tp) and tp.__dict__.get("__pydantic_config__") is not config:
            tp.__pydantic_config__ = config
            for hint in typing.get_type_hints(tp).values():
                forbid(hint)
        for arg in get_args(tp):
            forbid(arg)

    forbid(cls)
    return pydantic.TypeAdapter(cls)


def _as_json(data: Any, where: str) -> str:
    def plain(value: Any) -> Any:
        if isinstance(value, (datetime.date, datetime.time)):
            return value.isoformat()  # YAML reads 2024-01-31 as a date; a string field takes it as written
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return dataclasses.asdict(value)
        raise ConfigError(f"{where}: {type(value).__name__} value {value!r} is not plain YAML data")

    return json.dumps(data, default=plain)


def _replaced(data: Any, path: list[Any], value: Any) -> Any:
    if not path:
        return value
    out = copy.copy(data)
    out[path[0]] = _replaced(data[path[0]], path[1:], value)
    return out


def union_members(tp: Any) -> list[Any]:
    """The types of a union but None ([] for any other type)."""
    return [a for a in get_args(tp) if a is not type(None)] if get_origin(tp) in (Union, types.UnionType) else []


def _kinds(tp: Any) -> dict[Any, Any]:
    """A tagged union's ``kind`` values and the dataclass each picks ({} for any other type)."""
    members = union_members(tp)
    tags = {m: get_args(typing.get_type_hints(m).get("kind")) if dataclasses.is_dataclass(m) else () for m in members}
    return {k: m for m in members for k in tags[m]} if len(members) > 1 and all(tags.values()) else {}


def _walk(tp: Any, value: Any, loc: tuple) -> tuple[list[Any], Any, Any, str | None]:
    """Follow pydantic's error ``loc`` through type ``tp`` and data ``value``: the data path, the type and value there,
    and ``"other"`` (a union member the data's ``kind`` did not pick) or ``"kind"`` (the data picks none) or None."""
    path: list[Any] = []
    parts = list(loc)
    while True:
        members = union_members(tp)
        if len(members) > 1:  # pydantic names the member it tried next in loc
            tag = parts.pop(0) if parts and parts[0] in {getattr(m, "__name__", None) for m in members} else None
            kinds = _kinds(tp)
            if not isinstance(value, dict) or not isinstance(value.get("kind"), str) or value["kind"] not in kinds:
                return path, tp, value, "kind"
            if tag is not None and tag != kinds[value["kind"]].__name__:
                return path, tp, value, "other"
            tp = kinds[value["kind"]]
        elif members:
            tp = members[0]
        if not parts:
            return path, tp, value, None
        part = parts.pop(0)
        if dataclasses.is_dataclass(tp):
            tp = typing.get_type_hints(tp).get(part, Any)
        else:
            tp = {tuple: (get_args(tp) or (Any,))[0], dict: (get_args(tp) or (str, Any))[-1]}.get(get_origin(tp), Any)
        path.append(part)
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            value = None


_EXPECTED = {"int": "an integer", "float": "a number", "bool": "true/false", "string": "a string",
             "tuple": "a list", "list": "a list", "dict": "a mapping", "dataclass": "a mapping"}  # fmt: skip


def _message(cls: type, data: Any, errors: list[dict[str, Any]], where: str) -> str:
    """One line naming the dotted key for the first error about the data (not a union member its kind did not pick)."""
    for err in errors:
        path, tp, value, why = _walk(cls, data, err["loc"])
        key = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
        key = f"{where}{key}" if where else key.lstrip(".")
        kind, base = err["type"], err["type"].split("_")[0]
        if why == "other":
            continue
        if why == "kind" and _kinds(tp):
            if not isinstance(value, dict) or "kind" not in value:
                return f"{key}: expected a mapping with a 'kind' key"
            return f"{key}.kind: expected one of {sorted(_kinds(tp))}, got {value['kind']!r}"
        if kind in ("extra_forbidden", "unexpected_keyword_argument"):
            parent = _walk(cls, data, err["loc"][:-1])[1]
            return f"{key}: unknown key (allowed: {', '.join(sorted(f.name for f in dataclasses.fields(parent)))})"
        if kind == "missing":
            return f"{key}: missing key"
        if kind == "literal_error":
            return f"{key}: expected one of {list(get_args(tp))}, got {value!r}"
        if kind == "value_error":  # a __post_init__ check, its message starting with the field's name
            text = str(err["ctx"]["error"]) if "ctx" in err else err["msg"]
            return f"{key}.{text}" if key else text
        if base in _EXPECTED:
            got = (repr(value) if base in ("int", "float", "bool")
                   else type(value).__name__ if value is not None else "null")
            return f"{key}: expected {_EXPECTED[base]}, got {got}" + (f" {value!r}" if base == "string" else "")
        return f"{key}: {err['msg']}"
    return f"{where}: {errors[0]['msg']}"


def check(condition: bool, message: str) -> None:
    """Raise ValueError(message) unless condition; the message starts with the field (:func:`build` adds the rest)."""
    if not condition:
        raise ValueError(message)


MAX_SEED = 2**32 - 1


def check_seed(name: str, value) -> None:
    """A ValueError naming the field unless ``value`` is a whole number in [0, 2**32 - 1] (numpy, torch, random)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise ValueError(f"{name}: a seed must be a whole number from 0 to {MAX_SEED}, got {value!r}")


if __name__ == "__main__":
    raise SystemExit(main())

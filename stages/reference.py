"""The params reference (docs/params.md), generated from the docstrings under the config classes' fields.

``--check`` exits 1 when the committed page differs from what the code would generate (a unit test runs it).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import json
import sys
import textwrap
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from stages.config import union_members
from stages.params.sections import SECTIONS, SKIP

PAGE = Path("docs/params.md")


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """``{field: docstring}`` from the string literals that follow each annotated field in the bodies of ``cls`` and
    of the dataclasses it derives from (its own win)."""
    docs = {k: v for base in cls.__bases__ if dataclasses.is_dataclass(base) for k, v in field_docs(base).items()}
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body  # type: ignore[attr-defined]
    for node, nxt in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
            docs[node.target.id] = " ".join(inspect.cleandoc(nxt.value.value).split())
    return docs


def type_name(tp: Any) -> str:
    """A field's type in the words of params.yaml (YAML types)."""
    members = union_members(tp)
    if len(members) > 1 and all(dataclasses.is_dataclass(m) for m in members):
        return "mapping with a `kind` (below)"
    if get_origin(tp) is tuple and len(union_members(get_args(tp)[0])) > 1:
        return "list of " + type_name(get_args(tp)[0]).replace("mapping with", "mappings, each with")
    if members:
        named = " or ".join(type_name(m) for m in members)
        return f"{named} or null" if type(None) in get_args(tp) else named
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(f"`{a}`" for a in get_args(tp))
    if origin is tuple:
        return f"list of {type_name(get_args(tp)[0])}" if get_args(tp) else "list"
    if origin is dict:
        return f"mapping of name to {type_name(get_args(tp)[1])}"
    if dataclasses.is_dataclass(tp):
        return "mapping"
    return {bool: "true/false", int: "integer", float: "number", str: "string"}.get(tp, getattr(tp, "__name__", str(tp)))


def default_text(f: dataclasses.Field) -> str:
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
        return "required"
    value = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    if dataclasses.is_dataclass(value):
        return ""
    return "`" + json.dumps(list(value) if isinstance(value, tuple) else value) + "`"


def describe(cls: type, prefix: str, missing: list[str], depth: int = 2) -> list[str]:
    """A table of ``cls``'s plain fields, then a section per nested mapping; undocumented fields go to ``missing``."""
    hints, docs = typing.get_type_hints(cls), field_docs(cls)
    lines, nested = [], []
    for f in dataclasses.fields(cls):
        if f.name in SKIP.get(cls, ()):
            continue
        key, tp = f.name, hints[f.name]
        if f.name not in docs:
            missing.append(f"{cls.__module__}.{cls.__qualname__}.{f.name}")
        inner = union_members(tp) or [tp]
        if all(dataclasses.is_dataclass(m) for m in inner):
            nested += [(key, m) for m in inner]
            if len(inner) == 1:
                continue
        elif get_origin(tp) in (tuple, dict) and dataclasses.is_dataclass(get_args(tp)[-1] if get_args(tp) else None):
            nested.append((key + ("[]" if get_origin(tp) is tuple else ".<name>"), get_args(tp)[-1]))
        elif get_origin(tp) is tuple and union_members(get_args(tp)[0]):
            nested += [(key + "[]", m) for m in union_members(get_args(tp)[0])]
        cells = (f"`{key}`", type_name(tp), default_text(f), docs.get(f.name, ""))
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    out = ["| key | type | default | what it does |", "|---|---|---|---|", *lines, ""] if lines else []
    for key, sub in nested:
        kind = get_args(typing.get_type_hints(sub).get("kind", str))
        title = f"`{prefix}{key}` with `kind: {kind[0]}`" if kind else f"`{prefix}{key}`"
        doc = " ".join(inspect.cleandoc(sub.__doc__ or "").split())
        out += [f"{'#' * min(depth + 1, 6)} {title}", ""] + ([doc, ""] if doc else [])
        out += describe(sub, f"{prefix}{key}.", missing, depth + 1)
    return out


def render() -> tuple[str, list[str]]:
    """The page and the fields that have no docstring (each as ``module.Class.field``)."""
    missing: list[str] = []
    out = [
        "# Every parameter",
        "",
        "Generated from the config classes by `python -m stages.reference` (do not edit by hand; a unit test",
        "compares this page with the code). params.yaml sets the default run's values; a key it leaves out takes",
        "the default below. Nested keys are written relative to the table's heading.",
        "",
    ]
    for name, prefix, note, classes in SECTIONS:
        out += [f"## {name}", "", f"`{prefix}`: {note}.", ""]
        for cls in classes:
            out += describe(cls, f"{prefix}.", missing)
    return "\n".join(out).rstrip() + "\n", missing


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m stages.reference", description=__doc__.splitlines()[0])
    ap.add_argument("--output", type=Path, default=PAGE)
    ap.add_argument("--check", action="store_true", help="exit 1 if --output differs from what would be written")
    args = ap.parse_args(argv)
    page, missing = render()
    missing = sorted(set(missing))
    if missing:
        print(f"error: {len(missing)} config fields have no docstring: {', '.join(missing)}", file=sys.stderr)
        return 1
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.is_file() else ""
        if current != page:
            print(f"error: {args.output} is out of date: run python -m stages.reference", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(page, encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

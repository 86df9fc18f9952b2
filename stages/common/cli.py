"""Small argument types shared by the stages' command lines."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def named_path(value: str) -> tuple[str, Path]:
    """``NAME=PATH`` (NAME a plain word: it becomes a key of the stage's outputs and metrics)."""
    name, sep, path = value.partition("=")
    if not sep or not name.isidentifier() or not path:
        raise argparse.ArgumentTypeError(f"{value!r}: expected NAME=PATH with NAME a plain word")
    return name, Path(path)


def overlap_error(args: argparse.Namespace, outputs: list[str], inputs: list[str]) -> bool:
    """True, after printing ``error: ...`` to stderr, when an output option's path is, contains or lies inside
    an input option's path (see :func:`stages.common.atomic.refuse_overlap`); a stage's ``main`` then returns
    1 before touching anything. Options may hold a path, a list of paths or of ``NAME=PATH`` pairs, or None."""
    from stages.common.atomic import refuse_overlap

    def paths(names: list[str]) -> dict[str, Path]:
        out: dict[str, Path] = {}
        for name in names:
            value = getattr(args, name.replace("-", "_"), None)
            for i, v in enumerate(value if isinstance(value, list) else [value]):
                v = v[1] if isinstance(v, tuple) else v
                if v is not None:
                    out[name if i == 0 else f"{name} #{i + 1}"] = Path(v)
        return out

    try:
        refuse_overlap(paths(outputs), paths(inputs))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return True
    return False

"""Small argument types shared by the stages' command lines."""

from __future__ import annotations

import argparse
from pathlib import Path


def named_path(value: str) -> tuple[str, Path]:
    """``NAME=PATH`` (NAME a plain word: it becomes a key of the stage's outputs and metrics)."""
    name, sep, path = value.partition("=")
    if not sep or not name.isidentifier() or not path:
        raise argparse.ArgumentTypeError(f"{value!r}: expected NAME=PATH with NAME a plain word")
    return name, Path(path)

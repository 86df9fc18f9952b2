"""Reading a stage's input files so that a damaged one is an :class:`InputError` (a ``ValueError``) starting with
its path, where a library's own error would not name the file."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class InputError(ValueError):
    """An input file that cannot be read as what it should be; the message starts with its path."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


@contextlib.contextmanager
def reading(path: str | Path, what: str) -> Iterator[None]:
    """Any error reading ``path`` (but a missing file) as ``<path>: not a valid <what> (<the error's first line>)``."""
    try:
        yield
    except (FileNotFoundError, InputError):
        raise
    except Exception as exc:  # noqa: BLE001 (every reader's own error type, re-raised with the file named)
        raise InputError(f"{path}: not a valid {what} ({_first_line(exc)})") from exc


def read_json(path: str | Path) -> Any:
    """The JSON document in ``path`` (UTF-8)."""
    with reading(path, "JSON file"):
        return json.loads(Path(path).read_text(encoding="utf-8"))


def load_npy(path: str | Path, mmap_mode: str | None = "r"):
    """The array in ``path`` (memory-mapped by default; object arrays are refused, as NumPy does)."""
    import numpy as np

    with reading(path, "NumPy array file"):
        return np.load(path, mmap_mode=mmap_mode)


def check_folder(folder: str | Path) -> Path:
    """``folder`` once every ``*.json`` in it parses and every ``*.safetensors`` header is whole."""
    from safetensors import safe_open

    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(2, "no such folder", str(folder))
    for path in sorted(folder.glob("*.json")):
        read_json(path)
    for path in sorted(folder.glob("*.safetensors")):
        with reading(path, "safetensors file"), safe_open(str(path), "pt") as handle:
            handle.keys()
    return folder


def check_folders(*parents: str | Path) -> None:
    """:func:`check_folder` on every folder directly under each of ``parents`` but hidden ones (a killed run's)."""
    for parent in map(Path, parents):
        for folder in sorted(parent.iterdir()) if parent.is_dir() else []:
            if folder.is_dir() and not folder.name.startswith("."):
                check_folder(folder)

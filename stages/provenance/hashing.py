"""File and folder hashes exactly as DVC 3 writes them in ``dvc.lock`` (a file: its MD5; a folder: see
:func:`dir_md5`, checked against dvc_data by a unit test), so per-file hashes provably add up to DVC's."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

CHUNK = 1 << 20
IGNORED_DIRS = frozenset({"__pycache__"})  # as .dvcignore: bytecode caches are not dependencies


def md5_file(path: str | Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def walk_files(folder: str | Path) -> list[str]:
    """Posix relative paths of every file under ``folder`` (as DVC: empty folders add nothing; ``__pycache__``
    is skipped, as the project's ``.dvcignore`` says), sorted."""
    folder = Path(folder)
    out = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in IGNORED_DIRS)
        rel_root = Path(root).relative_to(folder)
        out.extend((rel_root / name).as_posix() for name in files)
    return sorted(out)


def folder_manifest(folder: str | Path) -> dict[str, str]:
    """``{relpath: md5}`` of every file under ``folder``."""
    folder = Path(folder)
    return {rel: md5_file(folder / rel) for rel in walk_files(folder)}


def dir_md5(manifest: dict[str, str]) -> str:
    """DVC's folder hash from a ``{relpath: md5}`` manifest (``dvc_data.hashfile.tree.Tree.digest``)."""
    entries = [{"md5": manifest[rel], "relpath": rel} for rel in sorted(manifest)]
    return hashlib.md5(json.dumps(entries, sort_keys=True).encode("utf-8")).hexdigest() + ".dir"


def path_hashes(path: str | Path) -> tuple[str, dict[str, str]]:
    """(DVC hash, per-file manifest) of a file or a folder; a file's manifest is ``{"": md5}``."""
    path = Path(path)
    if path.is_dir():
        manifest = folder_manifest(path)
        return dir_md5(manifest), manifest
    digest = md5_file(path)
    return digest, {"": digest}

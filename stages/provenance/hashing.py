"""File and folder hashes exactly as DVC 3 writes them in ``dvc.lock`` (a file: its MD5; a folder: see
:func:`dir_md5`, checked against dvc_data by a unit test), so per-file hashes provably add up to DVC's."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

CHUNK = 1 << 20
IGNORED_DIRS = frozenset({"__pycache__"})  # as .dvcignore: bytecode caches are not dependencies


class IrregularFile(OSError):
    """A path that must not be read as a file: a FIFO, a device or a socket (reading could block forever), or a
    link that leaves the folders it may point into."""


def regular_file(path: str | Path) -> Path:
    """``path`` when it is (or links to) a regular file; IrregularFile naming it otherwise."""
    path = Path(path)
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise IrregularFile(f"{path}: not a regular file (a FIFO, device or socket is never read)")
    return path


def md5_file(path: str | Path) -> str:
    h = hashlib.md5()
    with open(regular_file(path), "rb") as f:
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


def folder_manifest(folder: str | Path, links_within: tuple[Path, ...] | None = None) -> dict[str, str]:
    """``{relpath: md5}`` of every file under ``folder``; with ``links_within``, a link that resolves outside
    those folders (a workspace and its DVC cache) is an IrregularFile."""
    folder = Path(folder)
    if links_within is not None:
        roots = [Path(r).resolve() for r in links_within]
        for rel in walk_files(folder):
            target = (folder / rel).resolve()
            if (folder / rel).is_symlink() and not any(target.is_relative_to(r) for r in roots):
                raise IrregularFile(f"{folder / rel}: a link to {target}, outside {', '.join(map(str, roots))}")
    return {rel: md5_file(folder / rel) for rel in walk_files(folder)}


def dir_md5(manifest: dict[str, str]) -> str:
    """DVC's folder hash from a ``{relpath: md5}`` manifest (``dvc_data.hashfile.tree.Tree.digest``)."""
    entries = [{"md5": manifest[rel], "relpath": rel} for rel in sorted(manifest)]
    return hashlib.md5(json.dumps(entries, sort_keys=True).encode("utf-8")).hexdigest() + ".dir"


def path_hashes(path: str | Path, links_within: tuple[Path, ...] | None = None) -> tuple[str, dict[str, str]]:
    """(DVC hash, per-file manifest) of a file or a folder; a file's manifest is ``{"": md5}``."""
    path = Path(path)
    if path.is_dir():
        manifest = folder_manifest(path, links_within)
        return dir_md5(manifest), manifest
    digest = md5_file(path)
    return digest, {"": digest}

"""File digests shared by the sources (download checksums), checkpoints and the lineage."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """The SHA-256 of a regular file; OSError naming ``path`` for anything else (reading a FIFO would block)."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise OSError(f"{path}: not a regular file (a FIFO, device or socket is never read)")
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()

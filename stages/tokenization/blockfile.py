"""Blocks on disk as ``.npy`` (2-D, ``uint16`` or ``uint32``) so training memory-maps them:
``np.load(path, mmap_mode="r")`` reads only the rows it touches."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def dtype_for(vocab_size: int):
    """The smallest unsigned type that holds every id."""
    return np.uint16 if vocab_size <= 2**16 else np.uint32


class BlockWriter:
    """Appends rows of a fixed width to ``<path>.part`` and turns them into ``path`` (.npy) on ``close``."""

    def __init__(self, path: Path, *, width: int, dtype) -> None:
        self.path, self.width, self.dtype = Path(path), width, np.dtype(dtype)
        self._raw_path = self.path.with_name(self.path.name + ".part")
        self._raw = open(self._raw_path, "wb")
        self.rows = 0

    def write(self, rows: np.ndarray) -> None:
        if rows.ndim != 2 or rows.shape[1] != self.width:
            raise ValueError(f"{self.path.name}: expected rows of width {self.width}, got shape {rows.shape}")
        self._raw.write(np.ascontiguousarray(rows, dtype=self.dtype).tobytes())
        self.rows += len(rows)

    def close(self) -> Path:
        self._raw.close()
        out = np.lib.format.open_memmap(self.path, mode="w+", dtype=self.dtype, shape=(self.rows, self.width))
        if self.rows:
            src = np.memmap(self._raw_path, dtype=self.dtype, mode="r", shape=(self.rows, self.width))
            step = max(1, (64 << 20) // (self.width * self.dtype.itemsize))
            for i in range(0, self.rows, step):
                out[i: i + step] = src[i: i + step]
            del src
        out.flush()
        del out
        self._raw_path.unlink()
        self.path.chmod(0o644)
        return self.path


def open_blocks(path: Path) -> np.ndarray:
    """A read-only memory map of a block file."""
    return np.load(path, mmap_mode="r")

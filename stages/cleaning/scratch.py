"""Where the clean stage's tasks exchange their files (shards, line hashes, the line table's buckets, the output's
parts), by name.

By default that is the stage's own work folder, read and written in place: on a Dask cluster it must then be a
folder every worker sees at the same path. With ``LMPIPE_SCRATCH`` set to an fsspec URL the files go through that
URL instead, and workers need nothing else (no shared folder, no path of the main process)::

    LMPIPE_SCRATCH=s3://bucket/lm-pipeline      # an object store (credentials and endpoint: fsspec's environment,
                                                # e.g. AWS_* and FSSPEC_S3_ENDPOINT_URL)
    LMPIPE_SCRATCH=/mnt/shared/lm-pipeline      # a file system mounted on every machine

Each run uses a fresh prefix below the URL and removes it at the end. The main process uploads the input and the
task file there; a task reads byte ranges where it needs part of a file (input pieces, line-hash buckets),
downloads what it reads whole into a folder of its own process (under the Dask worker's local directory), and
uploads what it writes when it succeeds. Like ``LMPIPE_DASK`` this is an environment setting, not a param: the
output is the same bytes wherever the files went, so DVC must not re-run the stage for it.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

ENV = "LMPIPE_SCRATCH"


class ScratchError(ValueError):
    """A file of a URL scratch could not be read or written (credentials, network, space); names the file."""


@contextmanager
def _named(scratch: Scratch, what: str, name: str) -> Iterator[None]:
    """A URL scratch's failure as one :class:`ScratchError` naming the file (a local folder's errors pass as they
    are)."""
    try:
        yield
    except ScratchError:
        raise
    except Exception as exc:
        if not scratch.url:
            raise
        raise ScratchError(f"{ENV}: cannot {what} {scratch.root}/{name} ({type(exc).__name__}: {exc})") from exc


@dataclass(frozen=True)
class Scratch:
    """``root``: a local folder whose files are used in place (``url`` False), or an fsspec URL whose files each
    task copies (``url`` True). A name is a path relative to the root; with a local root an absolute path (the
    input, the task file) is used as it is."""

    root: str
    url: bool = False

    @classmethod
    def for_run(cls, work: Path, name: str) -> Scratch:
        """``LMPIPE_SCRATCH``'s URL with a fresh prefix for this run, or (unset) the local folder ``work``."""
        base = os.environ.get(ENV, "").strip()
        if not base:
            return cls(str(work))
        tag = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "clean"
        return cls(f"{base.rstrip('/')}/{tag}-{uuid.uuid4().hex[:12]}", url=True)

    def filesystem(self) -> tuple[Any, str]:
        """The fsspec file system and the root's path in it (fsspec caches the instance per process)."""
        from fsspec.core import url_to_fs

        return url_to_fs(self.root)

    def where(self, name: str) -> str:
        """The file's path in :meth:`filesystem` (URL roots) or on this machine (local roots)."""
        if self.url:
            return f"{self.filesystem()[1].rstrip('/')}/{name}"
        return str(Path(self.root) / name)

    @contextmanager
    def files(self) -> Iterator[Files]:
        """One task's access to the files; what it wrote is uploaded when the block ends without an error."""
        if not self.url:
            yield Files(self, None)
            return
        tmp = Path(tempfile.mkdtemp(prefix="task-", dir=_process_dir(self.root)))
        try:
            io = Files(self, tmp)
            yield io
            io.upload()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def stage(self, local: Path, name: str) -> str:
        """Make the main process's file ``local`` readable by the workers; the name to read it by."""
        if not self.url:
            return str(local.absolute())
        with _named(self, "upload to", name):
            _put(self.filesystem()[0], local, self.where(name))
        return name

    def check(self) -> None:
        """Fail now, naming the URL, when it cannot be written (before any work is sent out)."""
        if not self.url:
            return
        probe = Path(tempfile.mkdtemp()) / "probe"
        try:
            fs, _ = self.filesystem()
            probe.write_bytes(b"")
            _put(fs, probe, self.where(".probe"))
            fs.rm_file(self.where(".probe"))
        except Exception as exc:  # fsspec backends raise their own types
            raise ValueError(f"{ENV}={self.root.rsplit('/', 1)[0]}: cannot write there ({type(exc).__name__}: {exc})"
                             ) from None
        finally:
            shutil.rmtree(probe.parent, ignore_errors=True)

    def clear(self) -> None:
        """Remove the run's prefix (URL roots; the stage's work folder removes itself) and this process's copies."""
        if self.url:
            try:
                fs, _ = self.filesystem()
                fs.rm(self.where("").rstrip("/"), recursive=True)
            except FileNotFoundError:
                pass
            except Exception as exc:  # never hides the stage's own error; says what is left behind
                print(f"warning: {ENV}: could not remove {self.root} ({type(exc).__name__}: {exc}); remove it by "
                      "hand", file=sys.stderr)
            _forget(self.root)


class Files:
    """Files of a :class:`Scratch` as local paths, arrays and byte streams for one task."""

    def __init__(self, scratch: Scratch, tmp: Path | None) -> None:
        self.scratch = scratch
        self._tmp = tmp
        self._written: list[tuple[Path, str]] = []

    def _local(self, name: str) -> Path:
        return Path(self.scratch.root) / name

    def read(self, name: str, *, keep: bool = False) -> Path:
        """A local path holding the file. ``keep``: the copy stays for this process's later tasks (the task file),
        and is made once."""
        if self._tmp is None:
            return self._local(name)
        with _named(self.scratch, "download", name):
            return self._download(name, keep)

    def _download(self, name: str, keep: bool) -> Path:
        fs, _ = self.scratch.filesystem()
        if keep:
            with _LOCK:
                dest = _process_dir(self.scratch.root) / "kept" / name
                if not dest.exists():
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    fs.get_file(self.scratch.where(name), str(dest) + ".part")
                    os.replace(str(dest) + ".part", dest)
            return dest
        dest = self._tmp / "in" / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        fs.get_file(self.scratch.where(name), str(dest))
        return dest

    def write(self, name: str) -> Path:
        """A local path to write the file at; uploaded when the task's block ends."""
        if self._tmp is None:
            return self._local(name)
        dest = self._tmp / "out" / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        self._written.append((dest, name))
        return dest

    def open(self, name: str) -> BinaryIO:
        """The file opened for reading bytes (a remote file reads only the ranges asked for)."""
        if self._tmp is None:
            return open(self._local(name), "rb")
        with _named(self.scratch, "open", name):
            fs, _ = self.scratch.filesystem()
            return fs.open(self.scratch.where(name), "rb")

    def rows(self, name: str, start: int, stop: int):
        """Columns [start, stop) of a saved 1-D or (k, n) C-ordered NumPy array (ranges of a remote file only)."""
        import numpy as np

        if self._tmp is None:
            arr = np.load(self._local(name), mmap_mode="r")
            out = np.array(arr[..., start:stop])
            del arr
            return out
        fs, _ = self.scratch.filesystem()
        path = self.scratch.where(name)
        with _named(self.scratch, "read", name):
            shape, dtype, offset = _npy_header(fs.cat_file(path, start=0, end=4096), name)
            n, size = shape[-1], dtype.itemsize
            rows = [fs.cat_file(path, start=offset + size * (r * n + start), end=offset + size * (r * n + stop))
                    for r in range(shape[0] if len(shape) == 2 else 1)]
        out = np.stack([np.frombuffer(b, dtype=dtype) for b in rows])
        return out if len(shape) == 2 else out[0]

    def table(self, names: tuple[str, ...]) -> Path:
        """The line-dedup table: one placed file (a local root), or the buckets' files joined once per process."""
        if len(names) == 1 or self._tmp is None:
            return self.read(names[0])
        import numpy as np

        from stages.cleaning.dedup import new_table

        with _LOCK:
            dest = _process_dir(self.scratch.root) / "kept" / "line-table.npy"
            if not dest.exists():
                parts = [self.read(n) for n in names]
                sizes = [np.load(p, mmap_mode="r").shape[1] for p in parts]
                tmp = dest.with_suffix(".part.npy")
                tmp.parent.mkdir(parents=True, exist_ok=True)
                new_table(tmp, sum(sizes))
                final = np.load(tmp, mmap_mode="r+")
                at = 0
                for p, size in zip(parts, sizes):
                    final[:, at:at + size] = np.load(p, mmap_mode="r")
                    at += size
                    p.unlink()
                final.flush()
                del final
                os.replace(tmp, dest)
        return dest

    def delete(self, names: Iterable[str]) -> None:
        """Remove files no task needs any more (missing ones are fine: a task run again finds them gone)."""
        if self._tmp is None:
            for name in names:
                self._local(name).unlink(missing_ok=True)
            return
        fs, _ = self.scratch.filesystem()
        for name in names:
            with _named(self.scratch, "delete", name):
                try:
                    fs.rm_file(self.scratch.where(name))
                except FileNotFoundError:
                    pass

    def upload(self) -> None:
        fs, _ = self.scratch.filesystem()
        for local, name in self._written:
            if local.exists():
                with _named(self.scratch, "upload to", name):
                    _put(fs, local, self.scratch.where(name))
        self._written.clear()


def _put(fs, local: Path, path: str) -> None:
    """Upload ``local`` to ``path``, making its folders on a file system that has them."""
    try:
        fs.put_file(str(local), path)
    except FileNotFoundError:
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        fs.put_file(str(local), path)


def _npy_header(head: bytes, name: str):
    """(shape, dtype, data offset) of a .npy file from its first bytes."""
    import io

    import numpy as np

    buf = io.BytesIO(head)
    try:
        version = np.lib.format.read_magic(buf)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read(buf)
    except ValueError as exc:
        raise ValueError(f"{name}: not a NumPy array file ({exc})") from None
    if fortran or len(shape) not in (1, 2):
        raise ValueError(f"{name}: expected a 1-D or 2-D C-ordered array, got shape {shape}")
    return shape, dtype, buf.tell()


_LOCK = threading.RLock()  # re-entrant: a kept copy is made while holding it
_DIRS: dict[str, Path] = {}  # this process's local folders for the copies of recent runs' files, oldest first
_RUNS_KEPT = 4  # runs a worker serves at once (stages of several users on one cluster) before the oldest goes


def _process_dir(root: str) -> Path:
    """This process's folder for ``root``'s copies (under the Dask worker's local directory when in one); the
    folder of the oldest of more than ``_RUNS_KEPT`` runs is removed, and every one when the process exits."""
    with _LOCK:
        if root not in _DIRS:
            for old in list(_DIRS)[:max(0, len(_DIRS) - _RUNS_KEPT + 1)]:
                _forget_locked(old)
            base = None
            if "distributed" in sys.modules:
                try:
                    from distributed import get_worker

                    base = get_worker().local_directory
                except ValueError:  # not in a worker
                    pass
            _DIRS[root] = Path(tempfile.mkdtemp(prefix="lmpipe-scratch-", dir=base))
            atexit.register(shutil.rmtree, _DIRS[root], True)
        return _DIRS[root]


def _forget_locked(root: str) -> None:
    shutil.rmtree(_DIRS.pop(root), ignore_errors=True)


def _forget(root: str) -> None:
    with _LOCK:
        if root in _DIRS:
            _forget_locked(root)

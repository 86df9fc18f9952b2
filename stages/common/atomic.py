"""Atomic outputs: written into a temporary sibling and renamed into place, never half-written (docs/stages.md)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

# Temporary names carry their writer, ``.<name>.tmp-<pid>@<host8>-XXXX``, so a sweep spares live work.
_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
_OWNED = re.compile(r"^\..+\.(?:tmp|work|old)-(?:(\d+)@([0-9a-f]{8}))?")


def _owner() -> str:
    return f"{os.getpid()}@{_HOST}"


def _remove(p: Path) -> None:
    """Remove a folder (not followed when a link) or a file; a missing one is fine."""
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


class BusyOutput(ValueError):
    """Another live process is writing the same output."""


class Staged:
    """A temporary sibling of ``target`` (made on first use of :attr:`path`) that :meth:`publish` renames over it."""

    def __init__(self, target: str | Path) -> None:
        self.target = Path(target)
        self._tmp: Path | None = None

    @property
    def path(self) -> Path:
        if self._tmp is None:
            self.target.parent.mkdir(parents=True, exist_ok=True)
            sweep_stale(self.target)
            other = _earlier_writer(self.target)  # a live writer already at work
            if other is None:
                self._tmp = Path(tempfile.mkdtemp(prefix=f".{self.target.name}.tmp-{_owner()}-",
                                                  dir=self.target.parent))
                other = _earlier_writer(self.target, self._tmp)  # one that started in the same instant
            if other is not None:
                self.discard()
                raise BusyOutput(f"{self.target}: another run (pid {other}) is writing it now; wait for it to "
                                 "finish or stop it")
        return self._tmp

    def publish(self) -> None:
        if self._tmp is not None:
            os.chmod(self._tmp, 0o755)  # mkdtemp makes 0700; a published output is as readable as any other
            replace_dir(self._tmp, self.target)
            self._tmp = None

    def discard(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


@contextlib.contextmanager
def atomic_dir(target: str | Path) -> Iterator[Path]:
    """A fresh temporary folder next to ``target`` that replaces it on success and is removed on an exception."""
    staged = Staged(target)
    try:
        yield staged.path
        staged.publish()
    finally:
        staged.discard()


def work_dir(target: str | Path) -> tempfile.TemporaryDirectory:
    """A scratch folder beside ``target``, removed on exit (or, left by a killed run, by :func:`sweep_stale`)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryDirectory(prefix=f".{target.name}.work-{_owner()}-", dir=target.parent)


def refuse_overlap(outputs: dict[str, Any], inputs: dict[str, Any]) -> None:
    """``ValueError`` when an output is, contains or lies inside an input (outputs are replaced whole), by option."""
    for oname, out in outputs.items():
        for iname, given in inputs.items():
            if out is None or given is None:
                continue
            o, i = Path(out).resolve(), Path(given).resolve()
            how = ("is" if o == i else "contains" if o in i.parents else "lies inside" if i in o.parents else "")
            if how:
                source = iname if "." in iname else f"--{iname}"  # a params key, or a command-line option
                raise ValueError(f"--{oname} {out}: {how} the input {source} {given}; outputs are replaced "
                                 "whole, so nothing you pass in may be, hold or contain one. Choose another "
                                 f"--{oname}.")


def _live_owner(name: str) -> int | None:
    """The pid of the live process of this host a temporary name belongs to; None when it is gone or untagged
    (a name of another host counts as live: its process cannot be checked from here)."""
    m = _OWNED.match(name)
    if m is None or not m.group(1):
        return None
    pid = int(m.group(1))
    return pid if m.group(2) != _HOST or _alive(pid) else None


def sweep_stale(target: Path) -> None:
    """Remove the temporary, set-aside and scratch siblings of ``target`` whose writer is gone (a killed run's)."""
    for kind in ("tmp", "old", "work"):
        for p in target.parent.glob(f".{target.name}.{kind}-*"):
            if _live_owner(p.name) in (None, os.getpid()):
                _remove(p)


def _earlier_writer(target: Path, mine: Path | None = None) -> int | None:
    """The pid of another live writer of ``target`` (one that started before ``mine``, its temporary sibling)."""
    def key(p: Path) -> tuple[int, str]:
        return p.stat().st_ctime_ns, p.name

    try:
        me = key(mine) if mine is not None else (1 << 80, "~")
        for p in target.parent.glob(f".{target.name}.tmp-*"):
            pid = _live_owner(p.name)
            if p != mine and pid not in (None, os.getpid()) and key(p) < me and not _started_after(pid, key(p)[0]):
                return pid
    except FileNotFoundError:  # a sibling that went away while looked at finished or was swept
        pass
    return None


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, killed but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        pass
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True  # no /proc (not Linux): the signal check above is all there is


def _started_after(pid: int, ctime_ns: int) -> bool:
    """True when process ``pid`` started after ``ctime_ns`` (so it reuses the pid of a dead writer); Linux only."""
    try:
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return False
    return boot + ticks / os.sysconf("SC_CLK_TCK") > ctime_ns / 1e9 + 1


def sweep_dead(roots: Iterable[str | Path]) -> list[Path]:
    """Remove and return, under ``roots``, every temporary, scratch or set-aside path whose writer is gone (a dead
    process of this host, or an untagged name); every stage runs it on start (:func:`stages.common.cli.entry`)."""
    removed = []
    for root in map(Path, roots):
        for p in sorted(root.rglob(".*")) if root.is_dir() else []:  # the pattern tells leftovers from other names
            m = _OWNED.match(p.name)
            if m is None or not p.parent.exists() or (m.group(1) and (m.group(2) != _HOST or
                                                                      _alive(int(m.group(1))))):
                continue
            _remove(p)
            removed.append(p)
    return removed


def exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False where the system cannot."""
    import ctypes
    import errno
    import sys

    fn = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None) if sys.platform.startswith("linux") else None
    if fn is None:  # not Linux, or a libc older than glibc 2.28
        return False
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(str(a)), at_fdcwd, os.fsencode(str(b)), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(a))


def replace_dir(src: Path, target: Path) -> None:
    """Move folder ``src`` over ``target``: swapped atomically where possible, else the old one renamed aside first."""
    if not (target.exists() or target.is_symlink()):
        os.replace(src, target)
    elif exchange(src, target):
        _remove(src)  # now the old target
    else:
        old = target.parent / f".{target.name}.old-{_owner()}"
        if old.exists():
            shutil.rmtree(old)
        os.replace(target, old)
        os.replace(src, target)
        _remove(old)


def temp_sibling(path: str | Path, suffix: str = "") -> Path:
    """A temporary name beside ``path`` carrying its writer (swept by :func:`sweep_dead`), ending in ``suffix``."""
    path = Path(path)
    return path.parent / f".{path.name}.tmp-{_owner()}{suffix}"


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-{_owner()}-", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        if exc.filename is None:  # "[Errno 28] No space left on device" alone does not say where
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Write pretty, key-sorted JSON atomically (stable bytes, so DVC hashes only change with content)."""
    text = json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n"
    write_bytes_atomic(path, text.encode("utf-8"))

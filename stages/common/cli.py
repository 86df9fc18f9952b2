"""What the stages' command lines share: :class:`Stage` (the one shape of a stage's ``main``) and :func:`entry`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stages.common.atomic import Staged, refuse_overlap, sweep_dead, temp_sibling, write_bytes_atomic, write_json_atomic


def named_path(value: str) -> tuple[str, Path]:
    """``NAME=PATH`` (NAME a plain word: it becomes a key of the stage's outputs and metrics)."""
    name, sep, path = value.partition("=")
    if not sep or not name.isidentifier() or not path:
        raise argparse.ArgumentTypeError(f"{value!r}: expected NAME=PATH with NAME a plain word")
    return name, Path(path)


def _paths(args: argparse.Namespace, names: Iterable[str]) -> dict[str, Path]:
    """The paths of options holding a path, a list of paths or ``NAME=PATH``, by option name."""
    out: dict[str, Path] = {}
    for name in names:
        value = getattr(args, name.replace("-", "_"), None)
        for i, v in enumerate(value if isinstance(value, list) else [value]):
            v = v[1] if isinstance(v, tuple) else v
            if v is not None:
                out[name if i == 0 else f"{name} #{i + 1}"] = Path(v)
    return out


class Folder(dict):
    """Files of a folder published as a whole (``{name: str | bytes | JSON data}``; replaced atomically)."""


def _write(path: Path, content: Any) -> None:
    if isinstance(content, (bytes, str)):
        write_bytes_atomic(path, content.encode("utf-8") if isinstance(content, str) else content)
    else:
        write_json_atomic(path, content)


def prepare(files: Mapping[Path | None, Any]) -> list[Staged | tuple[Path, Path]]:
    """Write each ``path: content`` (a :class:`Folder`, bytes, UTF-8 text or JSON; a ``None`` path not) beside its
    place, for :func:`commit` to move in; nothing is left behind when one fails (a full disk: the file named)."""
    ready: list[Staged | tuple[Path, Path]] = []
    try:
        for path, content in files.items():
            if path is None:
                continue
            if isinstance(content, Folder):
                ready.append(Staged(path))
                for name, item in content.items():
                    _write(ready[-1].path / name, item)
            else:
                tmp = temp_sibling(path, ".part")
                ready.append((tmp, Path(path)))
                try:
                    _write(tmp, content)
                except OSError as exc:  # name the file the user gave, not its temporary sibling
                    raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
    except BaseException:
        discard(ready)
        raise
    return ready


def commit(ready: list[Staged | tuple[Path, Path]]) -> None:
    """Move what :func:`prepare` wrote into place (renames within each folder)."""
    for item in ready:
        if isinstance(item, Staged):
            item.publish()
        else:
            os.replace(*item)


def discard(ready: list[Staged | tuple[Path, Path]]) -> None:
    for item in ready:
        if isinstance(item, Staged):
            item.discard()
        else:
            item[0].unlink(missing_ok=True)


def publish(files: Mapping[Path | None, Any]) -> None:
    """Write each ``path: content`` atomically (see :func:`prepare`)."""
    commit(prepare(files))


Log = Callable[[str], None]


@dataclass(frozen=True)
class Stage:
    """A stage's command line: ``main`` parses, refuses ``outputs`` overlapping ``inputs`` and calls the core
    ``run(args, log)``, which writes a ``folder`` into ``args.staged.path`` and returns an exit status, or the files
    and gates, published only when every gate passed. An error of ``errors`` is one ``error: ...`` line, exit 1."""

    prog: str
    description: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Log], Mapping[Path | None, Any] | int]
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    errors: tuple[type[BaseException], ...] = (ValueError, FileNotFoundError)
    message: Callable[[BaseException], str] = str
    folder: str | None = None

    def main(self, argv: Iterable[str] | None = None) -> int:
        prog = sys.argv[0] if sys.argv[0].startswith("lm-pipeline") else f"python -m {self.prog}"  # as the user ran it
        ap = argparse.ArgumentParser(prog=prog, description=self.description)
        self.arguments(ap)
        argv = list(argv) if argv is not None else sys.argv[1:]
        args = ap.parse_args(argv)
        args.argv = argv  # the command line as given (a stage that starts copies of itself passes it on)
        try:
            outputs = self.outputs + ((self.folder,) if self.folder else ())
            refuse_overlap(_paths(args, outputs), _paths(args, self.inputs))
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        target = getattr(args, self.folder) if self.folder else None
        args.staged = Staged(target) if target is not None else None
        ready: list = []
        try:
            out = self.run(args, lambda m: print(m, file=sys.stderr))
            if isinstance(out, int):
                return out
            files = {}
            for path, item in out.items():
                if hasattr(item, "check"):  # a gate (stages.quality.gate.Gate): writes its report, raises on failure
                    item.check(path)  # nothing is published then
                else:
                    files[path] = item
            ready = prepare(files)  # metrics, reports, plots: all written before anything is replaced
            if args.staged is not None:
                args.staged.publish()
            commit(ready)
            ready = []
        except self.errors as exc:
            print(f"error: {self.message(exc)}", file=sys.stderr)
            return 1
        except OSError as exc:
            if exc.filename is None and exc.errno is not None and target is not None:  # where, on a full disk
                raise OSError(exc.errno, exc.strerror or str(exc), f"{target} (being written)") from exc
            raise
        finally:
            discard(ready)
            if args.staged is not None:
                args.staged.discard()  # unless published
        return 0


def describe(exc: BaseException) -> str:
    """One line for an error: an OS error as ``<what>: <path>``, any other as its type and message."""
    if isinstance(exc, OSError) and exc.filename is not None:
        what = (exc.strerror or type(exc).__name__).lower()
        paths = f"{exc.filename}" + (f" -> {exc.filename2}" if exc.filename2 is not None else "")
        return f"{what}: {paths}"
    message = str(exc)
    if isinstance(exc, (ValueError, FileNotFoundError, OSError)) and message:
        return message
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the stage is, so that what it made so far is undone as on Ctrl-C (its ``finally`` and
    ``except BaseException`` blocks run: staged folders discarded, models put in the store removed)."""


def _terminated(signum, frame) -> None:
    raise Terminated()


def entry(main: Callable[[], int]) -> int:
    """Run ``main``: an error is ``error: ...`` and exit 1 (the traceback with ``--debug`` or ``LMPIPE_DEBUG=1``);
    Ctrl-C exits 130 and SIGTERM 143, each after the stage's own cleanup."""
    import signal
    import threading

    debug = os.environ.get("LMPIPE_DEBUG", "") not in ("", "0") or "--debug" in sys.argv[1:]
    if "--debug" in sys.argv[1:]:
        sys.argv.remove("--debug")
    if Path("dvc.yaml").is_file():  # a workspace: what killed runs left behind goes first
        for p in sweep_dead(["data", "reports", "dist"]):
            print(f"removed {p}: left by a run that was killed", file=sys.stderr)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if main_thread else None
    try:
        return main()
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        print("terminated (SIGTERM)" if terminated else "interrupted", file=sys.stderr)
        return 143 if terminated else 130
    except Exception as exc:  # noqa: BLE001 (every error becomes one line, the traceback on request)
        if debug:
            raise
        print(f"error: {describe(exc)}", file=sys.stderr)
        print("(run with --debug or LMPIPE_DEBUG=1 for the traceback)", file=sys.stderr)
        return 1
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)

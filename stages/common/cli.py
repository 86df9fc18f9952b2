"""What the stages' command lines share: argument types, the input/output overlap check and the entry point
that turns an error into one line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
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


def describe(exc: BaseException) -> str:
    """One line for an error a user can act on: an OS error as ``<what>: <path>`` (the file it names), any
    other as its type and message."""
    if isinstance(exc, OSError) and exc.filename is not None:
        what = (exc.strerror or type(exc).__name__).lower()
        paths = f"{exc.filename}" + (f" -> {exc.filename2}" if exc.filename2 is not None else "")
        return f"{what}: {paths}"
    message = str(exc)
    if isinstance(exc, (ValueError, FileNotFoundError, OSError)) and message:
        return message
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def entry(main: Callable[[], int]) -> int:
    """Run a stage's ``main`` as its ``__main__`` does: an error ends it with ``error: ...`` on stderr (the file,
    line or field it names) and exit status 1, without a traceback unless ``--debug`` is on the command line or
    ``LMPIPE_DEBUG=1`` is set; Ctrl-C exits with 130."""
    debug = os.environ.get("LMPIPE_DEBUG", "") not in ("", "0")
    if "--debug" in sys.argv[1:]:
        sys.argv.remove("--debug")
        debug = True
    if Path("dvc.yaml").is_file():  # a workspace: what killed runs left behind goes first
        from stages.common.atomic import sweep_dead

        for p in sweep_dead(["data", "reports", "dist"]):
            print(f"removed {p}: left by a run that was killed", file=sys.stderr)
    try:
        return main()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 (every error becomes one line, the traceback on request)
        if debug:
            raise
        print(f"error: {describe(exc)}", file=sys.stderr)
        print("(run with --debug or LMPIPE_DEBUG=1 for the traceback)", file=sys.stderr)
        return 1

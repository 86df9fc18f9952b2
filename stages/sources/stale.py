"""Local source files that changed since they were ingested.

DVC cannot list a user's own files as dependencies (``dvc.yaml`` deps take no list from params), so the run
entry points (``make run``, ``lm-pipeline run``, the Prefect flow, profile runs) call :func:`stale_corpora`
before ``dvc repro``: a ``files`` source whose files now hash otherwise, or whose path now matches other files,
than the ingest manifest recorded makes its ``ingest@<corpus>`` stage run again (``--force``); what follows
re-runs only if the ingested corpus changed.

    python -m stages.sources.stale            # the stale ingest stages and why, one line each
    python -m stages.sources.stale --repro    # ... and ingest them again
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from stages.common.hashing import sha256_file
from stages.sources.base import SourceError

CORPORA = ("general", "domain", "task")  # the ingest stages of dvc.yaml


def _resolve(recorded: str, root: Path) -> Path:
    path = Path(os.path.expanduser(recorded))
    return path if path.is_absolute() else root / path


def _recorded(root: Path, corpus: str) -> dict[str, str] | None:
    """The local files the last ingest of ``corpus`` read, path -> SHA-256; None: not ingested yet."""
    try:
        manifest = json.loads((root / "data" / "ingested" / corpus / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return {f["path"]: f["sha256"] for s in manifest.get("sources", []) if s.get("kind") == "files"
            for f in s.get("files", [])}


def _current(root: Path, params: Path, corpus: str) -> dict[str, Path]:
    """The local files ``corpus``'s files sources name now, as the manifest writes their paths."""
    from stages.sources.config import load_config
    from stages.sources.files import list_files
    from stages.sources.ingest import portable_path

    cfg = load_config(params, corpus)
    here = Path.cwd()
    try:
        os.chdir(root)  # params name paths relative to the workspace, as ingest reads them
        return {portable_path(p): root / p for s in cfg.sources if s.kind == "files" for p, _ in list_files(s)}
    finally:
        os.chdir(here)


def why_stale(root: Path, params: Path, corpus: str) -> str | None:
    """Why ``ingest@<corpus>`` must run again though DVC sees no change, or None."""
    recorded = _recorded(root, corpus)
    if recorded is None:
        return None  # never ingested: dvc repro runs it anyway
    try:
        current = _current(root, params, corpus)
    except SourceError as exc:
        return f"its source no longer reads ({exc})"
    if not current and not recorded:
        return None
    for path in sorted(set(recorded) - set(current)):
        if not _resolve(path, root).is_file():
            return f"{path} is gone"
    for path in sorted(current):
        if path not in recorded:
            return f"{path} is new to its source"
        if sha256_file(current[path]) != recorded[path]:
            return f"{path} changed since it was ingested"
    if set(recorded) - set(current):
        return f"{sorted(set(recorded) - set(current))[0]} is no longer one of its source's files"
    return None


def stale_corpora(root: Path = Path("."), params: Path | None = None) -> dict[str, str]:
    """``{corpus: reason}`` for every corpus whose local source files differ from its last ingest."""
    root = Path(root)
    params = params or root / "params.yaml"
    out = {}
    for corpus in CORPORA:
        if (reason := why_stale(root, params, corpus)) is not None:
            out[corpus] = reason
    return out


def reingest(root: Path, dvc: str = "dvc", env: dict | None = None, log=print) -> int:
    """``dvc repro --force --single-item ingest@<corpus>`` for each stale corpus; the first failing exit code."""
    for corpus, reason in stale_corpora(root).items():
        log(f"[sources] ingest@{corpus}: {reason}; ingesting it again")
        code = subprocess.call([dvc, "repro", "--force", "--single-item", f"ingest@{corpus}"], cwd=root, env=env)
        if code:
            return code
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m stages.sources.stale", description=__doc__.split("\n\n")[0])
    ap.add_argument("--repro", action="store_true", help="ingest the stale corpora again")
    args = ap.parse_args(argv)
    if args.repro:
        return reingest(Path("."), log=lambda line: print(line, file=sys.stderr, flush=True))
    for corpus, reason in stale_corpora(Path(".")).items():
        print(f"ingest@{corpus}: {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

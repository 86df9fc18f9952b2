"""The ``sources@<corpus>`` stage: the local files a corpus's sources name now, each with its SHA-256.

DVC takes no list of dependencies from params, so this stage (``always_changed`` in dvc.yaml) lists what the
corpus's ``files`` sources match and what a ``hf`` source's saved folder holds, in ``data/sources/<corpus>.json``;
``ingest@<corpus>`` depends on that listing. An edited file, a new match of a glob or a removed file changes the
listing, so a plain ``dvc repro`` ingests the corpus again (and what follows re-runs only if the ingested corpus
changed); an unchanged listing leaves ingest as it was. A file whose size and modification time match the last
listing keeps its recorded SHA-256 (a stat cache under ``--cache-dir``, as DVC keeps for its own dependencies).

    python -m stages.sources.watch --corpus general --params params.yaml --output data/sources/general.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stages.common.atomic import write_json_atomic
from stages.common.cli import Stage, entry
from stages.common.hashing import sha256_file
from stages.config import ConfigError
from stages.sources import SourceError
from stages.sources.config import load_config
from stages.sources.files import list_files
from stages.sources.ingest import portable_path


def _saved_folder(src) -> list[Path]:
    """The files of an ``hf`` source's ``save_to_disk`` folder (none for a hub dataset: pin its revision)."""
    if src.path is None:
        return []
    folder = Path(src.path)
    if not folder.is_dir():
        raise SourceError(f"{folder}: no such folder (a save_to_disk copy)")
    return sorted(p for p in folder.rglob("*") if p.is_file())


# The source kinds that read local files, and how to list them; the others are pinned in pins.yaml.
LOCAL_FILES: dict[str, Callable[[Any], list[Path]]] = {
    "files": lambda src: [p for p, _ in list_files(src)],
    "hf": _saved_folder,
}


def local_files(cfg) -> list[tuple[int, Path]]:
    """(source index, file) for every local file the corpus's sources read, in source order."""
    return [(i, p) for i, src in enumerate(cfg.sources) for p in LOCAL_FILES.get(src.kind, lambda _: [])(src)]


class StatCache:
    """SHA-256 by (path, size, mtime): a file that did not change on disk is not read again."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.entries = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.entries = {}
        self.seen: dict[str, list] = {}

    def sha256(self, file: Path) -> str:
        key = os.path.abspath(file)
        st = file.stat()
        known = self.entries.get(key)
        if not (isinstance(known, list) and known[:2] == [st.st_size, st.st_mtime_ns]):
            known = [st.st_size, st.st_mtime_ns, sha256_file(file)]
        self.seen[key] = known
        return known[2]

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path, self.seen)


def changes(before: dict[str, str], now: dict[str, str]) -> list[str]:
    """What differs between two listings (path -> SHA-256), one phrase each."""
    return ([f"{p} is new" for p in now if p not in before] + [f"{p} is gone" for p in before if p not in now]
            + [f"{p} changed" for p in now if p in before and before[p] != now[p]])


def _arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--corpus", required=True, help="section name under ingest: in params (general, domain, task)")
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--cache-dir", type=Path, default=Path(".cache/sources"), help="where the stat cache lives")
    ap.add_argument("--output", type=Path, required=True, help="the listing (JSON; ingest@<corpus> depends on it)")


def _run(args: argparse.Namespace, log) -> dict:
    cfg = load_config(args.params, args.corpus)
    cache = StatCache(args.cache_dir / "watch" / f"{args.corpus}.json")
    files = [{"source": i, "path": portable_path(str(p)), "sha256": cache.sha256(p)} for i, p in local_files(cfg)]
    cache.save()
    try:
        before = {f["path"]: f["sha256"] for f in json.loads(args.output.read_text(encoding="utf-8"))["files"]}
    except (OSError, ValueError, KeyError, TypeError):
        before = None
    now = {f["path"]: f["sha256"] for f in files}
    if before is not None and (said := changes(before, now)):
        shown = "; ".join(said[:5]) + (f"; and {len(said) - 5} more" if len(said) > 5 else "")
        log(f"[sources] {args.corpus}: {shown}: ingest@{args.corpus} runs again")
    elif files:
        log(f"[sources] {args.corpus}: {len(files)} local file(s)" + (", unchanged" if before is not None else ""))
    return {args.output: {"corpus": args.corpus, "files": files}}


STAGE = Stage("stages.sources.watch", __doc__.split("\n\n")[0], _arguments, _run, inputs=("params",),
              outputs=("output",), errors=(ConfigError, SourceError, ValueError))
main = STAGE.main


if __name__ == "__main__":
    sys.exit(entry(main))

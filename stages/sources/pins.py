"""pins.yaml, the lockfile of the remote sources: per corpus, what each source fetched (params order; null for a
local one). Ingest refuses an upstream that no longer serves the pinned bytes; ``lm-pipeline pin NAME`` re-pins."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from stages.common.atomic import write_bytes_atomic
from stages.common.pin import describe  # noqa: F401 (re-exported: names a pinned state in errors)
from stages.sources.base import SourceError

PINS = Path("pins.yaml")
REMOTE_KINDS = ("debian_docs", "debian_descriptions", "npm_spamassassin", "npm_brown")
HEADER = ("# What each remote source fetched, per corpus and source (params order); ingest checks it on every run.\n"
          "# base-<name>: every file of a published checkpoint (params published.bases); the base stage checks it.\n"
          "# Accept an upstream's new state with: lm-pipeline pin CORPUS (or base-<name>) (docs/reproducibility.md#pinned-sources)\n")


def load(path: Path = PINS) -> dict[str, list[dict[str, Any] | None]]:
    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise SourceError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        raise SourceError(f"{path}: expected a mapping of corpus -> list of pins")
    return data


def pin_for(pins: dict, corpus: str, index: int, kind: str, path: Path = PINS) -> dict[str, Any] | None:
    """The pin of source ``index`` of ``corpus``; none for a remote source, or another kind's, is an error. A local
    source needs none: a pin left there by a remote source it replaced is not its own, and is ignored."""
    if kind not in REMOTE_KINDS:
        return None
    entries = pins.get(corpus) or []
    pin = entries[index] if index < len(entries) else None
    where = f"ingest.{corpus}.sources[{index}] ({kind})"
    if kind in REMOTE_KINDS and pin is None:
        raise SourceError(f"{where}: not pinned in {path}; run `lm-pipeline pin {corpus}` to fetch it and record "
                          "what it got")
    if pin is not None and pin.get("kind") != kind:
        raise SourceError(f"{where}: {path} pins a {pin.get('kind')} source there (the sources changed); run "
                          f"`lm-pipeline pin {corpus}`")
    return pin


def write(corpus: str, entries: list[dict[str, Any] | None], path: Path = PINS) -> None:
    """Replace ``corpus``'s entries, keeping the other corpora's, atomically."""
    pins = load(path)
    pins[corpus] = entries
    write_bytes_atomic(path, (HEADER + yaml.safe_dump(dict(sorted(pins.items())), sort_keys=False, width=120)).encode())


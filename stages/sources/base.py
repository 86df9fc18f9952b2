"""What every source shares: the error type, the run context, and the provenance it records."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from stages.common.documents import Record
from stages.common.hashing import sha256_file  # noqa: F401 (re-exported: the sources' checksum)


class SourceError(RuntimeError):
    """Bad or unreachable input. The message is one line naming the file and line, or the package."""


OFFLINE_ENV = "LMPIPE_OFFLINE"


def offline() -> bool:
    """True when the user asked for no network use at all (``LMPIPE_OFFLINE=1``): cache misses fail fast."""
    return os.environ.get(OFFLINE_ENV, "").strip().lower() in {"1", "true", "yes"}


@dataclass(frozen=True, kw_only=True)
class FieldsSource:
    """The fields (columns) of a file's or a dataset's rows that a record's parts are read from."""

    kind: str
    text_field: str = "text"
    """Field (column) holding the text."""
    url_field: str | None = "url"
    """Field holding the URL; null = none."""
    label_field: str | None = None
    """Field holding the label (labeled corpora; a ClassLabel's ints are written as its names); null = none."""
    group_field: str | None = None
    """Field holding the split group; null = none (each text is its own group). Other fields go into `meta`."""

    def record(self, row: dict[str, Any], text: str, label: Any, name: str) -> Record:
        """``row`` as a Record: URL, label and group from their fields, the other fields as ``meta``."""
        url = row.get(self.url_field) if self.url_field else None
        group = row.get(self.group_field) if self.group_field else None
        used = {self.text_field, self.url_field, self.label_field, self.group_field}
        return Record(text=text, source=str(row.get("source") or name), url=None if url in (None, "") else str(url),
                      meta={k: v for k, v in row.items() if k not in used}, label=None if label is None else str(label),
                      group=None if group is None else str(group))


@dataclass
class Provenance:
    """Where one source's records came from, filled in by the reader; one entry of the ingest manifest."""

    kind: str
    description: str = ""
    licence: str = ""
    packages: list[dict[str, Any]] = field(default_factory=list)
    files: list[dict[str, Any]] = field(default_factory=list)
    records: int = 0
    skipped: Counter = field(default_factory=Counter)
    extra: dict[str, Any] = field(default_factory=dict)

    def add_file(self, path: str | Path, *, role: str = "input", sha256: str | None = None, **info: Any) -> str:
        """Record a file with its SHA-256 (computed unless given) and size; returns the digest."""
        p = Path(path)
        digest = sha256 or sha256_file(p)
        self.files.append({"path": str(p), "role": role, "sha256": digest, "bytes": p.stat().st_size, **info})
        return digest

    def skip(self, reason: str) -> None:
        self.skipped[reason] += 1

    def to_json(self) -> dict[str, Any]:
        """The manifest entry: the fields (``skipped`` sorted), ``extra``'s keys at the top level."""
        plain = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("skipped", "extra")}
        return {**plain, "skipped": dict(sorted(self.skipped.items())), **self.extra}


@dataclass(frozen=True, kw_only=True)
class SourceContext:
    """Run-time facts a reader needs besides its config: where downloads are cached."""

    cache_dir: Path
    corpus: str = ""
    """The corpus being ingested (names it in errors)."""
    pins: dict[str, list] | None = None
    """pins.yaml's entries, checked source by source; None while `--pin` makes them."""
    pin: dict[str, Any] | None = None
    """This source's pin: what it must fetch (None: unpinned, a local source or the pin is being made)."""

    def subdir(self, *parts: str) -> Path:
        d = self.cache_dir.joinpath(*parts)
        d.mkdir(parents=True, exist_ok=True)
        return d

"""The document contract shared by every stage (docs/stages.md, "The data contract"): Parquet rows with ``id``
(content hash), ``text``, ``source``, ``url`` (nullable) and ``meta`` (JSON); labeled ones add ``label``, ``split``."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

DOCUMENT_COLUMNS = ("id", "text", "source", "url", "meta")
LABELED_COLUMNS = DOCUMENT_COLUMNS + ("label", "split")


def doc_id(text: str) -> str:
    """Stable content hash of a document: the first 128 bits of SHA-256 of its UTF-8 text, as hex."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


@dataclass(frozen=True, kw_only=True)
class Record:
    """One document as a source yields it; ``group`` is what labeled splits go by (e.g. the Debian source package)."""

    text: str
    source: str
    url: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    label: str | None = None
    group: str | None = None


def meta_json(meta: dict[str, Any]) -> str:
    """Serialise ``meta`` deterministically (sorted keys) so identical input gives identical bytes."""
    return json.dumps(meta, sort_keys=True, ensure_ascii=False, default=str)


def is_json_text(value: Any) -> bool:
    """True when ``value`` is a string holding valid JSON (the contract for ``meta``)."""
    if not isinstance(value, str):
        return False
    try:
        json.loads(value)
    except ValueError:
        return False
    return True


def arrow_schema(labeled: bool):
    """The Arrow schema of the documents Parquet file (pyarrow imported lazily)."""
    import pyarrow as pa

    return pa.schema([pa.field(c, pa.string(), nullable=c == "url")
                      for c in (LABELED_COLUMNS if labeled else DOCUMENT_COLUMNS)])


def open_parquet(path):
    """``pyarrow.parquet.ParquetFile(path)``; a file that is not Parquet, or is cut short, a ValueError naming it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        raise
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(f"{path}: not a readable Parquet file ({exc})") from None


def read_parquet_columns(path, columns: list[str]):
    """The named columns of a Parquet file as a DataFrame; a ValueError names a non-Parquet file or a missing column."""
    pf = open_parquet(path)
    missing = [c for c in columns if c not in pf.schema_arrow.names]
    if missing:
        raise ValueError(f"{path}: no column {missing[0]!r} (columns: {', '.join(pf.schema_arrow.names)})")
    return pf.read(columns=columns).to_pandas()

"""The clean stage's files: the input readers (Parquet, JSONL and its compressed forms) and the drop table and timing
log made from a cleaning result."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stages.cleaning.pipeline import CleanResult
from stages.common.documents import open_parquet
from stages.sources.files import _open_binary


def read_records(path: Path, drops) -> Iterator[dict[str, Any]]:
    """Documents from a Parquet or JSONL(.gz/.zst) file, or a folder of them (sorted). Undecodable or
    non-object lines are counted in ``drops`` and skipped: cleaning never crashes on junk input. A line with
    invalid UTF-8 is kept, each bad byte sequence replaced by U+FFFD, and counted under ``REPAIRED_UTF8``."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or folder")
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        name = f.name.lower()
        if name.endswith(".parquet"):
            pf = open_parquet(f)
            if "text" not in pf.schema_arrow.names:
                raise ValueError(f"{f}: no 'text' column (columns: {', '.join(pf.schema_arrow.names)})")
            cols = [c for c in ("id", "text", "source", "url", "meta", "timestamp") if c in pf.schema_arrow.names]
            for batch in pf.iter_batches(batch_size=2048, columns=cols):
                yield from batch.to_pylist()
        elif name.endswith((".jsonl", ".jsonl.gz", ".jsonl.zst", ".json.gz", ".ndjson")):
            try:
                yield from _jsonl(f, drops)
            except (OSError, EOFError) as exc:  # truncated or not-really-gzip input
                raise ValueError(f"{f}: cannot read compressed stream ({exc})") from None
            except Exception as exc:
                if type(exc).__name__ == "ZstdError":
                    raise ValueError(f"{f}: cannot read zstd stream ({exc})") from None
                raise
        elif not path.is_dir():
            raise ValueError(f"{f}: expected .parquet or .jsonl[.gz|.zst]")


REPAIRED_UTF8 = "invalid_utf8_replaced"  # a count in ``drops`` of records kept, not dropped


def _jsonl(path: Path, drops) -> Iterator[dict[str, Any]]:
    with _open_binary(path) as fh:
        for raw in fh:
            if not raw.strip():
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:  # kept, with U+FFFD for each bad byte sequence, and counted
                line = raw.decode("utf-8", "replace")
                drops[REPAIRED_UTF8] += 1
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                drops["invalid_json"] += 1
                continue
            if not isinstance(obj, dict):
                drops["invalid_record"] += 1
                continue
            obj.setdefault("source", path.name)
            yield obj


def drops_csv(result: CleanResult) -> str:
    """One row per filter: documents and lines it dropped (the DVC bar plot of drops by filter)."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(
        [["filter", "documents_dropped", "lines_dropped", "characters_removed"],
         *([name, sum(st.dropped.values()), sum(st.lines_dropped.values()), st.chars_in - st.chars_out]
           for name, st in result.filters.items())])
    return buf.getvalue()


def timing_table(result: CleanResult) -> str:
    mb = result.bytes_in / 1e6
    lines = [f"[clean] {result.docs_in} documents in, {result.docs_out} kept; {mb:.1f} MB in "
             f"{result.seconds:.1f}s ({mb / result.seconds if result.seconds else 0:.2f} MB/s wall)"]
    lines += [f"[clean]   {name:<18} in {st.docs_in:>8} out {st.docs_out:>8}  cpu {st.seconds:7.2f}s"
              for name, st in result.filters.items()]
    lines.append("[clean]   phases: " + ", ".join(f"{k} {v:.1f}s" for k, v in result.phase_seconds.items()))
    return "\n".join(lines)

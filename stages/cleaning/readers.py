"""The clean stage's input: a Parquet or JSONL (.gz, .zst) file or a folder of them, cut into pieces each worker
reads (Parquet row groups, byte ranges of an uncompressed JSONL file), and the records of a piece. Junk lines are
counted and skipped, never fatal; a truncated or corrupt compressed stream fails naming the file."""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import zstandard

from stages.common.documents import open_parquet

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".json.gz", ".ndjson")
SPLIT_BYTES = 64 << 20  # an uncompressed JSONL file is read by several workers, in byte ranges of this size


@dataclass(frozen=True)
class Piece:
    """A part of the input one worker reads: row groups of a Parquet file, or the lines of a JSONL file that start
    in the byte range [start, end) (a compressed file is one piece). Sent to the workers, ``path`` is the name of
    the file's copy when the scratch is a URL."""

    path: Path
    row_groups: tuple[int, ...] | None = None
    start: int = 0
    end: int | None = None


def plan_pieces(path: Path, rows: int, split_bytes: int | None = None) -> list[Piece]:
    """The input (a Parquet or JSONL(.gz/.zst) file, or a folder of them, sorted) cut into pieces of about
    ``rows`` records (Parquet, whole row groups) or ``split_bytes`` bytes (uncompressed JSONL), in input order.
    Only Parquet footers are read here; a file that is not Parquet fails now, naming it."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or folder")
    split_bytes = split_bytes or SPLIT_BYTES
    pieces: list[Piece] = []
    for f in sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]:
        name = f.name.lower()
        if name.endswith(".parquet"):
            pf = open_parquet(f)
            if "text" not in pf.schema_arrow.names:
                raise ValueError(f"{f}: no 'text' column (columns: {', '.join(pf.schema_arrow.names)})")
            group: list[int] = []
            count = 0
            for g in range(pf.metadata.num_row_groups):
                group.append(g)
                count += pf.metadata.row_group(g).num_rows
                if count >= rows:
                    pieces.append(Piece(f, tuple(group)))
                    group, count = [], 0
            if group:
                pieces.append(Piece(f, tuple(group)))
        elif name.endswith(JSONL_SUFFIXES):
            size = f.stat().st_size
            if name.endswith((".jsonl", ".ndjson")) and size > split_bytes:
                pieces += [Piece(f, None, lo, min(lo + split_bytes, size)) for lo in range(0, size, split_bytes)]
            else:
                pieces.append(Piece(f))
        elif not path.is_dir():
            raise ValueError(f"{f}: expected .parquet or .jsonl[.gz|.zst]")
    return pieces


def _open(path: Path) -> BinaryIO:
    return open(path, "rb")


def piece_records(piece: Piece, drops: Counter, opener: Callable[[Path], BinaryIO] = _open
                  ) -> Iterator[dict[str, Any]]:
    """The records of one piece (its file opened with ``opener``). Undecodable or non-object lines are counted in
    ``drops`` and skipped: cleaning never crashes on junk input. A line with invalid UTF-8 is kept, each bad byte
    sequence replaced by U+FFFD, and counted under ``REPAIRED_UTF8``."""
    f = piece.path
    if piece.row_groups is not None:
        with ExitStack() as stack:  # a local file is read by Arrow itself
            pf = open_parquet(f if opener is _open else stack.enter_context(opener(f)))
            cols = [c for c in ("id", "text", "source", "url", "meta", "timestamp") if c in pf.schema_arrow.names]
            for batch in pf.iter_batches(batch_size=2048, columns=cols, row_groups=list(piece.row_groups)):
                yield from batch.to_pylist()
        return
    try:
        yield from _jsonl(piece, drops, opener)
    except (OSError, EOFError) as exc:  # truncated or not-really-gzip input
        raise ValueError(f"{f}: cannot read compressed stream ({exc})") from None
    except zstandard.ZstdError as exc:
        raise ValueError(f"{f}: cannot read zstd stream ({exc})") from None


REPAIRED_UTF8 = "invalid_utf8_replaced"  # a count in ``drops`` of records kept, not dropped


def piece_lines(piece: Piece, opener: Callable[[Path], BinaryIO] = _open) -> Iterator[bytes]:
    if piece.end is None:
        with opener(piece.path) as raw, _decompressed(raw, piece.path.name) as fh:
            yield from fh
        return
    with opener(piece.path) as fh:  # the lines whose first byte lies in [start, end)
        if piece.start:
            fh.seek(piece.start - 1)
            fh.readline()  # the end of the line the previous range owns (or the newline just before start)
        while fh.tell() < piece.end:
            raw = fh.readline()
            if not raw:
                return
            yield raw


def _decompressed(fh: BinaryIO, name: str) -> BinaryIO:
    name = name.lower()
    if name.endswith(".gz"):
        import gzip

        return gzip.GzipFile(fileobj=fh, mode="rb")  # type: ignore[return-value]
    if name.endswith(".zst"):
        import zstandard

        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(fh, closefd=True))
    return fh


def _jsonl(piece: Piece, drops, opener: Callable[[Path], BinaryIO] = _open) -> Iterator[dict[str, Any]]:
    for raw in piece_lines(piece, opener):
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
        obj.setdefault("source", piece.path.name)
        yield obj

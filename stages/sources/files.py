"""Local files: JSONL (plain, .gz, .zst), Parquet, a folder of .txt, Common Crawl WET (.warc.wet.gz). Bad input
raises :class:`SourceError` naming file and line, unless ``on_error: skip`` (then counted in the manifest)."""

from __future__ import annotations

import contextlib
import glob
import gzip
import io
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import zstandard

from stages.common.documents import Record
from stages.sources.base import FieldsSource, Provenance, SourceError

FORMATS = ("jsonl", "parquet", "txt", "wet")
_SUFFIXES = {
    ".jsonl": "jsonl", ".jsonl.gz": "jsonl", ".jsonl.zst": "jsonl", ".json.gz": "jsonl", ".ndjson": "jsonl",
    ".parquet": "parquet", ".txt": "txt", ".warc.wet.gz": "wet", ".warc.wet": "wet", ".wet.gz": "wet",
}


@dataclass(frozen=True, kw_only=True)
class FilesSource(FieldsSource):
    """Documents from local files: JSONL (plain, .gz, .zst), Parquet, a folder of .txt, Common Crawl WET."""

    kind: Literal["files"]
    """`files` selects this source."""
    path: str
    """A file, a folder (read recursively, in sorted order) or a glob pattern."""
    format: Literal["auto", "jsonl", "parquet", "txt", "wet"] = "auto"
    """File format; `auto` picks by suffix: .jsonl (also .gz, .zst), .parquet, .txt, .warc.wet (also .gz)."""
    name: str | None = None
    """The `source` value written for these documents; null = the path's file or folder name."""
    on_error: Literal["fail", "skip"] = "fail"
    """`fail`: stop at the first bad record, naming file and line; `skip`: drop it, counted by reason in the
    manifest."""
    licence: str = "as declared by the data owner"
    """Free-text licence note copied into the manifest."""


def detect_format(path: Path) -> str | None:
    name = path.name.lower()
    return next((_SUFFIXES[s] for s in sorted(_SUFFIXES, key=len, reverse=True) if name.endswith(s)), None)


def list_files(cfg: FilesSource) -> list[tuple[Path, str]]:
    """Resolve ``cfg.path`` to (file, format) pairs in a deterministic order."""
    raw = cfg.path
    if any(ch in raw for ch in "*?["):
        paths = [Path(p) for p in sorted(glob.glob(raw, recursive=True)) if not Path(p).is_dir()]
        if not paths:
            raise SourceError(f"{raw}: glob matched no files")
    else:
        root = Path(raw)
        if not root.exists():
            raise SourceError(f"{root}: no such file or folder")
        paths = sorted(p for p in root.rglob("*") if not p.is_dir()) if root.is_dir() else [root]
    special = [str(p) for p in paths if not p.is_file()]  # a FIFO or device (or a link to one) would block or never end
    if special:
        raise SourceError(f"{', '.join(special[:5])}: not a regular file (a FIFO, device, socket or broken link); "
                          "a files source reads regular files only")
    out = []
    for p in paths:
        fmt = cfg.format if cfg.format != "auto" else detect_format(p)
        if fmt is None:
            if len(paths) == 1:
                raise SourceError(f"{p}: cannot tell the format from the name; set format to one of {FORMATS}")
            continue  # a folder may hold README files etc.; only known suffixes are read
        out.append((p, fmt))
    if not out:
        raise SourceError(f"{raw}: no readable files (known suffixes: {', '.join(sorted(_SUFFIXES))})")
    return out


def read_files(cfg: FilesSource, prov: Provenance) -> Iterator[Record]:
    """Yield records from every file of ``cfg`` and record each file's checksum in ``prov``."""
    prov.description = f"local files {cfg.path}"
    prov.licence = cfg.licence
    name = cfg.name or Path(cfg.path.rstrip("/*")).name or "files"
    for path, fmt in list_files(cfg):
        prov.add_file(path, format=fmt)
        if path.stat().st_size == 0:
            _bad(cfg, prov, f"{path}: file is empty", "empty_file")
            continue
        reader = {"jsonl": _read_jsonl, "parquet": _read_parquet, "txt": _read_txt, "wet": _read_wet}[fmt]
        yield from reader(cfg, path, name, prov)


def _bad(cfg: FilesSource, prov: Provenance, message: str, reason: str) -> None:
    """Raise ``message`` (``on_error: fail``) or count ``reason`` as skipped."""
    if cfg.on_error == "fail":
        raise SourceError(message)
    prov.skip(reason)


def _open_binary(path: Path) -> io.BufferedIOBase:
    name = path.name.lower()
    if name.endswith(".gz"):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    if name.endswith(".zst"):
        import zstandard

        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), closefd=True))
    return open(path, "rb")


def _record(cfg: FilesSource, prov: Provenance, obj: dict[str, Any], where: str, name: str) -> Record | None:
    """One JSON/Parquet record as a Record; None (after :func:`_bad`) when its fields do not make one."""
    if cfg.text_field not in obj:
        return _bad(cfg, prov, f"{where}: missing field {cfg.text_field!r}", "bad_field")
    text = obj[cfg.text_field]
    if not isinstance(text, str):
        return _bad(cfg, prov, f"{where}: field {cfg.text_field!r} is {type(text).__name__}, expected a string",
                    "bad_field")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:  # e.g. a JSON "\ud800" escape: not representable in UTF-8
        return _bad(cfg, prov, f"{where}: field {cfg.text_field!r} has an unpaired surrogate at character "
                    f"{exc.start}", "bad_field")
    label = obj.get(cfg.label_field) if cfg.label_field else None
    if cfg.label_field and (label is None or label == ""):
        return _bad(cfg, prov, f"{where}: missing label field {cfg.label_field!r}", "bad_field")
    return cfg.record(obj, text, label, name)


def _json_object(cfg: FilesSource, prov: Provenance, raw: bytes, where: str) -> dict[str, Any] | None:
    """One JSONL line's object; None (after :func:`_bad`) for a line that is not UTF-8 JSON of an object."""
    try:
        obj = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return _bad(cfg, prov, f"{where}: invalid UTF-8 at byte {exc.start} of the line", "invalid_utf8")
    except json.JSONDecodeError as exc:
        return _bad(cfg, prov, f"{where}: invalid JSON ({exc.msg} at column {exc.colno})", "invalid_json")
    if not isinstance(obj, dict):
        return _bad(cfg, prov, f"{where}: expected a JSON object, got {type(obj).__name__}", "not_an_object")
    return obj


def _read_jsonl(cfg: FilesSource, path: Path, name: str, prov: Provenance) -> Iterator[Record]:
    try:
        with _open_binary(path) as fh:
            for lineno, raw in enumerate(fh, 1):
                where = f"{path}:{lineno}"
                if raw.strip() and (obj := _json_object(cfg, prov, raw, where)) is not None:
                    if (rec := _record(cfg, prov, obj, where, name)) is not None:
                        yield rec
    except (OSError, EOFError, zlib.error) as exc:
        raise SourceError(f"{path}: cannot read compressed stream ({exc})") from None
    except zstandard.ZstdError as exc:
        raise SourceError(f"{path}: cannot read zstd stream ({exc})") from None


def printable(text: str, limit: int = 160) -> str:
    """``text`` safe to print in an error: non-printable-ASCII escaped, cut to ``limit`` characters."""
    out = "".join(c if " " <= c <= "~" else (f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}")
                  for c in text[: limit * 4])
    return out if len(out) <= limit else out[:limit] + "..."


def _read_parquet(cfg: FilesSource, path: Path, name: str, prov: Provenance) -> Iterator[Record]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:
        raise SourceError(f"{path}: not a readable Parquet file ({exc})") from None
    if cfg.text_field not in pf.schema_arrow.names:
        raise SourceError(f"{path}: no column {cfg.text_field!r} (columns: {', '.join(pf.schema_arrow.names)})")
    for row, obj in enumerate(_parquet_rows(pf, path), 1):
        if (rec := _record(cfg, prov, obj, f"{path}: row {row}", name)) is None:
            continue
        if "meta" in rec.meta and isinstance(rec.meta["meta"], str):
            # A file already in our schema: keep its meta JSON as the meta, not nested under "meta".
            with contextlib.suppress(json.JSONDecodeError):
                inner = json.loads(rec.meta.pop("meta"))
                rec.meta.update(inner if isinstance(inner, dict) else {"meta": inner})
        rec.meta.pop("id", None)  # ids are content hashes, recomputed downstream
        yield rec


def _parquet_rows(pf, path: Path) -> Iterator[dict]:
    """The file's rows; a page that cannot be read (corrupt, truncated) is a SourceError naming the file and the
    rows read before it."""
    import pyarrow as pa

    done = 0
    batches = pf.iter_batches(batch_size=4096)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except (OSError, pa.ArrowException) as exc:
            raise SourceError(f"{path}: not a readable Parquet file after row {done:,} ({exc})") from None
        done += batch.num_rows
        yield from batch.to_pylist()


def _read_txt(cfg: FilesSource, path: Path, name: str, prov: Provenance) -> Iterator[Record]:
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        _bad(cfg, prov, f"{path}:{line}: invalid UTF-8 at byte {exc.start}", "invalid_utf8")
        return
    yield Record(text=text, source=name, url=None, meta={"path": str(path)})


def _read_wet(cfg: FilesSource, path: Path, name: str, prov: Provenance) -> Iterator[Record]:
    from warcio.archiveiterator import ArchiveIterator

    n = 0
    try:
        with open(path, "rb") as fh:
            for rec in ArchiveIterator(fh):
                if rec.rec_type != "conversion":
                    continue
                n += 1
                headers = rec.rec_headers
                body = rec.content_stream().read()
                where = f"{path}: record {n} ({headers.get_header('WARC-Record-ID')})"
                try:
                    text = body.decode("utf-8")
                except UnicodeDecodeError as exc:
                    _bad(cfg, prov, f"{where}: invalid UTF-8 at byte {exc.start}", "invalid_utf8")
                    continue
                meta = {key: headers.get_header(f"WARC-{header}") for key, header in
                        (("warc_record_id", "Record-ID"), ("warc_date", "Date"), ("warc_refers_to", "Refers-To"))}
                yield Record(text=text, source=name, url=headers.get_header("WARC-Target-URI"), meta=meta)
    except SourceError:
        raise
    except Exception as exc:  # warcio raises ArchiveLoadFailed and friends on corrupt input
        raise SourceError(f"{path}: not a readable WARC/WET file ({type(exc).__name__}: {printable(str(exc))})"
                          ) from None
    if n == 0:  # warcio reads arbitrary bytes leniently as records of other types; WET means conversion
        raise SourceError(f"{path}: not a readable WARC/WET file (no 'conversion' records in it)")

"""Run the cleaning filters over a corpus read from Parquet or JSONL: sharded, parallel over processes or Dask,
memory bounded. Every step that touches text is a task over shards; the main process keeps only the decisions that
need the whole corpus, made from hashes, ids and counts. Phases (C4's order, then the extras):

0. workers read pieces of the input into shards; main: URL and exact-duplicate decisions (ids, digests of normalised URLs);
1. workers: page length, C4 line rules, line-hash pairs;
2. workers: the line-dedup table, one hash bucket each;
3. workers: line dedup, language, bad words, Gopher, MinHash bands, the gate's features, the task guard's
   findings; main: MinHash clusters, the guard's and TAPT's decisions;
4. workers write the published rows' parts (with the task's leak re-check); main joins their bytes in order.

Global decisions use only hashes and ids, so the result does not depend on the number of workers.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO

import zstandard

from stages.cleaning.base import Doc, Filter, FilterStats, meta_dict
from stages.cleaning.c4 import BadWordsFilter, C4LinesFilter, PageLengthFilter
from stages.cleaning.config import CleanerConfig
from stages.cleaning.dedup import (LineDedupFilter, band_hashes, duplicates, line_pairs, url_dedup_arrays, url_key,
                                   write_shard_pairs)
from stages.cleaning.gopher import GopherQualityFilter, GopherRepetitionFilter
from stages.cleaning.langid import is_english
from stages.cleaning.scratch import Files, Scratch
from stages.common.documents import arrow_schema, doc_id, open_parquet
from stages.common.shards import open_shards

SHARD_COLUMNS = ("id", "text", "source", "url", "meta", "timestamp", "raw_id")


@dataclass
class CleanResult:
    docs_in: int
    docs_out: int
    chars_in: int
    chars_out: int
    bytes_in: int
    filters: dict[str, FilterStats]
    rejects: list[dict[str, Any]]
    input_drops: Counter
    seconds: float
    phase_seconds: dict[str, float]
    word_lists: dict[str, Any] = field(default_factory=dict)
    gate_features: Any = None  # per-document features for the gate (pandas), computed by the workers
    duplicate_lines: int | None = None  # output lines that repeat another output line (independent count)
    task: dict[str, Any] | None = None  # the task guard's drops and the TAPT texts added (stages.cleaning.task_guard)
    input_repaired: Counter = field(default_factory=Counter)  # records kept after a repair (invalid UTF-8)
    task_leaks: Any = None  # the gate's re-check of the published file against the task (pandas, one row each)

    def stats_json(self) -> dict[str, Any]:
        """Counts only (no wall-clock time), so the same input and params give identical bytes."""
        return {"documents_in": self.docs_in, "documents_out": self.docs_out,
                "kept_fraction": round(self.docs_out / self.docs_in, 6) if self.docs_in else 0.0,
                "characters_in": self.chars_in, "characters_out": self.chars_out,
                "input_dropped": dict(sorted(self.input_drops.items())),
                "input_repaired": dict(sorted(self.input_repaired.items())),
                "filter_order": list(self.filters), "word_lists": self.word_lists,
                "filters": {name: {k: v for k, v in st.to_json().items() if k != "seconds"}
                            for name, st in self.filters.items()},
                **({"task": self.task} if self.task is not None else {})}

    def drops_csv(self) -> str:
        """One row per filter: documents and lines it dropped (the DVC bar plot of drops by filter)."""
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(
            [["filter", "documents_dropped", "lines_dropped", "characters_removed"],
             *([name, sum(st.dropped.values()), sum(st.lines_dropped.values()), st.chars_in - st.chars_out]
               for name, st in self.filters.items())])
        return buf.getvalue()

    def timing_table(self) -> str:
        """The live log's summary: documents, throughput and each filter's CPU time."""
        mb = self.bytes_in / 1e6
        lines = [f"[clean] {self.docs_in} documents in, {self.docs_out} kept; {mb:.1f} MB in "
                 f"{self.seconds:.1f}s ({mb / self.seconds if self.seconds else 0:.2f} MB/s wall)"]
        lines += [f"[clean]   {name:<18} in {st.docs_in:>8} out {st.docs_out:>8}  cpu {st.seconds:7.2f}s"
                  for name, st in self.filters.items()]
        lines.append("[clean]   phases: " + ", ".join(f"{k} {v:.1f}s" for k, v in self.phase_seconds.items()))
        return "\n".join(lines)


class LanguageFilter(Filter):
    name = "language"

    def apply(self, doc: Doc) -> str | None:
        keep, reason = is_english(doc.text, min_probability=self.cfg.min_probability, backend=self.cfg.backend)
        return None if keep else reason


JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".json.gz", ".ndjson")
SPLIT_BYTES = 64 << 20  # an uncompressed JSONL file is read by several workers, in byte ranges of this size
ROW_GROUP_ROWS = 2048  # rows per row group of the published documents.parquet


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


def _lines(piece: Piece, opener: Callable[[Path], BinaryIO] = _open) -> Iterator[bytes]:
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
    for raw in _lines(piece, opener):
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


def _read_shard(path: Path) -> list[Doc]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    cols = (*SHARD_COLUMNS, "seq")
    return [Doc(**dict(zip(cols, row))) for row in zip(*(table[c].to_pylist() for c in cols))]


def _write_shard(docs: list[Doc], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {c: pa.array([getattr(d, c) for d in docs], pa.string()) for c in SHARD_COLUMNS}
    pq.write_table(pa.table({**columns, "seq": pa.array([d.seq for d in docs], pa.int64())}), path,
                   compression="zstd")
    return path


def phase0(scratch: Scratch, piece: Piece | Iterable[dict[str, Any]], prefix: str, shard_docs: int,
           text_md5: bool) -> dict[str, Any]:
    """Read one piece of the input into shard files of at most ``shard_docs`` documents (their names: ``shards``);
    return what URL and exact-duplicate dedup need (ids, digests of normalised URLs, timestamps, with
    ``text_md5`` the texts' MD5 hex digests), the texts' lengths and UTF-8 bytes, and the records skipped by
    reason (a text that is not a string: ``invalid_text``)."""
    with scratch.files() as files:
        return _read_piece(files, piece, prefix, shard_docs, text_md5)


def _read_piece(files: Files, piece: Piece | Iterable[dict[str, Any]], prefix: str, shard_docs: int,
                text_md5: bool) -> dict[str, Any]:
    import numpy as np

    drops: Counter = Counter()
    out: dict[str, Any] = {"shards": [], "sizes": [], "ids": [], "urls": [], "stamps": [], "md5": [], "bytes": 0}
    lengths: list[int] = []
    batch: list[Doc] = []

    def flush() -> None:
        name = f"in-{prefix}-{len(out['shards']):05d}.parquet"
        _write_shard(batch, files.write(name))
        out["shards"].append(name)
        out["sizes"].append(len(batch))
        batch.clear()

    opener = (lambda path: files.open(str(path))) if files.scratch.url else _open
    for rec in piece_records(piece, drops, opener) if isinstance(piece, Piece) else piece:
        text = rec.get("text")
        if not isinstance(text, str):
            drops["invalid_text"] += 1
            continue
        text = text.encode("utf-8", "replace").decode("utf-8")  # lone surrogates cannot be written to Parquet
        # Key on the content hash; a user's id (not necessarily unique) is only carried in meta.raw_id.
        did = doc_id(text)
        raw_id = str(rec["id"]) if rec.get("id") not in (None, "") else did
        url = rec.get("url") if isinstance(rec.get("url"), str) and rec.get("url") else None
        meta = rec.get("meta") if isinstance(rec.get("meta"), str) else \
            json.dumps(rec.get("meta") or {}, sort_keys=True, default=str)
        ts = str(rec.get("timestamp") or meta_dict(meta).get("warc_date") or meta_dict(meta).get("timestamp") or "")
        batch.append(Doc(id=did, text=text, source=str(rec.get("source") or ""), url=url, meta=meta, timestamp=ts,
                         raw_id=raw_id, seq=len(lengths)))
        out["ids"].append(did)
        out["urls"].append(url_key(url) if url else b"")
        out["stamps"].append(ts)
        if text_md5:
            out["md5"].append(hashlib.md5(text.encode("utf-8")).hexdigest())
        lengths.append(len(text))
        out["bytes"] += len(text.encode("utf-8"))
        if len(batch) == shard_docs:
            flush()
    if batch:
        flush()
    out["lengths"] = np.array(lengths, dtype=np.int64)
    # Compact arrays (one buffer each) for the main process's URL and exact-duplicate decisions.
    out["ids"] = np.array(out["ids"], dtype="S32")
    out["urls"] = np.array(out["urls"], dtype="S16")
    out["stamps"] = np.array(out["stamps"], dtype=str)
    out["md5"] = np.array(out["md5"], dtype="S32")
    out["drops"] = drops
    return out


def phase1(scratch: Scratch, shard_in: str, shard_out: str, pairs_out: str, drop: frozenset[int],
           cfg: CleanerConfig, with_pairs: bool) -> dict:
    """Page length, the main process's URL-dedup decision, then C4's line rules (C4's order). Returns each
    filter's stats and rejects (``filters``) and where each line-dedup bucket starts in the pairs file
    (``bounds``). Like every task here it leaves its input alone (a later task deletes it), so a task run again
    after its worker died finds what it needs."""
    length, c4 = PageLengthFilter(cfg.c4, cfg.reject_samples), C4LinesFilter(cfg.c4, cfg.reject_samples)
    with scratch.files() as files:
        kept = [d for i, d in enumerate(_read_shard(files.read(shard_in))) if length(d) and i not in drop and c4(d)]
        _write_shard(kept, files.write(shard_out))
        bounds = write_shard_pairs([line_pairs(d) for d in kept], files.write(pairs_out), cfg.line_dedup.buckets) \
            if with_pairs else None
    return {"filters": {f.name: (f.stats, f.rejects) for f in (length, c4)}, "bounds": bounds}


@dataclass(frozen=True)
class GuardSpec:
    """What a phase-3 worker checks for the task guard and TAPT: the task file, its held-out splits, whether the
    guard is on, and whether TAPT is (then it reports which of the task's training texts the corpus holds)."""

    task: str  # its name in the scratch
    holdout_splits: tuple[str, ...]
    guard: bool
    tapt: bool


def phase3(scratch: Scratch, shard_in: str, shard_out: str, bands_out: str, table: tuple[str, ...] | None,
           words: list[str], cfg: CleanerConfig, feats_out: str, lines_out: str, english_rate: float,
           guard: GuardSpec | None = None, done: tuple[str, ...] = ()) -> dict:
    """Line dedup (``table``: the selection's file, or its buckets' files), language, bad words, Gopher; then the
    gate's per-document features and line hashes (and where each hash bucket starts in them, ``line_bounds``), and
    for each kept document its length, whether it has a URL, the task guard's reason to drop it (if any) and
    whether it is one of the task's training texts. ``done``: files of finished phases this task deletes (the
    scratch then holds about two copies of the corpus; a task run again finds them gone, which is fine)."""
    import numpy as np

    from stages.cleaning.features import document_features, write_line_hashes
    from stages.cleaning.task_guard import held_out, train_ids

    n = cfg.reject_samples
    with scratch.files() as files:
        filters = [make() for on, make in (
            (cfg.line_dedup.enabled and table is not None,
             lambda: LineDedupFilter(files.table(table), cfg.line_dedup, n)),
            (cfg.language.enabled, lambda: LanguageFilter(cfg.language, n)),
            (cfg.badwords.enabled, lambda: BadWordsFilter(words, n)),
            (cfg.gopher_quality.enabled, lambda: GopherQualityFilter(cfg.gopher_quality, n)),
            (cfg.gopher_repetition.enabled, lambda: GopherRepetitionFilter(cfg.gopher_repetition, n))) if on]
        kept = [d for d in _read_shard(files.read(shard_in)) if all(f(d) for f in filters)]  # all(): first drop
        _write_shard(kept, files.write(shard_out))
        feats = document_features(kept, cfg, english_rate=english_rate)
        feats.to_parquet(files.write(feats_out), index=False)
        line_bounds = write_line_hashes(kept, files.write(lines_out), cfg.line_dedup.buckets)
        if cfg.minhash.enabled:
            np.save(files.write(bands_out), np.stack([band_hashes(d.text, cfg.minhash) for d in kept]) if kept
                    else np.empty((0, cfg.minhash.bands), dtype=np.uint64))
        leaks: list[tuple[int, str]] = []
        tapt: list[tuple[int, str]] = []
        if guard is not None:
            task = files.read(guard.task, keep=True)
            held = held_out(task, guard.holdout_splits)
            tapt_ids = train_ids(task) if guard.tapt else frozenset()
            for i, d in enumerate(kept):  # on the text and meta as they will be published
                if guard.guard and (why := held.reason(d.text, _with_raw_id(d.meta, d.raw_id or d.id))):
                    leaks.append((i, why))
                if tapt_ids and (cid := doc_id(d.text)) in tapt_ids:
                    tapt.append((i, cid))
    with scratch.files() as files:  # once this task's files are uploaded
        files.delete(done)
    return {"filters": {f.name: (f.stats, f.rejects) for f in filters},
            "lengths": np.array([len(d.text) for d in kept], dtype=np.int64),
            "has_url": np.array([d.url is not None for d in kept], dtype=bool), "leaks": leaks, "tapt": tapt,
            "seq": np.array([d.seq for d in kept], dtype=np.int64), "line_bounds": line_bounds,
            # what the main process's MinHash clusters and (without line dedup) exact-text dedup need
            "ids": [d.id for d in kept] if cfg.minhash.enabled else None,
            "cleaned_ids": None if cfg.line_dedup.enabled else feats["id"].tolist()}


def write_part(scratch: Scratch, runs: list[tuple[str, Any, Any, str]], extra: list[dict[str, Any]], out: str,
               check: tuple[str, tuple[str, ...]] | None, row_group_rows: int | None,
               done: tuple[str, ...] = ()) -> dict[str, Any]:
    """Write one part of the published file: the rows ``runs`` picks from phase-3 shards ((shard, row indices,
    each row's block, the shard's gate features)), then the ``extra`` rows (the TAPT texts), in row groups of
    ``row_group_rows`` (None: one); return the rows' gate features and delete the ``done`` files.
    Rows of one block are one Arrow chunk, the extra rows another: the writer cuts pages (and falls back from
    dictionary encoding) at chunk boundaries too, so the bytes depend on the blocks, never on which worker wrote
    which part. With ``check`` (the task file and its held-out splits), the part is re-read and each leaking row
    reported for the gate."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from stages.cleaning.task_guard import held_out, leak_reasons

    schema = arrow_schema(False)
    chunks: list[list[dict[str, Any]]] = []
    features = []
    last = None
    with scratch.files() as files:
        for shard, index, blocks, feats in runs:
            features.append(pd.read_parquet(files.read(feats)).iloc[index].drop(columns=["source_id"]))
            docs = _read_shard(files.read(shard))
            for i, block in zip(index.tolist(), blocks.tolist()):
                d = docs[i]
                if block != last or not chunks:
                    chunks.append([])
                    last = block
                chunks[-1].append({"id": doc_id(d.text), "text": d.text, "source": d.source, "url": d.url,
                                   "meta": _with_raw_id(d.meta, d.raw_id or d.id)})
        if extra:
            chunks.append(extra)
        table = pa.concat_tables([pa.Table.from_pylist(c, schema=schema) for c in chunks]) if chunks \
            else schema.empty_table()
        path = files.write(out)
        pq.write_table(table, path, compression="zstd", row_group_size=row_group_rows)
        leaks = leak_reasons(path, held_out(files.read(check[0], keep=True), check[1])) if check is not None else []
    with scratch.files() as files:
        files.delete(done)
    return {"rows": table.num_rows, "leaks": leaks,
            "features": pd.concat(features, ignore_index=True) if features else None}


def _merger(into: dict[str, FilterStats], rejects: dict[str, list], cap: int) -> Callable[[Any], None]:
    """A consumer merging shard reports in input order, keeping at most ``cap`` rejects per filter and reason."""
    counts: Counter = Counter()

    def consume(report) -> None:
        for name, (stats, rej) in report.items():
            into.setdefault(name, FilterStats()).merge(stats)
            for r in rej:
                if counts[(name, r["reason"])] < cap:
                    counts[(name, r["reason"])] += 1
                    rejects.setdefault(name, []).append(r)

    return consume


class WorkerLost(RuntimeError):
    """A worker process died (killed, or out of memory) while the stage ran; nothing was published."""


@contextmanager
def _worker_deaths(name: str) -> Iterator[None]:
    """A worker's death (a broken process pool, or a Dask task whose workers kept dying) as :class:`WorkerLost`."""
    from concurrent.futures.process import BrokenProcessPool

    try:
        yield
    except Exception as exc:
        from distributed import KilledWorker  # here: importing Dask costs a second a local run need not pay

        if isinstance(exc, (BrokenProcessPool, KilledWorker)):
            raise WorkerLost(f"{name}: a worker process died while the stage ran (killed, or out of memory: see the "
                             "system log); nothing was published and the previous output is as it was. Run the "
                             "stage again (with fewer workers, clean.defaults.workers, if memory ran out)") from None
        raise


@contextmanager
def _cleared(scratch: Scratch) -> Iterator[None]:
    """The run's files removed from a URL scratch when the stage ends, whether it succeeded or not (the work folder
    removes itself)."""
    try:
        yield
    finally:
        scratch.clear()


@contextmanager
def _input_named(pieces: list[Piece], scratch: Scratch) -> Iterator[list[Piece]]:
    """The pieces as the workers read them: the input's own files (a local scratch), or the copies this process
    uploads to a URL scratch (removed once read), with errors that name a copy naming the input's file again."""
    if not scratch.url:
        yield pieces
        return
    names: dict[Path, str] = {}
    for pc in pieces:
        if pc.path not in names:
            names[pc.path] = scratch.stage(pc.path, f"input/{len(names):05d}/{pc.path.name}")
    try:
        yield [replace(pc, path=Path(names[pc.path])) for pc in pieces]
    except ValueError as exc:
        message = str(exc)
        for path, name in names.items():
            message = message.replace(name, str(path))
        raise ValueError(message) from None
    with scratch.files() as files:  # read into shards: the copies are spent
        files.delete(names.values())


class EmptyInput(ValueError):
    """No record of the input has a text string; ``args[0]`` counts the skipped records by reason."""


@dataclass(frozen=True)
class TaskInput:
    """The labeled task the corpus is guarded against (``cfg``: the corpus's task section; ``path``: its file)."""

    cfg: Any  # stages.cleaning.task_guard.TaskConfig
    path: Path


def _pandas_schema(has_url: bool, tapt: list[dict[str, Any]] | None):
    """The published schema when a task is given: Arrow's schema with the metadata pandas gives it (a round trip
    through pandas, the guard's path, on a one-row stand-in with the same nulls), so the file is the same bytes
    whichever path wrote it."""
    import pandas as pd
    import pyarrow as pa

    schema = arrow_schema(False)
    df = pa.table({c: pa.array([None if c == "url" and not has_url else "x"], pa.string()) for c in schema.names},
                  schema=schema).to_pandas()
    df = pd.concat([df, pd.DataFrame(tapt[:1], columns=df.columns)], ignore_index=True) if tapt is not None else df
    return pa.Table.from_pandas(df.reset_index(drop=True), schema=schema, preserve_index=False).schema


def clean_corpus(records: Path | Iterable[dict[str, Any]], cfg: CleanerConfig, *, work: Path, out_parquet: Path,
                 words: list[str], log: Callable[[str], None] = print, name: str = "clean",
                 while_mapping: Callable[[], None] | None = None, task: TaskInput | None = None,
                 scratch: Scratch | None = None) -> CleanResult:
    """Clean ``records`` (a Parquet or JSONL file or folder, read by the workers piece by piece, or dicts with text,
    optional id, url, source, meta, timestamp) into ``out_parquet``. With ``task``, its guard and TAPT texts are
    applied and its leak re-check made. The tasks exchange their files through ``scratch`` (default:
    ``LMPIPE_SCRATCH``'s URL, else ``work`` itself, which under Dask must then be on a file system every worker sees
    at the same path); this process keeps its own files in ``work``. ``while_mapping`` is called once the shards go
    to other processes, for work that can overlap theirs."""
    import numpy as np
    import pandas as pd
    import pyarrow.parquet as pq

    from stages.cleaning import task_guard
    from stages.cleaning.dedup import bucket_entries, count_bucket, new_table, place_bucket, select_bucket
    from stages.cleaning.parquet_concat import concat

    t_start = time.perf_counter()
    phase_s: dict[str, float] = {}
    work.mkdir(parents=True, exist_ok=True)
    text_md5 = cfg.url_dedup and cfg.url_dedup_rule == "tfds"
    pieces = plan_pieces(records, 4 * cfg.shard_docs) if isinstance(records, Path) else None
    # A missing or damaged task file stops the stage now, not after the corpus is cleaned.
    task_df = task_guard.read_task(task.path) if task is not None else None
    filters: dict[str, FilterStats] = {}
    rejects: dict[str, list] = {}
    scratch = scratch or Scratch.for_run(work, name)
    scratch.check()

    with _worker_deaths(name), _cleared(scratch), open_shards(cfg.workers, name=name) as engine:
        task_name = scratch.stage(task.path, f"task/{task.path.name}") if task is not None else None
        if while_mapping is not None and engine.engine != "local":
            while_mapping()  # this process only waits on the workers from here on (the stage imports GX)
        reads: list[dict[str, Any]] = []
        if pieces is None:  # records in memory: this process writes the shards
            reads.append(phase0(scratch, records, "000000", cfg.shard_docs, text_md5))
        else:
            with _input_named(pieces, scratch) as sent:
                engine.map(phase0, [(scratch, pc, f"{k:06d}", cfg.shard_docs, text_md5) for k, pc in enumerate(sent)],
                           reads.append, desc="clean 0/3 read")
        input_drops: Counter = sum((r["drops"] for r in reads), Counter())
        repaired = input_drops.pop(REPAIRED_UTF8, 0)
        shards = [s for r in reads for s in r["shards"]]
        if not shards:
            raise EmptyInput(input_drops)
        sizes = [n for r in reads for n in r["sizes"]]
        starts_by_piece = np.cumsum([0, *(len(r["lengths"]) for r in reads[:-1])]).tolist()
        shard_offset = [start for r, start in zip(reads, starts_by_piece) for _ in r["shards"]]
        lengths = np.concatenate([r["lengths"] for r in reads])
        n_in, chars_in, bytes_in = len(lengths), int(lengths.sum()), sum(r["bytes"] for r in reads)

        # URL and exact-duplicate dedup need only ids and URLs; decided here, applied by the phase-1 workers.
        drops = np.empty(0, dtype=np.int64)
        url_stats = None
        if cfg.url_dedup:
            limit = cfg.c4.max_page_chars
            fits = np.flatnonzero(lengths <= limit) if limit else np.arange(n_in)  # C4: length filter first
            col = {k: np.concatenate([r[k] for r in reads])[fits] for k in ("ids", "urls", "stamps", "md5")
                   if k != "md5" or text_md5}
            drop, n_url, n_exact = url_dedup_arrays(col["ids"], col["urls"], col["stamps"], col.get("md5"),
                                                    cfg.url_dedup_rule)
            del col
            drops = fits[drop]
            ch = int(lengths[fits].sum())
            url_stats = FilterStats(docs_in=len(fits), docs_out=len(fits) - len(drops), chars_in=ch,
                                    chars_out=ch - int(lengths[drops].sum()))
            url_stats.dropped.update({k: v for k, v in {"duplicate_url": n_url, "exact_duplicate": n_exact}.items()
                                      if v})
        starts = np.cumsum([0, *sizes[:-1]])
        where = np.searchsorted(starts, drops, side="right") - 1  # each dropped row's shard
        per_shard: list[set[int]] = [set() for _ in shards]
        for shard, row in zip(where.tolist(), (drops - starts[where]).tolist()):
            per_shard[shard].add(row)
        del reads
        phase_s["read"] = time.perf_counter() - t_start

        t0 = time.perf_counter()
        p1 = [(scratch, s, f"p1-{i:06d}.parquet", f"pairs-{i:06d}.npy", frozenset(per_shard[i]), cfg,
               cfg.line_dedup.enabled) for i, s in enumerate(shards)]
        merge = _merger(filters, rejects, cfg.reject_samples)
        pair_bounds: list[list[int]] = []

        def consume1(report: dict[str, Any]) -> None:
            merge(report["filters"])
            pair_bounds.append(report["bounds"])

        engine.map(phase1, p1, consume1, desc="clean 1/3 c4 rules")
        if url_stats is not None:  # report in C4's order: page length, URL dedup, line rules
            filters = {"page_length": filters["page_length"], "url_dedup": url_stats,
                       **{k: v for k, v in filters.items() if k != "page_length"}}
        phase_s["c4_rules"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        table = None
        if cfg.line_dedup.enabled:  # one task per hash bucket, then each placed in the table
            buckets = cfg.line_dedup.buckets
            parts = [f"line-selection.part{b}.npy" for b in range(buckets)]
            counts: list[int] = []
            pair_files = [a[3] for a in p1]
            engine.map(select_bucket, [(scratch, bucket_entries(pair_files, pair_bounds, b), parts[b])
                                       for b in range(buckets)], counts.append, desc="clean line table")
            if scratch.url:  # no file to write in place: each worker process joins the buckets itself
                table = tuple(parts)
            else:
                table = ("line-selection.npy",)
                new_table(Path(scratch.where(table[0])), sum(counts))
                offsets = np.cumsum([0, *counts[:-1]]).tolist()
                engine.map(place_bucket, [(Path(scratch.where(parts[b])), Path(scratch.where(table[0])), offsets[b])
                                          for b in range(buckets)], lambda _: None, desc="clean line table")
            log(f"[clean] line dedup table: {sum(counts):,} distinct lines")
        phase_s["line_table"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        # The gate's second language opinion runs on a content-hash sample (py3langid is slow on all).
        sample = cfg.language.second_opinion_docs
        english_rate = min(1.0, sample / n_in) if sample else 1.0
        spec = None
        if task is not None:
            spec = GuardSpec(task_name, tuple(task.cfg.holdout_splits), task.cfg.guard, task.cfg.tapt)
        p3 = [(scratch, a[2], f"p3-{i:06d}.parquet", f"bands-{i:06d}.npy", table, words, cfg,
               f"feat-{i:06d}.parquet", f"lines-{i:06d}.npy", english_rate, spec, (a[1], a[3]))
              for i, a in enumerate(p1)]
        merge = _merger(filters, rejects, cfg.reject_samples)  # ``filters`` was reordered
        kept: list[dict[str, Any]] = []

        def consume3(report: dict[str, Any]) -> None:
            merge(report.pop("filters"))
            kept.append(report)

        engine.map(phase3, p3, consume3, desc="clean 2/3 dedup, language, bad words")
        duplicate_lines = None
        if cfg.line_dedup.enabled:  # the gate's independent count of repeated output lines, a bucket per task
            found: list[int] = []
            line_files, line_bounds = [a[8] for a in p3], [k["line_bounds"] for k in kept]
            engine.map(count_bucket, [(scratch, bucket_entries(line_files, line_bounds, b))
                                      for b in range(cfg.line_dedup.buckets)], found.append, desc="clean line check")
            duplicate_lines = sum(found)
        phase_s["dedup_language_badwords"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        keep = [np.ones(len(k["lengths"]), dtype=bool) for k in kept]
        if cfg.minhash.enabled:
            shard_ids = [k["ids"] for k in kept]
            with scratch.files() as files:
                bands = np.concatenate([np.load(files.read(a[3])) for a in p3])  # p3: one entry per shard
            ids = [i for s in shard_ids for i in s]
            near_dups = duplicates(ids, bands)
            del bands
            filters["minhash"] = FilterStats(docs_in=len(ids), docs_out=len(ids) - len(near_dups),
                                             dropped=Counter({"near_duplicate": len(near_dups)} if near_dups else {}))
            for m, shard in zip(keep, shard_ids):
                m &= [i not in near_dups for i in shard]
        if not cfg.line_dedup.enabled:
            # Without line dedup two pages can clean to the same text (same id): keep the first.
            final, seen = FilterStats(), set()
            for m, k in zip(keep, kept):
                for j, cid in enumerate(k["cleaned_ids"]):
                    if not m[j]:
                        continue
                    final.docs_in += 1
                    if cid in seen:
                        m[j] = False
                        final.dropped["duplicate_text"] += 1
                    else:
                        seen.add(cid)
                        final.docs_out += 1
            if final.dropped:
                filters["exact_dedup"] = final
        n_out = int(sum(m.sum() for m in keep))
        chars_out = int(sum(k["lengths"][m].sum() for k, m in zip(kept, keep)))
        has_url = any(bool(k["has_url"][m].any()) for k, m in zip(kept, keep))

        # The task guard's drops and the TAPT texts, from what the workers found.
        guarded: Counter = Counter()
        present: set[str] = set()
        for k, m in zip(kept, keep):
            for i, why in k["leaks"]:
                if m[i]:
                    guarded[why] += 1
                    m[i] = False
        for k, m in zip(kept, keep):
            present.update(cid for i, cid in k["tapt"] if m[i])
        tapt: list[dict[str, Any]] | None = None
        if task is not None:
            held = task_guard.held_out(task.path, tuple(task.cfg.holdout_splits))
            tapt = task_guard.tapt_rows(task.cfg, task_df, held, present) if task.cfg.tapt else []

        # The published rows in order, each with its block (``shard_docs`` consecutive valid input records). The
        # file's layout follows the blocks, as the stage has always written it, so its bytes never depend on the
        # workers: without a task one row group per block; with one, groups of ROW_GROUP_ROWS rows, an Arrow chunk
        # per block (one chunk for all when the guard dropped any: pandas' filter joined them) and one for TAPT.
        runs_all = []
        for i, (a, m, k) in enumerate(zip(p3, keep, kept)):
            ix = np.flatnonzero(m)
            runs_all.append((a[2], ix, (shard_offset[i] + k["seq"][ix]) // cfg.shard_docs, a[7]))
        if task is not None and task.cfg.guard and guarded:
            runs_all = [(path, ix, np.zeros(len(ix), dtype=np.int64), f) for path, ix, _, f in runs_all]
        extra_rows = tapt or []
        n_docs = sum(len(r[1]) for r in runs_all)
        total = n_docs + len(extra_rows)
        if task is None:
            blocks = np.concatenate([r[2] for r in runs_all]) if runs_all else np.empty(0, dtype=np.int64)
            bounds = [*(np.flatnonzero(np.diff(blocks)) + 1).tolist(), total] if total else []
            group_rows = None
        else:
            per_part = ROW_GROUP_ROWS * max(1, (4 * cfg.shard_docs) // ROW_GROUP_ROWS)
            bounds, group_rows = [*range(per_part, total, per_part), total] if total else [], ROW_GROUP_ROWS
        jobs: list[tuple] = []
        cursor, s, off = 0, 0, 0  # the next row: run s, its off-th row
        check = (task_name, tuple(task.cfg.holdout_splits)) if task is not None else None
        for hi in bounds:
            runs, extra = [], []
            while cursor < hi and s < len(runs_all):
                take = min(hi - cursor, len(runs_all[s][1]) - off)
                if take:
                    path, ix, blocks, feats = runs_all[s]
                    runs.append((path, ix[off:off + take], blocks[off:off + take], feats))
                cursor += take
                off += take
                if off == len(runs_all[s][1]):
                    s, off = s + 1, 0
            if cursor < hi:  # the TAPT rows come last
                extra = extra_rows[cursor - n_docs:hi - n_docs]
                cursor = hi
            jobs.append((scratch, runs, extra, f"part-{len(jobs):06d}.parquet", check, group_rows))
        # Files no task reads any more (the C4-rules shards, the line hashes): each write task deletes a share.
        spent = [f for a in p3 for f in (a[1], a[8])]
        jobs = [(*job, tuple(spent[j::len(jobs)])) for j, job in enumerate(jobs)]
        written: list[dict[str, Any]] = []
        engine.map(write_part, jobs, written.append, desc="clean 3/3 write")

        template = work / "template.parquet"
        schema = _pandas_schema(has_url, tapt if task.cfg.tapt else None) if task is not None else arrow_schema(False)
        pq.write_table(schema.empty_table(), template, compression="zstd")
        with scratch.files() as files:  # the parts joined by copying their bytes (a URL's parts copied here first)
            if jobs:
                concat([files.read(j[3]) for j in jobs], out_parquet, like=template)
            else:
                template.replace(out_parquet)
            frames = [w["features"] for w in written if w["features"] is not None]
            features = pd.concat(frames, ignore_index=True) if frames else \
                pd.read_parquet(files.read(p3[0][7])).iloc[:0].drop(columns=["source_id"])
    task_summary = leaks = None
    if task is not None:
        ids = features["id"].tolist() + [r["id"] for r in tapt]
        leak = np.full(len(ids), "", dtype=object)
        base = 0
        for job, w in zip(jobs, written):
            for i, why in w["leaks"]:
                leak[base + i] = why
            base += w["rows"]
        leaks = pd.DataFrame({"leak": leak}, index=pd.Index(np.array(ids, dtype=object), name="doc"))
        task_summary = {"task": str(task.path), "holdout_examples": len(task_df[task_df["split"].isin(
                            task.cfg.holdout_splits)]), "guard": task.cfg.guard, "dropped": dict(guarded),
                        "tapt_added": len(tapt), "documents_out": total}
    phase_s["write"] = time.perf_counter() - t0

    return CleanResult(docs_in=n_in + sum(input_drops.values()), docs_out=n_out, chars_in=chars_in,
                       chars_out=chars_out, bytes_in=bytes_in, filters=filters,
                       rejects=[r for name in filters for r in rejects.get(name, [])],  # in filter order
                       input_drops=input_drops, seconds=time.perf_counter() - t_start, phase_seconds=phase_s,
                       gate_features=features, duplicate_lines=duplicate_lines,
                       task=task_summary, task_leaks=leaks, input_repaired=Counter({REPAIRED_UTF8: repaired}))


def _with_raw_id(meta: str, raw_id: str) -> str:
    """Keep the pre-cleaning id in meta so a cleaned document can be traced to its raw source."""
    try:
        m = json.loads(meta) if meta else {}
    except json.JSONDecodeError:
        m = {"meta": meta}
    if not isinstance(m, dict):
        m = {"meta": m}
    m["raw_id"] = raw_id
    return json.dumps(m, sort_keys=True, ensure_ascii=False, default=str)

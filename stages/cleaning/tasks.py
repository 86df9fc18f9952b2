"""The clean stage's worker tasks, one per step that touches text, each ``task(scratch, recipe, job) -> result``:
the run's ``Scratch``, its ``Recipe`` and one frozen job record in, a frozen result record out. A task takes file *names* and opens them
inside ``with scratch.files() as files:``, so it runs alike on the work folder and on workers that see only an
object store; it leaves its inputs alone (a later task deletes them), so a task run again after its worker died
finds what it needs."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stages.cleaning.base import Doc, FilterStats, meta_dict
from stages.cleaning.dedup import band_hashes, line_pairs, url_key, write_shard_pairs
from stages.cleaning.readers import Piece, _open, piece_records
from stages.cleaning.recipe import Recipe, ShardContext
from stages.cleaning.scratch import Scratch
from stages.common.documents import arrow_schema, doc_id

SHARD_COLUMNS = ("id", "text", "source", "url", "meta", "timestamp", "raw_id")

Reports = dict[str, tuple[FilterStats, list[dict[str, Any]]]]  # filter name -> (its stats, its sampled rejects)


def read_shard(path: Path) -> list[Doc]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    cols = (*SHARD_COLUMNS, "seq")
    return [Doc(**dict(zip(cols, row))) for row in zip(*(table[c].to_pylist() for c in cols))]


def write_shard(docs: list[Doc], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {c: pa.array([getattr(d, c) for d in docs], pa.string()) for c in SHARD_COLUMNS}
    pq.write_table(pa.table({**columns, "seq": pa.array([d.seq for d in docs], pa.int64())}), path,
                   compression="zstd")
    return path


def with_raw_id(meta: str, raw_id: str) -> str:
    """Keep the pre-cleaning id in meta so a cleaned document can be traced to its raw source."""
    try:
        m = json.loads(meta) if meta else {}
    except json.JSONDecodeError:
        m = {"meta": meta}
    if not isinstance(m, dict):
        m = {"meta": m}
    m["raw_id"] = raw_id
    return json.dumps(m, sort_keys=True, ensure_ascii=False, default=str)


def _reports(filters) -> Reports:
    return {f.name: (f.stats, f.rejects) for f in filters}


# -- read ---------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReadJob:
    """One piece of the input to read into shards of at most ``shard_docs`` documents named ``in-<prefix>-*``."""

    piece: Piece
    prefix: str


@dataclass(frozen=True)
class ReadResult:
    """What URL and exact-duplicate dedup need of a piece (compact arrays: ids, digests of normalised URLs,
    timestamps, text MD5s), its shards and their sizes, the texts' lengths and UTF-8 bytes, and the records skipped
    by reason (a text that is not a string: ``invalid_text``)."""

    shards: tuple[str, ...]
    sizes: tuple[int, ...]
    ids: Any
    urls: Any
    stamps: Any
    md5: Any
    lengths: Any
    bytes: int
    drops: Counter


def read_piece(scratch: Scratch, recipe: Recipe, job: ReadJob) -> ReadResult:
    import numpy as np

    shard_docs = recipe.cfg.shard_docs
    text_md5 = recipe.text_md5
    drops: Counter = Counter()
    shards: list[str] = []
    sizes: list[int] = []
    ids, urls, stamps, md5, lengths = [], [], [], [], []
    n_bytes = 0
    batch: list[Doc] = []
    with scratch.files() as files:
        def flush() -> None:
            name = f"in-{job.prefix}-{len(shards):05d}.parquet"
            write_shard(batch, files.write(name))
            shards.append(name)
            sizes.append(len(batch))
            batch.clear()

        opener = (lambda path: files.open(str(path))) if files.scratch.url else _open
        for rec in piece_records(job.piece, drops, opener):
            doc = _doc(rec, len(lengths))
            if doc is None:
                drops["invalid_text"] += 1
                continue
            batch.append(doc)
            ids.append(doc.id)
            urls.append(url_key(doc.url) if doc.url else b"")
            stamps.append(doc.timestamp)
            if text_md5:
                md5.append(hashlib.md5(doc.text.encode("utf-8")).hexdigest())
            lengths.append(len(doc.text))
            n_bytes += len(doc.text.encode("utf-8"))
            if len(batch) == shard_docs:
                flush()
        if batch:
            flush()
    # Compact arrays (one buffer each) for the main process's URL and exact-duplicate decisions.
    return ReadResult(shards=tuple(shards), sizes=tuple(sizes), ids=np.array(ids, dtype="S32"),
                      urls=np.array(urls, dtype="S16"), stamps=np.array(stamps, dtype=str),
                      md5=np.array(md5, dtype="S32"), lengths=np.array(lengths, dtype=np.int64), bytes=n_bytes,
                      drops=drops)


def _doc(rec: dict[str, Any], seq: int) -> Doc | None:
    """A record as a document keyed on its content hash (a user's id, not necessarily unique, is only carried in
    meta.raw_id); None when its text is not a string."""
    text = rec.get("text")
    if not isinstance(text, str):
        return None
    text = text.encode("utf-8", "replace").decode("utf-8")  # lone surrogates cannot be written to Parquet
    did = doc_id(text)
    raw_id = str(rec["id"]) if rec.get("id") not in (None, "") else did
    url = rec.get("url") if isinstance(rec.get("url"), str) and rec.get("url") else None
    meta = rec.get("meta") if isinstance(rec.get("meta"), str) else \
        json.dumps(rec.get("meta") or {}, sort_keys=True, default=str)
    ts = str(rec.get("timestamp") or meta_dict(meta).get("warc_date") or meta_dict(meta).get("timestamp") or "")
    return Doc(id=did, text=text, source=str(rec.get("source") or ""), url=url, meta=meta, timestamp=ts,
               raw_id=raw_id, seq=seq)


# -- C4 rules -----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RulesJob:
    """One shard through the recipe's rules with URL dedup's decision (``drop``: its rows to drop) between page
    length and the line rules (C4's order); ``pairs_out``: the line-hash pairs of what it keeps, or None."""

    shard_in: str
    shard_out: str
    pairs_out: str | None
    drop: frozenset[int]


@dataclass(frozen=True)
class RulesResult:
    filters: Reports
    bounds: list[int] | None  # where each line-dedup bucket starts in the pairs file


def apply_rules(scratch: Scratch, recipe: Recipe, job: RulesJob) -> RulesResult:
    cfg = recipe.cfg
    length, c4 = recipe.build(recipe.rules, ShardContext(None, recipe.words, cfg.reject_samples))
    with scratch.files() as files:
        docs = read_shard(files.read(job.shard_in))
        kept = [d for i, d in enumerate(docs) if length(d) and i not in job.drop and c4(d)]
        write_shard(kept, files.write(job.shard_out))
        bounds = None if job.pairs_out is None else \
            write_shard_pairs([line_pairs(d) for d in kept], files.write(job.pairs_out), cfg.line_dedup.buckets)
    return RulesResult(_reports((length, c4)), bounds)


# -- filters ------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GuardSpec:
    """What a filters task checks for the task guard and TAPT: the task file (its name in the scratch), its
    held-out splits, whether the guard is on, and whether TAPT is (then it reports which of the task's training
    texts the corpus holds)."""

    task: str
    holdout_splits: tuple[str, ...]
    guard: bool
    tapt: bool


@dataclass(frozen=True)
class FilterJob:
    """One shard through the recipe's filters (``table``: the line table's file, or its buckets' files), then
    the files the later steps read: the gate's features, the kept lines' hashes, the MinHash bands. ``done``:
    files of finished steps this task deletes (the scratch then holds about two copies of the corpus; a task run
    again finds them gone, which is fine)."""

    shard_in: str
    shard_out: str
    bands_out: str
    feats_out: str
    lines_out: str
    table: tuple[str, ...] | None
    english_rate: float  # the share of documents the gate's second language opinion samples
    guard: GuardSpec | None = None
    done: tuple[str, ...] = ()


@dataclass(frozen=True)
class FilterResult:
    """For each kept document: its length, whether it has a URL, its row in its input piece (``seq``), the task
    guard's reason to drop it (``leaks``: (row, reason)) and whether it is one of the task's training texts
    (``tapt``: (row, id)); where each line-hash bucket starts (``line_bounds``); the ids MinHash clusters and
    the cleaned texts' ids exact dedup needs (None when the recipe has no use for them)."""

    filters: Reports
    lengths: Any
    has_url: Any
    seq: Any
    line_bounds: list[int]
    leaks: list[tuple[int, str]] = field(default_factory=list)
    tapt: list[tuple[int, str]] = field(default_factory=list)
    ids: list[str] | None = None
    cleaned_ids: list[str] | None = None


def apply_filters(scratch: Scratch, recipe: Recipe, job: FilterJob) -> FilterResult:
    import numpy as np

    from stages.cleaning.features import document_features, write_line_hashes

    cfg = recipe.cfg
    with scratch.files() as files:
        table = files.table(job.table) if job.table is not None else None
        filters = recipe.build(recipe.filters, ShardContext(table, recipe.words, cfg.reject_samples))
        kept = [d for d in read_shard(files.read(job.shard_in)) if all(f(d) for f in filters)]  # all(): first drop
        write_shard(kept, files.write(job.shard_out))
        feats = document_features(kept, cfg, english_rate=job.english_rate)
        feats.to_parquet(files.write(job.feats_out), index=False)
        line_bounds = write_line_hashes(kept, files.write(job.lines_out), cfg.line_dedup.buckets)
        if cfg.minhash.enabled:
            np.save(files.write(job.bands_out), np.stack([band_hashes(d.text, cfg.minhash) for d in kept]) if kept
                    else np.empty((0, cfg.minhash.bands), dtype=np.uint64))
        leaks, tapt = _guard_findings(files, job.guard, kept)
    with scratch.files() as files:  # once this task's files are uploaded
        files.delete(job.done)
    return FilterResult(filters=_reports(filters), lengths=np.array([len(d.text) for d in kept], dtype=np.int64),
                        has_url=np.array([d.url is not None for d in kept], dtype=bool),
                        seq=np.array([d.seq for d in kept], dtype=np.int64), line_bounds=line_bounds,
                        leaks=leaks, tapt=tapt, ids=[d.id for d in kept] if cfg.minhash.enabled else None,
                        cleaned_ids=None if cfg.line_dedup.enabled else feats["id"].tolist())


def _guard_findings(files, guard: GuardSpec | None, kept: list[Doc]) -> tuple[list, list]:
    """The task guard's (row, reason) for each kept document that leaks a held-out example, on the text and meta
    as they will be published, and TAPT's (row, id) for each that is a task training text."""
    from stages.cleaning.task_guard import held_out, train_ids

    leaks: list[tuple[int, str]] = []
    tapt: list[tuple[int, str]] = []
    if guard is None:
        return leaks, tapt
    task = files.read(guard.task, keep=True)
    held = held_out(task, guard.holdout_splits)
    tapt_ids = train_ids(task) if guard.tapt else frozenset()
    for i, d in enumerate(kept):
        if guard.guard and (why := held.reason(d.text, with_raw_id(d.meta, d.raw_id or d.id))):
            leaks.append((i, why))
        if tapt_ids and (cid := doc_id(d.text)) in tapt_ids:
            tapt.append((i, cid))
    return leaks, tapt


# -- write --------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rows:
    """Rows of a filtered shard to publish: the shard, its row indices, each row's block, the shard's features."""

    shard: str
    index: Any
    blocks: Any
    feats: str


@dataclass(frozen=True)
class WriteJob:
    """One part of the published file: ``runs``' rows, then the ``extra`` rows (the TAPT texts), in row groups of
    ``row_group_rows`` (None: one); ``check``: the task file and its held-out splits to re-check the part against;
    ``done``: files it deletes once written."""

    runs: tuple[Rows, ...]
    extra: tuple[dict[str, Any], ...]
    out: str
    check: tuple[str, tuple[str, ...]] | None
    row_group_rows: int | None
    done: tuple[str, ...] = ()


@dataclass(frozen=True)
class WriteResult:
    rows: int
    leaks: list[tuple[int, str]]  # each leaking row of the part, for the gate
    features: Any  # the rows' gate features (pandas), or None


def write_part(scratch: Scratch, recipe: Recipe, job: WriteJob) -> WriteResult:
    """Rows of one block are one Arrow chunk, the extra rows another: the writer cuts pages (and falls back from
    dictionary encoding) at chunk boundaries too, so the bytes depend on the blocks, never on which worker wrote
    which part."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from stages.cleaning.task_guard import held_out, leak_reasons

    schema = arrow_schema(False)
    chunks: list[list[dict[str, Any]]] = []
    features = []
    last = None
    with scratch.files() as files:
        for run in job.runs:
            features.append(pd.read_parquet(files.read(run.feats)).iloc[run.index].drop(columns=["source_id"]))
            docs = read_shard(files.read(run.shard))
            for i, block in zip(run.index.tolist(), run.blocks.tolist()):
                d = docs[i]
                if block != last or not chunks:
                    chunks.append([])
                    last = block
                chunks[-1].append({"id": doc_id(d.text), "text": d.text, "source": d.source, "url": d.url,
                                   "meta": with_raw_id(d.meta, d.raw_id or d.id)})
        if job.extra:
            chunks.append(list(job.extra))
        table = pa.concat_tables([pa.Table.from_pylist(c, schema=schema) for c in chunks]) if chunks \
            else schema.empty_table()
        path = files.write(job.out)
        pq.write_table(table, path, compression="zstd", row_group_size=job.row_group_rows)
        leaks = leak_reasons(path, held_out(files.read(job.check[0], keep=True), job.check[1])) \
            if job.check is not None else []
    with scratch.files() as files:
        files.delete(job.done)
    return WriteResult(rows=table.num_rows, leaks=leaks,
                       features=pd.concat(features, ignore_index=True) if features else None)


"""Run the cleaning filters over a corpus read from Parquet or JSONL: sharded, parallel over processes or Dask,
memory bounded. Phases (C4's order, then the extras): 0. main: input shards, URL / exact-duplicate drops; 1. workers:
page length, C4 line rules, line-hash pairs; 2. main: line-dedup table; 3. workers: line dedup, language, bad words,
Gopher, MinHash bands; 4. main: MinHash clusters, concatenation in input order. Global decisions use only hashes and
ids, so the result does not depend on the number of workers.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stages.cleaning.base import Doc, Filter, FilterStats, meta_dict
from stages.cleaning.c4 import BadWordsFilter, C4LinesFilter, PageLengthFilter
from stages.cleaning.config import CleanerConfig
from stages.cleaning.dedup import (LineDedupFilter, band_hashes, build_selection, count_duplicates, duplicates,
                                   line_pairs, url_dedup, write_shard_pairs)
from stages.cleaning.gopher import GopherQualityFilter, GopherRepetitionFilter
from stages.cleaning.langid import is_english
from stages.common.documents import arrow_schema, doc_id, open_parquet
from stages.common.shards import open_shards
from stages.sources.files import _open_binary

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


def _read_shard(path: Path) -> list[Doc]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    return [Doc(**dict(zip(SHARD_COLUMNS, row))) for row in zip(*(table[c].to_pylist() for c in SHARD_COLUMNS))]


def _write_shard(docs: list[Doc], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({c: pa.array([getattr(d, c) for d in docs], pa.string()) for c in SHARD_COLUMNS}), path,
                   compression="zstd")
    return path


def phase1(shard_in: Path, shard_out: Path, pairs_out: Path, drop: frozenset[int], cfg: CleanerConfig,
           with_pairs: bool) -> dict:
    """Page length, the main process's URL-dedup decision, then C4's line rules (C4's order); deletes its input
    shard, so the work folder holds at most about two copies of the corpus. Returns each filter's stats and rejects."""
    length, c4 = PageLengthFilter(cfg.c4, cfg.reject_samples), C4LinesFilter(cfg.c4, cfg.reject_samples)
    kept = [d for i, d in enumerate(_read_shard(shard_in)) if length(d) and i not in drop and c4(d)]
    _write_shard(kept, shard_out)
    shard_in.unlink()
    if with_pairs:
        write_shard_pairs([line_pairs(d) for d in kept], pairs_out)
    return {f.name: (f.stats, f.rejects) for f in (length, c4)}


def phase3(shard_in: Path, shard_out: Path, bands_out: Path, table: Path | None, words: list[str],
           cfg: CleanerConfig, feats_out: Path, lines_out: Path, english_rate: float) -> dict:
    """Line dedup, language, bad words, Gopher; then the gate's per-document features and line hashes."""
    import numpy as np

    from stages.cleaning.features import document_features, write_line_hashes

    n = cfg.reject_samples
    filters = [make() for on, make in (
        (cfg.line_dedup.enabled and table is not None, lambda: LineDedupFilter(table, cfg.line_dedup, n)),
        (cfg.language.enabled, lambda: LanguageFilter(cfg.language, n)),
        (cfg.badwords.enabled, lambda: BadWordsFilter(words, n)),
        (cfg.gopher_quality.enabled, lambda: GopherQualityFilter(cfg.gopher_quality, n)),
        (cfg.gopher_repetition.enabled, lambda: GopherRepetitionFilter(cfg.gopher_repetition, n))) if on]
    kept = [d for d in _read_shard(shard_in) if all(f(d) for f in filters)]  # all() stops at the first drop
    _write_shard(kept, shard_out)
    shard_in.unlink()
    document_features(kept, cfg, english_rate=english_rate).to_parquet(feats_out, index=False)
    write_line_hashes(kept, lines_out)
    if cfg.minhash.enabled:
        np.save(bands_out, np.stack([band_hashes(d.text, cfg.minhash) for d in kept]) if kept
                else np.empty((0, cfg.minhash.bands), dtype=np.uint64))
    return {f.name: (f.stats, f.rejects) for f in filters}


def write_input_shards(records: Iterator[dict[str, Any]], work: Path, shard_docs: int,
                       drops: Counter, text_md5: bool = False) -> tuple[list[Path], list[tuple], list[int], int]:
    """Stream input records into shard files; returns shards, (index, id, url, timestamp) rows (with the text's
    MD5 hex digest last when ``text_md5``), the texts' lengths and their UTF-8 bytes. Records whose text is not
    a string are counted in ``drops`` and skipped."""
    shards: list[Path] = []
    rows: list[tuple] = []
    lengths: list[int] = []
    batch: list[Doc] = []
    nbytes = 0
    for rec in records:
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
                         raw_id=raw_id))
        rows.append((len(rows), did, url, ts) + ((hashlib.md5(text.encode("utf-8")).hexdigest(),) if text_md5 else ()))
        lengths.append(len(text))
        nbytes += len(text.encode("utf-8"))
        if len(batch) == shard_docs:
            shards.append(_write_shard(batch, work / f"in-{len(shards):06d}.parquet"))
            batch = []
    if batch:
        shards.append(_write_shard(batch, work / f"in-{len(shards):06d}.parquet"))
    return shards, rows, lengths, nbytes


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


class EmptyInput(ValueError):
    """No record of the input has a text string; ``args[0]`` counts the skipped records by reason."""


def clean_corpus(records: Iterator[dict[str, Any]], cfg: CleanerConfig, *, work: Path, out_parquet: Path,
                 words: list[str], log: Callable[[str], None] = print, name: str = "clean",
                 while_mapping: Callable[[], None] | None = None) -> CleanResult:
    """Clean ``records`` (dicts with text, optional id, url, source, meta, timestamp) into ``out_parquet``.
    Under Dask, ``work`` must be on a filesystem every worker sees at the same path. ``while_mapping`` is
    called once the shards go to other processes, for work that can overlap theirs."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    t_start = time.perf_counter()
    phase_s: dict[str, float] = {}
    work.mkdir(parents=True, exist_ok=True)
    input_drops: Counter = Counter()
    shards, rows, lengths, bytes_in = write_input_shards(
        records, work, cfg.shard_docs, input_drops, text_md5=cfg.url_dedup and cfg.url_dedup_rule == "tfds")
    if not rows:
        raise EmptyInput(input_drops)
    n_in, chars_in = len(rows), sum(lengths)
    filters: dict[str, FilterStats] = {}
    rejects: dict[str, list] = {}

    # URL and exact-duplicate dedup need only ids and URLs; decided here, applied by the phase-1 workers.
    drop_idx: set[int] = set()
    url_stats = None
    if cfg.url_dedup:
        limit = cfg.c4.max_page_chars
        fits = [r for r in rows if not (limit and lengths[r[0]] > limit)]  # C4: length filter first
        drop_idx, n_url, n_exact = url_dedup(fits, cfg.url_dedup_rule)
        ch = sum(lengths[r[0]] for r in fits)
        url_stats = FilterStats(docs_in=len(fits), docs_out=len(fits) - len(drop_idx), chars_in=ch,
                                chars_out=ch - sum(lengths[i] for i in drop_idx))
        url_stats.dropped.update({k: v for k, v in {"duplicate_url": n_url, "exact_duplicate": n_exact}.items() if v})
    del rows, lengths
    per_shard: list[set[int]] = [set() for _ in shards]
    for i in drop_idx:
        per_shard[i // cfg.shard_docs].add(i % cfg.shard_docs)
    phase_s["read"] = time.perf_counter() - t_start

    with open_shards(cfg.workers, name=name) as engine:
        if while_mapping is not None and engine.engine != "local":
            while_mapping()  # this process only waits on the workers from here on (the stage imports GX)
        t0 = time.perf_counter()
        p1 = [(s, work / f"p1-{i:06d}.parquet", work / f"pairs-{i:06d}.npy", frozenset(per_shard[i]), cfg,
               cfg.line_dedup.enabled) for i, s in enumerate(shards)]
        engine.map(phase1, p1, _merger(filters, rejects, cfg.reject_samples), desc="clean 1/3 c4 rules")
        if url_stats is not None:  # report in C4's order: page length, URL dedup, line rules
            filters = {"page_length": filters["page_length"], "url_dedup": url_stats,
                       **{k: v for k, v in filters.items() if k != "page_length"}}
        phase_s["c4_rules"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        table = None
        if cfg.line_dedup.enabled:
            table = work / "line-selection.npy"
            distinct = build_selection([a[2] for a in p1], table, cfg.line_dedup.buckets)
            log(f"[clean] line dedup table: {distinct:,} distinct lines")
        phase_s["line_table"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        # The gate's second language opinion runs on a content-hash sample (py3langid is slow on all).
        sample = cfg.language.second_opinion_docs
        english_rate = min(1.0, sample / n_in) if sample else 1.0
        p3 = [(a[1], work / f"p3-{i:06d}.parquet", work / f"bands-{i:06d}.npy", table, words, cfg,
               work / f"feat-{i:06d}.parquet", work / f"lines-{i:06d}.npy", english_rate)
              for i, a in enumerate(p1)]
        engine.map(phase3, p3, _merger(filters, rejects, cfg.reject_samples),
                   desc="clean 2/3 dedup, language, bad words")
        phase_s["dedup_language_badwords"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    near_dups: set[str] = set()
    if cfg.minhash.enabled:
        ids = [i for a in p3 for i in pq.read_table(a[1], columns=["id"])["id"].to_pylist()]
        near_dups = duplicates(ids, np.concatenate([np.load(a[2]) for a in p3]))  # p3: one entry per shard, >= 1
        filters["minhash"] = FilterStats(docs_in=len(ids), docs_out=len(ids) - len(near_dups),
                                         dropped=Counter({"near_duplicate": len(near_dups)} if near_dups else {}))

    schema = arrow_schema(False)
    n_out = chars_out = 0
    seen_ids: set[str] | None = None if cfg.line_dedup.enabled else set()
    final = FilterStats()
    feature_frames = []
    with pq.ParquetWriter(out_parquet, schema, compression="zstd") as writer:
        for a in p3:  # one row group per shard, in input order
            docs = [d for d in _read_shard(a[1]) if d.id not in near_dups]
            feats = pd.read_parquet(a[6])
            feats = feats[~feats["source_id"].isin(near_dups)]
            a[1].unlink()
            if seen_ids is not None:
                # Without line dedup two pages can clean to the same text (same id): keep the first.
                first: dict[str, int] = {}
                for j, d in enumerate(docs):
                    first.setdefault(doc_id(d.text), j)
                keep_rows = [j for cid, j in first.items() if cid not in seen_ids]
                seen_ids.update(first)
                final.docs_in += len(docs)
                final.docs_out += len(keep_rows)
                if len(keep_rows) < len(docs):
                    final.dropped["duplicate_text"] += len(docs) - len(keep_rows)
                docs, feats = [docs[j] for j in keep_rows], feats.iloc[keep_rows]
            feature_frames.append(feats.drop(columns=["source_id"]))
            if not docs:
                continue
            writer.write_table(pa.Table.from_pylist([
                {"id": doc_id(d.text), "text": d.text, "source": d.source, "url": d.url,
                 "meta": _with_raw_id(d.meta, d.raw_id or d.id)} for d in docs], schema=schema))
            n_out += len(docs)
            chars_out += sum(len(d.text) for d in docs)
    if seen_ids is not None and final.dropped:
        filters["exact_dedup"] = final
    duplicate_lines = count_duplicates([a[7] for a in p3], cfg.line_dedup.buckets) if cfg.line_dedup.enabled else None
    phase_s["write"] = time.perf_counter() - t0

    return CleanResult(docs_in=n_in + sum(input_drops.values()), docs_out=n_out, chars_in=chars_in,
                       chars_out=chars_out, bytes_in=bytes_in, filters=filters,
                       rejects=[r for name in rejects for r in rejects[name]],
                       input_drops=input_drops, seconds=time.perf_counter() - t_start, phase_seconds=phase_s,
                       gate_features=pd.concat(feature_frames, ignore_index=True), duplicate_lines=duplicate_lines)


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

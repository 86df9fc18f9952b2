"""Ingest's core: read every source of one corpus into the common Parquet schema (:func:`ingest`), with content-hash
ids, deduplication, group splits, the manifest and the quality gate."""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import os
import platform
import time
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stages.common.atomic import write_json_atomic
from stages.common.documents import LABELED_COLUMNS, Record, arrow_schema, doc_id, is_json_text, meta_json
from stages.quality.gate import Gate
from stages.sources import Provenance, SourceContext, SourceError, pins, read_source
from stages.sources.archive import PinMismatch
from stages.sources.base import sha256_file
from stages.sources.config import CorpusConfig, SplitConfig
from stages.sources.debian import DebianDescriptionsSource

SPLITS = ("train", "validation", "test")


@dataclass(frozen=True, kw_only=True)
class IngestResult:
    metrics: dict[str, Any]
    gate: Gate  # checked by the stage's entry before the folder is published


def assign_split(group: str, cfg: SplitConfig) -> str:
    """Deterministic split of a group: a seeded SHA-256 of its name mapped to [0, 1)."""
    h = int.from_bytes(hashlib.sha256(f"{cfg.seed}\0{group}".encode()).digest()[:8], "big") / 2**64
    return "test" if h < cfg.test else "validation" if h < cfg.test + cfg.validation else "train"


def without_nul(rec: Record, prov: Provenance) -> Record:
    """``rec`` without NUL characters (a JSON ``\u0000`` escape decodes to one; C tools and Parquet readers
    elsewhere stop at it), their count in the source's manifest entry (``nul_characters_removed``)."""
    if "\x00" not in rec.text:
        return rec
    prov.extra["nul_characters_removed"] = prov.extra.get("nul_characters_removed", 0) + rec.text.count("\x00")
    return dataclasses.replace(rec, text=rec.text.replace("\x00", ""))


def read_all(cfg: CorpusConfig, ctx: SourceContext, provs: list[Provenance], dropped: Counter,
             log=print) -> Iterator[Record]:
    """Every record of every source up to ``max_docs`` in all, each source's Provenance appended to ``provs``."""
    total = 0
    for i, src in enumerate(cfg.sources):
        prov = Provenance(kind=src.kind)
        provs.append(prov)
        t0 = time.perf_counter()
        pin = None if ctx.pins is None else pins.pin_for(ctx.pins, ctx.corpus, i, src.kind)
        try:
            for rec in read_source(src, dataclasses.replace(ctx, pin=pin), prov):
                if cfg.max_docs is not None and total >= cfg.max_docs:
                    dropped["max_docs"] += 1
                    break
                prov.records += 1
                total += 1
                yield without_nul(rec, prov)
            if pin is not None and prov.extra.get("pin") not in (None, pin):
                raise PinMismatch(src.kind, pins.describe(pin), pins.describe(prov.extra["pin"]))
        except PinMismatch as exc:
            raise SourceError(f"ingest.{ctx.corpus}.sources[{i}]: {exc}, and the cache does not hold the pinned "
                              f"bytes; accept the new state with `lm-pipeline pin {ctx.corpus}` (rewrites pins.yaml)"
                              ) from None
        log(f"[ingest] source {i} ({src.kind}): {prov.records} records in {time.perf_counter() - t0:.1f}s")


def collect_labeled(cfg: CorpusConfig, ctx: SourceContext,
                    log=print) -> tuple[list[dict[str, Any]], list[Provenance], Counter]:
    """Labeled corpora, in memory: rows with their split, provenance and drop counters (label conflicts dropped)."""
    provs: list[Provenance] = []
    rows: dict[str, dict[str, Any]] = {}
    labels_of: dict[str, set[str]] = {}
    dropped: Counter = Counter()
    for rec in read_all(cfg, ctx, provs, dropped, log):
        if not rec.label:
            raise SourceError(f"source {rec.source}: a record has no label but the corpus is labeled "
                              "(set label_field on the source)")
        did = doc_id(rec.text)
        key = did if cfg.dedup else f"{did}:{len(rows)}"
        labels_of.setdefault(key, set()).add(rec.label)
        if key in rows:
            dropped["duplicate_text"] += 1
            continue
        rows[key] = {"id": did, "text": rec.text, "source": rec.source, "url": rec.url,
                     "meta": meta_json(rec.meta), "label": rec.label,
                     "split": assign_split(rec.group or did, cfg.split)}
    conflicted = [k for k, labels in labels_of.items() if len(labels) > 1]
    for k in conflicted:  # one text, several labels: no right answer to learn or score, so drop it
        del rows[k]
    dropped["label_conflict"] += len(conflicted)
    return list(rows.values()), provs, dropped


def gate_labels(cfg: CorpusConfig) -> tuple[str, ...]:
    """The gate's labels, else the sections of the corpus's debian_descriptions sources (first seen first)."""
    sections = [s for src in cfg.sources if isinstance(src, DebianDescriptionsSource) for s in src.sections]
    return cfg.gate.labels or tuple(dict.fromkeys(sections))


def stream_documents(cfg: CorpusConfig, ctx: SourceContext, path: Path, log=print):
    """Unlabeled corpora, streamed into Parquet (memory holds ids and a few numbers per document); returns what the
    gate and manifest need."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = arrow_schema(False)
    provs: list[Provenance] = []
    dropped: Counter = Counter()
    seen: set[str] = set()
    ids, sources, text_chars, meta_ok, batch, characters = [], [], [], [], [], 0
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        for rec in read_all(cfg, ctx, provs, dropped, log):
            did = doc_id(rec.text)
            if cfg.dedup and did in seen:
                dropped["duplicate_text"] += 1
                continue
            seen.add(did)
            meta = meta_json(rec.meta)
            batch.append({"id": did, "text": rec.text, "source": rec.source, "url": rec.url, "meta": meta})
            ids.append(did)
            sources.append(rec.source)
            text_chars.append(len(rec.text.strip()))
            meta_ok.append(is_json_text(meta))
            characters += len(rec.text)
            if len(batch) == 2048:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                batch = []
        if batch:
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
    counts = _counts(len(ids), characters, sources)
    return provs, dropped, pd.DataFrame({"id": ids, "source": sources}), text_chars, meta_ok, counts


def _counts(documents: int, characters: int, sources: list[str], splits=None, labels=None) -> dict[str, Any]:
    """The manifest's counts; labeled corpora add ``by_split`` and ``by_label``."""
    counts = {"documents": documents, "characters": characters, "by_source": sources}
    if labels is not None:
        counts |= {"by_split": splits, "by_label": labels}
    return {k: v if isinstance(v, int) else dict(sorted(Counter(v).items())) for k, v in counts.items()}


def ingest(cfg: CorpusConfig, *, corpus: str, cache_dir: Path, out: Path, log=print,
           pin_file: Path | None = pins.PINS, task_labels: tuple[str, ...] = ()) -> IngestResult:
    """Read and normalise one corpus into the folder ``out``; returns its metrics, manifest and gate. Labeled
    corpora, which need a global view for label conflicts and class balance, are built in memory; their labels
    are checked against the gate's, else ``task_labels`` (``finetune.defaults.labels``: the head's label set, so
    a label fine-tuning would refuse is caught here, before any training)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from stages.quality.suites import Streamed, combine, documents_suite, labeled_suite

    t0 = time.perf_counter()
    ctx = SourceContext(cache_dir=cache_dir, corpus=corpus, pins=pins.load(pin_file) if pin_file else None)
    g = cfg.gate
    path = out / "documents.parquet"
    if cfg.labeled:
        rows, provs, dropped = collect_labeled(cfg, ctx, log=log)
        table = pa.Table.from_pylist(rows, schema=arrow_schema(True)) if rows else \
            arrow_schema(True).empty_table()
        pq.write_table(table, path, compression="zstd", row_group_size=2048)
        df = table.to_pandas()
        own = gate_labels(cfg)
        labels = own or tuple(task_labels) or tuple(sorted(df["label"].unique()))
        labels_key = (f"ingest.{corpus}.gate.labels" if cfg.gate.labels else "" if own else
                      "finetune.defaults.labels" if task_labels else "")
        tables, expectations = combine(
            documents_suite(df, min_rows=g.min_rows, max_rows=g.max_rows,
                            min_nonempty_ratio=g.min_nonempty_ratio, extra_columns=LABELED_COLUMNS[5:],
                            where=f"ingest.{corpus}.gate"),
            labeled_suite(df, labels=labels, splits=SPLITS, min_class_share=g.min_class_share,
                          max_class_share=g.max_class_share, where=f"ingest.{corpus}.gate",
                          labels_key=labels_key))
        counts = _counts(len(rows), sum(len(r["text"]) for r in rows), [r["source"] for r in rows],
                         [r["split"] for r in rows], [r["label"] for r in rows])
        del rows, table, df
    else:
        provs, dropped, light, text_chars, meta_ok, counts = stream_documents(cfg, ctx, path, log=log)
        tables, expectations = documents_suite(
            light, min_rows=g.min_rows, max_rows=g.max_rows, min_nonempty_ratio=g.min_nonempty_ratio,
            streamed=Streamed(text_chars, meta_ok, pq.read_schema(path).names), where=f"ingest.{corpus}.gate")
    manifest = build_manifest(cfg, corpus, counts, provs, dropped, path)
    write_json_atomic(out / "manifest.json", manifest)
    # No wall-clock figures in metrics: the same input and params give byte-identical files.
    metrics = manifest["counts"] | {"gate_passed": True}
    log(f"[ingest] {corpus}: made in {time.perf_counter() - t0:.1f}s")
    return IngestResult(metrics=metrics, gate=Gate(f"ingest-{corpus}", tables, expectations))


def pin_sources(cfg: CorpusConfig, *, corpus: str, cache_dir: Path, pin_file: Path = pins.PINS, log=print) -> list:
    """Fetch every source of ``corpus`` as the upstream serves it now and record what each got in ``pin_file``."""
    provs: list[Provenance] = []
    deque(read_all(cfg, SourceContext(cache_dir=cache_dir, corpus=corpus), provs, Counter(), log), maxlen=0)
    entries = [p.extra.get("pin") for p in provs]
    pins.write(corpus, entries, pin_file)
    log(f"[ingest] {corpus}: pinned {sum(e is not None for e in entries)} remote source(s) in {pin_file}")
    return entries


def portable_path(path: str) -> str:
    """A manifest path, relative to the working directory when inside it (the same on every clone; a folder
    linked into the workspace, such as a shared download cache, counts as inside), else under the home folder as
    ``~/...`` (no user name in records, cards and Bentos), else as it is."""
    p = Path(path)
    for base, prefix in ((Path.cwd, ""), (Path.home, "~/")):
        for how in (lambda q: Path(os.path.abspath(q)), Path.resolve):  # as named (through links), then resolved
            try:
                return prefix + how(p).relative_to(how(base())).as_posix()
            except (ValueError, RuntimeError):  # RuntimeError: no home folder, or a loop of links
                continue
    return p.as_posix()


def build_manifest(cfg, corpus, counts, provs, dropped, parquet_path: Path) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sources = [p.to_json() for p in provs]
    for f in [f for entry in sources for f in entry["files"]]:
        f["path"] = portable_path(f["path"])
    skipped = sum((p.skipped for p in provs), Counter())
    return {
        "corpus": corpus,
        "schema": pq.read_schema(parquet_path).names,
        "counts": {**counts, "dropped": dict(sorted(dropped.items())), "skipped": dict(sorted(skipped.items()))},
        "sources": sources,
        "outputs": {"documents.parquet": {"sha256": sha256_file(parquet_path),
                                          "rows": pq.ParquetFile(parquet_path).metadata.num_rows}},
        "config": dataclasses.asdict(cfg),
        "software": {"python": platform.python_version(), "pyarrow": pa.__version__},
    }


def local_source_paths(cfg: CorpusConfig, where: str) -> dict[str, Path]:
    """The local files and folders the corpus's sources read (a glob's matches), by params key."""
    out: dict[str, Path] = {}
    for i, src in enumerate(cfg.sources):
        raw = getattr(src, "path", None)
        if not raw:
            continue
        key = f"{where}.sources[{i}].path"
        found = sorted(glob.glob(raw, recursive=True)) if glob.has_magic(raw) else [raw]
        out.update({key if k == 0 else f"{key} #{k + 1}": Path(p) for k, p in enumerate(found)})
    return out

"""The clean stage's driver: a corpus through its recipe (``stages.cleaning.recipe``), each step one function here,
sharded over processes or Dask and memory bounded:

    read -> URL dedup -> C4 rules -> line table -> filters -> corpus-wide dedup -> task guard -> write

Every step that touches text is a task over shards (``stages.cleaning.tasks``); this process keeps only the
decisions that need the whole corpus, made from hashes, ids and counts (URL dedup, the line table's buckets,
MinHash clusters, the task guard's drops and TAPT's texts), so the result does not depend on the number of
workers. The steps exchange files through the run's ``Scratch``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from stages.cleaning.base import FilterStats
from stages.cleaning.readers import REPAIRED_UTF8, Piece, plan_pieces
from stages.cleaning.recipe import Recipe
from stages.cleaning.report import CleanResult, merger
from stages.cleaning.scratch import Scratch
from stages.cleaning.tasks import (FilterJob, FilterResult, GuardSpec, ReadJob, ReadResult, Rows, RulesJob,
                                   WriteJob, WriteResult, apply_filters, apply_rules, read_piece, write_part)
from stages.common.documents import arrow_schema
from stages.common.shards import open_shards

ROW_GROUP_ROWS = 2048  # rows per row group of the published documents.parquet (with a task)


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


@dataclass
class _Run:
    """One cleaning run's state: its recipe, where the tasks exchange files and run, and what they reported."""

    recipe: Recipe
    scratch: Scratch
    engine: Any
    log: Callable[[str], None]
    filters: dict[str, FilterStats] = field(default_factory=dict)
    rejects: dict[str, list] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def cfg(self):
        return self.recipe.cfg

    def map(self, task: Callable, jobs: list, consume: Callable[[Any], None], desc: str) -> None:
        """``task(scratch, recipe, job)`` for each job on the engine, the results consumed in order."""
        self.engine.map(task, [(self.scratch, self.recipe, j) for j in jobs], consume, desc=f"clean {desc}")

    def merge(self) -> Callable[[Any], None]:
        """A consumer of the tasks' filter reports (into ``filters`` as it is now)."""
        return merger(self.filters, self.rejects, self.cfg.reject_samples)

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        yield
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0


@dataclass
class _Corpus:
    """The read step's shards: their names and sizes, each shard's first row among its piece's valid records
    (``offsets``), and the input's counts."""

    shards: list[str]
    sizes: list[int]
    offsets: list[int]
    lengths: Any
    bytes_in: int
    drops: Counter
    repaired: int


def clean_corpus(records: Path, recipe: Recipe, *, work: Path, out_parquet: Path, task: TaskInput | None = None,
                 name: str = "clean", log: Callable[[str], None] = print,
                 while_mapping: Callable[[], None] | None = None) -> CleanResult:
    """Clean ``records`` (a Parquet or JSONL file or folder, read by the workers piece by piece) into
    ``out_parquet`` with ``recipe``. With ``task``, its guard and TAPT texts are applied and its leak re-check made.
    The tasks exchange their files through ``LMPIPE_SCRATCH``'s URL, else ``work`` itself (which under Dask must
    then be on a file system every worker sees at the same path); this process keeps its own files in ``work``.
    ``while_mapping`` is called once the shards go to other processes, for work that can overlap theirs."""
    from stages.cleaning import task_guard

    t_start = time.perf_counter()
    work.mkdir(parents=True, exist_ok=True)
    pieces = plan_pieces(records, 4 * recipe.cfg.shard_docs)
    # A missing or damaged task file stops the stage now, not after the corpus is cleaned.
    task_df = task_guard.read_task(task.path) if task is not None else None
    scratch = Scratch.for_run(work, name)
    scratch.check()
    log(f"[clean] recipe: {recipe.describe()}")
    with _worker_deaths(name), _cleared(scratch), open_shards(recipe.cfg.workers, name=name) as engine:
        run = _Run(recipe, scratch, engine, log)
        guard = None if task is None else GuardSpec(scratch.stage(task.path, f"task/{task.path.name}"),
                                                    tuple(task.cfg.holdout_splits), task.cfg.guard, task.cfg.tapt)
        if while_mapping is not None and engine.engine != "local":
            while_mapping()  # this process only waits on the workers from here on (the stage imports GX)
        with run.step("read"):
            corpus, reads = _read(run, pieces)
        with run.step("url_dedup"):
            drop = _url_dedup(run, corpus, reads)
        del reads
        with run.step("c4_rules"):
            rules = _c4_rules(run, corpus, drop)
        with run.step("line_table"):
            table = _line_table(run, rules)
        with run.step("filters"):
            jobs, found = _filters(run, rules, table, guard, len(corpus.lengths))
            duplicate_lines = _line_check(run, jobs, found)
        with run.step("corpus_dedup"):
            keep = _corpus_dedup(run, jobs, found)
            # The cleaned counts (stats.json) are the corpus-wide dedup's; the guard's drops are the task's own.
            n_out, chars_out, has_url = _kept(found, keep)
        with run.step("task_guard"):
            guarded, tapt = _task_guard(task, task_df, found, keep)
        with run.step("write"):
            written = _write(run, _parts(run, corpus, jobs, found, keep, guard, guarded, tapt), out_parquet, work,
                             _schema(has_url, task, tapt), jobs[0].feats_out)
    return CleanResult(docs_in=len(corpus.lengths) + sum(corpus.drops.values()), docs_out=n_out,
                       chars_in=int(corpus.lengths.sum()), chars_out=chars_out, bytes_in=corpus.bytes_in,
                       filters=run.filters,
                       rejects=[r for f in run.filters for r in run.rejects.get(f, [])],  # in filter order
                       input_drops=corpus.drops, seconds=time.perf_counter() - t_start, step_seconds=run.seconds,
                       gate_features=written.features, duplicate_lines=duplicate_lines,
                       task=_task_summary(task, task_df, guarded, tapt, written.rows) if task is not None else None,
                       task_leaks=_leaks(written, tapt) if task is not None else None,
                       input_repaired=Counter({REPAIRED_UTF8: corpus.repaired}))


def _read(run: _Run, pieces: list[Piece]) -> tuple[_Corpus, list[ReadResult]]:
    """The input's pieces read into shards by the workers."""
    import numpy as np

    reads: list[ReadResult] = []
    with _input_named(pieces, run.scratch) as sent:
        run.map(read_piece, [ReadJob(pc, f"{k:06d}") for k, pc in enumerate(sent)], reads.append, "read")
    drops: Counter = sum((r.drops for r in reads), Counter())
    repaired = drops.pop(REPAIRED_UTF8, 0)
    shards = [s for r in reads for s in r.shards]
    if not shards:
        raise EmptyInput(drops)
    starts = np.cumsum([0, *(len(r.lengths) for r in reads[:-1])]).tolist()
    return _Corpus(shards=shards, sizes=[n for r in reads for n in r.sizes],
                   offsets=[start for r, start in zip(reads, starts) for _ in r.shards],
                   lengths=np.concatenate([r.lengths for r in reads]), bytes_in=sum(r.bytes for r in reads),
                   drops=drops, repaired=repaired), reads


def _url_dedup(run: _Run, corpus: _Corpus, reads: list[ReadResult]) -> list[frozenset[int]]:
    """URL and exact-duplicate dedup over the pages within C4's length limit, decided here from ids, URL digests
    and timestamps: each shard's rows to drop (the C4-rules tasks apply it after page length)."""
    import numpy as np

    from stages.cleaning.dedup import url_dedup_arrays

    cfg, lengths = run.cfg, corpus.lengths
    drops = np.empty(0, dtype=np.int64)
    if cfg.url_dedup:
        limit = cfg.c4.max_page_chars
        fits = np.flatnonzero(lengths <= limit) if limit else np.arange(len(lengths))  # C4: length filter first
        col = {k: np.concatenate([getattr(r, k) for r in reads])[fits] for k in ("ids", "urls", "stamps", "md5")
               if k != "md5" or run.recipe.text_md5}
        drop, n_url, n_exact = url_dedup_arrays(col["ids"], col["urls"], col["stamps"], col.get("md5"),
                                                cfg.url_dedup_rule)
        del col
        drops = fits[drop]
        ch = int(lengths[fits].sum())
        stats = FilterStats(docs_in=len(fits), docs_out=len(fits) - len(drops), chars_in=ch,
                            chars_out=ch - int(lengths[drops].sum()))
        stats.dropped.update({k: v for k, v in {"duplicate_url": n_url, "exact_duplicate": n_exact}.items() if v})
        run.filters["url_dedup"] = stats
    starts = np.cumsum([0, *corpus.sizes[:-1]])
    where = np.searchsorted(starts, drops, side="right") - 1  # each dropped row's shard
    per_shard: list[set[int]] = [set() for _ in corpus.shards]
    for shard, row in zip(where.tolist(), (drops - starts[where]).tolist()):
        per_shard[shard].add(row)
    return [frozenset(s) for s in per_shard]


def _c4_rules(run: _Run, corpus: _Corpus, drop: list[frozenset[int]]) -> list[tuple[RulesJob, list[int] | None]]:
    """Each shard through the recipe's rules: the jobs and where each line-dedup bucket starts in their pairs."""
    pairs = run.cfg.line_dedup.enabled
    jobs = [RulesJob(s, f"rules-{i:06d}.parquet", f"pairs-{i:06d}.npy" if pairs else None, drop[i])
            for i, s in enumerate(corpus.shards)]
    url_stats = run.filters.pop("url_dedup", None)
    bounds: list[list[int] | None] = []
    merge = run.merge()

    def consume(result) -> None:
        merge(result.filters)
        bounds.append(result.bounds)

    run.map(apply_rules, jobs, consume, "c4_rules")
    if url_stats is not None:  # reported in C4's order: page length, URL dedup, line rules
        run.filters = {"page_length": run.filters["page_length"], "url_dedup": url_stats,
                       **{k: v for k, v in run.filters.items() if k != "page_length"}}
    return list(zip(jobs, bounds))


def _line_table(run: _Run, rules: list[tuple[RulesJob, list[int] | None]]) -> tuple[str, ...] | None:
    """C4's corpus-wide line-dedup table built by the workers (``stages.cleaning.dedup.line_table``); None
    without line dedup."""
    from stages.cleaning.dedup import line_table

    if not run.cfg.line_dedup.enabled:
        return None
    table, distinct = line_table(run.scratch, [job.pairs_out for job, _ in rules], [b for _, b in rules],
                                 run.cfg.line_dedup.buckets, run.engine.map)
    run.log(f"[clean] line dedup table: {distinct:,} distinct lines")
    return table


def _filters(run: _Run, rules: list[tuple[RulesJob, list[int] | None]], table: tuple[str, ...] | None,
             guard: GuardSpec | None, n_in: int) -> tuple[list[FilterJob], list[FilterResult]]:
    """Each shard through the recipe's filters (the read step's shard and the line pairs deleted once done)."""
    sample = run.cfg.language.second_opinion_docs
    # The gate's second language opinion runs on a content-hash sample (py3langid is slow on all).
    english_rate = min(1.0, sample / n_in) if sample else 1.0
    jobs = [FilterJob(job.shard_out, f"filtered-{i:06d}.parquet", f"bands-{i:06d}.npy", f"feat-{i:06d}.parquet",
                      f"lines-{i:06d}.npy", table, english_rate, guard,
                      tuple(f for f in (job.shard_in, job.pairs_out) if f is not None))
            for i, (job, _) in enumerate(rules)]
    found: list[FilterResult] = []
    merge = run.merge()

    def consume(result: FilterResult) -> None:
        merge(result.filters)
        found.append(result)

    run.map(apply_filters, jobs, consume, "filters")
    return jobs, found


def _line_check(run: _Run, jobs: list[FilterJob], found: list[FilterResult]) -> int | None:
    """The gate's independent count of output lines that repeat another output line, one bucket per task."""
    from stages.cleaning.dedup import bucket_entries, count_bucket

    if not run.cfg.line_dedup.enabled:
        return None
    counts: list[int] = []
    files, bounds = [j.lines_out for j in jobs], [f.line_bounds for f in found]
    run.engine.map(count_bucket, [(run.scratch, bucket_entries(files, bounds, b))
                                  for b in range(run.cfg.line_dedup.buckets)], counts.append, desc="clean line check")
    return sum(counts)


def _corpus_dedup(run: _Run, jobs: list[FilterJob], found: list[FilterResult]) -> list[Any]:
    """Each shard's mask of the documents that survive MinHash's near-duplicate clusters and, without line dedup,
    exact dedup of the cleaned texts (two pages can clean to the same text: the first is kept)."""
    import numpy as np

    from stages.cleaning.dedup import duplicates

    keep = [np.ones(len(f.lengths), dtype=bool) for f in found]
    if run.cfg.minhash.enabled:
        with run.scratch.files() as files:
            bands = np.concatenate([np.load(files.read(j.bands_out)) for j in jobs])
        ids = [i for f in found for i in f.ids]
        near = duplicates(ids, bands)
        del bands
        run.filters["minhash"] = FilterStats(docs_in=len(ids), docs_out=len(ids) - len(near),
                                             dropped=Counter({"near_duplicate": len(near)} if near else {}))
        for m, f in zip(keep, found):
            m &= [i not in near for i in f.ids]
    if not run.cfg.line_dedup.enabled:
        final, seen = FilterStats(), set()
        for m, f in zip(keep, found):
            for j, cid in enumerate(f.cleaned_ids):
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
            run.filters["exact_dedup"] = final
    return keep


def _task_guard(task: TaskInput | None, task_df, found: list[FilterResult], keep: list[Any]
                ) -> tuple[Counter, list[dict[str, Any]] | None]:
    """The guard's drops (applied to ``keep``) by reason, and the TAPT rows to add (None without a task), from
    what the filters tasks found."""
    from stages.cleaning import task_guard

    guarded: Counter = Counter()
    present: set[str] = set()
    for f, m in zip(found, keep):
        for i, why in f.leaks:
            if m[i]:
                guarded[why] += 1
                m[i] = False
    for f, m in zip(found, keep):
        present.update(cid for i, cid in f.tapt if m[i])
    if task is None:
        return guarded, None
    held = task_guard.held_out(task.path, tuple(task.cfg.holdout_splits))
    return guarded, task_guard.tapt_rows(task.cfg, task_df, held, present) if task.cfg.tapt else []


def _parts(run: _Run, corpus: _Corpus, jobs: list[FilterJob], found: list[FilterResult], keep: list[Any],
           guard: GuardSpec | None, guarded: Counter, tapt: list[dict[str, Any]] | None) -> list[WriteJob]:
    """The published rows in order, cut into parts. Each row has its block (``shard_docs`` consecutive valid input
    records); the file's layout follows the blocks, so its bytes never depend on the workers: without a task one
    row group per block; with one, groups of ROW_GROUP_ROWS rows, an Arrow chunk per block (one chunk for all when
    the guard dropped any: pandas' filter joined them) and one for TAPT."""
    import numpy as np

    shard_docs = run.cfg.shard_docs
    runs_all = []
    for i, (j, m, f) in enumerate(zip(jobs, keep, found)):
        ix = np.flatnonzero(m)
        runs_all.append(Rows(j.shard_out, ix, (corpus.offsets[i] + f.seq[ix]) // shard_docs, j.feats_out))
    if guard is not None and guard.guard and guarded:
        runs_all = [replace(r, blocks=np.zeros(len(r.index), dtype=np.int64)) for r in runs_all]
    extra_rows = tapt or []
    n_docs = sum(len(r.index) for r in runs_all)
    total = n_docs + len(extra_rows)
    if guard is None:
        blocks = np.concatenate([r.blocks for r in runs_all]) if runs_all else np.empty(0, dtype=np.int64)
        bounds = [*(np.flatnonzero(np.diff(blocks)) + 1).tolist(), total] if total else []
        group_rows = None
    else:
        per_part = ROW_GROUP_ROWS * max(1, (4 * shard_docs) // ROW_GROUP_ROWS)
        bounds, group_rows = [*range(per_part, total, per_part), total] if total else [], ROW_GROUP_ROWS
    parts: list[tuple[list[Rows], list[dict[str, Any]]]] = []
    cursor, s, off = 0, 0, 0  # the next row: run s, its off-th row
    for hi in bounds:
        rows, extra = [], []
        while cursor < hi and s < len(runs_all):
            take = min(hi - cursor, len(runs_all[s].index) - off)
            if take:
                r = runs_all[s]
                rows.append(Rows(r.shard, r.index[off:off + take], r.blocks[off:off + take], r.feats))
            cursor += take
            off += take
            if off == len(runs_all[s].index):
                s, off = s + 1, 0
        if cursor < hi:  # the TAPT rows come last
            extra = extra_rows[cursor - n_docs:hi - n_docs]
            cursor = hi
        parts.append((rows, extra))
    check = (guard.task, guard.holdout_splits) if guard is not None else None
    # Files no task reads any more (the filtered shards' inputs, the line hashes): each write task deletes a share.
    spent = [f for j in jobs for f in (j.shard_in, j.lines_out)]
    return [WriteJob(tuple(rows), tuple(extra), f"part-{k:06d}.parquet", check, group_rows,
                     tuple(spent[k::len(parts)])) for k, (rows, extra) in enumerate(parts)]


@dataclass(frozen=True)
class _Written:
    rows: int
    features: Any  # the published rows' gate features (pandas; TAPT's rows have none)
    leak: Any  # the re-check's reason for each published row, "" for none


def _write(run: _Run, jobs: list[WriteJob], out_parquet: Path, work: Path, schema, feats: str) -> _Written:
    """The parts written by the workers, then joined here by copying their bytes (a URL's parts copied here first)
    into ``out_parquet``, whose schema (and an empty file's) is ``schema``; ``feats``: a features file whose
    columns an empty result has."""
    import numpy as np
    import pandas as pd
    import pyarrow.parquet as pq

    from stages.cleaning.parquet_concat import concat

    written: list[WriteResult] = []
    run.map(write_part, jobs, written.append, "write")
    template = work / "template.parquet"
    pq.write_table(schema.empty_table(), template, compression="zstd")
    with run.scratch.files() as files:
        if jobs:
            concat([files.read(j.out) for j in jobs], out_parquet, like=template)
        else:
            template.replace(out_parquet)
        frames = [w.features for w in written if w.features is not None]
        features = pd.concat(frames, ignore_index=True) if frames else \
            pd.read_parquet(files.read(feats)).iloc[:0].drop(columns=["source_id"])
    rows = sum(w.rows for w in written)
    leak = np.full(rows, "", dtype=object)
    base = 0
    for w in written:
        for i, why in w.leaks:
            leak[base + i] = why
        base += w.rows
    return _Written(rows, features, leak)


def _kept(found: list[FilterResult], keep: list[Any]) -> tuple[int, int, bool]:
    """Documents and characters kept, and whether any kept document has a URL."""
    return (int(sum(m.sum() for m in keep)), int(sum(f.lengths[m].sum() for f, m in zip(found, keep))),
            any(bool(f.has_url[m].any()) for f, m in zip(found, keep)))


def _schema(has_url: bool, task: TaskInput | None, tapt: list[dict[str, Any]] | None):
    """The published file's schema: Arrow's, or with a task the one pandas gives it (:func:`_pandas_schema`)."""
    if task is None:
        return arrow_schema(False)
    return _pandas_schema(has_url, tapt if task.cfg.tapt else None)


def _leaks(written: _Written, tapt: list[dict[str, Any]]):
    """The gate's table of the re-check: one row per published document (index ``doc``: its id), column ``leak``."""
    import numpy as np
    import pandas as pd

    ids = written.features["id"].tolist() + [r["id"] for r in tapt]
    return pd.DataFrame({"leak": written.leak}, index=pd.Index(np.array(ids, dtype=object), name="doc"))


def _task_summary(task: TaskInput, task_df, guarded: Counter, tapt: list[dict[str, Any]], rows: int
                  ) -> dict[str, Any]:
    return {"task": str(task.path), "holdout_examples": len(task_df[task_df["split"].isin(task.cfg.holdout_splits)]),
            "guard": task.cfg.guard, "dropped": dict(guarded), "tapt_added": len(tapt), "documents_out": rows}

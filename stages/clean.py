"""Clean stage: C4's rules (plus optional Gopher and MinHash filters) over a corpus.

Under DVC (one corpus of params.yaml):

    python -m stages.clean --corpus general --input data/ingested/general/documents.parquet \
        --output data/cleaned/general --report reports/quality/clean-general.json \
        --metrics reports/metrics/clean-general.json --plot reports/plots/clean-general.csv

On anyone's data, with C4's defaults (JSONL, JSONL.gz/.zst or Parquet with a ``text`` field; optional
``url``, ``id``, ``timestamp``):

    python -m stages.clean --input PATH --output DIR

The output folder gets ``documents.parquet`` (id, text, source, url, meta; ``meta.raw_id`` is the input
id), ``stats.json`` (per filter: documents and lines dropped by reason, characters in and out) and
``rejects.jsonl`` (a sample of dropped documents with filter and reason). The core (:func:`clean`) writes them
into a temporary sibling of the folder and returns the quality gate; the stage's entry publishes the folder
only after the gate passed.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stages.cleaning.pipeline import CleanerConfig, CleanResult, EmptyInput, clean_corpus
from stages.cleaning.task_guard import TaskConfig
from stages.common.atomic import work_dir, write_bytes_atomic, write_json_atomic
from stages.common.cli import Stage
from stages.config import ConfigError, build, check, deep_merge, load_params, section

if TYPE_CHECKING:
    from stages.quality.gate import Gate


@dataclass(frozen=True, kw_only=True)
class CleanGateConfig:
    """Bounds of the post-cleaning quality gate (Great Expectations); a failed bound stops the stage."""

    min_rows: int = 1
    """Fewest documents that must survive cleaning."""
    min_kept_fraction: float = 0.0
    """Least share of input documents kept, in [0, 1]; lower means a rule or the input broke."""
    max_kept_fraction: float = 1.0
    """Most share of input documents kept, in [0, 1]; higher means the rules did not bite on noisy input."""
    min_english_agreement: float = 0.95
    """Least share of the sampled kept documents that py3langid, independently, also calls English (only with
    `language` on)."""

    def __post_init__(self) -> None:
        check(0 <= self.min_kept_fraction <= self.max_kept_fraction <= 1,
              "min_kept_fraction: need 0 <= min_kept_fraction <= max_kept_fraction <= 1")
        check(0 <= self.min_english_agreement <= 1, "min_english_agreement: must be in [0, 1]")


@dataclass(frozen=True, kw_only=True)
class CleanConfig:
    """A `clean.<corpus>` section merged over `clean.defaults`: the cleaner's keys (above), the task guard
    and TAPT texts, and the gate.
    """

    cleaner: CleanerConfig = field(default_factory=CleanerConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    """The task guard and task-adaptive texts: what of the labeled task this corpus must drop or add."""
    gate: CleanGateConfig = field(default_factory=CleanGateConfig)
    """The post-cleaning gate's bounds."""


def config_from_section(data: dict[str, Any], where: str) -> CleanConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping")
    data = dict(data)
    gate = build(CleanGateConfig, data.pop("gate", {}), f"{where}.gate")
    task = build(TaskConfig, data.pop("task", {}), f"{where}.task")
    allowed = {f.name for f in fields(CleanerConfig)} | {"gate", "task"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown key (allowed: {', '.join(sorted(allowed))})")
    return CleanConfig(cleaner=build(CleanerConfig, data, where), task=task, gate=gate)


def load_config(params_path: Path, corpus: str) -> CleanConfig:
    params = load_params(params_path)
    defaults = section(params, "clean.defaults")
    override = section(params, f"clean.{corpus}") or {}
    return config_from_section(deep_merge(defaults, override), f"clean.{corpus}")


# ------------------------------------------------------------------------------------------------ input
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
            yield from _parquet(f)
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


def _parquet(path: Path) -> Iterator[dict[str, Any]]:
    from stages.common.documents import open_parquet

    pf = open_parquet(path)
    if "text" not in pf.schema_arrow.names:
        raise ValueError(f"{path}: no 'text' column (columns: {', '.join(pf.schema_arrow.names)})")
    cols = [c for c in ("id", "text", "source", "url", "meta", "timestamp") if c in pf.schema_arrow.names]
    for batch in pf.iter_batches(batch_size=2048, columns=cols):
        yield from batch.to_pylist()


REPAIRED_UTF8 = "invalid_utf8_replaced"  # a count in ``drops`` of records kept, not dropped


def _jsonl(path: Path, drops) -> Iterator[dict[str, Any]]:
    from stages.sources.files import _open_binary

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


# ----------------------------------------------------------------------------------------------- output
def drops_csv(result: CleanResult) -> str:
    """One row per filter: documents and lines it dropped (the DVC bar plot of drops by filter)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["filter", "documents_dropped", "lines_dropped", "characters_removed"])
    for name, st in result.filters.items():
        w.writerow([name, sum(st.dropped.values()), sum(st.lines_dropped.values()), st.chars_in - st.chars_out])
    return buf.getvalue()


def timing_table(result: CleanResult) -> str:
    mb = result.bytes_in / 1e6
    lines = [f"[clean] {result.docs_in} documents in, {result.docs_out} kept; {mb:.1f} MB in "
             f"{result.seconds:.1f}s ({mb / result.seconds if result.seconds else 0:.2f} MB/s wall)"]
    for name, st in result.filters.items():
        lines.append(f"[clean]   {name:<18} in {st.docs_in:>8} out {st.docs_out:>8}  cpu {st.seconds:7.2f}s")
    lines.append("[clean]   phases: " + ", ".join(f"{k} {v:.1f}s" for k, v in result.phase_seconds.items()))
    return "\n".join(lines)


def clean(cfg: CleanConfig, *, input_path: Path, out: Path, cache_dir: Path, task_path: Path | None = None,
          name: str = "clean", log=print) -> tuple[CleanResult, Gate]:
    """Clean ``input_path`` into the folder ``out``; returns the result and the quality gate (``clean-<name>``)
    that must pass before the folder is published. With ``task_path`` (a labeled task's documents), the task
    guard and TAPT texts of ``cfg.task`` apply, and the gate fails on any document of the task's held-out
    splits in the output."""
    from collections import Counter

    from stages.cleaning import task_guard

    from stages.cleaning.badwords import load_words
    from stages.quality.clean_suite import cleaned_suite
    from stages.quality.gate import Expect, Gate
    from stages.quality.gate import preload as preload_gx

    words: list[str] = []
    lists: dict[str, Any] = {}
    if cfg.cleaner.badwords.enabled:
        words, info = load_words(cfg.cleaner.badwords, cache_dir)
        pkg = info["package"]
        lists["badwords"] = {"package": f"{pkg['name']}@{pkg['version']}", "integrity": pkg["integrity"],
                             "sha256": info["file"]["sha256"], "words": info["words"], "licence": info["licence"]}
    if (cfg.task.guard or cfg.task.tapt) and task_path is None:
        raise ValueError("clean: task.guard / task.tapt need the task's documents (--task PATH)")
    if task_path is not None and not task_path.is_file():
        raise FileNotFoundError(f"{task_path}: no task data (run ingest@task first)")
    if task_path is not None:
        from stages.cleaning.task_guard import read_task

        read_task(task_path)  # a damaged task file stops the stage now, not after the whole corpus is cleaned
    drops: Counter = Counter()
    with work_dir(out) as work:
        try:
            result = clean_corpus(read_records(input_path, drops), cfg.cleaner, work=Path(work),
                                  out_parquet=out / "documents.parquet", words=words, log=log,
                                  name=f"clean@{name}", while_mapping=preload_gx)
        except EmptyInput as exc:
            skipped = Counter({k: v for k, v in drops.items() if k != REPAIRED_UTF8}) + Counter(exc.args[0])
            why = ", ".join(f"{v} {k}" for k, v in sorted(skipped.items())) or "the input holds no record"
            raise ValueError(f"{input_path}: no document to clean: no record has a text string ({why}); "
                             "expected JSON lines or Parquet rows with a 'text' field") from None
        result.input_repaired[REPAIRED_UTF8] = drops.pop(REPAIRED_UTF8, 0)
        if result.input_repaired[REPAIRED_UTF8]:
            log(f"[clean] {input_path}: {result.input_repaired[REPAIRED_UTF8]} records had invalid UTF-8; each bad "
                "byte sequence became U+FFFD (stats.json: input_repaired)")
        result.input_drops.update(drops)
        result.docs_in += sum(drops.values())
        result.word_lists = lists
        if task_path is not None:
            applied = task_guard.apply(cfg.task, out / "documents.parquet", task_path)
            gone = applied.pop("dropped_ids")
            if result.gate_features is not None and gone:  # the C4 checks cover what is published
                result.gate_features = result.gate_features[~result.gate_features["id"].isin(gone)]
            result.task = applied
            log(f"[clean] task guard: {sum(applied['dropped'].values())} documents dropped "
                f"{applied['dropped'] or ''}; TAPT: {applied['tapt_added']} task training texts added")
        log(timing_table(result))
        write_json_atomic(out / "stats.json", result.stats_json())
        write_bytes_atomic(out / "rejects.jsonl", "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n"
                                                          for r in result.rejects).encode("utf-8"))
        import pyarrow.parquet as pq

        columns = pq.read_schema(out / "documents.parquet").names
        tables, expectations = cleaned_suite(result.gate_features, columns=columns,
                                             duplicate_lines=result.duplicate_lines, cfg=cfg,
                                             kept_fraction=result.stats_json()["kept_fraction"])
        if task_path is not None:  # re-measured on the file to publish, whatever the guard did
            tables["task_guard"] = task_guard.leaks(out / "documents.parquet", task_path, cfg.task.holdout_splits)
            expectations.append(Expect(table="task_guard", kind="ExpectColumnValuesToBeInSet",
                                       kwargs={"column": "leak", "value_set": [""]}))
    return result, Gate(f"clean-{name}", tables, expectations)


def _arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--input", type=Path, required=True, help="Parquet or JSONL(.gz/.zst) with a text field")
    ap.add_argument("--output", type=Path, required=True, help="output folder (replaced atomically)")
    ap.add_argument("--corpus", help="params section clean.<corpus> (default: C4's defaults)")
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--cache-dir", type=Path, default=Path(".cache/sources"), help="download cache (bad words)")
    ap.add_argument("--report", type=Path, help="gate report JSON (default: OUTPUT.gate.json beside OUTPUT)")
    ap.add_argument("--metrics", type=Path, help="metrics JSON for DVC (a copy of stats.json)")
    ap.add_argument("--plot", type=Path, help="CSV of drops by filter for DVC plots")
    ap.add_argument("--workers", type=int, help="override the number of worker processes (0 = all cores)")
    ap.add_argument("--task", type=Path, help="labeled task documents: guard against its held-out splits "
                    "(and add its training texts when task.tapt is on)")


def _run(args: argparse.Namespace, log) -> dict:
    import dataclasses

    cfg = load_config(args.params, args.corpus) if args.corpus else CleanConfig()
    if args.workers is not None:
        cfg = dataclasses.replace(cfg, cleaner=dataclasses.replace(cfg.cleaner, workers=args.workers))
    report = args.report or args.output.parent / f"{args.output.name}.gate.json"
    result, gate = clean(cfg, input_path=args.input, out=args.staged.path, cache_dir=args.cache_dir,
                         task_path=args.task, name=args.output.name, log=log)
    return {report: gate, args.metrics: result.stats_json(), args.plot: drops_csv(result)}


def _stage() -> Stage:
    from stages.quality.gate import GateFailed
    from stages.sources.base import SourceError

    return Stage("stages.clean", "Clean a corpus with C4's rules.", _arguments, _run,
                 inputs=("input", "task", "params", "cache-dir"), folder="output", outputs=("report", "metrics", "plot"),
                 errors=(ConfigError, SourceError, GateFailed, FileNotFoundError, ValueError))


def main(argv: Iterable[str] | None = None) -> int:
    return _stage().main(argv)


if __name__ == "__main__":
    from stages.common.cli import entry

    sys.exit(entry(main))

"""Clean stage: C4's rules (plus optional Gopher and MinHash filters) over a corpus: one ``--corpus`` of params.yaml
or, without it, anyone's JSONL(.gz/.zst) or Parquet (a ``text`` field) with C4's defaults. The output folder gets
``documents.parquet`` (``meta.raw_id`` is the input id), ``stats.json`` (per filter: drops by reason, characters in
and out) and ``rejects.jsonl`` (a sample of dropped documents), published only after its gate passed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from stages.cleaning.c4 import load_words
from stages.cleaning.config import CleanConfig, load_config
from stages.cleaning.pipeline import EmptyInput, TaskInput, WorkerLost, clean_corpus
from stages.cleaning.readers import REPAIRED_UTF8
from stages.cleaning.recipe import Recipe
from stages.cleaning.report import CleanResult
from stages.common.atomic import work_dir, write_bytes_atomic, write_json_atomic
from stages.common.cli import Stage, entry
from stages.config import ConfigError
from stages.quality.gate import Gate, GateFailed
from stages.quality.gate import preload as preload_gx
from stages.sources.base import SourceError


def clean(cfg: CleanConfig, *, input_path: Path, out: Path, cache_dir: Path, task_path: Path | None = None,
          name: str = "clean", where: str = "", log=print) -> tuple[CleanResult, Gate]:
    """Clean ``input_path`` into the folder ``out``; the result and the gate ``clean-<name>`` that must pass before
    it is published. ``task_path``: a labeled task's documents for ``cfg.task``'s guard and TAPT texts; ``where``:
    the params section of the gate's bounds, named by a failure."""
    from stages.quality.clean_suite import cleaned_suite

    words: list[str] = []
    lists: dict[str, Any] = {}
    if cfg.cleaner.badwords.enabled:
        words, lists["badwords"] = load_words(cfg.cleaner.badwords, cache_dir)
    if (cfg.task.guard or cfg.task.tapt) and task_path is None:
        raise ValueError("clean: task.guard / task.tapt need the task's documents (--task PATH)")
    documents = out / "documents.parquet"
    with work_dir(out) as work:
        try:
            result = clean_corpus(input_path, Recipe(cfg.cleaner, tuple(words)), work=Path(work),
                                  out_parquet=documents, log=log, name=f"clean@{name}", while_mapping=preload_gx,
                                  task=TaskInput(cfg.task, task_path) if task_path is not None else None)
        except EmptyInput as exc:
            why = ", ".join(f"{v} {k}" for k, v in sorted(exc.args[0].items())) or "the input holds no record"
            raise ValueError(f"{input_path}: no document to clean: no record has a text string ({why}); "
                             "expected JSON lines or Parquet rows with a 'text' field") from None
        if result.input_repaired[REPAIRED_UTF8]:
            log(f"[clean] {input_path}: {result.input_repaired[REPAIRED_UTF8]} records had invalid UTF-8; each bad "
                "byte sequence became U+FFFD (stats.json: input_repaired)")
        result.word_lists = lists
        if result.task is not None:
            log(f"[clean] task guard: {sum(result.task['dropped'].values())} documents dropped "
                f"{result.task['dropped'] or ''}; TAPT: {result.task['tapt_added']} task training texts added")
        log(result.timing_table())
        write_json_atomic(out / "stats.json", result.stats_json())
        write_bytes_atomic(out / "rejects.jsonl", "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n"
                                                          for r in result.rejects).encode("utf-8"))
        import pyarrow.parquet as pq

        tables, expectations = cleaned_suite(result.gate_features, columns=pq.read_schema(documents).names,
                                             duplicate_lines=result.duplicate_lines, cfg=cfg,
                                             kept_fraction=result.stats_json()["kept_fraction"],
                                             task_leaks=result.task_leaks, where=where)
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
    cfg = load_config(args.params, args.corpus) if args.corpus else CleanConfig()
    if args.workers is not None:
        cfg = dataclasses.replace(cfg, cleaner=dataclasses.replace(cfg.cleaner, workers=args.workers))
    report = args.report or args.output.parent / f"{args.output.name}.gate.json"
    result, gate = clean(cfg, input_path=args.input, out=args.staged.path, cache_dir=args.cache_dir,
                         task_path=args.task, name=args.output.name,
                         where=f"clean.{args.corpus}.gate" if args.corpus else "", log=log)
    return {report: gate, args.metrics: result.stats_json(), args.plot: result.drops_csv()}


STAGE = Stage("stages.clean", "Clean a corpus with C4's rules.", _arguments, _run,
              inputs=("input", "task", "params", "cache-dir"), folder="output", outputs=("report", "metrics", "plot"),
              errors=(ConfigError, SourceError, GateFailed, FileNotFoundError, ValueError, WorkerLost))
main = STAGE.main


if __name__ == "__main__":
    sys.exit(entry(main))

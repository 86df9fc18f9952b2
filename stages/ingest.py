"""Ingest stage: bring one corpus (general, domain or task) into the common Parquet schema.

The core (:func:`stages.sources.ingest.ingest`) writes ``documents.parquet`` and ``manifest.json``; the stage's entry
checks the gate, then publishes the folder.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stages.common.atomic import refuse_overlap
from stages.common.cli import Stage, entry
from stages.config import ConfigError
from stages.quality.gate import GateFailed
from stages.sources import SourceError
from stages.sources.config import head_labels, load_config
from stages.sources.ingest import ingest, local_source_paths


def _arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--corpus", required=True, help="section name under ingest: in params (general, domain, task)")
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--cache-dir", type=Path, default=Path(".cache/sources"))
    ap.add_argument("--output", type=Path, required=True, help="output folder (replaced atomically)")
    ap.add_argument("--report", type=Path, required=True, help="gate report JSON")
    ap.add_argument("--metrics", type=Path, required=True, help="metrics JSON (DVC metrics)")


def _run(args: argparse.Namespace, log) -> dict:
    cfg = load_config(args.params, args.corpus)
    # Local sources named in params are inputs too: an output over them would delete the user's files.
    refuse_overlap({"output": args.output, "report": args.report, "metrics": args.metrics},
                   local_source_paths(cfg, f"ingest.{args.corpus}"))
    # the head's label set: in a labeled corpus, a label fine-tuning would refuse is refused here, before training
    labels = head_labels(args.params)
    task_labels = labels if cfg.labeled else ()
    result = ingest(cfg, corpus=args.corpus, cache_dir=args.cache_dir, out=args.staged.path, log=log,
                    task_labels=task_labels)
    c = result.metrics
    log(f"[ingest] {args.corpus}: {c['documents']} documents, {c['characters']:,} characters -> {args.output}")
    return {args.report: result.gate, args.metrics: result.metrics}


STAGE = Stage("stages.ingest", __doc__.split("\n\n")[0], _arguments, _run, inputs=("params", "cache-dir"),
              folder="output", outputs=("report", "metrics"), errors=(ConfigError, SourceError, GateFailed, ValueError))
main = STAGE.main


if __name__ == "__main__":
    sys.exit(entry(main))

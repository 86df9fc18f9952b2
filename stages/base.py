"""Published-checkpoint stage (``base@<name>``): fetch a base of params ``published.bases``, check it serves its
paradigm, and record every file's SHA-256 and its licence.

    python -m stages.base --name minilm --params params.yaml --cache-dir .cache/bases \
        --output data/base/minilm --metrics reports/metrics/base-minilm.json

The folder holds the checkpoint's files as published (``AutoModelFor...`` and ``AutoTokenizer`` load it) plus
``base.json`` (source, files, licence, facts) and ``card.json`` (the facts the model cards downstream carry). pins.yaml's
``base-<name>`` entry is checked on every run (a moved upstream is refused, naming the files); ``--pin`` records the
current state there instead (``lm-pipeline pin base-<name>``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stages.common.atomic import write_json_atomic
from stages.common.cli import Stage, entry
from stages.config import ConfigError, build
from stages.published.config import PublishedBase, load_base
from stages.published.core import fetch_base
from stages.published.family import BaseError
from stages.sources import SourceError
from stages.sources.pins import PINS


def _arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--name", required=True, help="a key of published.bases")
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--cache-dir", type=Path, default=Path(".cache/bases"), help="downloads (wheels, hub snapshots)")
    ap.add_argument("--pins", type=Path, default=PINS)
    ap.add_argument("--pin", action="store_true", help="record what the source serves now in the pin file")
    ap.add_argument("--output", type=Path, required=True, help="the base's folder (replaced atomically)")
    ap.add_argument("--metrics", type=Path)


def _run(args: argparse.Namespace, log) -> dict:
    base = build(PublishedBase, load_base(args.params, args.name, "paradigm", "source"), f"published.bases.{args.name}")
    manifest = fetch_base(base, name=args.name, out=args.staged.path, cache=args.cache_dir, pins=args.pins,
                          repin=args.pin, log=log)
    write_json_atomic(args.staged.path / "base.json", manifest)
    return {args.metrics: {"name": args.name, "paradigm": base.paradigm, "files": len(manifest["files"]),
                           "parameters": manifest["facts"]["parameters"], "licence": manifest["licence"],
                           "fresh_head": manifest["facts"]["fresh_head"], "files_sha256": manifest["files_sha256"]}}


STAGE = Stage("stages.base", "Fetch and pin a published checkpoint.", _arguments, _run,
              inputs=("params", "pins", "cache-dir"), folder="output", outputs=("metrics",),
              errors=(ConfigError, SourceError, BaseError, FileNotFoundError))
main = STAGE.main


if __name__ == "__main__":
    sys.exit(entry(main))

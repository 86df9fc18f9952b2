"""Pin the remote sources: fetch what each corpus's sources serve now and record it in pins.yaml.

Ingest refuses a remote source whose upstream no longer serves its pinned bytes; this command accepts the new state.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stages.common.cli import Stage, entry
from stages.config import ConfigError, load_params
from stages.sources import SourceError
from stages.sources.config import load_config
from stages.sources.ingest import pin_sources
from stages.sources.pins import PINS


def _arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("corpora", nargs="*", help="sections under ingest: in params (default: all)")
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--cache-dir", type=Path, default=Path(".cache/sources"))
    ap.add_argument("--pins", type=Path, default=PINS, help="the pin file rewritten (default: pins.yaml)")


def _run(args: argparse.Namespace, log) -> int:
    for corpus in args.corpora or list(load_params(args.params).get("ingest", {})):
        pin_sources(load_config(args.params, corpus), corpus=corpus, cache_dir=args.cache_dir, pin_file=args.pins)
    return 0


STAGE = Stage("stages.pin", __doc__.split("\n\n")[0], _arguments, _run, errors=(ConfigError, SourceError))
main = STAGE.main


if __name__ == "__main__":
    sys.exit(entry(main))

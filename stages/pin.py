"""Pin the remote sources: fetch what each corpus's sources serve now and record it in pins.yaml.

Ingest refuses a remote source whose upstream no longer serves its pinned bytes; this command accepts the new state.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from stages.common.cli import Stage, entry
from stages.config import ConfigError, build, load_params
from stages.published.config import PublishedBase, load_base
from stages.published.core import fetch_base
from stages.published.family import BaseError
from stages.published.fetch import pin_key
from stages.sources import SourceError
from stages.sources.config import load_config
from stages.sources.ingest import pin_sources
from stages.sources.pins import PINS


def _arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("corpora", nargs="*", help="sections under ingest: in params, or base-<name> for a published "
                                               "base of published.bases (default: all of both)")
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--cache-dir", type=Path, default=Path(".cache/sources"))
    ap.add_argument("--base-cache-dir", type=Path, default=Path(".cache/bases"), help="the base stage's downloads")
    ap.add_argument("--pins", type=Path, default=PINS, help="the pin file rewritten (default: pins.yaml)")


def _run(args: argparse.Namespace, log) -> int:
    params = load_params(args.params)
    bases = {pin_key(name): name for name in ((params.get("published") or {}).get("bases") or {})}
    for corpus in args.corpora or [*params.get("ingest", {}), *bases]:
        if corpus in bases:  # a published checkpoint: fetched into a scratch folder, every file's SHA-256 recorded
            base = build(PublishedBase, load_base(args.params, bases[corpus], "paradigm", "source"),
                         f"published.bases.{bases[corpus]}")
            with tempfile.TemporaryDirectory() as tmp:
                fetch_base(base, name=bases[corpus], out=Path(tmp), cache=args.base_cache_dir, pins=args.pins,
                           repin=True, log=log)
            continue
        pin_sources(load_config(args.params, corpus), corpus=corpus, cache_dir=args.cache_dir, pin_file=args.pins)
    return 0


STAGE = Stage("stages.pin", __doc__.split("\n\n")[0], _arguments, _run, errors=(ConfigError, SourceError, BaseError))
main = STAGE.main


if __name__ == "__main__":
    sys.exit(entry(main))

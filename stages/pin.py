"""Pin the remote sources: fetch what each corpus's sources serve now and record it in pins.yaml.

Ingest refuses a remote source whose upstream no longer serves its pinned bytes; this command accepts the new state.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stages.common.cli import entry
from stages.config import ConfigError, load_params
from stages.sources import SourceError
from stages.sources.config import load_config
from stages.sources.ingest import pin_sources
from stages.sources.pins import PINS


def main(argv: list[str] | None = None) -> int:
    prog = sys.argv[0] if sys.argv[0].startswith("lm-pipeline") else "python -m stages.pin"
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("corpora", nargs="*", help="sections under ingest: in params (default: all)")
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--cache-dir", type=Path, default=Path(".cache/sources"))
    ap.add_argument("--pins", type=Path, default=PINS, help="the pin file rewritten (default: pins.yaml)")
    args = ap.parse_args(argv)
    try:
        corpora = args.corpora or list(load_params(args.params).get("ingest", {}))
        for corpus in corpora:
            pin_sources(load_config(args.params, corpus), corpus=corpus, cache_dir=args.cache_dir, pin_file=args.pins)
    except (ConfigError, SourceError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(entry(main))

"""Token-dataset stage (``tokens@<paradigm>``): tokenize the cleaned corpora and pack them into blocks.

    python -m stages.tokens --paradigm gpt --params params.yaml --tokenizer data/tokenizers/gpt \
        --corpus general=data/cleaned/general/documents.parquet --corpus domain=data/cleaned/domain/documents.parquet \
        --output data/tokens/gpt --report reports/quality/tokens-gpt.json --metrics reports/metrics/tokens-gpt.json

The folder holds ``<corpus>/{train,heldout}.npy`` (2-D block arrays, memory-mapped by training) and
``manifest.json`` (layout, special ids, hashes, counts); the split is the tokenizer stage's. With ``LMPIPE_DASK``
set the batches are encoded on a Dask cluster (the same bytes). The folder is published only after its gate
(``stages.quality.tokens_suite``) passed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stages.common.cli import Stage, entry, named_path
from stages.config import ConfigError
from stages.quality.gate import GateFailed
from stages.tokenization.config import load_tokens_config
from stages.tokenization.datasets import make_token_datasets
from stages.tokenization.trainers import PARADIGMS


def _arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--paradigm", choices=PARADIGMS, required=True)
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--tokenizer", type=Path, required=True, help="tokenizer folder from the tokenizer stage")
    ap.add_argument("--corpus", type=named_path, action="append", default=[],
                    help="NAME=PATH of a documents Parquet file (repeatable)")
    ap.add_argument("--output", type=Path, required=True, help="output folder (replaced atomically)")
    ap.add_argument("--report", type=Path, help="gate report JSON (default: OUTPUT.gate.json beside OUTPUT)")
    ap.add_argument("--metrics", type=Path, help="metrics JSON for DVC")


def _run(args: argparse.Namespace, log) -> dict:
    cfg, split = load_tokens_config(args.params, args.paradigm)
    report = args.report or args.output.parent / f"{args.output.name}.gate.json"
    metrics, gate = make_token_datasets(cfg, split, paradigm=args.paradigm, tokenizer_dir=args.tokenizer,
                                        corpora=dict(args.corpus), out=args.staged.path, log=log)
    return {report: gate, args.metrics: metrics}


STAGE = Stage("stages.tokens", "Tokenize and pack corpora into blocks.", _arguments, _run,
              inputs=("params", "tokenizer", "corpus"), folder="output", outputs=("report", "metrics"),
              errors=(ConfigError, GateFailed, FileNotFoundError, ValueError))
main = STAGE.main


if __name__ == "__main__":
    sys.exit(entry(main))

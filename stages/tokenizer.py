"""Tokenizer stage (``tokenizer@<paradigm>``): train one paradigm's tokenizer on the cleaned corpora and measure it.

    python -m stages.tokenizer --paradigm bert --params params.yaml \
        --train data/cleaned/general/documents.parquet \
        --eval general=data/cleaned/general/documents.parquet --eval domain=data/cleaned/domain/documents.parquet \
        --output data/tokenizers/bert --metrics reports/metrics/tokenizer-bert.json

Trains on the ``train`` side of the split (``split`` in params.yaml); measures fertility (tokens per word),
unknown rate and vocabulary use on the held-out side of every ``--eval`` corpus. The folder loads with
``AutoTokenizer.from_pretrained``; its ``provenance.json`` records the inputs' hashes, config and counts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stages.common.cli import Stage, entry, named_path
from stages.config import ConfigError
from stages.tokenization.tokenizer import TokenizerCheckFailed, load_tokenizer_config, train_tokenizer
from stages.tokenization.trainers import PARADIGMS


def _arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--paradigm", choices=PARADIGMS, required=True)
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--train", type=Path, action="append", required=True,
                    help="documents Parquet file to train on (its train split; repeatable: the corpora in order)")
    ap.add_argument("--eval", type=named_path, action="append", default=[],
                    help="NAME=PATH: a documents Parquet file whose held-out split is measured (repeatable)")
    ap.add_argument("--output", type=Path, required=True, help="tokenizer folder (replaced atomically)")
    ap.add_argument("--metrics", type=Path, help="metrics JSON for DVC")


def _run(args: argparse.Namespace, log) -> dict:
    cfg, split = load_tokenizer_config(args.params, args.paradigm)
    metrics = train_tokenizer(cfg, split, paradigm=args.paradigm, train_paths=args.train,
                              eval_paths=dict(args.eval), out=args.staged.path, log=log)
    return {args.metrics: metrics}


STAGE = Stage("stages.tokenizer", "Train one paradigm's tokenizer.", _arguments, _run,
              inputs=("params", "train", "eval"), folder="output", outputs=("metrics",),
              errors=(ConfigError, TokenizerCheckFailed, FileNotFoundError, ValueError))
main = STAGE.main


if __name__ == "__main__":
    sys.exit(entry(main))

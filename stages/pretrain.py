"""Pre-training stage (``pretrain@<paradigm>``) and domain-adaptive pre-training (``dapt@<paradigm>``).

    python -m stages.pretrain --paradigm gpt --params params.yaml --section pretrain \
        --tokens data/tokens/gpt --corpus general --tokenizer data/tokenizers/gpt \
        --output models/pretrain/gpt --checkpoints checkpoints/pretrain/gpt \
        --metrics reports/metrics/pretrain-gpt.json --plot reports/plots/pretrain-gpt.tsv

``--section dapt --corpus domain --init models/pretrain/gpt`` continues a general model on the domain corpus
(Gururangan et al. 2020). Data-parallel under ``torchrun`` / ``accelerate launch`` (``stages.training.launch``);
a killed run resumes from ``--checkpoints``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stages.common.cli import Stage, entry
from stages.config import ConfigError
from stages.published.config import load_base
from stages.tokenization.trainers import PARADIGMS
from stages.training.checkpoint import CheckpointError
from stages.training.config import load_base_config, load_config, match_flops
from stages.training.launch import relaunch
from stages.training.trainer import TrainingDiverged
from stages.training.pretrain import PretrainJob, run


def _arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--paradigm", choices=PARADIGMS, required=True)
    ap.add_argument("--section", choices=("pretrain", "dapt"), default="pretrain", help="params section to read")
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--tokens", type=Path, required=True, help="token-dataset folder of this paradigm")
    ap.add_argument("--corpus", default="general", help="corpus inside the token dataset")
    ap.add_argument("--tokenizer", type=Path, required=True)
    ap.add_argument("--init", type=Path, help="continue this saved model (DAPT) instead of a fresh one")
    ap.add_argument("--base", help="a key of published.bases: DAPT of that published checkpoint (--init its folder), "
                                   "with dapt.defaults and the base's own dapt settings")
    ap.add_argument("--output", type=Path, required=True, help="model folder (replaced atomically)")
    ap.add_argument("--checkpoints", type=Path, help="checkpoint folder (resumed when the run matches)")
    ap.add_argument("--metrics", type=Path)
    ap.add_argument("--plot", type=Path, help="TSV of the training curve for DVC plots")
    ap.add_argument("--live", type=Path, help="live log folder (DVCLive: the curve while it trains, tokens/s, "
                                              "MFU; untracked, see stages.common.live)")
    ap.add_argument("--sources", type=Path, nargs="*", default=[],
                    help="ingest manifests (data/ingested/<corpus>/manifest.json) of the corpora behind the model: "
                         "their sources and licences go into its model card (README.md)")
    ap.add_argument("--variant", help="a compare.objectives entry's name: train with its objective and settings "
                                       "(the objective comparison; see params.yaml's compare section)")
    ap.add_argument("--match-flops", type=Path, help="a saved model folder: train on its run's FLOPs "
                                                     "(its tokens x FLOPs per token) instead of the token budget")
    ap.add_argument("--no-progress", action="store_true")


class _OutOfMemory(RuntimeError):
    """A GPU out-of-memory error, worded with the setting to lower."""


def _run(args: argparse.Namespace, log) -> dict | int:
    code = relaunch("stages.pretrain", args.argv)  # LMPIPE_TRAIN_PROCESSES > 1: N processes under torchrun
    if code is not None:
        return code
    if args.base is not None:
        if args.section != "dapt" or args.init is None or args.variant is not None:
            raise ValueError("--base takes --section dapt and --init (the base's folder), not --variant")
        paradigm = load_base(args.params, args.base, "paradigm").get("paradigm")
        if paradigm != args.paradigm:
            raise ValueError(f"--base {args.base}: published.bases.{args.base}.paradigm is {paradigm}, "
                             f"not --paradigm {args.paradigm}")
        cfg = load_base_config(args.params, args.base)
    else:
        cfg = load_config(args.params, args.section, args.paradigm, args.variant)
    if args.match_flops is not None:
        cfg = match_flops(cfg, args.match_flops)
    import torch

    try:
        job = PretrainJob(args.paradigm, args.section, args.tokens, args.corpus, args.tokenizer, args.init,
                          tuple(args.sources or ()))
        outcome = run(cfg, job, out=lambda: args.staged.path, checkpoint_dir=args.checkpoints, log=log,
                      progress=not args.no_progress, live_dir=args.live)
    except torch.OutOfMemoryError as exc:  # GPU out of memory: say which setting to lower
        raise _OutOfMemory(f"out of GPU memory ({str(exc).splitlines()[0]}); lower {args.section}."
                           f"{args.paradigm}.train.micro_batch and raise grad_accum to keep the global batch"
                           ) from None
    if outcome is None:  # a process other than the first of a multi-process run: the first one publishes
        return {}
    metrics, plot = outcome
    return {args.metrics: metrics, args.plot: plot}


STAGE = Stage("stages.pretrain", "Pre-train (or DAPT) one paradigm.", _arguments, _run,
              inputs=("params", "tokens", "tokenizer", "init", "sources", "match_flops"),
              folder="output", outputs=("checkpoints", "metrics", "plot", "live"),
              errors=(ConfigError, CheckpointError, TrainingDiverged, _OutOfMemory, FileNotFoundError, ValueError))
main = STAGE.main


if __name__ == "__main__":
    sys.exit(entry(main))

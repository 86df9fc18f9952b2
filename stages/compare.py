"""The objective comparison (``compare-report@objectives`` in experiments/compare/dvc.yaml): the objectives of
``compare.objectives`` (pre-trained and fine-tuned by their own stages there) side by side with each paradigm's own
objective and random init at equal FLOPs, fine-tuned again on ``compare.sizes`` labels: one table per paradigm and a
verdict from the numbers. ``profiles/compare.yaml`` fills the list; ``compare.reports: [objectives]`` adds this stage.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stages.common.cli import Stage, entry
from stages.config import ConfigError
from stages.evaluation.compare import compare_all, markdown, metrics_json
from stages.evaluation.config import load_compare_config
from stages.finetuning.core import read_task


def _arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--task", type=Path, required=True)
    ap.add_argument("--compare", type=Path, required=True, help="folder of the comparison's pretrain/, dapt/, finetune/")
    ap.add_argument("--finetuned", type=Path, required=True, help="the default run's <paradigm>-<init> fine-tunes")
    ap.add_argument("--pretrained", type=Path, required=True, help="the default run's general models")
    ap.add_argument("--dapt", type=Path, required=True, help="the default run's domain-adapted models")
    ap.add_argument("--report", type=Path, required=True)
    ap.add_argument("--metrics", type=Path, required=True)


def _run(args: argparse.Namespace, log) -> dict:
    cfg = load_compare_config(args.params)
    if not cfg.objectives:
        raise ConfigError("compare.objectives: empty, nothing to compare (profiles/compare.yaml lists some)")
    result = compare_all(cfg, df=read_task(args.task), compare=args.compare, finetuned=args.finetuned,
                         pretrained=args.pretrained, dapt=args.dapt, log=log)
    for v in result["verdict"]:
        log(f"[compare] {v['paradigm']} at {v['train_examples']} labels: {v['best']} "
            f"({v['test_macro_f1']:.3f} ± {v['test_macro_f1_std']:.3f})")
    return {args.report: markdown(result), args.metrics: metrics_json(result)}


STAGE = Stage("stages.compare", "Compare the pre-training objectives of compare.objectives.", _arguments, _run,
              inputs=("params", "task", "compare", "finetuned", "pretrained", "dapt"), outputs=("report", "metrics"),
              errors=(ConfigError, FileNotFoundError, ValueError))
main = STAGE.main


if __name__ == "__main__":
    sys.exit(entry(main))

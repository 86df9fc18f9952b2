"""Evaluation stage (``evaluate``, options in dvc.yaml): the paradigm x initialisation comparison, the
data-efficiency curve, GPT's in-context learning, intrinsic scores before and after DAPT, and the model quality gate.
Writes the metrics JSON, one TSV per data-efficiency series, ``reports/evaluation.md`` with SVG figures and a verdict
from the numbers, and the gate verdict whichever way it falls (the package stage obeys it).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from stages.common.cli import Folder, Stage, entry
from stages.common.inputs import check_folders
from stages.config import ConfigError
from stages.evaluation import timings
from stages.evaluation.config import load_evaluate_config
from stages.evaluation.evaluate import Folders, RunNames, curve_tsv, evaluate_all, metrics_json
from stages.evaluation.report import figures, markdown
from stages.finetuning.core import read_task
from stages.finetuning.runs import load_adapt_config
from stages.published.config import load_published


def _arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--task", type=Path, required=True)
    ap.add_argument("--finetuned", type=Path, required=True,
                    help="folder of the <paradigm>-<init> fine-tuned models and the adapt.runs ones")
    ap.add_argument("--pretrained", type=Path, required=True, help="folder of the general pre-trained models")
    ap.add_argument("--dapt", type=Path, required=True, help="folder of the domain-adapted models")
    ap.add_argument("--tokens", type=Path, required=True, help="folder of the token datasets")
    ap.add_argument("--metrics", type=Path, required=True)
    ap.add_argument("--plots", type=Path, required=True, help="folder for the data-efficiency TSVs")
    ap.add_argument("--report", type=Path, required=True)
    ap.add_argument("--figures", type=Path, required=True)
    ap.add_argument("--gate", type=Path, required=True, help="the model quality gate's verdict (JSON)")
    ap.add_argument("--timings", type=Path, help="wall times and throughput of this workspace's runs (Markdown; "
                                                 "untracked: see stages.evaluation.timings)")
    ap.add_argument("--live", type=Path, default=Path("reports/live"), help="the runs' live logs (read)")


def _run(args: argparse.Namespace, log) -> dict:
    cfg = load_evaluate_config(args.params)
    adapt_runs = tuple(load_adapt_config(args.params).runs)
    published = load_published(args.params)
    check_folders(args.finetuned, args.pretrained, args.dapt)  # every saved model read below, checked first
    result = evaluate_all(cfg, df=read_task(args.task), log=log,
                          folders=Folders(args.finetuned, args.pretrained, args.dapt, args.tokens),
                          names=RunNames(adapt_runs, tuple(published.bases), tuple(published.runs)))
    rel = Path(os.path.relpath(args.figures, args.report.parent or ".")).as_posix()
    timings_md = None
    if args.timings:
        t = timings.collect(args.live, result["timings"]["sections"], result["timings"]["baseline_seconds"])
        timings_md = timings.markdown(t)
    verdict = "passed" if result["gate"]["passed"] else "FAILED (the package stage will not ship it)"
    log(f"[evaluate] model gate {verdict}: {result['gate']['selected']} (best validation macro-F1)")
    return {args.plots: Folder({f"{name}.tsv": curve_tsv(points) for name, points in result["data_efficiency"].items()}),
            args.figures: Folder(figures(result)),
            args.report: markdown(result, figures_dir=rel),
            args.metrics: metrics_json(result),
            args.gate: result["gate"],
            args.timings: timings_md}


STAGE = Stage("stages.evaluate", "Evaluate and compare the models.", _arguments, _run,
              inputs=("params", "task", "finetuned", "pretrained", "dapt", "tokens", "live"),
              outputs=("metrics", "plots", "report", "figures", "gate", "timings"),
              errors=(ConfigError, FileNotFoundError, ValueError))
main = STAGE.main


if __name__ == "__main__":
    sys.exit(entry(main))

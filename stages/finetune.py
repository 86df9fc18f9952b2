"""Fine-tuning stage (``finetune@<paradigm>-<init>``): one paradigm, one initialisation, the labeled task.

    python -m stages.finetune --paradigm bert --init pretrained --params params.yaml \
        --task data/ingested/task/documents.parquet --model data/models/pretrain/bert \
        --output data/models/finetune/bert-pretrained --metrics reports/metrics/finetune-bert-pretrained.json \
        --plot reports/plots/finetune-bert-pretrained.tsv --report reports/quality/finetune-bert-pretrained.json

An adaptation run (params ``adapt.runs``, stage ``adapt@<name>``) takes ``--variant NAME`` and the paradigm's full
fine-tuning folders instead of ``--init``/``--model``; it starts from the base of the one its entry chooses:

    python -m stages.finetune --paradigm bert --variant bert-lora --params params.yaml \
        --task data/ingested/task/documents.parquet \
        --choose-from data/models/finetune/bert-pretrained data/models/finetune/bert-dapt \
        --output data/models/finetune/bert-lora --metrics reports/metrics/finetune-bert-lora.json

A gate checks the task data first; the best model on validation is kept and only then scored on the test split.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stages.common.atomic import write_json_atomic
from stages.common.cli import Stage, entry
from stages.common.inputs import check_folder, read_json
from stages.config import ConfigError
from stages.finetuning.adapt import read_adaptation
from stages.finetuning.core import (INITS, PUBLISHED_INITS, Body, config_record, load_base_config, load_config,
                                   read_task, save_tokenizer)
from stages.finetuning.runs import choose_init, choose_published_init, published_run_config, run_config
from stages.finetuning.seeds import curve_tsv, finetune_seeds, gate_task
from stages.provenance import stagecard
from stages.published.config import load_base
from stages.quality.gate import GateFailed
from stages.tokenization.trainers import PARADIGMS


def _arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--paradigm", choices=PARADIGMS, help="required but with --published-run (its base's)")
    ap.add_argument("--init", choices=INITS + PUBLISHED_INITS, help="the initialisation (not with --variant); "
                    "published and published-dapt take --base")
    ap.add_argument("--base", help="a key of published.bases: fine-tune that published checkpoint (init published) "
                                   "or its DAPT (published-dapt), with finetune.defaults and the base's own settings")
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--task", type=Path, required=True, help="labeled documents Parquet (label, split)")
    ap.add_argument("--model", type=Path, help="pre-trained model folder (its config for random; not with --variant)")
    ap.add_argument("--variant", help="an adaptation run of params adapt.runs: its method and settings over "
                                      "finetune.<paradigm>")
    ap.add_argument("--published-run", help="a run of params published.runs (probe, frozen or LoRA on a published "
                                            "base), with --choose-from the base's full fine-tuning folder of its init")
    ap.add_argument("--choose-from", type=Path, nargs="+",
                    help="with --variant: the paradigm's full fine-tuning folders (pretrained, dapt); the run starts "
                         "from the base model of the one its entry's init names (best: best on validation)")
    ap.add_argument("--output", type=Path, required=True)
    ap.add_argument("--metrics", type=Path)
    ap.add_argument("--plot", type=Path)
    ap.add_argument("--report", type=Path, help="task gate report (default: OUTPUT.gate.json beside OUTPUT)")
    ap.add_argument("--live", type=Path, help="live log folder, one subfolder per run (DVCLive; untracked, see "
                                              "stages.common.live)")
    ap.add_argument("--no-progress", action="store_true")


def _records(folders: list[Path]) -> dict[str, dict]:
    """The ``finetune.json`` of each full fine-tuning folder, by init."""
    records = {}
    for folder in folders:
        record = read_json(folder / "finetune.json") if (folder / "finetune.json").is_file() else None
        if record is None:
            raise FileNotFoundError(f"{folder / 'finetune.json'}: missing (run the finetune stage first)")
        records[record["init"]] = record
    return records


def _start(args: argparse.Namespace) -> tuple:
    """The config, init and model folder of the run: ``--init``/``--model``, or a ``--variant``'s or a
    ``--published-run``'s choice."""
    if args.published_run is not None:
        if args.init is not None or args.model is not None or args.variant or args.base or not args.choose_from:
            raise ValueError("--published-run takes --choose-from (the base's full fine-tuning folders), not --init, "
                             "--model, --variant or --base")
        run, paradigm, cfg = published_run_config(args.params, args.published_run)
        if args.paradigm not in (None, paradigm):
            raise ValueError(f"--published-run {args.published_run}: its base {run.base} is {paradigm}, not "
                             f"--paradigm {args.paradigm}")
        args.paradigm, args.base = paradigm, run.base
        records = _records(args.choose_from)
        init = choose_published_init(run.init, records, run.base)
        return cfg, init, Path(records[init]["model"])
    if args.paradigm is None:
        raise ValueError("--paradigm is required (but with --published-run)")
    if args.variant is None:
        if args.init is None or args.model is None or args.choose_from:
            raise ValueError("--init and --model are required (or --variant with --choose-from)")
        if (args.base is not None) != (args.init in PUBLISHED_INITS):
            raise ValueError(f"--init {', '.join(PUBLISHED_INITS)} go with --base (a key of published.bases), "
                             "the other inits without it")
        if args.base is None:
            return load_config(args.params, args.paradigm), args.init, args.model
        paradigm = load_base(args.params, args.base, "paradigm").get("paradigm")
        if paradigm != args.paradigm:
            raise ValueError(f"--base {args.base}: published.bases.{args.base}.paradigm is {paradigm}, "
                             f"not --paradigm {args.paradigm}")
        return load_base_config(args.params, args.base), args.init, args.model
    if args.init is not None or args.model is not None or not args.choose_from:
        raise ValueError("--variant takes --choose-from (the full fine-tuning folders), not --init or --model")
    run, cfg = run_config(args.params, args.variant)
    if run.paradigm != args.paradigm:
        raise ValueError(f"--variant {args.variant}: adapt.runs.{args.variant}.paradigm is {run.paradigm}, "
                         f"not --paradigm {args.paradigm}")
    records = _records(args.choose_from)
    init = choose_init(run, records)
    return cfg, init, Path(records[init]["model"])


def _run(args: argparse.Namespace, log) -> dict:
    cfg, init, model = _start(args)
    args.init, args.model = init, model
    df = read_task(args.task)
    task_sources = stagecard.corpora([args.task.parent / "manifest.json"])
    if not (args.model / "config.json").is_file():
        raise FileNotFoundError(f"{args.model / 'config.json'}: no model (run the pretrain/dapt stage first)")
    check_folder(args.model)
    # The task's gate runs while the workers start (each loads its libraries and the data: seconds per stage).
    body = Body(args.paradigm, args.init, args.model)
    out = finetune_seeds(cfg, body, df=df, log=log,
                         progress=not args.no_progress, live_dir=args.live,
                         checks=lambda: gate_task(df, cfg, args.report or
                                                  args.output.parent / f"{args.output.name}.gate.json"))
    metrics = out["metrics"]
    tmp = args.staged.path
    out["classifier"].model.save_pretrained(str(tmp))
    save_tokenizer(out["tokenizer"], tmp)
    record = config_record(out["config"])
    write_json_atomic(tmp / "finetune.json", {"config": record, "metrics": metrics, "curve": out["curve"],
                                              "init": args.init, "model": str(args.model), "labels": list(cfg.labels),
                                              **({"variant": args.variant} if args.variant else {}),
                                              **({"published_run": args.published_run} if args.published_run else {}),
                                              **({"base": args.base} if args.base else {})})
    adaptation = read_adaptation(tmp)  # frozen or lora: the folder holds the head (and adapter), not the body
    stagecard.write(tmp, stagecard.finetune_facts(
        body, labels=list(cfg.labels), config=record, metrics=metrics, sources=task_sources,
        parameters=adaptation["total_parameters"] if adaptation else stagecard.count_parameters(tmp),
        adaptation=adaptation))
    return {args.metrics: metrics, args.plot: curve_tsv(out["curve"])}


STAGE = Stage("stages.finetune", "Fine-tune one paradigm on the task.", _arguments, _run,
              inputs=("params", "task", "model", "choose-from"), folder="output", outputs=("metrics", "plot", "report", "live"),
              errors=(ConfigError, GateFailed, FileNotFoundError, ValueError))
main = STAGE.main


if __name__ == "__main__":
    sys.exit(entry(main))

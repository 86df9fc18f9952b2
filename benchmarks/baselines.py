"""The evaluate stage's baseline section alone, on a workspace's task data: its wall time and what each baseline
scores and chooses at the curve's sizes and with all labels (the seeds of the default run). Run it from a
checkout (the code it times is that checkout's); ``--old`` times a checkout from before
``stages/evaluation/baselines`` (its ``baseline`` section). benchmarks/baselines.md, "The practitioner
baselines", has the figures.

    .venv/bin/python benchmarks/baselines.py --task data/ingested/task/documents.parquet --out results.json
"""
import argparse
import json
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkout", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--task", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    sys.path.insert(0, str(args.checkout))
    import yaml

    import stages.evaluation.curve as curve
    from stages.evaluation.config import load_evaluate_config as load_config
    from stages.finetuning.core import read_task

    params = args.checkout / "params.yaml"
    df, cfg = read_task(args.task), load_config(params)
    labels = yaml.safe_load(params.read_text())["finetune"]["defaults"]["labels"]
    full = int((df["split"] == "train").sum())
    runs = {"bert-pretrained": {"labels": labels,
                                "metrics": {"train_examples": full, "seeds": [{"seed": s} for s in (0, 1, 2)]}}}
    start = time.perf_counter()
    fn = curve.baselines if hasattr(curve, "baselines") else curve.baseline
    out = fn(cfg, runs, "bert-pretrained", df, lambda m: print(m, flush=True))
    seconds = round(time.perf_counter() - start, 1)
    print(f"baseline section: {seconds} s")
    args.out.write_text(json.dumps({"checkout": str(args.checkout), "section_seconds": seconds, "result": out},
                                   indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()

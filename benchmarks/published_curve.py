"""The published bases' rows of the evaluate stage alone: the data-efficiency points (the curve's label counts and
seeds, the same code and samples as ``stages.evaluation.curve``) of each finished published run, its all-label
seeds from the run's own record, each against the best baseline of a finished evaluation (the default run's
``reports/metrics/evaluation.json``: the same task split, samples and seeds). benchmarks/transfer.md, "Published
checkpoints", has the figures.

    .venv/bin/python benchmarks/published_curve.py --params params.yaml --runs minilm-published minilm-probe \
        --out benchmarks/results/published_curve.json
"""
import argparse
import dataclasses
import json
import math
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--task", type=Path, default=Path("data/ingested/task/documents.parquet"))
    ap.add_argument("--finetuned", type=Path, default=Path("data/models/finetune"))
    ap.add_argument("--baselines", type=Path, default=Path("reports/metrics/evaluation.json"))
    ap.add_argument("--runs", nargs="+", required=True, help="published runs (folders under --finetuned)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    from stages.common.pool import run_plan
    from stages.evaluation.config import load_evaluate_config
    from stages.evaluation.curve import data_efficiency_plan
    from stages.evaluation.summary import judge, read_record
    from stages.finetuning.core import read_task

    cfg = load_evaluate_config(args.params)
    cfg = dataclasses.replace(cfg, curve=dataclasses.replace(cfg.curve, paradigms=()))  # the published series only
    df = read_task(args.task)
    records = {name: read_record(args.finetuned / name, name) for name in args.runs}
    start = time.perf_counter()
    plan = data_efficiency_plan(cfg, {}, df, {}, lambda m: print(m, flush=True),
                                published=records)
    points = run_plan(plan, workers=cfg.curve.workers)
    seconds = round(time.perf_counter() - start, 1)
    best = json.loads(args.baselines.read_text())["versus_baselines"]["best"]
    table = {}
    for name, pts in points.items():
        for pt in pts:
            b = best.get(str(pt["train_examples"]))
            f = pt["macro_f1"]
            row = {"test_macro_f1": f["mean"], "std": f["std"], "runs": f["runs"]}
            if b is not None:
                row["best_baseline"] = {"series": b["series"], "test_macro_f1": b["test_macro_f1"],
                                        "std": b["test_macro_f1_std"]}
                row["versus_best"] = judge(f["mean"] - b["test_macro_f1"], f["std"], b["test_macro_f1_std"], f["runs"])
            table.setdefault(name, {})[str(pt["train_examples"])] = row
    for name, rows in table.items():
        print(name + ": " + "; ".join(
            f"{n}: {r['test_macro_f1']:.3f} ± {r['std']:.3f}"
            + (f" ({r['versus_best']['difference']:+.3f} vs {r['best_baseline']['series']}"
               f"{', resolved' if r['versus_best']['resolved'] else ''})" if "versus_best" in r else "")
            for n, r in rows.items()))
    print(f"curve points: {seconds} s on {cfg.curve.workers} workers")
    args.out.write_text(json.dumps({"seconds": seconds, "workers": cfg.curve.workers, "points": points,
                                    "versus_best": table}, indent=1, default=lambda x: None if math.isnan(x) else x)
                        + "\n")


if __name__ == "__main__":
    main()

"""The data-efficiency curve (test macro-F1 against the number of training labels; Howard & Ruder 2018,
figure 3): many small, independent fine-tuning runs, optionally in a process pool, plus the practitioner
baselines' series on the same samples (:mod:`stages.evaluation.baselines`).

Every job is a pure function of its own description (paradigm, initialisation, training size, seed), so its
result does not depend on which worker runs it or when; :func:`run_ordered` returns the results in the
order of the jobs. ``workers = 1`` runs them in this process. Otherwise each worker is a fresh interpreter
(the ``spawn`` start method: forking a process that has loaded torch can deadlock its thread pools) that
loads the task once and runs one job at a time on one torch thread, so ``workers`` runs share the cores
instead of fighting over them (torch's intra-op threads do not scale on a handful of cores anyway). The one
thing ``workers`` changes is that thread count (in this process: the finetune config's ``threads``); CPU
matrix products are normally identical across thread counts, and the unit tests check both paths agree."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from stages.common.pool import run_ordered
from stages.config import build


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def small_run(state: dict, job: dict) -> dict:
    """One fine-tuning run of the curve: ``stages.finetuning.core.finetune`` on ``job['train_examples']`` examples
    with ``job['seed']`` (sample, head initialisation, order) and at least ``min_steps`` updates."""
    from stages.finetuning.core import FinetuneConfig, finetune

    ft = build(FinetuneConfig, job["config"], f"{job['paradigm']}-{job['init']} finetune.json")
    # The curve's points are scored on test; its validation scores choose nothing, so the sample suffices.
    ft = dataclasses.replace(ft, seed=job["seed"], min_steps=job["min_steps"], val_select="sample")
    if state.get("threads"):
        ft = dataclasses.replace(ft, threads=state["threads"])
    run = finetune(ft, paradigm=job["paradigm"], init=job["init"], model_dir=Path(job["model_dir"]), df=state["df"],
                   train_examples=job["train_examples"], log=state.get("log") or _log)
    m = run["metrics"]
    return {k: m[k] for k in ("test_macro_f1", "test_accuracy", "best_val_macro_f1", "steps", "train_examples")}


def source(model_dirs: dict[str, Path], paradigm: str, init: str) -> Path:
    """The folder an initialisation starts from (random uses the general model's config and tokenizer)."""
    return model_dirs[f"{'dapt' if init == 'dapt' else 'pretrain'}-{paradigm}"]


def data_efficiency(cfg, runs: dict[str, dict], df, model_dirs: dict[str, Path], log) -> dict:
    """series name -> [{train_examples, macro_f1, accuracy, val_macro_f1: summaries over seeds}], smallest first
    (test scores; ``val_macro_f1``: the best validation macro-F1 of each run, for choosing among series)."""
    from stages.evaluation.summary import seed_runs, summarise

    jobs = []
    for p in cfg.curve.paradigms:
        for init in cfg.curve.inits:
            record = runs[f"{p}-{init}"]
            jobs += [{"paradigm": p, "init": init, "train_examples": n, "seed": seed, "min_steps": cfg.curve.min_steps,
                      "config": record["config"], "model_dir": str(source(model_dirs, p, init))}
                     for n in sorted(set(cfg.curve.sizes)) if n < record["metrics"]["train_examples"]
                     for seed in cfg.curve.seeds]
    workers = cfg.curve.workers
    log(f"[evaluate] data-efficiency curve: {len(jobs)} fine-tuning runs, {min(workers, len(jobs) or 1)} at a time")
    state = {"df": df, "log": log} if workers <= 1 else {"df": df, "threads": 1}
    results = run_ordered(small_run, state, jobs, workers=workers)
    out: dict[str, list] = {}
    for job, r in zip(jobs, results):
        pts = out.setdefault(f"{job['paradigm']}-{job['init']}", [])
        if not pts or pts[-1]["train_examples"] != job["train_examples"]:
            pts.append({"train_examples": job["train_examples"], "f1": [], "acc": [], "val": []})
        for key, value in (("f1", "test_macro_f1"), ("acc", "test_accuracy"), ("val", "best_val_macro_f1")):
            pts[-1][key].append(r[value])
    for p in cfg.curve.paradigms:
        for init in cfg.curve.inits:
            record = runs[f"{p}-{init}"]
            seeds = seed_runs(record)
            out.setdefault(f"{p}-{init}", []).append({
                "train_examples": record["metrics"]["train_examples"], "f1": [s["test_macro_f1"] for s in seeds],
                "acc": [s["test_accuracy"] for s in seeds], "val": [s["best_val_macro_f1"] for s in seeds]})
    return {name: [{"train_examples": pt["train_examples"], "macro_f1": summarise(pt["f1"]),
                    "accuracy": summarise(pt["acc"]), "val_macro_f1": summarise(pt["val"])} for pt in pts]
            for name, pts in out.items()}


def baselines(cfg, runs: dict[str, dict], selected: str, df, log) -> dict[str, dict]:
    """Each baseline of ``cfg.baseline`` at the curve's sizes (its seeds), at the selected model's training
    sample (the finetune stage's seeds) and on the whole training split: series name -> ``{"points": [...]}``."""
    from stages.evaluation.baselines import run_baselines, settings_words
    from stages.evaluation.summary import seed_runs, summarise

    record = runs[selected]
    full = record["metrics"]["train_examples"]
    points = [(n, list(cfg.curve.seeds)) for n in sorted(set(cfg.curve.sizes)) if n < full]
    points.append((full, [s["seed"] for s in seed_runs(record)]))
    if full < int((df["split"] == "train").sum()):
        points.append((0, [0]))
    out = {}
    fitted = run_baselines(df, list(record["labels"]), cfg.baseline, points, workers=cfg.curve.workers)
    for name, pts in fitted.items():
        series = out.setdefault(name, {"points": []})["points"]
        for pt in pts:
            r = pt["runs"]
            series.append({"train_examples": pt["train_examples"],
                           "macro_f1": summarise([x["test_macro_f1"] for x in r]),
                           "accuracy": summarise([x["test_accuracy"] for x in r]),
                           "val_macro_f1": summarise([x["best_val_macro_f1"] for x in r]),
                           "settings": [x["settings"] for x in r], "at_bound": any(x["at_bound"] for x in r),
                           "fits": sum(x["fits"] for x in r), "features": max(x["features"] for x in r),
                           "parameters": max(x["parameters"] for x in r),
                           "seconds": round(sum(x["seconds"] for x in r) / len(r), 3)})
            log(f"[evaluate] {name}, {pt['train_examples']} examples: test macro-F1 "
                f"{series[-1]['macro_f1']['mean']:.3f} ± {series[-1]['macro_f1']['std']:.3f} (chosen on validation: "
                + "; ".join(settings_words(name, x["settings"]) for x in r) + ")")
    return out


def full_point(points: list[dict], full_n: int) -> dict:
    """A baseline's point with every training example of the fine-tuning sample (``full_n``; else its largest)."""
    return next((pt for pt in points if pt["train_examples"] == full_n), points[-1])

"""The data-efficiency curve (test macro-F1 against training labels; Howard & Ruder 2018, fig. 3): small, independent
fine-tuning runs, each a pure function of its job, on ``workers`` spawned processes of one torch thread (1 = in this
process; :func:`~stages.common.pool.run_ordered` keeps the jobs' order), plus the practitioner baselines on the same
samples. Each part is a :class:`~stages.common.pool.Plan`, so the evaluate stage runs them all on one pool."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from stages.common.pool import Plan, run_plan
from stages.config import build
from stages.evaluation.baselines import fits_plan, settings_words
from stages.evaluation.summary import seed_runs, summarise
from stages.finetuning.core import Body, FinetuneConfig, finetune


def small_run(state: dict, job: dict) -> dict:
    """One fine-tuning run of the curve: ``stages.finetuning.core.finetune`` on ``job['train_examples']`` examples
    with ``job['seed']`` (sample, head initialisation, order) and at least ``min_steps`` updates."""
    ft = build(FinetuneConfig, job["config"], f"{job['paradigm']}-{job['init']} finetune.json")
    # The curve's points are scored on test; its validation scores choose nothing, so the sample suffices.
    ft = dataclasses.replace(ft, seed=job["seed"], min_steps=job["min_steps"], val_select="sample")
    if state.get("threads"):
        ft = dataclasses.replace(ft, threads=state["threads"])
    run = finetune(ft, Body(job["paradigm"], job["init"], Path(job["model_dir"])), df=state["df"],
                   train_examples=job["train_examples"],
                   log=state.get("log") or (lambda message: print(message, file=sys.stderr, flush=True)))
    m = run["metrics"]
    return {k: m[k] for k in ("test_macro_f1", "test_accuracy", "best_val_macro_f1", "steps", "train_examples")}


def source(model_dirs: dict[str, Path], paradigm: str, init: str) -> Path:
    """The folder an initialisation starts from (random uses the general model's config and tokenizer)."""
    return model_dirs[f"{'dapt' if init == 'dapt' else 'pretrain'}-{paradigm}"]


def summarised(n: int, runs: list[dict]) -> dict:
    """One curve point: ``n`` training examples, test macro-F1, accuracy and validation macro-F1 over ``runs``."""
    return {"train_examples": n, "macro_f1": summarise([r["test_macro_f1"] for r in runs]),
            "accuracy": summarise([r["test_accuracy"] for r in runs]),
            "val_macro_f1": summarise([r["best_val_macro_f1"] for r in runs])}


def small_runs_plan(cfg, series: dict[str, tuple[str, str, dict, Path]], df, log, intro: str) -> Plan:
    """Each series (name -> paradigm, init, its finetune record, the model it starts from) fine-tuned at
    ``cfg.sizes`` below its record's sample over ``cfg.seeds``; finished: name -> {n: runs}. ``intro``: the log
    line, with ``{jobs}`` and ``{workers}``."""
    jobs = [{"series": name, "paradigm": p, "init": init, "train_examples": n, "seed": seed,
             "min_steps": cfg.min_steps, "config": record["config"], "model_dir": str(model_dir)}
            for name, (p, init, record, model_dir) in series.items()
            for n in sorted(set(cfg.sizes)) if n < record["metrics"]["train_examples"] for seed in cfg.seeds]
    log(intro.format(jobs=len(jobs), workers=min(cfg.workers, len(jobs) or 1)))
    state = {"df": df, "log": log} if cfg.workers <= 1 else {"df": df, "threads": 1}

    def finish(results: list[dict]) -> dict[str, dict]:
        out: dict[str, dict[int, list[dict]]] = {}
        for job, r in zip(jobs, results):
            out.setdefault(job["series"], {}).setdefault(job["train_examples"], []).append(r)
        return out

    return Plan(small_run, state, [{k: v for k, v in j.items() if k != "series"} for j in jobs], finish)


def small_runs(cfg, series: dict[str, tuple[str, str, dict, Path]], df, log, intro: str) -> dict[str, dict]:
    """:func:`small_runs_plan` run on ``cfg.workers`` processes: name -> {n: runs}."""
    return run_plan(small_runs_plan(cfg, series, df, log, intro), workers=cfg.workers)


def data_efficiency_plan(cfg, runs: dict[str, dict], df, model_dirs: dict[str, Path], log,
                         adapted: dict[str, dict] | None = None, published: dict[str, dict] | None = None) -> Plan:
    """The curve's runs; finished: series name -> curve points (:func:`summarised`), smallest first, the finetune
    stage's seeds the last. ``adapted``: adaptation runs (name -> record) of the curve's paradigms, each a series of
    its method; ``published``: the published bases' runs, each a series from the folder its record started from."""
    series = {f"{p}-{init}": (p, init, runs[f"{p}-{init}"], source(model_dirs, p, init))
              for p in cfg.curve.paradigms for init in cfg.curve.inits}
    for name, record in (adapted or {}).items():
        p, init = record["metrics"]["paradigm"], record["init"]
        if p in cfg.curve.paradigms:
            series[name] = (p, init, record, source(model_dirs, p, init))
    for name, record in (published or {}).items():
        series[name] = (record["metrics"]["paradigm"], record["init"], record, Path(record["model"]))
    def points(done: dict[str, dict]) -> dict:
        out = {name: [summarised(n, rs) for n, rs in by_n.items()] for name, by_n in done.items()}
        for name, (_, _, record, _) in series.items():
            out.setdefault(name, []).append(summarised(record["metrics"]["train_examples"], seed_runs(record)))
        return out

    return small_runs_plan(cfg.curve, series, df, log,
                           "[evaluate] data-efficiency curve: {jobs} fine-tuning runs, {workers} at a time").then(points)


def data_efficiency(cfg, runs: dict[str, dict], df, model_dirs: dict[str, Path], log,
                    adapted: dict[str, dict] | None = None) -> dict:
    """:func:`data_efficiency_plan` run on ``cfg.curve.workers`` processes."""
    return run_plan(data_efficiency_plan(cfg, runs, df, model_dirs, log, adapted), workers=cfg.curve.workers)


def baselines_plan(cfg, runs: dict[str, dict], selected: str, df, log) -> Plan:
    """Each baseline of ``cfg.baseline`` at the curve's sizes (its seeds), at the selected model's training
    sample (the finetune stage's seeds) and on the whole training split; finished: series name ->
    ``{"points": [...]}``."""
    record = runs[selected]
    full = record["metrics"]["train_examples"]
    points = [(n, list(cfg.curve.seeds)) for n in sorted(set(cfg.curve.sizes)) if n < full]
    points.append((full, [s["seed"] for s in seed_runs(record)]))
    if full < int((df["split"] == "train").sum()):
        points.append((0, [0]))
    def summaries(fitted: dict[str, list[dict]]) -> dict[str, dict]:
        out = {}
        for name, pts in fitted.items():
            series = out.setdefault(name, {"points": []})["points"]
            for pt in pts:
                r = pt["runs"]
                series.append({**summarised(pt["train_examples"], r), "settings": [x["settings"] for x in r],
                               "at_bound": any(x["at_bound"] for x in r), "fits": sum(x["fits"] for x in r),
                               "features": max(x["features"] for x in r),
                               "parameters": max(x["parameters"] for x in r),
                               "seconds": round(sum(x["seconds"] for x in r) / len(r), 3)})
                log(f"[evaluate] {name}, {pt['train_examples']} examples: test macro-F1 "
                    f"{series[-1]['macro_f1']['mean']:.3f} ± {series[-1]['macro_f1']['std']:.3f} (chosen on "
                    "validation: " + "; ".join(settings_words(name, x["settings"]) for x in r) + ")")
        return out

    return fits_plan(df, list(record["labels"]), cfg.baseline, points).then(summaries)


def baselines(cfg, runs: dict[str, dict], selected: str, df, log) -> dict[str, dict]:
    """:func:`baselines_plan` run on ``cfg.curve.workers`` processes."""
    return run_plan(baselines_plan(cfg, runs, selected, df, log), workers=cfg.curve.workers)

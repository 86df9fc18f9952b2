"""The finetune stage's runs: the task's gate, the learning rate chosen on validation, then every seed at that rate
(``workers`` at a time), and the training curve's TSV."""

from __future__ import annotations

import csv
import dataclasses
import io
import shutil
import sys
from pathlib import Path

import numpy as np

from stages.common.pool import WorkerPool
from stages.finetuning.core import Body, FinetuneConfig, _mean_std, finetune, head_spec
from stages.quality.gate import enforce


def gate_task(df, cfg: FinetuneConfig, report: Path) -> None:
    """Labels in the expected set, no text in two splits, class shares in bounds (Great Expectations)."""
    from stages.quality.suites import labeled_suite

    tables, expectations = labeled_suite(df, labels=list(cfg.labels), splits=["train", "validation", "test"],
                                         min_class_share=cfg.gate.min_class_share,
                                         max_class_share=cfg.gate.max_class_share,
                                         where="finetune.defaults.gate", labels_key="finetune.defaults.labels")
    enforce("finetune-task", tables, expectations, report)


def _seed_run(state: dict, job: dict) -> dict:
    """One run of :func:`finetune_seeds` (module level: it may run in a worker process). Returns the metrics,
    the curve and the trained weights (CPU tensors), not the classifier object."""
    cfg = dataclasses.replace(state["cfg"], seed=job["seed"], lr=job["lr"],
                              threads=state.get("threads") or state["cfg"].threads)
    live = state.get("live_dir")
    run = finetune(cfg, state["body"], df=state["df"],
                   log=state.get("log") or (lambda m: print(m, file=sys.stderr, flush=True)), progress=state.get("progress", False),
                   live_dir=Path(live) / f"lr{job['lr']:g}-seed{job['seed']}" if live else None)
    return {"metrics": run["metrics"], "curve": run["curve"], "weights": run["classifier"].model.state_dict()}


def _prepare() -> None:
    """A worker's imports before its first run (module level: the pool sends it to the workers)."""
    from transformers import AutoConfig, AutoModel, AutoTokenizer, T5EncoderModel  # noqa: F401

    import stages.finetuning.heads  # noqa: F401


def finetune_seeds(cfg: FinetuneConfig, body: Body, *, df, log=print, progress: bool = False,
                   live_dir: Path | None = None, checks=None) -> dict:
    """The learning rate chosen on validation with the first seed, then every seed at that rate; the best run on
    validation, its metrics the mean and std over seeds with the per-seed results. ``checks`` (no arguments; the
    task's gate) runs once the workers have started, so they load their libraries and data meanwhile."""
    from transformers import AutoTokenizer

    from stages.finetuning.heads import make_classifier

    paradigm, init, model_dir = body.paradigm, body.init, Path(body.model_dir)
    first = cfg.seeds[0]
    grid = list(cfg.lr_grid) or [cfg.lr]
    rest = list(cfg.seeds[1:])
    # With one rate there is nothing to choose: every seed runs in the first batch.
    single = len(grid) == 1
    first_batch = ([{"seed": s, "lr": grid[0]} for s in cfg.seeds] if single else
                   [{"seed": first, "lr": lr} for lr in grid])
    workers = min(cfg.workers, max(len(first_batch), 0 if single else len(rest)))
    state = {"cfg": cfg, "body": body, "df": df,
             "live_dir": str(live_dir) if live_dir is not None else None,
             **({"threads": 1} if workers > 1 else {"log": log, "progress": progress})}
    runs: dict[int, dict] = {}
    tried, best_lr, best_val = [], grid[0], -1.0
    # One pool for the grid and the seeds: its workers start once (about 10 s each of imports and loading).
    with WorkerPool(_seed_run, state, workers=workers).start(_prepare) as pool:
        if checks is not None:
            checks()
        if live_dir is not None and live_dir.exists():
            shutil.rmtree(live_dir)  # the previous run's live logs: this run's replace them
        if single:
            runs.update(zip(cfg.seeds, pool.run(first_batch)))
            tried.append({"lr": grid[0], "best_val_macro_f1": runs[first]["metrics"]["best_val_macro_f1"]})
        else:
            for lr, run in zip(grid, pool.run(first_batch)):
                val = run["metrics"]["best_val_macro_f1"]
                tried.append({"lr": lr, "best_val_macro_f1": val})
                if val > best_val:  # ties keep the earlier (grid order) rate
                    best_lr, best_val, runs[first] = lr, val, run
            log(f"[finetune] {paradigm}-{init}: learning rate {best_lr:g} chosen on validation "
                "(" + ", ".join(f"{t['lr']:g}: {t['best_val_macro_f1']:.3f}" for t in tried) + ")")
            runs.update(zip(rest, pool.run([{"seed": s, "lr": best_lr} for s in rest])))
    per_seed = [{"seed": s, "lr": best_lr, **{k: runs[s]["metrics"][k] for k in
                                              ("best_val_macro_f1", "test_macro_f1", "test_accuracy", "steps")}}
                for s in cfg.seeds]
    best_seed = max(cfg.seeds, key=lambda s: (runs[s]["metrics"]["best_val_macro_f1"], -cfg.seeds.index(s)))
    metrics = dict(runs[best_seed]["metrics"])
    for key in ("test_macro_f1", "test_accuracy", "best_val_macro_f1"):
        metrics[key], metrics[f"{key}_std"] = _mean_std([p[key] for p in per_seed])
    metrics.update(seeds=per_seed, lr=best_lr, lr_grid=tried, saved_seed=best_seed,
                   steps=int(np.mean([p["steps"] for p in per_seed])))
    log(f"[finetune] {paradigm}-{init}: {len(per_seed)} seeds at lr {best_lr:g}: test macro-F1 "
        f"{metrics['test_macro_f1']:.3f} ± {metrics['test_macro_f1_std']:.3f}, validation "
        f"{metrics['best_val_macro_f1']:.3f}; saved seed {best_seed}")
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    clf = make_classifier(paradigm, model_dir, list(cfg.labels), tok, init=init, seed=best_seed,
                          spec=head_spec(cfg, init))
    clf.model.load_state_dict(runs[best_seed]["weights"])
    return {"metrics": metrics, "config": dataclasses.replace(cfg, lr=best_lr), "curve": runs[first]["curve"],
            "classifier": clf, "tokenizer": tok}


def curve_tsv(curve: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, delimiter="\t", lineterminator="\n")
    header = ["step", "epoch", "loss", "val_accuracy", "val_macro_f1"]
    w.writerow(header)
    w.writerows([row[k] for k in header] for row in curve)
    return buf.getvalue()

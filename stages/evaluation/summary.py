"""Pure summaries of the evaluate stage's numbers: seed statistics, the gains of pre-training and DAPT, pre-training
cost, the data-efficiency gains. A difference is *resolved* when it exceeds twice the pooled seed std
``sqrt((s_a^2 + s_b^2) / 2)`` over at least two seeds; a gain *counts* when it is also >= ``MIN_GAIN``."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from stages.common.inputs import read_json
from stages.evaluation.baselines import best_at

MIN_GAIN = 0.03
PRETRAINED_INITS = ("pretrained", "dapt")


def summarise(values: list[float]) -> dict:
    """Mean, sample standard deviation (ddof=1; 0 for one value), range and count."""
    a = np.asarray(values, dtype=np.float64)
    return {"mean": round(float(a.mean()), 5), "std": round(float(a.std(ddof=1)) if len(a) > 1 else 0.0, 5),
            "min": round(float(a.min()), 5), "max": round(float(a.max()), 5), "runs": len(a)}


def seed_runs(record: dict) -> list[dict]:
    """The per-seed runs of a finetune.json record; a record from before seeds (no ``metrics.seeds``) is one run."""
    m, cfg = record["metrics"], record.get("config", {})
    if m.get("seeds"):
        return list(m["seeds"])
    return [{"seed": cfg.get("seed", 0), "lr": m.get("lr", cfg.get("lr")), "best_val_macro_f1": m["best_val_macro_f1"],
             "test_macro_f1": m["test_macro_f1"], "test_accuracy": m["test_accuracy"], "steps": m.get("steps")}]


def run_row(record: dict) -> dict:
    """The table row of one ``<paradigm>-<init>`` record: the means the record states, their seed standard
    deviations (the record's, else computed from its seeds), the seed count and the chosen learning rate."""
    m, seeds = record["metrics"], seed_runs(record)
    row = {k: m[k] for k in ("test_accuracy", "test_macro_f1", "best_val_macro_f1", "steps", "train_examples",
                             "stopped_early")}
    for k in ("test_accuracy", "test_macro_f1", "best_val_macro_f1"):
        std = m.get(f"{k}_std")
        row[f"{k}_std"] = round(float(std), 5) if std is not None else summarise([s[k] for s in seeds])["std"]
    return row | {"seeds": len(seeds), "lr": m.get("lr", record.get("config", {}).get("lr"))}


def pooled(a: float, b: float) -> float:
    return round(math.sqrt((a * a + b * b) / 2), 5)


def judge(diff: float, std_a: float, std_b: float, seeds: int) -> dict:
    """A difference of two means with its pooled seed std, and whether it is beyond twice that (never on one seed)."""
    diff, noise = round(diff, 5), pooled(std_a, std_b)
    return {"difference": diff, "pooled_std": noise, "seeds": seeds, "resolved": seeds >= 2 and abs(diff) > 2 * noise}


def difference(table: dict, better: str, worse: str) -> dict:
    """``better`` minus ``worse`` in mean test macro-F1, judged; ``counts`` when also >= ``MIN_GAIN``."""
    a, b = table[better], table[worse]
    d = judge(a["test_macro_f1"] - b["test_macro_f1"], a["test_macro_f1_std"], b["test_macro_f1_std"],
              min(a["seeds"], b["seeds"]))
    return d | {"counts": d["resolved"] and d["difference"] >= MIN_GAIN}


def gains(table: dict, paradigms) -> dict:
    """Per paradigm: pre-training (the pre-trained init best on *validation* minus random) and DAPT (dapt minus
    pretrained)."""
    out = {}
    for p in paradigms:
        best = max((f"{p}-{i}" for i in PRETRAINED_INITS if f"{p}-{i}" in table),
                   key=lambda n: (table[n]["best_val_macro_f1"], n))
        out[p] = {"best_init": best.split("-", 1)[1], "test_macro_f1": table[best]["test_macro_f1"],
                  "test_macro_f1_std": table[best]["test_macro_f1_std"],
                  "pretraining": difference(table, best, f"{p}-random"),
                  "dapt": difference(table, f"{p}-dapt", f"{p}-pretrained")}
    return out


def read_record(folder: Path, stage: str) -> dict:
    """A fine-tuning run's ``finetune.json``; missing: an error naming the ``stage`` that writes it."""
    path = folder / "finetune.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (run the {stage} stage first)")
    return read_json(path)


def read_training(folder: Path) -> dict | None:
    """``metrics`` of a pre-training run's ``training.json`` (see :mod:`stages.pretrain`), or None."""
    path = folder / "training.json"
    return (read_json(path).get("metrics") or None) if path.is_file() else None


def paradigm_row(pre: dict | None, dapt: dict | None, finetuned: dict) -> dict:
    """A paradigm's cost (parameters, tokens, FLOPs, held-out losses; no wall time: reports/timings.md has it) and
    the fine-tuned test macro-F1 of its best pre-trained init."""
    runs = [m for m in (pre, dapt) if m]
    return {"parameters": (pre or dapt or {}).get("parameters"),
            "pretrain_tokens": (pre or {}).get("tokens"), "dapt_tokens": (dapt or {}).get("tokens"),
            "tokens": sum(m.get("tokens") or 0 for m in runs) or None,
            "flops_per_token": (pre or dapt or {}).get("flops_per_token"),
            "flops": sum((m.get("flops_per_token") or 0) * (m.get("tokens") or 0) for m in runs) or None,
            "pretrain_eval_loss": (pre or {}).get("eval_loss"), "dapt_eval_loss": (dapt or {}).get("eval_loss"),
            **{k: finetuned[k] for k in ("best_init", "test_macro_f1", "test_macro_f1_std")}}


def curve_gains(de: dict, best_init: dict[str, str]) -> dict:
    """Per paradigm with a random series: at each size, the test macro-F1 of the pre-trained init best on validation
    *at that size* (none: lowest; ties: ``best_init``, then the later name) minus random's, with the pooled std."""
    out = {}
    for p in {name.split("-", 1)[0] for name in de if "-" in name}:  # neural series: <paradigm>-<init>
        inits = [i for i in PRETRAINED_INITS if f"{p}-{i}" in de]
        if f"{p}-random" not in de or not inits:
            continue
        rand = {pt["train_examples"]: pt["macro_f1"] for pt in de[f"{p}-random"]}
        by_init = {i: {pt["train_examples"]: pt for pt in de[f"{p}-{i}"]} for i in inits}
        rows = []
        for n in sorted({n for pts in by_init.values() for n in pts} & rand.keys()):
            have = [i for i in inits if n in by_init[i]]
            init = max(have, key=lambda i: (by_init[i][n].get("val_macro_f1", {}).get("mean", -1.0),
                                            i == best_init.get(p), i))
            f, r = by_init[init][n]["macro_f1"], rand[n]
            rows.append({"train_examples": n, "init": init, "gain": round(f["mean"] - r["mean"], 5),
                         "pooled_std": pooled(f["std"], r["std"])})
        if rows:
            out[p] = {"init": best_init.get(p) if best_init.get(p) in inits else rows[-1]["init"], "points": rows}
    return dict(sorted(out.items()))


def point_at(points: list[dict], n: int) -> dict | None:
    return next((pt for pt in points if pt["train_examples"] == n), None)


def table_point(row: dict) -> dict:
    """A fine-tuning table row (:func:`run_row`) as a curve point."""
    return {"train_examples": row["train_examples"],
            "macro_f1": {"mean": row["test_macro_f1"], "std": row["test_macro_f1_std"], "runs": row["seeds"]},
            "val_macro_f1": {"mean": row["best_val_macro_f1"], "std": row["best_val_macro_f1_std"]}}


def neural_points(de: dict, table: dict | None) -> dict:
    """The curve's neural series (``<paradigm>-<init>``), completed by the ``table``'s full-sample points."""
    out = {name: list(pts) for name, pts in de.items() if "-" in name}
    for name, row in (table or {}).items():
        pts = out.setdefault(name, [])
        if point_at(pts, row["train_examples"]) is None:
            pts.append(table_point(row))
    return out


def versus_baselines(de: dict, table: dict, baselines: list[str]) -> dict:
    """Every neural series minus the best baseline (chosen on validation) in test macro-F1, at each label count the
    baselines were fitted at: ``{"best": {n: ...}, "series": {name: {n: {difference, pooled_std, resolved}}}}``
    (the neural model's seeds decide whether it can be resolved)."""
    neural = neural_points(de, table)
    sizes = sorted({pt["train_examples"] for b in baselines for pt in de.get(b, [])})
    out: dict = {"best": {}, "series": {}}
    for n in sizes:
        best = best_at({b: de[b] for b in baselines if b in de}, n)  # n is a size of one of them
        b = point_at(de[best], n)
        out["best"][str(n)] = {"series": best, "test_macro_f1": b["macro_f1"]["mean"],
                               "test_macro_f1_std": b["macro_f1"]["std"], "val_macro_f1": b["val_macro_f1"]["mean"]}
        for name, pts in sorted(neural.items()):
            pt = point_at(pts, n)
            if pt is None:
                continue
            d = judge(pt["macro_f1"]["mean"] - b["macro_f1"]["mean"], pt["macro_f1"]["std"], b["macro_f1"]["std"],
                      pt["macro_f1"].get("runs", 1))
            out["series"].setdefault(name, {})[str(n)] = {k: v for k, v in d.items() if k != "seeds"}
    return out

"""Pure summaries of the evaluate stage's numbers: seed statistics of the fine-tuning records, the gains of
pre-training and of DAPT with their noise, the pre-training cost of each paradigm, and the data-efficiency
gains. No I/O except :func:`read_training`.

Noise: a fine-tuning run is repeated over seeds (sample, head initialisation, data order), and a
difference of two means is called *resolved* only when it exceeds twice the pooled seed standard deviation
``sqrt((s_a^2 + s_b^2) / 2)`` (the noise of one run), which needs at least two seeds on each side: with one
seed the std is 0 and says nothing, so such a difference is never resolved and never counts, whatever its
size. A gain *counts* when it is also at least ``MIN_GAIN`` (3 macro-F1 points), the smallest difference the
project calls worth a pre-training run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

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
    row["seeds"] = len(seeds)
    row["lr"] = m.get("lr", record.get("config", {}).get("lr"))
    return row


def pooled(a: float, b: float) -> float:
    return round(math.sqrt((a * a + b * b) / 2), 5)


def difference(table: dict, better: str, worse: str) -> dict:
    """``better`` minus ``worse`` in mean test macro-F1, with the pooled seed std and the two verdicts."""
    a, b = table[better], table[worse]
    diff = round(a["test_macro_f1"] - b["test_macro_f1"], 5)
    noise = pooled(a["test_macro_f1_std"], b["test_macro_f1_std"])
    seeds = min(a["seeds"], b["seeds"])
    resolved = seeds >= 2 and abs(diff) > 2 * noise  # one seed has no spread to judge a difference against
    return {"difference": diff, "pooled_std": noise, "resolved": resolved,
            "counts": resolved and diff >= MIN_GAIN, "seeds": seeds}


def best_pretrained(table: dict, paradigm: str) -> str:
    """The better of the pretrained and DAPT initialisations, chosen on mean *validation* macro-F1 (as the
    gate chooses), so the test split that measures the gain does not also pick the model."""
    names = [f"{paradigm}-{i}" for i in PRETRAINED_INITS if f"{paradigm}-{i}" in table]
    return max(names, key=lambda n: (table[n]["best_val_macro_f1"], n))


def gains(table: dict, paradigms) -> dict:
    """Per paradigm: pre-training (best pre-trained init minus random) and DAPT (dapt minus pretrained)."""
    out = {}
    for p in paradigms:
        best = best_pretrained(table, p)
        out[p] = {"best_init": best.split("-", 1)[1], "test_macro_f1": table[best]["test_macro_f1"],
                  "test_macro_f1_std": table[best]["test_macro_f1_std"],
                  "pretraining": difference(table, best, f"{p}-random"),
                  "dapt": difference(table, f"{p}-dapt", f"{p}-pretrained")}
    return out


def read_training(folder: Path) -> dict | None:
    """``metrics`` of a pre-training run's ``training.json`` (see :mod:`stages.pretrain`), or None."""
    path = folder / "training.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8")).get("metrics") or None


def paradigm_row(pre: dict | None, dapt: dict | None, finetuned: dict) -> dict:
    """A paradigm's cost and result: parameters, pre-training tokens (general + DAPT), FLOPs per token
    (6N + 12 * layers * d_model * seq_len, :func:`stages.training.models.flops_per_token`), total FLOPs,
    final held-out losses, and the fine-tuned test macro-F1 of its best pre-trained init. No wall time: it is
    a fact of the machine, not of the inputs (reports/timings.md has it, from the runs' live logs)."""
    runs = [m for m in (pre, dapt) if m]
    return {"parameters": (pre or dapt or {}).get("parameters"),
            "pretrain_tokens": (pre or {}).get("tokens"), "dapt_tokens": (dapt or {}).get("tokens"),
            "tokens": sum(m.get("tokens") or 0 for m in runs) or None,
            "flops_per_token": (pre or dapt or {}).get("flops_per_token"),
            "flops": sum((m.get("flops_per_token") or 0) * (m.get("tokens") or 0) for m in runs) or None,
            "pretrain_eval_loss": (pre or {}).get("eval_loss"), "dapt_eval_loss": (dapt or {}).get("eval_loss"),
            "best_init": finetuned["best_init"], "test_macro_f1": finetuned["test_macro_f1"],
            "test_macro_f1_std": finetuned["test_macro_f1_std"]}


def curve_gains(de: dict, best_init: dict[str, str]) -> dict:
    """Per paradigm with a random series on the curve: at each training size, the mean test macro-F1 of the
    better pre-trained init *at that size* minus random's, with the pooled std of the two points. The better
    init is chosen on mean validation macro-F1 at the same size (as a user with that many labels would
    choose; the test split only measures the gain); a point without validation scores counts as the lowest,
    and ties go to the init chosen for the table (``best_init``), then to the later name."""
    out = {}
    for p in {name.split("-", 1)[0] for name in de if "-" in name}:  # neural series: <paradigm>-<init>
        if f"{p}-random" not in de:
            continue
        inits = [i for i in PRETRAINED_INITS if f"{p}-{i}" in de]
        if not inits:
            continue
        rand = {pt["train_examples"]: pt["macro_f1"] for pt in de[f"{p}-random"]}
        by_init = {i: {pt["train_examples"]: pt for pt in de[f"{p}-{i}"]} for i in inits}
        rows = []
        for n in sorted({n for pts in by_init.values() for n in pts}):
            r = rand.get(n)
            have = [i for i in inits if n in by_init[i]]
            if r is None or not have:
                continue
            init = max(have, key=lambda i: (by_init[i][n].get("val_macro_f1", {}).get("mean", -1.0),
                                            i == best_init.get(p), i))
            f = by_init[init][n]["macro_f1"]
            rows.append({"train_examples": n, "init": init, "gain": round(f["mean"] - r["mean"], 5),
                         "pooled_std": pooled(f["std"], r["std"])})
        if rows:
            out[p] = {"init": best_init.get(p) if best_init.get(p) in inits else rows[-1]["init"], "points": rows}
    return dict(sorted(out.items()))


def point_at(points: list[dict], n: int) -> dict | None:
    return next((pt for pt in points if pt["train_examples"] == n), None)


def table_point(row: dict) -> dict:
    """A fine-tuning table row (:func:`run_row`) as one curve point."""
    return {"train_examples": row["train_examples"],
            "macro_f1": {"mean": row["test_macro_f1"], "std": row["test_macro_f1_std"], "runs": row["seeds"]},
            "val_macro_f1": {"mean": row["best_val_macro_f1"], "std": row["best_val_macro_f1_std"]}}


def neural_points(de: dict, table: dict | None) -> dict:
    """The curve's neural series (``<paradigm>-<init>``), each with its full-sample point from the fine-tuning
    ``table`` when the curve lacks it."""
    out = {name: list(pts) for name, pts in de.items() if "-" in name}
    for name, row in (table or {}).items():
        pts = out.setdefault(name, [])
        if point_at(pts, row["train_examples"]) is None:
            pts.append(table_point(row))
    return out


def versus_baselines(de: dict, table: dict, baselines: list[str]) -> dict:
    """Every neural series against the best baseline (chosen on validation) at each label count the baselines
    were fitted at: ``{"best": {n: {series, test_macro_f1, test_macro_f1_std, val_macro_f1}},
    "series": {name: {n: {difference, pooled_std, resolved}}}}`` (``n`` as a string; differences in test
    macro-F1, neural minus baseline; resolved as in :func:`difference`, the baseline's single whole-split fit
    counting as noise-free). The fine-tuning ``table`` supplies each model's full-sample point."""
    neural = neural_points(de, table)
    sizes = sorted({pt["train_examples"] for b in baselines for pt in de.get(b, [])})
    out: dict = {"best": {}, "series": {}}
    for n in sizes:
        best = best_at({b: de[b] for b in baselines if b in de}, n)
        if best is None:
            continue
        b = point_at(de[best], n)
        out["best"][str(n)] = {"series": best, "test_macro_f1": b["macro_f1"]["mean"],
                               "test_macro_f1_std": b["macro_f1"]["std"], "val_macro_f1": b["val_macro_f1"]["mean"]}
        for name, pts in sorted(neural.items()):
            pt = point_at(pts, n)
            if pt is None:
                continue
            diff = round(pt["macro_f1"]["mean"] - b["macro_f1"]["mean"], 5)
            noise = pooled(pt["macro_f1"]["std"], b["macro_f1"]["std"])
            resolved = pt["macro_f1"].get("runs", 1) >= 2 and abs(diff) > 2 * noise
            out["series"].setdefault(name, {})[str(n)] = {"difference": diff, "pooled_std": noise,
                                                          "resolved": resolved}
    return out

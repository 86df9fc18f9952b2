"""The report's closing verdict, written from the numbers of this run (never a fixed sentence): which
paradigm fine-tunes best, whether DAPT helped each paradigm, at which label count pre-training matters
most, and how the best neural model compares with the TF-IDF baseline. Differences are judged against twice
the pooled seed standard deviation (:mod:`stages.evaluation.summary`)."""

from __future__ import annotations

from stages.evaluation.summary import MIN_GAIN, point_at, pooled

NAMES = {"bert": "BERT", "gpt": "GPT", "t5": "T5"}
BASELINE = "tfidf-logreg"


def _noise(diff: float, std: float) -> str:
    if std == 0:
        return "with a seed std of 0 (one seed, or identical runs) to compare it with"
    side = "beyond" if abs(diff) > 2 * std else "within"
    return f"{side} twice the pooled seed std ({std:.3f})"


def best_paradigm(gains: dict) -> str:
    ranked = sorted(gains, key=lambda p: (-gains[p]["test_macro_f1"], p))
    best = ranked[0]
    g = gains[best]
    text = (f"**{NAMES.get(best, best)} fine-tunes best**: test macro-F1 {g['test_macro_f1']:.3f} ± "
            f"{g['test_macro_f1_std']:.3f} with its {g['best_init']} initialisation")
    if len(ranked) > 1:
        runner = gains[ranked[1]]
        diff = g["test_macro_f1"] - runner["test_macro_f1"]
        std = pooled(g["test_macro_f1_std"], runner["test_macro_f1_std"])
        if diff == 0:
            text = text.replace(" fine-tunes best**", " fine-tunes best** (tied)")
        text += (f", {diff:+.3f} over {NAMES.get(ranked[1], ranked[1])} ({runner['test_macro_f1']:.3f}), "
                 f"{_noise(diff, std)}")
        if std and abs(diff) <= 2 * std:
            text += ": these seeds do not separate the two"
    return text + "."


def dapt_effect(paradigm: str, g: dict) -> str:
    d = g["dapt"]
    diff = d["difference"]
    verb = "helped" if diff > 0 else "hurt" if diff < 0 else "did not change"
    text = f"DAPT {verb} {NAMES.get(paradigm, paradigm)}: {diff:+.3f} test macro-F1 (dapt minus pretrained), "
    text += _noise(diff, d["pooled_std"])
    if diff and d["pooled_std"] and not d["resolved"]:
        text += ", so no measurable effect"
    return text + "."


def pretraining_effect(gains: dict) -> str:
    parts = []
    for p, g in gains.items():
        d = g["pretraining"]
        ok = "counts" if d["counts"] else "does not count"
        parts.append(f"{NAMES.get(p, p)} {d['difference']:+.3f} ({g['best_init']} vs random; {ok})")
    return (f"Pre-training gain with the full training sample: {'; '.join(parts)} (a gain counts when it is "
            f">= {MIN_GAIN} and beyond twice the pooled seed std, over at least two seeds).")


def where_pretraining_matters(curve_gains: dict) -> str:
    points = [(g["gain"], p, g.get("init", v["init"]), g) for p, v in curve_gains.items() for g in v["points"]]
    if not points:
        return ("The data-efficiency curve has no random-initialisation series next to a pre-trained one, so it "
                "cannot say at which label count pre-training matters most.")
    gain, p, init, g = max(points, key=lambda t: (t[0], -t[3]["train_examples"]))
    if gain <= 0:
        return (f"Pre-training does not help at any label count on the curve: the largest gain of a pre-trained "
                f"initialisation over random is {gain:+.3f} ({NAMES.get(p, p)} {init}, {g['train_examples']} labels).")
    text = (f"Pre-training matters most at **{g['train_examples']} labels**: {NAMES.get(p, p)} {init} beats "
            f"random by {gain:+.3f} macro-F1, {_noise(gain, g['pooled_std'])}")
    last = curve_gains[p]["points"][-1]
    if last["train_examples"] != g["train_examples"]:
        last_init = last.get("init", curve_gains[p]["init"])
        text += (f"; with {last['train_examples']} labels the gain is {last['gain']:+.3f}"
                 + (f" ({last_init})" if last_init != init else ""))
    return text + "."


def _best_neural(de: dict, n: int) -> tuple[str, dict] | None:
    """The neural series with the best mean *validation* macro-F1 at ``n`` labels (test only measures it)."""
    cands = [(name, pt) for name, pts in de.items() if name != BASELINE
             for pt in [point_at(pts, n)] if pt is not None]
    best = (lambda c: (c[1].get("val_macro_f1", c[1]["macro_f1"])["mean"], c[0]))
    return max(cands, key=best) if cands else None


def _table_points(table: dict) -> dict:
    """The fine-tuning table as one-point series (the full-sample runs, curve or not)."""
    return {name: [{"train_examples": r["train_examples"],
                    "macro_f1": {"mean": r["test_macro_f1"], "std": r["test_macro_f1_std"]},
                    "val_macro_f1": {"mean": r["best_val_macro_f1"], "std": r["best_val_macro_f1_std"]}}]
            for name, r in table.items()}


def against_baseline(de: dict, full_n: int, table: dict | None = None) -> list[str]:
    """The best neural model (chosen on validation) against the baseline at each curve size below the full
    sample and with the full sample (there from the fine-tuning ``table`` when given)."""
    if BASELINE not in de:
        return ["No TF-IDF baseline in this run (`evaluate.baseline.enabled` is false)."]
    out = []
    small = sorted(pt["train_examples"] for pt in de[BASELINE] if pt["train_examples"] < full_n)
    for n in small + [full_n]:
        neural = _best_neural(_table_points(table) if table and n == full_n else de, n)
        base = point_at(de[BASELINE], n)
        if neural is None or base is None:
            continue
        name, pt = neural
        a, b = pt["macro_f1"], base["macro_f1"]
        diff = a["mean"] - b["mean"]
        rel = "above" if diff > 0 else "below" if diff < 0 else "level with"
        label = f"With all {n} labels of the fine-tuning sample" if n == full_n else f"At {n} labels"
        out.append(f"{label} the best neural model on validation ({name}, test {a['mean']:.3f} ± {a['std']:.3f}) is "
                   f"{abs(diff):.3f} {rel} TF-IDF + logistic regression ({b['mean']:.3f} ± {b['std']:.3f}), "
                   f"{_noise(diff, pooled(a['std'], b['std']))}.")
    whole = max(de[BASELINE], key=lambda pt: pt["train_examples"])
    if whole["train_examples"] > full_n:
        out.append(f"On the whole training split ({whole['train_examples']} labels) the baseline reaches "
                   f"{whole['macro_f1']['mean']:.3f}.")
    return out


def verdict(result: dict) -> list[str]:
    """The verdict's sentences from ``result`` (keys ``gains``, ``curve_gains``, ``data_efficiency``, ``full_n``,
    optionally ``finetune``: the table, whose runs then make the full-sample comparison)."""
    gains = result["gains"]
    lines = [best_paradigm(gains)]
    lines += [dapt_effect(p, g) for p, g in gains.items()]
    lines.append(pretraining_effect(gains))
    lines.append(where_pretraining_matters(result["curve_gains"]))
    lines += against_baseline(result["data_efficiency"], result["full_n"], result.get("finetune"))
    return lines

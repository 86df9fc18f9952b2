"""The report's closing verdict, written from this run's numbers: the best paradigm, DAPT's effect, where pre-training
matters most and how the neural models compare with the best baseline, judged by the seed noise."""

from __future__ import annotations

from stages.evaluation.baselines import module, settings_words
from stages.evaluation.report import pm
from stages.evaluation.summary import MIN_GAIN, neural_points, point_at, pooled


def _noise(diff: float, std: float) -> str:
    if std == 0:
        return "with a seed std of 0 (one seed, or identical runs) to compare it with"
    side = "beyond" if abs(diff) > 2 * std else "within"
    return f"{side} twice the pooled seed std ({std:.3f})"


def best_paradigm(gains: dict) -> str:
    ranked = sorted(gains, key=lambda p: (-gains[p]["test_macro_f1"], p))
    best = ranked[0]
    g = gains[best]
    text = (f"**{best.upper()} fine-tunes best**: test macro-F1 {pm(g, 'test_macro_f1')} with its {g['best_init']} "
            "initialisation")
    if len(ranked) > 1:
        runner = gains[ranked[1]]
        diff = g["test_macro_f1"] - runner["test_macro_f1"]
        std = pooled(g["test_macro_f1_std"], runner["test_macro_f1_std"])
        if diff == 0:
            text = text.replace(" fine-tunes best**", " fine-tunes best** (tied)")
        text += (f", {diff:+.3f} over {ranked[1].upper()} ({runner['test_macro_f1']:.3f}), "
                 f"{_noise(diff, std)}")
        if std and abs(diff) <= 2 * std:
            text += ": these seeds do not separate the two"
    return text + "."


def dapt_effect(paradigm: str, g: dict) -> str:
    d = g["dapt"]
    diff = d["difference"]
    verb = "helped" if diff > 0 else "hurt" if diff < 0 else "did not change"
    text = f"DAPT {verb} {paradigm.upper()}: {diff:+.3f} test macro-F1 (dapt minus pretrained), "
    text += _noise(diff, d["pooled_std"])
    if diff and d["pooled_std"] and not d["resolved"]:
        text += ", so no measurable effect"
    return text + "."


def pretraining_effect(gains: dict) -> str:
    parts = []
    for p, g in gains.items():
        d = g["pretraining"]
        ok = "counts" if d["counts"] else "does not count"
        parts.append(f"{p.upper()} {d['difference']:+.3f} ({g['best_init']} vs random; {ok})")
    return (f"Pre-training gain with the full training sample: {'; '.join(parts)} (a gain counts when it is "
            f">= {MIN_GAIN} and beyond twice the pooled seed std, over at least two seeds).")


def where_pretraining_matters(curve_gains: dict) -> str:
    points = [(g["gain"], p, g["init"], g) for p, v in curve_gains.items() for g in v["points"]]
    if not points:
        return ("The data-efficiency curve has no random-initialisation series next to a pre-trained one, so it "
                "cannot say at which label count pre-training matters most.")
    gain, p, init, g = max(points, key=lambda t: (t[0], -t[3]["train_examples"]))
    if gain <= 0:
        return (f"Pre-training does not help at any label count on the curve: the largest gain of a pre-trained "
                f"initialisation over random is {gain:+.3f} ({p.upper()} {init}, {g['train_examples']} labels).")
    text = (f"Pre-training matters most at **{g['train_examples']} labels**: {p.upper()} {init} beats "
            f"random by {gain:+.3f} macro-F1, {_noise(gain, g['pooled_std'])}")
    last = curve_gains[p]["points"][-1]
    if last["train_examples"] != g["train_examples"]:
        text += (f"; with {last['train_examples']} labels the gain is {last['gain']:+.3f}"
                 + (f" ({last['init']})" if last["init"] != init else ""))
    return text + "."


def _best_neural(de: dict, n: int) -> tuple[str, dict] | None:
    """The neural series with the best mean *validation* macro-F1 at ``n`` labels (test only measures it)."""
    cands = [(name, pt) for name, pts in de.items() if "-" in name  # neural series: <paradigm>-<init>
             for pt in [point_at(pts, n)] if pt is not None]
    best = (lambda c: (c[1].get("val_macro_f1", c[1]["macro_f1"])["mean"], c[0]))
    return max(cands, key=best) if cands else None


def against_baselines(result: dict) -> list[str]:
    """Per label count, the best neural model against the best baseline (both chosen on validation) and how many
    pre-trained models beat it beyond noise; then where pre-training beats the baselines and where not."""
    versus, base = result.get("versus_baselines") or {}, result.get("baselines") or {}
    if not versus.get("best"):
        return ["No practitioner baseline in this run (`evaluate.baseline`)."]

    de, full_n = result["data_efficiency"], result["full_n"]
    neural = neural_points(de, result.get("finetune"))
    out, wins, losses = [], [], []
    for key, b in versus["best"].items():
        n = int(key)
        pick = _best_neural(neural, n)
        if pick is None:
            continue
        name, pt = pick
        a = pt["macro_f1"]
        d = versus["series"][name][key]
        rel = "above" if d["difference"] > 0 else "below" if d["difference"] < 0 else "level with"
        chosen = point_at(base[b["series"]]["points"], n)["settings"]
        label = f"With all {n} labels of the fine-tuning sample" if n == full_n else f"At {n} labels"
        pre = {s: v[key] for s, v in versus["series"].items() if key in v and not s.endswith("-random")}
        above = sorted(s for s, v in pre.items() if v["resolved"] and v["difference"] > 0)
        below = sorted(s for s, v in pre.items() if v["resolved"] and v["difference"] < 0)
        top = _best_neural({s: pts for s, pts in neural.items() if not s.endswith("-random")}, n)
        d_top = versus["series"][top[0]][key] if top else None
        (wins if d_top and d_top["resolved"] and d_top["difference"] > 0 else losses).append(n)
        out.append(f"{label} the best baseline on validation is {module(b['series']).TITLE} "
                   f"({settings_words(b['series'], chosen[0])}{' ...' if len(chosen) > 1 else ''}; "
                   f"test {pm(b, 'test_macro_f1')}); the best neural model on validation ({name}, test {pm(a)}) is "
                   f"{abs(d['difference']):.3f} {rel} it, {_noise(d['difference'], d['pooled_std'])}. "
                   f"Pre-trained models above it beyond noise: {len(above)} of {len(pre)}"
                   f"{' (' + ', '.join(above) + ')' if above else ''}; below it: {len(below)}.")
    if wins and not losses:
        out.append("Pre-training beats the best baseline at every label count measured (the pre-trained model "
                   "chosen on validation, by more than twice the pooled seed std).")
    elif wins:
        out.append(f"**Pre-training beats the best baseline at {', '.join(map(str, wins))} labels and not at "
                   f"{', '.join(map(str, losses))} labels** (at this compute; the pre-trained model chosen on "
                   "validation counts when it is above the baseline by more than twice the pooled seed std).")
    else:
        out.append(f"**Pre-training does not beat the best baseline at any label count measured "
                   f"({', '.join(map(str, losses))})** at this compute: the pre-trained model chosen on validation "
                   "is never above the baseline by more than twice the pooled seed std, so for this task and these "
                   "labels the baseline serves as well or better.")
    return out


def verdict(result: dict) -> list[str]:
    """The verdict's sentences from the evaluate stage's ``result``."""
    gains = result["gains"]
    return [best_paradigm(gains), *(dapt_effect(p, g) for p, g in gains.items()), pretraining_effect(gains),
            where_pretraining_matters(result["curve_gains"]), *against_baselines(result)]

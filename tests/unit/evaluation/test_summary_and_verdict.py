"""Seed statistics of the fine-tuning records (old records without seeds included), the gains against the
pooled seed noise, the paradigm cost row, and a verdict that follows the numbers."""

from __future__ import annotations

import math

import pytest

from stages.evaluation.summary import curve_gains, gains, paradigm_row, run_row, seed_runs, versus_baselines
from stages.evaluation.verdict import verdict
from stages.finetuning.core import INITS
from stages.tokenization.trainers import PARADIGMS


def record(f1s: list[float], val: float | None = None, seeds: bool = True) -> dict:
    mean = sum(f1s) / len(f1s)
    std = math.sqrt(sum((x - mean) ** 2 for x in f1s) / (len(f1s) - 1)) if len(f1s) > 1 else 0.0
    m = {"test_accuracy": mean, "test_macro_f1": mean, "best_val_macro_f1": mean if val is None else val,
         "steps": 10, "train_examples": 500, "stopped_early": False}
    if seeds:
        m |= {"test_macro_f1_std": std, "test_accuracy_std": std, "best_val_macro_f1_std": 0.0, "lr": 1e-3,
              "seeds": [{"seed": i, "lr": 1e-3, "best_val_macro_f1": m["best_val_macro_f1"], "test_macro_f1": x,
                         "test_accuracy": x, "steps": 10} for i, x in enumerate(f1s)]}
    return {"metrics": m, "config": {"seed": 0, "lr": 5e-4}}


def test_old_records_are_one_seed_with_no_spread():
    old = record([0.4], seeds=False)
    assert len(seed_runs(old)) == 1
    row = run_row(old)
    assert row["seeds"] == 1 and row["test_macro_f1_std"] == 0.0 and row["lr"] == 5e-4
    new = run_row(record([0.4, 0.5, 0.6]))
    assert new["seeds"] == 3 and new["test_macro_f1_std"] == pytest.approx(0.1) and new["lr"] == 1e-3


def test_gains_use_the_pooled_seed_std_and_the_validation_choice():
    table = {"bert-pretrained": run_row(record([0.60, 0.62, 0.64], val=0.5)),
             "bert-dapt": run_row(record([0.70, 0.70, 0.70], val=0.4)),     # better on test, worse on validation
             "bert-random": run_row(record([0.50, 0.55, 0.60]))}
    g = gains(table, ["bert"])["bert"]
    assert g["best_init"] == "pretrained"
    pre = g["pretraining"]
    assert pre["difference"] == pytest.approx(0.07)
    assert pre["pooled_std"] == pytest.approx(math.sqrt((0.02**2 + 0.05**2) / 2), abs=1e-5)
    assert not pre["counts"] and not pre["resolved"]                 # 0.07 >= 0.03 but not > 2 x 0.038
    assert g["dapt"]["difference"] == pytest.approx(0.08)
    table["bert-random"] = run_row(record([0.53, 0.55, 0.57]))        # std 0.02: pooled 0.02
    pre = gains(table, ["bert"])["bert"]["pretraining"]
    assert pre["counts"] and pre["resolved"]
    # one seed on a side: a std of 0 is no spread to judge against, so even +0.10 neither resolves nor counts
    single = {"bert-pretrained": run_row(record([0.65], val=0.5)), "bert-dapt": run_row(record([0.6], val=0.4)),
              "bert-random": run_row(record([0.55]))}
    pre = gains(single, ["bert"])["bert"]["pretraining"]
    assert pre["difference"] == pytest.approx(0.10) and pre["seeds"] == 1
    assert not pre["resolved"] and not pre["counts"]
    from stages.evaluation.report import _noise
    assert _noise(pre) == "one seed: no spread to judge it against"


def test_paradigm_row_sums_the_runs_and_carries_no_wall_time():
    pre = {"parameters": 1000, "tokens": 2000, "flops_per_token": 6000.0, "tokens_per_second": 100.0, "eval_loss": 3.0}
    dapt = {"parameters": 1000, "tokens": 500, "flops_per_token": 6000.0, "wall_seconds": 9.0, "eval_loss": 2.5}
    row = paradigm_row(pre, dapt, {"best_init": "dapt", "test_macro_f1": 0.5, "test_macro_f1_std": 0.01})
    assert row["tokens"] == 2500 and row["flops"] == 6000.0 * 2500
    assert (row["pretrain_eval_loss"], row["dapt_eval_loss"]) == (3.0, 2.5)
    # a machine's wall time is not a result: it would make evaluation.json differ between runs of the same inputs
    assert not any("second" in k or "wall" in k for k in row)


def point(n: int, mean: float, std: float = 0.01) -> dict:
    s = {"mean": mean, "std": std, "min": mean - std, "max": mean + std, "runs": 3}
    return {"train_examples": n, "macro_f1": s, "accuracy": s}


def synthetic(strong: str, dapt_delta: float, small_gain: float, base_small: float) -> dict:
    """A result where ``strong`` fine-tunes best, DAPT moves every paradigm by ``dapt_delta``, pre-training
    gains ``small_gain`` at 100 labels (0.05 elsewhere) and the baseline scores ``base_small`` at 100 / 300."""
    table = {}
    for p in PARADIGMS:
        top = 0.7 if p == strong else 0.5
        for init, f1 in (("pretrained", top), ("dapt", top + dapt_delta), ("random", top - 0.02)):
            table[f"{p}-{init}"] = run_row(record([f1 - 0.01, f1, f1 + 0.01], val=f1))
    de = {f"{p}-{i}": [point(100, 0.3 + (0 if i == "random" else small_gain)),
                       point(300, 0.4 + (0 if i == "random" else 0.05)),
                       point(500, table[f"{p}-{i}"]["test_macro_f1"])] for p in PARADIGMS for i in INITS}
    g = gains(table, PARADIGMS)
    cg = curve_gains(de, {p: v["best_init"] for p, v in g.items()})
    settings = {"features": "word", "classifier": "svm", "class_weight": "none", "c": 1.0}
    base = [point(100, base_small), point(300, base_small), point(500, 0.6), point(2000, 0.65)]
    fast = [point(100, 0.05), point(300, 0.05), point(500, 0.9), point(2000, 0.9)]  # best on test, not validation
    for pts, val in ((base, 0.5), (fast, 0.4)):
        for pt in pts:
            pt["val_macro_f1"], pt["settings"] = {"mean": val, "std": 0.0}, [settings] if pts is base else [{"lr": 1.0, "epochs": 5}]
    de["tfidf"], de["fasttext"] = base, fast
    return {"gains": g, "data_efficiency": de, "full_n": 500, "finetune": table, "curve_gains": cg,
            "baselines": {"tfidf": {"points": base}, "fasttext": {"points": fast}},
            "versus_baselines": versus_baselines(de, table, ["tfidf", "fasttext"])}


def test_the_verdict_follows_the_numbers():
    a = verdict(synthetic("gpt", dapt_delta=0.05, small_gain=0.3, base_small=0.1))
    b = verdict(synthetic("t5", dapt_delta=-0.05, small_gain=0.01, base_small=0.9))
    assert a != b
    assert a[0].startswith("**GPT fine-tunes best**") and "0.750" in a[0] and "beyond twice" in a[0]
    assert b[0].startswith("**T5 fine-tunes best**")
    assert all(s.startswith("DAPT helped") and "+0.050" in s and "beyond" in s for s in a[1:4])
    assert all(s.startswith("DAPT hurt") and "-0.050" in s for s in b[1:4])
    assert any("matters most at **100 labels**" in s for s in a)      # the gain 0.3 at 100 labels
    assert any("matters most at **300 labels**" in s for s in b)      # 0.05 at 300 beats 0.01 at 100
    # the best baseline is the one better on validation (tfidf), though fasttext is better on test
    assert all("best baseline on validation is TF-IDF + linear classifier (word, svm, none, C 1" in s
               for s in a + b if s.startswith(("At ", "With all")))
    assert any(s.startswith("At 100 labels") and "is 0.500 above it" in s for s in a)
    assert any(s.startswith("At 100 labels") and "below it" in s for s in b)
    assert any("With all 500 labels" in s and "(gpt-dapt, test 0.750" in s and "above it" in s for s in a)
    assert any("With all 500 labels" in s and "(t5-pretrained, test 0.700" in s and "above" in s for s in b)
    assert any(s.startswith("At 300 labels") and "Pre-trained models above it beyond noise: 0 of 6; below it: 6" in s
               for s in b)
    assert not any("2000 labels" in s for s in a)  # no neural model there: nothing to compare
    assert a[-1].startswith("Pre-training beats the best baseline at every label count measured")
    assert b[-1].startswith("**Pre-training beats the best baseline at 500 labels and not at 100, 300 labels")


def test_curve_gains_choose_the_init_per_label_count_on_validation_not_test():
    def pt(n, test, val):
        p = point(n, test)
        p["val_macro_f1"] = {"mean": val, "std": 0.01, "min": val, "max": val, "runs": 3}
        return p

    de = {"bert-pretrained": [pt(100, 0.30, 0.40), pt(300, 0.60, 0.40), pt(900, 0.70, 0.80)],  # best test at 300
          "bert-dapt": [pt(100, 0.25, 0.30), pt(300, 0.50, 0.45), pt(900, 0.72, 0.70)],
          "bert-random": [point(100, 0.20), point(300, 0.40), point(900, 0.69)],
          "gpt-dapt": [pt(100, 0.5, 0.5)]}  # no random series: no gain
    g = curve_gains(de, {"bert": "pretrained"})
    assert set(g) == {"bert"}
    rows = {r["train_examples"]: r for r in g["bert"]["points"]}
    assert rows[100]["init"] == "pretrained" and rows[100]["gain"] == pytest.approx(0.10)
    assert rows[300]["init"] == "dapt" and rows[300]["gain"] == pytest.approx(0.10)  # validation picks, not test
    assert rows[900]["init"] == "pretrained" and rows[900]["gain"] == pytest.approx(0.01)
    assert g["bert"]["init"] == "pretrained"


def test_curve_gains_ties_and_missing_validation_go_to_the_tables_init():
    de = {"t5-pretrained": [point(100, 0.30), point(300, 0.35)],  # no validation scores at all
          "t5-dapt": [point(100, 0.20), point(300, 0.50)],
          "t5-random": [point(100, 0.10), point(300, 0.30)]}
    de["t5-dapt"][1]["val_macro_f1"] = {"mean": 0.4, "std": 0.0, "min": 0.4, "max": 0.4, "runs": 3}
    rows = {r["train_examples"]: r for r in curve_gains(de, {"t5": "pretrained"})["t5"]["points"]}
    assert rows[100]["init"] == "pretrained"  # neither has validation scores: the table's init
    assert rows[300]["init"] == "dapt"        # only dapt has one: it is not beaten by a missing score

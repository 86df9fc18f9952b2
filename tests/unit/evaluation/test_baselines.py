"""The practitioner baselines: each search picks what wins on validation (every feature set, every class
weighting), never on test; the C walk always looks past its best; fastText learns and repeats itself; the
baselines train on the neural runs' samples; the best baseline is chosen on validation."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from stages.evaluation.baselines import BaselineConfig, best_at, run_baselines
from stages.evaluation.baselines.fasttext import FastTextConfig
from stages.evaluation.baselines.fasttext import fit_score as fasttext_fit
from stages.evaluation.baselines.tfidf import TfidfConfig, fit_score, walk
from stages.finetuning.core import FinetuneConfig, sample_train

FILLER = ["the", "an", "of", "and", "to", "in", "we", "saw", "it", "on"]


def _stem(rng: random.Random) -> str:
    return "".join(rng.choice("bcdfghjklmnprstvwz") + rng.choice("aeiou") for _ in range(3))


def feature_data(winner: str, seed: int = 0):
    """Texts whose label only ``winner``'s features can read. word: the order of two words every text has
    (character n-grams inside words cannot see it); char: a suffix on a word never seen twice (word n-grams
    cannot generalise it); word+char: four labels, the order times the suffix (each alone reads half)."""
    rng = random.Random(seed)
    k = 4 if winner == "word+char" else 2

    def text(label: int) -> str:
        words = [rng.choice(FILLER) for _ in range(6)]
        if winner in ("char", "word+char"):
            words.insert(rng.randrange(7), _stem(rng) + ("ology" if label % 2 == 0 else "ments"))
        if winner in ("word", "word+char"):
            pair = ["red", "blue"] if (label // (2 if k == 4 else 1)) % 2 == 0 else ["blue", "red"]
            i = rng.randrange(len(words) + 1)
            words[i:i] = pair
        return " ".join(words)

    def split(n: int):
        ys = [i % k for i in range(n)]
        return [text(y) for y in ys], np.array(ys)

    return split(60), split(40), split(40), k


def weight_data(winner: str):
    """balanced wins: a rare class always has 'xx', which 30% of the common class has too (unweighted, the
    common class takes every 'xx'). none wins: a rare class whose training texts ('apple zeta') say nothing
    about its validation texts, so weighting it up only costs the common class its 'apple zeta' texts."""
    rng = random.Random(0)

    def text(words: list[str]) -> str:
        return " ".join(words + [rng.choice(FILLER) for _ in range(4)])

    def split(evaluation: bool):
        texts, ys = [], []
        for i in range(100):
            if winner == "balanced":
                texts.append(text(["xx" if i % 10 < 3 else "yy"]))
                ys.append(0)
            else:
                texts += [text(["apple", "zeta"] if i % 10 == 0 else ["apple"]), text(["berry"])]
                ys += [0, 1]
        for _ in range(10):
            texts.append(text(["xx"] if winner == "balanced" else ["berry"] if evaluation else ["apple", "zeta"]))
            ys.append(1 if winner == "balanced" else 2)
        return texts, np.array(ys)

    return split(False), split(True), split(True), 2 if winner == "balanced" else 3


LABELS = ["river", "market", "castle"]
WORDS = {"river": ["harbour", "bridge", "canal"], "market": ["factory", "station", "shop"],
         "castle": ["museum", "theatre", "tower"]}


def task(n_per_label: int = 30) -> pd.DataFrame:
    rng = random.Random(0)
    rows = []
    for label, words in WORDS.items():
        for i in range(n_per_label):
            text = f"we saw the {rng.choice(words)} and the {rng.choice(sum(WORDS.values(), []))} on day {i}"
            rows.append({"text": text, "label": label, "split": ("test", "validation", "train", "train", "train")[i % 5]})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("winner", ["word", "char", "word+char"])
def test_the_search_picks_each_feature_set_where_it_wins(winner):
    train, val, test, k = feature_data(winner)
    r = fit_score(train, val, test, k, TfidfConfig())
    assert r["settings"]["features"] == winner
    assert r["best_val_macro_f1"] >= 0.9 and r["test_macro_f1"] >= 0.7
    for other in {"word", "char", "word+char"} - {winner}:  # the winner is strictly better, or earlier on a tie
        alone = fit_score(train, val, test, k, TfidfConfig(features=(other,)))
        order = ("word", "char", "word+char")
        assert alone["best_val_macro_f1"] < r["best_val_macro_f1"] or order.index(winner) < order.index(other)
    assert fit_score(train, val, test, k, TfidfConfig(features=(winner,)))["best_val_macro_f1"] == \
        r["best_val_macro_f1"]


@pytest.mark.parametrize("winner", ["none", "balanced"])
def test_the_search_picks_each_class_weighting_where_it_wins(winner):
    train, val, test, k = weight_data(winner)
    r = fit_score(train, val, test, k, TfidfConfig())
    assert r["settings"]["class_weight"] == winner
    other = {"none": "balanced", "balanced": "none"}[winner]
    assert fit_score(train, val, test, k, TfidfConfig(class_weights=(other,)))["best_val_macro_f1"] < \
        r["best_val_macro_f1"]


def test_validation_not_test_chooses_the_settings():
    # train and validation agree on the words of each label, test contradicts them
    train = (["alpha river", "beta market", "gamma castle"] * 4, np.array([0, 1, 2] * 4))
    val = (["alpha", "beta", "gamma"], np.array([0, 1, 2]))
    test = (["alpha", "beta", "gamma"], np.array([1, 2, 0]))
    r = fit_score(train, val, test, 3, TfidfConfig(features=("word",), class_weights=("none",)))
    assert r["best_val_macro_f1"] == 1.0 and r["test_macro_f1"] == 0.0
    f = fasttext_fit(train, val, test, 3, FastTextConfig(lrs=(0.5,), epochs=(50,), char_ngrams=(0, 0)))
    assert f["best_val_macro_f1"] == 1.0 and f["test_macro_f1"] == 0.0


@pytest.mark.parametrize("peak", [-5, -1, 0, 2, 6])
def test_the_c_walk_looks_past_its_best_both_ways(peak):
    cfg = TfidfConfig(c_start=1.0, c_step=10.0, c_min=1e-3, c_max=1e3, patience=2)
    seen = []

    def score(c):
        seen.append(c)
        return -abs(np.log10(c) - peak), None  # validation peaks at C = 10**peak

    path = walk(score, cfg)
    cs = [c for c, _, _ in path]
    assert cs == sorted(cs) and len(cs) == len(set(seen))
    bounded = min(max(peak, -3), 3)
    assert max(path, key=lambda t: t[1])[0] == pytest.approx(10.0 ** bounded)
    # from C = 1 towards the best, then two worse values beyond it on each side, unless a bound came first
    lo, hi = max(min(0, bounded) - 2, -3), min(max(0, bounded) + 2, 3)
    one = walk(lambda c: (-abs(np.log10(c) - peak), None), TfidfConfig(c_step=10.0, patience=1))
    assert [c for c, _, _ in one] == pytest.approx([10.0 ** k for k in range(max(min(0, bounded) - 1, -3),
                                                                             min(max(0, bounded) + 1, 3) + 1)])
    assert cs == pytest.approx([10.0 ** k for k in range(lo, hi + 1)])


def test_a_c_at_the_bound_of_the_range_is_reported():
    train, val, test, k = weight_data("balanced")
    free = fit_score(train, val, test, k, TfidfConfig(features=("word",)))
    boxed = fit_score(train, val, test, k, TfidfConfig(features=("word",), c_min=1.0, c_max=1.0))
    assert boxed["fits"] == 2 and boxed["at_bound"] and boxed["settings"]["c"] == 1.0
    assert not free["at_bound"] and free["fits"] > 2


def test_fasttext_learns_and_repeats_itself():
    df, index = task(), {lab: i for i, lab in enumerate(LABELS)}
    train, val, test = ((df.loc[df["split"] == s, "text"].tolist(), df.loc[df["split"] == s, "label"].map(index).to_numpy())
                        for s in ("train", "validation", "test"))
    cfg = FastTextConfig(lrs=(0.5, 1.0), epochs=(50,))
    a = fasttext_fit(train, val, test, 3, cfg, seed=3)
    b = fasttext_fit(train, val, test, 3, cfg, seed=3)
    assert a["test_macro_f1"] >= 0.7 and a["settings"]["lr"] in cfg.lrs and a["fits"] == 2  # chance: about 0.33
    assert {x: v for x, v in a.items() if x != "seconds"} == {x: v for x, v in b.items() if x != "seconds"}
    assert a["at_bound"]  # one of two rates is always an edge of that grid
    assert not fasttext_fit(train, val, test, 3, FastTextConfig(lrs=(0.5,), epochs=(50,)))["at_bound"]


QUICK = BaselineConfig(tfidf=TfidfConfig(features=("word",), class_weights=("none",)),
                       fasttext=FastTextConfig(lrs=(0.5,), epochs=(10,)))


def test_baselines_train_on_the_neural_runs_samples_and_agree_across_workers(monkeypatch):
    import stages.evaluation.baselines.tfidf as tfidf

    df = task()
    seen = []
    real = tfidf.fit_score
    monkeypatch.setattr(tfidf, "fit_score", lambda train, *a, **k: seen.append(train[0]) or real(train, *a, **k))
    out = run_baselines(df, LABELS, QUICK, [(15, [3]), (0, [5, 6])])
    assert list(out) == ["tfidf", "fasttext"]
    expected = sample_train(df, FinetuneConfig(labels=tuple(LABELS), seed=3), 15)["text"].tolist()
    assert seen[-1] == expected and len(seen) == 2  # the whole split first (largest first), then the sample
    for name in out:
        assert [p["train_examples"] for p in out[name]] == [15, 54]
        assert [r["seed"] for r in out[name][0]["runs"]] == [3] and len(out[name][1]["runs"]) == 1  # whole: once
    drop = (lambda pts: [[{k: v for k, v in r.items() if k != "seconds"} for r in p["runs"]] for p in pts])
    pooled = run_baselines(df, LABELS, QUICK, [(15, [3]), (0, [5, 6])], workers=2)
    assert {n: drop(p) for n, p in pooled.items()} == {n: drop(p) for n, p in out.items()}
    assert run_baselines(df, LABELS, BaselineConfig(enabled=False), [(15, [3])]) == {}


def test_the_best_baseline_is_chosen_on_validation_not_test():
    def pt(n, test, val):
        s = (lambda m: {"mean": m, "std": 0.0, "min": m, "max": m, "runs": 1})
        return {"train_examples": n, "macro_f1": s(test), "val_macro_f1": s(val)}

    series = {"tfidf": [pt(100, 0.9, 0.5), pt(300, 0.5, 0.6)], "fasttext": [pt(100, 0.4, 0.6), pt(300, 0.9, 0.6)]}
    assert best_at(series, 100) == "fasttext"  # better on validation, worse on test
    assert best_at(series, 300) == "tfidf"     # a validation tie: the first in SERIES order
    assert best_at(series, 1000) is None

"""TF-IDF features (sublinear tf, L2 rows; word n-grams, ``char_wb`` n-grams or both side by side) + a linear SVM or
logistic regression, searched on validation: each feature set x classifier x class weighting walks over C on a log
grid from ``c_start`` both ways until ``patience`` steps bring nothing better or a bound is reached (``at_bound``).
The best validation macro-F1 chooses (ties: config order, then the smaller C); test scores that model only."""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass

import numpy as np

from stages.config import check
from stages.finetuning.metrics import scores

FEATURES = ("word", "char", "word+char")
CLASS_WEIGHTS = ("none", "balanced")
CLASSIFIERS = ("svm", "logreg")


@dataclass(frozen=True, kw_only=True)
class TfidfConfig:
    """TF-IDF features + a linear classifier. Each feature set x classifier x class weighting walks over C on a
    log grid from `c_start`, both ways; the best validation macro-F1 chooses."""

    enabled: bool = True
    """Fit this baseline."""
    features: tuple[str, ...] = FEATURES
    """Feature sets searched: `word`, `char` (scikit-learn's `char_wb`), `word+char`."""
    classifiers: tuple[str, ...] = ("svm",)
    """Classifiers searched: `svm` (linear SVM) and/or `logreg` (logistic regression, much slower)."""
    class_weights: tuple[str, ...] = CLASS_WEIGHTS
    """Class weightings searched: `none` and/or `balanced` (inverse to the sample's label counts)."""
    word_ngrams: tuple[int, int] = (1, 2)
    """Word n-gram range [min, max]."""
    char_ngrams: tuple[int, int] = (2, 5)
    """Character n-gram range [min, max], inside word boundaries."""
    min_df: int = 1
    """Training documents a term must occur in, >= 1."""
    c_start: float = 1.0
    """First C of the walk (inverse regularisation strength), in [c_min, c_max]."""
    c_step: float = math.sqrt(10.0)
    """Factor between neighbouring C values, > 1."""
    c_min: float = 1e-3
    """Lowest C the walk may reach."""
    c_max: float = 1e3
    """Highest C the walk may reach."""
    patience: int = 2
    """A direction stops after this many steps in a row without a better validation macro-F1."""
    max_iter: int = 2000
    """Solver iterations per fit."""

    def __post_init__(self) -> None:
        for name, values, allowed in (("features", self.features, FEATURES),
                                      ("classifiers", self.classifiers, CLASSIFIERS),
                                      ("class_weights", self.class_weights, CLASS_WEIGHTS)):
            check(len(values) >= 1 and all(v in allowed for v in values) and len(set(values)) == len(values),
                  f"{name}: one or more of {', '.join(allowed)}, each once")
        for name, (lo, hi) in (("word_ngrams", self.word_ngrams), ("char_ngrams", self.char_ngrams)):
            check(1 <= lo <= hi, f"{name}: [min, max] with 1 <= min <= max")
        check(self.min_df >= 1, "min_df: must be >= 1")
        check(0 < self.c_min <= self.c_start <= self.c_max, "c_start: must lie in [c_min, c_max], all > 0")
        check(self.c_step > 1, "c_step: must be > 1")
        check(self.patience >= 1, "patience: must be >= 1")
        check(self.max_iter >= 1, "max_iter: must be >= 1")


TITLE = "TF-IDF + linear classifier"


def search_words(cfg: dict) -> str:
    """What the search tries, from the config (as the report states it)."""
    return (f"TF-IDF (sublinear tf, L2 rows) over {' / '.join(cfg['features'])} features (word "
            f"{cfg['word_ngrams'][0]}-{cfg['word_ngrams'][1]} grams, `char_wb` {cfg['char_ngrams'][0]}-"
            f"{cfg['char_ngrams'][1]} grams) x classifier {' / '.join(cfg['classifiers'])} (`svm`: linear SVM, "
            f"`logreg`: logistic regression) x class weights {' / '.join(cfg['class_weights'])}, each with a walk "
            f"over C from {cfg['c_start']:g} in steps of x{cfg['c_step']:.3g} both ways until {cfg['patience']} "
            f"steps bring no better validation macro-F1 (bounds {cfg['c_min']:g}-{cfg['c_max']:g}).")


def settings_words(settings: dict) -> str:
    """One run's chosen settings in a few words: ``word+char, svm, balanced, C 0.1``."""
    return f"{settings['features']}, {settings['classifier']}, {settings['class_weight']}, C {settings['c']:.3g}"


def featurise(texts: tuple[list[str], list[str], list[str]], cfg: TfidfConfig) -> dict[str, tuple]:
    """Feature set -> (train, validation, test) matrices; each vectoriser is fitted on the training texts."""
    from scipy import sparse
    from sklearn.feature_extraction.text import TfidfVectorizer

    base = {}
    for kind in {k for f in cfg.features for k in f.split("+")}:
        vec = TfidfVectorizer(ngram_range=tuple(cfg.word_ngrams if kind == "word" else cfg.char_ngrams),
                              analyzer="word" if kind == "word" else "char_wb", sublinear_tf=True, min_df=cfg.min_df)
        base[kind] = (vec.fit_transform(texts[0]), vec.transform(texts[1]), vec.transform(texts[2]))
    return {f: base[f] if "+" not in f else
            tuple(sparse.hstack([base[k][i] for k in f.split("+")]).tocsr() for i in range(3))
            for f in cfg.features}


def walk(score, cfg: TfidfConfig) -> list[tuple[float, float, object]]:
    """``(C, validation macro-F1, model)`` for every C the walk tried, smallest C first; ``score(C)`` fits one."""
    tried = {}

    def visit(k: int) -> float:
        c = cfg.c_start * cfg.c_step ** k
        tried[k] = (round(c, 6), *score(c))
        return tried[k][1]

    best = visit(0)
    for direction, bound in ((1, cfg.c_max), (-1, cfg.c_min)):
        k, since, top = 0, 0, best
        while since < cfg.patience:
            k += direction
            c = cfg.c_start * cfg.c_step ** k
            if c > bound * (1 + 1e-9) if direction > 0 else c < bound * (1 - 1e-9):
                break
            f1 = visit(k)
            since = 0 if f1 > top else since + 1
            top = max(top, f1)
    return [tried[k] for k in sorted(tried)]


def fit_score(train: tuple[list[str], np.ndarray], val: tuple[list[str], np.ndarray],
              test: tuple[list[str], np.ndarray], num_labels: int, cfg: TfidfConfig, *, seed: int = 0) -> dict:
    """Search on ``val``, score the chosen model on ``test``. Pure: same in, same out."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import LinearSVC

    start = time.perf_counter()
    if len(np.unique(train[1])) < 2:  # a sample with one class: the classifier is that class
        only = int(train[1][0])
        val_f1 = scores(val[1], np.full(len(val[1]), only), num_labels)["macro_f1"]
        s = scores(test[1], np.full(len(test[1]), only), num_labels)
        return {"train_examples": len(train[0]), "settings": {"constant": only}, "best_val_macro_f1": val_f1,
                "test_macro_f1": s["macro_f1"], "test_accuracy": s["accuracy"], "features": 0, "parameters": 0,
                "fits": 0, "at_bound": False, "seconds": round(time.perf_counter() - start, 3)}
    matrices = featurise((train[0], val[0], test[0]), cfg)
    best, fits = None, 0
    for feats in cfg.features:
        x_train, x_val, x_test = matrices[feats]
        for kind in cfg.classifiers:
            for weight in cfg.class_weights:
                def score(c: float):
                    with warnings.catch_warnings():  # a walk's far end may stop short of convergence; it loses
                        warnings.simplefilter("ignore")
                        clf = (LinearSVC if kind == "svm" else LogisticRegression)(
                            C=c, class_weight=None if weight == "none" else "balanced", max_iter=cfg.max_iter,
                            random_state=seed).fit(x_train, train[1])
                    return scores(val[1], clf.predict(x_val), num_labels)["macro_f1"], clf

                path = walk(score, cfg)
                fits += len(path)
                c, f1, clf = max(path, key=lambda t: (t[1], -t[0]))
                at_bound = (c == path[-1][0] and c * cfg.c_step > cfg.c_max * (1 + 1e-9)) or \
                           (c == path[0][0] and c / cfg.c_step < cfg.c_min * (1 - 1e-9))
                if best is None or f1 > best["best_val_macro_f1"]:
                    best = {"settings": {"features": feats, "classifier": kind, "class_weight": weight, "c": c},
                            "best_val_macro_f1": f1, "model": clf, "x_test": x_test, "at_bound": at_bound,
                            "features": x_train.shape[1]}
    clf = best.pop("model")
    s = scores(test[1], clf.predict(best.pop("x_test")), num_labels)
    return {"train_examples": len(train[0]), **best, "test_macro_f1": s["macro_f1"], "test_accuracy": s["accuracy"],
            "parameters": int(clf.coef_.size + np.size(clf.intercept_)), "fits": fits,
            "seconds": round(time.perf_counter() - start, 3)}

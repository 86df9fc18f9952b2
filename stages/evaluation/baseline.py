"""The non-neural reference: TF-IDF features + logistic regression, on the same splits, training samples and
seeds as the neural runs, so every neural number has a baseline that needs no pre-training at all.

Features: word unigrams and bigrams, ``sublinear_tf`` (1 + log tf), L2-normalised rows, fitted on the
training sample only (Manning, Raghavan & Schuetze 2008, ch. 6; the linear TF-IDF baseline of Joulin et al.
2017 and Wang & Manning 2012). Classifier: multinomial logistic regression with an L2 penalty; its inverse
strength ``C`` is chosen from ``c_grid`` by macro-F1 on the validation split (the test split never
chooses; ties go to the smaller, more regularised ``C``), then the chosen model is scored once on test.

The training sample of ``n`` examples and seed ``s`` is :func:`stages.finetune.sample_train`'s, the very
rows the neural run of that size and seed trained on."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True)
class BaselineConfig:
    """enabled: run the baseline. c_grid: inverse regularisation strengths tried on validation.
    ngram_max: longest word n-gram. min_df: documents a term must occur in (in the training sample).
    max_iter: solver iterations. solver: scikit-learn's ``saga`` (default: on all 9,274 task texts and about
    200k n-gram features it fits in 10-30 s where ``lbfgs`` took about 86 s per C value, at the same
    validation macro-F1 within 0.003) or ``lbfgs``."""

    enabled: bool = True
    c_grid: tuple[float, ...] = (1.0, 3.0, 10.0, 30.0, 100.0)
    ngram_max: int = 2
    min_df: int = 1
    max_iter: int = 1000
    solver: str = "saga"

    def __post_init__(self) -> None:
        from stages.config import check

        check(len(self.c_grid) >= 1 and all(c > 0 for c in self.c_grid), "c_grid: one or more values > 0")
        check(self.ngram_max >= 1, "ngram_max: must be >= 1")
        check(self.min_df >= 1, "min_df: must be >= 1")
        check(self.max_iter >= 1, "max_iter: must be >= 1")
        check(self.solver in ("saga", "lbfgs"), "solver: one of saga, lbfgs")


def fit_score(train: tuple[list[str], np.ndarray], val: tuple[list[str], np.ndarray],
              test: tuple[list[str], np.ndarray], num_labels: int, cfg: BaselineConfig, *, seed: int = 0) -> dict:
    """Fit on ``train`` (texts, label ids), choose ``C`` on ``val``, score on ``test``. Pure: same in, same out."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    from stages.finetuning.metrics import scores

    start = time.perf_counter()
    vec = TfidfVectorizer(ngram_range=(1, cfg.ngram_max), sublinear_tf=True, min_df=cfg.min_df)
    x_train = vec.fit_transform(train[0])
    x_val, x_test = vec.transform(val[0]), vec.transform(test[0])
    if len(np.unique(train[1])) < 2:  # a tiny sample with one class: the classifier is that class
        only = int(train[1][0])
        fits = [(c, scores(val[1], np.full(len(val[1]), only), num_labels)["macro_f1"], None) for c in cfg.c_grid[:1]]
    else:
        fits = []
        for c in cfg.c_grid:
            clf = LogisticRegression(C=c, max_iter=cfg.max_iter, solver=cfg.solver,
                                     random_state=seed).fit(x_train, train[1])
            fits.append((c, scores(val[1], clf.predict(x_val), num_labels)["macro_f1"], clf))
    c, val_f1, clf = max(fits, key=lambda f: (f[1], -f[0]))  # best validation macro-F1; ties: smaller C
    pred = clf.predict(x_test) if clf is not None else np.full(len(test[1]), int(train[1][0]))
    s = scores(test[1], pred, num_labels)
    return {"train_examples": len(train[0]), "c": c, "best_val_macro_f1": val_f1, "test_macro_f1": s["macro_f1"],
            "test_accuracy": s["accuracy"], "features": len(vec.vocabulary_),
            "parameters": (len(vec.vocabulary_) + 1) * (1 if clf is None else clf.coef_.shape[0]),
            "seconds": round(time.perf_counter() - start, 3)}


def _fit_job(state: dict, job: tuple[int, int]) -> dict:
    """One (training size, seed) fit of :func:`run_baseline` (module level, so a worker can run it)."""
    from stages.finetuning.core import FinetuneConfig, sample_train

    n, seed = job
    labels, index = state["labels"], {lab: i for i, lab in enumerate(state["labels"])}
    sample = sample_train(state["df"], FinetuneConfig(labels=tuple(labels), seed=seed), n)
    train = (sample["text"].tolist(), sample["label"].map(index).to_numpy())
    return {"seed": seed, **fit_score(train, state["val"], state["test"], len(labels), state["cfg"], seed=seed)}


def run_baseline(df, labels: list[str], cfg: BaselineConfig, points: list[tuple[int, list[int]]], *,
                 workers: int = 1) -> list[dict]:
    """One point per ``(training size, seeds)`` in ``points``, in that order: ``{train_examples, runs: [fit_score
    per seed]}``. A size of 0 or of the whole training split is the whole split, run once (no sample to vary).
    The fits run on ``workers`` processes (:func:`stages.common.pool.run_ordered`); the results do not depend
    on it."""
    from stages.common.pool import run_ordered

    index = {lab: i for i, lab in enumerate(labels)}

    def split(frame) -> tuple[list[str], np.ndarray]:
        return frame["text"].tolist(), frame["label"].map(index).to_numpy()

    whole = int((df["split"] == "train").sum())
    jobs = [[(n, seed) for seed in (seeds if 0 < n < whole else seeds[:1])] for n, seeds in points]
    flat = sorted((job for point in jobs for job in point), key=lambda j: -(j[0] if 0 < j[0] < whole else whole))
    state = {"df": df[["text", "label", "split"]],
             "labels": list(labels), "cfg": cfg,
             "val": split(df[df["split"] == "validation"]), "test": split(df[df["split"] == "test"])}
    done = dict(zip(flat, run_ordered(_fit_job, state, flat, workers=workers)))  # the largest fits first
    out = []
    for point in jobs:
        runs = [done[job] for job in point]
        out.append({"train_examples": runs[0]["train_examples"], "runs": runs})
    return out

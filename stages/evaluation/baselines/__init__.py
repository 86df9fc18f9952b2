"""The practitioner baselines the neural models are compared with: models that need no pre-training at all,
each searched on the validation split and fitted on the very training samples (and seeds) of the neural runs.

One entry of :data:`SERIES` per baseline: its series name (as it appears in the report, the metrics and the
plots) -> (its config field on :class:`BaselineConfig`, its module). The module has ``fit_score(train, val,
test, num_labels, cfg, *, seed)``, ``TITLE``, ``search_words(cfg)`` and ``settings_words(settings)`` (the
report's words). Adding a baseline is such a module with its config plus one entry here and one field.

At each label count the *best baseline* is the series with the best mean validation macro-F1 over the seeds
(:func:`best_at`); the report, the verdict and the metrics compare every neural model with it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stages.common.pool import run_ordered
from stages.evaluation.baselines.fasttext import FastTextConfig
from stages.evaluation.baselines.tfidf import TfidfConfig
from stages.finetuning.core import FinetuneConfig, sample_train

# series name -> (config field on BaselineConfig, module)
SERIES = {
    "tfidf": ("tfidf", "stages.evaluation.baselines.tfidf"),
    "fasttext": ("fasttext", "stages.evaluation.baselines.fasttext"),
}


@dataclass(frozen=True, kw_only=True)
class BaselineConfig:
    """Baselines without pre-training, each fitted on the same training samples as the neural models and searched
    on validation.
    """

    enabled: bool = True
    """Fit the baselines at all; false = none, whatever their own `enabled`."""
    tfidf: TfidfConfig = field(default_factory=TfidfConfig)
    """The TF-IDF + linear classifier baseline."""
    fasttext: FastTextConfig = field(default_factory=FastTextConfig)
    """The fastText baseline."""

    def series(self) -> list[str]:
        """The baselines this config fits, in :data:`SERIES` order."""
        return [name for name, (attr, _) in SERIES.items() if self.enabled and getattr(self, attr).enabled]


def module(name: str):
    """The module of baseline series ``name``."""
    import importlib

    return importlib.import_module(SERIES[name][1])


def title(name: str) -> str:
    return module(name).TITLE


def search_words(name: str, cfg: dict) -> str:
    """What baseline ``name``'s search tries, from its config (a dict, as the report's config holds it)."""
    return module(name).search_words(cfg)


def settings_words(name: str, settings: dict) -> str:
    """One run's chosen settings in a few words."""
    return "one class in the sample" if "constant" in settings else module(name).settings_words(settings)


def _fit_job(state: dict, job: tuple[str, int, int]) -> dict:
    """One (baseline, training size, seed) fit of :func:`run_baselines` (module level, so a worker can run it)."""
    name, n, seed = job
    attr = SERIES[name][0]
    labels, index = state["labels"], {lab: i for i, lab in enumerate(state["labels"])}
    sample = sample_train(state["df"], FinetuneConfig(labels=tuple(labels), seed=seed), n)
    train = (sample["text"].tolist(), sample["label"].map(index).to_numpy())
    fit = module(name).fit_score
    return {"seed": seed, **fit(train, state["val"], state["test"], len(labels), getattr(state["cfg"], attr),
                                seed=seed)}


def run_baselines(df, labels: list[str], cfg: BaselineConfig, points: list[tuple[int, list[int]]], *,
                  workers: int = 1) -> dict[str, list[dict]]:
    """Per baseline series, one point per ``(training size, seeds)`` in ``points``, in that order:
    ``{train_examples, runs: [fit_score per seed]}``. A size of 0 or of the whole training split is the whole
    split, fitted once (no sample to vary). The fits run on ``workers`` processes, the largest first
    (:func:`stages.common.pool.run_ordered`); the results do not depend on ``workers``."""
    index = {lab: i for i, lab in enumerate(labels)}

    def split(frame) -> tuple[list[str], np.ndarray]:
        return frame["text"].tolist(), frame["label"].map(index).to_numpy()

    whole = int((df["split"] == "train").sum())
    size = (lambda n: n if 0 < n < whole else whole)
    jobs = {name: [[(name, n, seed) for seed in (seeds if 0 < n < whole else seeds[:1])] for n, seeds in points]
            for name in cfg.series()}
    flat = sorted((job for point_jobs in jobs.values() for point in point_jobs for job in point),
                  key=lambda j: (-size(j[1]), list(SERIES).index(j[0])))
    state = {"df": df[["text", "label", "split"]], "labels": list(labels), "cfg": cfg,
             "val": split(df[df["split"] == "validation"]), "test": split(df[df["split"] == "test"])}
    done = dict(zip(flat, run_ordered(_fit_job, state, flat, workers=workers)))
    return {name: [{"train_examples": done[point[0]]["train_examples"], "runs": [done[j] for j in point]}
                   for point in point_jobs] for name, point_jobs in jobs.items()}


def best_at(series: dict[str, list[dict]], n: int) -> str | None:
    """The baseline series with the best mean validation macro-F1 at ``n`` labels (ties: :data:`SERIES` order);
    ``series``: name -> points with ``train_examples`` and ``val_macro_f1``."""
    cands = [(pt["val_macro_f1"]["mean"], -list(SERIES).index(name), name) for name, pts in series.items()
             for pt in pts if pt["train_examples"] == n]
    return max(cands)[2] if cands else None

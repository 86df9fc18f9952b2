"""The practitioner baselines: models that need no pre-training, each searched on validation and fitted on the very
training samples and seeds of the neural runs. A baseline is a module here named as its series and its config field,
with ``fit_score``, ``TITLE``, ``search_words`` and ``settings_words``; the *best baseline* at a label count is the
one with the best mean validation macro-F1 (:func:`best_at`)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

import numpy as np

from stages.common.pool import Plan, run_plan
from stages.evaluation.baselines.fasttext import FastTextConfig
from stages.evaluation.baselines.tfidf import TfidfConfig
from stages.finetuning.core import FinetuneConfig, sample_train

SERIES = ("tfidf", "fasttext")  # each the name of its module and of its field on BaselineConfig


@dataclass(frozen=True, kw_only=True)
class BaselineConfig:
    """Baselines without pre-training, each fitted on the same training samples as the neural models and searched
    on validation."""

    enabled: bool = True
    """Fit the baselines at all; false = none, whatever their own `enabled`."""
    tfidf: TfidfConfig = field(default_factory=TfidfConfig)
    """The TF-IDF + linear classifier baseline."""
    fasttext: FastTextConfig = field(default_factory=FastTextConfig)
    """The fastText baseline."""

    def series(self) -> list[str]:
        """The baselines this config fits, in :data:`SERIES` order."""
        return [name for name in SERIES if self.enabled and getattr(self, name).enabled]


def module(name: str):
    return importlib.import_module(f"{__name__}.{name}")


def settings_words(name: str, settings: dict) -> str:
    """One run's chosen settings in a few words."""
    return "one class in the sample" if "constant" in settings else module(name).settings_words(settings)


def _fit_job(state: dict, job: tuple[str, int, int]) -> dict:
    """One (baseline, training size, seed) fit of :func:`run_baselines` (module level, so a worker can run it)."""
    name, n, seed = job
    labels = state["labels"]
    train = _split(sample_train(state["df"], FinetuneConfig(labels=tuple(labels), seed=seed), n), labels)
    return {"seed": seed, **module(name).fit_score(train, state["val"], state["test"], len(labels),
                                                   getattr(state["cfg"], name), seed=seed)}


def _split(frame, labels: list[str]) -> tuple[list[str], np.ndarray]:
    """Texts and label indices of ``frame``."""
    return frame["text"].tolist(), frame["label"].map({lab: i for i, lab in enumerate(labels)}).to_numpy()


def fits_plan(df, labels: list[str], cfg: BaselineConfig, points: list[tuple[int, list[int]]]) -> Plan:
    """The fits of :func:`run_baselines` as a :class:`~stages.common.pool.Plan` (largest first), to share a pool."""
    whole = int((df["split"] == "train").sum())
    size = (lambda n: n if 0 < n < whole else whole)
    jobs = {name: [[(name, n, seed) for seed in (seeds if 0 < n < whole else seeds[:1])] for n, seeds in points]
            for name in cfg.series()}
    flat = sorted((job for point_jobs in jobs.values() for point in point_jobs for job in point),
                  key=lambda j: (-size(j[1]), SERIES.index(j[0])))
    state = {"df": df[["text", "label", "split"]], "labels": list(labels), "cfg": cfg,
             "val": _split(df[df["split"] == "validation"], labels), "test": _split(df[df["split"] == "test"], labels)}

    def finish(results: list[dict]) -> dict[str, list[dict]]:
        done = dict(zip(flat, results))
        return {name: [{"train_examples": done[point[0]]["train_examples"], "runs": [done[j] for j in point]}
                       for point in point_jobs] for name, point_jobs in jobs.items()}

    return Plan(_fit_job, state, flat, finish)


def run_baselines(df, labels: list[str], cfg: BaselineConfig, points: list[tuple[int, list[int]]], *,
                  workers: int = 1) -> dict[str, list[dict]]:
    """Per baseline series, one point ``{train_examples, runs: [fit_score per seed]}`` per ``(training size, seeds)``
    of ``points``; a size of 0 or of the whole split is the whole split, fitted once. The fits run on ``workers``
    processes, the largest first; the results do not depend on ``workers``."""
    return run_plan(fits_plan(df, labels, cfg, points), workers=workers)


def best_at(series: dict[str, list[dict]], n: int) -> str | None:
    """The baseline series with the best mean validation macro-F1 at ``n`` labels (ties: :data:`SERIES` order);
    ``series``: name -> points with ``train_examples`` and ``val_macro_f1``."""
    cands = [(pt["val_macro_f1"]["mean"], -SERIES.index(name), name) for name, pts in series.items()
             for pt in pts if pt["train_examples"] == n]
    return max(cands)[2] if cands else None

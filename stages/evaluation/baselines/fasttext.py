"""A fastText classifier (Joulin et al. 2017; the ``fasttext-community`` build, one thread and a fixed seed so a fit
repeats): learning rate x epochs chosen on validation macro-F1 (ties: the earlier pair); ``at_bound`` when the choice
is at the edge of either grid."""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass

import numpy as np

from stages.config import check
from stages.finetuning.metrics import scores


@dataclass(frozen=True, kw_only=True)
class FastTextConfig:
    """A fastText classifier (Joulin et al. 2017); the learning rate and epochs are chosen on validation
    macro-F1 from `lrs` x `epochs`."""

    enabled: bool = True
    """Fit this baseline."""
    lrs: tuple[float, ...] = (0.3, 1.0)
    """Learning rates searched, each in (0, 10]."""
    epochs: tuple[int, ...] = (10, 40)
    """Epoch counts searched, each >= 1."""
    word_ngrams: int = 2
    """Longest word n-gram, >= 1."""
    char_ngrams: tuple[int, int] = (2, 5)
    """Character n-gram lengths [min, max] of each word's subword embeddings; [0, 0] = none."""
    dim: int = 50
    """Embedding size."""
    bucket: int = 200_000
    """Hash rows for the word and character n-grams."""

    def __post_init__(self) -> None:
        check(len(self.lrs) >= 1 and all(0 < x <= 10 for x in self.lrs), "lrs: one or more values in (0, 10]")
        check(len(self.epochs) >= 1 and all(e >= 1 for e in self.epochs), "epochs: one or more values >= 1")
        check(self.word_ngrams >= 1, "word_ngrams: must be >= 1")
        lo, hi = self.char_ngrams
        check((lo, hi) == (0, 0) or 1 <= lo <= hi, "char_ngrams: (0, 0) or [min, max] with 1 <= min <= max")
        check(self.dim >= 1 and self.bucket >= 1, "dim: dim and bucket must be >= 1")


TITLE = "fastText"


def search_words(cfg: dict) -> str:
    """What the search tries, from the config (as the report states it)."""
    return (f"fastText (Joulin et al. 2017; word 1-{cfg['word_ngrams']} grams and character "
            f"{cfg['char_ngrams'][0]}-{cfg['char_ngrams'][1]} grams, {cfg['dim']} dimensions), learning rate "
            f"{' / '.join(f'{x:g}' for x in cfg['lrs'])} x epochs {' / '.join(map(str, cfg['epochs']))}.")


def settings_words(settings: dict) -> str:
    """One run's chosen settings in a few words: ``lr 1, 40 epochs``."""
    return f"lr {settings['lr']:g}, {settings['epochs']} epochs"


def _line(text: str) -> str:
    return " ".join(text.split())  # fastText reads one example a line


def fit_score(train: tuple[list[str], np.ndarray], val: tuple[list[str], np.ndarray],
              test: tuple[list[str], np.ndarray], num_labels: int, cfg: FastTextConfig, *, seed: int = 0) -> dict:
    """Search on ``val``, score the chosen model on ``test``. Pure: same in, same out."""
    try:
        import fasttext
    except ImportError as exc:  # a dependency of the project: only a broken install lands here
        raise ImportError("the fastText baseline needs the fasttext-community package (pip install -e .)") from exc

    start = time.perf_counter()
    val_lines, test_lines = [_line(t) for t in val[0]], [_line(t) for t in test[0]]

    def predict(model, lines: list[str]) -> np.ndarray:
        return np.array([int(labels[0][len("__label__"):]) for labels in model.predict(lines)[0]])

    best = None
    with tempfile.TemporaryDirectory(prefix="fasttext-") as tmp:
        path = os.path.join(tmp, "train.txt")
        with open(path, "w", encoding="utf-8") as fh:
            fh.writelines(f"__label__{int(y)} {_line(t)}\n" for t, y in zip(train[0], train[1]))
        for lr in cfg.lrs:
            for epochs in cfg.epochs:
                model = fasttext.train_supervised(
                    input=path, lr=lr, epoch=epochs, wordNgrams=cfg.word_ngrams, minn=cfg.char_ngrams[0],
                    maxn=cfg.char_ngrams[1], dim=cfg.dim, bucket=cfg.bucket, minCount=1, loss="softmax",
                    thread=1, seed=seed, verbose=0)
                f1 = scores(val[1], predict(model, val_lines), num_labels)["macro_f1"]
                if best is None or f1 > best[0]:
                    best = (f1, {"lr": lr, "epochs": epochs}, model)
    f1, settings, model = best
    s = scores(test[1], predict(model, test_lines), num_labels)
    words = len(model.words)
    rows = words + cfg.bucket  # fastText's input matrix: one row per word, then the n-gram buckets
    return {"train_examples": len(train[0]), "settings": settings, "best_val_macro_f1": f1,
            "test_macro_f1": s["macro_f1"], "test_accuracy": s["accuracy"], "features": words,
            "parameters": int(rows * cfg.dim + len(model.labels) * cfg.dim), "fits": len(cfg.lrs) * len(cfg.epochs),
            "at_bound": _at_edge(settings["lr"], cfg.lrs) or _at_edge(settings["epochs"], cfg.epochs),
            "seconds": round(time.perf_counter() - start, 3)}


def _at_edge(value, grid) -> bool:
    """The chosen value is the grid's largest or smallest of several: the grid may not reach the best one."""
    return len(set(grid)) > 1 and value in (min(grid), max(grid))

"""Accuracy and macro-F1 (the unweighted mean of per-class F1 over the classes of the label set, a class
with no true and no predicted example counting F1 = 0 only if it occurs in the gold labels)."""

from __future__ import annotations

import numpy as np


def scores(gold: np.ndarray, pred: np.ndarray, num_labels: int) -> dict:
    gold, pred = np.asarray(gold), np.asarray(pred)
    f1s = []
    for c in range(num_labels):
        tp = int(((pred == c) & (gold == c)).sum())
        fp = int(((pred == c) & (gold != c)).sum())
        fn = int(((pred != c) & (gold == c)).sum())
        if tp + fn == 0:
            continue  # class absent from this split: not part of its macro average
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return {"accuracy": round(float((gold == pred).mean()) if len(gold) else 0.0, 5),
            "macro_f1": round(float(np.mean(f1s)) if f1s else 0.0, 5), "examples": int(len(gold))}


def majority(train_labels: np.ndarray, gold: np.ndarray, num_labels: int) -> dict:
    """The baseline that always predicts the most frequent training label."""
    top = int(np.bincount(train_labels, minlength=num_labels).argmax())
    return scores(gold, np.full(len(gold), top), num_labels)

"""The model quality gate the package stage obeys: the candidate with the best (mean) *validation* macro-F1 is
selected (missing or NaN: never over one that has it) and passes only if its test scores beat the majority class by
the margins."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class ModelGateConfig:
    """The model gate: the candidate with the best validation macro-F1 is shipped if its test scores beat the
    majority-class baseline by the margins."""

    candidates: tuple[str, ...] = ()
    """Fine-tuned runs (`<paradigm>-<init>`) that may be shipped; [] = all."""
    min_macro_f1_margin: float = 0.05
    """Least test macro-F1 above the majority baseline's."""
    min_accuracy_margin: float = 0.0
    """Least test accuracy above the majority baseline's."""


def decide(runs: dict[str, dict], cfg: ModelGateConfig) -> dict:
    """``runs``: name -> the finetune stage's metrics. Returns the verdict (JSON-ready)."""
    names = list(cfg.candidates) or sorted(runs)
    missing = [n for n in names if n not in runs]
    if missing:
        raise ValueError(f"evaluate.gate.candidates: no fine-tuned run named {missing[0]!r} "
                         f"(have: {', '.join(sorted(runs))})")

    def val(n: str) -> float:
        v = runs[n].get("best_val_macro_f1")
        return -math.inf if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)

    best = max(names, key=lambda n: (val(n), n))
    m = runs[best]
    seeds = len(m.get("seeds") or []) or 1
    checks = [{"check": f"test {what} - majority {what}", "minimum": minimum,
               "value": round(m[f"test_{key}"] - m[f"majority_test_{key}"], 5)}
              for what, key, minimum in (("macro-F1", "macro_f1", cfg.min_macro_f1_margin),
                                         ("accuracy", "accuracy", cfg.min_accuracy_margin))]
    for c in checks:
        c["passed"] = c["value"] >= c["minimum"]
    selected_by = "best validation macro-F1" + (f" (mean over {seeds} seeds)" if seeds > 1 else "")
    return {"passed": all(c["passed"] for c in checks), "selected": best, "selected_by": selected_by,
            "candidates": names, "checks": checks, "seeds": seeds,
            "metrics": {k: m[k] for k in ("best_val_macro_f1", "test_accuracy", "test_macro_f1",
                                          "majority_test_accuracy", "majority_test_macro_f1")}
            | {k: m[k] for k in ("best_val_macro_f1_std", "test_accuracy_std", "test_macro_f1_std") if k in m}}

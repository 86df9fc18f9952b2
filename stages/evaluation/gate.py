"""The model quality gate that packaging obeys: among the candidate fine-tuned models, the one with the best
*validation* macro-F1 is selected (the test split never chooses), and it passes only if its test scores beat
the majority-class baseline by the configured margins. The verdict is written whichever way it falls; the
package stage refuses a model whose verdict is not ``passed``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class ModelGateConfig:
    """candidates: fine-tuned runs (``<paradigm>-<init>``) that may be shipped ([] = all).
    min_macro_f1_margin / min_accuracy_margin: test score minus the majority baseline's, at least."""

    candidates: tuple[str, ...] = ()
    min_macro_f1_margin: float = 0.05
    min_accuracy_margin: float = 0.0


def decide(runs: dict[str, dict], cfg: ModelGateConfig) -> dict:
    """``runs``: name -> the finetune stage's metrics. Returns the verdict (JSON-ready)."""
    names = list(cfg.candidates) or sorted(runs)
    missing = [n for n in names if n not in runs]
    if missing:
        raise ValueError(f"evaluate.gate.candidates: no fine-tuned run named {missing[0]!r} "
                         f"(have: {', '.join(sorted(runs))})")
    best = max(names, key=lambda n: (runs[n]["best_val_macro_f1"], n))
    m = runs[best]
    checks = [
        {"check": "test macro-F1 - majority macro-F1", "value": round(m["test_macro_f1"] - m["majority_test_macro_f1"], 5),
         "minimum": cfg.min_macro_f1_margin},
        {"check": "test accuracy - majority accuracy", "value": round(m["test_accuracy"] - m["majority_test_accuracy"], 5),
         "minimum": cfg.min_accuracy_margin},
    ]
    for c in checks:
        c["passed"] = c["value"] >= c["minimum"]
    return {"passed": all(c["passed"] for c in checks), "selected": best, "selected_by": "best validation macro-F1",
            "candidates": names, "checks": checks,
            "metrics": {k: m[k] for k in ("best_val_macro_f1", "test_accuracy", "test_macro_f1",
                                          "majority_test_accuracy", "majority_test_macro_f1")}}

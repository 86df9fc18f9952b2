"""The gate after cleaning: for the rules switched on, the output re-checked independently of the filters (no
"lorem ipsum" or "{", end marks, ``min_sentences``, no line twice, English by py3langid, the kept fraction, no
task leak), on features the cleaning workers computed (``stages.cleaning.features``), never the text."""

from __future__ import annotations

import pandas as pd

from stages.cleaning.config import CleanConfig
from stages.common.documents import DOCUMENT_COLUMNS
from stages.quality.gate import Expect, set_by

SCHEMA = "clean_schema"
FEATURES = "clean_features"
SUMMARY = "clean_summary"
TASK_GUARD = "task_guard"


def cleaned_suite(features: pd.DataFrame, *, columns: list[str], duplicate_lines: int | None,
                  cfg: CleanConfig, kept_fraction: float, task_leaks: pd.DataFrame | None = None, where: str = ""):
    """``task_leaks``: `stages.cleaning.task_guard.leaks` of the output, when a task is guarded against; ``where``:
    the params section of the gate's bounds (``clean.domain.gate``), named by a failure."""
    rules, gate = cfg.cleaner.c4, cfg.gate
    feats = features.reset_index(drop=True)
    feats.index = pd.Index(feats["id"].to_numpy(), name="doc")  # failures name the document

    def values_in(column: str, allowed: list, table: str = FEATURES, mostly: float = 1.0, param: str = "") -> Expect:
        return Expect(table, "ExpectColumnValuesToBeInSet",
                      {"column": column, "value_set": allowed, **({"mostly": mostly} if mostly < 1.0 else {})}, param)

    checks = [
        Expect(SCHEMA, "ExpectTableColumnsToMatchSet", {"column_set": list(DOCUMENT_COLUMNS), "exact_match": True}),
        Expect(FEATURES, "ExpectTableRowCountToBeBetween", {"min_value": gate.min_rows},
               set_by(where, min_rows=gate.min_rows)),
        Expect(FEATURES, "ExpectColumnValuesToBeUnique", {"column": "id"}),
        Expect(FEATURES, "ExpectColumnValuesToBeBetween", {"column": "text_chars", "min_value": 1}),
        values_in("meta_is_json", [True]),
        *[values_in(column, [value]) for column, value, on in (
            ("has_lorem_ipsum", False, rules.lorem_ipsum), ("has_curly_brace", False, rules.curly_brace),
            ("bad_line_endings", 0, rules.end_marks)) if on],
    ]
    if rules.min_sentences:
        checks.append(Expect(FEATURES, "ExpectColumnValuesToBeBetween",
                             {"column": "sentences_up_to_min", "min_value": rules.min_sentences}))
    if cfg.cleaner.language.enabled and len(feats):
        checks.append(values_in("english_second_opinion", [True], mostly=gate.min_english_agreement,
                                param=set_by(where, min_english_agreement=gate.min_english_agreement)))
    summary = {"kept_fraction": [kept_fraction]}
    checks.append(Expect(SUMMARY, "ExpectColumnValuesToBeBetween", {
        "column": "kept_fraction", "min_value": gate.min_kept_fraction, "max_value": gate.max_kept_fraction},
        set_by(where, min_kept_fraction=gate.min_kept_fraction, max_kept_fraction=gate.max_kept_fraction)))
    if duplicate_lines is not None:
        summary["duplicate_lines"] = [duplicate_lines]
        checks.append(values_in("duplicate_lines", [0], table=SUMMARY))
    tables = {SCHEMA: pd.DataFrame(columns=columns), FEATURES: feats, SUMMARY: pd.DataFrame(summary)}
    if task_leaks is not None:  # re-measured on the file to publish, whatever the guard did
        tables[TASK_GUARD] = task_leaks
        checks.append(values_in("leak", [""], table=TASK_GUARD))
    return tables, checks

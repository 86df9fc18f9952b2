"""The gate after cleaning: the output must satisfy the rules that produced it.

For the rules switched on, it re-checks the documents independently of the filters: no "lorem ipsum" or
"{", terminal marks, ``min_sentences``, no line twice, no empty text, unique ids, JSON meta, English by
py3langid for ``min_english_agreement``, the kept fraction in its band. Features come from the cleaning
workers (``stages.cleaning.features``); the gate never loads the cleaned text.
"""

from __future__ import annotations

import pandas as pd

from stages.cleaning.config import CleanConfig
from stages.cleaning.features import FEATURE_COLUMNS
from stages.common.documents import DOCUMENT_COLUMNS
from stages.quality.gate import Expect

SCHEMA = "clean_schema"
FEATURES = "clean_features"
SUMMARY = "clean_summary"
def cleaned_suite(features: pd.DataFrame | None, *, columns: list[str], duplicate_lines: int | None,
                  cfg: CleanConfig, kept_fraction: float):
    rules = cfg.cleaner.c4
    gate = cfg.gate
    feats = (features if features is not None else pd.DataFrame(columns=FEATURE_COLUMNS[1:])).copy()
    feats = feats.reset_index(drop=True)
    feats.index = pd.Index(feats["id"].to_numpy(), name="doc")  # failures name the document
    checks: list[Expect] = [
        Expect(table=SCHEMA, kind="ExpectTableColumnsToMatchSet",
               kwargs={"column_set": list(DOCUMENT_COLUMNS), "exact_match": True}),
        Expect(table=FEATURES, kind="ExpectTableRowCountToBeBetween", kwargs={"min_value": gate.min_rows}),
        Expect(table=FEATURES, kind="ExpectColumnValuesToBeUnique", kwargs={"column": "id"}),
        Expect(table=FEATURES, kind="ExpectColumnValuesToBeBetween", kwargs={"column": "text_chars", "min_value": 1}),
    ]

    def values_in(column: str, allowed: list, mostly: float = 1.0) -> None:
        kwargs = {"column": column, "value_set": allowed}
        if mostly < 1.0:
            kwargs["mostly"] = mostly
        checks.append(Expect(table=FEATURES, kind="ExpectColumnValuesToBeInSet", kwargs=kwargs))

    values_in("meta_is_json", [True])
    if rules.lorem_ipsum:
        values_in("has_lorem_ipsum", [False])
    if rules.curly_brace:
        values_in("has_curly_brace", [False])
    if rules.end_marks:
        values_in("bad_line_endings", [0])
    if rules.min_sentences:
        checks.append(Expect(table=FEATURES, kind="ExpectColumnValuesToBeBetween",
                             kwargs={"column": "sentences_up_to_min", "min_value": rules.min_sentences}))
    if cfg.cleaner.language.enabled and len(feats):
        values_in("english_second_opinion", [True], mostly=gate.min_english_agreement)
    summary = {"kept_fraction": [kept_fraction]}
    checks.append(Expect(table=SUMMARY, kind="ExpectColumnValuesToBeBetween",
                         kwargs={"column": "kept_fraction", "min_value": gate.min_kept_fraction,
                                 "max_value": gate.max_kept_fraction}))
    if duplicate_lines is not None:
        summary["duplicate_lines"] = [duplicate_lines]
        checks.append(Expect(table=SUMMARY, kind="ExpectColumnValuesToBeInSet",
                             kwargs={"column": "duplicate_lines", "value_set": [0]}))
    tables = {SCHEMA: pd.DataFrame(columns=columns), FEATURES: feats, SUMMARY: pd.DataFrame(summary)}
    return tables, checks

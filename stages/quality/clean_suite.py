"""The gate after cleaning: the output must satisfy the rules that produced it.

Each check re-measures the cleaned documents independently of the filters' own bookkeeping, and only for
rules that are switched on: no "lorem ipsum", no "{", every line ends in a terminal mark (and not in
"..."), at least ``min_sentences`` Punkt sentences, no line (stripped, lower-cased) on two pages or twice on
one, text not empty, English by a second, independent language identifier (py3langid) for at least
``min_english_agreement`` of the documents, and the kept fraction within the configured band.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import pandas as pd

from stages.quality.gate import Expect
from stages.quality.suites import combine, documents_suite

if TYPE_CHECKING:
    from stages.clean import CleanConfig

FEATURES = "clean_features"
SUMMARY = "clean_summary"


def _features(df: pd.DataFrame, cfg: "CleanConfig") -> pd.DataFrame:
    from stages.cleaning.sentences import count_sentences

    rules = cfg.cleaner.c4
    need = rules.min_sentences
    seen: set[bytes] = set()
    rows = []
    for doc_id, text in zip(df["id"], df["text"]):
        text = text if isinstance(text, str) else ""
        lines = text.split("\n")
        lower = text.lower()
        dup = 0
        for line in lines:
            h = hashlib.md5(line.strip().lower().encode("utf-8")).digest()
            dup += h in seen
            seen.add(h)
        bad_end = 0
        if rules.end_marks:
            bad_end = sum(1 for ln in lines if not ln.endswith(rules.end_marks)
                          or (rules.drop_ellipsis and ln.endswith("...")))
        sentences = 0
        for line in lines:  # counting stops at the minimum: only the comparison matters
            if sentences >= need:
                break
            sentences += count_sentences(line)
        rows.append({"id": doc_id, "has_lorem_ipsum": "lorem ipsum" in lower, "has_curly_brace": "{" in text,
                     "bad_line_endings": bad_end, "sentences_up_to_min": sentences, "duplicate_lines": dup})
    feats = pd.DataFrame(rows, columns=["id", "has_lorem_ipsum", "has_curly_brace", "bad_line_endings",
                                        "sentences_up_to_min", "duplicate_lines"])
    if cfg.cleaner.language.enabled:
        from stages.cleaning.langid import is_english

        # An independent second opinion: py3langid's decision, not the filter's own record.
        feats["english_second_opinion"] = [is_english(t, min_probability=0.5, backend="py3langid")[0]
                                           for t in df["text"]]
    return feats.set_index("id")


def cleaned_suite(df: pd.DataFrame, *, cfg: "CleanConfig", kept_fraction: float):
    rules = cfg.cleaner.c4
    gate = cfg.gate
    tables, expectations = documents_suite(df, min_rows=gate.min_rows, max_rows=10**12, min_nonempty_ratio=1.0)
    feats = _features(df, cfg)
    checks: list[Expect] = []

    def values_in(column: str, allowed: list, mostly: float = 1.0) -> None:
        kwargs = {"column": column, "value_set": allowed}
        if mostly < 1.0:
            kwargs["mostly"] = mostly
        checks.append(Expect(table=FEATURES, kind="ExpectColumnValuesToBeInSet", kwargs=kwargs))

    if rules.lorem_ipsum:
        values_in("has_lorem_ipsum", [False])
    if rules.curly_brace:
        values_in("has_curly_brace", [False])
    if rules.end_marks:
        values_in("bad_line_endings", [0])
    if rules.min_sentences:
        checks.append(Expect(table=FEATURES, kind="ExpectColumnValuesToBeBetween",
                             kwargs={"column": "sentences_up_to_min", "min_value": rules.min_sentences}))
    if cfg.cleaner.line_dedup.enabled:
        values_in("duplicate_lines", [0])
    if cfg.cleaner.language.enabled and len(feats):
        values_in("english_second_opinion", [True], mostly=gate.min_english_agreement)
    summary = pd.DataFrame({"kept_fraction": [kept_fraction]})
    checks.append(Expect(table=SUMMARY, kind="ExpectColumnValuesToBeBetween",
                         kwargs={"column": "kept_fraction", "min_value": gate.min_kept_fraction,
                                 "max_value": gate.max_kept_fraction}))
    return combine((tables, expectations), ({FEATURES: feats, SUMMARY: summary}, checks))

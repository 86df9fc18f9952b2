"""The gate after cleaning: the output must satisfy the rules that produced it.

The checks re-measure the cleaned documents independently of the filters' own bookkeeping, for the rules
that are switched on: no "lorem ipsum", no "{", every line ends in a terminal mark (and not in "..."), at
least ``min_sentences`` Punkt sentences, no line (stripped, lower-cased) twice in the corpus, no empty
text, unique content-hash ids, JSON meta, English by a second, independent identifier (py3langid) for at
least ``min_english_agreement`` of the documents, and the kept fraction within the configured band.

The per-document features are computed by the cleaning workers, shard by shard and in parallel
(:func:`document_features`), and the duplicate-line count by hashing the output lines into sorted files
(:func:`write_line_hashes`) counted bucket by bucket; the gate itself never loads the cleaned text.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from stages.quality.gate import Expect

if TYPE_CHECKING:
    from stages.clean import CleanConfig
    from stages.cleaning.base import Doc
    from stages.cleaning.pipeline import CleanerConfig

SCHEMA = "clean_schema"
FEATURES = "clean_features"
SUMMARY = "clean_summary"
FEATURE_COLUMNS = ["source_id", "id", "text_chars", "meta_is_json", "has_lorem_ipsum", "has_curly_brace",
                   "bad_line_endings", "sentences_up_to_min", "english_second_opinion"]


def document_features(docs: list["Doc"], cfg: "CleanerConfig", *, english_rate: float = 1.0) -> pd.DataFrame:
    """One row per kept document: what the gate checks, measured on the cleaned text.

    ``english_second_opinion`` is asked of the documents whose content hash falls in the first
    ``english_rate`` of the hash range (a sample that does not depend on sharding or worker count) and is
    missing (None) for the others, which the gate's "mostly" expectation leaves out of its share."""
    from stages.cleaning.langid import is_english
    from stages.cleaning.sentences import count_sentences
    from stages.common.documents import doc_id, is_json_text

    rules = cfg.c4
    rows = []
    for d in docs:
        text = d.text
        lines = text.split("\n")
        bad_end = 0
        if rules.end_marks:
            bad_end = sum(1 for ln in lines if not ln.endswith(rules.end_marks)
                          or (rules.drop_ellipsis and ln.endswith("...")))
        sentences = 0
        for line in lines:  # counting stops at the minimum: only the comparison matters
            if sentences >= rules.min_sentences:
                break
            sentences += count_sentences(line, rules.min_sentences - sentences)
        english: bool | None = True
        cid = doc_id(text)
        if cfg.language.enabled:
            english = None
            if english_rate >= 1.0 or int(cid[:8], 16) < english_rate * 0x100000000:
                # An independent second opinion: py3langid's decision, not the filter's own record.
                english = is_english(text, min_probability=0.5, backend="py3langid")[0]
        rows.append((d.id, cid, len(text.strip()), is_json_text(d.meta), "lorem ipsum" in text.lower(),
                     "{" in text, bad_end, sentences, english))
    return pd.DataFrame(rows, columns=FEATURE_COLUMNS)


def write_line_hashes(docs: list["Doc"], path: Path) -> None:
    """The output lines' identities (C4's line key: stripped, lower-cased, hashed), sorted."""
    from stages.cleaning.c4 import line_key

    hashes = [line_key(ln) for d in docs for ln in d.text.split("\n")]
    np.save(path, np.sort(np.array(hashes, dtype=np.uint64)))


def cleaned_suite(features: pd.DataFrame | None, *, columns: list[str], duplicate_lines: int | None,
                  cfg: "CleanConfig", kept_fraction: float):
    from stages.common.documents import DOCUMENT_COLUMNS

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

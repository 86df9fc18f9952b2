"""Standard gate suites for the data contracts between stages (docs/stages.md, "The data contract"): each builder
returns `(tables, expectations)`, a copy of the caller's frame plus tables derived with pandas (GX cannot express
"share of rows per label"). Bad data is left for the gate to report; ValueError only for bad parameters."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from stages.common.documents import DOCUMENT_COLUMNS, is_json_text
from stages.config import check
from stages.quality.gate import Expect, set_by

Suite = tuple[dict[str, pd.DataFrame], list[Expect]]

# Table names; also the prefixes of check names in reports and GateFailed messages.
DOCUMENTS = "documents"
DOCUMENT_FEATURES = "document_features"
DOCUMENT_SCHEMA = "document_schema"
LABELED = "labeled"
LABELED_TRAIN = "labeled_train"
CLASS_SHARES = "class_shares"
SPLIT_OVERLAP = "split_overlap"


@dataclass(frozen=True)
class Streamed:
    """A documents table too large for memory, as its writer saw it: each row's stripped text length, whether each
    row's meta parses as JSON, and the written file's columns."""

    text_chars: Sequence[int]
    meta_is_json: Sequence[bool]
    columns: Sequence[str]


def documents_suite(df: pd.DataFrame, *, min_rows: int, max_rows: int, min_nonempty_ratio: float,
                    extra_columns: Sequence[str] = (), streamed: Streamed | None = None, where: str = "") -> Suite:
    """Checks for a documents table (id, text, source, url, meta [+ extra_columns]), and why: columns exactly as
    listed (read by name); rows in [min_rows, max_rows] (a truncated or exploded corpus); id unique and not null
    (dedup, lineage); at least `min_nonempty_ratio` non-blank texts; source not null; meta parses as JSON.
    Too large for memory: pass ``df`` without text plus what its writer saw (``streamed``). ``where``: the params
    section of the bounds (``ingest.task.gate``), named by a failure."""
    check(0 <= min_rows <= max_rows, f"need 0 <= min_rows <= max_rows, got {min_rows}, {max_rows}")
    check(0.0 <= min_nonempty_ratio <= 1.0, f"min_nonempty_ratio must be in [0, 1], got {min_nonempty_ratio}")

    text_chars, meta_is_json, columns = ((streamed.text_chars, streamed.meta_is_json, streamed.columns) if streamed
                                         else (None, None, None))
    if text_chars is None:
        text_chars = _column(df, "text").map(lambda v: len(v.strip()) if isinstance(v, str) else 0)
    if meta_is_json is None:
        meta_is_json = _column(df, "meta").map(is_json_text)
    features = pd.DataFrame({"text_chars": np.asarray(text_chars, dtype="int64"),
                             "meta_is_json": np.asarray(meta_is_json, dtype=bool)},
                            index=pd.Index(_column(df, "id").to_numpy(), name="id"))  # failures name the documents
    tables = {DOCUMENTS: df.copy(), DOCUMENT_FEATURES: features}
    schema_table = DOCUMENTS if columns is None else DOCUMENT_SCHEMA
    if columns is not None:
        tables[DOCUMENT_SCHEMA] = pd.DataFrame(columns=list(columns))
    expectations = [
        Expect(schema_table, "ExpectTableColumnsToMatchSet",
               {"column_set": [*DOCUMENT_COLUMNS, *extra_columns], "exact_match": True}),
        Expect(DOCUMENTS, "ExpectTableRowCountToBeBetween", {"min_value": min_rows, "max_value": max_rows},
               set_by(where, min_rows=min_rows, max_rows=max_rows)),
        Expect(DOCUMENTS, "ExpectColumnValuesToBeUnique", {"column": "id"}),
        Expect(DOCUMENTS, "ExpectColumnValuesToNotBeNull", {"column": "id"}),
        Expect(DOCUMENTS, "ExpectColumnValuesToNotBeNull", {"column": "source"}),
        Expect(DOCUMENT_FEATURES, "ExpectColumnValuesToBeBetween",
               {"column": "text_chars", "min_value": 1, "mostly": min_nonempty_ratio},
               set_by(where, min_nonempty_ratio=min_nonempty_ratio)),
        Expect(DOCUMENT_FEATURES, "ExpectColumnValuesToBeInSet", {"column": "meta_is_json", "value_set": [True]}),
    ]
    return tables, expectations


def labeled_suite(df: pd.DataFrame, *, labels: Sequence[str], splits: Sequence[str], min_class_share: float,
                  max_class_share: float, train_split: str = "train", where: str = "", labels_key: str = "") -> Suite:
    """Checks for labeled examples (text, label, split), and why: label and split not null (in-set checks skip
    nulls) and in `labels` / `splits` (the head's label map); every label in the `train_split` rows; each label's
    share of all rows in [min_class_share, max_class_share] (a dominant class misleads accuracy); each normalised
    text in exactly one split (a leak inflates scores). ``where``: the params section of the class-share bounds,
    ``labels_key`` the key of ``labels``, named by a failure."""
    check(bool(labels), "labels must not be empty")
    check(bool(splits), "splits must not be empty")
    check(train_split in splits, f"train_split {train_split!r} is not among splits {list(splits)}")
    check(0.0 <= min_class_share <= max_class_share <= 1.0,
             f"need 0 <= min_class_share <= max_class_share <= 1, got {min_class_share}, {max_class_share}")

    label = _column(df, "label")
    split = _column(df, "split")
    # Per declared label, its rows and share of *all* rows (nulls and unknowns count in the denominator, so they
    # cannot make the declared classes look balanced).
    by_label = label.value_counts(dropna=True)
    counts = [int(by_label.get(name, 0)) for name in labels]
    shares = [count / len(label) if len(label) else 0.0 for count in counts]
    # Per normalised text, how many distinct splits it appears in (rows without text/split skipped).
    text_key = _column(df, "text").map(lambda value: value.strip().lower() if isinstance(value, str) else None)
    pairs = pd.DataFrame({"text_key": text_key, "split": split}).dropna()
    n_splits = pairs.groupby("text_key", sort=True)["split"].nunique().astype("int64")
    tables = {
        LABELED: df.copy(),
        LABELED_TRAIN: pd.DataFrame({"label": label[split == train_split]}),
        CLASS_SHARES: pd.DataFrame({"rows": counts, "share": shares}, index=pd.Index(list(labels), name="label")),
        # indexed by the text so GX's report shows it
        SPLIT_OVERLAP: pd.DataFrame({"n_splits": n_splits.to_numpy()}, index=pd.Index(n_splits.index, name="text_key")),
    }
    expectations = [
        Expect(LABELED, "ExpectColumnValuesToNotBeNull", {"column": "label"}),
        Expect(LABELED, "ExpectColumnValuesToNotBeNull", {"column": "split"}),
        Expect(LABELED, "ExpectColumnValuesToBeInSet", {"column": "label", "value_set": list(labels)}, labels_key),
        Expect(LABELED, "ExpectColumnValuesToBeInSet", {"column": "split", "value_set": list(splits)}),
        # ContainSet, not EqualSet: unknown labels are the in-set check's failure, not this one's.
        Expect(LABELED_TRAIN, "ExpectColumnDistinctValuesToContainSet", {"column": "label", "value_set": list(labels)}),
        Expect(CLASS_SHARES, "ExpectColumnValuesToBeBetween",
               {"column": "share", "min_value": min_class_share, "max_value": max_class_share},
               set_by(where, min_class_share=min_class_share, max_class_share=max_class_share)),
        Expect(SPLIT_OVERLAP, "ExpectColumnValuesToBeInSet", {"column": "n_splits", "value_set": [1]}),
    ]
    return tables, expectations


def combine(*suites: Suite) -> Suite:
    """Merge suites into one gate; ValueError if two use the same table name (one would hide the other)."""
    tables: dict[str, pd.DataFrame] = {}
    expectations: list[Expect] = []
    for suite_tables, suite_expectations in suites:
        clash = tables.keys() & suite_tables.keys()
        check(not clash, f"suites share table names {sorted(clash)}")
        tables.update(suite_tables)
        expectations.extend(suite_expectations)
    return tables, expectations


def _column(df: pd.DataFrame, name: str) -> pd.Series:
    # A missing column yields nulls, so builders keep going and the gate reports the real problem.
    return df[name] if name in df.columns else pd.Series([None] * len(df), index=df.index, dtype=object)

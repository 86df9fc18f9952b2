"""What the cleaning gate (``stages.quality.clean_suite``) checks, computed by the workers per shard,
independently of the filters' bookkeeping, so the gate never loads the cleaned text."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from stages.cleaning.base import Doc
from stages.cleaning.c4 import line_key
from stages.cleaning.config import CleanerConfig
from stages.cleaning.langid import is_english
from stages.cleaning.sentences import count_sentences
from stages.common.documents import doc_id, is_json_text

FEATURE_COLUMNS = ["source_id", "id", "text_chars", "meta_is_json", "has_lorem_ipsum", "has_curly_brace",
                   "bad_line_endings", "sentences_up_to_min", "english_second_opinion"]


def document_features(docs: list[Doc], cfg: CleanerConfig, *, english_rate: float = 1.0) -> pd.DataFrame:
    """One row per kept document: what the gate checks, on the cleaned text. ``english_second_opinion``
    is computed for a content-hash sample of ``english_rate`` (None elsewhere, ignored by "mostly")."""
    rules = cfg.c4
    rows = []
    for d in docs:
        text = d.text
        lines = text.split("\n")
        bad_end = sum(1 for ln in lines if not ln.endswith(rules.end_marks)
                      or (rules.drop_ellipsis and ln.endswith("..."))) if rules.end_marks else 0
        sentences = 0
        for line in lines:  # counting stops at the minimum: only the comparison matters
            if sentences >= rules.min_sentences:
                break
            sentences += count_sentences(line, rules.min_sentences - sentences)
        cid = doc_id(text)
        asked = english_rate >= 1.0 or int(cid[:8], 16) < english_rate * 0x100000000
        # An independent second opinion: py3langid's decision, not the filter's own record.
        english = (is_english(text, min_probability=0.5, backend="py3langid")[0] if asked else None) \
            if cfg.language.enabled else True
        rows.append((d.id, cid, len(text.strip()), is_json_text(d.meta), "lorem ipsum" in text.lower(),
                     "{" in text, bad_end, sentences, english))
    return pd.DataFrame(rows, columns=FEATURE_COLUMNS)


def write_line_hashes(docs: list[Doc], path: Path, buckets: int = 1) -> list[int]:
    """The output lines' identities (C4's line key: stripped, lower-cased, hashed), sorted; returns where each
    hash bucket starts (:func:`stages.cleaning.dedup.bucket_bounds`)."""
    from stages.cleaning.dedup import bucket_bounds

    hashes = np.sort(np.array([line_key(ln) for d in docs for ln in d.text.split("\n")], dtype=np.uint64))
    np.save(path, hashes)
    return bucket_bounds(hashes, buckets)

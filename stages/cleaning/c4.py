"""C4's page and line rules, implemented to match tensorflow_datasets ``text/c4_utils.py``.

Reference behaviour (Raffel et al. 2020, section 2.2, and ``clean_page`` in c4_utils.py), in its order:
each line is stripped; a line with a word longer than 1000 characters is dropped; citation markers
``[1]``, ``[edit]``, ``[citation needed]`` are removed; a line must end in ``.``, ``?``, ``!`` or ``"`` and
not in ``...``; it needs at least 5 words; "lorem ipsum" drops the page; "javascript" drops the line; "{"
drops the page; lines with a policy/cookie phrase are dropped; kept lines' sentences are counted with
Punkt and a page needs at least 3. Note the order matters: "{" only drops the page when it sits on a line
that passed the earlier checks, exactly as in the reference.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass


from stages.cleaning.base import Doc, Filter
from stages.config import check

# c4_utils._POLICY_SUBSTRINGS
POLICY_SUBSTRINGS = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies",
                     "use cookies")
# c4_utils.get_clean_page_fn: Wikipedia-style citation markers.
CITATION_RE = re.compile(r"\[\d*\]|\[edit\]|\[citation needed\]")


@dataclass(frozen=True, kw_only=True)
class C4Rules:
    """C4's line and page rules; the defaults are C4's. Set a threshold to 0 or a flag to false to switch
    that rule off.

    max_page_chars: pages longer than this (raw) are dropped (c4_utils.is_valid_length, 1.9e5).
    max_word_chars: a line with a longer whitespace-separated word is dropped (1000).
    citations: remove ``[1]``, ``[edit]``, ``[citation needed]`` markers.
    end_marks: a kept line must end with one of these; empty = no end-mark rule.
    drop_ellipsis: a line ending in ``...`` is dropped even though it ends in ``.``.
    min_words_per_line: lines with fewer whitespace-separated words are dropped (5).
    lorem_ipsum / curly_brace: a kept-so-far line containing "lorem ipsum" / "{" drops the whole page.
    javascript / policy: lines mentioning "javascript" / a policy phrase are dropped.
    policy_substrings: the policy phrases (C4's six).
    min_sentences: pages with fewer Punkt sentences are dropped (3); checked again after line dedup.
    """

    max_page_chars: int = 190_000
    max_word_chars: int = 1000
    citations: bool = True
    end_marks: tuple[str, ...] = (".", "?", "!", '"')
    drop_ellipsis: bool = True
    min_words_per_line: int = 5
    lorem_ipsum: bool = True
    javascript: bool = True
    curly_brace: bool = True
    policy: bool = True
    policy_substrings: tuple[str, ...] = POLICY_SUBSTRINGS
    min_sentences: int = 3

    def __post_init__(self) -> None:
        check(self.max_page_chars >= 0, "max_page_chars: must be >= 0 (0 = off)")
        check(self.max_word_chars >= 0, "max_word_chars: must be >= 0 (0 = off)")
        check(self.min_words_per_line >= 0, "min_words_per_line: must be >= 0")
        check(self.min_sentences >= 0, "min_sentences: must be >= 0")
        check(all(self.end_marks), "end_marks: empty strings are not end marks")


def _default_counter() -> Callable[[str, int], int]:
    from stages.cleaning.sentences import count_sentences

    return count_sentences


class PageLengthFilter(Filter):
    """Drop pages longer than ``max_page_chars`` characters before any other work (C4 does it first)."""

    name = "page_length"

    def __init__(self, rules: C4Rules, reject_samples: int = 0) -> None:
        super().__init__(reject_samples)
        self.max_chars = rules.max_page_chars

    def apply(self, doc: Doc) -> str | None:
        if self.max_chars and len(doc.text) > self.max_chars:
            return "too_long"
        return None


class C4LinesFilter(Filter):
    """C4's ``clean_page``: rewrites the page to its kept lines or drops it with the rule's name."""

    name = "c4_lines"

    def __init__(self, rules: C4Rules, reject_samples: int = 0,
                 count_sentences: Callable[[str, int], int] | None = None) -> None:
        super().__init__(reject_samples)
        self.r = rules
        self._count = count_sentences
        self._policy = tuple(rules.policy_substrings) if rules.policy else ()

    def count(self, text: str, limit: int) -> int:
        if self._count is None:
            self._count = _default_counter()
        return self._count(text, limit)

    def apply(self, doc: Doc) -> str | None:
        r = self.r
        kept: list[str] = []
        sentences = 0
        for line in doc.text.splitlines():
            line = line.strip()
            if r.max_word_chars and len(line) > r.max_word_chars and \
                    any(len(w) > r.max_word_chars for w in line.split()):
                self.drop_line("too_long_word")
                continue
            if r.citations and "[" in line:
                line = CITATION_RE.sub("", line)
            if r.end_marks and (not line.endswith(r.end_marks) or (r.drop_ellipsis and line.endswith("..."))):
                self.drop_line("no_end_mark")
                continue
            if r.min_words_per_line and len(line.split()) < r.min_words_per_line:
                self.drop_line("too_few_words")
                continue
            lower = line.lower()
            if r.lorem_ipsum and "lorem ipsum" in lower:
                return "lorem_ipsum"
            if r.javascript and "javascript" in lower:
                self.drop_line("javascript")
                continue
            if r.curly_brace and "{" in line:
                return "curly_brace"
            if self._policy and any(p in lower for p in self._policy):
                self.drop_line("policy")
                continue
            # C4 sums Punkt sentences over all kept lines and only compares the sum with the minimum, so
            # counting can stop once the minimum is reached: same decision, far less Punkt work.
            if sentences < r.min_sentences:
                sentences += self.count(line, r.min_sentences - sentences)
            kept.append(line)
        if sentences < r.min_sentences:
            return "too_few_sentences"
        doc.text = "\n".join(kept).strip()
        return None


def line_key(line: str) -> int:
    """C4's line identity for corpus-wide dedup: MD5 of the stripped, lower-cased line (first 64 bits)."""
    return int.from_bytes(hashlib.md5(line.strip().lower().encode("utf-8")).digest()[:8], "big")


def page_key(doc: Doc) -> int:
    """Which page keeps a duplicated line: C4 keeps the page whose URL has the smallest MD5; pages without
    a URL use their id. Hashing (not URL order) avoids favouring any domain, as C4's comment says."""
    basis = doc.url or doc.id
    return int.from_bytes(hashlib.md5(basis.encode("utf-8")).digest()[:8], "big")


_SCHEME_WWW = re.compile(r"https?:\/\/(www\.)?")
_TRACKING = re.compile(r"\?(utm_|ref|feed).*")


def normalize_url(url: str) -> str:
    """c4_utils.normalize_url: drop scheme and ``www.``, tracking query strings and a trailing slash."""
    url = _SCHEME_WWW.sub("", url)
    url = _TRACKING.sub("", url)
    return url.rstrip("/")



"""C4's rules (Raffel et al. 2020, 2.2) as tensorflow_datasets ``text/c4_utils.py``: ``clean_page``'s page and line
rules, in its order, which matters ("{" drops the page only on a line that passed the checks before it), and the
bad-words page filter (``get_badwords_filter_fn``) with the LDNOOBW English list (npm ``naughty-words``, CC-BY-4.0)."""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

from stages.cleaning.base import Doc, Filter
from stages.cleaning.sentences import count_sentences
from stages.config import check
from stages.sources.base import Provenance, SourceContext, SourceError
from stages.sources.npm import fetch_npm

# c4_utils._POLICY_SUBSTRINGS
POLICY_SUBSTRINGS = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies",
                     "use cookies")
# c4_utils.get_clean_page_fn: Wikipedia-style citation markers.
CITATION_RE = re.compile(r"\[\d*\]|\[edit\]|\[citation needed\]")


@dataclass(frozen=True, kw_only=True)
class C4Rules:
    """C4's page and line rules, in c4_utils.py's order; the defaults are C4's, 0 or false turns one off."""

    max_page_chars: int = 190_000
    """Drop pages longer than this many characters, before any other rule (C4: 190,000); 0 = off."""
    max_word_chars: int = 1000
    """Drop lines holding a whitespace-separated word longer than this many characters (C4: 1000); 0 = off."""
    citations: bool = True
    """Remove citation markers `[1]`, `[edit]`, `[citation needed]` from lines."""
    end_marks: tuple[str, ...] = (".", "?", "!", '"')
    """A kept line must end with one of these strings; empty = no end-mark rule."""
    drop_ellipsis: bool = True
    """Drop lines ending in `...` even though they end in `.`."""
    min_words_per_line: int = 5
    """Drop lines with fewer whitespace-separated words (C4: 5); 0 = off."""
    lorem_ipsum: bool = True
    """Drop the whole page when a line kept so far contains "lorem ipsum" (any case)."""
    javascript: bool = True
    """Drop lines that contain "javascript" (any case)."""
    curly_brace: bool = True
    """Drop the whole page when a line kept so far contains `{`."""
    policy: bool = True
    """Drop lines that contain one of `policy_substrings` (any case)."""
    policy_substrings: tuple[str, ...] = POLICY_SUBSTRINGS
    """The phrases of the `policy` rule (C4's six: terms of use, privacy policy, cookie phrases)."""
    min_sentences: int = 3
    """Drop pages whose kept lines hold fewer Punkt sentences (C4: 3); 0 = off."""

    def __post_init__(self) -> None:
        check(self.max_page_chars >= 0, "max_page_chars: must be >= 0 (0 = off)")
        check(self.max_word_chars >= 0, "max_word_chars: must be >= 0 (0 = off)")
        check(self.min_words_per_line >= 0, "min_words_per_line: must be >= 0")
        check(self.min_sentences >= 0, "min_sentences: must be >= 0")
        check(all(self.end_marks), "end_marks: empty strings are not end marks")


class PageLengthFilter(Filter):
    """Drop pages longer than ``max_page_chars`` characters before any other work (C4 does it first)."""

    name = "page_length"

    def apply(self, doc: Doc) -> str | None:
        limit = self.cfg.max_page_chars
        return "too_long" if limit and len(doc.text) > limit else None


class C4LinesFilter(Filter):
    """C4's ``clean_page``: rewrites the page to its kept lines or drops it with the rule's name."""

    name = "c4_lines"

    def __init__(self, rules: C4Rules, reject_samples: int = 0) -> None:
        super().__init__(rules, reject_samples)
        self._policy = tuple(rules.policy_substrings) if rules.policy else ()

    def apply(self, doc: Doc) -> str | None:
        r = self.cfg
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
            # C4 only compares the sum with the minimum, so counting stops there.
            if sentences < r.min_sentences:
                sentences += count_sentences(line, r.min_sentences - sentences)
            kept.append(line)
        if sentences < r.min_sentences:
            return "too_few_sentences"
        doc.text = "\n".join(kept).strip()
        return None


def line_key(line: str) -> int:
    """C4's line identity for corpus-wide dedup: MD5 of the stripped, lower-cased line (first 64 bits)."""
    return int.from_bytes(hashlib.md5(line.strip().lower().encode("utf-8")).digest()[:8], "big")


def page_key(doc: Doc) -> int:
    """Which page keeps a duplicated line: the smallest MD5 of its URL (else id), as C4 (no domain favoured)."""
    basis = doc.url or doc.id
    return int.from_bytes(hashlib.md5(basis.encode("utf-8")).digest()[:8], "big")


_SCHEME_WWW = re.compile(r"https?:\/\/(www\.)?")
_TRACKING = re.compile(r"\?(utm_|ref|feed).*")


def normalize_url(url: str) -> str:
    """c4_utils.normalize_url: drop scheme and ``www.``, tracking query strings and a trailing slash."""
    return _TRACKING.sub("", _SCHEME_WWW.sub("", url)).rstrip("/")


@dataclass(frozen=True, kw_only=True)
class BadWordsConfig:
    """C4's bad-words filter: drop a page whose lower-cased text contains a listed word as a whole word."""

    enabled: bool = True
    """Apply the filter."""
    package: str = "naughty-words@1.0.2"
    """npm spec of the word lists; naughty-words@1.0.2's en.json is the 377-word LDNOOBW list C4 pins (later
    releases add words)."""
    language: str = "en"
    """Which list of the package: `<language>.json`."""


def load_words(cfg: BadWordsConfig, cache_dir: Path) -> tuple[list[str], dict]:
    """Fetch (or reuse from the cache) the npm package; its word list and provenance (stats.json's word_lists)."""
    prov = Provenance(kind="npm_badwords")
    tarball = fetch_npm(cfg.package, SourceContext(cache_dir=cache_dir), prov)
    member = f"package/{cfg.language}.json"
    with tarfile.open(tarball, "r:gz") as tar:
        try:
            words = json.loads(tar.extractfile(member).read().decode("utf-8"))  # type: ignore[union-attr]
        except KeyError:
            raise SourceError(f"{tarball}: no word list {member}") from None
    words = sorted({w.strip().lower() for w in words if isinstance(w, str) and w.strip()})
    pkg = prov.packages[0]
    return words, {"package": f"{pkg['name']}@{pkg['version']}", "integrity": pkg["integrity"],
                   "sha256": prov.files[0]["sha256"], "words": len(words),
                   "licence": "CC-BY-4.0 (naughty-words / LDNOOBW)"}


def compile_badwords(words: list[str]) -> re.Pattern[str]:
    """C4's regex: escaped words, flanked by a non-word character or the start/end of the text. The
    alternation is a trie of the same words (same matches, faster: benchmarks/cleaning.md)."""
    trie: dict = {}
    for word in sorted(set(words)):
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}  # a word ends here

    def pattern(node: dict) -> str:
        branches = [re.escape(ch) + pattern(child) for ch, child in sorted(node.items()) if ch]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    return re.compile(r"(?:\W|^)(" + pattern(trie) + r")(?:\W|$)")


class BadWordsFilter(Filter):
    name = "badwords"

    def __init__(self, words: list[str], reject_samples: int = 0) -> None:
        super().__init__(words, reject_samples)
        self.regex = compile_badwords(words) if words else None

    def apply(self, doc: Doc) -> str | None:
        return "badword" if self.regex is not None and self.regex.search(doc.text.lower()) else None

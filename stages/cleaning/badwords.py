"""C4's bad-words page filter (``c4_utils.get_badwords_filter_fn``) with the LDNOOBW English list (npm
``naughty-words``, CC-BY-4.0)."""

from __future__ import annotations

import json
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

from stages.cleaning.base import Doc, Filter
from stages.sources.base import Provenance, SourceContext, SourceError
from stages.sources.npm import fetch_npm


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

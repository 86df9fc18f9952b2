"""Corpus-wide deduplication as C4 does it: by URL before cleaning, by line after cleaning.

URL dedup (c4.py): pages sharing a normalised URL keep one (`url_dedup`); byte-identical pages are kept once.
Line dedup (c4_utils.remove_duplicate_text): among all pages holding a (stripped, lower-cased) line, the page
with the smallest page key keeps it, repeats inside it are dropped too; then pages left empty or with too few
sentences go. Shards write sorted (line hash, page key) pairs; the selection runs one hash bucket at a time,
so memory is bounded by the bucket, not the corpus (benchmarks/cleaning.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stages.cleaning.base import Doc, Filter
from stages.cleaning.c4 import line_key, normalize_url, page_key
from stages.cleaning.sentences import count_sentences
from stages.config import check


@dataclass(frozen=True, kw_only=True)
class LineDedupConfig:
    """C4's line deduplication: each line is kept on one page, the one whose URL (or id) has the smallest MD5."""

    enabled: bool = True
    """Remove lines that another page keeps, and repeats within a page."""
    buckets: int = 16
    """Hash buckets the selection table is built in, one at a time (more = less memory), 1..4096."""
    min_sentences: int = 3
    """Drop pages with fewer Punkt sentences after dedup (C4: 3); 0 = off."""

    def __post_init__(self) -> None:
        check(1 <= self.buckets <= 4096, "buckets: must be in 1..4096")


URL_RULES = ("newest", "tfds")


def url_dedup(rows: Iterable[tuple], rule: str = "newest") -> tuple[set[int], int, int]:
    """Pick which rows survive URL and exact-duplicate dedup: (indices to drop, URL duplicates, exact duplicates).

    ``rows``: (index, id, url, timestamp), plus the text's MD5 hex digest for ``rule="tfds"``. Per normalised
    URL, ``newest`` keeps the latest timestamp (ties: smaller id; C4's paper), ``tfds`` the largest MD5 (TFDS).
    """
    if rule not in URL_RULES:
        raise ValueError(f"url_dedup_rule: {rule!r} is not one of {', '.join(URL_RULES)}")
    best_by_url: dict[str, tuple] = {}
    first_by_id: dict[str, int] = {}
    drop: set[int] = set()
    exact = 0
    for row in rows:
        idx, did, url, ts = row[:4]
        if did in first_by_id:
            drop.add(idx)
            exact += 1
            continue
        first_by_id[did] = idx
        if not url:
            continue
        key = normalize_url(url)
        cand = (ts or "", did, idx) if rule == "newest" else (row[4], did, idx)
        cur = best_by_url.setdefault(key, cand)
        if cur is cand:
            continue
        # newest: C4's select_newest_page, the later timestamp wins, equal timestamps fall back to the smaller id
        if cand[0] > cur[0] or (rule == "newest" and cand[0] == cur[0] and cand[1] < cur[1]):
            best_by_url[key] = cand
            drop.add(cur[2])
        else:
            drop.add(idx)
    return drop, len(drop) - exact, exact


def line_pairs(doc: Doc) -> np.ndarray:
    """(line hash, page key) for every line of a cleaned page, as an (n, 2) uint64 array."""
    key = page_key(doc)
    return np.array([(line_key(line), key) for line in doc.text.split("\n")], dtype=np.uint64).reshape(-1, 2)


def write_shard_pairs(pairs: list[np.ndarray], path: Path) -> int:
    """Sort one shard's pairs by line hash and save them as a (2, n) array (rows: hashes, page keys), so
    each row is contiguous for searching."""
    arr = np.concatenate(pairs) if pairs else np.empty((0, 2), dtype=np.uint64)
    arr = arr[np.argsort(arr[:, 0], kind="stable")]
    np.save(path, np.ascontiguousarray(arr.T))
    return len(arr)


def _by_bucket(files: list[Path], buckets: int) -> Iterator[np.ndarray]:
    """Per hash bucket (a range of the hash's top bits, ascending), the entries of every file in it, concatenated;
    files hold sorted 1-D hashes or (2, n) arrays sorted by row 0. Memory is bounded by one bucket."""
    edges = [(2**64 * b) // buckets for b in range(buckets + 1)]
    for lo, hi in zip(edges, edges[1:]):
        chunks = []
        for f in files:  # opened per bucket and released: thousands of shards, few open files
            arr = np.load(f, mmap_mode="r")
            col = arr[0] if arr.ndim == 2 else arr
            i = np.searchsorted(col, np.uint64(lo), side="left")
            j = len(col) if hi >= 2**64 else np.searchsorted(col, np.uint64(hi), side="left")
            if j > i:
                chunks.append(np.array(arr[..., i:j]))
            del arr, col
        if chunks:
            yield np.concatenate(chunks, axis=-1)


def build_selection(shard_files: list[Path], out: Path, buckets: int) -> int:
    """Merge shards' pairs into one table sorted by line hash: for each distinct line, the smallest page
    key holding it. Works bucket by bucket to bound memory. Returns distinct lines."""
    parts: list[Path] = []
    sizes: list[int] = []
    for b, data in enumerate(_by_bucket(shard_files, buckets)):
        data = data[:, np.lexsort((data[1], data[0]))]  # by line hash, then page key ascending
        first = np.ones(data.shape[1], dtype=bool)
        first[1:] = data[0, 1:] != data[0, :-1]
        parts.append(out.parent / f"{out.stem}.part{b}.npy")
        np.save(parts[-1], np.ascontiguousarray(data[:, first]))
        sizes.append(int(first.sum()))
        del data, first
    final = np.lib.format.open_memmap(out, mode="w+", dtype=np.uint64, shape=(2, sum(sizes)))
    pos = 0
    for part, size in zip(parts, sizes):  # buckets are ranges of the hash, so their concatenation stays sorted
        final[:, pos:pos + size] = np.load(part, mmap_mode="r")
        pos += size
        part.unlink()
    final.flush()
    del final
    return sum(sizes)


def count_duplicates(files: list[Path], buckets: int) -> int:
    """How many entries of the sorted 1-D uint64 arrays in ``files`` repeat an earlier entry (all files
    together), bucket by bucket so memory stays bounded. Used by the gate to re-check line dedup."""
    return sum(int(np.count_nonzero(data[1:] == data[:-1])) for data in map(np.sort, _by_bucket(files, buckets)))


class LineDedupFilter(Filter):
    """Apply the selection table to one page: keep a line only where this page is its chosen holder."""

    name = "line_dedup"

    def __init__(self, table_path: Path, cfg: LineDedupConfig,
                 count_sentences: Callable[[str, int], int] = count_sentences, reject_samples: int = 0) -> None:
        super().__init__(cfg, reject_samples)
        self.hashes, self.keys = np.load(table_path, mmap_mode="r")  # (2, distinct lines), row 0 sorted
        self.count = count_sentences

    def apply(self, doc: Doc) -> str | None:
        lines = doc.text.split("\n")
        key = np.uint64(page_key(doc))
        hashes = np.fromiter((line_key(ln) for ln in lines), dtype=np.uint64, count=len(lines))
        chosen = np.full(len(lines), key)
        if len(self.hashes):
            pos = np.minimum(np.searchsorted(self.hashes, hashes), len(self.hashes) - 1)
            found = self.hashes[pos] == hashes  # a line missing from the table has no rival: keep it
            chosen = np.where(found, self.keys[pos], key)
        kept: list[str] = []
        seen: set[int] = set()
        for line, h, owner in zip(lines, hashes.tolist(), chosen.tolist()):
            if owner != key:
                self.drop_line("global_duplicate")
            elif h in seen:
                self.drop_line("local_duplicate")
            else:
                kept.append(line)
                seen.add(h)
        text = "\n".join(kept)
        if not text:
            return "empty"
        least = self.cfg.min_sentences
        if least and self.count(text, least) < least:
            return "too_few_sentences"
        doc.text = text
        return None

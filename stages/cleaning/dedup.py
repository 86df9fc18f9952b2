"""Corpus-wide deduplication: C4's by URL before cleaning and by line after it, then MinHash near duplicates.

URL dedup (c4.py): pages sharing a normalised URL keep one (`url_dedup`); byte-identical pages are kept once.
Line dedup (c4_utils.remove_duplicate_text): a (stripped, lower-cased) line stays on the page with the smallest
page key, repeats inside it go too, then pages left empty or with too few sentences; selected one hash bucket at a
time, so memory is bounded by the bucket, not the corpus (benchmarks/cleaning.md). MinHash (Broder 1997; LSH
banding, Leskovec et al. ch. 3; off by default): documents agreeing on a whole band of word n-gram hashes are
clustered and each cluster keeps its smallest id (order- and sharding-independent).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stages.cleaning.base import Doc, Filter
from stages.cleaning.c4 import line_key, normalize_url, page_key
from stages.cleaning.scratch import Scratch
from stages.cleaning.sentences import count_sentences
from stages.config import check, check_seed

_MERSENNE = np.uint64((1 << 61) - 1)
_WORD = re.compile(r"\w+")


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
    """Which rows URL and exact-duplicate dedup drop, row by row (the reference :func:`url_dedup_arrays` is tested
    against): (indices, URL duplicates, exact duplicates). ``rows``: (index, id, url, timestamp[, text MD5 hex for
    "tfds"]). Per normalised URL, ``newest`` keeps the latest timestamp (ties: smaller id; C4's paper), ``tfds``
    the largest MD5 (TFDS)."""
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


def url_key(url: str) -> bytes:
    """A 16-byte digest of a page's normalised URL: what the shard workers send for URL dedup."""
    return hashlib.blake2b(normalize_url(url).encode("utf-8"), digest_size=16).digest()


def url_dedup_arrays(ids: np.ndarray, keys: np.ndarray, stamps: np.ndarray, md5: np.ndarray | None,
                     rule: str = "newest") -> tuple[np.ndarray, int, int]:
    """:func:`url_dedup` on arrays, vectorised for the main process: ``ids`` (fixed-width ASCII, e.g. ``S32``),
    ``keys`` (:func:`url_key` digests, ``S16``; ``b""`` for no URL), ``stamps`` (strings) and, for "tfds",
    ``md5`` (hex, ``S32``), one row per document in input order. Returns the positions to drop (sorted), the URL
    duplicates and the exact duplicates; the same decisions as :func:`url_dedup`."""
    if rule not in URL_RULES:
        raise ValueError(f"url_dedup_rule: {rule!r} is not one of {', '.join(URL_RULES)}")
    n = len(ids)
    first = np.zeros(n, dtype=bool)
    first[np.unique(ids, return_index=True)[1]] = True  # the first row of each id
    cand = np.flatnonzero(first & (keys != b""))
    losers = np.empty(0, dtype=np.int64)
    if len(cand):
        key_rank = np.unique(keys[cand], return_inverse=True)[1]
        if rule == "newest":  # the latest timestamp wins, then the smaller id: the last row once sorted so
            order = np.lexsort((-np.unique(ids[cand], return_inverse=True)[1],
                                np.unique(stamps[cand], return_inverse=True)[1], key_rank))
        else:  # tfds: the largest MD5 wins
            order = np.lexsort((np.unique(md5[cand], return_inverse=True)[1], key_rank))
        grouped = key_rank[order]
        last = np.ones(len(order), dtype=bool)
        last[:-1] = grouped[1:] != grouped[:-1]
        losers = cand[order[~last]]
    drop = np.union1d(np.flatnonzero(~first), losers)
    return drop, len(losers), int(n - first.sum())


def line_pairs(doc: Doc) -> np.ndarray:
    """(line hash, page key) for every line of a cleaned page, as an (n, 2) uint64 array."""
    key = page_key(doc)
    return np.array([(line_key(line), key) for line in doc.text.split("\n")], dtype=np.uint64).reshape(-1, 2)


def write_shard_pairs(pairs: list[np.ndarray], path: Path, buckets: int = 1) -> list[int]:
    """Save one shard's pairs sorted by line hash as a (2, n) array (rows: hashes, page keys, each contiguous);
    return where each of ``buckets`` hash buckets starts in it (:func:`bucket_bounds`)."""
    arr = np.concatenate(pairs) if pairs else np.empty((0, 2), dtype=np.uint64)
    arr = np.ascontiguousarray(arr[np.argsort(arr[:, 0], kind="stable")].T)
    np.save(path, arr)
    return bucket_bounds(arr[0], buckets)


def _edges(buckets: int) -> list[int]:
    return [(2**64 * b) // buckets for b in range(buckets + 1)]


def bucket_bounds(hashes: np.ndarray, buckets: int) -> list[int]:
    """Where each hash bucket starts in sorted ``hashes``, and the end: bucket b is [bounds[b], bounds[b + 1]).
    A task then reads only its bucket's range of each file (a byte range when the file is remote)."""
    inner = np.searchsorted(hashes, np.array(_edges(buckets)[1:-1], dtype=np.uint64), side="left")
    return [0, *inner.tolist(), len(hashes)]


Entry = tuple[str, int, int]  # a file's name and the range [start, stop) of its entries in one bucket


def bucket_entries(files: list[str], bounds: list[list[int]], bucket: int) -> list[Entry]:
    """Each file's non-empty range in ``bucket``, from the bounds its writer returned."""
    return [(f, b[bucket], b[bucket + 1]) for f, b in zip(files, bounds) if b[bucket + 1] > b[bucket]]


def _bucket(scratch: Scratch, entries: list[Entry]) -> np.ndarray | None:
    """The entries' ranges concatenated (None when there are none); files hold sorted 1-D hashes or (2, n)
    arrays sorted by row 0."""
    with scratch.files() as io:
        chunks = [io.rows(name, i, j) for name, i, j in entries]
    return np.concatenate(chunks, axis=-1) if chunks else None


def select_bucket(scratch: Scratch, entries: list[Entry], out: str) -> int:
    """One bucket of the line-dedup selection (a task of its own, so workers build the table): for each distinct
    line whose hash falls in the bucket (``entries``: the bucket's range of each shard's pairs), the smallest page
    key holding it, sorted by hash, saved as ``out``, a (2, n) array. Returns n."""
    data = _bucket(scratch, entries)
    if data is None:
        data = np.empty((2, 0), dtype=np.uint64)
    data = data[:, np.lexsort((data[1], data[0]))]  # by line hash, then page key ascending
    first = np.ones(data.shape[1], dtype=bool)
    first[1:] = data[0, 1:] != data[0, :-1]
    with scratch.files() as io:
        np.save(io.write(out), np.ascontiguousarray(data[:, first]))
    return int(first.sum())


def new_table(out: Path, size: int) -> None:
    """An empty (2, size) uint64 table file for :func:`place_bucket` to fill (sparse until written)."""
    np.lib.format.open_memmap(out, mode="w+", dtype=np.uint64, shape=(2, size)).flush()


def place_bucket(part: Path, table: Path, offset: int) -> None:
    """Copy one bucket's selection into the table at ``offset`` and delete it: buckets are ranges of the hash, so
    their concatenation in bucket order stays sorted. (A folder every worker writes in place: a URL scratch has
    each process join the buckets itself, :meth:`stages.cleaning.scratch.Files.table`.)"""
    data = np.load(part, mmap_mode="r")
    final = np.load(table, mmap_mode="r+")
    final[:, offset:offset + data.shape[1]] = data
    final.flush()
    del final, data
    part.unlink()


def sequential_map(fn, arg_lists, consume, *, desc: str = "") -> None:
    """``engine.map``'s contract in this process, one call after another."""
    for args in arg_lists:
        consume(fn(*args))


def line_table(scratch: Scratch, pair_files: list[str], pair_bounds: list[list[int]], buckets: int,
               map_=sequential_map) -> tuple[tuple[str, ...], int]:
    """C4's corpus-wide line-dedup table from the shards' line-hash pairs (``pair_bounds``: where each bucket
    starts in each file), one task per hash bucket (``map_``: an engine's ``map``), then each placed in the table
    in bucket order; bucket by bucket bounds memory. Returns the table's name in ``scratch`` (or, on a URL
    scratch, its buckets' names, which each worker process joins itself) and its distinct lines."""
    parts = [f"line-selection.part{b}.npy" for b in range(buckets)]
    counts: list[int] = []
    map_(select_bucket, [(scratch, bucket_entries(pair_files, pair_bounds, b), parts[b]) for b in range(buckets)],
         counts.append, desc="clean line_table")
    if scratch.url:
        return tuple(parts), sum(counts)
    table = "line-selection.npy"
    new_table(Path(scratch.where(table)), sum(counts))
    offsets = np.cumsum([0, *counts[:-1]]).tolist()
    map_(place_bucket, [(Path(scratch.where(parts[b])), Path(scratch.where(table)), offsets[b])
                        for b in range(buckets)], lambda _: None, desc="clean line_table")
    return (table,), sum(counts)


def count_bucket(scratch: Scratch, entries: list[Entry]) -> int:
    """How many of the entries (one bucket's range of each sorted 1-D uint64 array) repeat another: the gate's
    re-check of line dedup, one bucket per task so memory stays bounded."""
    data = _bucket(scratch, entries)
    return 0 if data is None else int(np.count_nonzero(np.diff(np.sort(data)) == 0))


class LineDedupFilter(Filter):
    """Apply the selection table to one page: keep a line only where this page is its chosen holder."""

    name = "line_dedup"

    def __init__(self, table_path: Path, cfg: LineDedupConfig, reject_samples: int = 0) -> None:
        super().__init__(cfg, reject_samples)
        self.hashes, self.keys = np.load(table_path, mmap_mode="r")  # (2, distinct lines), row 0 sorted

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
        if least and count_sentences(text, least) < least:
            return "too_few_sentences"
        doc.text = text
        return None


@dataclass(frozen=True, kw_only=True)
class MinHashConfig:
    """MinHash near-duplicate removal with LSH banding: each cluster of documents agreeing on a band keeps its
    smallest id."""

    enabled: bool = False
    """Remove near-duplicate pages (C4 does not)."""
    ngram: int = 5
    """Words per shingle, >= 1."""
    num_perm: int = 128
    """Hash functions in the MinHash signature; a multiple of `bands`."""
    bands: int = 16
    """LSH bands the signature is cut into; with 128 / 16, pairs of Jaccard similarity 0.71 collide half the time."""
    seed: int = 0
    """Seed that picks the hash functions."""

    def __post_init__(self) -> None:
        check(self.ngram >= 1, "ngram: must be >= 1")
        check_seed("seed", self.seed)
        check(self.bands >= 1 and self.num_perm % self.bands == 0, "num_perm: must be a multiple of bands")


def band_hashes(text: str, cfg: MinHashConfig) -> np.ndarray:
    """One 64-bit hash per LSH band of the MinHash signature of the text's lower-cased word n-grams."""
    rng = np.random.default_rng(cfg.seed)
    a = rng.integers(1, int(_MERSENNE), size=cfg.num_perm, dtype=np.uint64)
    b = rng.integers(0, int(_MERSENNE), size=cfg.num_perm, dtype=np.uint64)
    words = _WORD.findall(text.lower())
    grams = {" ".join(words[i:i + cfg.ngram]) for i in range(max(1, len(words) - cfg.ngram + 1))}  # short text: one
    x = np.fromiter((int.from_bytes(hashlib.blake2b(g.encode(), digest_size=8).digest(), "big") >> 3
                     for g in grams), dtype=np.uint64, count=len(grams))
    # uint64 wraps before the mod: still a well-mixed hash family (exact mod-p needs 128-bit products).
    with np.errstate(over="ignore"):
        h = (x[:, None] * a[None, :] + b[None, :]) % _MERSENNE
    sig = h.min(axis=0)
    return np.array([int.from_bytes(hashlib.blake2b(band.tobytes(), digest_size=8).digest(), "big")
                     for band in sig.reshape(cfg.bands, -1)], dtype=np.uint64)


def duplicates(ids: list[str], bands: np.ndarray) -> set[str]:
    """Ids to drop: every member of a candidate cluster except its smallest id. ``bands`` is (docs, bands)."""
    parent = list(range(len(ids)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for band in range(bands.shape[1] if len(ids) else 0):
        first: dict[int, int] = {}
        for doc, value in enumerate(bands[:, band].tolist()):
            other = first.setdefault(value, doc)
            if other != doc:
                ra, rb = find(doc), find(other)
                if ra != rb:
                    parent[max(ra, rb)] = min(ra, rb)
    clusters: dict[int, list[int]] = {}
    for i in range(len(ids)):
        clusters.setdefault(find(i), []).append(i)
    drop: set[str] = set()
    for members in clusters.values():
        if len(members) > 1:
            keep = min(members, key=lambda i: ids[i])
            drop.update(ids[i] for i in members if i != keep)
    return drop

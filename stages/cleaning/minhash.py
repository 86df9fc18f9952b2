"""MinHash near-duplicate removal (Broder 1997; LSH banding, Leskovec et al. ch. 3); off by default (not C4).

Word n-gram shingles -> ``num_perm`` seeded hashes -> ``bands`` bands; documents agreeing on a whole band
are clustered (union-find) and each cluster keeps its smallest id (order- and sharding-independent).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import numpy as np

from stages.config import check, check_seed

_MERSENNE = np.uint64((1 << 61) - 1)
_WORD = re.compile(r"\w+")


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


def shingles(text: str, n: int) -> np.ndarray:
    """64-bit hashes of the word n-grams of ``text`` (lower-cased); a short text is one shingle."""
    words = _WORD.findall(text.lower())
    grams = {" ".join(words[i:i + n]) for i in range(max(1, len(words) - n + 1))}
    return np.fromiter((int.from_bytes(hashlib.blake2b(g.encode(), digest_size=8).digest(), "big") >> 3
                        for g in grams), dtype=np.uint64, count=len(grams))


def band_hashes(text: str, cfg: MinHashConfig) -> np.ndarray:
    """One 64-bit hash per LSH band of the document's MinHash signature."""
    rng = np.random.default_rng(cfg.seed)
    a = rng.integers(1, int(_MERSENNE), size=cfg.num_perm, dtype=np.uint64)
    b = rng.integers(0, int(_MERSENNE), size=cfg.num_perm, dtype=np.uint64)
    x = shingles(text, cfg.ngram)
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

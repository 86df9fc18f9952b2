"""The held-out split, by a hash of the document id (independent of order and machine), shared by the
tokenizer and the token datasets, and the cleaned documents read in batches split by it."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from stages.common.documents import open_parquet
from stages.config import check

SPLITS = ("train", "heldout")


@dataclass(frozen=True, kw_only=True)
class SplitConfig:
    """The held-out split of the cleaned corpora, by a salted hash of the document id."""

    heldout_fraction: float = 0.05
    """Expected share of each corpus's documents held out, in (0, 1)."""
    salt: str = ""
    """Hash salt: changes which documents are held out without changing how many."""

    def __post_init__(self) -> None:
        check(0 < self.heldout_fraction < 1, "heldout_fraction: must be in (0, 1)")


def is_heldout(doc_id: str, cfg: SplitConfig) -> bool:
    """True when the document belongs to the held-out split."""
    digest = hashlib.sha256(f"{cfg.salt}\0{doc_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") < cfg.heldout_fraction * 2**64


def split_batches(path: Path, split: SplitConfig, *, batch_docs: int) -> Iterator[dict[str, list[str]]]:
    """Per batch of a documents Parquet file (its ``id`` and ``text`` columns), the texts of each split."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (expected a documents Parquet file)")
    pf = open_parquet(path)
    missing = [c for c in ("id", "text") if c not in pf.schema_arrow.names]
    if missing:
        raise ValueError(f"{path}: missing column {missing[0]!r} (columns: {', '.join(pf.schema_arrow.names)})")
    for batch in pf.iter_batches(batch_size=batch_docs, columns=["id", "text"]):
        out: dict[str, list[str]] = {s: [] for s in SPLITS}
        for row, (i, t) in enumerate(zip(batch.column(0).to_pylist(), batch.column(1).to_pylist())):
            if i is None or t is None:
                raise ValueError(f"{path}: row {row} of a batch has a null {'id' if i is None else 'text'}")
            out["heldout" if is_heldout(i, split) else "train"].append(t)
        yield out


def texts_of(path: Path, split: SplitConfig, which: str, *, batch_docs: int = 1000) -> Iterator[str]:
    """The texts of one split, streamed."""
    for parts in split_batches(path, split, batch_docs=batch_docs):
        yield from parts[which]

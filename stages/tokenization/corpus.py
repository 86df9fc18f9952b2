"""Reading cleaned documents in batches, split into train and held-out by document id."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from stages.common.documents import open_parquet
from stages.tokenization.split import SplitConfig, is_heldout

SPLITS = ("train", "heldout")


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

"""Pack batches of tokenized documents into 2-D arrays of fixed-width blocks, one packer per paradigm: GPT as
``run_clm``'s ``group_texts``, T5 as its ``reduce_concat_tokens`` + ``split_tokens`` (at the raw length), BERT as
RoBERTa's FULL-SENTENCES (Liu et al. 2019, 4.2). A tail that fills no block is counted in ``dropped_tokens``.
Blocks are stored as ``.npy`` (2-D, ``uint16`` or ``uint32``) that training memory-maps."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from pathlib import Path

import numpy as np


def flatten(docs: Sequence[list[int]], dtype, *, append: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """All documents as one array (``append`` after each, if given) and the end offset of each document."""
    lengths = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
    if append is not None:
        lengths += 1
        stream = chain.from_iterable(chain(d, (append,)) for d in docs)
    else:
        stream = chain.from_iterable(docs)
    ends = np.cumsum(lengths)
    flat = np.fromiter(stream, dtype=dtype, count=int(ends[-1]) if len(ends) else 0)
    return flat, ends


class CausalPacker:
    """GPT: documents joined with ``eot_id`` and cut every ``seq_len`` tokens; the rest waits for the next batch.
    T5 the same with ``</s>`` at its raw block length (corrupted at training time)."""

    def __init__(self, *, seq_len: int, eot_id: int, dtype) -> None:
        self.width, self.eot_id, self.dtype = seq_len, eot_id, dtype
        self.carry = np.empty(0, dtype=dtype)

    def pack(self, docs: Sequence[list[int]]) -> np.ndarray:
        flat = flatten(docs, self.dtype, append=self.eot_id)[0]
        data = np.concatenate((self.carry, flat)) if len(self.carry) else flat
        rows = len(data) // self.width
        self.carry = data[rows * self.width:].copy()
        return data[: rows * self.width].reshape(rows, self.width)

    def flush(self) -> np.ndarray:
        """Nothing: the tail shorter than a block is dropped (``dropped_tokens``)."""
        return np.empty((0, self.width), dtype=self.dtype)

    @property
    def dropped_tokens(self) -> int:
        return len(self.carry)


class SentencePacker:
    """BERT: RoBERTa FULL-SENTENCES blocks ``[CLS] sentences... [SEP] [PAD]...`` of exactly ``seq_len``."""

    def __init__(self, *, seq_len: int, cls_id: int, sep_id: int, pad_id: int, sentence_end_ids: Sequence[int],
                 dtype) -> None:
        if seq_len < 3:
            raise ValueError("seq_len: must be at least 3 for [CLS] x [SEP]")
        self.seq_len, self.cls_id, self.sep_id, self.pad_id, self.dtype = seq_len, cls_id, sep_id, pad_id, dtype
        self.capacity = seq_len - 2
        self.ends = np.asarray(sorted(set(sentence_end_ids)), dtype=dtype)
        self._parts: list[np.ndarray] = []  # pieces of the block being filled
        self._fill = 0
        self._dropped = 0

    def _close(self, out: list[np.ndarray]) -> None:
        content = np.concatenate(self._parts) if len(self._parts) > 1 else self._parts[0]
        if len(content) and content[-1] == self.sep_id:  # a document separator right before the final [SEP]
            content = content[:-1]
        row = np.full(self.seq_len, self.pad_id, dtype=self.dtype)
        row[0] = self.cls_id
        row[1: 1 + len(content)] = content
        row[1 + len(content)] = self.sep_id
        out.append(row)
        self._parts, self._fill = [], 0

    def _add(self, piece: np.ndarray, out: list[np.ndarray]) -> None:
        while len(piece):
            room = self.capacity - self._fill
            if len(piece) <= room:
                self._parts.append(piece)
                self._fill += len(piece)
                return
            if self._fill == 0:  # longer than a whole block: cut it
                self._parts.append(piece[:room])
                self._fill = self.capacity
                piece = piece[room:]
            self._close(out)

    def pack(self, docs: Sequence[list[int]]) -> np.ndarray:
        flat, doc_ends = flatten(docs, self.dtype)
        sentence_ends = np.flatnonzero(np.isin(flat, self.ends)) + 1
        cuts = np.union1d(sentence_ends, doc_ends)
        doc_end_set = set(doc_ends.tolist())
        sep = np.asarray([self.sep_id], dtype=self.dtype)
        out: list[np.ndarray] = []
        start = 0
        for end in cuts.tolist():
            if end > start:
                self._add(flat[start:end], out)
            start = end
            if end in doc_end_set and 0 < self._fill < self.capacity:
                self._parts.append(sep)
                self._fill += 1
        return np.stack(out) if out else np.empty((0, self.seq_len), dtype=self.dtype)

    @property
    def dropped_tokens(self) -> int:
        return self._fill

    def flush(self) -> np.ndarray:
        """The last, partly filled block (RoBERTa keeps it, padded); empty when nothing is pending."""
        out: list[np.ndarray] = []
        if self._fill and any(len(p) and not (len(p) == 1 and p[0] == self.sep_id) for p in self._parts):
            self._close(out)
        self._parts, self._fill = [], 0
        return np.stack(out) if out else np.empty((0, self.seq_len), dtype=self.dtype)


def dtype_for(vocab_size: int):
    """The smallest unsigned type that holds every id."""
    return np.uint16 if vocab_size <= 2**16 else np.uint32


class BlockWriter:
    """Appends rows of a fixed width to ``<path>.part`` and turns them into ``path`` (.npy) on ``close``."""

    def __init__(self, path: Path, *, width: int, dtype) -> None:
        self.path, self.width, self.dtype = Path(path), width, np.dtype(dtype)
        self._raw_path = self.path.with_name(self.path.name + ".part")
        self._raw = open(self._raw_path, "wb")
        self.rows = 0

    def write(self, rows: np.ndarray) -> None:
        if rows.ndim != 2 or rows.shape[1] != self.width:
            raise ValueError(f"{self.path.name}: expected rows of width {self.width}, got shape {rows.shape}")
        self._raw.write(np.ascontiguousarray(rows, dtype=self.dtype).tobytes())
        self.rows += len(rows)

    def close(self) -> Path:
        self._raw.close()
        out = np.lib.format.open_memmap(self.path, mode="w+", dtype=self.dtype, shape=(self.rows, self.width))
        if self.rows:
            src = np.memmap(self._raw_path, dtype=self.dtype, mode="r", shape=(self.rows, self.width))
            step = max(1, (64 << 20) // (self.width * self.dtype.itemsize))
            for i in range(0, self.rows, step):
                out[i: i + step] = src[i: i + step]
            del src
        out.flush()
        del out
        self._raw_path.unlink()
        self.path.chmod(0o644)
        return self.path


def open_blocks(path: Path) -> np.ndarray:
    """A read-only memory map of a block file."""
    return np.load(path, mmap_mode="r")

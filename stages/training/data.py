"""Which stored blocks each optimizer step trains on, and the random streams that draw their masks: both are
functions of (seed, step) and (seed, train/eval, epoch, block) alone, so N devices at micro-batch m see what one
sees at N*m, and a resumed run continues where the killed one stopped with the same masks.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

TRAIN_KEY, EVAL_KEY = 0, 1


@dataclass(frozen=True)
class BlockSampler:
    rows: int
    micro_batch: int
    grad_accum: int
    world: int = 1
    rank: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.rows < 1:
            raise ValueError("no training blocks")

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.grad_accum * self.world

    def _stream(self, start: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """(block ids, epochs) of stream positions ``start .. start+count``."""
        pos = np.arange(start, start + count)
        epochs = pos // self.rows
        out = np.empty(count, dtype=np.int64)
        for e in np.unique(epochs):
            perm = _permutation(self.seed, int(e), self.rows)
            sel = epochs == e
            out[sel] = perm[pos[sel] % self.rows]
        return out, epochs

    def micro_batches(self, step: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """This rank's (block ids, epochs) for each micro-batch of optimizer step ``step``."""
        ids, epochs = self._stream(step * self.global_batch, self.global_batch)
        starts = [(a * self.world + self.rank) * self.micro_batch for a in range(self.grad_accum)]
        return [(ids[lo: lo + self.micro_batch], epochs[lo: lo + self.micro_batch]) for lo in starts]


@lru_cache(maxsize=2)  # the epoch in progress and, at a boundary, the next one
def _permutation(seed: int, epoch: int, rows: int) -> np.ndarray:
    perm = np.random.default_rng([seed, epoch]).permutation(rows)
    perm.flags.writeable = False
    return perm


_U64 = np.uint64
_GOLDEN = _U64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, elementwise (uint64 arithmetic wraps)."""
    x = (x ^ (x >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> _U64(27))) * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


class BlockStreams:
    """The random streams of a batch of blocks, one per block, keyed by (seed, kind, epoch, block).

    ``random(shape)`` gives row ``b`` numbers that depend only on row ``b``'s key and on the draws before;
    ``streams[b]`` is a numpy Generator for row ``b`` alone, for objectives that work block by block."""

    def __init__(self, seed: int, kind: int, epochs, ids) -> None:
        self.parts = [(int(seed), int(kind), int(e), int(i)) for e, i in zip(epochs, ids)]
        key = np.zeros(len(self.parts), dtype=_U64)
        for column in np.asarray(self.parts, dtype=np.int64).reshape(-1, 4).T:
            key = _mix(key ^ _mix(column.astype(_U64) + _GOLDEN))
        self.keys = key
        self.draws = 0

    def __len__(self) -> int:
        return len(self.parts)

    def __getitem__(self, b: int) -> np.random.Generator:
        return np.random.default_rng(list(self.parts[b]))

    def __iter__(self):
        return (self[b] for b in range(len(self)))

    def random(self, shape) -> np.ndarray:
        """Floats in [0, 1) of ``shape``, row ``b`` from block ``b``'s stream."""
        shape = tuple(np.atleast_1d(shape))
        if shape[0] != len(self.keys):
            raise ValueError(f"random: {shape[0]} rows for {len(self.keys)} blocks")
        n = int(np.prod(shape[1:], dtype=np.int64))
        counters = (_U64(self.draws) << _U64(32)) + np.arange(n, dtype=_U64)
        self.draws += 1
        bits = _mix(self.keys[:, None] ^ _mix(counters * _GOLDEN + _GOLDEN)[None, :])
        return ((bits >> _U64(11)).astype(np.float64) * 2.0 ** -53).reshape(shape)

    def integers(self, high: int, size) -> np.ndarray:
        """Integers in [0, high) of shape ``size``, drawn like :meth:`random`."""
        return np.minimum((self.random(size) * high).astype(np.int64), high - 1)


generators = BlockStreams  # one random stream per block: generators(seed, TRAIN_KEY or EVAL_KEY, epochs, ids)


def make_batch(objective, blocks: np.ndarray, ids, streams: BlockStreams) -> dict:
    """The objective's batch of blocks ``ids``: in one call when ``batched`` (with ``needs_corpus`` also given
    ``blocks``), else block by block, each with its own generator, stacked."""
    import torch

    ids = np.asarray(ids, dtype=np.int64)
    if objective.batched:
        if objective.needs_corpus:  # draws from other blocks too (NSP's random segments)
            return objective(np.asarray(blocks[ids]), streams, corpus=blocks)
        return objective(np.asarray(blocks[ids]), streams)
    parts = [objective(np.asarray(blocks[int(i): int(i) + 1]), g) for i, g in zip(ids, streams)]
    return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}

"""Which stored blocks each optimizer step trains on, and the generators that draw their masks.

The order is a function of (seed, step) alone: epoch ``e`` visits every block once in the permutation
drawn from ``(seed, e)``, and step ``s`` takes the next ``global_batch`` blocks of that stream. Each rank
takes its own slice of every micro-batch, so N devices at micro-batch m see exactly the blocks one device
sees at micro-batch N*m, and a resumed run continues the stream where the killed one stopped. Masks and
spans come from a generator per block keyed by (seed, epoch, block): fresh every time a block is seen
(RoBERTa's dynamic masking), yet the same on every device count and after a resume.
"""

from __future__ import annotations

from dataclasses import dataclass

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
            perm = np.random.default_rng([self.seed, int(e)]).permutation(self.rows)
            sel = epochs == e
            out[sel] = perm[pos[sel] % self.rows]
        return out, epochs

    def micro_batches(self, step: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """This rank's (block ids, epochs) for each micro-batch of optimizer step ``step``."""
        ids, epochs = self._stream(step * self.global_batch, self.global_batch)
        out = []
        for a in range(self.grad_accum):
            lo = (a * self.world + self.rank) * self.micro_batch
            out.append((ids[lo: lo + self.micro_batch], epochs[lo: lo + self.micro_batch]))
        return out


def generators(seed: int, kind: int, epochs, ids) -> list[np.random.Generator]:
    """One generator per block, keyed by (seed, train/eval, epoch, block)."""
    return [np.random.default_rng([seed, kind, int(e), int(i)]) for e, i in zip(epochs, ids)]


def make_batch(objective, blocks: np.ndarray, ids, gens) -> dict:
    """Apply the objective block by block (each with its own generator) and stack the results."""
    import torch

    parts = [objective(np.asarray(blocks[int(i): int(i) + 1]), g) for i, g in zip(ids, gens)]
    return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}

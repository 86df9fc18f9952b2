"""Masked LM with an in-batch contrastive loss between two halves of one document (``objective:
contrastive``): the span-pair form of DeCLUTR (Giorgi et al. 2021) and of Contriever's independent cropping
(Izacard et al. 2022), on top of BERT's masked LM.

Each stored block (``[CLS] documents... [SEP] [PAD]...``, FULL-SENTENCES packing, one ``[SEP]`` between
documents) gives its longest document (the whole text when it has no inner ``[SEP]``). That document is cut
in the middle into A and B, and each half becomes a row of its own, ``[CLS] A [SEP]`` and ``[CLS] B [SEP]``,
of ``half_len`` tokens (``ceil((seq_len - 2) / 2) + 2``: 65 for blocks of 128, so the two rows cost what
the block would). A micro-batch of n blocks is 2n rows: the n first halves, then the n second halves in
the same order. Masked LM (``stages.objectives.masked_lm``) selects and replaces tokens in every row as
usual; the training view (``stages.training.models``) adds InfoNCE over the mean-pooled final hidden states:
row i's positive is row i + n, the other 2n - 2 halves of the micro-batch are its negatives, cosine
similarity over a temperature (SimCSE's 0.05), symmetric in A and B, weighted by ``weight``.

Why: the fine-tuning head reads the mean of the final hidden states. Masked LM trains each position's state
to predict its token, not the mean to say what a text is about; this loss trains that mean directly, from
unlabeled text, to tell one document from another by its content. The tokens of a block's other (shorter)
documents are not used: a block counts for its full ``seq_len`` in the token budget all the same.
"""

from __future__ import annotations

import numpy as np

from stages.objectives.masked_lm import MaskedLM


class HalvesContrast(MaskedLM):
    name = "contrastive"
    batched = True

    def __init__(self, layout, *, select: float = 0.15, weight: float = 1.0, temperature: float = 0.05) -> None:
        super().__init__(layout, select=select)
        if layout.seq_len < 6:
            raise ValueError("contrastive: seq_len must be at least 6 for two rows of [CLS] text [SEP]")
        if weight <= 0 or temperature <= 0:
            raise ValueError("contrastive: weight and temperature must be > 0")
        self.weight, self.temperature = float(weight), float(temperature)
        self.half_len = (layout.seq_len - 1) // 2 + 2  # ceil((seq_len - 2) / 2) + 2

    def document(self, row: np.ndarray) -> np.ndarray:
        """The longest document of a block (the first of equal ones): its tokens, without [CLS] / [SEP]."""
        row = np.asarray(row, dtype=np.int64)
        lay = self.layout
        text = row[(row != lay.pad_id) & (row != lay.cls_id)]
        if len(text) and text[-1] == lay.sep_id:
            text = text[:-1]
        cuts = np.flatnonzero(text == lay.sep_id)
        if not len(cuts):
            return text
        bounds = np.concatenate([[-1], cuts, [len(text)]])
        lengths = np.diff(bounds) - 1
        i = int(np.argmax(lengths))
        return text[bounds[i] + 1: bounds[i + 1]]

    def halves(self, row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The two rows of a block: ``[CLS] A [SEP]`` and ``[CLS] B [SEP]``, padded to ``half_len``."""
        lay = self.layout
        doc = self.document(row)
        k = (len(doc) + 1) // 2
        out = []
        for part in (doc[:k], doc[k:]):
            part = part[: self.half_len - 2]
            r = np.full(self.half_len, lay.pad_id, dtype=np.int64)
            r[0], r[1: 1 + len(part)], r[1 + len(part)] = lay.cls_id, part, lay.sep_id
            out.append(r)
        return out[0], out[1]

    def __call__(self, rows: np.ndarray, rng) -> dict:
        pairs = [self.halves(row) for row in np.asarray(rows)]
        stacked = np.stack([a for a, _ in pairs] + [b for _, b in pairs])
        return super().__call__(stacked, _PairedDraws(rng, len(pairs)))


class _PairedDraws:
    """The training loop's per-block random streams (``stages.training.data.BlockStreams``: one row of draws
    per block) for the 2n rows made of n blocks: block b's draws fill its two rows, b and b + n, so a
    block's masks stay its own in any micro-batch. A plain ``numpy`` Generator is used as it is."""

    def __init__(self, rng, blocks: int) -> None:
        self.rng, self.blocks = rng, blocks

    def _split(self, drawn: np.ndarray, shape) -> np.ndarray:
        width = shape[1]
        return np.concatenate([drawn[:, :width], drawn[:, width:]]).reshape(shape)

    def random(self, shape) -> np.ndarray:
        shape = tuple(shape)
        if isinstance(self.rng, np.random.Generator):
            return self.rng.random(shape)
        return self._split(self.rng.random((self.blocks, 2 * shape[1])), shape)

    def integers(self, high: int, size) -> np.ndarray:
        size = tuple(size)
        if isinstance(self.rng, np.random.Generator):
            return self.rng.integers(high, size=size)
        return self._split(self.rng.integers(high, (self.blocks, 2 * size[1])), size)

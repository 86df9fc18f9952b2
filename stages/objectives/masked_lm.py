"""BERT's masked language modelling (Devlin et al. 2019, 3.1) with RoBERTa's dynamic masking (Liu et al.
2019, 4.1): 15% of the positions are selected, fresh every time a block is seen; of those, 80% become
[MASK], 10% a random token and 10% stay unchanged. The loss is on the selected positions only (labels are
-100 elsewhere). [CLS], [SEP] and [PAD] are never selected; random replacements are drawn from the
non-special vocabulary."""

from __future__ import annotations

import numpy as np


class MaskedLM:
    name = "masked_lm"
    batched = True  # draws per row: one call builds a whole micro-batch

    def __init__(self, layout, *, select: float = 0.15, mask: float = 0.8, random: float = 0.1) -> None:
        if not 0 < select < 1 or mask < 0 or random < 0 or mask + random > 1:
            raise ValueError("masked_lm: need 0 < select < 1 and mask + random <= 1")
        self.layout, self.select, self.mask, self.random = layout, select, mask, random
        ids = {"cls_id": layout.cls_id, "sep_id": layout.sep_id, "pad_id": layout.pad_id, "mask_id": layout.mask_id}
        missing = [k for k, v in ids.items() if v is None]
        if missing:
            raise ValueError(f"masked_lm: the layout has no {missing[0]}")
        self.structural = np.asarray(sorted(ids.values()), dtype=np.int64)  # never selected
        specials = np.append(self.structural, [] if layout.unk_id is None else [layout.unk_id])
        self.replacements = np.setdiff1d(np.arange(layout.vocab_size), specials)  # random tokens: regular ids

    def __call__(self, rows: np.ndarray, rng: np.random.Generator) -> dict:
        import torch

        ids = np.asarray(rows, dtype=np.int64)
        maskable = ~np.isin(ids, self.structural)  # [UNK] stands for text: it may be selected
        selected = (rng.random(ids.shape) < self.select) & maskable
        labels = np.where(selected, ids, -100)
        draw = rng.random(ids.shape)
        to_mask = selected & (draw < self.mask)
        to_random = selected & (draw >= self.mask) & (draw < self.mask + self.random)
        inputs = ids.copy()
        inputs[to_mask] = self.layout.mask_id
        inputs[to_random] = self.replacements[rng.integers(len(self.replacements), size=ids.shape)[to_random]]
        return {"input_ids": torch.from_numpy(inputs), "attention_mask": torch.from_numpy((ids != self.layout.pad_id)
                                                                                          .astype(np.int64)),
                "labels": torch.from_numpy(labels)}

    def input_tokens(self, rows: int) -> int:
        return rows * self.layout.seq_len

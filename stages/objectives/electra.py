"""ELECTRA's replaced-token detection (Clark et al. 2020) for the BERT paradigm.

A generator fills masked positions with its own samples and a discriminator learns, at every position,
whether the token is the original or a replacement; the loss is the generator's masked-LM loss plus
``rtd_weight`` (the paper's lambda, 50) times the discriminator's binary cross-entropy. The discriminator
learns from all positions instead of the 15-30% that masked LM predicts, which is what makes it sample
efficient at small compute (the paper's ELECTRA-Small beats a BERT-Small of the same compute by 4.8 GLUE
points).

Simplification, stated: generator and discriminator are one model here, all weights tied (the paper's
"tying all weights" variant of section 3.2: at equal size 84.4 GLUE, against 84.3 with tied embeddings only). The
saved model is the pipeline's stock masked-LM class: its transformer is the discriminator that fine-tuning
uses, and its masked-LM head is the generator, so the intrinsic masked-LM scores and DAPT work as for masked
LM. The discriminator's head (dense, GELU, one logit per token, as ELECTRA's) is saved beside the model in
``rtd_head.safetensors``.

The objective builds the generator's input (selected positions all become [MASK], as ELECTRA masks, no
80/10/10), its labels, the original ids and one uniform number per position; the model side
(:func:`stages.training.models.training_view`) samples each replacement from the generator's distribution
by inverse CDF with that number, so the draws come from the per-block streams like every other mask: the
same on any device count and after a resume.
"""

from __future__ import annotations

import numpy as np

from stages.objectives.masked_lm import MaskedLM

RTD_HEAD_FILE = "rtd_head.safetensors"


class ReplacedTokenDetection(MaskedLM):
    name = "electra"
    batched = True

    def __init__(self, layout, *, select: float = 0.15, rtd_weight: float = 50.0) -> None:
        if rtd_weight <= 0:
            raise ValueError("electra: rtd_weight must be > 0")
        super().__init__(layout, select=select, mask=1.0, random=0.0)
        self.rtd_weight = rtd_weight

    def __call__(self, rows: np.ndarray, rng) -> dict:
        import torch

        batch = super().__call__(rows, rng)
        ids = np.asarray(rows, dtype=np.int64)
        batch["original_ids"] = torch.from_numpy(ids)
        batch["sample_u"] = torch.from_numpy(rng.random(ids.shape).astype(np.float32))
        return batch

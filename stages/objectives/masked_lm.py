"""BERT's masked language modelling (Devlin et al. 2019, 3.1) with RoBERTa's dynamic masking (Liu et al.
2019, 4.1): 15% of the positions are selected, fresh every time a block is seen; of those, 80% become
[MASK], 10% a random token and 10% stay unchanged. The loss is on the selected positions only (labels are
-100 elsewhere). [CLS], [SEP] and [PAD] are never selected; random replacements are drawn from the
non-special vocabulary."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from stages.objectives import Builder, Objective, tensors, wrap


class MaskedLM(Builder):
    name = "masked_lm"

    def __init__(self, layout, *, select: float = 0.15, mask: float = 0.8, random: float = 0.1) -> None:
        if not 0 < select < 1 or mask < 0 or random < 0 or mask + random > 1:
            raise ValueError("masked_lm: need 0 < select < 1 and mask + random <= 1")
        super().__init__(layout)
        self.select, self.mask, self.random = select, mask, random
        ids = {"cls_id": layout.cls_id, "sep_id": layout.sep_id, "pad_id": layout.pad_id, "mask_id": layout.mask_id}
        missing = [k for k, v in ids.items() if v is None]
        if missing:
            raise ValueError(f"masked_lm: the layout has no {missing[0]}")
        self.structural = np.asarray(sorted(ids.values()), dtype=np.int64)  # never selected
        specials = np.append(self.structural, [] if layout.unk_id is None else [layout.unk_id])
        self.replacements = np.setdiff1d(np.arange(layout.vocab_size), specials)  # random tokens: regular ids

    def __call__(self, rows: np.ndarray, rng: np.random.Generator) -> dict:
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
        return tensors(input_ids=inputs, attention_mask=(ids != self.layout.pad_id).astype(np.int64), labels=labels)


def body_name(model) -> str | None:
    """The attribute of a masked-LM model that holds its transformer (BERT's ``bert``, DeBERTa's ``deberta``)."""
    return next((n for n in ("bert", "deberta") if hasattr(model, n)), None)


def masked_positions(batch: dict) -> dict:
    """The flat indices of the selected positions, listed on the host before the batch moves to the device."""
    positions = (batch["labels"].reshape(-1) != -100).nonzero().squeeze(1)
    return {**batch, "positions": positions}


def sparse_mlm(inner, body: str, input_ids, attention_mask, labels, positions, **kwargs):
    """The masked-LM loss with the output layer at the selected ``positions`` only (:func:`mlm_at`)."""
    hidden = getattr(inner, body)(input_ids=input_ids, attention_mask=attention_mask, **kwargs)[0]
    return mlm_at(inner, hidden, labels, positions)


def mlm_at(inner, hidden, labels, positions):
    """(loss, logits, labels) of the output layer ``inner.cls`` at the selected ``positions`` of ``hidden``."""
    picked = hidden.reshape(-1, hidden.size(-1)).index_select(0, positions)
    return mlm_result(inner.cls(picked), labels.reshape(-1).index_select(0, positions), positions)


def mlm_result(logits, target, positions):
    """(loss, logits, labels) of the selected positions: the mean cross-entropy over them."""
    import torch

    # sum / max(count, 1): an empty selection gives 0 (not NaN) without asking the device for the count
    loss = torch.nn.functional.cross_entropy(logits.float(), target, reduction="sum") / max(len(positions), 1)
    return SimpleNamespace(loss=loss, logits=logits, labels=target)


def sparse_view(model, builder):
    """BERT's training module: the output layer at the selected positions only, the stock forward's loss for about
    half the work (a model without ``cls`` trains as it is)."""
    body = body_name(model)
    if body is None or not hasattr(model, "cls"):
        return model, (lambda batch: batch)

    def forward(inner, input_ids, attention_mask=None, labels=None, positions=None, **kwargs):
        return sparse_mlm(inner, body, input_ids, attention_mask, labels, positions, **kwargs)

    return wrap(model, forward), masked_positions


def share(select, what: str = "selected for prediction") -> str:
    """``select`` as the card's percentage ("" when unknown)."""
    known = isinstance(select, (int, float)) and not isinstance(select, bool)
    return f", {select:.0%} of the positions {what}" if known else ""


OBJECTIVES = (
    Objective(name="masked_lm", paradigm="bert", builder=MaskedLM, view=sparse_view,
              settings=lambda train: {"select": train.mlm_select},
              card=lambda select, generator_size: "masked language modelling" + share(select)),
)

"""Permuted language modelling (XLNet, Yang et al. 2019) for the GPT paradigm (``train.objective: permuted``).

Each token is predicted from the tokens before it in a random factorisation order of the block, so it learns
from both sides while the model stays autoregressive. Kept from XLNet: partial prediction (the last
``ceil(seq_len / K)`` tokens of the order) and two-stream attention, run as one sequence as in MPNet (content
tokens, then one query token per target under one mask: :func:`permuted_masks`). Left out: Transformer-XL memory,
relative positions and span targets; the query input is the embedding of ``<|endoftext|>``, so the saved model
is a stock ``GPT2LMHeadModel`` and fine-tunes as a causal LM.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from stages.objectives import Builder, Objective, tensors, wrap

# XLNet's partial-prediction constant: 1/K of the tokens of each block are predicted.
K = 6


def permuted_masks(rank: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """The two-stream attention mask of one block: ``rank[i]`` is position ``i``'s place in the factorisation
    order, ``targets`` the positions predicted (in order). Returns a ``(L + c, L + c)`` boolean matrix over
    [content positions..., one query per target]: row = attending, column = attended."""
    length, c = len(rank), len(targets)
    allowed = np.zeros((length + c, length + c), dtype=bool)
    allowed[:length, :length] = rank[None, :] <= rank[:, None]  # content: z_<=t, itself included
    allowed[length:, :length] = rank[None, :] < rank[targets][:, None]  # query of z_t: the content of z_<t
    return allowed


class PermutedLM(Builder):
    name = "permuted"

    def __init__(self, layout, *, k: int = K) -> None:
        if k < 2:
            raise ValueError("permuted: the partial-prediction constant K must be >= 2")
        if layout.eos_id is None:
            raise ValueError("permuted: the layout has no <|endoftext|> id for the query stream's input")
        super().__init__(layout)
        self.k = k
        self.targets = math.ceil(layout.seq_len / k)
        self.query_id = layout.eos_id
        self.select = self.targets / layout.seq_len  # the share of positions the output layer runs at

    def draw(self, rows: int, length: int, rng) -> tuple[np.ndarray, np.ndarray]:
        """(rank of each position in a uniform random order, the last ``c`` positions of that order), one row per
        block, from ``rng`` (a numpy Generator or the per-block streams)."""
        order = np.argsort(rng.random((rows, length)), axis=1, kind="stable")
        rank = np.argsort(order, axis=1, kind="stable")
        return rank, order[:, length - self.targets:]

    def __call__(self, rows: np.ndarray, rng) -> dict:
        ids = np.asarray(rows, dtype=np.int64)
        n, length = ids.shape
        c = self.targets
        rank, targets = self.draw(n, length, rng)
        inputs = np.full((n, length + c), self.query_id, dtype=np.int64)
        inputs[:, :length] = ids
        positions = np.concatenate([np.broadcast_to(np.arange(length), (n, length)), targets], axis=1)
        masks = np.stack([permuted_masks(rank[r], targets[r]) for r in range(n)])[:, None]
        labels = np.take_along_axis(ids, targets, axis=1)
        return tensors(input_ids=inputs, position_ids=positions, attention_mask=masks, labels=labels)


def permuted_flops_per_token(model, layout, targets: int) -> float:
    """FLOPs per input token: the transformer over ``seq_len + targets`` rows, the output layer at the
    ``targets`` query rows only."""
    cfg = model.config
    s, d = layout.seq_len, cfg.n_embd
    rows = s + targets
    output = cfg.vocab_size * d
    body = sum(p.numel() for p in model.parameters()) - output
    return 6 * body * rows / s + 6 * output * targets / s + 12 * cfg.n_layer * d * rows * rows / s


def permuted_view(model, builder):
    """GPT-2's transformer over content and query rows under the two-stream mask, its output layer at the query
    rows only; (loss, logits, labels) of the targets."""
    import torch

    if not hasattr(model, "transformer") or not hasattr(model, "lm_head"):
        raise ValueError("permuted: needs a GPT-2 language model (GPT2LMHeadModel)")

    def forward(inner, input_ids, position_ids, attention_mask, labels, **kwargs):
        if getattr(inner.config, "_attn_implementation", None) != "sdpa":  # eager adds the mask to scores
            attention_mask = torch.zeros(attention_mask.shape, device=attention_mask.device).masked_fill(
                ~attention_mask, torch.finfo(torch.float32).min)
        hidden = inner.transformer(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                                   use_cache=False, **kwargs)[0]
        logits = inner.lm_head(hidden[:, hidden.size(1) - labels.size(1):])  # the query rows
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.size(-1)), labels.reshape(-1))
        return SimpleNamespace(loss=loss, logits=logits, labels=labels)

    return wrap(model, forward), (lambda batch: batch)


OBJECTIVES = (
    Objective(name="permuted", paradigm="gpt", builder=PermutedLM, view=permuted_view,
              setup=lambda model, layout, builder, train, init: permuted_flops_per_token(model, layout, builder.targets),
              card=lambda select, generator_size: "permuted language modelling (XLNet; two-stream attention, the "
                                                  "last 1/6 of each order predicted)"),
)

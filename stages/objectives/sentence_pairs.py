"""Sentence-pair objectives beside BERT's masked LM: next-sentence prediction (NSP; Devlin et al. 2019,
section 3.1) and sentence-order prediction (SOP; Lan et al. 2020, ALBERT, section 4.1).

Each block is cut in two at a sentence end (:meth:`SentencePairs.cut`) and a head on ``[CLS]`` of
``[CLS] A [SEP] B' [SEP]`` says whether B' is the real continuation (0) or not (1): NSP's negatives take B' from a
random block, SOP's swap A and B. Masked LM then runs on the pair and the two losses are summed. A packed block
may hold two documents, so A and B may come from two; all draws come from the block's own stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

import numpy as np

from stages.objectives import Objective, pad, tensors, wrap
from stages.objectives.masked_lm import MaskedLM, body_name, masked_positions, mlm_at, share
from stages.training.models import attach_side_head, flops_per_token

PAIR_HEAD_FILE = "pair_head.safetensors"
TASKS = ("nsp", "sop")


class SentencePairs(MaskedLM):
    needs_corpus = True  # ``make_batch`` passes the block array the rows come from (NSP's random blocks)

    def __init__(self, layout, *, task: str, select: float = 0.15, sentence_ends: Sequence[int] = ()) -> None:
        if task not in TASKS:
            raise ValueError(f"sentence pairs: task must be one of {', '.join(TASKS)}, got {task!r}")
        super().__init__(layout, select=select)
        if layout.seq_len < 5:
            raise ValueError("sentence pairs: seq_len must be at least 5 for [CLS] A [SEP] B [SEP]")
        self.name = task
        self.ends = np.asarray(sorted({int(i) for i in sentence_ends} | {int(layout.sep_id)}), dtype=np.int64)

    def content(self, row: np.ndarray) -> np.ndarray:
        """The text of a block: between its [CLS] and its final [SEP] (document separators kept)."""
        row = np.asarray(row, dtype=np.int64)
        seps = np.flatnonzero(row == self.layout.sep_id)
        end = int(seps[-1]) if len(seps) else int(np.sum(row != self.layout.pad_id))
        return row[1:end]

    def cut(self, text: np.ndarray, u: float) -> int:
        """Where A ends: a sentence end in the middle half of ``text`` (``u`` picks which), else a point there."""
        n = len(text)
        lo, hi = max(1, n // 4), max(1, (3 * n) // 4)
        ends = np.flatnonzero(np.isin(text[: max(0, n - 1)], self.ends)) + 1  # cut after the end token
        ends = ends[(ends >= lo) & (ends <= hi)]
        if len(ends):
            return int(ends[min(int(u * len(ends)), len(ends) - 1)])
        return int(lo + min(int(u * (hi - lo + 1)), hi - lo))

    def pair(self, row: np.ndarray, negative: bool, u_cut: float, other: np.ndarray | None) -> np.ndarray:
        """The block rebuilt as ``[CLS] A [SEP] B' [SEP] [PAD]...`` (its label is ``negative``)."""
        lay = self.layout
        text = self.content(row)
        if len(text) < 2:  # nothing to cut: the block as it is (counted as a positive by the caller)
            return np.asarray(row, dtype=np.int64)
        k = self.cut(text, u_cut)
        a, b = text[:k], text[k:]
        if len(a) and a[-1] == lay.sep_id:  # a document boundary: the pair's own [SEP] stands for it
            a = a[:-1]
        room = lay.seq_len - 3
        a = a[:room - 1]
        b = b[: room - len(a)]
        if negative and self.name == "sop":
            first, second = b, a
        elif negative:  # nsp: as many tokens of a random block's text, from its first sentence on
            first, second = a, self.content(other)[: len(b)]
        else:
            first, second = a, b
        parts = [[lay.cls_id], first, [lay.sep_id], second, [lay.sep_id]]
        return pad(np.concatenate([np.asarray(p, dtype=np.int64) for p in parts]), lay.seq_len, lay.pad_id)

    def __call__(self, rows: np.ndarray, rng, corpus: np.ndarray | None = None) -> dict:
        rows = np.asarray(rows)
        if self.name == "nsp" and (corpus is None or len(corpus) < 2):
            raise ValueError("nsp: needs the corpus of at least 2 blocks its rows come from (random segments)")
        u = rng.random((len(rows), 3))  # per block: negative?, where to cut, which random block (NSP)
        negative = u[:, 0] < 0.5
        pairs, labels = [], []
        for r, row in enumerate(rows):
            other = None
            if self.name == "nsp" and negative[r]:
                j = min(int(u[r, 2] * len(corpus)), len(corpus) - 1)
                if np.array_equal(corpus[j], row):  # drew the block itself: the next one
                    j = (j + 1) % len(corpus)
                other = np.asarray(corpus[j], dtype=np.int64)
            pairs.append(self.pair(row, bool(negative[r]), float(u[r, 1]), other))
            labels.append(int(negative[r]) if len(self.content(row)) >= 2 else 0)  # an uncut block: a positive
        return {**super().__call__(np.stack(pairs), rng), **tensors(pair_labels=np.asarray(labels, dtype=np.int64))}


def attach_pair_head(model, *, seed: int, init=None) -> None:
    """Give a masked-LM model BERT's sentence-pair head (its pooler, dense + tanh on ``[CLS]``, then two
    logits) as the submodule ``pair_head``; with ``init`` its trained weights from ``pair_head.safetensors``."""
    attach_side_head(model, "pair_head", "Tanh", 2, file=PAIR_HEAD_FILE, seed=seed, init=init)


def setup(model, layout, builder, train, init) -> float:
    """The pair head; masked LM's FLOPs plus the head's, which runs once per block (6 x its size / seq_len)."""
    flops = flops_per_token(model, layout, predicted_fraction=builder.select)
    attach_pair_head(model, seed=train.seed, init=init)
    return flops + 6 * sum(p.numel() for p in model.pair_head.parameters()) / layout.seq_len


def pair_view(model, builder):
    """Masked LM plus the pair head on ``[CLS]``, one transformer pass, losses summed as BERT's. In eval mode:
    the masked-LM loss alone, and ``pair_accuracy``."""
    import torch

    body = body_name(model)
    if body is None or not hasattr(model, "cls") or not hasattr(model, "pair_head"):
        raise ValueError("nsp / sop: needs a masked-LM model with a pair_head (attach_pair_head)")

    def forward(inner, input_ids, attention_mask=None, labels=None, positions=None, pair_labels=None, **kwargs):
        hidden = getattr(inner, body)(input_ids=input_ids, attention_mask=attention_mask, **kwargs)[0]
        mlm = mlm_at(inner, hidden, labels, positions)
        pair_logits = inner.pair_head(hidden[:, 0]).float()
        pair = torch.nn.functional.cross_entropy(pair_logits, pair_labels)
        accuracy = (pair_logits.argmax(-1) == pair_labels).float().mean()
        loss = mlm.loss + pair if inner.training else mlm.loss
        return SimpleNamespace(loss=loss, logits=mlm.logits, labels=mlm.labels, mlm_loss=mlm.loss, pair_loss=pair,
                               pair_accuracy=accuracy)

    return wrap(model, forward), masked_positions


OBJECTIVES = tuple(
    Objective(name=task, paradigm="bert", builder=SentencePairs, fixed={"task": task}, sentence_ends=True,
              view=pair_view, setup=setup, metrics=("pair_accuracy",), settings=lambda train: {"select": train.mlm_select},
              card=lambda select, generator_size, words=words: f"masked language modelling with {words}" + share(select))
    for task, words in (("nsp", "next-sentence prediction (BERT's)"), ("sop", "sentence-order prediction (ALBERT's)")))

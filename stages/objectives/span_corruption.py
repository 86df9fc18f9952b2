"""T5's span corruption (Raffel et al. 2020, section 3.1.4): noise density 0.15, mean span length 3.

Each noise span of a raw block is replaced in the encoder input by one sentinel, and the target lists each
sentinel followed by the span it replaced; both end in ``</s>``. The lengths follow T5's
``compute_input_and_target_lengths``: an encoder input of 512 needs 568 raw tokens and gives 114 targets.
"""

from __future__ import annotations

import numpy as np

from stages.objectives import BlockCheck, Builder, Objective, tensors


def _lengths(tokens_length: int, noise_density: float, mean_span: float) -> tuple[int, int]:
    """(encoder input length, target length) for a raw block of ``tokens_length`` tokens."""
    noise = int(round(tokens_length * noise_density))
    spans = int(round(noise / mean_span))
    # input: the kept tokens, one sentinel per span, </s>; target: one sentinel per span, the noise, </s>
    return tokens_length - noise + spans + 1, noise + spans + 1


def input_and_target_lengths(inputs_length: int, noise_density: float = 0.15,
                             mean_span: float = 3.0) -> tuple[int, int]:
    """The longest raw block whose corrupted encoder input fits in ``inputs_length``, and its target length.

    >>> input_and_target_lengths(512)
    (568, 114)
    """
    if inputs_length < 2:
        raise ValueError("inputs_length: must be at least 2")
    if not 0 < noise_density < 1:
        raise ValueError("noise_density: must be in (0, 1)")
    if mean_span < 1:
        raise ValueError("mean_span: must be >= 1")
    raw = inputs_length
    while _lengths(raw + 1, noise_density, mean_span)[0] <= inputs_length:
        raw += 1
    targets = _lengths(raw, noise_density, mean_span)[1]
    if noise_density == 0.5 and targets > raw:  # T5 keeps inputs and targets equal at density 0.5
        raw -= 1
        targets -= 1
    return raw, targets


def _random_partitions(rows: int, total: int, parts: int, rng) -> np.ndarray:
    """``rows`` x ``parts`` positive integers, each row summing to ``total`` and uniform over such
    compositions (its ``parts - 1`` cut points are a uniform random subset of ``1 .. total - 1``). ``rng``:
    a numpy Generator or a :class:`~stages.training.data.BlockStreams` (row ``r`` from block ``r``'s stream)."""
    if parts == 1:
        return np.full((rows, 1), total, dtype=np.int64)
    keys = rng.random((rows, total - 1))
    cuts = np.sort(np.argpartition(keys, parts - 2, axis=1)[:, :parts - 1], axis=1) + 1
    edges = np.concatenate((np.zeros((rows, 1), np.int64), cuts, np.full((rows, 1), total, np.int64)), axis=1)
    return np.diff(edges, axis=1)


def _counts(length: int, noise_density: float, mean_span: float) -> tuple[int, int]:
    noise = min(max(int(round(length * noise_density)), 1), length - 1)
    return noise, max(int(round(noise / mean_span)), 1)


def noise_masks(rows: int, length: int, noise_density: float, mean_span: float, rng) -> np.ndarray:
    """``rows`` boolean masks of ``length``, each with exactly ``round(length * noise_density)`` noise
    positions in ``round(noise / mean_span)`` spans, alternating with as many non-noise spans, starting with
    non-noise (T5's ``random_spans_noise_mask``)."""
    noise, spans = _counts(length, noise_density, mean_span)
    noise_lengths = _random_partitions(rows, noise, spans, rng)
    keep_lengths = _random_partitions(rows, length - noise, spans, rng)
    ends = np.cumsum(np.stack([keep_lengths, noise_lengths], axis=2).reshape(rows, -1), axis=1)
    marks = np.zeros((rows, length + 1), dtype=np.int8)  # +1 where a noise span starts, -1 where it ends
    r = np.arange(rows)[:, None]
    marks[r, ends[:, 0::2]] = 1
    marks[r, ends[:, 1::2]] = -1
    return np.cumsum(marks, axis=1)[:, :length].astype(bool)


def corrupt_batch(blocks: np.ndarray, *, sentinel_top: int, eos_id: int, noise_density: float = 0.15,
                  mean_span: float = 3.0, rng) -> tuple[np.ndarray, np.ndarray]:
    """(encoder inputs, targets) for raw blocks of equal length, one row per block. Sentinels count down
    from ``sentinel_top`` (``<extra_id_0>``, the last id of the vocabulary). Every row has the same number of
    noise tokens and spans, so inputs and targets come out as rectangular arrays."""
    blocks = np.asarray(blocks)
    rows, length = blocks.shape
    noise, spans = _counts(length, noise_density, mean_span)
    mask = noise_masks(rows, length, noise_density, mean_span, rng)
    starts = mask.copy()
    starts[:, 1:] &= ~mask[:, :-1]                                  # first token of each noise span
    span_no = np.cumsum(starts, axis=1)
    sentinels = sentinel_top - (span_no - 1)
    keep = ~mask | starts                                           # a span collapses to its sentinel
    inputs = np.where(starts, sentinels, blocks)[keep].reshape(rows, length - noise + spans)
    # target: for each span, its sentinel then its tokens; each span shifts later tokens by its sentinel
    cols = np.nonzero(mask)[1].reshape(rows, noise)
    span_of = np.take_along_axis(span_no, cols, axis=1)
    out_pos = np.arange(noise)[None, :] + span_of
    is_start = np.take_along_axis(starts, cols, axis=1)
    r = np.arange(rows)[:, None]
    target = np.empty((rows, noise + spans), dtype=np.int64)
    target[r, out_pos] = np.take_along_axis(blocks, cols, axis=1)
    sentinel_at = (out_pos - 1)[is_start].reshape(rows, spans)     # the sentinel sits before its span
    target[r, sentinel_at] = (sentinel_top - (span_of - 1))[is_start].reshape(rows, spans)
    eos = np.full((rows, 1), eos_id, dtype=np.int64)
    return (np.concatenate((inputs.astype(np.int64), eos), axis=1).astype(blocks.dtype),
            np.concatenate((target, eos), axis=1).astype(blocks.dtype))


def corrupt(block: np.ndarray, *, sentinel_top: int, eos_id: int, noise_density: float = 0.15,
            mean_span: float = 3.0, rng) -> tuple[np.ndarray, np.ndarray]:
    """(encoder input, target) for one raw block (:func:`corrupt_batch` of one row)."""
    inputs, target = corrupt_batch(np.asarray(block)[None, :], sentinel_top=sentinel_top, eos_id=eos_id,
                                   noise_density=noise_density, mean_span=mean_span, rng=rng)
    return inputs[0], target[0]


class SpanCorruption(Builder):
    """T5's objective over a batch of raw blocks: inputs of exactly ``seq_len`` and labels of exactly
    ``targets_len`` tokens, so batches need no padding."""

    name = "span_corruption"

    def __call__(self, rows: np.ndarray, rng: np.random.Generator) -> dict:
        lay = self.layout
        inputs, labels = corrupt_batch(np.asarray(rows, dtype=np.int64), sentinel_top=lay.sentinel_top,
                                       eos_id=lay.eos_id, noise_density=lay.noise_density, mean_span=lay.mean_span,
                                       rng=rng)
        return tensors(input_ids=inputs, attention_mask=np.ones_like(inputs), labels=labels)


def corruption_lengths(blocks: np.ndarray, layout, sample: int, seed: int = 0):
    """Encoder-input and target lengths after span corruption, for up to ``sample`` random blocks (a DataFrame
    indexed by block)."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(len(blocks), size=min(sample, len(blocks)), replace=False)) if len(blocks) else []
    out = []
    for r in rows:
        inputs, target = corrupt(np.asarray(blocks[r]), sentinel_top=layout.sentinel_top, eos_id=layout.eos_id,
                                 noise_density=layout.noise_density, mean_span=layout.mean_span, rng=rng)
        out.append((int(r), len(inputs), len(target)))
    return pd.DataFrame(out, columns=["block", "input_len", "target_len"]).set_index("block")


# The tokens gate corrupts a sample of the T5 blocks: every encoder input and target has exactly the layout's lengths
LENGTHS = BlockCheck("t5_corruption", corruption_lengths,
                     lambda layout: {"input_len": layout.seq_len, "target_len": layout.targets_len})

OBJECTIVES = (Objective(name="span_corruption", paradigm="t5", builder=SpanCorruption, block_check=LENGTHS,
                        card=lambda select, generator_size: "span corruption"),)

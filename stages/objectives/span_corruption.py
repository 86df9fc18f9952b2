"""T5's span corruption (Raffel et al. 2020, section 3.1.4): noise density 0.15, mean span length 3.

A raw block of ``tokens_length`` ids is split into alternating non-noise and noise spans; each noise span
is replaced in the encoder input by one sentinel, and the target lists each sentinel followed by the span
it replaced. Both sequences end in ``</s>``. The lengths follow T5's ``compute_input_and_target_lengths``
(also in transformers' ``examples/flax/language-modeling/run_t5_mlm_flax.py``): an encoder input of 512
needs 568 raw tokens and gives 114 target tokens.
"""

from __future__ import annotations

import numpy as np


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


def _random_partition(total: int, parts: int, rng: np.random.Generator) -> np.ndarray:
    """``parts`` positive integers summing to ``total``, uniformly over such compositions."""
    cuts = np.sort(rng.choice(np.arange(1, total), size=parts - 1, replace=False)) if parts > 1 else np.empty(0, int)
    return np.diff(np.concatenate(([0], cuts, [total])))


def noise_mask(length: int, noise_density: float, mean_span: float, rng: np.random.Generator) -> np.ndarray:
    """A boolean mask of ``length`` with exactly ``round(length * noise_density)`` noise positions in
    ``round(noise / mean_span)`` spans, alternating with as many non-noise spans, starting with non-noise
    (T5's ``random_spans_noise_mask``)."""
    noise = min(max(int(round(length * noise_density)), 1), length - 1)
    spans = max(int(round(noise / mean_span)), 1)
    noise_lengths = _random_partition(noise, spans, rng)
    keep_lengths = _random_partition(length - noise, spans, rng)
    interleaved = np.stack([keep_lengths, noise_lengths], axis=1).reshape(-1)
    is_noise = np.tile([False, True], spans)
    return np.repeat(is_noise, interleaved)


def corrupt(block: np.ndarray, *, sentinel_top: int, eos_id: int, noise_density: float = 0.15,
            mean_span: float = 3.0, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(encoder input, target) for one raw block. Sentinels count down from ``sentinel_top``
    (``<extra_id_0>``, the last id of the vocabulary)."""
    mask = noise_mask(len(block), noise_density, mean_span, rng)
    starts = mask & ~np.concatenate(([False], mask[:-1]))       # first token of each noise span
    span_no = np.cumsum(starts)
    sentinels_in = sentinel_top - (span_no - 1)
    inputs = np.where(starts, sentinels_in, block)[~mask | starts]  # a span collapses to its sentinel
    # target: for each span, its sentinel then its tokens; the sentinel sits where the span starts
    target = np.empty(int(mask.sum() + starts.sum()), dtype=block.dtype)
    span_pos = np.flatnonzero(mask)
    sent_ids = sentinel_top - (span_no[span_pos] - 1)
    is_start = starts[span_pos]
    out_pos = np.arange(len(span_pos)) + span_no[span_pos]  # each span shifts later tokens by its sentinel
    target[out_pos] = block[span_pos]
    target[out_pos[is_start] - 1] = sent_ids[is_start]
    return (np.concatenate((inputs.astype(block.dtype), [eos_id])).astype(block.dtype),
            np.concatenate((target, [eos_id])).astype(block.dtype))


class SpanCorruption:
    """T5's objective over a batch of raw blocks: inputs of exactly ``seq_len`` and labels of exactly
    ``targets_len`` tokens, so batches need no padding."""

    name = "span_corruption"

    def __init__(self, layout) -> None:
        self.layout = layout

    def __call__(self, rows: np.ndarray, rng: np.random.Generator) -> dict:
        import torch

        lay = self.layout
        pairs = [corrupt(np.asarray(r, dtype=np.int64), sentinel_top=lay.sentinel_top, eos_id=lay.eos_id,
                         noise_density=lay.noise_density, mean_span=lay.mean_span, rng=rng) for r in rows]
        inputs = torch.from_numpy(np.stack([p[0] for p in pairs]).astype(np.int64))
        labels = torch.from_numpy(np.stack([p[1] for p in pairs]).astype(np.int64))
        return {"input_ids": inputs, "attention_mask": torch.ones_like(inputs), "labels": labels}

    def input_tokens(self, rows: int) -> int:
        return rows * self.layout.seq_len

"""T5 span corruption: T5's lengths, exact sequence lengths, and nothing lost between input and target."""

from __future__ import annotations

import numpy as np
import pytest

from stages.objectives.span_corruption import corrupt, input_and_target_lengths, noise_masks


def test_lengths_match_t5_reference():
    # T5 / run_t5_mlm_flax: 512 encoder tokens need 568 raw tokens and give 114 targets at 0.15 / 3.
    assert input_and_target_lengths(512, 0.15, 3.0) == (568, 114)
    assert input_and_target_lengths(128, 0.15, 3.0) == (141, 29)


def test_lengths_reject_bad_arguments():
    with pytest.raises(ValueError, match="noise_density"):
        input_and_target_lengths(128, 1.5, 3)
    with pytest.raises(ValueError, match="mean_span"):
        input_and_target_lengths(128, 0.15, 0.5)


@pytest.mark.parametrize("length", [141, 568, 50])
def test_noise_mask_has_exact_counts(length):
    rng = np.random.default_rng(1)
    for _ in range(20):
        mask = noise_masks(1, length, 0.15, 3.0, rng)[0]
        noise = int(round(length * 0.15))
        assert len(mask) == length and mask.sum() == noise
        starts = mask & ~np.concatenate(([False], mask[:-1]))
        assert starts.sum() == int(round(noise / 3.0))
        assert not mask[0]  # T5's mask starts with a non-noise span


def reconstruct(inputs, target, top):
    """Undo the corruption: each sentinel in the input is replaced by the target span it introduces."""
    spans, current = {}, None
    for t in target[:-1]:
        if t > top - 100:
            current = int(t)
            spans[current] = []
        else:
            spans[current].append(int(t))
    out = []
    for t in inputs[:-1]:
        out.extend(spans[int(t)] if t > top - 100 else [int(t)])
    return out


@pytest.mark.parametrize("seq_len", [128, 512])
def test_corrupt_gives_exact_lengths_and_loses_nothing(seq_len):
    raw, targets = input_and_target_lengths(seq_len)
    rng = np.random.default_rng(0)
    top = 32099
    for _ in range(50):
        block = rng.integers(3, 30000, size=raw).astype(np.uint16)
        inputs, target = corrupt(block, sentinel_top=top, eos_id=1, rng=rng)
        assert len(inputs) == seq_len and len(target) == targets
        assert inputs[-1] == 1 and target[-1] == 1
        assert reconstruct(inputs, target, top) == block.tolist()
        sentinels = inputs[inputs > top - 100]
        assert sentinels.tolist() == list(range(top, top - len(sentinels), -1))  # <extra_id_0>, 1, 2, ...

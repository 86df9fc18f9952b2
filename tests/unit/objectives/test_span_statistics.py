"""T5 span corruption over many draws (Raffel et al. 2020, 3.1.4; T5's ``random_spans_noise_mask``):
exact noise and span counts, alternating runs that start with non-noise, span lengths that vary around 3,
sentinels counting down from the last id, and the paradigm -> objective wiring."""

from __future__ import annotations

import numpy as np
import pytest

from stages.objectives import for_paradigm
from stages.objectives.causal_lm import CausalLM
from stages.objectives.masked_lm import MaskedLM
from stages.objectives.span_corruption import SpanCorruption, corrupt, noise_masks
from stages.tokenization.layout import BlockLayout

DRAWS, TOP, EOS = 2000, 8191, 1
T5 = {seq: BlockLayout(paradigm="t5", seq_len=seq, block_len=raw, vocab_size=8192, pad_id=0, unk_id=2,
                       eos_id=EOS, sentinel_top=TOP, sentinels=100, targets_len=tgt, noise_density=0.15,
                       mean_span=3.0) for seq, raw, tgt in ((128, 141, 29), (512, 568, 114))}
BERT = BlockLayout(paradigm="bert", seq_len=128, block_len=128, vocab_size=8192, pad_id=0, unk_id=1, cls_id=2,
                   sep_id=3, mask_id=4)
GPT = BlockLayout(paradigm="gpt", seq_len=128, block_len=128, vocab_size=8192, eos_id=0)


def runs(mask: np.ndarray) -> list[tuple[bool, int]]:
    """(is_noise, length) of each maximal run."""
    edges = np.flatnonzero(np.diff(mask.astype(np.int8))) + 1
    bounds = np.concatenate(([0], edges, [len(mask)]))
    return [(bool(mask[a]), int(b - a)) for a, b in zip(bounds[:-1], bounds[1:])]


@pytest.fixture(scope="module", params=[141, 568])
def draws(request):
    length = request.param
    rng = np.random.default_rng(length)
    return length, [noise_masks(1, length, 0.15, 3.0, rng)[0] for _ in range(DRAWS)]


def test_noise_and_span_counts_are_exact_every_draw(draws):
    length, masks = draws
    noise = round(length * 0.15)  # 21 of 141, 85 of 568
    spans = round(noise / 3.0)    # 7, 28
    for mask in masks:
        assert mask.dtype == bool and len(mask) == length
        assert mask.sum() == noise and mask.mean() == noise / length
        assert sum(1 for is_noise, _ in runs(mask) if is_noise) == spans


def test_runs_alternate_starting_with_non_noise_and_ending_with_noise(draws):
    length, masks = draws
    spans = round(round(length * 0.15) / 3.0)
    for mask in masks:
        r = runs(mask)
        assert len(r) == 2 * spans  # as many non-noise spans as noise spans, strictly alternating
        assert [n for n, _ in r] == [False, True] * spans


def test_noise_span_lengths_vary_around_three(draws):
    length, masks = draws
    noise = round(length * 0.15)
    k = round(noise / 3.0)
    lengths = np.array([n for m in masks for is_noise, n in runs(m) if is_noise])
    assert len(lengths) == DRAWS * k and lengths.mean() == pytest.approx(noise / k)  # 3 and 85/28
    assert abs(lengths.mean() - 3.0) < 0.05
    assert lengths.min() == 1 and lengths.max() >= 8 and len(np.unique(lengths)) >= 6
    # uniform over compositions of `noise` into k parts: P(len = 1) = (k-1)/(noise-1) and
    # var = m (k-1) (m+k) / (k^2 (k+1)) with m = noise - k (Bose-Einstein marginal, shifted by one)
    p1, n = (k - 1) / (noise - 1), len(lengths)
    assert abs((lengths == 1).mean() - p1) <= 5 * np.sqrt(p1 * (1 - p1) / n)
    m = noise - k
    assert lengths.var() == pytest.approx(m * (k - 1) * (m + k) / (k * k * (k + 1)), rel=0.15)
    keep = np.array([n for mk in masks for is_noise, n in runs(mk) if not is_noise])
    assert keep.mean() == pytest.approx((length - noise) / k) and keep.std() > 5  # non-noise spans vary too


def test_masks_differ_between_draws(draws):
    _, masks = draws
    assert len({m.tobytes() for m in masks}) > 0.99 * len(masks)


@pytest.mark.parametrize("seq_len", [128, 512])
def test_sentinels_count_down_and_targets_repeat_them_in_order(seq_len):
    lay = T5[seq_len]
    rng = np.random.default_rng(seq_len)
    is_sentinel = lambda a: a > TOP - lay.sentinels  # noqa: E731
    for _ in range(200):
        block = rng.integers(3, TOP - lay.sentinels, size=lay.block_len).astype(np.uint16)
        inputs, target = corrupt(block, sentinel_top=TOP, eos_id=EOS, rng=rng)
        s_in, s_tg = inputs[is_sentinel(inputs)], target[is_sentinel(target)]
        spans = round(round(lay.block_len * 0.15) / 3.0)
        assert s_in.tolist() == list(range(TOP, TOP - spans, -1))  # <extra_id_0> = 8191, then 8190, ...
        assert s_tg.tolist() == s_in.tolist()
        assert target[0] == TOP and inputs[-1] == EOS and target[-1] == EOS
        assert not is_sentinel(inputs[0])  # the block starts with a non-noise span


@pytest.mark.parametrize("seq_len", [128, 512])
def test_batched_span_corruption_has_exact_lengths_and_keeps_every_token(seq_len):
    lay = T5[seq_len]
    rng = np.random.default_rng(0)
    rows = rng.integers(3, TOP - lay.sentinels, size=(64, lay.block_len)).astype(np.uint16)
    out = SpanCorruption(lay)(rows, np.random.default_rng(1))
    assert tuple(out["input_ids"].shape) == (64, seq_len)
    assert tuple(out["labels"].shape) == (64, lay.targets_len)
    assert tuple(out["attention_mask"].shape) == (64, seq_len) and bool((out["attention_mask"] == 1).all())
    inp, lab = out["input_ids"].numpy(), out["labels"].numpy()
    assert (inp[:, -1] == EOS).all() and (lab[:, -1] == EOS).all()
    for row, i, t in zip(rows, inp, lab):
        kept = np.concatenate((i[:-1][i[:-1] <= TOP - 100], t[:-1][t[:-1] <= TOP - 100]))
        assert sorted(kept.tolist()) == sorted(row.tolist())  # every raw token lands in input or target
    again = SpanCorruption(lay)(rows, np.random.default_rng(1))
    assert (again["input_ids"] == out["input_ids"]).all() and (again["labels"] == out["labels"]).all()


def test_for_paradigm_picks_the_objective():
    assert isinstance(for_paradigm(BERT), MaskedLM)
    assert isinstance(for_paradigm(GPT), CausalLM)
    assert isinstance(for_paradigm(T5[128]), SpanCorruption) and for_paradigm(T5[512]).layout is T5[512]
    assert for_paradigm(BERT, select=0.3).select == 0.3  # settings reach the objective


def test_causal_lm_labels_equal_inputs():
    rows = np.random.default_rng(0).integers(0, 65535, size=(8, 128)).astype(np.uint16)
    out = CausalLM(GPT)(rows, np.random.default_rng(0))
    assert out["input_ids"].dtype == out["labels"].dtype and str(out["labels"].dtype) == "torch.int64"
    assert (out["input_ids"].numpy() == rows.astype(np.int64)).all()  # ids >= 32768 stay positive
    assert (out["labels"] == out["input_ids"]).all()
    out["labels"][0, 0] = -100  # labels are their own tensor: masking them must not touch the inputs
    assert out["input_ids"][0, 0] == int(rows[0, 0])

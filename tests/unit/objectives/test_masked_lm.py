"""BERT's masked LM (Devlin et al. 2019, 3.1) with RoBERTa's dynamic masking (Liu et al. 2019, 4.1), checked
statistically: every tolerance is 5 binomial standard deviations over 2,000 blocks of 128 tokens."""

from __future__ import annotations

import numpy as np
import pytest

from stages.objectives.masked_lm import MaskedLM
from stages.tokenization.layout import BlockLayout

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
VOCAB, ROWS, WIDTH, SIGMAS = 8192, 2000, 128, 5.0
LAYOUT = BlockLayout(paradigm="bert", seq_len=WIDTH, block_len=WIDTH, vocab_size=VOCAB, pad_id=PAD,
                     unk_id=UNK, cls_id=CLS, sep_id=SEP, mask_id=MASK)


def make_rows(seed: int = 7) -> np.ndarray:
    """[CLS] text [SEP] [PAD]...: a third of the rows end early with a [PAD] tail; ~1% of text is [UNK]."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(5, VOCAB, size=(ROWS, WIDTH)).astype(np.uint16)
    rows[rng.random(rows.shape) < 0.01] = UNK
    rows[:, 0] = CLS
    ends = np.where(rng.random(ROWS) < 1 / 3, rng.integers(20, WIDTH - 1, size=ROWS), WIDTH - 1)
    for r, end in enumerate(ends):
        rows[r, end] = SEP
        rows[r, end + 1:] = PAD
    return rows


def near(observed: float, p: float, n: int) -> bool:
    return abs(observed - p) <= SIGMAS * np.sqrt(p * (1 - p) / n)


@pytest.fixture(scope="module")
def sample():
    rows = make_rows()
    out = MaskedLM(LAYOUT)(rows, np.random.default_rng(123))
    ids = rows.astype(np.int64)
    return ids, {k: v.numpy() for k, v in out.items()}


def test_shapes_and_dtypes(sample):
    ids, out = sample
    for key in ("input_ids", "attention_mask", "labels"):
        assert out[key].shape == ids.shape and out[key].dtype == np.int64, key


def test_selected_fraction_of_maskable_positions(sample):
    ids, out = sample
    maskable = ~np.isin(ids, [CLS, SEP, PAD])
    selected = out["labels"] != -100
    assert near(selected[maskable].mean(), 0.15, int(maskable.sum()))


def test_specials_never_selected_but_unk_is(sample):
    ids, out = sample
    for special in (CLS, SEP, PAD):
        at = ids == special
        assert at.any() and (out["labels"][at] == -100).all(), special
        assert (out["input_ids"][at] == special).all(), special
    unk = ids == UNK
    assert unk.sum() > 1000
    assert near((out["labels"][unk] != -100).mean(), 0.15, int(unk.sum()))


def test_labels_are_originals_and_unselected_inputs_untouched(sample):
    ids, out = sample
    selected = out["labels"] != -100
    assert (out["labels"][selected] == ids[selected]).all()
    assert (out["input_ids"][~selected] == ids[~selected]).all()


def test_80_10_10_split_among_selected(sample):
    ids, out = sample
    selected = out["labels"] != -100
    n = int(selected.sum())
    inp, orig = out["input_ids"][selected], ids[selected]
    masked = inp == MASK
    random = (inp != MASK) & (inp != orig)
    kept = inp == orig
    assert (masked | random | kept).all()
    assert near(masked.mean(), 0.8, n)
    assert near(random.mean(), 0.1, n)
    assert near(kept.mean(), 0.1, n)  # includes random draws equal to the original (p ~ 1/8187)


def test_random_replacements_are_regular_and_uniform(sample):
    ids, out = sample
    inp = out["input_ids"]
    random = (out["labels"] != -100) & (inp != MASK) & (inp != ids)
    drawn = inp[random]
    assert len(drawn) > 1000
    assert drawn.min() >= 5 and drawn.max() < VOCAB
    # uniform over [5, VOCAB): mean (5 + VOCAB - 1) / 2, sd (VOCAB - 5) / sqrt(12)
    sd = (VOCAB - 5) / np.sqrt(12) / np.sqrt(len(drawn))
    assert abs(drawn.mean() - (5 + VOCAB - 1) / 2) <= SIGMAS * sd
    assert (MASK not in inp[out["labels"] == -100])  # [MASK] only appears where a position was selected


def test_attention_mask_is_zero_exactly_on_pad(sample):
    ids, out = sample
    assert (out["attention_mask"] == (ids != PAD)).all()
    assert (out["attention_mask"] == 0).any()


def test_dynamic_masking_fresh_each_time_and_reproducible_on_resume():
    rows = make_rows(seed=3)
    obj = MaskedLM(LAYOUT)
    rng = np.random.default_rng(5)
    first, second = obj(rows, rng), obj(rows, rng)  # the same blocks seen again, generator advanced
    a, b = first["labels"].numpy() != -100, second["labels"].numpy() != -100
    assert not (a == b).all()
    # fresh draws are independent: of the positions selected the first time, ~15% are selected again
    assert near(b[a].mean(), 0.15, int(a.sum()))
    again = obj(rows, np.random.default_rng(5))  # a resumed run replays the same generator state
    for key in ("input_ids", "attention_mask", "labels"):
        assert (again[key] == first[key]).all(), key


def test_custom_fractions_are_honoured():
    rows = make_rows(seed=11)
    ids = rows.astype(np.int64)
    out = MaskedLM(LAYOUT, select=0.4, mask=0.5, random=0.3)(rows, np.random.default_rng(1))
    selected = out["labels"].numpy() != -100
    maskable = ~np.isin(ids, [CLS, SEP, PAD])
    assert near(selected[maskable].mean(), 0.4, int(maskable.sum()))
    inp, n = out["input_ids"].numpy()[selected], int(selected.sum())
    assert near((inp == MASK).mean(), 0.5, n)
    assert near(((inp != MASK) & (inp != ids[selected])).mean(), 0.3, n)


@pytest.mark.parametrize("kwargs", [dict(select=0.0), dict(select=1.0), dict(select=-0.1), dict(select=1.5),
                                    dict(mask=-0.1), dict(random=-0.1), dict(mask=0.95, random=0.1)])
def test_constructor_rejects_bad_fractions(kwargs):
    with pytest.raises(ValueError):
        MaskedLM(LAYOUT, **kwargs)


def test_constructor_accepts_boundary_fractions():
    MaskedLM(LAYOUT, mask=1.0, random=0.0)
    MaskedLM(LAYOUT, mask=0.0, random=0.0)

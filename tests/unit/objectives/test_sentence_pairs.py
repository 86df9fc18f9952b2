"""BERT's next-sentence prediction (Devlin et al. 2019, 3.1) and ALBERT's sentence-order prediction (Lan et al.
2020, 4.1) beside masked LM: half the pairs are negatives, drawn the paper's way (NSP: a segment of a random
block of the corpus; SOP: the same two segments swapped), cut at sentence ends, and a block's pair depends on
its own random stream only. Statistical tolerances are 5 binomial standard deviations."""

from __future__ import annotations

import numpy as np
import pytest

from stages.objectives import for_paradigm
from stages.objectives.sentence_pairs import SentencePairs
from stages.tokenization.layout import BlockLayout
from stages.training.data import generators, make_batch

PAD, UNK, CLS, SEP, MASK, DOT = 0, 1, 2, 3, 4, 5
VOCAB, WIDTH, ROWS = 60006, 64, 2000
LAYOUT = BlockLayout(paradigm="bert", seq_len=WIDTH, block_len=WIDTH, vocab_size=VOCAB, pad_id=PAD,
                     unk_id=UNK, cls_id=CLS, sep_id=SEP, mask_id=MASK)


def make_blocks(seed: int = 3, rows: int = ROWS) -> np.ndarray:
    """FULL-SENTENCES-like blocks: [CLS] sentences of 4-12 tokens, each ended by DOT, [SEP], padding; every
    block's tokens are distinct from every other block's (a token says which block it came from)."""
    rng = np.random.default_rng(seed)
    out = np.full((rows, WIDTH), PAD, dtype=np.uint16)
    per_block = (VOCAB - 6) // rows
    for r in range(rows):
        text = []
        limit = int(rng.integers(WIDTH // 2, WIDTH - 1))
        while len(text) < limit - 1:
            length = int(rng.integers(3, 11))
            text += [int(t) for t in 6 + r * per_block + rng.integers(per_block, size=length)] + [DOT]
        text = text[: WIDTH - 2]
        out[r, 0] = CLS
        out[r, 1: 1 + len(text)] = text
        out[r, 1 + len(text)] = SEP
    return out


def block_of(token: int) -> int:
    return (int(token) - 6) // ((VOCAB - 6) // ROWS)


def unmasked(objective, rows, seed=11):
    """The pairs before masked LM (select ~0) and their labels."""
    obj = SentencePairs(LAYOUT, task=objective.name, select=1e-9, sentence_ends=(DOT,))
    out = obj(rows, np.random.default_rng(seed), corpus=rows)
    return out["input_ids"].numpy(), out["pair_labels"].numpy()


def split(row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    seps = np.flatnonzero(row == SEP)
    assert row[0] == CLS and len(seps) == 2, row
    return row[1: seps[0]], row[seps[0] + 1: seps[1]]


@pytest.fixture(scope="module")
def blocks():
    return make_blocks()


@pytest.mark.parametrize("task", ["nsp", "sop"])
def test_half_of_the_pairs_are_negatives(blocks, task):
    _, labels = unmasked(SentencePairs(LAYOUT, task=task, sentence_ends=(DOT,)), blocks)
    share = labels.mean()
    assert abs(share - 0.5) <= 5 * np.sqrt(0.25 / len(labels)), share


@pytest.mark.parametrize("task", ["nsp", "sop"])
def test_positives_are_the_block_cut_once_at_a_sentence_end(blocks, task):
    ids, labels = unmasked(SentencePairs(LAYOUT, task=task, sentence_ends=(DOT,)), blocks)
    checked = 0
    for row, label, original in zip(ids, labels, blocks):
        if label:
            continue
        a, b = split(row)
        text = original[1: np.flatnonzero(original == SEP)[0]].astype(np.int64)
        assert np.array_equal(np.concatenate([a, b]), text[: len(a) + len(b)])  # only B's tail may be cut
        assert a[-1] == DOT  # cut after a sentence end
        n = len(text)
        assert max(1, n // 4) <= len(a) <= (3 * n) // 4
        checked += 1
    assert checked > ROWS // 3


def test_sop_negatives_are_the_same_segments_swapped(blocks):
    ids, labels = unmasked(SentencePairs(LAYOUT, task="sop", sentence_ends=(DOT,)), blocks)
    for row, label, original in zip(ids, labels, blocks):
        if not label:
            continue
        first, second = split(row)  # B then A
        text = original[1: np.flatnonzero(original == SEP)[0]].astype(np.int64)
        assert np.array_equal(np.concatenate([second, first]), text[: len(first) + len(second)])
        assert second[-1] == DOT


def test_nsp_negatives_come_from_another_block_from_its_first_sentence(blocks):
    ids, labels = unmasked(SentencePairs(LAYOUT, task="nsp", sentence_ends=(DOT,)), blocks)
    others = set()
    for r, (row, label) in enumerate(zip(ids, labels)):
        a, b = split(row)
        assert {block_of(t) for t in a if t != DOT} == {r}
        if not label:
            continue
        owner = {block_of(t) for t in b if t != DOT}
        assert len(owner) == 1 and owner != {r}
        source = blocks[owner.pop()]
        assert np.array_equal(b, source[1: 1 + len(b)])
        others.add(block_of(b[0]))
    assert len(others) > ROWS // 3  # drawn over the corpus, not from a few blocks


def test_masked_lm_still_applies_and_the_loss_labels_are_kept(blocks):
    obj = SentencePairs(LAYOUT, task="sop", select=0.15, sentence_ends=(DOT,))
    out = obj(blocks, np.random.default_rng(5), corpus=blocks)
    ids, labels = out["input_ids"].numpy(), out["labels"].numpy()
    selected = labels != -100
    maskable = ~np.isin(np.where(selected, labels, ids), [CLS, SEP, PAD])
    assert abs(selected[maskable].mean() - 0.15) < 0.01
    assert not selected[np.isin(np.where(selected, labels, ids), [CLS, SEP, PAD])].any()
    assert out["pair_labels"].shape == (len(blocks),)


@pytest.mark.parametrize("task", ["nsp", "sop"])
def test_a_blocks_pair_does_not_depend_on_its_micro_batch(blocks, task):
    obj = for_paradigm(LAYOUT, objective=task, select=0.15, sentence_ends=(DOT,), rtd_weight=50.0)
    ids = np.arange(8)
    whole = make_batch(obj, blocks, ids, generators(0, 0, [0] * 8, ids))
    halves = [make_batch(obj, blocks, part, generators(0, 0, [0] * 4, part)) for part in (ids[:4], ids[4:])]
    for key in ("input_ids", "labels", "pair_labels"):
        joined = np.concatenate([h[key].numpy() for h in halves])
        assert np.array_equal(whole[key].numpy(), joined), key


def test_bad_settings_are_refused(blocks):
    with pytest.raises(ValueError, match="task"):
        SentencePairs(LAYOUT, task="nxp")
    with pytest.raises(ValueError, match="corpus"):
        SentencePairs(LAYOUT, task="nsp", sentence_ends=(DOT,))(blocks[:2], np.random.default_rng(0))

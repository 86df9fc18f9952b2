"""Derived block features catch what the token gate must reject."""

from __future__ import annotations

import numpy as np

from stages.objectives.span_corruption import corruption_lengths
from stages.quality.tokens_suite import block_features
from stages.tokenization.layout import BlockLayout

BERT = BlockLayout(paradigm="bert", seq_len=8, block_len=8, vocab_size=100, pad_id=0, unk_id=1, cls_id=2, sep_id=3,
                   mask_id=4)
T5 = BlockLayout(paradigm="t5", seq_len=32, block_len=34, vocab_size=200, pad_id=0, unk_id=2, eos_id=1,
                 sentinel_top=199, sentinels=100, targets_len=8, noise_density=0.15, mean_span=3.0)


def test_bert_features():
    blocks = np.array([
        [2, 10, 11, 12, 3, 0, 0, 0],    # good: [CLS] x [SEP] padding
        [2, 10, 4, 12, 13, 14, 15, 3],  # [MASK] from text
        [2, 10, 0, 12, 3, 0, 0, 0],     # padding inside the content
        [5, 10, 11, 12, 13, 1, 1, 99],  # no [CLS], no closing [SEP], unknowns
        [2, 10, 2, 3, 0, 0, 0, 0],      # a second [CLS]
    ], dtype=np.uint16)
    f = block_features(blocks, BERT, chunk=2)
    assert f["reserved_tokens"].tolist() == [0, 1, 2, 0, 1]  # block 2: two tokens after a pad
    assert f["first_is_cls"].tolist() == [True, True, True, False, True]
    assert f["closed_by_sep"].tolist() == [True, True, False, False, True]
    assert f["pad_fraction"].tolist() == [3 / 8, 0, 4 / 8, 0, 4 / 8]
    assert f["unk_fraction"].tolist()[3] == 2 / 8
    assert f["max_id"].tolist() == [12, 15, 12, 99, 10]


def test_t5_features_and_corruption_lengths():
    rng = np.random.default_rng(0)
    blocks = rng.integers(3, 99, size=(10, 34)).astype(np.uint16)
    blocks[3, 5] = 150  # a sentinel inside raw text
    f = block_features(blocks, T5)
    assert f["reserved_tokens"].tolist() == [0, 0, 0, 1] + [0] * 6
    lengths = corruption_lengths(blocks, T5, sample=6)
    assert len(lengths) == 6 and set(lengths["input_len"]) == {32} and set(lengths["target_len"]) == {8}


def test_the_gate_runs_the_check_its_paradigms_own_objective_declares():
    from stages.quality.tokens_suite import TokensGateConfig, tokens_suite

    rng = np.random.default_rng(1)
    t5 = {"c_train": rng.integers(3, 99, size=(10, 34)).astype(np.uint16),
          "c_heldout": rng.integers(3, 99, size=(4, 34)).astype(np.uint16)}
    tables, checks = tokens_suite(t5, T5, TokensGateConfig(corruption_sample=5))
    assert len(tables["t5_corruption"]) == 5  # training blocks only
    own = {(c.kwargs["column"], c.kwargs["value_set"][0]) for c in checks if c.table == "t5_corruption"}
    assert own == {("input_len", 32), ("target_len", 8)}
    tables, checks = tokens_suite(t5, T5, TokensGateConfig(corruption_sample=0))
    assert "t5_corruption" not in tables and all(c.table != "t5_corruption" for c in checks)
    bert = {"c_train": np.array([[2, 10, 11, 3, 0, 0, 0, 0]], dtype=np.uint16)}
    tables, checks = tokens_suite(bert, BERT, TokensGateConfig())
    assert set(tables) == {"c_train"}  # masked LM declares no check of its own

"""The T5 paradigm's other encoder-decoder objectives: the prefix LM (Raffel et al. 2020, 3.3.1; UL2's
S-denoiser), the UL2-style mixture with span corruption, the T5 paper's "BERT-style" reconstruction and BART's
text infilling with sentence permutation (Lewis et al. 2020)."""

from __future__ import annotations

import numpy as np
import pytest

from stages.objectives import for_paradigm
from stages.objectives.denoisers import (PREFIX_TARGETS, UL2, PrefixLM, Reconstruct, TextInfilling, prefix_split,
                                        sentence_end_ids)
from stages.objectives.span_corruption import SpanCorruption
from stages.tokenization.layout import BlockLayout

TOP, EOS, PAD = 8191, 1, 0
T5 = BlockLayout(paradigm="t5", seq_len=128, block_len=141, vocab_size=8192, pad_id=PAD, unk_id=2, eos_id=EOS,
                 sentinel_top=TOP, sentinels=100, targets_len=29, noise_density=0.15, mean_span=3.0)


def blocks(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(3, TOP - 100, size=(n, T5.block_len))


def test_prefix_split_keeps_every_token_in_order_and_cuts_uniformly():
    rng = np.random.default_rng(0)
    block = np.arange(10, 10 + T5.block_len)
    cuts = []
    for _ in range(3000):
        inp, tgt = prefix_split(block, seq_len=128, targets=PREFIX_TARGETS, eos_id=EOS, rng=rng)
        assert inp[-1] == EOS and tgt[-1] == EOS
        assert np.array_equal(np.concatenate((inp[:-1], tgt[:-1])), block)  # nothing lost, nothing repeated
        assert len(inp) <= 128 and len(tgt) <= PREFIX_TARGETS
        cuts.append(len(inp) - 1)
    lo, hi = T5.block_len - PREFIX_TARGETS + 1, 127
    assert min(cuts) == lo and max(cuts) == hi  # every allowed cut is reachable
    counts = np.bincount(np.asarray(cuts) - lo)
    expected = 3000 / (hi - lo + 1)
    assert counts.min() > expected * 0.5 and counts.max() < expected * 1.6  # roughly uniform


def test_prefix_lm_batch_is_padded_with_ignored_labels_and_a_zero_mask():
    out = PrefixLM(T5)(blocks(8), np.random.default_rng(1))
    assert out["input_ids"].shape == (8, 128) and out["labels"].shape == (8, PREFIX_TARGETS)
    for row in range(8):
        n_in = int(out["attention_mask"][row].sum())
        assert out["attention_mask"][row, :n_in].all() and not out["attention_mask"][row, n_in:].any()
        assert (out["input_ids"][row, n_in:] == PAD).all() and out["input_ids"][row, n_in - 1] == EOS
        n_tg = int((out["labels"][row] != -100).sum())
        assert (out["labels"][row, n_tg:] == -100).all() and out["labels"][row, n_tg - 1] == EOS
        assert (n_in - 1) + (n_tg - 1) == T5.block_len


def test_ul2_mixes_span_corruption_and_prefix_lm_about_half_and_half():
    rows = blocks(400)
    out = UL2(T5)(rows, np.random.default_rng(2))
    targets = (out["labels"] != -100).sum(1).numpy()
    inputs = out["attention_mask"].sum(1).numpy()
    span = (inputs == 128) & (targets == T5.targets_len)  # span corruption fills the encoder exactly
    assert 0.4 < span.mean() < 0.6
    # a span-corrupted row is exactly what SpanCorruption makes (sentinels counting down from the top)
    labels = out["labels"][span][0]
    assert labels[0] == TOP and (labels[:T5.targets_len] != -100).all()
    assert out["labels"].shape[1] == max(PREFIX_TARGETS, T5.targets_len)


def test_reconstruct_corrupts_about_15_percent_and_targets_the_whole_block():
    rows = blocks(200)
    out = Reconstruct(T5)(rows, np.random.default_rng(3))
    text = rows[:, :127]
    assert np.array_equal(out["labels"][:, :127].numpy(), text) and (out["labels"][:, 127] == EOS).all()
    changed = out["input_ids"][:, :127].numpy() != text
    masked = out["input_ids"][:, :127].numpy() == TOP
    assert 0.13 < changed.mean() < 0.16  # 15% picked; a random swap can hit the same id (rarely)
    assert 0.85 < masked.sum() / changed.sum() < 0.95  # 90% of the picked ones become the mask sentinel
    swapped = out["input_ids"][:, :127].numpy()[changed & ~masked]
    assert (swapped >= 3).all() and (swapped <= TOP - 100).all()  # random ids never special or sentinels


def test_bart_infilling_masks_30_percent_in_poisson_3_spans_and_targets_the_original():
    import copy

    rows = np.stack([np.arange(10, 10 + T5.block_len) + 141 * k for k in range(50)])  # distinct ids, none a mask
    bart = TextInfilling(T5)
    rng = np.random.default_rng(0)
    for row in rows:
        spans = bart.span_lengths(round(0.3 * 127), copy.deepcopy(rng))  # what pair() is about to draw
        inputs, target = bart.pair(row, rng)
        text = row[:127]
        assert np.array_equal(target, np.concatenate((text, [EOS])))  # the decoder rebuilds the original
        assert inputs[-1] == EOS and len(inputs) <= 128
        kept = inputs[:-1][inputs[:-1] != TOP]
        assert len(text) - len(kept) == round(0.3 * 127)  # exactly 30% of the tokens masked, every block
        assert np.all(np.diff(np.searchsorted(text, kept)) > 0)  # the rest kept, in order
        assert int((inputs == TOP).sum()) == len(spans)  # one mask per span, zero-length spans included
    draws = [TextInfilling(T5).span_lengths(10_000, np.random.default_rng(s))[:-1] for s in range(3)]
    lengths = np.concatenate(draws)  # Poisson(3) (the last of each draw, cut to fit, left out)
    assert abs(lengths.mean() - 3) < 0.05 and abs((lengths == 0).mean() - np.exp(-3)) < 0.01
    assert abs(lengths.var() - 3) < 0.15
    out = bart(rows[:4], np.random.default_rng(1))
    assert out["input_ids"].shape == (4, 128) and out["labels"].shape == (4, 128)


def test_bart_permutes_whole_sentences_cut_after_full_stops():
    stop = 7
    text = np.arange(100, 227)
    text[[5, 17, 18, 40, 41, 42, 90, 120]] = stop  # sentences end after these (one of one token, the last unfinished)
    block = np.concatenate((text, np.full(T5.block_len - 127, 99)))
    bart = TextInfilling(T5, sentence_ends=[stop], mask_ratio=0.0)
    sentences = np.split(text, np.flatnonzero(text == stop) + 1)
    orders = set()
    rng = np.random.default_rng(0)
    for _ in range(50):
        inputs, target = bart.pair(block, rng)
        assert np.array_equal(target[:-1], text) and inputs[-1] == EOS
        shuffled, left, order = inputs[:-1], list(range(len(sentences))), []
        while len(shuffled):  # the input is the text's whole sentences, each once, in some order
            k = next(k for k in left if np.array_equal(shuffled[: len(sentences[k])], sentences[k]))
            left.remove(k)
            order.append(k)
            shuffled = shuffled[len(sentences[k]):]
        assert not left
        orders.add(tuple(order))
    assert len(orders) > 40  # shuffled anew each time (9 sentences: 362,880 orders)


def test_bart_sentence_ends_come_from_the_tokenizer():
    import json

    vocab = [["<pad>", 0.0], ["</s>", 0.0], ["\u2581end.", -1.0], ["?", -2.0], ["\u2581word", -3.0], ["!", -4.0],
             ["e.g", -5.0]]
    assert sentence_end_ids(json.dumps({"model": {"type": "Unigram", "vocab": vocab}})) == (2, 3, 5)
    wordpiece = {"[PAD]": 0, ".": 1, "##s": 2, "##.": 3, "a": 4}
    assert sentence_end_ids(json.dumps({"model": {"type": "WordPiece", "vocab": wordpiece}})) == (1, 3)


@pytest.mark.parametrize("name,cls", [("span_corruption", SpanCorruption), ("prefix_lm", PrefixLM), ("ul2", UL2),
                                      ("reconstruct", Reconstruct), ("bart", TextInfilling)])
def test_for_paradigm_picks_the_t5_objective(name, cls):
    assert isinstance(for_paradigm(T5, objective=name), cls)


def test_an_unknown_t5_objective_is_named():
    with pytest.raises(ValueError, match="objective: .*'mlm'"):
        for_paradigm(T5, objective="mlm")


def test_the_same_generator_gives_the_same_batch():
    rows = blocks(16)
    a = UL2(T5)(rows, np.random.default_rng(5))
    b = UL2(T5)(rows, np.random.default_rng(5))
    assert all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)


def test_the_train_config_chooses_t5s_objective_and_no_other_paradigms():
    from stages.objectives import get
    from stages.training.config import TrainConfig

    assert get("t5", TrainConfig(objective="ul2").objective).name == "ul2"
    assert get("t5", TrainConfig().objective).name == "span_corruption" and get("t5").settings(TrainConfig()) == {}
    assert get("bert").settings(TrainConfig(mlm_select=0.3)) == {"select": 0.3}
    assert get("bert", "electra").settings(TrainConfig(rtd_weight=20.0))["rtd_weight"] == 20.0
    with pytest.raises(ValueError, match="objective: 'ul2' is not one of gpt's"):
        get("gpt", "ul2")
    with pytest.raises(ValueError, match="objective: 'ul2' is not one of bert's objectives"):
        get("bert", "ul2")
    with pytest.raises(ValueError, match="objective: 'electra' is not one of t5's objectives"):
        get("t5", "electra")
    with pytest.raises(ValueError, match="objective: one of"):
        TrainConfig(objective="replaced_tokens")

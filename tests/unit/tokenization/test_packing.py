"""Block packing per paradigm: nothing lost or reordered, the right structure in every block."""

from __future__ import annotations

import numpy as np

from stages.tokenization.packing import CausalPacker, SentencePacker, flatten

CLS, SEP, PAD, DOT = 2, 3, 0, 9


def docs_of(rng, n, lo=1, hi=60):
    """Documents of random ids (>= 10), some with sentence ends (DOT)."""
    out = []
    for _ in range(n):
        d = rng.integers(10, 500, size=int(rng.integers(lo, hi))).tolist()
        for i in range(4, len(d), 7):
            d[i] = DOT
        out.append(d)
    return out


def test_flatten_appends_separator():
    flat, ends = flatten([[5, 6], [7]], np.uint16, append=0)
    assert flat.tolist() == [5, 6, 0, 7, 0] and ends.tolist() == [3, 5]


def test_causal_blocks_are_the_joined_stream():
    rng = np.random.default_rng(0)
    docs = docs_of(rng, 40)
    packer = CausalPacker(seq_len=16, eot_id=1, dtype=np.uint16)
    rows = [packer.pack(docs[i:i + 7]) for i in range(0, len(docs), 7)]
    blocks = np.concatenate([r for r in rows if len(r)])
    stream = [t for d in docs for t in d + [1]]
    assert blocks.shape[1] == 16
    assert blocks.reshape(-1).tolist() == stream[: len(blocks) * 16]
    assert packer.dropped_tokens == len(stream) - len(blocks) * 16 < 16


def content_of(block):
    assert block[0] == CLS
    body = block[1:].tolist()
    while body and body[-1] == PAD:
        body.pop()
    assert body[-1] == SEP
    return body[:-1]


def test_sentence_packer_keeps_whole_sentences_and_every_token():
    rng = np.random.default_rng(0)
    docs = docs_of(rng, 60)
    packer = SentencePacker(seq_len=24, cls_id=CLS, sep_id=SEP, pad_id=PAD, sentence_end_ids=[DOT], dtype=np.uint16)
    rows = [packer.pack(docs[i:i + 9]) for i in range(0, len(docs), 9)] + [packer.flush()]
    blocks = np.concatenate([r for r in rows if len(r)])
    assert blocks.shape[1] == 24
    contents = [content_of(b) for b in blocks]
    # every document token comes out once and in order; [SEP] only between documents
    assert [t for c in contents for t in c if t != SEP] == [t for d in docs for t in d]
    # a block that is not full ends at a sentence or document end
    stream = [t for d in docs for t in d]
    boundaries = set(np.cumsum([len(d) for d in docs]).tolist()) | {i + 1 for i, t in enumerate(stream) if t == DOT}
    done = 0
    for c in contents:
        assert len(c) <= 22
        done += sum(1 for t in c if t != SEP)
        if len(c) < 22:
            assert done in boundaries
    assert packer.dropped_tokens == 0


def test_sentence_packer_separates_documents_and_cuts_long_sentences():
    packer = SentencePacker(seq_len=8, cls_id=CLS, sep_id=SEP, pad_id=PAD, sentence_end_ids=[DOT], dtype=np.uint16)
    out = np.concatenate([packer.pack([[11, DOT], [12, 13, DOT], list(range(20, 33))]), packer.flush()])
    rows = out.tolist()
    assert rows[0] == [CLS, 11, DOT, SEP, 12, 13, DOT, SEP]   # documents joined by [SEP]; no [SEP][SEP] at the end
    assert rows[1] == [CLS, 20, 21, 22, 23, 24, 25, SEP]      # a 13-token sentence is cut at the block size
    assert rows[2] == [CLS, 26, 27, 28, 29, 30, 31, SEP]
    assert rows[3] == [CLS, 32, SEP, PAD, PAD, PAD, PAD, PAD]  # the last partial block is kept, padded


def test_sentence_packer_moves_a_sentence_that_does_not_fit():
    packer = SentencePacker(seq_len=8, cls_id=CLS, sep_id=SEP, pad_id=PAD, sentence_end_ids=[DOT], dtype=np.uint16)
    out = np.concatenate([packer.pack([[11, 12, 13, DOT, 14, 15, DOT]]), packer.flush()]).tolist()
    assert out == [[CLS, 11, 12, 13, DOT, SEP, PAD, PAD], [CLS, 14, 15, DOT, SEP, PAD, PAD, PAD]]

"""Encoder-decoder objectives beside span corruption for the T5 paradigm (``pretrain.t5.train.objective``):
``prefix_lm`` (Raffel et al. 2020, 3.3.1; UL2's S-denoiser), ``ul2`` (span corruption or prefix LM, half and
half; benchmarks/transfer.md), ``reconstruct`` (the T5 paper's "BERT-style" objective) and ``bart`` (BART's text
infilling and sentence permutation, Lewis et al. 2020). Inputs are ``seq_len`` and labels one fixed width
(padding: -100 in the labels, 0 in the attention mask), so blocks of different kinds share a batch.
"""

from __future__ import annotations

import numpy as np

from stages.objectives import Builder, Objective, pad, tensors
from stages.objectives.span_corruption import corrupt

# Decoder width of the prefix LM and of the mixture: the continuation is 15-63 tokens + </s>.
PREFIX_TARGETS = 64


def prefix_split(block: np.ndarray, *, seq_len: int, targets: int, eos_id: int, rng: np.random.Generator):
    """(encoder input, target) of one raw block cut at a uniform point: the prefix keeps at least
    ``len(block) - targets + 1`` tokens (so the continuation and its ``</s>`` fit in ``targets``) and at most
    ``seq_len - 1`` (so the prefix and its ``</s>`` fit in ``seq_len``)."""
    lo = max(1, len(block) - targets + 1)
    hi = min(seq_len - 1, len(block) - 1)
    cut = int(rng.integers(lo, hi + 1))
    return (np.concatenate((block[:cut], [eos_id])), np.concatenate((block[cut:], [eos_id])))


class _Denoiser(Builder):
    """Shared batching: each block's ``pair`` (input, target) padded to the fixed widths and stacked."""

    batched = False  # ``make_batch`` calls it block by block, each with the block's own generator

    def __init__(self, layout, targets: int) -> None:
        super().__init__(layout)
        self.targets_len = targets

    def pair(self, block: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def __call__(self, rows: np.ndarray, rng: np.random.Generator) -> dict:
        lay = self.layout
        pairs = [self.pair(np.asarray(r, dtype=np.int64), rng) for r in rows]
        inputs = np.stack([pad(p[0], lay.seq_len, lay.pad_id) for p in pairs])
        labels = np.stack([pad(p[1], self.targets_len, -100) for p in pairs])
        mask = np.stack([pad(np.ones(len(p[0]), dtype=np.int64), lay.seq_len, 0) for p in pairs])
        return tensors(input_ids=inputs, attention_mask=mask, labels=labels)


class PrefixLM(_Denoiser):
    name = "prefix_lm"

    def __init__(self, layout) -> None:
        super().__init__(layout, PREFIX_TARGETS)

    def pair(self, block, rng):
        lay = self.layout
        return prefix_split(block, seq_len=lay.seq_len, targets=self.targets_len, eos_id=lay.eos_id, rng=rng)


class UL2(_Denoiser):
    """Half span corruption (R), half prefix LM (S), drawn per block from the block's own generator."""

    name = "ul2"

    def __init__(self, layout, prefix_share: float = 0.5) -> None:
        super().__init__(layout, max(PREFIX_TARGETS, layout.targets_len))
        self.prefix_share = prefix_share

    def pair(self, block, rng):
        lay = self.layout
        if rng.random() < self.prefix_share:
            return prefix_split(block, seq_len=lay.seq_len, targets=PREFIX_TARGETS, eos_id=lay.eos_id, rng=rng)
        return corrupt(block, sentinel_top=lay.sentinel_top, eos_id=lay.eos_id, noise_density=lay.noise_density,
                       mean_span=lay.mean_span, rng=rng)


class Reconstruct(_Denoiser):
    """T5's "BERT-style" objective: i.i.d. corruption of ``noise_density`` of the tokens, full target."""

    name = "reconstruct"

    def __init__(self, layout) -> None:
        super().__init__(layout, layout.seq_len)

    def pair(self, block, rng):
        lay = self.layout
        text = block[: lay.seq_len - 1]
        picked = rng.random(len(text)) < lay.noise_density
        roll = rng.random(len(text))
        noisy = text.copy()
        noisy[picked & (roll < 0.9)] = lay.sentinel_top
        swap = picked & (roll >= 0.9)
        # random replacements from the ordinary vocabulary (below the sentinels; pad, </s>, unk are 0-2)
        noisy[swap] = rng.integers(3, lay.sentinel_top - lay.sentinels + 1, int(swap.sum()))
        return np.concatenate((noisy, [lay.eos_id])), np.concatenate((text, [lay.eos_id]))


# A piece ends a sentence (BART: "based on full stops") when, without word-boundary marks, it ends in one of these.
SENTENCE_END = (".", "!", "?")


def sentence_end_ids(tokenizer_json: str) -> tuple[int, ...]:
    """The ids of a tokenizer's pieces that end a sentence (``SENTENCE_END``), from its JSON."""
    import json

    model = json.loads(tokenizer_json)["model"]
    vocab = model["vocab"]
    pieces = [(v[0], i) for i, v in enumerate(vocab)] if isinstance(vocab, list) else list(vocab.items())
    return tuple(sorted(i for piece, i in pieces if piece.strip("\u2581\u0120# ").endswith(SENTENCE_END)))


class TextInfilling(_Denoiser):
    """BART's text infilling and sentence permutation (Lewis et al. 2020): the sentences (cut after each of
    ``sentence_ends``) shuffled, then ``mask_ratio`` of the tokens masked in Poisson-length spans, each span at a
    uniform gap between kept tokens and replaced by one mask token. Target: the original block and ``</s>``."""

    name = "bart"

    def __init__(self, layout, *, sentence_ends=(), mask_ratio: float = 0.3, poisson_lambda: float = 3.0) -> None:
        super().__init__(layout, layout.seq_len)
        self.sentence_ends = np.asarray(sorted(sentence_ends), dtype=np.int64)
        self.mask_ratio = mask_ratio
        self.poisson_lambda = poisson_lambda

    def permute(self, text: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if not len(self.sentence_ends):
            return text
        ends = np.flatnonzero(np.isin(text, self.sentence_ends)) + 1
        sentences = np.split(text, ends[ends < len(text)])
        return np.concatenate([sentences[i] for i in rng.permutation(len(sentences))])

    def span_lengths(self, total: int, rng: np.random.Generator) -> np.ndarray:
        """Poisson lengths summing to exactly ``total`` (the last cut to fit)."""
        lengths, covered = [], 0
        while covered < total:
            n = int(rng.poisson(self.poisson_lambda))
            lengths.append(min(n, total - covered))
            covered += lengths[-1]
        return np.asarray(lengths, dtype=np.int64)

    def pair(self, block, rng):
        lay = self.layout
        text = block[: lay.seq_len - 1]
        noisy = self.permute(text, rng)
        lengths = self.span_lengths(int(round(self.mask_ratio * len(noisy))), rng)
        kept = len(noisy) - int(lengths.sum())
        gaps = np.sort(rng.integers(0, kept + 1, len(lengths)))  # span k sits before kept token gaps[k]
        starts = gaps + np.concatenate(([0], np.cumsum(lengths)[:-1]))  # where it starts in the noisy text
        out, pos = [], 0
        for start, length in zip(starts, lengths):
            out.append(noisy[pos:start])
            out.append(np.asarray([lay.sentinel_top], dtype=noisy.dtype))
            pos = start + length
        out.append(noisy[pos:])
        inputs = np.concatenate(out)[: lay.seq_len - 1]
        return np.concatenate((inputs, [lay.eos_id])), np.concatenate((text, [lay.eos_id]))


OBJECTIVES = tuple(
    Objective(name=cls.name, paradigm="t5", builder=cls, sentence_ends=cls is TextInfilling,
              card=lambda select, generator_size, words=words: words)
    for cls, words in ((UL2, "UL2 mixture (span corruption and prefix LM)"), (PrefixLM, "prefix language modelling"),
                       (Reconstruct, "BERT-style corruption, whole block rebuilt"),
                       (TextInfilling, "BART denoising (text infilling and sentence permutation)")))

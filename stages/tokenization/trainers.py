"""One tokenizer per paradigm with Hugging Face ``tokenizers``, built as the seed papers did: BERT's uncased WordPiece
(``[PAD] [UNK] [CLS] [SEP] [MASK]`` = ids 0-4), GPT-2's byte-level BPE (``<|endoftext|>`` = 0) and T5's
SentencePiece-style Unigram (pad 0, eos 1, unk 2, sentinels on top). ``save`` writes what ``AutoTokenizer`` loads."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Literal

from stages.config import check

PARADIGMS = ("bert", "gpt", "t5")

BERT_SPECIALS = {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]",
                 "mask_token": "[MASK]"}
GPT_EOT = "<|endoftext|>"
T5_SPECIALS = {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}


def sentinel(i: int) -> str:
    """The i-th T5 sentinel token, ``<extra_id_i>``."""
    return f"<extra_id_{i}>"


@dataclass(frozen=True, kw_only=True)
class TokenizerConfig:
    """One paradigm's tokenizer, trained on the train split of the cleaned general and domain corpora."""

    kind: Literal["wordpiece", "byte_bpe", "unigram"]
    """Tokenizer model: `wordpiece` (BERT), `byte_bpe` (GPT-2) or `unigram` (T5, SentencePiece-style)."""
    vocab_size: int
    """Size of the whole vocabulary, special tokens and T5's sentinels included; a small corpus may stop short of it."""
    min_frequency: int = 2
    """Times a word or merge must occur in the training text to enter the vocabulary (WordPiece, BPE)."""
    lowercase: bool = True
    """Lower-case and strip accents before WordPiece (BERT uncased); ignored by the others."""
    sentinels: int = 100
    """Number of `<extra_id_N>` tokens at the top of the vocabulary (T5 only), 0..1000."""
    max_piece_length: int = 16
    """Longest Unigram piece, in characters (T5 only)."""
    max_train_chars: int = 0
    """Train on at most this many characters of the training split; 0 = all."""
    model_max_length: int = 512
    """Longest input, in tokens, the saved tokenizer reports (`tokenizer.model_max_length`)."""
    batch_docs: int = 1000
    """Documents handed to the trainer per batch."""

    def __post_init__(self) -> None:
        reserved = 5 if self.kind == "wordpiece" else 1 if self.kind == "byte_bpe" else 3 + self.sentinels
        floor = reserved + (256 if self.kind == "byte_bpe" else 100)
        check(self.vocab_size >= floor, f"vocab_size: must be at least {floor} for {self.kind}")
        check(self.vocab_size <= 2**31 - 1, "vocab_size: too large")
        check(self.min_frequency >= 1, "min_frequency: must be >= 1")
        check(0 <= self.sentinels <= 1000, "sentinels: must be in [0, 1000]")
        check(self.max_piece_length >= 1, "max_piece_length: must be >= 1")
        check(self.max_train_chars >= 0, "max_train_chars: must be >= 0 (0 = no limit)")
        check(self.batch_docs >= 1, "batch_docs: must be >= 1")
        check(self.model_max_length >= 1, "model_max_length: must be >= 1")


def build(cfg: TokenizerConfig, continuations: Iterable[str] = ()):
    """An untrained ``tokenizers.Tokenizer`` with this paradigm's pipeline, and its trainer. ``continuations``
    (WordPiece): characters inside words, whose ``##`` forms are registered in sorted order for run-independent ids."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    if cfg.kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token=BERT_SPECIALS["unk_token"], continuing_subword_prefix="##"))
        tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                    strip_accents=cfg.lowercase, lowercase=cfg.lowercase)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece(prefix="##")
        trainer = trainers.WordPieceTrainer(vocab_size=cfg.vocab_size, min_frequency=cfg.min_frequency,
                                            special_tokens=list(BERT_SPECIALS.values())
                                            + [f"##{c}" for c in sorted(set(continuations))],
                                            continuing_subword_prefix="##", show_progress=False)
    elif cfg.kind == "byte_bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=cfg.vocab_size, min_frequency=cfg.min_frequency,
                                      special_tokens=[GPT_EOT], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
    else:
        tok = Tokenizer(models.Unigram())
        # SentencePiece's nmt_nfkc rule plus whitespace runs collapsed, as T5's vocabulary was built.
        tok.normalizer = normalizers.Sequence([normalizers.Nmt(), normalizers.NFKC(),
                                               normalizers.Replace(Regex(" {2,}"), " ")])
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
        trainer = trainers.UnigramTrainer(vocab_size=cfg.vocab_size - cfg.sentinels,
                                          special_tokens=list(T5_SPECIALS.values()),
                                          unk_token=T5_SPECIALS["unk_token"], max_piece_length=cfg.max_piece_length,
                                          show_progress=False)
    return tok, trainer


def canonical(tok, cfg: TokenizerConfig):
    """The trained tokenizer with a run-independent vocabulary (``tokenizers`` numbers pieces in hash-map order):
    WordPiece numbers characters, then longer pieces, sorted; Unigram sorts its pieces, scores rounded to 1e-8."""
    import json

    from tokenizers import Tokenizer

    if cfg.kind == "byte_bpe":
        return tok  # BPE training is deterministic; its ids also fix the merge order
    data = json.loads(tok.to_str())
    model = data["model"]
    if cfg.kind == "wordpiece":
        specials = len(BERT_SPECIALS)
        data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] in BERT_SPECIALS.values()]
        ordered = sorted(model["vocab"], key=model["vocab"].get)
        rest = sorted(ordered[specials:], key=lambda t: (len(t.removeprefix("##")) != 1, t))  # characters first
        model["vocab"] = {t: i for i, t in enumerate(ordered[:specials] + rest)}
    else:
        specials = len(T5_SPECIALS)
        pieces = sorted((p, round(s, 8)) for p, s in model["vocab"][specials:])
        pieces = _untie_rare_characters(pieces)
        model["vocab"] = model["vocab"][:specials] + [list(ps) for ps in pieces]
    return Tokenizer.from_str(json.dumps(data))


def _untie_rare_characters(pieces: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """Unigram adds rare characters with scores 1e-4 apart in hash-map order: hand each such run of scores
    out to its characters in sorted order (the highest to the first), so the file is run-independent."""
    values = sorted({s for p, s in pieces if len(p) == 1})
    chain_of, chain = {}, 0
    for i, v in enumerate(values):
        chain += bool(i and abs(v - values[i - 1] - 1e-4) > 5e-7)
        chain_of[v] = chain
    sizes = Counter(chain_of.values())
    members: dict[int, list[tuple[str, float]]] = defaultdict(list)
    for p, s in pieces:
        if len(p) == 1 and sizes[chain_of[s]] > 1:
            members[chain_of[s]].append((p, s))
    scores = {}
    for group in members.values():
        scores.update(zip(sorted(p for p, _ in group), sorted((s for _, s in group), reverse=True)))
    return [(p, scores.get(p, s)) for p, s in pieces]


def _finish(tok, cfg: TokenizerConfig) -> None:
    """Post-processing (and T5's sentinels) once the vocabulary exists, since templates need token ids."""
    from tokenizers import processors

    if cfg.kind == "wordpiece":
        cls_, sep = BERT_SPECIALS["cls_token"], BERT_SPECIALS["sep_token"]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{cls_}:0 $A:0 {sep}:0", pair=f"{cls_}:0 $A:0 {sep}:0 $B:1 {sep}:1",
            special_tokens=[(cls_, tok.token_to_id(cls_)), (sep, tok.token_to_id(sep))])
    elif cfg.kind == "byte_bpe":
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    else:
        eos = T5_SPECIALS["eos_token"]
        tok.post_processor = processors.TemplateProcessing(
            single=f"$A:0 {eos}:0", pair=f"$A:0 {eos}:0 $B:0 {eos}:0", special_tokens=[(eos, tok.token_to_id(eos))])
        # Added in reverse so that <extra_id_0> gets the highest id, as in T5.
        from tokenizers import AddedToken

        tok.add_special_tokens([AddedToken(sentinel(i), special=True, normalized=False)
                                for i in reversed(range(cfg.sentinels))])


def batches(texts: Iterable[str], size: int) -> Iterator[list[str]]:
    """``texts`` in lists of ``size``."""
    it = iter(texts)
    while batch := list(islice(it, size)):
        yield batch


def capped(texts: Iterable[str], max_chars: int) -> Iterator[str]:
    """``texts`` up to ``max_chars`` characters in all (0 = no cap); the last document is cut, not skipped."""
    budget = max_chars
    for text in texts:
        if max_chars:
            if budget <= 0:
                return
            text = text[:budget]
            budget -= len(text)
        yield text


def continuation_chars(tok, texts: Iterable[str]) -> set[str]:
    """Characters that follow another inside a pre-tokenized word, after normalisation."""
    return {c for text in texts for word, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(text))
            for c in word[1:]}


def train(texts: Callable[[], Iterable[str]] | Sequence[str], cfg: TokenizerConfig):
    """A finished ``tokenizers.Tokenizer``; ``texts``: a list or a function returning a fresh iterator (WordPiece
    reads the text twice)."""
    def stream() -> Iterator[str]:
        return capped(texts() if callable(texts) else texts, cfg.max_train_chars)

    tok, trainer = build(cfg)
    if cfg.kind == "wordpiece":
        tok, trainer = build(cfg, continuation_chars(tok, stream()))
    tok.train_from_iterator(batches(stream(), cfg.batch_docs), trainer=trainer)
    tok = canonical(tok, cfg)
    _finish(tok, cfg)
    return tok


def special_tokens(cfg: TokenizerConfig) -> dict[str, object]:
    """The ``PreTrainedTokenizerFast`` keyword arguments naming this paradigm's special tokens."""
    if cfg.kind == "wordpiece":
        return dict(BERT_SPECIALS)
    if cfg.kind == "byte_bpe":
        # GPT-2 has no pad token; ours pads with <|endoftext|> (masked out of losses), as fine-tuning needs one.
        return {"bos_token": GPT_EOT, "eos_token": GPT_EOT, "pad_token": GPT_EOT}
    return {**T5_SPECIALS, "extra_special_tokens": [sentinel(i) for i in range(cfg.sentinels)]}


def save(tok, cfg: TokenizerConfig, out_dir: Path) -> None:
    """Write the tokenizer so that ``AutoTokenizer.from_pretrained(out_dir)`` loads it as-is."""
    from transformers import PreTrainedTokenizerFast

    PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=cfg.model_max_length, padding_side="right",
                            clean_up_tokenization_spaces=False, **special_tokens(cfg)).save_pretrained(str(out_dir))

"""The tokenizer stage's core: train one paradigm's tokenizer on the train side of the split, check that the saved
files load back, and measure fertility, unknown rate and vocabulary use on held-out text."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from stages.common.atomic import write_json_atomic
from stages.config import build, load_params, section
from stages.sources.base import sha256_file
from stages.tokenization.corpus import texts_of
from stages.tokenization.split import SplitConfig
from stages.tokenization.trainers import TokenizerConfig, capped, save, sentinel, special_tokens, train


class TokenizerCheckFailed(RuntimeError):
    """The saved tokenizer does not load back with the special tokens and post-processing it must have."""


@dataclass
class Measured:
    docs: int = 0
    words: int = 0
    tokens: int = 0
    unknown: int = 0

    def as_dict(self, vocab_used: int, vocab_size: int) -> dict:
        return {"docs": self.docs, "words": self.words, "tokens": self.tokens,
                "fertility": round(self.tokens / self.words, 4) if self.words else None,
                "unknown_rate": round(self.unknown / self.tokens, 6) if self.tokens else None,
                "vocab_used": vocab_used, "vocab_used_fraction": round(vocab_used / vocab_size, 4)}


def measure(tok, texts: Iterable[str], *, unk_token: str | None, batch_docs: int = 1000) -> dict:
    """Fertility, unknown rate and vocabulary use of ``tok`` (a ``tokenizers.Tokenizer``) on ``texts``."""
    import numpy as np

    unk_id = tok.token_to_id(unk_token) if unk_token else None
    seen = np.zeros(tok.get_vocab_size(), dtype=bool)
    m = Measured()
    batch: list[str] = []

    def flush() -> None:
        for enc in tok.encode_batch_fast(batch, add_special_tokens=False):
            ids = np.asarray(enc.ids, dtype=np.int64)
            seen[ids] = True
            m.tokens += len(ids)
            if unk_id is not None:
                m.unknown += int((ids == unk_id).sum())
        m.words += sum(len(t.split()) for t in batch)
        m.docs += len(batch)
        batch.clear()

    for text in texts:
        batch.append(text)
        if len(batch) >= batch_docs:
            flush()
    if batch:
        flush()
    return m.as_dict(int(seen.sum()), tok.get_vocab_size())


def check_saved(out_dir: Path, cfg: TokenizerConfig) -> None:
    """Reload with ``AutoTokenizer`` and check the contract the training stages rely on."""
    from transformers import AutoTokenizer

    t = AutoTokenizer.from_pretrained(str(out_dir))
    problems = []
    if not t.is_fast:
        problems.append("not a fast tokenizer")
    ids = t("a b")["input_ids"]
    if cfg.kind == "wordpiece":
        want = {"pad_token_id": 0, "unk_token_id": 1, "cls_token_id": 2, "sep_token_id": 3, "mask_token_id": 4}
        if ids[0] != t.cls_token_id or ids[-1] != t.sep_token_id:
            problems.append("encoding does not add [CLS] ... [SEP]")
    elif cfg.kind == "byte_bpe":
        want = {"eos_token_id": 0, "bos_token_id": 0, "pad_token_id": 0}
        if t.unk_token_id is not None:
            problems.append("a byte-level BPE must have no unknown token")
    else:
        want = {"pad_token_id": 0, "eos_token_id": 1, "unk_token_id": 2}
        if ids[-1] != t.eos_token_id:
            problems.append("encoding does not append </s>")
        if cfg.sentinels:
            top = t.convert_tokens_to_ids(sentinel(0))
            if top != len(t) - 1 or t.convert_tokens_to_ids(sentinel(cfg.sentinels - 1)) != len(t) - cfg.sentinels:
                problems.append("sentinels are not at the top of the vocabulary")
    for attr, value in want.items():
        if getattr(t, attr) != value:
            problems.append(f"{attr} is {getattr(t, attr)}, expected {value}")
    if problems:
        raise TokenizerCheckFailed(f"the saved {cfg.kind} tokenizer does not reload as trained: " + "; ".join(problems))


def train_tokenizer(cfg: TokenizerConfig, split: SplitConfig, *, paradigm: str, train_path: Path | list[Path],
                    eval_paths: dict[str, Path], out: Path, log=print) -> dict:
    """Train on the train split of one or more corpora (read in the order given), save into the folder ``out``,
    check that it reloads as trained (raises :class:`TokenizerCheckFailed`) and measure; returns the metrics. A tokenizer that will read domain text
    should be trained on it too, or domain words are shredded into pieces (Gururangan et al. 2020 §6)."""
    from tokenizers import Tokenizer


    train_paths = [train_path] if isinstance(train_path, Path) else list(train_path)
    chars = [0]
    docs = [0]

    def all_texts():
        for path in train_paths:
            yield from texts_of(path, split, "train", batch_docs=cfg.batch_docs)

    def training_texts():  # counted as the trainer consumes them (the last pass counts)
        docs[0] = chars[0] = 0
        for text in capped(all_texts(), cfg.max_train_chars):
            docs[0] += 1
            chars[0] += len(text)
            yield text

    start = time.perf_counter()
    tok = train(training_texts, cfg)
    seconds = time.perf_counter() - start
    mb = chars[0] / 1e6  # characters, the unit the corpus stages report
    log(f"[tokenizer] {paradigm}: {cfg.kind} trained on {docs[0]} documents, {mb:.1f} M chars in {seconds:.1f}s; "
        f"vocabulary {tok.get_vocab_size()}")
    save(tok, cfg, out, model_max_length=cfg.model_max_length)
    check_saved(out, cfg)
    provenance = {"paradigm": paradigm, "config": asdict(cfg), "split": asdict(split),
                  "train": {"paths": [{"path": str(p), "sha256": sha256_file(p)} for p in train_paths],
                            "documents": docs[0], "characters": chars[0]}}
    write_json_atomic(out / "provenance.json", provenance)
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    tok.encode_special_tokens = True  # measure text as text: a literal "[MASK]" in a page is not the mask token
    unk = special_tokens(cfg).get("unk_token")
    heldout = {name: measure(tok, texts_of(path, split, "heldout", batch_docs=cfg.batch_docs), unk_token=unk,
                             batch_docs=cfg.batch_docs) for name, path in eval_paths.items()}
    for name, m in heldout.items():
        log(f"[tokenizer] {paradigm}: held-out {name}: fertility {m['fertility']}, unknown rate {m['unknown_rate']}, "
            f"vocabulary used {m['vocab_used_fraction']:.1%}")
    # Timings stay out of the metrics (and so out of dvc.lock, which must not change between identical
    # runs); benchmarks/tokenize_throughput.py records them.
    return {"paradigm": paradigm, "kind": cfg.kind, "vocab_size": tok.get_vocab_size(),
            "train": {"documents": docs[0], "mchars": round(mb, 3)},
            "heldout": heldout}


def load_tokenizer_config(params_path: Path, paradigm: str) -> tuple[TokenizerConfig, SplitConfig]:
    params = load_params(params_path)
    return (build(TokenizerConfig, section(params, f"tokenizer.{paradigm}"), f"tokenizer.{paradigm}"),
            build(SplitConfig, section(params, "split"), "split"))

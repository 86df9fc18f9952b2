"""The tokenizer stage's core: train one paradigm's tokenizer on the train side of the split, check that the saved
files load back, and measure fertility, unknown rate and vocabulary use on held-out text."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

from stages.common.atomic import write_json_atomic
from stages.config import build, load_params, section
from stages.sources.base import sha256_file
from stages.tokenization.split import SplitConfig, texts_of
from stages.tokenization.trainers import TokenizerConfig, batches, capped, save, sentinel, special_tokens, train


class TokenizerCheckFailed(RuntimeError):
    """The saved tokenizer does not load back with the special tokens and post-processing it must have."""


def measure(tok, texts: Iterable[str], *, unk_token: str | None, batch_docs: int = 1000) -> dict:
    """Fertility, unknown rate and vocabulary use of ``tok`` (a ``tokenizers.Tokenizer``) on ``texts``."""
    import numpy as np

    unk_id = tok.token_to_id(unk_token) if unk_token else None
    size = tok.get_vocab_size()
    seen = np.zeros(size, dtype=bool)
    docs = words = tokens = unknown = 0
    for batch in batches(texts, batch_docs):
        for enc in tok.encode_batch_fast(batch, add_special_tokens=False):
            ids = np.asarray(enc.ids, dtype=np.int64)
            seen[ids] = True
            tokens += len(ids)
            unknown += int((ids == unk_id).sum()) if unk_id is not None else 0
        words += sum(len(t.split()) for t in batch)
        docs += len(batch)
    used = int(seen.sum())
    return {"docs": docs, "words": words, "tokens": tokens, "fertility": round(tokens / words, 4) if words else None,
            "unknown_rate": round(unknown / tokens, 6) if tokens else None,
            "vocab_used": used, "vocab_used_fraction": round(used / size, 4)}


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


def train_tokenizer(cfg: TokenizerConfig, split: SplitConfig, *, paradigm: str, train_paths: list[Path],
                    eval_paths: dict[str, Path], out: Path, log=print) -> dict:
    """Train on the train split of ``train_paths`` (in order), save into ``out``, check that it reloads as trained
    (else :class:`TokenizerCheckFailed`) and measure it on the held-out split of ``eval_paths``; returns the metrics."""
    from tokenizers import Tokenizer

    count = {"docs": 0, "chars": 0}

    def training_texts():  # counted as the trainer consumes them (the last pass counts)
        count["docs"] = count["chars"] = 0
        texts = (t for path in train_paths for t in texts_of(path, split, "train", batch_docs=cfg.batch_docs))
        for text in capped(texts, cfg.max_train_chars):
            count["docs"] += 1
            count["chars"] += len(text)
            yield text

    start = time.perf_counter()
    tok = train(training_texts, cfg)
    seconds = time.perf_counter() - start
    docs, mb = count["docs"], count["chars"] / 1e6  # characters, the unit the corpus stages report
    log(f"[tokenizer] {paradigm}: {cfg.kind} trained on {docs} documents, {mb:.1f} M chars in {seconds:.1f}s; "
        f"vocabulary {tok.get_vocab_size()}")
    save(tok, cfg, out)
    check_saved(out, cfg)
    provenance = {"paradigm": paradigm, "config": asdict(cfg), "split": asdict(split),
                  "train": {"paths": [{"path": str(p), "sha256": sha256_file(p)} for p in train_paths],
                            "documents": docs, "characters": count["chars"]}}
    write_json_atomic(out / "provenance.json", provenance)
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    tok.encode_special_tokens = True  # measure text as text: a literal "[MASK]" in a page is not the mask token
    unk = special_tokens(cfg).get("unk_token")
    heldout = {name: measure(tok, texts_of(path, split, "heldout", batch_docs=cfg.batch_docs), unk_token=unk,
                             batch_docs=cfg.batch_docs) for name, path in eval_paths.items()}
    for name, m in heldout.items():
        log(f"[tokenizer] {paradigm}: held-out {name}: fertility {m['fertility']}, unknown rate {m['unknown_rate']}, "
            f"vocabulary used {m['vocab_used_fraction']:.1%}")
    # no timings: identical runs must write identical metrics (benchmarks/tokenize_throughput.py has them)
    return {"paradigm": paradigm, "kind": cfg.kind, "vocab_size": tok.get_vocab_size(),
            "train": {"documents": docs, "mchars": round(mb, 3)}, "heldout": heldout}


def load_tokenizer_config(params_path: Path, paradigm: str) -> tuple[TokenizerConfig, SplitConfig]:
    params = load_params(params_path)
    return (build(TokenizerConfig, section(params, f"tokenizer.{paradigm}"), f"tokenizer.{paradigm}"),
            build(SplitConfig, section(params, "split"), "split"))

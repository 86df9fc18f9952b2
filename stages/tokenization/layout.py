"""What a block of a paradigm looks like: its width and the special ids the packers, the gate and the
training stages agree on. Built from the saved tokenizer, so the ids can never drift from it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from stages.common.inputs import reading
from stages.tokenization.trainers import BERT_SPECIALS, GPT_EOT, T5_SPECIALS, sentinel

SENTENCE_END_MARKS = (".", "?", "!")


@dataclass(frozen=True, kw_only=True)
class BlockLayout:
    """seq_len: what the model sees; block_len: the stored row width (longer for T5's raw blocks). Ids are
    the tokenizer's; ``None`` where the paradigm has no such token."""

    paradigm: str
    seq_len: int
    block_len: int
    vocab_size: int
    pad_id: int | None = None
    unk_id: int | None = None
    cls_id: int | None = None
    sep_id: int | None = None
    mask_id: int | None = None
    eos_id: int | None = None
    sentinel_top: int | None = None
    sentinels: int = 0
    targets_len: int | None = None
    noise_density: float | None = None
    mean_span: float | None = None

    def to_json(self) -> dict:
        return asdict(self)

    def reserved_ids(self) -> list[int]:
        """Ids that must never come from text inside a block (only from the packer's own structure)."""
        if self.paradigm == "bert":
            return [self.mask_id]
        if self.paradigm == "t5":
            return [self.pad_id, *range(self.sentinel_top - self.sentinels + 1, self.sentinel_top + 1)]
        return []


def tokenizer_from_json(text: str):
    """A ``tokenizers.Tokenizer`` from its JSON that encodes special-token text ("[MASK]") as plain text."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(text)
    tok.encode_special_tokens = True
    tok.no_padding()  # a published tokenizer.json may pad and cut every text (sentence-transformers' do): blocks
    tok.no_truncation()  # are packed from whole documents
    return tok


def load_layout(tokenizer_dir: Path, paradigm: str, *, seq_len: int, noise_density: float = 0.15,
                mean_span: float = 3.0) -> tuple[BlockLayout, object]:
    """The layout and the ``tokenizers.Tokenizer`` (set to encode special-token text as plain text)."""
    path = Path(tokenizer_dir) / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no tokenizer (run the tokenizer stage first)")

    with reading(path, "tokenizer file"):
        tok = tokenizer_from_json(path.read_text(encoding="utf-8"))
    size = tok.get_vocab_size()

    def need(token: str) -> int:
        i = tok.token_to_id(token)
        if i is None:
            raise ValueError(f"{path}: token {token!r} missing; is this a {paradigm} tokenizer?")
        return i

    def ids(specials: dict[str, str]) -> dict[str, int]:  # {"pad_token": "[PAD]"} -> {"pad_id": its id}
        return {f"{key.removesuffix('_token')}_id": need(token) for key, token in specials.items()}

    common = {"paradigm": paradigm, "seq_len": seq_len, "vocab_size": size}
    config_path = Path(tokenizer_dir) / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    if paradigm == "bert":
        layout = BlockLayout(**common, block_len=seq_len, **ids(named_specials(config, BERT_SPECIALS)))
    elif paradigm == "gpt":
        layout = BlockLayout(**common, block_len=seq_len,
                             eos_id=need(named_specials(config, {"eos_token": GPT_EOT})["eos_token"]))
    elif paradigm == "t5":
        from stages.objectives.span_corruption import input_and_target_lengths

        sentinels = len(config.get("extra_special_tokens") or config.get("additional_special_tokens") or [])
        raw, targets = input_and_target_lengths(seq_len, noise_density, mean_span)
        top = need(sentinel(0))
        if sentinels < 1 or top != size - 1:
            raise ValueError(f"{path}: <extra_id_0> must be the last id ({size - 1}), found {top}")
        layout = BlockLayout(**common, block_len=raw, **ids(named_specials(config, T5_SPECIALS)), sentinel_top=top,
                             sentinels=sentinels, targets_len=targets, noise_density=noise_density, mean_span=mean_span)
    else:
        raise ValueError(f"paradigm: expected bert, gpt or t5, got {paradigm!r}")
    return layout, tok


def special_token(config: dict, key: str) -> str | None:
    """A special token's text in a ``tokenizer_config.json`` (a string, or an ``AddedToken`` record)."""
    value = config.get(key)
    return value.get("content") if isinstance(value, dict) else value


def named_specials(config: dict, defaults: dict[str, str]) -> dict[str, str]:
    """``defaults`` (``{"pad_token": "[PAD]", ...}``) with the tokens the tokenizer's config names instead (a
    published tokenizer's own: RoBERTa's ``<mask>``, GPT-2's ``<|endoftext|>``)."""
    return {key: special_token(config, key) or token for key, token in defaults.items()}


def sentence_end_ids(tok) -> list[int]:
    """Ids of the tokens that end a sentence (``.``, ``?``, ``!`` alone), for FULL-SENTENCES packing."""
    return [i for m in SENTENCE_END_MARKS if (i := tok.token_to_id(m)) is not None]

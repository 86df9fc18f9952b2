"""What a paradigm asks of a published checkpoint: the Auto class that loads it with its language-model head, the
special tokens its objective needs, and the longest block its positions allow. One table per paradigm; the stages
ask :func:`inspect` and never branch on a model's name."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from stages.tokenization.layout import special_token


@dataclass(frozen=True)
class Family:
    """A paradigm's needs: ``auto``: the transformers Auto class with the LM head; ``mapping``: the name of its
    config-to-class mapping; ``tokens``: the tokenizer's special tokens its objective uses; ``heads``: the class-name
    endings of checkpoints saved with that head (a bare body, e.g. sentence-transformers' ``BertModel``, gets a
    fresh one)."""

    auto: str
    mapping: str
    tokens: tuple[str, ...]
    heads: tuple[str, ...]


FAMILIES = {
    "bert": Family("AutoModelForMaskedLM", "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
                   ("cls_token", "sep_token", "pad_token", "mask_token"), ("ForMaskedLM", "ForPreTraining")),
    "gpt": Family("AutoModelForCausalLM", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", ("eos_token",),
                  ("ForCausalLM", "LMHeadModel")),
    "t5": Family("AutoModelForSeq2SeqLM", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", ("pad_token", "eos_token"),
                 ("ForConditionalGeneration",)),
}
POSITION_KEYS = ("max_position_embeddings", "n_positions")  # absent (T5's relative positions): no limit here


class BaseError(ValueError):
    """A published checkpoint that cannot serve its paradigm; one line naming the key or file."""


def _json(path: Path, where: str) -> dict:
    if not path.is_file():
        raise BaseError(f"{where}: {path.name} missing in {path.parent}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BaseError(f"{where}: {path} is not valid JSON ({exc})") from None


def inspect(folder: Path, paradigm: str, where: str) -> dict:
    """The checkpoint's facts for ``paradigm`` (model type, architectures, whether the LM head is fresh, the longest
    block, the special tokens); a BaseError naming ``where`` when it cannot serve it."""
    from transformers import AutoConfig
    from transformers.models.auto import modeling_auto

    family = FAMILIES[paradigm]
    raw = _json(folder / "config.json", where)
    try:
        config = AutoConfig.from_pretrained(str(folder))
    except (ValueError, KeyError, OSError) as exc:
        raise BaseError(f"{where}: no transformers Auto class loads {folder / 'config.json'} "
                        f"({str(exc).splitlines()[0]})") from None
    if config.model_type not in getattr(modeling_auto, family.mapping):
        raise BaseError(f"{where}.paradigm: {paradigm} needs a model {family.auto} loads; {folder / 'config.json'} "
                        f"is a {config.model_type} ({', '.join(raw.get('architectures') or ['no architectures'])})")
    tok_config = _json(folder / "tokenizer_config.json", where)
    if not (folder / "tokenizer.json").is_file():
        raise BaseError(f"{where}: {folder / 'tokenizer.json'} missing (a fast tokenizer's file is needed to build "
                        "the token blocks)")
    tokens = {key: special_token(tok_config, key) for key in family.tokens}
    if paradigm == "t5":
        extra = tok_config.get("extra_special_tokens") or tok_config.get("additional_special_tokens") or []
        if not any("extra_id_0" in str(t) for t in extra):
            raise BaseError(f"{where}: {folder / 'tokenizer_config.json'} has no sentinel <extra_id_0> (span "
                            "corruption needs them)")
    missing = [key for key, value in tokens.items() if not value]
    if missing:
        raise BaseError(f"{where}: {folder / 'tokenizer_config.json'} has no {missing[0]} ({paradigm}'s objective "
                        "needs it)")
    architectures = raw.get("architectures") or []
    positions = next((getattr(config, k) for k in POSITION_KEYS if getattr(config, k, None)), None)
    return {"model_type": config.model_type, "architectures": architectures,
            "fresh_head": not any(a.endswith(family.heads) for a in architectures),
            "max_positions": positions, "vocab_size": config.vocab_size, "special_tokens": tokens}

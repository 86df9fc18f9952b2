"""The tokens stage's settings (``tokens.<paradigm>`` over ``tokens.defaults``, and ``split``, in params.yaml) and
how they are read."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from stages.config import build, check, deep_merge, load_params, section
from stages.quality.tokens_suite import TokensGateConfig
from stages.tokenization.split import SplitConfig


@dataclass(frozen=True, kw_only=True)
class TokensConfig:
    """One paradigm's token datasets: the general and domain corpora encoded and packed into fixed-length blocks."""

    seq_len: int = 128
    """Tokens per example the model sees (T5: the encoder input; its stored raw block is longer), >= 8."""
    noise_density: float = 0.15
    """T5 span corruption: share of tokens corrupted, in (0, 1); sets the raw block length. Ignored otherwise."""
    mean_span: float = 3.0
    """T5 span corruption: mean corrupted span length in tokens, >= 1. Ignored otherwise."""
    batch_docs: int = 1000
    """Documents encoded per batch."""
    gate: TokensGateConfig = field(default_factory=TokensGateConfig)
    """The token datasets' quality gate."""

    def __post_init__(self) -> None:
        check(self.seq_len >= 8, "seq_len: must be >= 8")
        check(0 < self.noise_density < 1, "noise_density: must be in (0, 1)")
        check(self.mean_span >= 1, "mean_span: must be >= 1")
        check(self.batch_docs >= 1, "batch_docs: must be >= 1")


def load_tokens_config(params_path: Path, paradigm: str) -> tuple[TokensConfig, SplitConfig]:
    params = load_params(params_path)
    merged = deep_merge(section(params, "tokens.defaults"), section(params, f"tokens.{paradigm}") or {})
    return build(TokensConfig, merged, f"tokens.{paradigm}"), build(SplitConfig, section(params, "split"), "split")

"""The clean stage's settings (``clean.<corpus>`` merged over ``clean.defaults`` in params.yaml) and how they are
read."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from stages.cleaning.c4 import BadWordsConfig, C4Rules
from stages.cleaning.dedup import URL_RULES, LineDedupConfig, MinHashConfig
from stages.cleaning.gopher import GopherQualityConfig, GopherRepetitionConfig
from stages.cleaning.task_guard import TaskConfig
from stages.config import ConfigError, build, check, deep_merge, load_params, section


@dataclass(frozen=True, kw_only=True)
class LanguageConfig:
    """C4's language filter: keep English pages only."""

    enabled: bool = True
    """Keep only pages identified as English (C4: langdetect, seed 0)."""
    min_probability: float = 0.99
    """Least confidence of the English decision, in [0, 1] (C4: 0.99)."""
    backend: str = "langdetect"
    """Identifier: `langdetect` (C4's) or `py3langid` (faster; agreement in benchmarks/)."""
    second_opinion_docs: int = 4000
    """About how many kept documents the gate re-checks with py3langid, a content-hash sample; 0 = every one."""

    def __post_init__(self) -> None:
        check(0 <= self.min_probability <= 1, "min_probability: must be in [0, 1]")
        check(self.second_opinion_docs >= 0, "second_opinion_docs: must be >= 0 (0 = all)")
        check(self.backend in ("langdetect", "py3langid"), "backend: must be langdetect or py3langid")


@dataclass(frozen=True, kw_only=True)
class CleanerConfig:
    """Everything the filters need; the stage's params section maps onto it (see stages/clean.py)."""

    c4: C4Rules = field(default_factory=C4Rules)
    """C4's page and line rules."""
    url_dedup: bool = True
    """Keep one page per normalised URL and drop exact-duplicate texts (pages without a URL: only the latter)."""
    url_dedup_rule: str = "newest"
    """Which page of a URL survives: `newest` = latest timestamp (C4's paper), `tfds` = largest MD5 of the text
    (TFDS's code)."""
    line_dedup: LineDedupConfig = field(default_factory=LineDedupConfig)
    """C4's corpus-wide line deduplication."""
    language: LanguageConfig = field(default_factory=LanguageConfig)
    """C4's language filter."""
    badwords: BadWordsConfig = field(default_factory=BadWordsConfig)
    """C4's bad-words page filter."""
    gopher_quality: GopherQualityConfig = field(default_factory=GopherQualityConfig)
    """Gopher's quality filter (not in C4)."""
    gopher_repetition: GopherRepetitionConfig = field(default_factory=GopherRepetitionConfig)
    """Gopher's repetition filter (not in C4)."""
    minhash: MinHashConfig = field(default_factory=MinHashConfig)
    """MinHash near-duplicate page removal (not in C4)."""
    filters: tuple[str, ...] = ("line_dedup", "language", "badwords", "gopher_quality", "gopher_repetition")
    """The page filters after the line table, in order (names of `stages.cleaning.recipe.FILTERS`; each one's own
    switch still applies)."""
    workers: int = 2
    """Worker processes for the sharded steps; 0 = one per core, 1 = in this process; `LMPIPE_DASK` overrides."""
    shard_docs: int = 500
    """Documents per shard, the unit of work handed to a worker."""
    reject_samples: int = 20
    """Rejected documents kept for audit, per filter and reason; 0 = none."""

    def __post_init__(self) -> None:
        check(self.workers >= 0, "workers: must be >= 0 (0 = one per CPU core)")
        check(self.url_dedup_rule in URL_RULES, f"url_dedup_rule: one of {', '.join(URL_RULES)}")
        check(self.shard_docs >= 1, "shard_docs: must be >= 1")
        check(self.reject_samples >= 0, "reject_samples: must be >= 0")
        from stages.cleaning.recipe import FILTERS  # here: the recipe's filters import their configs from here

        unknown = [n for n in self.filters if n not in FILTERS]
        check(not unknown, f"filters: unknown filter {unknown[0] if unknown else ''!r} (have: {', '.join(FILTERS)})")
        check(len(set(self.filters)) == len(self.filters), "filters: a filter is named twice")


@dataclass(frozen=True, kw_only=True)
class CleanGateConfig:
    """Bounds of the post-cleaning quality gate (Great Expectations); a failed bound stops the stage."""

    min_rows: int = 1
    """Fewest documents that must survive cleaning."""
    min_kept_fraction: float = 0.0
    """Least share of input documents kept, in [0, 1]; lower means a rule or the input broke."""
    max_kept_fraction: float = 1.0
    """Most share of input documents kept, in [0, 1]; higher means the rules did not bite on noisy input."""
    min_english_agreement: float = 0.95
    """Least share of the sampled kept documents that py3langid, independently, also calls English (only with
    `language` on)."""

    def __post_init__(self) -> None:
        check(0 <= self.min_kept_fraction <= self.max_kept_fraction <= 1,
              "min_kept_fraction: need 0 <= min_kept_fraction <= max_kept_fraction <= 1")
        check(0 <= self.min_english_agreement <= 1, "min_english_agreement: must be in [0, 1]")


@dataclass(frozen=True, kw_only=True)
class CleanConfig:
    """A `clean.<corpus>` section merged over `clean.defaults`: the cleaner's keys (above), the task guard
    and TAPT texts, and the gate.
    """

    cleaner: CleanerConfig = field(default_factory=CleanerConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    """The task guard and task-adaptive texts: what of the labeled task this corpus must drop or add."""
    gate: CleanGateConfig = field(default_factory=CleanGateConfig)
    """The post-cleaning gate's bounds."""


def config_from_section(data: dict[str, Any], where: str) -> CleanConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping")
    data = dict(data)
    gate = build(CleanGateConfig, data.pop("gate", {}), f"{where}.gate")
    task = build(TaskConfig, data.pop("task", {}), f"{where}.task")
    allowed = {f.name for f in fields(CleanerConfig)} | {"gate", "task"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown key (allowed: {', '.join(sorted(allowed))})")
    return CleanConfig(cleaner=build(CleanerConfig, data, where), task=task, gate=gate)


def load_config(params_path: Path, corpus: str) -> CleanConfig:
    params = load_params(params_path)
    merged = deep_merge(section(params, "clean.defaults"), section(params, f"clean.{corpus}") or {})
    return config_from_section(merged, f"clean.{corpus}")

"""The cleaning recipe: what the clean stage runs on a corpus, in order, built from its ``CleanerConfig``:

    read -> URL dedup -> C4 rules -> line table -> filters -> corpus-wide dedup -> task guard -> write

The page steps are filters (``stages.cleaning.base.Filter``: a page's decision and reason), each a registry entry
here: ``RULES`` run before the line table (C4's page length, then URL dedup's decision, then its line rules),
``FILTERS`` after it, in the order params ``filters`` gives. The other steps need the whole corpus and exchange
files between tasks (``stages.cleaning.pipeline`` runs them). Adding a filter is a ``Filter`` subclass and one
entry in ``FILTERS``; naming it in ``clean.<corpus>.filters`` runs it, and its drops reach ``stats.json`` and
``rejects.jsonl`` without more code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from stages.cleaning.base import Filter
from stages.cleaning.c4 import BadWordsFilter, C4LinesFilter, PageLengthFilter
from stages.cleaning.dedup import LineDedupFilter
from stages.cleaning.gopher import GopherQualityFilter, GopherRepetitionFilter
from stages.cleaning.langid import LanguageFilter

STEPS = ("read", "url_dedup", "c4_rules", "line_table", "filters", "corpus_dedup", "task_guard", "write")


@dataclass(frozen=True)
class ShardContext:
    """What a filter may need from the task that runs it on a shard."""

    table: Path | None  # the line table's local file (line dedup)
    words: tuple[str, ...]  # the bad-words list
    reject_samples: int  # rejects kept per reason


@dataclass(frozen=True)
class FilterEntry:
    """A filter of the recipe: whether a corpus's config turns it on, and how a task builds it for one shard."""

    enabled: Callable[..., bool]  # (CleanerConfig) -> bool
    make: Callable[..., Filter]  # (CleanerConfig, ShardContext) -> Filter


RULES: dict[str, FilterEntry] = {
    "page_length": FilterEntry(lambda cfg: True, lambda cfg, ctx: PageLengthFilter(cfg.c4, ctx.reject_samples)),
    "c4_lines": FilterEntry(lambda cfg: True, lambda cfg, ctx: C4LinesFilter(cfg.c4, ctx.reject_samples)),
}

FILTERS: dict[str, FilterEntry] = {
    "line_dedup": FilterEntry(lambda cfg: cfg.line_dedup.enabled,
                              lambda cfg, ctx: LineDedupFilter(ctx.table, cfg.line_dedup, ctx.reject_samples)),
    "language": FilterEntry(lambda cfg: cfg.language.enabled,
                            lambda cfg, ctx: LanguageFilter(cfg.language, ctx.reject_samples)),
    "badwords": FilterEntry(lambda cfg: cfg.badwords.enabled,
                            lambda cfg, ctx: BadWordsFilter(list(ctx.words), ctx.reject_samples)),
    "gopher_quality": FilterEntry(lambda cfg: cfg.gopher_quality.enabled,
                                  lambda cfg, ctx: GopherQualityFilter(cfg.gopher_quality, ctx.reject_samples)),
    "gopher_repetition": FilterEntry(lambda cfg: cfg.gopher_repetition.enabled,
                                     lambda cfg, ctx: GopherRepetitionFilter(cfg.gopher_repetition,
                                                                             ctx.reject_samples)),
}


@dataclass(frozen=True)
class Recipe:
    """A corpus's cleaning: its config (``stages.cleaning.config.CleanerConfig``) and the bad-words list. Sent to
    every task, which builds its filters from the names here."""

    cfg: object  # CleanerConfig
    words: tuple[str, ...] = ()

    @property
    def rules(self) -> tuple[str, ...]:
        """The filters before the line table (C4's page length and line rules)."""
        return tuple(n for n, entry in RULES.items() if entry.enabled(self.cfg))

    @property
    def filters(self) -> tuple[str, ...]:
        """The filters after the line table, in the config's order, those it turns on."""
        return tuple(n for n in self.cfg.filters if FILTERS[n].enabled(self.cfg))

    @property
    def steps(self) -> tuple[str, ...]:
        """The steps that run, in order."""
        on = {"url_dedup": self.cfg.url_dedup, "line_table": self.cfg.line_dedup.enabled,
              "corpus_dedup": self.cfg.minhash.enabled or not self.cfg.line_dedup.enabled}
        return tuple(s for s in STEPS if on.get(s, True))

    @property
    def text_md5(self) -> bool:
        """Whether the read step keeps the texts' MD5 digests (URL dedup's ``tfds`` rule picks by them)."""
        return self.cfg.url_dedup and self.cfg.url_dedup_rule == "tfds"

    def build(self, names: tuple[str, ...], ctx: ShardContext) -> list[Filter]:
        """The filters ``names`` (of :data:`RULES` or :data:`FILTERS`) for one shard."""
        return [(RULES.get(n) or FILTERS[n]).make(self.cfg, ctx) for n in names]

    def describe(self) -> str:
        """One line: the steps, with the filters of the page steps."""
        parts = {"c4_rules": f"c4_rules ({', '.join(self.rules)})",
                 "filters": f"filters ({', '.join(self.filters) or 'none'})"}
        return " -> ".join(parts.get(s, s) for s in self.steps)

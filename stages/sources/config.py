"""The ingest stage's settings (``ingest.<corpus>`` in params.yaml) and how they are read."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from stages.config import build, check, load_params, section
from stages.sources import SourceConfig


@dataclass(frozen=True, kw_only=True)
class SplitConfig:
    """How labeled examples are split: whole groups (e.g. a Debian source package) go to one split, chosen by
    a seeded hash of the group name, so near-identical texts of one group never straddle splits.
    """

    validation: float = 0.1
    """Expected share of groups in the validation split, in [0, 1)."""
    test: float = 0.1
    """Expected share of groups in the test split, in [0, 1); train gets what validation and test leave."""
    seed: int = 0
    """Seed of the group hash: changes which groups land where without changing the shares."""

    def __post_init__(self) -> None:
        check(0 <= self.validation < 1, "validation: must be in [0, 1)")
        check(0 <= self.test < 1, "test: must be in [0, 1)")
        check(self.validation + self.test < 1, "test: validation + test must leave a train share")


@dataclass(frozen=True, kw_only=True)
class IngestGateConfig:
    """Bounds of the ingest quality gate (Great Expectations); a failed bound stops the stage."""

    min_rows: int = 1
    """Fewest documents the gate accepts, counted after deduplication."""
    max_rows: int = 100_000_000
    """Most documents the gate accepts, counted after deduplication."""
    min_nonempty_ratio: float = 0.99
    """Least share of documents with non-blank text, in [0, 1]."""
    labels: tuple[str, ...] = ()
    """Allowed labels (labeled corpora); empty = the `sections` of its debian_descriptions sources, else any."""
    min_class_share: float = 0.0
    """Least share of all examples that every allowed label must have, in [0, 1]."""
    max_class_share: float = 1.0
    """Most share of all examples that any one label may have, in [0, 1]."""

    def __post_init__(self) -> None:
        check(self.min_rows >= 0, "min_rows: must be >= 0")
        check(self.max_rows >= self.min_rows, "max_rows: must be >= min_rows")
        check(0 <= self.min_nonempty_ratio <= 1, "min_nonempty_ratio: must be in [0, 1]")
        check(0 <= self.min_class_share <= self.max_class_share <= 1,
              "min_class_share: need 0 <= min_class_share <= max_class_share <= 1")


@dataclass(frozen=True, kw_only=True)
class CorpusConfig:
    """One corpus to ingest (a section `ingest.<corpus>` of params.yaml)."""

    sources: tuple[SourceConfig, ...]
    """One or more sources, read in order; each kind's keys are below."""
    labeled: bool = False
    """The corpus carries labels: adds `label` and `split` columns; every record must have a label."""
    dedup: bool = True
    """Drop byte-identical copies of a text; labeled: also drop texts whose copies disagree on the label."""
    max_docs: int | None = None
    """Stop after this many documents over all sources (quick trials on big corpora); null = all."""
    split: SplitConfig = field(default_factory=SplitConfig)
    """How labeled examples are split into train, validation and test (unused for unlabeled corpora)."""
    gate: IngestGateConfig = field(default_factory=IngestGateConfig)
    """The quality gate's bounds."""

    def __post_init__(self) -> None:
        check(len(self.sources) > 0, "sources: at least one source is needed")
        check(self.max_docs is None or self.max_docs > 0, "max_docs: must be positive or null")


def load_config(params_path: Path, corpus: str) -> CorpusConfig:
    key = f"ingest.{corpus}"
    return build(CorpusConfig, section(load_params(params_path), key), key)


def head_labels(params_path: Path) -> tuple[str, ...]:
    """``finetune.defaults.labels``, the classifier head's label set (ingest checks a labeled corpus against it
    when the corpus's gate names none); () when params have none."""
    from stages.config import ConfigError

    try:
        labels = section(load_params(params_path), "finetune.defaults.labels")
    except ConfigError:
        return ()
    return tuple(str(label) for label in labels or ())

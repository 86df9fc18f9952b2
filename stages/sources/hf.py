"""Hugging Face datasets: a hub dataset by name (needs internet) or a ``save_to_disk`` folder."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from stages.config import check
from stages.common.documents import Record
from stages.sources.base import FieldsSource, Provenance, SourceError, offline


@dataclass(frozen=True, kw_only=True)
class HFSource(FieldsSource):
    """A Hugging Face dataset: a hub dataset by `name` or a `save_to_disk` folder by `path`; exactly one."""

    kind: Literal["hf"]
    """`hf` selects this source."""
    name: str | None = None
    """Hub dataset id (e.g. `allenai/c4`), read with `datasets.load_dataset`; needs internet."""
    path: str | None = None
    """Folder written by `Dataset.save_to_disk` (a DatasetDict: `split` picks the split); works offline."""
    config: str | None = None
    """Dataset configuration passed to `load_dataset`; null = the dataset's default."""
    split: str = "train"
    """Split to read (hub dataset, or a DatasetDict folder)."""
    revision: str | None = None
    """Hub revision passed to `load_dataset`; pin it for reproducible runs. null = latest."""
    streaming: bool = False
    """Read a hub dataset lazily (for corpora larger than the disk); `max_rows` caps it."""
    max_rows: int | None = None
    """Read at most this many rows; null = all."""
    licence: str = "see the dataset card"
    """Free-text licence note copied into the manifest."""

    def __post_init__(self) -> None:
        check((self.name is None) != (self.path is None), "name: set exactly one of name (hub) or path (folder)")
        check(self.max_rows is None or self.max_rows > 0, "max_rows: must be positive")


def read_hf(cfg: HFSource, prov: Provenance) -> Iterator[Record]:
    import datasets

    prov.licence = cfg.licence
    if cfg.path is not None:
        folder = Path(cfg.path)
        if not folder.exists():
            raise SourceError(f"{folder}: no such dataset folder")
        try:
            ds = datasets.load_from_disk(str(folder))
        except Exception as exc:
            raise SourceError(f"{folder}: not a save_to_disk dataset ({exc})") from None
        if isinstance(ds, datasets.DatasetDict):
            if cfg.split not in ds:
                raise SourceError(f"{folder}: no split {cfg.split!r} (have {', '.join(ds)})")
            ds = ds[cfg.split]
        prov.description = f"datasets.load_from_disk({folder}) split {cfg.split}"
        for f in sorted(folder.rglob("*.arrow")):
            prov.add_file(f)
        prov.extra["fingerprint"] = getattr(ds, "_fingerprint", None)
        source_name = folder.name
    else:
        if offline():
            raise SourceError(f"hub dataset {cfg.name}: LMPIPE_OFFLINE is set; use path: with a saved copy")
        try:
            ds = datasets.load_dataset(cfg.name, cfg.config, split=cfg.split, revision=cfg.revision,
                                       streaming=cfg.streaming)
        except Exception as exc:
            raise SourceError(f"hub dataset {cfg.name}: cannot load ({type(exc).__name__}: {exc})".splitlines()[0]) from None
        prov.description = f"datasets.load_dataset({cfg.name!r}, {cfg.config!r}, split={cfg.split!r})"
        prov.packages.append({"registry": "huggingface", "name": cfg.name, "config": cfg.config,
                              "revision": cfg.revision, "fingerprint": getattr(ds, "_fingerprint", None)})
        source_name = cfg.name
    columns = ds.column_names or []
    if columns and cfg.text_field not in columns:
        raise SourceError(f"{cfg.path or cfg.name}: no column {cfg.text_field!r} (columns: {', '.join(columns)})")
    features = getattr(ds, "features", None) if cfg.label_field else None  # ClassLabel ints are written as names
    label_names = getattr(features.get(cfg.label_field), "names", None) if features is not None else None
    for i, row in enumerate(itertools.islice(ds, cfg.max_rows)):
        text = row.get(cfg.text_field)
        if not isinstance(text, str):
            raise SourceError(f"{cfg.path or cfg.name}: row {i + 1}: field {cfg.text_field!r} is not a string")
        label = row.get(cfg.label_field) if cfg.label_field else None
        if label_names is not None and isinstance(label, int):
            # ClassLabel's -1 means "no label" (e.g. GLUE test splits), not the last class.
            label = label_names[label] if 0 <= label < len(label_names) else None
        yield cfg.record(row, text, label, source_name)

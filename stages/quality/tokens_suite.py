"""The gate after tokenization, measured per block on the block files as written: ``max_id``, ``unk_fraction``,
``pad_fraction``, ``reserved_tokens`` and, for BERT, [CLS] ... [SEP]; and the check the paradigm's own objective
declares for the blocks laid out for it (``Objective.block_check``; T5's span corruption: a sample corrupted to the
exact ``seq_len`` and ``targets_len``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from stages import objectives
from stages.config import check
from stages.quality.gate import Expect, set_by
from stages.tokenization.layout import BlockLayout


@dataclass(frozen=True, kw_only=True)
class TokensGateConfig:
    """Bounds of the token datasets' quality gate (Great Expectations), checked on every block file."""

    min_train_blocks: int = 1
    """Fewest training blocks each corpus must yield."""
    min_heldout_blocks: int = 1
    """Fewest held-out blocks each corpus must yield."""
    max_unk_fraction: float = 0.01
    """Most mean share of unknown tokens per block, in [0, 1]."""
    max_pad_fraction: float = 0.25
    """Most mean share of padding per block, in [0, 1] (only BERT's sentence blocks pad)."""
    corruption_sample: int = 256
    """T5: training blocks per corpus span-corrupted to check the exact lengths; 0 = none."""

    def __post_init__(self) -> None:
        check(self.min_train_blocks >= 0 and self.min_heldout_blocks >= 0, "min_*_blocks: must be >= 0")
        check(0 <= self.max_unk_fraction <= 1, "max_unk_fraction: must be in [0, 1]")
        check(0 <= self.max_pad_fraction <= 1, "max_pad_fraction: must be in [0, 1]")
        check(self.corruption_sample >= 0, "corruption_sample: must be >= 0")


def block_features(blocks: np.ndarray, layout: "BlockLayout", *, chunk: int = 8192) -> pd.DataFrame:
    """One row per block, computed in chunks from a (memory-mapped) block array."""
    parts = []
    reserved = np.asarray(layout.reserved_ids(), dtype=np.int64)
    for start in range(0, len(blocks), chunk):
        b = np.asarray(blocks[start: start + chunk], dtype=np.int64)
        cols: dict[str, np.ndarray] = {"max_id": b.max(axis=1) if b.size else np.empty(0, np.int64)}
        if layout.paradigm == "bert":
            is_pad = b == layout.pad_id
            content = (~is_pad).sum(axis=1)
            cols["pad_fraction"] = is_pad.mean(axis=1)
            cols["first_is_cls"] = b[:, 0] == layout.cls_id
            cols["closed_by_sep"] = b[np.arange(len(b)), np.maximum(content - 1, 0)] == layout.sep_id
            # padding must be one run at the end, and [CLS] appears only at position 0
            pads_inside = (np.cumsum(is_pad, axis=1) > 0) & ~is_pad
            cols["reserved_tokens"] = (np.isin(b, reserved).sum(axis=1) + (b[:, 1:] == layout.cls_id).sum(axis=1)
                                       + pads_inside.sum(axis=1))
        else:
            content = np.full(len(b), b.shape[1])
            cols["pad_fraction"] = np.zeros(len(b))
            cols["reserved_tokens"] = np.isin(b, reserved).sum(axis=1) if len(reserved) else np.zeros(len(b), int)
        unk = (b == layout.unk_id).sum(axis=1) if layout.unk_id is not None else np.zeros(len(b), int)
        cols["unk_fraction"] = unk / np.maximum(content, 1)
        parts.append(pd.DataFrame(cols, index=pd.RangeIndex(start, start + len(b), name="block")))
    return pd.concat(parts) if parts else pd.DataFrame(columns=["max_id", "pad_fraction", "reserved_tokens",
                                                                 "unk_fraction"])


def tokens_suite(files: Mapping[str, np.ndarray], layout: "BlockLayout", gate: TokensGateConfig, where: str = ""):
    """(tables, expectations) for every block file, keyed ``<corpus>_<split>``; ``where``: the params section of
    the gate's bounds (``tokens.defaults.gate``), named by a failure."""
    tables: dict[str, pd.DataFrame] = {}
    checks: list[Expect] = []
    for name, blocks in files.items():
        tables[name] = block_features(blocks, layout)
        least = gate.min_heldout_blocks if name.endswith("_heldout") else gate.min_train_blocks
        checks += [
            Expect(name, "ExpectTableRowCountToBeBetween", {"min_value": least},
                   set_by(where, **{"min_heldout_blocks" if name.endswith("_heldout") else "min_train_blocks": least})),
            Expect(name, "ExpectColumnValuesToBeBetween",
                   {"column": "max_id", "min_value": 0, "max_value": layout.vocab_size - 1}),
            Expect(name, "ExpectColumnValuesToBeInSet", {"column": "reserved_tokens", "value_set": [0]}),
            Expect(name, "ExpectColumnMeanToBeBetween",
                   {"column": "unk_fraction", "min_value": 0, "max_value": gate.max_unk_fraction},
                   set_by(where, max_unk_fraction=gate.max_unk_fraction)),
            Expect(name, "ExpectColumnMeanToBeBetween",
                   {"column": "pad_fraction", "min_value": 0, "max_value": gate.max_pad_fraction},
                   set_by(where, max_pad_fraction=gate.max_pad_fraction)),
        ]
        if layout.paradigm == "bert":
            checks += [Expect(name, "ExpectColumnValuesToBeInSet", {"column": c, "value_set": [True]})
                       for c in ("first_is_cls", "closed_by_sep")]
    own = objectives.get(layout.paradigm).block_check  # the blocks are laid out for the paradigm's own objective
    if own is not None and gate.corruption_sample:
        train = [b for n, b in files.items() if n.endswith("_train")]
        expected = own.expect(layout)
        tables[own.name] = pd.concat([own.table(b, layout, gate.corruption_sample, i)
                                      for i, b in enumerate(train)]) if train else pd.DataFrame(columns=list(expected))
        checks += [Expect(own.name, "ExpectColumnValuesToBeInSet", {"column": column, "value_set": [value]})
                   for column, value in expected.items()]
    return tables, checks


def paths_of(folder: Path, corpora: list[str]) -> dict[str, Path]:
    return {f"{c}_{s}": folder / c / f"{s}.npy" for c in corpora for s in ("train", "heldout")}

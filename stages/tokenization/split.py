"""The held-out split, by a hash of the document id (independent of order and machine), shared by the
tokenizer and the token datasets."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from stages.config import check


@dataclass(frozen=True, kw_only=True)
class SplitConfig:
    """The held-out split of the cleaned corpora, by a salted hash of the document id."""

    heldout_fraction: float = 0.05
    """Expected share of each corpus's documents held out, in (0, 1)."""
    salt: str = ""
    """Hash salt: changes which documents are held out without changing how many."""

    def __post_init__(self) -> None:
        check(0 < self.heldout_fraction < 1, "heldout_fraction: must be in (0, 1)")


def is_heldout(doc_id: str, cfg: SplitConfig) -> bool:
    """True when the document belongs to the held-out split."""
    digest = hashlib.sha256(f"{cfg.salt}\0{doc_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") < cfg.heldout_fraction * 2**64

"""The record cleaning filters work on, and the base class that counts, times and samples what they drop
(as datatrove's ``BaseFilter``)."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any


@dataclass
class Doc:
    """A document moving through the cleaning filters; ``text`` is rewritten by line filters."""

    id: str
    text: str
    source: str
    url: str | None
    meta: str
    timestamp: str = ""
    raw_id: str = ""  # the id the input gave the document (kept in meta; never used as a key)
    seq: int = 0  # its place among the valid records of the input piece it was read from


def meta_dict(value: Any) -> dict:
    """A document's ``meta`` JSON text as a dict; {} when it is not a string holding a JSON object."""
    try:
        meta = json.loads(value) if isinstance(value, str) else {}
    except ValueError:
        return {}
    return meta if isinstance(meta, dict) else {}


@dataclass
class FilterStats:
    """What one filter did. Adding two stats objects merges shards."""

    docs_in: int = 0
    docs_out: int = 0
    chars_in: int = 0
    chars_out: int = 0
    seconds: float = 0.0
    dropped: Counter = field(default_factory=Counter)
    lines_dropped: Counter = field(default_factory=Counter)

    def merge(self, other: "FilterStats") -> None:
        for f in fields(self):
            mine = getattr(self, f.name)
            if isinstance(mine, Counter):
                mine.update(getattr(other, f.name))
            else:
                setattr(self, f.name, mine + getattr(other, f.name))

    def to_json(self) -> dict[str, Any]:
        return {"docs_in": self.docs_in, "docs_out": self.docs_out, "docs_dropped": sum(self.dropped.values()),
                "dropped_by_reason": dict(sorted(self.dropped.items())),
                "lines_dropped": sum(self.lines_dropped.values()),
                "lines_dropped_by_reason": dict(sorted(self.lines_dropped.items())),
                "chars_in": self.chars_in, "chars_out": self.chars_out, "seconds": round(self.seconds, 3)}


class Filter:
    """Base of every cleaning filter. Subclasses set ``name`` and implement :meth:`apply` (reading ``self.cfg``)."""

    name = "filter"

    def __init__(self, cfg: Any = None, reject_samples: int = 0) -> None:
        self.cfg = cfg
        self.stats = FilterStats()
        self.reject_samples = reject_samples
        self.rejects: list[dict[str, Any]] = []
        self._sampled: Counter = Counter()

    def apply(self, doc: Doc) -> str | None:  # pragma: no cover - abstract
        """Return None to keep ``doc`` (possibly rewritten) or a short reason to drop it."""
        raise NotImplementedError

    def drop_line(self, reason: str, n: int = 1) -> None:
        self.stats.lines_dropped[reason] += n

    def __call__(self, doc: Doc) -> bool:
        """Run the filter with bookkeeping; True means the document goes on."""
        s = self.stats
        s.docs_in += 1
        s.chars_in += len(doc.text)
        original = doc.text
        t0 = time.perf_counter()
        try:
            reason = self.apply(doc)
        except Exception as exc:  # a filter must never crash the run on odd input: drop with a reason
            reason = f"error:{type(exc).__name__}"
        s.seconds += time.perf_counter() - t0
        if reason is None:
            s.docs_out += 1
            s.chars_out += len(doc.text)
            return True
        s.dropped[reason] += 1
        if self._sampled[reason] < self.reject_samples:
            self._sampled[reason] += 1
            self.rejects.append({"id": doc.id, "filter": self.name, "reason": reason, "source": doc.source,
                                 "url": doc.url, "text": original[:4000]})
        return False

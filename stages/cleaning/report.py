"""What a cleaning run reports: the counts per filter and reason (``stats.json``, identical bytes for the same
input and params), the drops by filter (the DVC plot), the live log's timing table, and the merge of the tasks'
reports in input order."""

from __future__ import annotations

import csv
import io
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stages.cleaning.base import FilterStats


@dataclass
class CleanResult:
    docs_in: int
    docs_out: int
    chars_in: int
    chars_out: int
    bytes_in: int
    filters: dict[str, FilterStats]
    rejects: list[dict[str, Any]]
    input_drops: Counter
    seconds: float
    step_seconds: dict[str, float]
    word_lists: dict[str, Any] = field(default_factory=dict)
    gate_features: Any = None  # per-document features for the gate (pandas), computed by the workers
    duplicate_lines: int | None = None  # output lines that repeat another output line (independent count)
    task: dict[str, Any] | None = None  # the task guard's drops and the TAPT texts added (stages.cleaning.task_guard)
    input_repaired: Counter = field(default_factory=Counter)  # records kept after a repair (invalid UTF-8)
    task_leaks: Any = None  # the gate's re-check of the published file against the task (pandas, one row each)

    def stats_json(self) -> dict[str, Any]:
        """Counts only (no wall-clock time), so the same input and params give identical bytes."""
        return {"documents_in": self.docs_in, "documents_out": self.docs_out,
                "kept_fraction": round(self.docs_out / self.docs_in, 6) if self.docs_in else 0.0,
                "characters_in": self.chars_in, "characters_out": self.chars_out,
                "input_dropped": dict(sorted(self.input_drops.items())),
                "input_repaired": dict(sorted(self.input_repaired.items())),
                "filter_order": list(self.filters), "word_lists": self.word_lists,
                "filters": {name: {k: v for k, v in st.to_json().items() if k != "seconds"}
                            for name, st in self.filters.items()},
                **({"task": self.task} if self.task is not None else {})}

    def drops_csv(self) -> str:
        """One row per filter: documents and lines it dropped (the DVC bar plot of drops by filter)."""
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(
            [["filter", "documents_dropped", "lines_dropped", "characters_removed"],
             *([name, sum(st.dropped.values()), sum(st.lines_dropped.values()), st.chars_in - st.chars_out]
               for name, st in self.filters.items())])
        return buf.getvalue()

    def timing_table(self) -> str:
        """The live log's summary: documents, throughput and each filter's CPU time."""
        mb = self.bytes_in / 1e6
        lines = [f"[clean] {self.docs_in} documents in, {self.docs_out} kept; {mb:.1f} MB in "
                 f"{self.seconds:.1f}s ({mb / self.seconds if self.seconds else 0:.2f} MB/s wall)"]
        lines += [f"[clean]   {name:<18} in {st.docs_in:>8} out {st.docs_out:>8}  cpu {st.seconds:7.2f}s"
                  for name, st in self.filters.items()]
        lines.append("[clean]   steps: " + ", ".join(f"{k} {v:.1f}s" for k, v in self.step_seconds.items()))
        return "\n".join(lines)


def merger(into: dict[str, FilterStats], rejects: dict[str, list], cap: int) -> Callable[[Any], None]:
    """A consumer merging shard reports in input order, keeping at most ``cap`` rejects per filter and reason."""
    counts: Counter = Counter()

    def consume(report) -> None:
        for name, (stats, rej) in report.items():
            into.setdefault(name, FilterStats()).merge(stats)
            for r in rej:
                if counts[(name, r["reason"])] < cap:
                    counts[(name, r["reason"])] += 1
                    rejects.setdefault(name, []).append(r)

    return consume

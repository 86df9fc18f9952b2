"""Live metrics and timings (DVCLive, readable mid-run) in ``reports/live``, kept out of the tracked outputs."""

from __future__ import annotations

import json
import math
from pathlib import Path


class LiveLog:
    """One run's live folder (None: logs nothing). ``start(resume_step)``: a fresh log, or a resumed run's
    rows up to ``resume_step``; ``log(step, values)`` appends a step (non-finite values skipped);
    ``summary(values)`` sets the run's totals in ``metrics.json``."""

    def __init__(self, folder: Path | None) -> None:
        self.folder, self._live, self._started = folder, None, False

    def start(self, resume_step: int = 0):
        """The DVCLive logger (made on the first call; None without a folder or dvclive)."""
        if not self._started and self.folder is not None:
            self._live = _open(self.folder, resume_step)
        self._started = True
        return self._live

    def log(self, step: int, values: dict) -> None:
        if (live := self.start()) is not None:
            live.step = step
            for key, value in values.items():
                if isinstance(value, (int, float)) and math.isfinite(value):
                    live.log_metric(key, value)
            live.next_step()

    def summary(self, values: dict) -> None:
        if (live := self.start()) is not None:
            live.summary.update({k: v for k, v in values.items() if v is not None})
            live.make_summary()

    def close(self) -> None:
        if self._live is not None:
            self._live.end()
            self._live = None

    def __enter__(self) -> LiveLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _open(folder: Path, resume_step: int):
    try:
        from dvclive import Live
    except ImportError:  # a trimmed environment (a GPU image without the pipeline's extras): train anyway
        import sys

        print(f"warning: dvclive is not installed: no live log in {folder} (pip install dvclive)", file=sys.stderr)
        return None

    class _FilesOnly(Live):
        def _init_dvc(self):
            # No repository, experiment or dvc.yaml of its own: a stage must not touch the repository.
            self._save_dvc_exp = False

    folder.mkdir(parents=True, exist_ok=True)
    if resume_step:
        _truncate(folder, resume_step)
    return _FilesOnly(str(folder), resume=bool(resume_step), save_dvc_exp=False, dvcyaml=None, report=None)


def _truncate(folder: Path, step: int) -> None:
    """Drop the rows after ``step`` from every curve of a live folder (DVCLive's TSVs: ``step`` first)."""
    for tsv in (folder / "plots" / "metrics").rglob("*.tsv"):
        lines = tsv.read_text(encoding="utf-8").splitlines(keepends=True)
        kept = lines[:1] + [line for line in lines[1:] if int(line.split("\t", 1)[0]) <= step]
        if len(kept) != len(lines):
            tsv.write_text("".join(kept), encoding="utf-8")


def read_summary(folder: Path) -> dict:
    """A live folder's ``metrics.json`` ({} when the run left none)."""
    path = folder / "metrics.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}

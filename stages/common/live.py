"""Live metrics and timings, kept out of the files DVC hashes and git tracks.

A training run writes its curve as it goes through DVCLive (Iterative's logger for DVC; ``metrics.json``
and ``plots/metrics/<name>.tsv`` in its folder, rewritten at every logged step), so a user can plot a run
that is still going (``dvc plots show``, ``dvc metrics show``; dvc.yaml lists ``reports/live`` as top-level
plots and metrics). The same folder holds what differs between two runs of the same inputs: tokens/s,
model FLOP/s, MFU and wall seconds. The stages' tracked outputs (metrics JSON, plot TSV, ``training.json``)
carry only what the inputs determine, so a re-run with nothing changed leaves ``git status`` and the model
folders' hashes as they were.

``reports/live`` is git-ignored and no stage's output: it is the run's log, not its result.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

LIVE_ROOT = Path("reports/live")


class LiveLog:
    """One run's live folder. ``start(resume_step)``: a fresh log, or for a run resumed from a checkpoint at
    ``resume_step`` what the interrupted run logged up to that step (its later rows are dropped: the resumed
    run logs those steps again); the training loop calls it once it knows where it starts, and the first
    ``log`` or ``summary`` starts a fresh one otherwise. ``log(step, values)`` appends a step (None and
    non-finite values skipped); ``summary(values)`` sets the run's totals (timings) in ``metrics.json``.
    A ``None`` folder logs nothing."""

    def __init__(self, folder: Path | None) -> None:
        self.folder, self._live, self._started = folder, None, False

    def start(self, resume_step: int = 0) -> None:
        if self._started:
            return
        self._started = True
        if self.folder is None:
            return
        try:
            from dvclive import Live
        except ImportError:  # a trimmed environment (a GPU image without the pipeline's extras): train anyway
            import sys

            print(f"warning: dvclive is not installed: no live log in {self.folder} (pip install dvclive)",
                  file=sys.stderr)
            return

        class _FilesOnly(Live):
            def _init_dvc(self):
                # No repository lookup (DVCLive would otherwise open, or even `dvc init`, the repository around
                # the working directory), no experiment commit, no dvc.yaml of its own: the pipeline's dvc.yaml
                # declares the plots, and a stage run by `dvc repro` must not touch the repository.
                self._save_dvc_exp = False

        self.folder.mkdir(parents=True, exist_ok=True)
        if resume_step:
            _truncate(self.folder, resume_step)
        self._live = _FilesOnly(str(self.folder), resume=bool(resume_step), save_dvc_exp=False, dvcyaml=None,
                                report=None)

    def log(self, step: int, values: dict) -> None:
        self.start()
        if self._live is None:
            return
        self._live.step = step
        for key, value in values.items():
            if isinstance(value, (int, float)) and math.isfinite(value):
                self._live.log_metric(key, value)
        self._live.next_step()

    def summary(self, values: dict) -> None:
        self.start()
        if self._live is None:
            return
        self._live.summary.update({k: v for k, v in values.items() if v is not None})
        self._live.make_summary()

    def close(self) -> None:
        if self._live is not None:
            self._live.end()
            self._live = None

    def __enter__(self) -> LiveLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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


class RowLog:
    """An in-memory live log (the benchmarks read the logged rows back): ``rows`` of ``{"step": ..., **values}``,
    training rows only (those with ``train/loss``) in ``train_rows``."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def start(self, resume_step: int = 0) -> None:
        pass

    def log(self, step: int, values: dict) -> None:
        self.rows.append({"step": step, **values})

    @property
    def train_rows(self) -> list[dict]:
        return [r for r in self.rows if "train/loss" in r]

"""A pre-training corpus and the labeled task it is scored on: after cleaning, the guard drops documents whose ``meta``
names a held-out ``package`` / ``source_package`` or whose normalised text equals a held-out one (each shard worker
asks :class:`HeldOut` for its documents); with ``tapt`` (Gururangan et al. 2020, section 5) the task's training
texts are appended unlabeled (:func:`tapt_rows`); :func:`leak_reasons` re-checks each written part for the gate."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from stages.cleaning.base import meta_dict
from stages.common.documents import doc_id, meta_json, open_parquet
from stages.config import check

TAPT_SOURCE = "task-train"
_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True, kw_only=True)
class TaskConfig:
    """The labeled task a pre-training corpus is scored on: the leakage guard and task-adaptive (TAPT) text."""

    guard: bool = False
    """Drop documents naming a held-out package or source package, or whose normalised text equals a held-out
    one (needs `--task`)."""
    tapt: bool = False
    """Append the task's training texts, unlabeled and not rewritten by the rules (TAPT, Gururangan et al. 2020;
    needs `--task`)."""
    holdout_splits: tuple[str, ...] = ("validation", "test")
    """Task splits nothing in the corpus may come from; at least one, never `train`."""

    def __post_init__(self) -> None:
        check(len(self.holdout_splits) >= 1, "holdout_splits: need at least one split")
        check("train" not in self.holdout_splits, "holdout_splits: 'train' is what TAPT reads, not held out")


def normal_text(text: str) -> str:
    """Lower-cased words (letters and digits) joined by single spaces, so near-exact copies match."""
    return " ".join(_WORD.findall(text.lower()))


class HeldOut:
    """The packages, source packages and normalised texts of the task's held-out splits."""

    def __init__(self, task, holdout_splits: tuple[str, ...]) -> None:
        held = task[task["split"].isin(holdout_splits)]
        metas = [meta_dict(m) for m in held["meta"]] if "meta" in held.columns else []
        self.packages, self.sources = ({m[key] for m in metas if m.get(key)} for key in ("package", "source_package"))
        self.texts = {normal_text(t) for t in held["text"]}
        self.examples = len(held)

    def reason(self, text: str, meta: Any) -> str:
        """Why a document leaks ('' when it does not)."""
        m = meta_dict(meta)
        for key, known, why in (("package", self.packages, "held-out package"),
                                ("source_package", self.sources, "held-out source package")):
            if m.get(key) and m[key] in known:
                return why
        return "held-out text" if normal_text(text) in self.texts else ""


def read_task(path: Path):
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no task data (run ingest@task first)")
    df = open_parquet(path).read().to_pandas()
    missing = [c for c in ("id", "text", "split") if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: not a labeled task file (no {missing[0]!r} column)")
    return df


def _stamp(path: Path) -> tuple[str, int, int]:
    """The cache key of a task file: one entry however its path is spelled (the workers get it absolute)."""
    path = Path(path).resolve()
    st = path.stat()
    return str(path), st.st_mtime_ns, st.st_size


@lru_cache(maxsize=4)
def _held_out(stamp: tuple[str, int, int], holdout_splits: tuple[str, ...]) -> HeldOut:
    return HeldOut(read_task(Path(stamp[0])), holdout_splits)


def held_out(task_path: Path, holdout_splits: tuple[str, ...]) -> HeldOut:
    """The task's held-out index, read once per process (each shard worker asks for it per shard)."""
    return _held_out(_stamp(task_path), tuple(holdout_splits))


@lru_cache(maxsize=4)
def _train_ids(stamp: tuple[str, int, int]) -> frozenset[str]:
    task = read_task(Path(stamp[0]))
    return frozenset(doc_id(t) for t in task.loc[task["split"] == "train", "text"])


def train_ids(task_path: Path) -> frozenset[str]:
    """The content ids of the task's training texts, read once per process: a shard reports which of its
    documents carry one (the TAPT texts already in the corpus)."""
    return _train_ids(_stamp(task_path))


def tapt_rows(cfg: TaskConfig, task, held: HeldOut, present: set[str]) -> list[dict]:
    """The task's training texts to append, in the task's order: each once, none already in the corpus
    (``present``: the published documents' ids among :func:`train_ids`), none equal to a held-out text."""
    rows: list[dict] = []
    seen = set(present)
    for t in task.loc[task["split"] == "train"].itertuples(index=False):
        tid = doc_id(t.text)
        if tid in seen or (cfg.guard and held.reason(t.text, None)):
            continue  # a train text equal to a held-out one (after normalisation) stays out too
        seen.add(tid)
        rows.append({"id": tid, "text": t.text, "source": TAPT_SOURCE, "url": None,
                     "meta": meta_json({"task_id": t.id, "split": "train"})})
    return rows


def leak_reasons(parquet: Path, held: HeldOut) -> list[tuple[int, str]]:
    """The gate's re-check of one written part, from the file (independently of the guard's decisions): (row,
    reason) for each document that leaks."""
    import pyarrow.parquet as pq

    table = pq.read_table(parquet, columns=["text", "meta"])
    return [(i, why) for i, (t, m) in enumerate(zip(table["text"].to_pylist(), table["meta"].to_pylist()))
            if (why := held.reason(t, m))]

"""A pre-training corpus and the labeled task it is scored on: after cleaning, the guard drops documents whose ``meta``
names a held-out ``package`` / ``source_package`` or whose normalised text equals a held-out one; with ``tapt``
(Gururangan et al. 2020, section 5) the task's training texts are appended unlabeled; :func:`leaks` re-checks."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
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


def apply(cfg: TaskConfig, parquet: Path, task_path: Path) -> dict:
    """Rewrite the cleaned ``parquet`` in place: the guard's drops, then the TAPT texts. Returns counts
    and the ids dropped (the caller removes them from the gate's per-document features)."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    task = read_task(task_path)
    held = HeldOut(task, cfg.holdout_splits)
    table = pq.read_table(parquet)
    df = table.to_pandas()
    reasons = [held.reason(t, m) for t, m in zip(df["text"], df["meta"])] if cfg.guard else [""] * len(df)
    dropped = dict(Counter(why for why in reasons if why))
    dropped_ids = {rid for rid, why in zip(df["id"], reasons) if why}
    df = df[[not why for why in reasons]] if cfg.guard else df
    rows: list[dict] = []
    if cfg.tapt:
        seen = set(df["id"])
        for t in task.loc[task["split"] == "train"].itertuples(index=False):
            tid = doc_id(t.text)
            if tid in seen or (cfg.guard and held.reason(t.text, None)):
                continue  # a train text equal to a held-out one (after normalisation) stays out too
            seen.add(tid)
            rows.append({"id": tid, "text": t.text, "source": TAPT_SOURCE, "url": None,
                         "meta": meta_json({"task_id": t.id, "split": "train"})})
        df = pd.concat([df, pd.DataFrame(rows, columns=df.columns)], ignore_index=True)
    out = pa.Table.from_pandas(df.reset_index(drop=True), schema=table.schema, preserve_index=False)
    tmp = parquet.with_suffix(".guarded.parquet")
    pq.write_table(out, tmp, compression="zstd", row_group_size=2048)
    tmp.replace(parquet)
    return {"task": str(task_path), "holdout_examples": held.examples, "guard": cfg.guard, "dropped": dropped,
            "tapt_added": len(rows), "documents_out": len(df), "dropped_ids": dropped_ids}


def leaks(parquet: Path, task_path: Path, holdout_splits: tuple[str, ...]):
    """The gate's table: one row per published document, indexed by id, with the reason it leaks
    ('' for none). Computed from the output file, independently of :func:`apply`."""
    import pandas as pd
    import pyarrow.parquet as pq

    held = HeldOut(read_task(task_path), holdout_splits)
    df = pq.read_table(parquet, columns=["id", "text", "meta"]).to_pandas()
    leak = [held.reason(t, m) for t, m in zip(df["text"], df["meta"])]
    return pd.DataFrame({"leak": leak}, index=pd.Index(df["id"].to_numpy(), name="doc"))
